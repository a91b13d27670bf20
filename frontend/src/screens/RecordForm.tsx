// Create or edit any object's record in a modal, laid out from its layout metadata.
import { useState, type FormEvent } from "react";
import { createRecord, lookupSearch, updateRecord } from "../api/crm";
import { ApiError } from "../api/http";
import type { FieldValue, ObjectInfo, RecordData } from "../api/types";
import { formFields, LayoutRenderer } from "../layout/LayoutRenderer";
import { Button, Modal } from "../ui/components";
import { errorText } from "./useAsync";

export function RecordForm({
  info, record, defaults = {}, defaultNames = {}, onClose, onSaved,
}: {
  info: ObjectInfo;
  record?: RecordData;
  defaults?: Record<string, FieldValue>;
  defaultNames?: Record<string, string>;
  onClose: () => void;
  onSaved: (id: string) => void;
}) {
  const mode = record ? "edit" : "create";
  const [values, setValues] = useState<Record<string, FieldValue>>({ ...defaults, ...(record?.fields ?? {}) });
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [formError, setFormError] = useState<string>();
  const [saving, setSaving] = useState(false);
  const sections = info.layout.sections;
  const editable = sections.flatMap((s) => formFields(info, s, mode));

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    const missing = Object.fromEntries(
      editable.filter((f) => f.required && (values[f.apiName] == null || values[f.apiName] === ""))
        .map((f) => [f.apiName, "Complete this field."]),
    );
    if (Object.keys(missing).length) {
      setErrors(missing);
      setFormError("Some fields need your attention.");
      return;
    }
    const changed: Record<string, FieldValue> = {};
    for (const f of editable) {
      const value = values[f.apiName] ?? null;
      if (mode === "create" ? value !== null : value !== (record!.fields[f.apiName] ?? null)) changed[f.apiName] = value;
    }
    setSaving(true);
    setErrors({});
    setFormError(undefined);
    try {
      if (mode === "create") onSaved(await createRecord(info.apiName, changed));
      else {
        if (Object.keys(changed).length) await updateRecord(info.apiName, record!.id, changed);
        onSaved(record!.id);
      }
    } catch (error) {
      if (error instanceof ApiError) {
        const known = Object.fromEntries(Object.entries(error.fieldErrors).filter(([k]) => info.fields[k]));
        setErrors(known);
        const unplaced = Object.keys(error.fieldErrors).length > Object.keys(known).length;
        setFormError(
          Object.keys(known).length && !unplaced ? "Review the errors on this page." : error.message,
        );
      } else {
        setFormError(errorText(error));
      }
    } finally {
      setSaving(false);
    }
  };

  const title = mode === "create" ? `New ${info.label}` : `Edit ${String(record!.fields[info.nameField] ?? info.label)}`;
  return (
    <Modal
      title={title}
      onClose={onClose}
      footer={
        <>
          <Button onClick={onClose}>Cancel</Button>
          <Button variant="primary" type="submit" form="record-form" disabled={saving}>
            {saving ? "Saving…" : "Save"}
          </Button>
        </>
      }
    >
      <form id="record-form" onSubmit={submit} noValidate>
        {formError && <div className="form-error" role="alert">{formError}</div>}
        <LayoutRenderer
          mode={mode} info={info} sections={sections} values={values} errors={errors}
          lookups={{ ...defaultNames, ...(record?.lookups ?? {}) }} search={lookupSearch}
          onChange={(field, value) => {
            setValues((v) => ({ ...v, [field]: value }));
            setErrors((e) => {
              const rest = { ...e };
              delete rest[field];
              return rest;
            });
          }}
        />
      </form>
    </Modal>
  );
}
