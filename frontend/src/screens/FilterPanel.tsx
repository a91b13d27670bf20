// The list screen's filter panel: the filters in force as removable chips, and a small form
// to add one (field, then an operator for its type, then a value input for its type).
import { useId, useState, type FormEvent } from "react";
import { lookupSearch } from "../api/crm";
import {
  MAX_FILTERS, OPERATOR_LABELS, describeFilter, filterableFields, operatorsFor, type ListFilter,
} from "../api/filters";
import type { FieldValue, ObjectInfo } from "../api/types";
import { FieldInput } from "../fields/FieldInput";
import { Button } from "../ui/components";

export function FilterPanel({
  info, filters, onChange,
}: { info: ObjectInfo; filters: ListFilter[]; onChange: (filters: ListFilter[]) => void }) {
  const [adding, setAdding] = useState(false);
  return (
    <div className="filter-panel">
      {filters.length > 0 && (
        <ul className="filter-chips" aria-label="Filters">
          {filters.map((f, i) => {
            const text = describeFilter(f, info);
            return (
              <li key={`${i}-${f.field}`} className="filter-chip">
                <span>{text}</span>
                <button type="button" className="filter-chip-remove" aria-label={`Remove filter ${text}`}
                  onClick={() => onChange(filters.filter((_, j) => j !== i))}>×</button>
              </li>
            );
          })}
        </ul>
      )}
      {adding ? (
        <AddFilter info={info} onCancel={() => setAdding(false)}
          onAdd={(f) => { setAdding(false); onChange([...filters, f]); }} />
      ) : (
        <Button disabled={filters.length >= MAX_FILTERS} onClick={() => setAdding(true)}>Add filter</Button>
      )}
    </div>
  );
}

function AddFilter({
  info, onAdd, onCancel,
}: { info: ObjectInfo; onAdd: (f: ListFilter) => void; onCancel: () => void }) {
  const id = useId();
  const fields = filterableFields(info);
  const [fieldName, setFieldName] = useState(fields[0]?.apiName ?? "");
  const field = info.fields[fieldName];
  const operators = field ? operatorsFor(field) : [];
  const [operator, setOperator] = useState(operators[0] ?? "equals");
  const [value, setValue] = useState<FieldValue>(null);
  const [chosen, setChosen] = useState<string[]>([]);
  const pickField = (name: string) => {
    setFieldName(name);
    const next = info.fields[name];
    setOperator(next ? operatorsFor(next)[0] : "equals");
    setValue(next?.dataType === "Boolean" ? false : null);
    setChosen([]);
  };
  const values = operator === "in" ? chosen : field?.dataType === "Boolean" ? [String(value === true)]
    : value == null || value === "" ? [] : [String(value)];
  const submit = (event: FormEvent) => {
    event.preventDefault();
    if (field && values.length > 0) onAdd({ field: field.apiName, operator, values });
  };
  return (
    <form className="filter-form" aria-label="Add filter" onSubmit={submit}>
      <label className="inline-field" htmlFor={`${id}-field`}>
        <span>Field</span>
        <select id={`${id}-field`} value={fieldName} onChange={(e) => pickField(e.target.value)}>
          {fields.map((f) => <option key={f.apiName} value={f.apiName}>{f.label}</option>)}
        </select>
      </label>
      <label className="inline-field" htmlFor={`${id}-operator`}>
        <span>Operator</span>
        <select id={`${id}-operator`} value={operator} onChange={(e) => { setOperator(e.target.value); setChosen([]); }}>
          {operators.map((o) => <option key={o} value={o}>{OPERATOR_LABELS[o] ?? o}</option>)}
        </select>
      </label>
      {field && operator === "in" ? (
        <label className="inline-field" htmlFor={`${id}-values`}>
          <span>Values</span>
          <select id={`${id}-values`} multiple value={chosen}
            onChange={(e) => setChosen([...e.target.selectedOptions].map((o) => o.value))}>
            {field.picklistValues.filter((p) => p.active).map((p) => (
              <option key={p.value} value={p.value}>{p.label}</option>
            ))}
          </select>
        </label>
      ) : field ? (
        <FieldInput key={field.apiName}
          field={{ ...field, required: false, label: field.dataType === "Boolean" ? field.label : "Value" }}
          value={value} onChange={setValue} search={lookupSearch} />
      ) : null}
      <Button type="submit" variant="primary" disabled={values.length === 0}>Apply</Button>
      <Button onClick={onCancel}>Cancel</Button>
    </form>
  );
}
