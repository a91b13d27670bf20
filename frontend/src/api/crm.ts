// The CRM data adapter over the sfcrm dialect (describe, query, search, CRUD). Screens use
// only this module; switching to the UI API endpoints (docs/ui-api.md) changes only it.

import { api, json } from "./http";
import type {
  DataType, FieldInfo, FieldValue, ListPage, NavItem, ObjectInfo, RecordData, RelatedList,
  SearchGroup,
} from "./types";

export const VERSION = "v59.0";
const BASE = `/services/data/${VERSION}`;
/** Fields every object has; shown in a record's system section, never edited. */
export const SYSTEM_FIELDS = new Set([
  "Id", "OwnerId", "CreatedDate", "CreatedById", "LastModifiedDate", "LastModifiedById",
  "SystemModstamp", "IsDeleted",
]);
const HIDDEN_FIELDS = new Set(["Id", "IsDeleted", "SystemModstamp"]);

const TYPES: Record<string, DataType> = {
  string: "String", textarea: "TextArea", email: "Email", phone: "Phone", url: "Url",
  double: "Double", int: "Int", currency: "Currency", percent: "Percent", boolean: "Boolean",
  date: "Date", datetime: "DateTime", picklist: "Picklist", multipicklist: "MultiPicklist",
  reference: "Reference", id: "Id",
};

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

