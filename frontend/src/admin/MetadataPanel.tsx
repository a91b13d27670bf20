// Metadata online: a custom field on an object, or a new custom object, applied as Runtime
// domain config (no package); the CRM screens read it at once.
import { useState } from "react";
import { addField, addObject, FIELD_TYPES, fieldDefinition, objectDefinition } from "../api/admin";
import { clearMetadataCache, navItems } from "../api/crm";
import { Button, Field, useToast } from "../ui/components";
import { errorText, useAsync } from "../screens/useAsync";

export function MetadataPanel() {
  const objects = useAsync(navItems, []);
  const toast = useToast();
  const [form, setForm] = useState({ object: "", apiName: "", label: "", type: "text", length: "", layout: true });
  const [errors, setErrors] = useState<{ message?: string; fields?: Record<string, string> }>({});
  const [obj, setObj] = useState({ apiName: "", label: "", plural: "" });
  const [objError, setObjError] = useState<string>();
  const set = (key: keyof typeof form) => (e: { target: { value: string } }) => setForm({ ...form, [key]: e.target.value });
  const object = form.object || objects.data?.[0]?.objectApiName || "";

  const saveField = async () => {
    setErrors({});
    try {
      const done = await addField(object, fieldDefinition(form), form.layout);
      clearMetadataCache();
      toast(`${done.object}.${done.field} added (metadata revision ${done.metadataRevision})`);
      setForm({ ...form, apiName: "", label: "", length: "" });
    } catch (e) {
      const fields = (e as { fieldErrors?: Record<string, string> }).fieldErrors;
      setErrors({ message: errorText(e), fields });
    }
  };
  const saveObject = async () => {
    setObjError(undefined);
    try {
      const done = await addObject(objectDefinition(obj));
      clearMetadataCache();
      toast(`${done.object} created`);
      setObj({ apiName: "", label: "", plural: "" });
      objects.reload();
    } catch (e) {
      setObjError(errorText(e));
    }
  };
  return (
    <>
      <section className="card admin-section" aria-labelledby="md-field">
        <h2 id="md-field">Add a custom field</h2>
        <form className="form-grid" onSubmit={(e) => { e.preventDefault(); void saveField(); }}>
          <Field id="mf-object" label="Object" required>
            <select id="mf-object" value={object} onChange={set("object")}>
              {(objects.data ?? []).map((o) => <option key={o.objectApiName} value={o.objectApiName}>{o.label}</option>)}
            </select>
          </Field>
          <Field id="mf-label" label="Field label" required><input id="mf-label" value={form.label} required onChange={set("label")} /></Field>
          <Field id="mf-api" label="Field API name" required hint="Ends in __c (added when missing)">
            <input id="mf-api" value={form.apiName} required pattern="[A-Za-z][A-Za-z0-9_]*" onChange={set("apiName")} />
          </Field>
          <Field id="mf-type" label="Field type">
            <select id="mf-type" value={form.type} onChange={set("type")}>
              {FIELD_TYPES.map((t) => <option key={t} value={t}>{t}</option>)}
            </select>
          </Field>
          <label className="field-checkbox">
            <input type="checkbox" checked={form.layout} onChange={(e) => setForm({ ...form, layout: e.target.checked })} />
            Add to the page layout
          </label>
          <div className="actions"><Button type="submit" variant="primary">Add field</Button></div>
        </form>
        {errors.message && (
          <div className="form-error" role="alert">
            <p>{errors.message}</p>
            {errors.fields && <ul>{Object.entries(errors.fields).map(([k, v]) => <li key={k}>{k}: {v}</li>)}</ul>}
          </div>
        )}
      </section>
      <section className="card admin-section" aria-labelledby="md-object">
        <h2 id="md-object">Add a custom object</h2>
        <form className="form-grid" onSubmit={(e) => { e.preventDefault(); void saveObject(); }}>
          <Field id="mo-label" label="Object label" required><input id="mo-label" value={obj.label} required onChange={(e) => setObj({ ...obj, label: e.target.value })} /></Field>
          <Field id="mo-plural" label="Plural label"><input id="mo-plural" value={obj.plural} onChange={(e) => setObj({ ...obj, plural: e.target.value })} /></Field>
          <Field id="mo-api" label="Object API name" required hint="Ends in __c (added when missing)">
            <input id="mo-api" value={obj.apiName} required onChange={(e) => setObj({ ...obj, apiName: e.target.value })} />
          </Field>
          <div className="actions"><Button type="submit" variant="primary">Add object</Button></div>
        </form>
        {objError && <p className="form-error" role="alert">{objError}</p>}
      </section>
    </>
  );
}
