import { describe, expect, it } from "vitest";
import { accountInfo, field } from "../test-fixtures";
import {
  decodeFilter, describeFilter, encodeFilter, filterableFields, filtersFromSearch, operatorsFor, searchWithFilters,
} from "./filters";

describe("list filters", () => {
  it("offers the server's operators by type, and none for formula, long text or most system fields", () => {
    expect(operatorsFor(field("Name", "String"))).toEqual(["equals", "contains", "starts_with"]);
    expect(operatorsFor(field("Industry", "Picklist"))).toEqual(["equals", "in"]);
    expect(operatorsFor(field("CloseDate", "Date"))).toEqual(["equals", "less", "less_or_equal", "greater", "greater_or_equal"]);
    expect(operatorsFor(field("Done", "Boolean"))).toEqual(["equals"]);
    expect(operatorsFor(field("ParentId", "Reference"))).toEqual(["equals"]);
    expect(operatorsFor(field("Description", "TextArea"))).toEqual([]);
    expect(operatorsFor(field("OwnerId", "Reference", { system: true }))).toEqual([]);
    expect(operatorsFor(field("CreatedDate", "DateTime", { system: true, calculated: true }))).toHaveLength(5);
    expect(filterableFields(accountInfo()).map((f) => f.apiName)).toEqual(
      ["Name", "AccountNumber", "AnnualRevenue", "CreatedDate", "Industry", "ParentId"],
    );
  });

  it("encodes Field:operator:value, commas inside `in` values escaped, and decodes it back", () => {
    const picked = { field: "Industry", operator: "in", values: ["Energy", "Media, Film"] };
    expect(encodeFilter(picked)).toBe("Industry:in:Energy,Media\\, Film");
    expect(decodeFilter(encodeFilter(picked))).toEqual(picked);
    const timed = { field: "Due__c", operator: "greater", values: ["2026-01-01T09:00:00.000Z"] };
    expect(decodeFilter(encodeFilter(timed))).toEqual(timed); // colons in the value stay
    expect(decodeFilter("Name:contains:a,b")).toEqual({ field: "Name", operator: "contains", values: ["a,b"] });
    expect(decodeFilter("Industry")).toBeNull();
    expect(decodeFilter(":equals:x")).toBeNull();
  });

  it("keeps filters in the URL query next to the other parameters", () => {
    const filters = [
      { field: "Industry", operator: "equals", values: ["Tech"] },
      { field: "AnnualRevenue", operator: "greater_or_equal", values: ["1000"] },
    ];
    const search = searchWithFilters("view=All_Accounts&filter=Old:equals:x", filters);
    expect(search).toBe("?view=All_Accounts&filter=Industry%3Aequals%3ATech&filter=AnnualRevenue%3Agreater_or_equal%3A1000");
    expect(filtersFromSearch(search)).toEqual(filters);
    expect(new URLSearchParams(search).get("view")).toBe("All_Accounts");
    expect(searchWithFilters(search, [])).toBe("?view=All_Accounts");
    expect(searchWithFilters("", [])).toBe("");
  });

  it("describes a filter with labels a user knows", () => {
    const info = accountInfo();
    expect(describeFilter({ field: "Industry", operator: "in", values: ["Tech", "Old"] }, info)).toBe(
      "Industry is any of Technology, Retired",
    );
    expect(describeFilter({ field: "AnnualRevenue", operator: "less", values: ["5"] }, info)).toBe(
      "Annual Revenue less than 5",
    );
  });
});
