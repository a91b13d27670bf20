// CSV import and export through the sfcrm UI API (docs/ui-api.md): `POST ui-api/imports` runs
// as a Runtime job; the screen polls `GET ui-api/imports/{id}` and downloads the error report;
// `list-ui/{object}/{view}/export` is the list view as CSV.

import { VERSION, type ListRequest } from "./crm";
import { appendFilters } from "./filters";
import { api, download, json } from "./http";
import type { FieldInfo } from "./types";

const UI = `/services/data/${VERSION}/ui-api`;
const seg = encodeURIComponent;

export type ImportOperation = "insert" | "upsert";
export type ImportState = "queued" | "running" | "done" | "failed";

export interface ImportJob {
  id: string;
  objectApiName: string;
  operation: ImportOperation;
  state: ImportState;
  total: number;
  processed: number;
  succeeded: number;
  failed: number;
  error: string | null;
}

/** CSV column -> field API name; "" skips the column. */
export type Mapping = Record<string, string>;

export function startImport(request: {
  objectApiName: string;
  operation: ImportOperation;
  externalIdFieldName: string | null;
  mapping: Mapping;
  csv: string;
}): Promise<ImportJob> {
  return api<ImportJob>(`${UI}/imports`, json("POST", request));
}

export function importStatus(id: string): Promise<ImportJob> {
  return api<ImportJob>(`${UI}/imports/${seg(id)}`);
}

export const finished = (job: ImportJob) => job.state === "done" || job.state === "failed";

export function importErrors(id: string) {
  return download(`${UI}/imports/${seg(id)}/errors`);
}

export function exportListView(object: string, request: Pick<ListRequest, "listView" | "sortBy" | "q" | "filters">) {
  const params = new URLSearchParams();
  if (request.q && request.q.trim().length >= 2) params.set("q", request.q.trim());
  if (request.sortBy) params.set("sortBy", (request.sortBy.descending ? "-" : "") + request.sortBy.path);
  appendFilters(params, request.filters);
  const query = params.toString() ? `?${params}` : "";
  return download(`${UI}/list-ui/${seg(object)}/${seg(request.listView)}/export${query}`);
}

/** Hand a downloaded file to the browser (a transient object URL, never stored). */
export function saveFile(file: { blob: Blob; filename: string | null }, fallback: string): void {
  const url = URL.createObjectURL(file.blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = file.filename ?? fallback;
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

// ------------------------------------------------------------------ the file, in the browser

/** The first `rows` records of a CSV text (RFC 4180 quoting; a leading BOM is dropped). */
export function parseCsv(text: string, rows = 2): string[][] {
  const out: string[][] = [];
  let record: string[] = [];
  let cell = "";
  let quoted = false;
  const source = text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  for (let i = 0; i < source.length && out.length < rows; i++) {
    const ch = source[i];
    if (quoted) {
      if (ch === '"' && source[i + 1] === '"') { cell += '"'; i++; }
      else if (ch === '"') quoted = false;
      else cell += ch;
    } else if (ch === '"') quoted = true;
    else if (ch === ",") { record.push(cell); cell = ""; }
    else if (ch === "\n" || ch === "\r") {
      if (ch === "\r" && source[i + 1] === "\n") i++;
      record.push(cell);
      out.push(record);
      record = [];
      cell = "";
    } else cell += ch;
  }
  if (out.length < rows && (cell || record.length)) out.push([...record, cell]);
  return out;
}

/** Fields a CSV column may fill: not computed, not system, and settable by this user. */
export function importableFields(fields: FieldInfo[], operation: ImportOperation): FieldInfo[] {
  return fields.filter(
    (f) => !f.calculated && !f.system && (f.createable || (operation === "upsert" && f.updateable)),
  );
}

const squash = (text: string) => text.toLowerCase().replace(/[^a-z0-9]/g, "");

/** Each column matched to a field by API name or label (case, spaces and `_` ignored), else
 * skipped; a field is matched once at most (the first column wins). */
export function autoMatch(headers: string[], fields: FieldInfo[]): Mapping {
  const byKey = new Map<string, string>();
  for (const f of fields) {
    for (const key of [f.apiName, f.label, f.apiName.replace(/__c$/, "")]) {
      if (!byKey.has(squash(key))) byKey.set(squash(key), f.apiName);
    }
  }
  const used = new Set<string>();
  const mapping: Mapping = {};
  for (const header of headers) {
    const match = byKey.get(squash(header));
    mapping[header] = match && !used.has(match) ? match : "";
    if (match) used.add(match);
  }
  return mapping;
}

/** What stops the import from starting, in words; null when it can start. */
export function mappingProblem(
  mapping: Mapping,
  fields: FieldInfo[],
  operation: ImportOperation,
  externalId: string | null,
): string | null {
  const targets = Object.values(mapping).filter(Boolean);
  if (!targets.length) return "Map at least one column to a field.";
  const seen = new Set<string>();
  for (const t of targets) {
    if (seen.has(t)) return `${fields.find((f) => f.apiName === t)?.label ?? t} is mapped from more than one column.`;
    seen.add(t);
  }
  if (operation === "upsert") {
    if (!externalId) return "Choose the external id field to match records on.";
    if (!seen.has(externalId)) return `Map a column to ${fields.find((f) => f.apiName === externalId)?.label ?? externalId}.`;
  }
  const missing = fields.filter((f) => f.required && f.createable && !seen.has(f.apiName));
  if (operation === "insert" && missing.length) {
    return `Map a column to ${missing.map((f) => f.label).join(", ")} (required).`;
  }
  return null;
}
