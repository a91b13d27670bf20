import { act, cleanup, fireEvent, render, screen } from "@testing-library/react";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { FieldValue } from "../api/types";
import { field } from "../test-fixtures";
import { FieldInput } from "./FieldInput";
import { displayValue, fromLocalInput, parseInput, toLocalInput } from "./format";

afterEach(cleanup);

function renderInput(f: Parameters<typeof FieldInput>[0]["field"], value: FieldValue = null, extra = {}) {
  const onChange = vi.fn();
  render(<FieldInput field={f} value={value} onChange={onChange} {...extra} />);
  return onChange;
}

describe("FieldInput", () => {
  it.each([
    ["String", "text"],
    ["Email", "email"],
    ["Phone", "tel"],
    ["Url", "url"],
    ["Double", "number"],
    ["Int", "number"],
    ["Currency", "number"],
    ["Percent", "number"],
    ["Date", "date"],
    ["DateTime", "datetime-local"],
  ] as const)("%s is a labelled <input type=%s>", (dataType, type) => {
    renderInput(field("Thing", dataType, { label: "The Thing" }));
    const input = screen.getByLabelText("The Thing") as HTMLInputElement;
    expect(input.tagName).toBe("INPUT");
    expect(input.type).toBe(type);
  });

  it("text sends null when cleared and the text otherwise", () => {
    const onChange = renderInput(field("Title", "String"), "CEO");
    const input = screen.getByLabelText("Title");
    fireEvent.change(input, { target: { value: "CTO" } });
    fireEvent.change(input, { target: { value: "" } });
    expect(onChange.mock.calls).toEqual([["CTO"], [null]]);
  });

  it("numbers are sent as numbers", () => {
    const onChange = renderInput(field("AnnualRevenue", "Currency", { label: "Revenue", scale: 2 }));
    fireEvent.change(screen.getByLabelText("Revenue"), { target: { value: "-5.25" } });
    expect(onChange).toHaveBeenCalledWith(-5.25);
    expect(screen.getByText("Amount")).toBeTruthy();
  });

  it("a checkbox is checked from true and sends booleans", () => {
    const onChange = renderInput(field("IsActive", "Boolean", { label: "Active" }), true);
    const box = screen.getByLabelText("Active") as HTMLInputElement;
    expect(box.type).toBe("checkbox");
    expect(box.checked).toBe(true);
    fireEvent.click(box);
    expect(onChange).toHaveBeenCalledWith(false);
  });

  it("a picklist offers --None-- and the active values only", () => {
    const f = field("Industry", "Picklist", {
      picklistValues: [
        { value: "Tech", label: "Technology", active: true },
        { value: "Old", label: "Retired", active: false },
      ],
    });
    const onChange = renderInput(f);
    const select = screen.getByLabelText("Industry") as HTMLSelectElement;
    expect([...select.options].map((o) => o.textContent)).toEqual(["--None--", "Technology"]);
    fireEvent.change(select, { target: { value: "Tech" } });
    fireEvent.change(select, { target: { value: "" } });
    expect(onChange.mock.calls).toEqual([["Tech"], [null]]);
  });

  it("a picklist keeps showing a record's inactive value", () => {
    const f = field("Industry", "Picklist", { picklistValues: [{ value: "Old", label: "Retired", active: false }] });
    renderInput(f, "Old");
    expect((screen.getByLabelText("Industry") as HTMLSelectElement).value).toBe("Old");
  });

  it("a text area is a labelled <textarea>", () => {
    renderInput(field("Description", "TextArea"), "line 1\nline 2");
    const area = screen.getByLabelText("Description") as HTMLTextAreaElement;
    expect(area.tagName).toBe("TEXTAREA");
    expect(area.value).toBe("line 1\nline 2");
  });

  it("the server's error is shown on the field and described by it", () => {
    renderInput(field("AnnualRevenue", "Currency", { label: "Revenue" }), -1, { error: "revenue cannot be negative" });
    const input = screen.getByLabelText("Revenue");
    expect(input.getAttribute("aria-invalid")).toBe("true");
    const message = document.getElementById(input.getAttribute("aria-describedby")!);
    expect(message?.textContent).toBe("revenue cannot be negative");
    expect(screen.getByRole("alert").textContent).toBe("revenue cannot be negative");
  });

  it("required fields are marked", () => {
    renderInput(field("Name", "String", { required: true }));
    expect((screen.getByLabelText(/Name/) as HTMLInputElement).required).toBe(true);
  });

  it("a lookup searches as you type and picks with the keyboard", async () => {
    vi.useFakeTimers();
    const search = vi.fn().mockResolvedValue([
      { id: "001000000000001AAA", name: "Acme" },
      { id: "001000000000002AAA", name: "Acme Europe" },
    ]);
    const f = field("AccountId", "Reference", { label: "Account", referenceTo: ["Account"] });
    const onChange = renderInput(f, null, { search });
    const box = screen.getByRole("combobox", { name: "Account" });
    fireEvent.change(box, { target: { value: "a" } });
    await act(() => vi.advanceTimersByTimeAsync(300));
    expect(search).not.toHaveBeenCalled(); // fewer than 2 characters
    fireEvent.change(box, { target: { value: "acm" } });
    await act(() => vi.advanceTimersByTimeAsync(300));
    expect(search).toHaveBeenCalledWith("Account", "acm");
    expect(screen.getAllByRole("option").map((o) => o.textContent)).toEqual(["Acme", "Acme Europe"]);
    fireEvent.keyDown(box, { key: "ArrowDown" });
    fireEvent.keyDown(box, { key: "Enter" });
    expect(onChange).toHaveBeenLastCalledWith("001000000000002AAA");
    expect((box as HTMLInputElement).value).toBe("Acme Europe");
    vi.useRealTimers();
  });

  it("a lookup shows the looked-up record's name, not its id", () => {
    const f = field("AccountId", "Reference", { label: "Account", referenceTo: ["Account"] });
    renderInput(f, "001000000000001AAA", { lookupName: "Acme" });
    expect((screen.getByRole("combobox") as HTMLInputElement).value).toBe("Acme");
  });
});

describe("values", () => {
  it("display by type", () => {
    expect(displayValue(field("X", "Boolean"), true)).toBe("Yes");
    expect(displayValue(field("X", "Percent"), 12.5)).toMatch(/12[.,]5%/);
    expect(displayValue(field("X", "Currency", { scale: 2 }), 1234.5)).toMatch(/1,?234[.,]50/);
    expect(displayValue(field("X", "MultiPicklist"), "A;B")).toBe("A, B");
    expect(displayValue(field("X", "Reference"), "001x", "Acme")).toBe("Acme");
    expect(displayValue(field("X", "String"), null)).toBe("");
  });

  it("datetimes round-trip through the local input", () => {
    const local = toLocalInput("2026-11-29T21:06:00.000+0000");
    expect(local).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$/);
    expect(fromLocalInput(local)).toBe("2026-11-29T21:06:00.000Z");
    expect(fromLocalInput("")).toBeNull();
  });

  it("number entry becomes a number, empty becomes null", () => {
    expect(parseInput(field("X", "Int"), "42")).toBe(42);
    expect(parseInput(field("X", "String"), " ")).toBeNull();
  });
});
