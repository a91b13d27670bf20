import { useEffect, useState } from "react";
import { getRecord, listRecords, navItems, objectInfo } from "../api/crm";
import type { FieldInfo, NavItem, ObjectInfo, RecordData } from "../api/types";
import { displayValue } from "../fields/format";
import { filtersFromSearch, searchWithFilters, type ListFilter } from "../api/filters";
import { navigate, paths, usePath } from "../router";
import { Button, EmptyState, ErrorState, Link, Spinner, Table, useToast, type Column } from "../ui/components";
import { exportListView, saveFile } from "../api/imports";
import { FilterPanel } from "./FilterPanel";
import { ImportDialog } from "./ImportDialog";
import { RecycleBin } from "./RecycleBin";
import { RecordForm } from "./RecordForm";
import { errorText, useAsync } from "./useAsync";

const PAGE_SIZE = 25;
const RECENT = "__Recent";

export function ListScreen({ object, view }: { object: string; view: string | null }) {
  const meta = useAsync(() => Promise.all([objectInfo(object), navItems()]), [object]);
  const search = usePath().split("?")[1] ?? "";
  if (meta.error) return <ErrorState message={meta.error} onRetry={meta.reload} />;
  if (!meta.data) return <Spinner />;
  const [info, nav] = meta.data;
  const item = nav.find((n) => n.objectApiName === object);
  const listView = view ?? item?.defaultListViewApiName ?? RECENT;
  // the filters live in the URL: a reload or Back keeps them
  const filters = filtersFromSearch(search);
  const setFilters = (next: ListFilter[]) =>
    navigate(`${paths.list(info.apiName)}${searchWithFilters(search, next)}`);
  return <ListView key={listView} info={info} item={item} listView={listView} filters={filters} onFilters={setFilters} />;
}

function columnField(info: ObjectInfo, path: string, dataType: FieldInfo["dataType"], label: string): FieldInfo {
  return info.fields[path] ?? {
    apiName: path, label, dataType, required: false, createable: false, updateable: false, nameField: false,
    calculated: true, length: 0, scale: 0, picklistValues: [], referenceTo: [], relationshipName: null, system: false,
  };
}

