import { cleanup, fireEvent, render, screen, within } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { accountInfo } from "../test-fixtures";
import { LayoutRenderer } from "./LayoutRenderer";

afterEach(cleanup);

const VALUES = {
  Name: "Acme", Industry: "Tech", AnnualRevenue: 1000, ParentId: "001000000000009AAA",
  Description: null, AccountNumber: "A-1", Score: 7, CreatedDate: "2026-11-29T21:06:20.000+0000",
};

describe("LayoutRenderer (view)", () => {
  it("renders each section with its heading and fields in layout order", () => {
    const info = accountInfo();
    render(<LayoutRenderer mode="view" info={info} sections={info.layout.sections} values={VALUES} lookups={{ ParentId: "Acme Holdings" }} />);
    const headings = screen.getAllByRole("heading").map((h) => h.textContent);
    expect(headings).toEqual(["Account Information", "Description", "System Information"]);
    const first = screen.getByRole("region", { name: "Account Information" });
    const labels = within(first).getAllByRole("term").map((t) => t.textContent);
    expect(labels).toEqual(["Account Name", "Industry", "Annual Revenue", "Parent Account", "Account Number", "Score"]);
    expect(first.querySelector("dl")!.className).toContain("cols-2");
    expect(screen.getByRole("region", { name: "Description" }).querySelector("dl")!.className).toContain("cols-1");
  });

  it("shows display values: picklist labels, lookup names as links, empty as a dash", () => {
    const info = accountInfo();
    render(<LayoutRenderer mode="view" info={info} sections={info.layout.sections} values={VALUES} lookups={{ ParentId: "Acme Holdings" }} />);
    expect(screen.getByText("Technology")).toBeTruthy();
    const link = screen.getByRole("link", { name: "Acme Holdings" });
    expect(link.getAttribute("href")).toBe("/r/Account/001000000000009AAA");
    const description = document.querySelector('[data-field="Description"] dd')!;
    expect(description.textContent).toBe("—");
  });

  it("leaves out fields the layout names but the caller cannot read", () => {
    const info = accountInfo();
    render(<LayoutRenderer mode="view" info={info} sections={info.layout.sections} values={VALUES} />);
    expect(document.querySelector('[data-field="Unknown__c"]')).toBeNull();
  });
});

describe("LayoutRenderer (forms)", () => {
  it("create shows one input per createable field, not calculated or system ones", () => {
    const info = accountInfo();
    render(<LayoutRenderer mode="create" info={info} sections={info.layout.sections} values={{}} onChange={() => undefined} />);
    const names = [...document.querySelectorAll("input, select, textarea")].map((e) => e.getAttribute("name"));
    expect(names).toEqual(["Name", "Industry", "AnnualRevenue", "ParentId", "AccountNumber", "Description"]);
    expect(screen.queryByRole("group", { name: "System Information" })).toBeNull();
  });

  it("edit leaves out fields that cannot be updated", () => {
    const info = accountInfo();
    render(<LayoutRenderer mode="edit" info={info} sections={info.layout.sections} values={VALUES} onChange={() => undefined} />);
    expect(screen.queryByLabelText("Account Number")).toBeNull();
    expect((screen.getByLabelText(/Account Name/) as HTMLInputElement).value).toBe("Acme");
  });

  it("reports changes by field and shows errors on their field", () => {
    const info = accountInfo();
    const onChange = vi.fn();
    render(
      <LayoutRenderer mode="edit" info={info} sections={info.layout.sections} values={VALUES}
        errors={{ AnnualRevenue: "revenue cannot be negative" }} onChange={onChange} />,
    );
    fireEvent.change(screen.getByLabelText("Industry"), { target: { value: "" } });
    expect(onChange).toHaveBeenCalledWith("Industry", null);
    const revenue = screen.getByLabelText("Annual Revenue");
    expect(revenue.getAttribute("aria-invalid")).toBe("true");
    expect(screen.getAllByRole("alert").map((a) => a.textContent)).toEqual(["revenue cannot be negative"]);
  });
});
