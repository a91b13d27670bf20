import { useState } from "react";
import { getRecord, listColumns, listRecords, objectInfo, type Sort } from "../api/crm";
import type { ObjectInfo, RecordData } from "../api/types";
import { displayValue } from "../fields/format";
import { navigate, paths } from "../router";
import { Button, EmptyState, ErrorState, Link, Spinner, Table, useToast, type Column } from "../ui/components";
import { RecordForm } from "./RecordForm";
import { errorText, useAsync } from "./useAsync";

const PAGE_SIZE = 25;

export function ListScreen({ object }: { object: string }) {
  const info = useAsync(() => objectInfo(object), [object]);
  if (info.error) return <ErrorState message={info.error} onRetry={info.reload} />;
  if (!info.data) return <Spinner />;
  return <ListView info={info.data} />;
}

function ListView({ info }: { info: ObjectInfo }) {
  const columns = listColumns(info);
  const [sort, setSort] = useState<Sort>({ field: info.nameField, descending: false });
  const [offset, setOffset] = useState(0);
  const [editing, setEditing] = useState<RecordData | null>(null);
  const [creating, setCreating] = useState(false);
  const toast = useToast();
  const page = useAsync(
    () => listRecords(info, columns, sort, offset, PAGE_SIZE),
    [info.apiName, sort.field, sort.descending, offset],
  );

  const tableColumns: Column<RecordData>[] = columns.map((name) => {
    const field = info.fields[name];
    return {
      key: name,
      label: field.label,
      sortable: !["TextArea", "MultiPicklist"].includes(field.dataType),
      render: (row) =>
        name === info.nameField ? (
          <Link href={paths.record(info.apiName, row.id)}>{String(row.fields[name] ?? row.id)}</Link>
        ) : (
          displayValue(field, row.fields[name] ?? null, row.lookups[name])
        ),
    };
  });

  return (
    <section aria-labelledby="list-title">
      <div className="page-header">
        <div>
          <p className="eyebrow">{info.labelPlural}</p>
          <h1 id="list-title">All {info.labelPlural}</h1>
        </div>
        {info.createable && <Button variant="primary" onClick={() => setCreating(true)}>New</Button>}
      </div>
      {page.error && <ErrorState message={page.error} onRetry={page.reload} />}
      {!page.error && !page.data && <Spinner />}
      {page.data && page.data.records.length === 0 && offset === 0 && (
        <EmptyState title={`No ${info.labelPlural.toLowerCase()} yet`}>
          {info.createable && <Button variant="primary" onClick={() => setCreating(true)}>New {info.label}</Button>}
        </EmptyState>
      )}
      {page.data && page.data.records.length > 0 && (
        <div className={page.loading ? "is-loading" : undefined} aria-busy={page.loading}>
          <Table
            caption={`${info.labelPlural}, sorted by ${info.fields[sort.field]?.label ?? sort.field}`}
            columns={tableColumns}
            rows={page.data.records}
            sort={{ key: sort.field, descending: sort.descending }}
            onSort={(key) => {
              setOffset(0);
              setSort((s) => ({ field: key, descending: s.field === key ? !s.descending : false }));
            }}
            actions={
              info.updateable
                ? (row) => (
                    <Button variant="ghost" aria-label={`Edit ${String(row.fields[info.nameField] ?? row.id)}`} onClick={() => getRecord(info, row.id).then(setEditing, (e) => toast(errorText(e), "error"))}>
                      Edit
                    </Button>
                  )
                : undefined
            }
          />
          <nav className="pager" aria-label="Pages">
            <Button disabled={offset === 0} onClick={() => setOffset(Math.max(0, offset - PAGE_SIZE))}>Previous</Button>
            <span aria-live="polite">
              {offset + 1}–{offset + page.data.records.length}
            </span>
            <Button disabled={!page.data.hasMore} onClick={() => setOffset(offset + PAGE_SIZE)}>Next</Button>
          </nav>
        </div>
      )}
      {creating && (
        <RecordForm
          info={info}
          onClose={() => setCreating(false)}
          onSaved={(id) => {
            setCreating(false);
            toast(`${info.label} created`);
            navigate(paths.record(info.apiName, id));
          }}
        />
      )}
      {editing && (
        <RecordForm
          info={info}
          record={editing}
          onClose={() => setEditing(null)}
          onSaved={() => {
            setEditing(null);
            toast(`${info.label} saved`);
            page.reload();
          }}
        />
      )}
    </section>
  );
}
