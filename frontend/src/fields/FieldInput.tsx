// One labelled input per field type; the server's validation error is shown on its field.
import { useEffect, useId, useRef, useState } from "react";
import type { FieldInfo, FieldValue } from "../api/types";
import { Field } from "../ui/components";
import { fromLocalInput, parseInput, toLocalInput } from "./format";

export type LookupSearch = (object: string, term: string) => Promise<Array<{ id: string; name: string }>>;

export interface FieldInputProps {
  field: FieldInfo;
  value: FieldValue;
  onChange: (value: FieldValue) => void;
  error?: string;
  lookupName?: string;
  search?: LookupSearch;
}

const TEXT_TYPES: Record<string, string> = { Email: "email", Phone: "tel", Url: "url", String: "text" };

export function FieldInput({ field, value, onChange, error, lookupName, search }: FieldInputProps) {
  const id = useId();
  const described = error ? `${id}-error` : undefined;
  const common = {
    id,
    name: field.apiName,
    required: field.required,
    "aria-invalid": error ? true : undefined,
    "aria-describedby": described,
  };
  let control;
  let hint: string | undefined;
  switch (field.dataType) {
    case "Boolean":
      return (
        <div className={`field field-checkbox${error ? " field-invalid" : ""}`}>
          <input
            type="checkbox" id={id} name={field.apiName} checked={value === true}
            aria-describedby={described} onChange={(e) => onChange(e.target.checked)}
          />
          <label htmlFor={id} className="field-label">{field.label}</label>
          {error && <p className="field-error" id={`${id}-error`} role="alert">{error}</p>}
        </div>
      );
    case "TextArea":
      control = (
        <textarea {...common} rows={4} maxLength={field.length || undefined}
          value={value == null ? "" : String(value)} onChange={(e) => onChange(e.target.value || null)} />
      );
      break;
    case "Double":
    case "Int":
    case "Currency":
    case "Percent":
      hint = field.dataType === "Currency" ? "Amount" : field.dataType === "Percent" ? "Percent (0-100)" : undefined;
      control = (
        <input {...common} type="number" inputMode="decimal"
          step={field.dataType === "Int" ? 1 : field.scale ? Math.pow(10, -field.scale) : "any"}
          value={value == null ? "" : String(value)} onChange={(e) => onChange(parseInput(field, e.target.value))} />
      );
      break;
    case "Date":
      control = (
        <input {...common} type="date" value={value == null ? "" : String(value).slice(0, 10)}
          onChange={(e) => onChange(e.target.value || null)} />
      );
      break;
    case "DateTime":
      control = (
        <input {...common} type="datetime-local" value={toLocalInput(value)}
          onChange={(e) => onChange(fromLocalInput(e.target.value))} />
      );
      break;
    case "Picklist":
      control = (
        <select {...common} value={value == null ? "" : String(value)} onChange={(e) => onChange(e.target.value || null)}>
          <option value="">--None--</option>
          {field.picklistValues.filter((p) => p.active || p.value === value).map((p) => (
            <option key={p.value} value={p.value}>{p.label}</option>
          ))}
        </select>
      );
      break;
    case "MultiPicklist": {
      const chosen = new Set(value ? String(value).split(";") : []);
      control = (
        <select {...common} multiple value={[...chosen]}
          onChange={(e) => onChange([...e.target.selectedOptions].map((o) => o.value).join(";") || null)}>
          {field.picklistValues.filter((p) => p.active).map((p) => (
            <option key={p.value} value={p.value}>{p.label}</option>
          ))}
        </select>
      );
      break;
    }
    case "Reference":
      control = (
        <LookupInput id={id} field={field} value={value} name={lookupName} onChange={onChange}
          search={search} invalid={Boolean(error)} describedBy={described} />
      );
      break;
    default:
      control = (
        <input {...common} type={TEXT_TYPES[field.dataType] ?? "text"} maxLength={field.length || undefined}
          autoComplete="off" value={value == null ? "" : String(value)}
          onChange={(e) => onChange(e.target.value === "" ? null : e.target.value)} />
      );
  }
  return (
    <Field id={id} label={field.label} error={error} hint={hint} required={field.required}>
      {control}
    </Field>
  );
}

function LookupInput({
  id, field, value, name, onChange, search, invalid, describedBy,
}: {
  id: string; field: FieldInfo; value: FieldValue; name?: string; onChange: (v: FieldValue) => void;
  search?: LookupSearch; invalid: boolean; describedBy?: string;
}) {
  const [text, setText] = useState(name ?? (value ? String(value) : ""));
  const [options, setOptions] = useState<Array<{ id: string; name: string }>>([]);
  const [open, setOpen] = useState(false);
  const [active, setActive] = useState(0);
  const [status, setStatus] = useState("");
  const timer = useRef<ReturnType<typeof setTimeout>>();
  const target = field.referenceTo[0];
  const listId = `${id}-options`;

  useEffect(() => setText(name ?? (value ? String(value) : "")), [name, value]);

  const lookFor = (term: string) => {
    setText(term);
    if (value) onChange(null);
    clearTimeout(timer.current);
    if (!search || term.trim().length < 2) {
      setOptions([]);
      setOpen(false);
      return;
    }
    timer.current = setTimeout(() => {
      setStatus("Searching…");
      search(target, term)
        .then((found) => {
          setOptions(found);
          setActive(0);
          setOpen(true);
          setStatus(found.length ? `${found.length} results` : "No matches");
        })
        .catch(() => setStatus("Search failed"));
    }, 200);
  };

  const choose = (option: { id: string; name: string }) => {
    onChange(option.id);
    setText(option.name);
    setOpen(false);
    setStatus("");
  };

  return (
    <div className="lookup">
      <input
        id={id} name={field.apiName} type="text" role="combobox" autoComplete="off"
        aria-autocomplete="list" aria-expanded={open} aria-controls={listId}
        aria-activedescendant={open && options[active] ? `${listId}-${active}` : undefined}
        aria-invalid={invalid || undefined} aria-describedby={describedBy} required={field.required}
        placeholder={`Search ${target ?? ""}…`} value={text}
        onChange={(e) => lookFor(e.target.value)}
        onKeyDown={(e) => {
          if (!open) return;
          if (e.key === "ArrowDown") { setActive((a) => Math.min(a + 1, options.length - 1)); e.preventDefault(); }
          if (e.key === "ArrowUp") { setActive((a) => Math.max(a - 1, 0)); e.preventDefault(); }
          if (e.key === "Enter" && options[active]) { choose(options[active]); e.preventDefault(); }
          if (e.key === "Escape") { setOpen(false); e.stopPropagation(); }
        }}
        onBlur={() => setTimeout(() => setOpen(false), 150)}
      />
      {open && (
        <ul className="lookup-options" role="listbox" id={listId} aria-label={`${field.label} results`}>
          {options.length === 0 && <li className="lookup-empty" role="presentation">No matches</li>}
          {options.map((o, i) => (
            <li key={o.id} id={`${listId}-${i}`} role="option" aria-selected={i === active}
              className={i === active ? "active" : ""} onMouseDown={(e) => { e.preventDefault(); choose(o); }}>
              {o.name}
            </li>
          ))}
        </ul>
      )}
      <span className="sr-only" aria-live="polite">{status}</span>
    </div>
  );
}
