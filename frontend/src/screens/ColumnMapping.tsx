import type { Mapping } from "../api/imports";
import type { FieldInfo } from "../api/types";

/** CSV columns -> fields: one labelled select per column, "Skip" leaves the column out. */
export function ColumnMapping({
  headers, samples, fields, mapping, onChange, errors = {},
}: {
  headers: string[];
  samples: string[];
  fields: FieldInfo[];
  mapping: Mapping;
  onChange: (mapping: Mapping) => void;
  /** The server's refusal per CSV column (400 INVALID_IMPORT names the column). */
  errors?: Record<string, string>;
}) {
  const counts = new Map<string, number>();
  Object.values(mapping).forEach((f) => f && counts.set(f, (counts.get(f) ?? 0) + 1));
  return (
    <div className="table-wrap">
      <table className="table mapping">
        <caption className="sr-only">Column to field mapping</caption>
        <thead>
          <tr>
            <th scope="col">CSV column</th>
            <th scope="col">First row</th>
            <th scope="col">Field</th>
          </tr>
        </thead>
        <tbody>
          {headers.map((header, i) => {
            const target = mapping[header] ?? "";
            const twice = Boolean(target) && (counts.get(target) ?? 0) > 1;
            const refused = errors[header];
            return (
              <tr key={`${i}-${header}`}>
                <th scope="row">{header || <span className="muted">(no name)</span>}</th>
                <td className="muted sample">{samples[i] ?? ""}</td>
                <td>
                  <select
                    aria-label={`Field for column ${header}`}
                    aria-invalid={twice || Boolean(refused) || undefined}
                    value={target}
                    onChange={(e) => onChange({ ...mapping, [header]: e.target.value })}
                  >
                    <option value="">— Skip this column —</option>
                    {fields.map((f) => (
                      <option key={f.apiName} value={f.apiName}>
                        {f.label}{f.required ? " *" : ""}
                      </option>
                    ))}
                  </select>
                  {twice && <p className="field-error">Mapped from more than one column</p>}
                  {refused && !twice && <p className="field-error" role="alert">{refused}</p>}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
