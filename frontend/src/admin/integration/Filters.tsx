// A filter form of text fields, one per key; applying it hands the filter to the list.
import { useId, useState } from "react";
import { Button, Field } from "../../ui/components";

export function Filters<K extends string>({ label, keys, names, onApply }: {
  label: string;
  keys: readonly K[];
  names: Partial<Record<K, string>>;
  onApply: (filter: Partial<Record<K, string>>) => void;
}) {
  const [filter, setFilter] = useState<Partial<Record<K, string>>>({});
  const id = useId();
  return (
    <form
      className="filters"
      aria-label={label}
      onSubmit={(e) => { e.preventDefault(); onApply(filter); }}
    >
      {keys.map((key) => (
        <Field key={key} id={`${id}-${key}`} label={names[key] ?? key[0].toUpperCase() + key.slice(1)}>
          <input id={`${id}-${key}`} value={filter[key] ?? ""} onChange={(e) => setFilter({ ...filter, [key]: e.target.value })} />
        </Field>
      ))}
      <Button type="submit">Filter</Button>
    </form>
  );
}
