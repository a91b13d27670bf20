// Every API call of the SPA: same origin, bearer token from memory, one refresh on 401.
// Errors become ApiError with a short, human message (never a stack trace or raw body).

import { accessToken, refresh, sessionExpired } from "../auth/session";

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string,
    readonly fieldErrors: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** The session is gone: the app sends the person to sign in and back. */
export class SessionExpired extends ApiError {
  constructor() {
    super("Your session has ended. Please sign in again.", 401, "SESSION_EXPIRED");
  }
}

const MAX_MESSAGE = 300;

function short(text: unknown): string {
  const value = typeof text === "string" ? text.trim() : "";
  return value.length > MAX_MESSAGE ? value.slice(0, MAX_MESSAGE) + "…" : value;
}

/** Salesforce's array envelope or Nexus's object envelope -> ApiError. */
export function toApiError(status: number, body: unknown): ApiError {
  if (status >= 500 || body === null || typeof body !== "object") {
    const message =
      status === 503
        ? "The service is not available right now. Try again in a moment."
        : `The server could not complete this request (${status}). Try again.`;
    return new ApiError(status >= 500 ? message : `Request failed (${status})`, status, "ERROR");
  }
  if (Array.isArray(body)) {
    const fieldErrors: Record<string, string> = {};
    const messages: string[] = [];
    let code = "ERROR";
    for (const item of body as Array<Record<string, unknown>>) {
      const message = short(item.message) || "Invalid value";
      code = typeof item.errorCode === "string" ? item.errorCode : code;
      const fields = Array.isArray(item.fields) ? (item.fields as string[]) : [];
      if (fields.length) fields.forEach((f) => (fieldErrors[f] = message));
      else messages.push(message);
    }
    const message = messages.join(" ") || Object.values(fieldErrors)[0] || "Request failed";
    return new ApiError(message, status, code, fieldErrors);
  }
  const record = body as Record<string, unknown>;
  const fieldErrors: Record<string, string> = {};
  if (record.fields && typeof record.fields === "object" && !Array.isArray(record.fields)) {
    for (const [k, v] of Object.entries(record.fields as Record<string, unknown>)) {
      fieldErrors[k] = short(v);
    }
  }
  return new ApiError(
    short(record.message) || `Request failed (${status})`,
    status,
    typeof record.code === "string" ? record.code : "ERROR",
    fieldErrors,
  );
}

async function send(path: string, init: RequestInit): Promise<Response> {
  const headers = new Headers(init.headers);
  const token = accessToken();
  if (token) headers.set("Authorization", `Bearer ${token}`);
  headers.set("Accept", "application/json");
  return fetch(path, { ...init, headers, credentials: "omit" });
}

export async function api<T>(path: string, init: RequestInit = {}): Promise<T> {
  const reply = await authorized(path, init);
  if (reply.status === 204) return undefined as T;
  const body = await reply.json().catch(() => null);
  if (!reply.ok) throw toApiError(reply.status, body);
  return body as T;
}

/** A file download (CSV): the body and the server's file name (Content-Disposition). */
export async function download(path: string): Promise<{ blob: Blob; filename: string | null }> {
  const reply = await authorized(path, {});
  if (!reply.ok) throw toApiError(reply.status, await reply.json().catch(() => null));
  const disposition = reply.headers.get("Content-Disposition") ?? "";
  const filename = /filename="([^"]+)"/.exec(disposition)?.[1] ?? null;
  return { blob: await reply.blob(), filename };
}

/** Send with the in-memory token; one refresh on 401; network failures as ApiError. */
async function authorized(path: string, init: RequestInit): Promise<Response> {
  let reply: Response;
  try {
    reply = await send(path, init);
    if (reply.status === 401) {
      if (!(await refresh())) {
        sessionExpired();
        throw new SessionExpired();
      }
      reply = await send(path, init);
      if (reply.status === 401) {
        sessionExpired();
        throw new SessionExpired();
      }
    }
  } catch (error) {
    if (error instanceof ApiError) throw error;
    throw new ApiError("The server cannot be reached. Check your connection.", 0, "NETWORK");
  }
  return reply;
}

export function json(method: string, body: unknown): RequestInit {
  return { method, headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
}
