import { cleanup, fireEvent, render, screen } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import { autoMatch, importableFields, mappingProblem, parseCsv } from "../api/imports";
import { accountInfo, field } from "../test-fixtures";
import { ColumnMapping } from "./ColumnMapping";

afterEach(cleanup);

const info = accountInfo();
const all = info.fieldOrder.map((n) => info.fields[n]);

describe("parseCsv", () => {
  it("reads the header and first row with quotes, commas, CRLF and a BOM", () => {
    const text = '\ufeffAccount Name,"Revenue, USD","Say ""hi"""\r\n"Acme, Inc",1000,"a\nb"\r\nNext,2,x\r\n';
    expect(parseCsv(text, 2)).toEqual([
      ["Account Name", "Revenue, USD", 'Say "hi"'],
      ["Acme, Inc", "1000", "a\nb"],
    ]);
  });

  it("takes a last line without a newline", () => {
    expect(parseCsv("Name", 2)).toEqual([["Name"]]);
  });
});

describe("autoMatch", () => {
  const fields = importableFields(all, "insert");

  it("matches by API name or label whatever the case and spacing, else skips", () => {
    expect(autoMatch(["account name", "ANNUALREVENUE", "Annual_Revenue", "industry", "Notes"], fields)).toEqual({
      "account name": "Name",
      ANNUALREVENUE: "AnnualRevenue",
      Annual_Revenue: "", // the field is taken by the first column
      industry: "Industry",
      Notes: "",
    });
  });

  it("never offers computed or system fields", () => {
    const names = fields.map((f) => f.apiName);
    expect(names).not.toContain("Score");
    expect(names).not.toContain("CreatedDate");
    expect(autoMatch(["Score", "Created Date"], fields)).toEqual({ Score: "", "Created Date": "" });
  });

  it("offers fields only updateable (not createable) for upsert", () => {
    const updateOnly = [...all, field("Rank", "Int", { createable: false })];
    expect(importableFields(updateOnly, "insert").map((f) => f.apiName)).not.toContain("Rank");
    expect(importableFields(updateOnly, "upsert").map((f) => f.apiName)).toContain("Rank");
  });
});

describe("mappingProblem", () => {
  const fields = importableFields(all, "upsert");
  it("asks for required fields, a single source per field and the external id", () => {
    expect(mappingProblem({ a: "", b: "" }, fields, "insert", null)).toMatch(/at least one column/);
    expect(mappingProblem({ a: "Industry" }, fields, "insert", null)).toMatch(/Account Name \(required\)/);
    expect(mappingProblem({ a: "Name", b: "Name" }, fields, "insert", null)).toMatch(/more than one column/);
    expect(mappingProblem({ a: "Name" }, fields, "upsert", null)).toMatch(/external id/);
    expect(mappingProblem({ a: "Name" }, fields, "upsert", "AccountNumber")).toMatch(/Account Number/);
    expect(mappingProblem({ a: "Name", b: "AccountNumber" }, fields, "upsert", "AccountNumber")).toBeNull();
    expect(mappingProblem({ a: "Name", b: "" }, fields, "insert", null)).toBeNull();
  });
});

describe("ColumnMapping", () => {
  const fields = importableFields(all, "insert");

  it("shows each column with its first value and the chosen field, editable", () => {
    const onChange = vi.fn();
    render(
      <ColumnMapping headers={["Account Name", "Notes"]} samples={["Acme", "call back"]} fields={fields}
        mapping={{ "Account Name": "Name", Notes: "" }} onChange={onChange} />,
    );
    const name = screen.getByLabelText("Field for column Account Name") as HTMLSelectElement;
    const notes = screen.getByLabelText("Field for column Notes") as HTMLSelectElement;
    expect(name.value).toBe("Name");
    expect(notes.value).toBe("");
    expect(screen.getByText("call back")).toBeTruthy();
    fireEvent.change(notes, { target: { value: "Description" } });
    expect(onChange).toHaveBeenCalledWith({ "Account Name": "Name", Notes: "Description" });
    expect(Array.from(name.options).map((o) => o.value)).not.toContain("Score");
  });

  it("flags a field mapped from two columns", () => {
    render(
      <ColumnMapping headers={["A", "B"]} samples={[]} fields={fields} mapping={{ A: "Name", B: "Name" }} onChange={() => undefined} />,
    );
    expect(screen.getAllByText("Mapped from more than one column")).toHaveLength(2);
    expect(screen.getByLabelText("Field for column A").getAttribute("aria-invalid")).toBe("true");
  });

  it("shows the server's refusal on the column it names", () => {
    render(
      <ColumnMapping headers={["Account Name", "Score"]} samples={[]} fields={fields}
        mapping={{ "Account Name": "Name", Score: "" }} onChange={() => undefined}
        errors={{ Score: "Score cannot be set" }} />,
    );
    expect(screen.getByRole("alert").textContent).toBe("Score cannot be set");
    expect(screen.getByLabelText("Field for column Score").getAttribute("aria-invalid")).toBe("true");
    expect(screen.getByLabelText("Field for column Account Name").getAttribute("aria-invalid")).toBeNull();
  });
});
