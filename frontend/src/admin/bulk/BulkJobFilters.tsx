// The Bulk jobs list's filters: state, object, operation, created by (a username).
import { useId, useState } from "react";
import { BULK_OPERATIONS, BULK_STATES, type BulkJobFilter } from "../../api/bulkJobs";
import { Button, Field } from "../../ui/components";

export function BulkJobFilters({ onApply }: { onApply: (filter: BulkJobFilter) => void }) {
  const [filter, setFilter] = useState<BulkJobFilter>({});
  const id = useId();
  const set = (key: keyof BulkJobFilter, value: string) => setFilter({ ...filter, [key]: value || undefined });
  return (
    <form className="filters" aria-label="Bulk job filters" onSubmit={(e) => { e.preventDefault(); onApply(filter); }}>
      <Field id={`${id}-state`} label="State">
        <select id={`${id}-state`} value={filter.state ?? ""} onChange={(e) => set("state", e.target.value)}>
          <option value="">Any</option>
          {BULK_STATES.map((s) => <option key={s} value={s}>{s}</option>)}
        </select>
      </Field>
      <Field id={`${id}-object`} label="Object">
        <input id={`${id}-object`} value={filter.object ?? ""} onChange={(e) => set("object", e.target.value)} />
      </Field>
      <Field id={`${id}-operation`} label="Operation">
        <select id={`${id}-operation`} value={filter.operation ?? ""} onChange={(e) => set("operation", e.target.value)}>
          <option value="">Any</option>
          {BULK_OPERATIONS.map((o) => <option key={o} value={o}>{o}</option>)}
        </select>
      </Field>
      <Field id={`${id}-created-by`} label="Created by">
        <input id={`${id}-created-by`} value={filter.createdBy ?? ""} onChange={(e) => set("createdBy", e.target.value)} />
      </Field>
      <Button type="submit">Filter</Button>
    </form>
  );
}
