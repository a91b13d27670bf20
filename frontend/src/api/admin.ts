// The admin console's data adapter: the public admin APIs of Integration, Runtime and Catalog
// (`/admin/v1/...`, routed by the gateway). The servers decide who may call them (403 for
// anyone but a System Administrator); this module only shapes requests and answers.
import { api, json } from "./http";

const INTEGRATION = "/admin/v1/integration";
const RUNTIME = "/admin/v1/runtime";
const CATALOG = "/admin/v1/catalog";

// ------------------------------------------------------------------ integration

export interface QueueCount {
  pack: string;
  queue_class: string;
  state: string;
  count: number;
  in_flight: number;
  oldest_pending_age_seconds: number | null;
}

export interface DeadLetter {
  work_id: string;
  state: string;
  pack: string;
  queue_class: string;
  attempt: number;
  max_attempts: number;
  failure_class: string | null;
  error: string | null;
  failed_at: string | null;
  lane_key: string | null;
  halts_lane: boolean;
  event: {
    event_id: string; receipt_id: string; event_kind: string | null; connector: string; route: string;
    route_version: number; source_object_kind: string | null; source_object_id: string | null;
    parse_outcome: string; created_at: string | null;
  };
  receipt: { delivery_id: string; received_at: string | null; deliveries: number; router_status: string } | null;
}

export interface Decision { work_id: string; outcome: string; code: string | null; reason: string | null }
export interface ActionReport { done: number; refused: number; decisions: Decision[]; next_cursor: string | null }

export interface DeadLetterFilter {
  pack?: string; queue_class?: string; connector?: string; route?: string; failure_class?: string; since?: string;
}

function query(params: Record<string, string | undefined>): string {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) if (value) search.set(key, value);
  const text = search.toString();
  return text ? `?${text}` : "";
}

export const queues = () => api<QueueCount[]>(`${INTEGRATION}/queues`);

export const deadLetters = (filter: DeadLetterFilter = {}, halted = false) =>
  api<{ items: DeadLetter[]; next_cursor: string | null }>(
    `${INTEGRATION}/${halted ? "halted-lanes" : "dead-letters"}${query({ ...filter })}`,
  );

export const replayItems = (workIds: string[]) =>
  api<ActionReport>(`${INTEGRATION}/dead-letters/replay`, json("POST", { work_ids: workIds }));

export const replaySince = (since: string, filter: DeadLetterFilter = {}) =>
  api<ActionReport>(`${INTEGRATION}/dead-letters/replay`, json("POST", { ...clean(filter), since }));

/** Dead items Runtime definitely refused, whose route's mapping changed since: cancelled, and
 * their deliveries routed again from the receipts with the CURRENT route (new work items). */
export const rerouteItems = (workIds: string[]) =>
  api<ActionReport>(`${INTEGRATION}/dead-letters/reroute`, json("POST", { work_ids: workIds }));

/** Worth offering a re-route: dead after a definite refusal (the server decides the rest). */
export const reroutable = (item: DeadLetter) => item.state === "dead" && item.failure_class === "terminal";

export const skipLane = (workId: string) =>
  api<ActionReport>(`${INTEGRATION}/lanes/skip`, json("POST", { work_id: workId }));

export const receipts = (deliveryId: string) =>
  api<{ receipts: Array<Record<string, unknown>> }>(`${INTEGRATION}/receipts${query({ delivery_id: deliveryId })}`);

function clean<T extends object>(filter: T): T {
  return Object.fromEntries(Object.entries(filter).filter(([, v]) => v)) as T;
}

/** One line per refusal: what the operator reads when a replay is refused (fail closed). */
export function refusals(report: ActionReport): string[] {
  return refusalLines(report.decisions.map((d) => ({ ...d, id: d.work_id })));
}

function refusalLines(decisions: Array<{ id: string; outcome: string; code: string | null; reason: string | null }>): string[] {
  return decisions
    .filter((d) => d.outcome === "refused")
    .map((d) => `${d.id}: ${d.reason ?? d.code ?? "refused"}${d.code ? ` (${d.code})` : ""}`);
}

// ------------------------------------------------------------------ failed deliveries (receipts)

/** A delivery whose routing failed for good: nothing was created from it. */
export interface FailedReceipt {
  receipt_id: string; connector: string; route: string; route_version: number; delivery_id: string;
  event_kind: string | null; received_at: string | null; failed_at: string | null; attempts: number;
  deliveries: number; body_bytes: number; error: string | null;
}
export interface ReceiptDecision { receipt_id: string; outcome: string; code: string | null; reason: string | null }
export interface ReceiptReport { done: number; refused: number; decisions: ReceiptDecision[]; next_cursor: string | null }
export interface FailedReceiptFilter { connector?: string; route?: string; delivery_id?: string; since?: string }

export const failedReceipts = (filter: FailedReceiptFilter = {}) =>
  api<{ items: FailedReceipt[]; next_cursor: string | null }>(`${INTEGRATION}/failed-receipts${query({ ...filter })}`);

