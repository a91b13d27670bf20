// The admin console's Bulk jobs: Runtime's `/admin/v1/runtime/bulk-jobs` (routed by the
// gateway). Runtime decides who may read and abort (a System Administrator of the org); this
// module only shapes requests and answers. A job carries its shape and counts, never its data.
import { api, json } from "./http";

const BULK = "/admin/v1/runtime/bulk-jobs";

export const BULK_STATES = ["Open", "UploadComplete", "InProgress", "JobComplete", "Failed", "Aborted"] as const;
export const BULK_OPERATIONS = ["insert", "update", "upsert", "delete", "hardDelete", "query", "queryAll"] as const;
export type BulkState = (typeof BULK_STATES)[number];

export interface BulkJob {
  id: string;
  kind: "ingest" | "query";
  object: string;
  operation: string;
  state: BulkState;
  createdById: string;
  createdBy: string | null;
  createdAtMs: number;
  startedAtMs: number | null;
  finishedAtMs: number | null;
  recordsProcessed: number;
  recordsFailed: number;
  /** null while a query job runs: its size is known once it wrote its last page */
  recordsTotal: number | null;
  chunksDone: number;
  chunksTotal: number | null;
  errorMessage: string | null;
  abortable: boolean;
}

export interface BulkJobDetail extends BulkJob {
  apiVersion: string;
  externalIdField: string | null;
  columnDelimiter: string;
  lineEnding: string;
  columns: string[];
  uploadedBytes: number;
  processingMs: number;
}

export interface BulkJobFilter { state?: string; object?: string; operation?: string; createdBy?: string }
export interface BulkJobPage { jobs: BulkJob[]; nextCursor: string | null }

/** The states in which a job's work has not ended (the panel refreshes while one is shown). */
export const running = (job: BulkJob) => job.state === "Open" || job.state === "UploadComplete" || job.state === "InProgress";

/** Done of all, 0-100 (a finished job with nothing to do is complete). */
export function percentDone(job: BulkJob): number {
  if (job.recordsTotal) return Math.min(100, Math.round((100 * job.recordsProcessed) / job.recordsTotal));
  return job.state === "JobComplete" ? 100 : 0;
}

export function bulkJobs(filter: BulkJobFilter, options: { cursor?: string | null; limit?: number } = {}): Promise<BulkJobPage> {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(filter)) if (value && value.trim()) search.set(key, value.trim());
  if (options.cursor) search.set("cursor", options.cursor);
  if (options.limit) search.set("limit", String(options.limit));
  const text = search.toString();
  return api<BulkJobPage>(`${BULK}${text ? `?${text}` : ""}`);
}

export const bulkJob = (id: string) => api<BulkJobDetail>(`${BULK}/${encodeURIComponent(id)}`);

export const abortBulkJob = (id: string) =>
  api<BulkJobDetail>(`${BULK}/${encodeURIComponent(id)}/abort`, json("POST", {}));
