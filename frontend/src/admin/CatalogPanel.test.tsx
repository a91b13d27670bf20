// Installing a package shows the release's states ticking while the job runs, then its journal.
import { cleanup, fireEvent, render, screen, waitFor, within } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ToastProvider } from "../ui/components";
import { CatalogPanel, runningReport } from "./CatalogPanel";

const admin = vi.hoisted(() => ({ catalogStatus: vi.fn(), installPackage: vi.fn(), uninstallApp: vi.fn() }));
vi.mock("../api/admin", async (original) => ({ ...(await original<object>()), ...admin }));

const JOB = { operation: "install", app_id: "acme", version: "1.0.0", catalog_revision: null, error: null };
const status = (jobs: object[]) => ({ org_id: "o", active_revision: 3, catalog_revision: 3, apps: [], jobs, installations: {} });
const step = (state: string) =>
  within(screen.getByRole("list", { name: "install of acme" })).getByText(new RegExp(`^${state}$`)).closest("li")!;

beforeEach(() => vi.clearAllMocks());
afterEach(cleanup);

describe("CatalogPanel", () => {
  it("ticks the running job's states live, then shows the finished journal", async () => {
    admin.catalogStatus
      .mockResolvedValueOnce(status([{ ...JOB, job_id: "old", state: "ACTIVE" }])) // first render
      .mockResolvedValue(status([{ ...JOB, job_id: "new", state: "DDL_RECONCILED" }])); // while it runs
    let finish: (value: unknown) => void = () => undefined;
    admin.installPackage.mockReturnValue(new Promise((resolve) => { finish = resolve; }));
    render(<ToastProvider><CatalogPanel /></ToastProvider>);
    await screen.findByText("Active CatalogRevision 3");

    const file = new File(["app_id: acme\n"], "acme.yaml", { type: "text/yaml" });
    Object.defineProperty(file, "text", { value: async () => "app_id: acme\n" }); // jsdom has no File.text
    fireEvent.change(screen.getByLabelText("Package file"), { target: { files: [file] } });

    await waitFor(() => expect(step("DDL_RECONCILED").className).toBe("step-done"));
    expect(step("VALIDATED").className).toBe("step-done");
    expect(step("CATALOG_COMMITTED").className).toBe("step-todo");
    expect(step("ACTIVE").className).toBe("step-todo");

    finish({ ...JOB, state: "ACTIVE", steps: runningReport({ ...JOB, job_id: "new", state: "ACTIVE" }).steps });
    await waitFor(() => expect(step("ACTIVE").className).toBe("step-done"));
    expect(screen.queryByText("Refused")).toBeNull();
  });
});
