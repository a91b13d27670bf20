// The CRM data adapter: reads through the sfcrm UI API (docs/ui-api.md: nav-items,
// object-info, record-ui, list-ui, search; each one coarse Runtime call), writes through the
// dialect's REST endpoints. Screens use only this module.

import { appendFilters, type ListFilter } from "./filters";
import { api, json } from "./http";
import type {
  DataType, FieldInfo, FieldValue, HistoryEntry, LayoutSection, ListPage, NavItem, ObjectInfo,
  RecordData, RecordPage, RelatedList, SearchGroup,
} from "./types";

export const VERSION = "v62.0";
const BASE = `/services/data/${VERSION}`;
const UI = `${BASE}/ui-api`;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- loosely typed server JSON, read field by field and narrowed where used
type Json = Record<string, any>;

const ID = /^[a-zA-Z0-9]{15,18}$/;
function checkId(id: string): string {
  if (!ID.test(id)) throw Object.assign(new Error("This record does not exist or you cannot see it."), { status: 404 });
  return id;
}
const seg = encodeURIComponent;

// ------------------------------------------------------------------ metadata

let navCache: Promise<NavItem[]> | null = null;
const infoCache = new Map<string, Promise<ObjectInfo>>();

export function clearMetadataCache(): void {
  navCache = null;
  infoCache.clear();
}

export function navItems(): Promise<NavItem[]> {
  navCache ??= api<Json>(`${UI}/nav-items`)
    .then((body) =>
      (body.navItems as Json[]).map((o) => ({
        objectApiName: String(o.objectApiName),
        label: String(o.label),
        labelPlural: String(o.labelPlural || o.label),
        createable: Boolean(o.createable),
        defaultListViewApiName: o.defaultListViewApiName ?? null,
        listViews: (o.listViews as Json[] | undefined ?? []).map((v) => ({ apiName: v.apiName, label: v.label })),
      })),
    )
    .catch((error) => {
      navCache = null;
      throw error;
    });
  return navCache;
}

export function toFieldInfo(f: Json): FieldInfo {
  return {
    apiName: f.apiName,
    label: f.label,
    dataType: (f.dataType ?? "String") as DataType,
    required: Boolean(f.required),
    createable: Boolean(f.createable),
    updateable: Boolean(f.updateable),
    nameField: Boolean(f.nameField),
    calculated: Boolean(f.calculated) || f.nexusType === "auto_number" || f.nexusType === "formula",
    length: Number(f.length || 0),
    scale: Number(f.scale || 0),
    picklistValues: ((f.picklistValues as Json[] | null) ?? []).map((p) => ({
      value: String(p.value),
      label: String(p.label ?? p.value),
      active: p.active !== false,
    })),
    referenceTo: ((f.referenceToInfos as Json[] | null) ?? []).map((r) => String(r.apiName)),
    relationshipName: f.relationshipName ?? null,
    system: f.nexusType === "system",
    externalId: Boolean(f.externalId),
  };
}

const SYSTEM_SECTION = ["CreatedDate", "LastModifiedDate"];

export function objectInfo(name: string): Promise<ObjectInfo> {
  let cached = infoCache.get(name);
  if (!cached) {
    cached = api<Json>(`${UI}/object-info/${seg(name)}`).then((d) => {
      const fields = Object.fromEntries(
        Object.values(d.fields as Record<string, Json>).map((f) => [f.apiName, toFieldInfo(f)]),
      );
      const sections: LayoutSection[] = ((d.layout?.sections as Json[]) ?? []).map((s) => ({
        heading: String(s.heading ?? ""),
        columns: Number(s.columns ?? 2),
        fields: (s.fields as string[]) ?? [],
      }));
      if (!sections.length) {
        sections.push({ heading: "Details", columns: 2, fields: Object.keys(fields).filter((n) => !fields[n].system) });
      }
      return {
        apiName: d.apiName,
        label: d.label,
        labelPlural: d.labelPlural || d.label,
        createable: Boolean(d.createable),
        updateable: Boolean(d.updateable),
        deletable: Boolean(d.deletable),
        nameField: (d.nameFields as string[] | undefined)?.[0] ?? "Name",
        fields,
        fieldOrder: Object.keys(fields),
        childRelationships: ((d.childRelationships as Json[]) ?? []).map((c) => ({
          childObjectApiName: c.childObjectApiName,
          fieldName: c.fieldName,
          relationshipName: c.relationshipName ?? null,
        })),
        layout: { sections },
      };
    });
    cached.catch(() => infoCache.delete(name));
    infoCache.set(name, cached);
  }
  return cached;
}

// ------------------------------------------------------------------ records

function toRecord(raw: Json, access?: Json): RecordData {
  const fields: Record<string, FieldValue> = {};
  const lookups: Record<string, string> = {};
  for (const [k, v] of Object.entries((raw.fields as Record<string, Json>) ?? {})) {
    fields[k] = (v?.value ?? null) as FieldValue;
    if (v?.displayValue != null) lookups[k] = String(v.displayValue);
  }
  return {
    id: String(raw.id),
    apiName: String(raw.apiName),
    fields,
    lookups,
    access: { editable: Boolean(access?.editable), deletable: Boolean(access?.deletable) },
  };
}

export interface ListRequest {
  listView: string;
  sortBy?: { path: string; descending: boolean };
  pageToken?: string | null;
  pageSize: number;
  /** "Name contains q" (at least 2 characters to apply). */
  q?: string;
  /** The user's own filters (ANDed with the list view's). */
  filters?: ListFilter[];
}