function ListView({
  info, item, listView, filters, onFilters,
}: { info: ObjectInfo; item?: NavItem; listView: string; filters: ListFilter[]; onFilters: (f: ListFilter[]) => void }) {
  const [sortBy, setSortBy] = useState<{ path: string; descending: boolean }>();
  const [pageToken, setPageToken] = useState<string | null>(null);
  const [editing, setEditing] = useState<RecordData | null>(null);
  const [creating, setCreating] = useState(false);
  const [filterText, setFilterText] = useState("");
  const [q, setQ] = useState("");
  const [importing, setImporting] = useState(false);
  const [exporting, setExporting] = useState(false);
  const [binOpen, setBinOpen] = useState(false);
  const toast = useToast();
  useEffect(() => {
    const timer = setTimeout(() => {
      setQ(filterText.trim().length >= 2 ? filterText.trim() : "");
      setPageToken(null);
    }, 300);
    return () => clearTimeout(timer);
  }, [filterText]);
  const filterKey = JSON.stringify(filters);
  useEffect(() => setPageToken(null), [filterKey]); // a changed filter starts at page one
  const page = useAsync(
    () => listRecords(info.apiName, { listView, sortBy, pageToken, pageSize: PAGE_SIZE, q, filters }),
    [info.apiName, listView, sortBy?.path, sortBy?.descending, pageToken, q, filterKey],
  );
  const views = item?.listViews ?? [];
  const title = page.data?.label || (listView === RECENT ? `Recent ${info.labelPlural}` : info.labelPlural);
  const sort = sortBy ?? page.data?.sortBy ?? undefined;

  const tableColumns: Column<RecordData>[] = (page.data?.columns ?? []).map((c) => {
    const field = columnField(info, c.path, c.dataType, c.label);
    return {
      key: c.path,
      label: c.label,
      sortable: c.sortable,
      render: (row) =>
        c.path === info.nameField ? (
          <Link href={paths.record(info.apiName, row.id)}>{String(row.fields[c.path] ?? row.id)}</Link>
        ) : (
          displayValue(field, row.fields[c.path] ?? null, row.lookups[c.path])
        ),
    };
  });

  const start = page.data ? Number(page.data.currentPageToken ?? 0) : 0;
  return (
    <section aria-labelledby="list-title">
      <div className="page-header">
        <div>
          <p className="eyebrow">{info.labelPlural}</p>
          <h1 id="list-title">{title}</h1>
        </div>
        <div className="actions">
          <label className="inline-field">
            <span>Filter</span>
            <input type="search" placeholder="Name contains…" value={filterText}
              onChange={(e) => setFilterText(e.target.value)} />
          </label>
          {views.length > 1 && (
            <label className="inline-field">
              <span>List view</span>
              <select value={listView} onChange={(e) => navigate(`${paths.list(info.apiName)}?view=${encodeURIComponent(e.target.value)}`)}>
                {views.map((v) => <option key={v.apiName} value={v.apiName}>{v.label}</option>)}
              </select>
            </label>
          )}
          <Button
            disabled={exporting}
            onClick={() => {
              setExporting(true);
              exportListView(info.apiName, { listView, sortBy, q, filters })
                .then((file) => saveFile(file, `${title}.csv`), (e) => toast(errorText(e), "error"))
                .finally(() => setExporting(false));
            }}
          >
            {exporting ? "Exporting…" : "Export"}
          </Button>
          {info.createable && <Button onClick={() => setImporting(true)}>Import</Button>}
          {info.deletable && <Button onClick={() => setBinOpen(true)}>Recycle bin</Button>}
          {info.createable && <Button variant="primary" onClick={() => setCreating(true)}>New</Button>}
        </div>
      </div>
      <FilterPanel info={info} filters={filters} onChange={onFilters} />
      {page.error && <ErrorState message={page.error} onRetry={page.reload} />}
      {!page.error && !page.data && <Spinner />}
      {page.data && page.data.records.length === 0 && !pageToken && (
        <EmptyState title={q ? `No ${info.labelPlural.toLowerCase()} match “${q}”` : filters.length ? `No ${info.labelPlural.toLowerCase()} match these filters` : `No ${info.labelPlural.toLowerCase()} to show`}>
          {info.createable && <Button variant="primary" onClick={() => setCreating(true)}>New {info.label}</Button>}
        </EmptyState>
      )}
      {page.data && page.data.records.length > 0 && (
        <div className={page.loading ? "is-loading" : undefined} aria-busy={page.loading}>
          <Table
            caption={`${title}${sort ? `, sorted by ${page.data.columns.find((c) => c.path === sort.path)?.label ?? sort.path}` : ""}`}
            columns={tableColumns}
            rows={page.data.records}
            sort={sort ? { key: sort.path, descending: sort.descending } : undefined}
            onSort={(key) => {
              setPageToken(null);
              setSortBy({ path: key, descending: sort?.path === key ? !sort.descending : false });
            }}
            actions={(row) =>
              row.access.editable ? (
                <Button
                  variant="ghost"
                  aria-label={`Edit ${String(row.fields[info.nameField] ?? row.id)}`}
                  onClick={() => getRecord(row.id).then(setEditing, (e) => toast(errorText(e), "error"))}
                >
                  Edit
                </Button>
              ) : null
            }
          />
          <nav className="pager" aria-label="Pages">
            <Button disabled={!page.data.previousPageToken && !pageToken} onClick={() => setPageToken(page.data!.previousPageToken)}>
              Previous
            </Button>
            <span aria-live="polite">
              {Number.isFinite(start) ? `${start + 1}–${start + page.data.records.length} of ${page.data.count}` : `${page.data.count} records`}
            </span>
            <Button disabled={!page.data.nextPageToken} onClick={() => setPageToken(page.data!.nextPageToken)}>Next</Button>
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
      {binOpen && <RecycleBin info={info} onClose={() => setBinOpen(false)} onRestored={page.reload} />}
      {importing && <ImportDialog info={info} onClose={() => setImporting(false)} onDone={page.reload} />}
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
