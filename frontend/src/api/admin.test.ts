// The admin adapter: request shapes, live-chart series and the refusal lines an operator reads.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  addField, createUser, deadLetters, failedReceipts, fieldDefinition, objectDefinition, packageFiles, receiptRefusals,
  refusals, replayItems, replayReceipts, replayReceiptsSince, replaySince, reroutable, rerouteItems, sparkline,
  summarize, throughput, type DeadLetter, type QueueCount,
} from "./admin";
import { ApiError } from "./http";

const sent: Array<{ url: string; method: string; body: unknown }> = [];
let reply: { status: number; body: unknown } = { status: 200, body: {} };

beforeEach(() => {
  sent.length = 0;
  reply = { status: 200, body: {} };
  vi.stubGlobal("fetch", vi.fn(async (url: string, init: RequestInit) => {
    sent.push({ url, method: init.method ?? "GET", body: init.body ? JSON.parse(String(init.body)) : undefined });
    return new Response(JSON.stringify(reply.body), { status: reply.status, headers: { "Content-Type": "application/json" } });
  }));
});
afterEach(() => vi.unstubAllGlobals());

const row = (state: string, count: number, extra: Partial<QueueCount> = {}): QueueCount => ({
  pack: "routes:shop", queue_class: "orders", state, count, in_flight: 0, oldest_pending_age_seconds: null, ...extra,
});