/** Route the receipts again with their route's CURRENT version (after the route was fixed). */
export const replayReceipts = (receiptIds: string[]) =>
  api<ReceiptReport>(`${INTEGRATION}/failed-receipts/replay`, json("POST", { receipt_ids: receiptIds }));

export const replayReceiptsSince = (since: string, filter: FailedReceiptFilter = {}) =>
  api<ReceiptReport>(`${INTEGRATION}/failed-receipts/replay`, json("POST", { ...clean(filter), since }));

/** Refusal lines naming each receipt by its delivery id when the console knows it. */
export function receiptRefusals(report: ReceiptReport, deliveries: ReadonlyMap<string, string> = new Map()): string[] {
  return refusalLines(report.decisions.map((d) => ({ ...d, id: deliveries.get(d.receipt_id) ?? d.receipt_id })));
}

// ------------------------------------------------------------------ live queue series

/** One pack + queue class at one moment: the numbers the charts draw. */
export interface QueuePoint { depth: number; inFlight: number; oldestAge: number; done: number; dead: number }

/** Queue counts (one row per state) -> one point per `pack / queue class`. */
export function summarize(rows: QueueCount[]): Map<string, QueuePoint> {
  const out = new Map<string, QueuePoint>();
  for (const row of rows) {
    const key = `${row.pack} / ${row.queue_class}`;
    const point = out.get(key) ?? { depth: 0, inFlight: 0, oldestAge: 0, done: 0, dead: 0 };
    if (row.state === "succeeded") point.done += row.count;
    else if (row.state === "dead" || row.state === "outcome_unknown") point.dead += row.count;
    else if (row.state === "pending" || row.state === "processing") point.depth += row.count;
    point.inFlight += row.in_flight;
    point.oldestAge = Math.max(point.oldestAge, row.oldest_pending_age_seconds ?? 0);
    out.set(key, point);
  }
  return out;
}

export interface Sample { at: number; points: Map<string, QueuePoint> }

/** Items finished per second between consecutive samples of one key (never negative). */
export function throughput(samples: Sample[], key: string): number[] {
  const rates: number[] = [];
  for (let i = 1; i < samples.length; i += 1) {
    const [before, after] = [samples[i - 1], samples[i]];
    const seconds = (after.at - before.at) / 1000;
    const done = (after.points.get(key)?.done ?? 0) - (before.points.get(key)?.done ?? 0);
    rates.push(seconds > 0 ? Math.max(0, done) / seconds : 0);
  }
  return rates;
}

/** SVG polyline points for `values` in a `width` x `height` box (the max at the top). */
export function sparkline(values: number[], width: number, height: number): string {
  if (!values.length) return "";
  const max = Math.max(...values, 1);
  const step = values.length > 1 ? width / (values.length - 1) : 0;
  return values
    .map((v, i) => `${round(i * step)},${round(height - (v / max) * height)}`)
    .join(" ");
}

const round = (n: number) => Math.round(n * 10) / 10;

// ------------------------------------------------------------------ runtime

export interface AdminUser {
  userId: string; username: string; email: string | null; displayName: string | null;
  isActive: boolean; isAdmin: boolean; role: string | null; permissionSets: string[];
}
export interface ConnectedApp {
  clientId: string; name: string; public: boolean; enabled: boolean; grantTypes: string[]; scopes: string[];
  redirectUris: string[]; clientSecret?: string | null;
}
export interface UserSession { sessionId: string; clientId: string; authMethod: string; createdAtMs: number; expiresAtMs: number }
export interface RuntimeDeadLetter {
  id: string; queue: string; family: string; queueClass: string; state: string; attempts: number;
  failureClass: string | null; error: string | null; deadAtMs: number | null; halting: boolean;
}

export const users = async () => (await api<{ users: AdminUser[] }>(`${RUNTIME}/users`)).users;
export const createUser = (user: {
  username: string; password?: string; email?: string; displayName?: string; role?: string; permissionSets?: string[];
}) => api<{ userId: string; username: string; generatedPassword: string | null }>(`${RUNTIME}/users`, json("POST", clean(user as never)));
export const deactivateUser = (userId: string) =>
  api<unknown>(`${RUNTIME}/users/${encodeURIComponent(userId)}/deactivate`, json("POST", {}));
export const resetPassword = (userId: string) =>
  api<{ generatedPassword: string | null }>(`${RUNTIME}/users/${encodeURIComponent(userId)}/password`, json("POST", {}));
export const setPermissionSets = (userId: string, names: string[]) =>
  api<unknown>(`${RUNTIME}/users/${encodeURIComponent(userId)}/permission-sets`, json("PUT", { permissionSets: names }));
export const setRole = (userId: string, role: string | null) =>
  api<unknown>(`${RUNTIME}/users/${encodeURIComponent(userId)}/role`, json("PUT", { role }));
export const permissionSets = async () =>
  (await api<{ permissionSets: Array<{ apiName: string; label: string }> }>(`${RUNTIME}/permission-sets`)).permissionSets;
