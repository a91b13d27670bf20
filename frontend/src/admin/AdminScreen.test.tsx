// The console's states a person notices: "not allowed" on 403, the dead-letter list with its
// sanitized failure, and a refused replay's fail-closed reason.
import { cleanup, fireEvent, render, screen, within } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ApiError } from "../api/http";
import { ToastProvider } from "../ui/components";
import { AdminScreen } from "./AdminScreen";

const admin = vi.hoisted(() => ({
  users: vi.fn(),
  queues: vi.fn(),
  deadLetters: vi.fn(),
  replayItems: vi.fn(),
  replaySince: vi.fn(),
  skipLane: vi.fn(),
  receipts: vi.fn(),
  failedReceipts: vi.fn(),
  replayReceipts: vi.fn(),
  rerouteItems: vi.fn(),
}));
vi.mock("../api/admin", async (original) => ({ ...(await original<object>()), ...admin }));

const ITEM = {
  work_id: "w-1", state: "dead", pack: "routes:shop", queue_class: "orders", attempt: 1, max_attempts: 8,
  failure_class: "terminal", error: "Runtime answered 400 INVALID_FIELD", failed_at: "2026-11-29T10:00:00Z",
  lane_key: null, halts_lane: false,
  event: {
    event_id: "e-1", receipt_id: "r-1", event_kind: "order.created", connector: "shop", route: "orders",
    route_version: 1, source_object_kind: null, source_object_id: null, parse_outcome: "parsed", created_at: null,
  },
  receipt: { delivery_id: "dlv-42", received_at: null, deliveries: 1, router_status: "routed" },
};

const FAILED = {
  receipt_id: "r-9", connector: "shop", route: "orders", route_version: 1, delivery_id: "dlv-9", event_kind: "order.created",
  received_at: "2026-11-29T10:00:00Z", failed_at: "2026-11-29T10:00:01Z", attempts: 1, deliveries: 1, body_bytes: 80,
  error: "command: the external id (External_Id__c) has no text or integer at /data/id",
};

beforeEach(() => {
  vi.clearAllMocks();
  admin.users.mockResolvedValue([]);
  admin.queues.mockResolvedValue([
    { pack: "routes:shop", queue_class: "orders", state: "pending", count: 3, in_flight: 1, oldest_pending_age_seconds: 4 },
  ]);
  admin.failedReceipts.mockResolvedValue({ items: [FAILED], next_cursor: null });
  admin.deadLetters.mockImplementation(async (_f: unknown, halted: boolean) => ({ items: halted ? [] : [ITEM], next_cursor: null }));
});
afterEach(cleanup);

const show = () => render(<ToastProvider><AdminScreen section="integration" /></ToastProvider>);

describe("AdminScreen", () => {
  it("shows a clear 'not allowed' state when the server answers 403", async () => {
    admin.users.mockRejectedValue(new ApiError("only a System Administrator", 403, "INSUFFICIENT_ACCESS"));
    show();
    expect(await screen.findByText("You are not allowed to use the admin console")).toBeTruthy();
    expect(screen.queryByRole("navigation", { name: "Administration" })).toBeNull();
    expect(admin.deadLetters).not.toHaveBeenCalled();
  });

  it("lists a dead letter with its route, delivery and sanitized failure; charts the queue", async () => {
    show();
    const region = await screen.findByRole("region", { name: "Dead letters" });
    const row = (await within(region).findByText("dlv-42")).closest("tr")!;
    expect(row.textContent).toContain("shop/orders v1");
    expect(row.textContent).toContain("terminal: Runtime answered 400 INVALID_FIELD");
    expect(await screen.findByRole("img", { name: "Depth: 3" })).toBeTruthy();
    expect(screen.getByRole("img", { name: "Oldest pending: 4 s" })).toBeTruthy();
    expect(screen.getByText("No halted lanes")).toBeTruthy();
  });

  it("shows why a replay was refused (fail closed), and replays the selected items", async () => {
    admin.replayItems.mockResolvedValue({
      done: 0, refused: 1, next_cursor: null,
      decisions: [{ work_id: "w-1", outcome: "refused", code: "ROUTE_CHANGED", reason: "route shop/orders is at version 2" }],
    });
    show();
    const region = await screen.findByRole("region", { name: "Dead letters" });
    fireEvent.click(await within(region).findByRole("checkbox", { name: "Select w-1" }));
    fireEvent.click(within(region).getByRole("button", { name: "Replay selected (1)" }));
    const alert = await within(region).findByRole("alert");
    expect(alert.textContent).toContain("w-1: route shop/orders is at version 2 (ROUTE_CHANGED)");
    expect(admin.replayItems).toHaveBeenCalledWith(["w-1"]);
  });

  it("lists failed deliveries with their failure; a replay refreshes them, a refusal names the delivery", async () => {
    admin.replayReceipts
      .mockResolvedValueOnce({ done: 1, refused: 0, next_cursor: null, decisions: [{ receipt_id: "r-9", outcome: "replayed", code: null, reason: null }] })
      .mockResolvedValueOnce({
        done: 0, refused: 1, next_cursor: null,
        decisions: [{ receipt_id: "r-9", outcome: "refused", code: "NOT_FAILED", reason: "the receipt is waiting for the router (not failed)" }],
      });
    show();
    const region = await screen.findByRole("region", { name: "Failed deliveries" });
    const row = (await within(region).findByText("dlv-9")).closest("tr")!;
    expect(row.textContent).toContain("shop/orders");
    expect(row.textContent).toContain("no text or integer at /data/id");
    const calls = admin.failedReceipts.mock.calls.length;
    fireEvent.click(within(region).getByRole("button", { name: "Replay delivery dlv-9" }));
    expect(await screen.findByText("Replay delivery: 1 routed again, 0 refused")).toBeTruthy();
    expect(admin.replayReceipts).toHaveBeenCalledWith(["r-9"]);
    expect(admin.failedReceipts.mock.calls.length).toBeGreaterThan(calls); // refreshed
    fireEvent.click(await within(region).findByRole("button", { name: "Replay delivery dlv-9" }));
    const alert = await within(region).findByRole("alert");
    expect(alert.textContent).toContain("dlv-9: the receipt is waiting for the router (not failed) (NOT_FAILED)");
  });

  it("re-routes a dead item Runtime refused and shows the server's refusal when it declines", async () => {
    admin.rerouteItems.mockResolvedValue({
      done: 0, refused: 1, next_cursor: null,
      decisions: [{ work_id: "w-1", outcome: "refused", code: "REPLAYABLE", reason: "the current route maps this event as before: replay it instead" }],
    });
    show();
    const region = await screen.findByRole("region", { name: "Dead letters" });
    fireEvent.click(await within(region).findByRole("button", { name: "Re-route w-1" }));
    const alert = await within(region).findByRole("alert");
    expect(alert.textContent).toContain("w-1: the current route maps this event as before: replay it instead (REPLAYABLE)");
    expect(admin.rerouteItems).toHaveBeenCalledWith(["w-1"]);
  });
});