export async function listRecords(object: string, request: ListRequest): Promise<ListPage> {
  const params = new URLSearchParams({ pageSize: String(request.pageSize) });
  if (request.pageToken) params.set("pageToken", request.pageToken);
  if (request.q && request.q.trim().length >= 2) params.set("q", request.q.trim());
  if (request.sortBy) params.set("sortBy", (request.sortBy.descending ? "-" : "") + request.sortBy.path);
  appendFilters(params, request.filters);
  const body = await api<Json>(`${UI}/list-ui/${seg(object)}/${seg(request.listView)}?${params}`);
  const info = body.info as Json;
  const page = body.records as Json;
  const ordered = (info.orderedByInfo as Json[] | undefined)?.[0];
  return {
    label: String(info.label ?? ""),
    columns: ((info.displayColumns as Json[]) ?? []).map((c) => ({
      path: String(c.fieldApiName),
      label: String(c.label),
      dataType: (c.dataType ?? "String") as DataType,
      sortable: c.sortable !== false,
    })),
    records: ((page.records as Json[]) ?? []).map((r) => toRecord(r, r.access)),
    count: Number(page.count ?? 0),
    sortBy: ordered ? { path: String(ordered.fieldApiName), descending: ordered.isAscending === false } : null,
    nextPageToken: page.nextPageToken ?? null,
    previousPageToken: page.previousPageToken ?? null,
    currentPageToken: page.currentPageToken ?? null,
    createable: Boolean(info.createable),
  };
}

/** The record, its layout, access decision, related lists and field history: one request. */
export async function recordPage(id: string): Promise<RecordPage> {
  const body = await api<Json>(`${UI}/record-ui/${checkId(id)}`);
  const key = Object.keys(body.records ?? {})[0];
  if (!key) throw Object.assign(new Error("This record does not exist or you cannot see it."), { status: 404 });
  const layout = body.layouts?.[key] as Json | undefined;
  const sections: LayoutSection[] = ((layout?.sections as Json[]) ?? []).map((s) => ({
    heading: String(s.heading ?? ""),
    columns: Number(s.columns ?? 2),
    fields: ((s.layoutRows as Json[]) ?? []).flatMap((row) =>
      ((row.layoutItems as Json[]) ?? []).map((item) => String(item.field)),
    ),
  }));
  const record = toRecord(body.records[key], body.access?.[key]);
  const system = SYSTEM_SECTION.filter((n) => n in record.fields);
  if (system.length) sections.push({ heading: "System Information", columns: 2, fields: system });
  const related: RelatedList[] = ((body.relatedLists?.[key] as Json[]) ?? []).map((r) => ({
    childObjectApiName: String(r.childObjectApiName),
    fieldName: String(r.fieldApiName),
    label: String(r.label),
    records: ((r.records as Json[]) ?? []).map((c) => ({ id: String(c.id), name: String(c.name ?? c.id) })),
    hasMore: Boolean(r.hasMore),
  }));
  const history: HistoryEntry[] = ((body.history?.[key] as Json[]) ?? []).map((h) => ({
    field: String(h.field),
    oldValue: h.oldValue ?? null,
    newValue: h.newValue ?? null,
    changedDate: String(h.changedDate ?? ""),
  }));
  return { record, sections, relatedLists: related, history };
}

export async function getRecord(id: string): Promise<RecordData> {
  return (await recordPage(id)).record;
}

export async function createRecord(object: string, values: Record<string, FieldValue>): Promise<string> {
  const body = await api<Json>(`${BASE}/sobjects/${seg(object)}`, json("POST", values));
  return String(body.id);
}

export async function updateRecord(object: string, id: string, values: Record<string, FieldValue>) {
  await api<void>(`${BASE}/sobjects/${seg(object)}/${checkId(id)}`, json("PATCH", values));
}

export async function deleteRecord(object: string, id: string): Promise<void> {
  await api<void>(`${BASE}/sobjects/${seg(object)}/${checkId(id)}`, { method: "DELETE" });
}

// ------------------------------------------------------------------ search

export async function search(term: string, object?: string, pageSize = 20): Promise<SearchGroup[]> {
  const params = new URLSearchParams({ q: term, pageSize: String(pageSize) });
  if (object) params.set("objectApiName", object);
  const [body, nav] = await Promise.all([api<Json>(`${UI}/search?${params}`), navItems()]);
  const labels = new Map(nav.map((n) => [n.objectApiName, n.labelPlural]));
  return ((body.results as Json[]) ?? []).map((g) => ({
    objectApiName: String(g.objectApiName),
    label: labels.get(String(g.objectApiName)) ?? String(g.objectApiName),
    records: ((g.records as Json[]) ?? []).map((r) => ({
      id: String(r.id),
      apiName: String(r.apiName ?? g.objectApiName),
      name: String(r.name ?? r.id),
    })),
  }));
}

/** Type-ahead for a lookup: records of `object` matching `term`. */
export async function lookupSearch(object: string, term: string): Promise<Array<{ id: string; name: string }>> {
  const trimmed = term.trim();
  if (trimmed.length < 2) return [];
  const groups = await search(trimmed, object, 8);
  return groups.flatMap((g) => g.records.map((r) => ({ id: r.id, name: r.name })));
}
