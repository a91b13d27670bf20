// The Bulk jobs panel as an administrator sees it: a running job's bar moves on its own until
// the job completes (and the refreshing stops), Abort is offered only while a job's work has not
// ended and asks Runtime, filters and "Load more" reach the server, a refusal is shown.
import { act, cleanup, fireEvent, render, screen, within } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { BulkJob } from "../api/bulkJobs";
import { ApiError } from "../api/http";
import { ToastProvider } from "../ui/components";
import { BulkJobsPanel, REFRESH_MS } from "./BulkJobsPanel";

const bulk = vi.hoisted(() => ({ bulkJobs: vi.fn(), bulkJob: vi.fn(), abortBulkJob: vi.fn() }));
vi.mock("../api/bulkJobs", async (original) => ({ ...(await original<object>()), ...bulk }));

const job = (over: Partial<BulkJob> = {}): BulkJob => ({
  id: "750A", kind: "ingest", object: "Contact", operation: "insert", state: "InProgress",
  createdById: "005R", createdBy: "rep1", createdAtMs: Date.UTC(2026, 11, 7, 10), startedAtMs: Date.UTC(2026, 11, 7, 10),
  finishedAtMs: null, recordsProcessed: 1000, recordsFailed: 0, recordsTotal: 4000, chunksDone: 1, chunksTotal: 4,
  errorMessage: null, abortable: true, ...over,
});
const page = (...jobs: BulkJob[]) => ({ jobs, nextCursor: null });
const bar = (id: string) => screen.getByRole("progressbar", { name: `Progress of ${id}` });
const show = () => render(<ToastProvider><BulkJobsPanel /></ToastProvider>);

beforeEach(() => {
  vi.clearAllMocks();
  vi.useFakeTimers({ shouldAdvanceTime: true });
});
afterEach(() => {
  cleanup();
  vi.useRealTimers();
});

describe("BulkJobsPanel", () => {
  it("refreshes a running job's progress until it completes, then stops refreshing", async () => {
    bulk.bulkJobs
      .mockResolvedValueOnce(page(job()))
      .mockResolvedValueOnce(page(job({ recordsProcessed: 3000, chunksDone: 3 })))
      .mockResolvedValue(page(job({
        state: "JobComplete", recordsProcessed: 4000, recordsFailed: 2, chunksDone: 4, abortable: false,
        finishedAtMs: Date.UTC(2026, 11, 7, 10, 1),
      })));
    show();
    await screen.findByText("1000 / 4000 records");
    expect(bar("750A").getAttribute("aria-valuenow")).toBe("25");
    expect(screen.getByRole("button", { name: "Abort 750A" })).toBeTruthy();

    await act(() => vi.advanceTimersByTimeAsync(REFRESH_MS));
    await screen.findByText("3000 / 4000 records");
    expect(bar("750A").getAttribute("aria-valuenow")).toBe("75");

    await act(() => vi.advanceTimersByTimeAsync(REFRESH_MS));
    const row = (await screen.findByText("JobComplete", { selector: "[data-state]" })).closest("tr")!;
    expect(row.textContent).toContain("4 / 4");
    expect(row.textContent).toContain("2 records");
    expect(row.textContent).toContain("2026-12-07 10:01:00");
    expect(bar("750A").getAttribute("aria-valuenow")).toBe("100");
    expect(within(row).queryByRole("button", { name: "Abort 750A" })).toBeNull();

    const calls = bulk.bulkJobs.mock.calls.length;
    await act(() => vi.advanceTimersByTimeAsync(REFRESH_MS * 3));
    expect(bulk.bulkJobs.mock.calls.length).toBe(calls); // nothing runs: no more refreshes
  });

  it("aborts through Runtime and shows a refusal's reason", async () => {
    bulk.bulkJobs
      .mockResolvedValueOnce(page(job({ state: "Open", recordsTotal: 0, chunksTotal: 0, recordsProcessed: 0 })))
      .mockResolvedValue(page(job({ state: "Aborted", abortable: false })));
    bulk.abortBulkJob.mockResolvedValue({});
    show();
    fireEvent.click(await screen.findByRole("button", { name: "Abort 750A" }));
    expect(bulk.abortBulkJob).toHaveBeenCalledWith("750A");
    expect(await screen.findByText("Aborted", { selector: "[data-state]" })).toBeTruthy();
    expect(screen.getByText("Job 750A aborted")).toBeTruthy();

    bulk.bulkJobs.mockResolvedValue(page(job({ id: "750B" })));
    bulk.abortBulkJob.mockRejectedValue(new ApiError("the job is JobComplete: it cannot be aborted", 409, "INVALIDJOBSTATE"));
    fireEvent.click(screen.getByRole("button", { name: "Filter" }));
    fireEvent.click(await screen.findByRole("button", { name: "Abort 750B" }));
    expect(await screen.findByText("the job is JobComplete: it cannot be aborted")).toBeTruthy();
  });

  it("sends the filters, pages on with the cursor, and says when there are no jobs", async () => {
    bulk.bulkJobs
      .mockResolvedValueOnce({ jobs: [job({ state: "Failed", abortable: false, errorMessage: "InvalidBatch : Field name not found : Nope" })], nextCursor: "c1" })
      .mockResolvedValueOnce(page(job({ id: "750Z", state: "JobComplete", abortable: false })))
      .mockResolvedValue(page());
    show();
    expect(await screen.findByText("0; InvalidBatch : Field name not found : Nope")).toBeTruthy();
    fireEvent.click(screen.getByRole("button", { name: "Load more" }));
    expect(await screen.findByText("750Z")).toBeTruthy();
    expect(bulk.bulkJobs).toHaveBeenLastCalledWith({}, { cursor: "c1", limit: 50 });
    expect(screen.getByText("750A")).toBeTruthy(); // appended, not replaced

    bulk.bulkJob.mockResolvedValue({
      ...job({ id: "750Z", state: "JobComplete", recordsProcessed: 4000 }), apiVersion: "59.0", externalIdField: null,
      columnDelimiter: "COMMA", lineEnding: "LF", columns: ["FirstName", "LastName"], uploadedBytes: 9000, processingMs: 1500,
    });
    fireEvent.click(screen.getByRole("button", { name: "Details of 750Z" }));
    const dialog = await screen.findByRole("dialog", { name: "Bulk job 750Z" });
    expect(await within(dialog).findByText("FirstName, LastName")).toBeTruthy();
    expect(within(dialog).getByText("1.5 s")).toBeTruthy();
    fireEvent.click(within(dialog).getByRole("button", { name: "Close" }));

    const filters = screen.getByRole("form", { name: "Bulk job filters" });
    fireEvent.change(within(filters).getByLabelText("State"), { target: { value: "Open" } });
    fireEvent.change(within(filters).getByLabelText("Created by"), { target: { value: "rep2" } });
    fireEvent.click(within(filters).getByRole("button", { name: "Filter" }));
    expect(await screen.findByText("No bulk jobs")).toBeTruthy();
    expect(bulk.bulkJobs).toHaveBeenLastCalledWith({ state: "Open", createdBy: "rep2" }, { limit: 50 });
  });
});
