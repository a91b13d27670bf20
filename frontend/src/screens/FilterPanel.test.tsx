import { cleanup, fireEvent, render, screen, within } from "@testing-library/react";
import axe from "axe-core";
import { afterEach, describe, expect, it, vi } from "vitest";
import { accountInfo } from "../test-fixtures";
import { FilterPanel } from "./FilterPanel";

afterEach(cleanup);

describe("FilterPanel", () => {
  it("adds a picklist filter from labelled field, operator and value inputs", () => {
    const onChange = vi.fn();
    render(<FilterPanel info={accountInfo()} filters={[]} onChange={onChange} />);
    fireEvent.click(screen.getByRole("button", { name: "Add filter" }));
    fireEvent.change(screen.getByLabelText("Field"), { target: { value: "Industry" } });
    const operator = screen.getByLabelText("Operator") as HTMLSelectElement;
    expect([...operator.options].map((o) => o.textContent)).toEqual(["equals", "is any of"]);
    const apply = screen.getByRole("button", { name: "Apply" });
    expect(apply).toHaveProperty("disabled", true); // no value yet
    const value = screen.getByLabelText("Value") as HTMLSelectElement;
    expect([...value.options].map((o) => o.value)).toEqual(["", "Tech"]); // active values only
    fireEvent.change(value, { target: { value: "Tech" } });
    fireEvent.click(apply);
    expect(onChange).toHaveBeenCalledWith([{ field: "Industry", operator: "equals", values: ["Tech"] }]);
  });

  it("offers range operators and a number input for a currency field", () => {
    const onChange = vi.fn();
    render(<FilterPanel info={accountInfo()} filters={[]} onChange={onChange} />);
    fireEvent.click(screen.getByRole("button", { name: "Add filter" }));
    fireEvent.change(screen.getByLabelText("Field"), { target: { value: "AnnualRevenue" } });
    fireEvent.change(screen.getByLabelText("Operator"), { target: { value: "greater_or_equal" } });
    const value = screen.getByLabelText("Value") as HTMLInputElement;
    expect(value.type).toBe("number");
    fireEvent.change(value, { target: { value: "1500" } });
    fireEvent.submit(screen.getByRole("form", { name: "Add filter" }));
    expect(onChange).toHaveBeenCalledWith([{ field: "AnnualRevenue", operator: "greater_or_equal", values: ["1500"] }]);
  });

  it("shows filters as chips a keyboard user can remove", async () => {
    const onChange = vi.fn();
    const filters = [
      { field: "Industry", operator: "equals", values: ["Tech"] },
      { field: "Name", operator: "contains", values: ["Acme"] },
    ];
    const { container } = render(<FilterPanel info={accountInfo()} filters={filters} onChange={onChange} />);
    const chips = within(screen.getByRole("list", { name: "Filters" })).getAllByRole("listitem");
    expect(chips.map((c) => c.textContent)).toEqual(["Industry equals Technology×", "Account Name contains Acme×"]);
    const remove = screen.getByRole("button", { name: "Remove filter Industry equals Technology" });
    expect(remove.tagName).toBe("BUTTON"); // focusable, Enter/Space activate it
    fireEvent.click(remove);
    expect(onChange).toHaveBeenCalledWith([filters[1]]);
    // colour contrast needs a canvas (jsdom has none); the browser test checks it
    const results = await axe.run(container, { rules: { "color-contrast": { enabled: false } } });
    expect(results.violations).toEqual([]);
  });
});
