// Lays a record out from layout metadata: sections with a heading and 1-2 columns of fields.
// View mode shows values (lookups link to their record); form mode shows one input per
// editable field. No per-object code: everything comes from ObjectInfo + the layout.
import type { FieldInfo, FieldValue, LayoutSection, ObjectInfo } from "../api/types";
import { FieldInput, type LookupSearch } from "../fields/FieldInput";
import { displayValue } from "../fields/format";
import { paths } from "../router";
import { Link } from "../ui/components";

interface Common {
  info: ObjectInfo;
  sections: LayoutSection[];
  lookups?: Record<string, string>;
}

interface ViewProps extends Common {
  mode: "view";
  values: Record<string, FieldValue>;
}

interface FormProps extends Common {
  mode: "create" | "edit";
  values: Record<string, FieldValue>;
  errors?: Record<string, string>;
  onChange: (field: string, value: FieldValue) => void;
  search?: LookupSearch;
}

export function formFields(info: ObjectInfo, section: LayoutSection, mode: "create" | "edit"): FieldInfo[] {
  return section.fields
    .map((name) => info.fields[name])
    .filter((f): f is FieldInfo => Boolean(f) && !f.calculated && (mode === "create" ? f.createable : f.updateable));
}

export function LayoutRenderer(props: ViewProps | FormProps) {
  const { info, sections, lookups = {} } = props;
  return (
    <div className="layout">
      {sections.map((section, index) => {
        const headingId = `section-${index}`;
        const cls = `layout-grid cols-${Math.min(Math.max(section.columns, 1), 2)}`;
        if (props.mode === "view") {
          const fields = section.fields.map((n) => info.fields[n]).filter(Boolean);
          if (!fields.length) return null;
          return (
            <section key={section.heading + index} className="layout-section" aria-labelledby={headingId}>
              <h3 id={headingId}>{section.heading}</h3>
              <dl className={cls}>
                {fields.map((f) => (
                  <div key={f.apiName} className="layout-item" data-field={f.apiName}>
                    <dt>{f.label}</dt>
                    <dd>
                      <ViewValue field={f} value={props.values[f.apiName] ?? null} name={lookups[f.apiName]} />
                    </dd>
                  </div>
                ))}
              </dl>
            </section>
          );
        }
        const fields = formFields(info, section, props.mode);
        if (!fields.length) return null;
        return (
          <fieldset key={section.heading + index} className="layout-section">
            <legend>{section.heading}</legend>
            <div className={cls}>
              {fields.map((f) => (
                <FieldInput
                  key={f.apiName} field={f} value={props.values[f.apiName] ?? null}
                  onChange={(v) => props.onChange(f.apiName, v)} error={props.errors?.[f.apiName]}
                  lookupName={lookups[f.apiName]} search={props.search}
                />
              ))}
            </div>
          </fieldset>
        );
      })}
    </div>
  );
}

function ViewValue({ field, value, name }: { field: FieldInfo; value: FieldValue; name?: string }) {
  const text = displayValue(field, value, name);
  if (!text) return <span className="muted" aria-label="empty">—</span>;
  if (field.dataType === "Reference" && typeof value === "string" && field.referenceTo.length === 1 && !field.system) {
    return <Link href={paths.record(field.referenceTo[0], value)}>{text}</Link>;
  }
  if (field.dataType === "Email") return <a href={`mailto:${text}`}>{text}</a>;
  if (field.dataType === "Url" && /^https?:\/\//i.test(text)) {
    return <a href={text} target="_blank" rel="noopener noreferrer">{text}</a>;
  }
  return <span className={field.dataType === "TextArea" ? "pre" : undefined}>{text}</span>;
}