export function soqlString(value: string): string {
  return "'" + value.replace(/\\/g, "\\\\").replace(/'/g, "\\'") + "'";
}

const ID = /^[a-zA-Z0-9]{15,18}$/;
function checkId(id: string): string {
  if (!ID.test(id)) throw new Error("not a record id");
  return id;
}

async function query(soql: string): Promise<Json[]> {
  const body = await api<Json>(`${BASE}/query?q=${encodeURIComponent(soql)}`);
  return (body.records as Json[]) ?? [];
}

// ------------------------------------------------------------------ metadata

let navCache: Promise<NavItem[]> | null = null;
const infoCache = new Map<string, Promise<ObjectInfo>>();

export function clearMetadataCache(): void {
  navCache = null;
  infoCache.clear();
}

export function navItems(): Promise<NavItem[]> {
  navCache ??= api<Json>(`${BASE}/sobjects`)
    .then((body) =>
      (body.sobjects as Json[])
        .filter((o) => o.queryable && o.layoutable)
        .map((o) => ({
          objectApiName: String(o.name),
          label: String(o.label),
          labelPlural: String(o.labelPlural || o.label),
          createable: Boolean(o.createable),
        })),
    )
    .catch((error) => {
      navCache = null;
      throw error;
    });
  return navCache;
}

export function toFieldInfo(f: Json): FieldInfo {
  const system = SYSTEM_FIELDS.has(f.name);
  return {
    apiName: f.name,
    label: f.label,
    dataType: TYPES[f.type] ?? "String",
    required:
      !f.nillable && Boolean(f.createable) && !f.defaultedOnCreate && f.type !== "boolean",
    createable: Boolean(f.createable) && !system,
    updateable: Boolean(f.updateable) && !system,
    nameField: Boolean(f.nameField),
    calculated: Boolean(f.calculated || f.autoNumber),
    length: Number(f.length || 0),
    scale: Number(f.scale || 0),
    picklistValues: ((f.picklistValues as Json[]) ?? []).map((p) => ({
      value: String(p.value),
      label: String(p.label ?? p.value),
      active: p.active !== false,
    })),
    referenceTo: (f.referenceTo as string[]) ?? [],
    relationshipName: f.relationshipName ?? null,
    system,
  };
}

/** A layout from the field order until the UI API's layout metadata is available. */
export function defaultLayout(info: Pick<ObjectInfo, "fields" | "fieldOrder">) {
  const own = info.fieldOrder.filter((n) => !SYSTEM_FIELDS.has(n));
  const long = own.filter((n) => info.fields[n].dataType === "TextArea");
  const sections = [{ heading: "Details", columns: 2, fields: own.filter((n) => !long.includes(n)) }];
  if (long.length) sections.push({ heading: "Description", columns: 1, fields: long });
  const system = ["CreatedDate", "LastModifiedDate"].filter((n) => info.fields[n]);
  if (system.length) sections.push({ heading: "System Information", columns: 2, fields: system });
  return { sections };
}

export function objectInfo(name: string): Promise<ObjectInfo> {
  let cached = infoCache.get(name);
  if (!cached) {
    cached = api<Json>(`${BASE}/sobjects/${encodeURIComponent(name)}/describe`).then((d) => {
      const list = (d.fields as Json[]).filter((f) => !HIDDEN_FIELDS.has(f.name));
      const fields = Object.fromEntries(list.map((f) => [f.name, toFieldInfo(f)]));
      const fieldOrder = list.map((f) => String(f.name));
      const nameField = fieldOrder.find((n) => fields[n].nameField) ?? "Name";
      const info: ObjectInfo = {
        apiName: d.name,
        label: d.label,
        labelPlural: d.labelPlural || d.label,
        createable: Boolean(d.createable),
        updateable: Boolean(d.updateable),
        deletable: Boolean(d.deletable),
        nameField,
        fields,
        fieldOrder,
        childRelationships: ((d.childRelationships as Json[]) ?? []).map((c) => ({
          childObjectApiName: c.childSObject,
          fieldName: c.field,
          relationshipName: c.relationshipName ?? null,
        })),
        layout: { sections: [] },
      };
      info.layout = defaultLayout(info);
      return info;
    });
    cached.catch(() => infoCache.delete(name));
    infoCache.set(name, cached);
  }
  return cached;
}

// ------------------------------------------------------------------ records

/** Reference fields whose target's name can be shown (not the system user references). */
function lookupPaths(info: ObjectInfo, names: string[]): Array<[string, string]> {
  return names
    .map((n) => info.fields[n])
    .filter((f) => f && f.dataType === "Reference" && !f.system && f.relationshipName)
    .map((f) => [f.apiName, `${f.relationshipName}.Name`]);
}

function toRecord(apiName: string, raw: Json, lookups: Array<[string, string]>): RecordData {
  const fields: Record<string, FieldValue> = {};
  for (const [k, v] of Object.entries(raw)) {
    if (k !== "attributes" && (v === null || typeof v !== "object")) fields[k] = v as FieldValue;
  }
  const names: Record<string, string> = {};
  for (const [field, path] of lookups) {
    const parent = raw[path.split(".")[0]];
    if (parent && typeof parent === "object" && parent.Name != null) names[field] = String(parent.Name);
  }
  return { id: String(raw.Id), apiName, fields, lookups: names };
}

export function listColumns(info: ObjectInfo): string[] {
  const candidates = info.fieldOrder.filter(
    (n) => !SYSTEM_FIELDS.has(n) && info.fields[n].dataType !== "TextArea" && n !== info.nameField,
  );
  return [info.nameField, ...candidates.slice(0, 5)];
}

export interface Sort {
  field: string;
  descending: boolean;
}

export async function listRecords(
  info: ObjectInfo, columns: string[], sort: Sort, offset: number, pageSize: number,
): Promise<ListPage> {
  const lookups = lookupPaths(info, columns);
  const select = ["Id", ...columns, ...lookups.map(([, p]) => p)];
  const order = `${sort.field} ${sort.descending ? "DESC" : "ASC"}`;
  const soql =
    `SELECT ${[...new Set(select)].join(", ")} FROM ${info.apiName} ORDER BY ${order}` +
    ` LIMIT ${pageSize + 1} OFFSET ${offset}`;
  const rows = await query(soql);
  return {
    records: rows.slice(0, pageSize).map((r) => toRecord(info.apiName, r, lookups)),
    hasMore: rows.length > pageSize,
    offset,
  };
}

export async function getRecord(info: ObjectInfo, id: string): Promise<RecordData> {
  const lookups = lookupPaths(info, info.fieldOrder);
  const select = ["Id", ...info.fieldOrder, ...lookups.map(([, p]) => p)];
  const rows = await query(
    `SELECT ${[...new Set(select)].join(", ")} FROM ${info.apiName} WHERE Id = ${soqlString(checkId(id))}`,
  );
  if (!rows.length) {
    throw Object.assign(new Error("This record does not exist or you cannot see it."), {
      status: 404,
    });
  }
  return toRecord(info.apiName, rows[0], lookups);
}

export async function relatedLists(
  info: ObjectInfo, id: string, visible: NavItem[],
): Promise<RelatedList[]> {
  const readable = new Map(visible.map((n) => [n.objectApiName, n]));
  const children = info.childRelationships.filter((c) => readable.has(c.childObjectApiName));
  return Promise.all(
    children.map(async (c) => {
      const rows = await query(
        `SELECT Id, Name FROM ${c.childObjectApiName} WHERE ${c.fieldName} = ${soqlString(checkId(id))}` +
          ` ORDER BY CreatedDate DESC LIMIT 6`,
      ).catch(() => []);
      return {
        childObjectApiName: c.childObjectApiName,
        fieldName: c.fieldName,
        label: readable.get(c.childObjectApiName)!.labelPlural,
        records: rows.slice(0, 5).map((r) => ({ id: String(r.Id), name: String(r.Name ?? r.Id) })),
        hasMore: rows.length > 5,
      };
    }),
  );
}

export async function createRecord(object: string, values: Record<string, FieldValue>): Promise<string> {
  const body = await api<Json>(`${BASE}/sobjects/${encodeURIComponent(object)}`, json("POST", values));
  return String(body.id);
}

export async function updateRecord(object: string, id: string, values: Record<string, FieldValue>) {
  await api<void>(`${BASE}/sobjects/${encodeURIComponent(object)}/${checkId(id)}`, json("PATCH", values));
}

export async function deleteRecord(object: string, id: string): Promise<void> {
  await api<void>(`${BASE}/sobjects/${encodeURIComponent(object)}/${checkId(id)}`, { method: "DELETE" });
}

// ------------------------------------------------------------------ search

export async function search(term: string, objects: string[], limit = 20): Promise<SearchGroup[]> {
  const params = new URLSearchParams({ q: term, overallLimit: String(limit) });
  if (objects.length) params.set("sobject", objects.join(","));
  const body = await api<Json>(`${BASE}/parameterizedSearch?${params}`);
  const nav = await navItems();
  const labels = new Map(nav.map((n) => [n.objectApiName, n.labelPlural]));
  const groups = new Map<string, SearchGroup>();
  for (const r of (body.searchRecords as Json[]) ?? []) {
    const type = String(r.attributes?.type ?? "");
    if (!labels.has(type)) continue;
    const group = groups.get(type) ?? { objectApiName: type, label: labels.get(type)!, records: [] };
    group.records.push({ id: String(r.Id), apiName: type, name: String(r.Name ?? r.Id) });
    groups.set(type, group);
  }
  return [...groups.values()];
}

/** Type-ahead for a lookup: records of `object` whose name starts with `term`. */
export async function lookupSearch(object: string, term: string): Promise<Array<{ id: string; name: string }>> {
  const trimmed = term.trim();
  if (trimmed.length < 2) return [];
  const groups = await search(trimmed, [object], 8);
  return groups.flatMap((g) => g.records.map((r) => ({ id: r.id, name: r.name })));
}

export async function recordName(object: string, id: string): Promise<string> {
  const rows = await query(`SELECT Id, Name FROM ${object} WHERE Id = ${soqlString(checkId(id))}`);
  return rows.length ? String(rows[0].Name ?? id) : id;
}