describe("admin adapter", () => {
  it("lists dead letters with only the filters that are set, halted lanes on their own path", async () => {
    reply.body = { items: [], next_cursor: null };
    await deadLetters({ route: "orders", connector: "", failure_class: "terminal" });
    await deadLetters({}, true);
    expect(sent.map((s) => s.url)).toEqual([
      "/admin/v1/integration/dead-letters?route=orders&failure_class=terminal",
      "/admin/v1/integration/halted-lanes",
    ]);
  });

  it("replays one/selected by id, or all since a time with the filters", async () => {
    reply.body = { done: 1, refused: 0, decisions: [], next_cursor: null };
    await replayItems(["w1", "w2"]);
    await replaySince("2026-11-29T10:00:00.000Z", { pack: "routes:shop", route: "" });
    expect(sent[0]).toEqual({ url: "/admin/v1/integration/dead-letters/replay", method: "POST", body: { work_ids: ["w1", "w2"] } });
    expect(sent[1].body).toEqual({ pack: "routes:shop", since: "2026-11-29T10:00:00.000Z" });
  });

  it("words each refusal with its fail-closed reason and code; replayed items are not listed", () => {
    expect(refusals({
      done: 1, refused: 1, next_cursor: null,
      decisions: [
        { work_id: "w1", outcome: "replayed", code: null, reason: null },
        { work_id: "w2", outcome: "refused", code: "ROUTE_CHANGED", reason: "route shop/orders is at version 2" },
      ],
    })).toEqual(["w2: route shop/orders is at version 2 (ROUTE_CHANGED)"]);
  });

  it("lists failed deliveries with only the filters that are set", async () => {
    reply.body = { items: [], next_cursor: null };
    await failedReceipts({ connector: "shop", route: "", delivery_id: "dlv 7" });
    await failedReceipts();
    expect(sent.map((s) => s.url)).toEqual([
      "/admin/v1/integration/failed-receipts?connector=shop&delivery_id=dlv+7",
      "/admin/v1/integration/failed-receipts",
    ]);
  });

  it("replays failed deliveries by receipt id, or all failed since a time with the filters", async () => {
    reply.body = { done: 1, refused: 0, decisions: [], next_cursor: null };
    await replayReceipts(["r1"]);
    await replayReceiptsSince("2026-11-29T10:00:00.000Z", { connector: "shop", delivery_id: "" });
    expect(sent[0]).toEqual({ url: "/admin/v1/integration/failed-receipts/replay", method: "POST", body: { receipt_ids: ["r1"] } });
    expect(sent[1].body).toEqual({ connector: "shop", since: "2026-11-29T10:00:00.000Z" });
  });

  it("words a refused delivery replay by its delivery id when known, else its receipt id", () => {
    const report = {
      done: 1, refused: 2, next_cursor: null,
      decisions: [
        { receipt_id: "r1", outcome: "replayed", code: null, reason: null },
        { receipt_id: "r2", outcome: "refused", code: "NOT_FAILED", reason: "the receipt is waiting for the router (not failed)" },
        { receipt_id: "r3", outcome: "refused", code: "BODY_GONE", reason: "the receipt's body is no longer kept" },
      ],
    };
    expect(receiptRefusals(report, new Map([["r2", "dlv-2"]]))).toEqual([
      "dlv-2: the receipt is waiting for the router (not failed) (NOT_FAILED)",
      "r3: the receipt's body is no longer kept (BODY_GONE)",
    ]);
  });

  it("re-routes dead items by id; offers it only for a definite refusal", async () => {
    reply.body = { done: 1, refused: 0, decisions: [], next_cursor: null };
    await rerouteItems(["w1"]);
    expect(sent[0]).toEqual({ url: "/admin/v1/integration/dead-letters/reroute", method: "POST", body: { work_ids: ["w1"] } });
    const item = (state: string, failure_class: string | null) => ({ state, failure_class }) as DeadLetter;
    expect(reroutable(item("dead", "terminal"))).toBe(true);
    expect(reroutable(item("dead", "retryable"))).toBe(false); // its last attempt may have been applied
    expect(reroutable(item("outcome_unknown", "lease_expired"))).toBe(false);
  });

  it("a 403 is an ApiError the console shows as 'not allowed'", async () => {
    reply = { status: 403, body: { code: "INSUFFICIENT_ACCESS", message: "only a System Administrator" } };
    const error = await createUser({ username: "x" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ApiError);
    expect((error as ApiError).status).toBe(403);
    expect(sent[0].body).toEqual({ username: "x" });
  });

  it("queue rows per state become one point per pack and queue class", () => {
    const points = summarize([
      row("pending", 4, { oldest_pending_age_seconds: 12.5 }),
      row("processing", 2, { in_flight: 2 }),
      row("succeeded", 90),
      row("dead", 1),
      row("pending", 1, { queue_class: "refunds" }),
    ]);
    expect(points.get("routes:shop / orders")).toEqual({ depth: 6, inFlight: 2, oldestAge: 12.5, done: 90, dead: 1 });
    expect(points.get("routes:shop / refunds")?.depth).toBe(1);
  });

  it("throughput is finished items per second between samples, never negative", () => {
    const at = (t: number, done: number) => ({ at: t, points: summarize([row("succeeded", done)]) });
    const samples = [at(0, 10), at(2000, 30), at(4000, 30), at(5000, 5)];
    expect(throughput(samples, "routes:shop / orders")).toEqual([10, 0, 0]);
  });

  it("draws a sparkline with the largest value at the top", () => {
    expect(sparkline([0, 5, 10], 100, 20)).toBe("0,20 50,10 100,0");
    expect(sparkline([], 100, 20)).toBe("");
    expect(sparkline([0, 0], 10, 20)).toBe("0,20 10,20");
  });

  it("builds field and object definitions the metadata apply accepts", async () => {
    expect(fieldDefinition({ apiName: "Region", label: "Region", type: "text" }))
      .toEqual({ api_name: "Region__c", label: "Region", type: "text", length: 255 });
    expect(fieldDefinition({ apiName: "Score__c", label: "", type: "number" }))
      .toEqual({ api_name: "Score__c", label: "Score__c", type: "number" });
    const project = objectDefinition({ apiName: "Project", label: "Project", plural: "" }, 0.5);
    expect(project).toMatchObject({ api_name: "Project__c", plural_label: "Projects", key_prefix: "ai0" });
    reply.body = { object: "Account", field: "Region__c", metadataRevision: 7 };
    await addField("Account", { api_name: "Region__c" });
    expect(sent[0].body).toEqual({ object: "Account", field: { api_name: "Region__c" }, addToLayout: true });
  });

  it("reads a package file: a JSON bundle of files, or one YAML file", () => {
    expect(packageFiles("app.json", '{"files": {"manifest.yaml": "app_id: x"}}')).toEqual({ "manifest.yaml": "app_id: x" });
    expect(packageFiles("dir/manifest.yaml", "app_id: x")).toEqual({ "manifest.yaml": "app_id: x" });
    expect(() => packageFiles("bad.json", "[1]")).toThrow(/JSON package/);
  });
});
