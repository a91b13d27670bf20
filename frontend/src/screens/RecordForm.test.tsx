import { cleanup, fireEvent, render, screen, waitFor } from "@testing-library/react";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ApiError } from "../api/http";
import { accountInfo } from "../test-fixtures";
import { RecordForm } from "./RecordForm";

const crm = vi.hoisted(() => ({
  createRecord: vi.fn(),
  updateRecord: vi.fn(),
  lookupSearch: vi.fn().mockResolvedValue([]),
}));
vi.mock("../api/crm", () => crm);

const RECORD = {
  id: "001000000000001AAA", apiName: "Account",
  fields: { Name: "Acme", Industry: "Tech", AnnualRevenue: 10, Description: null },
  lookups: {}, access: { editable: true, deletable: true },
};

beforeEach(() => vi.clearAllMocks());
afterEach(cleanup);

describe("RecordForm", () => {
  it("checks required fields before sending anything", async () => {
    render(<RecordForm info={accountInfo()} onClose={() => undefined} onSaved={() => undefined} />);
    fireEvent.click(screen.getByRole("button", { name: "Save" }));
    expect(await screen.findByText("Complete this field.")).toBeTruthy();
    expect(screen.getByLabelText(/Account Name/).getAttribute("aria-invalid")).toBe("true");
    expect(crm.createRecord).not.toHaveBeenCalled();
  });

  it("creates with the filled-in fields and the defaults (a related list's parent)", async () => {
    crm.createRecord.mockResolvedValue("001000000000002AAA");
    const saved = vi.fn();
    render(
      <RecordForm info={accountInfo()} defaults={{ ParentId: "001000000000009AAA" }}
        defaultNames={{ ParentId: "Acme Holdings" }} onClose={() => undefined} onSaved={saved} />,
    );
    expect((screen.getByRole("combobox", { name: "Parent Account" }) as HTMLInputElement).value).toBe("Acme Holdings");
    fireEvent.change(screen.getByLabelText(/Account Name/), { target: { value: "New Co" } });
    fireEvent.click(screen.getByRole("button", { name: "Save" }));
    await waitFor(() => expect(saved).toHaveBeenCalledWith("001000000000002AAA"));
    expect(crm.createRecord).toHaveBeenCalledWith("Account", { Name: "New Co", ParentId: "001000000000009AAA" });
  });

  it("edits send only what changed, and the server's error lands on its field", async () => {
    crm.updateRecord.mockRejectedValueOnce(
      new ApiError("revenue cannot be negative", 400, "FIELD_CUSTOM_VALIDATION_EXCEPTION", { AnnualRevenue: "revenue cannot be negative" }),
    );
    const saved = vi.fn();
    render(<RecordForm info={accountInfo()} record={RECORD} onClose={() => undefined} onSaved={saved} />);
    const revenue = screen.getByLabelText("Annual Revenue");
    fireEvent.change(revenue, { target: { value: "-5" } });
    fireEvent.click(screen.getByRole("button", { name: "Save" }));
    expect(await screen.findByText("revenue cannot be negative")).toBeTruthy();
    expect(crm.updateRecord).toHaveBeenCalledWith("Account", RECORD.id, { AnnualRevenue: -5 });
    expect(revenue.getAttribute("aria-invalid")).toBe("true");
    expect(saved).not.toHaveBeenCalled();
    crm.updateRecord.mockResolvedValueOnce(undefined);
    fireEvent.change(revenue, { target: { value: "5" } });
    expect(revenue.getAttribute("aria-invalid")).toBeNull(); // the error clears as you fix it
    fireEvent.click(screen.getByRole("button", { name: "Save" }));
    await waitFor(() => expect(saved).toHaveBeenCalledWith(RECORD.id));
  });

  it("an error without a field is shown on the form", async () => {
    crm.updateRecord.mockRejectedValueOnce(new ApiError("You do not have access to edit this record", 403, "INSUFFICIENT_ACCESS_OR_READONLY"));
    render(<RecordForm info={accountInfo()} record={RECORD} onClose={() => undefined} onSaved={() => undefined} />);
    fireEvent.change(screen.getByLabelText("Industry"), { target: { value: "" } });
    fireEvent.click(screen.getByRole("button", { name: "Save" }));
    expect((await screen.findByText("You do not have access to edit this record")).getAttribute("role")).toBe("alert");
  });
});
