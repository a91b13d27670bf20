// The recycle bin: deleted records of an object (the dialect's queryAll, which includes them)
// and undelete (`POST ui-api/records/{id}/undelete`, one Runtime call; docs/ui-api.md).

import { VERSION } from "./crm";
import { api } from "./http";
import type { ObjectInfo } from "./types";

const BASE = `/services/data/${VERSION}`;
export const RECYCLE_BIN_SIZE = 50;

export interface DeletedRecord {
  id: string;
  name: string;
  deletedDate: string;
}

type Json = Record<string, unknown>;

export async function deletedRecords(info: ObjectInfo): Promise<DeletedRecord[]> {
  const name = /^\w+$/.test(info.nameField) ? info.nameField : "Id";
  const soql =
    `SELECT Id, ${name}, LastModifiedDate FROM ${info.apiName} WHERE IsDeleted = true ` +
    `ORDER BY LastModifiedDate DESC LIMIT ${RECYCLE_BIN_SIZE}`;
  const body = await api<{ records: Json[] }>(`${BASE}/queryAll?${new URLSearchParams({ q: soql })}`);
  return body.records.map((r) => ({
    id: String(r.Id),
    name: String(r[name] ?? r.Id),
    deletedDate: String(r.LastModifiedDate ?? ""),
  }));
}

export async function undeleteRecord(id: string): Promise<void> {
  await api(`${BASE}/ui-api/records/${encodeURIComponent(id)}/undelete`, { method: "POST" });
}