export const roles = async () => (await api<{ roles: Array<{ name: string }> }>(`${RUNTIME}/roles`)).roles;

export const connectedApps = async () =>
  (await api<{ connectedApps: ConnectedApp[] }>(`${RUNTIME}/connected-apps`)).connectedApps;
export const createConnectedApp = (name: string, redirectUris: string[]) =>
  api<ConnectedApp>(`${RUNTIME}/connected-apps`, json("POST", { name, redirectUris }));
export const disableConnectedApp = (clientId: string) =>
  api<unknown>(`${RUNTIME}/connected-apps/${encodeURIComponent(clientId)}/disable`, json("POST", {}));

export const sessions = async (userId: string) =>
  (await api<{ sessions: UserSession[] }>(`${RUNTIME}/users/${encodeURIComponent(userId)}/sessions`)).sessions;
export const revokeSession = (sessionId: string) =>
  api<unknown>(`${RUNTIME}/sessions/${encodeURIComponent(sessionId)}/revoke`, json("POST", {}));

export const runtimeDeadLetters = async (queue: "inbox" | "outbox") =>
  (await api<{ deadLetters: RuntimeDeadLetter[] }>(`${RUNTIME}/dead-letters${query({ queue })}`)).deadLetters;
export const replayRuntime = (queue: "inbox" | "outbox", ids: string[]) =>
  api<{ replayed: string[]; refused: Record<string, string> }>(`${RUNTIME}/dead-letters/replay`, json("POST", { queue, ids }));

// ------------------------------------------------------------------ metadata

export const FIELD_TYPES = ["text", "textarea", "number", "currency", "percent", "checkbox", "date", "datetime", "email", "phone", "url"] as const;

/** The field definition the metadata apply takes, from the console's small form. */
export function fieldDefinition(form: { apiName: string; label: string; type: string; length?: string }): Record<string, unknown> {
  const apiName = form.apiName.trim().endsWith("__c") ? form.apiName.trim() : `${form.apiName.trim()}__c`;
  const field: Record<string, unknown> = { api_name: apiName, label: form.label.trim() || apiName, type: form.type };
  if (form.type === "text") field.length = Number(form.length) || 255;
  return field;
}

export const addField = (object: string, field: Record<string, unknown>, addToLayout = true) =>
  api<{ object: string; field: string; metadataRevision: number }>(
    `${RUNTIME}/metadata/fields`, json("POST", { object, field, addToLayout }),
  );
/** A new custom object with a text Name field; its 3-character key prefix comes from `seed`. */
export function objectDefinition(form: { apiName: string; label: string; plural: string }, seed = Math.random()): Record<string, unknown> {
  const apiName = form.apiName.trim().endsWith("__c") ? form.apiName.trim() : `${form.apiName.trim()}__c`;
  const label = form.label.trim() || apiName;
  const prefix = "a" + Math.floor(seed * 36 * 36).toString(36).padStart(2, "0");
  return {
    api_name: apiName, label, plural_label: form.plural.trim() || `${label}s`, key_prefix: prefix,
    name_field: { api_name: "Name", label: `${label} Name`, type: "text", length: 80 },
  };
}

export const addObject = (object: Record<string, unknown>) =>
  api<{ object: string; metadataRevision: number }>(`${RUNTIME}/metadata/objects`, json("POST", { object }));

// ------------------------------------------------------------------ catalog

export interface InstalledApp { app_id: string; version: string; digest: string; state?: string }
export interface CatalogJob {
  job_id: string; operation: string; app_id: string; version: string | null; state: string;
  catalog_revision: number | null; error: string | null;
}
export interface CatalogStatus { org_id: string; active_revision: number; catalog_revision: number; apps: InstalledApp[]; jobs?: CatalogJob[];
  installations?: Record<string, string>;
}
export interface JobReport {
  app_id: string; version: string | null; state: string; operation: string; error: string | null;
  steps: Array<{ state: string; detail: string }>;
}

export const catalogStatus = () => api<CatalogStatus>(`${CATALOG}/status`);
export const installPackage = (files: Record<string, string>) => api<JobReport>(`${CATALOG}/apply`, json("POST", { files }));
export const validatePackage = (files: Record<string, string>) =>
  api<{ app_id: string; version: string; digest: string; components: number }>(`${CATALOG}/validate`, json("POST", { files }));
export const uninstallApp = (appId: string) => api<JobReport>(`${CATALOG}/uninstall`, json("POST", { app_id: appId }));

/** A package file the console uploads: a JSON `{path: text}` bundle, or one YAML file. */
export function packageFiles(name: string, text: string): Record<string, string> {
  if (name.endsWith(".json")) {
    const parsed = JSON.parse(text) as unknown;
    if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) {
      const files = (parsed as { files?: unknown }).files ?? parsed;
      if (Object.values(files as object).every((v) => typeof v === "string")) return files as Record<string, string>;
    }
    throw new Error("A JSON package is an object of file paths to their text.");
  }
  return { [name.split("/").pop() || "manifest.yaml"]: text };
}
