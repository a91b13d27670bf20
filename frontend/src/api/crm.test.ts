// The adapter's projection of the UI API answers (docs/ui-api.md) into screen shapes.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { clearMetadataCache, listRecords, objectInfo, recordPage, search } from "./crm";

const ID = "001000000000001AAA";
let replies: Record<string, unknown>;
const calls: string[] = [];

beforeEach(() => {
  clearMetadataCache();
  calls.length = 0;
  vi.stubGlobal("fetch", vi.fn(async (url: string) => {
    calls.push(url);
    const key = Object.keys(replies).find((k) => url.includes(k));
    if (!key) return new Response("[]", { status: 404 });
    return new Response(JSON.stringify(replies[key]), { status: 200, headers: { "Content-Type": "application/json" } });
  }));
});
afterEach(() => vi.unstubAllGlobals());

describe("crm adapter", () => {
  it("object-info: fields, system fields, active picklists and the form layout", async () => {
    replies = {
      "/ui-api/object-info/Account": {
        apiName: "Account", label: "Account", labelPlural: "Accounts", createable: true, updateable: true,
        deletable: false, nameFields: ["Name"], childRelationships: [],
        fields: {
          Name: { apiName: "Name", label: "Account Name", dataType: "String", nexusType: "text", required: true, createable: true, updateable: true, nameField: true, picklistValues: null, referenceToInfos: [] },
          ParentId: { apiName: "ParentId", label: "Parent", dataType: "Reference", nexusType: "lookup", createable: true, updateable: true, picklistValues: null, referenceToInfos: [{ apiName: "Account" }], relationshipName: "Parent" },
          CreatedDate: { apiName: "CreatedDate", label: "Created Date", dataType: "DateTime", nexusType: "system", createable: false, updateable: false, picklistValues: null, referenceToInfos: [] },
        },
        layout: { sections: [{ heading: "Account Information", columns: 2, fields: ["Name", "ParentId"] }], relatedLists: [] },
      },
    };
    const info = await objectInfo("Account");
    expect(info.fields.Name.required).toBe(true);
    expect(info.fields.ParentId.referenceTo).toEqual(["Account"]);
    expect(info.fields.CreatedDate.system).toBe(true);
    expect(info.deletable).toBe(false);
    expect(info.layout.sections).toEqual([{ heading: "Account Information", columns: 2, fields: ["Name", "ParentId"] }]);
    await objectInfo("Account");
    expect(calls).toHaveLength(1); // metadata is cached
  });

  it("record-ui: layout rows become section fields; access, lookups and related lists carry over", async () => {
    replies = {
      [`/ui-api/record-ui/${ID}`]: {
        records: { [ID]: { apiName: "Account", id: ID, fields: {
          Name: { value: "Acme", displayValue: null },
          ParentId: { value: "001000000000009AAA", displayValue: "Acme Holdings" },
          CreatedDate: { value: "2026-11-29T21:06:20.000+0000", displayValue: null },
        } } },
        access: { [ID]: { readable: true, editable: false, deletable: false } },
        layouts: { [ID]: { objectApiName: "Account", sections: [{ heading: "Info", columns: 2, layoutRows: [
          { layoutItems: [{ field: "Name" }, { field: "ParentId" }] },
        ] }] } },
        relatedLists: { [ID]: [{ childObjectApiName: "Contact", fieldApiName: "AccountId", label: "Contacts", records: [{ id: "003000000000001AAA", name: "Ada" }], hasMore: false }] },
        history: { [ID]: [{ field: "Name", oldValue: "Acme Inc", newValue: "Acme", changedDate: "2026-11-29T21:06:20.000+0000" }] },
      },
    };
    const page = await recordPage(ID);
    expect(page.record.fields.Name).toBe("Acme");
    expect(page.record.lookups).toEqual({ ParentId: "Acme Holdings" });
    expect(page.record.access).toEqual({ editable: false, deletable: false });
    expect(page.sections.map((s) => [s.heading, s.fields])).toEqual([
      ["Info", ["Name", "ParentId"]],
      ["System Information", ["CreatedDate"]],
    ]);
    expect(page.relatedLists[0]).toMatchObject({ childObjectApiName: "Contact", fieldName: "AccountId", records: [{ id: "003000000000001AAA", name: "Ada" }] });
    expect(page.history[0]).toMatchObject({ field: "Name", oldValue: "Acme Inc", newValue: "Acme" });
  });

  it("record-ui: a malformed id never reaches the server", async () => {
    replies = {};
    await expect(recordPage("../../admin")).rejects.toThrow("does not exist");
    expect(calls).toEqual([]);
  });

  it("list-ui: columns by path, page tokens, sort and per-row access", async () => {
    replies = {
      "/ui-api/list-ui/Contact/All_Contacts": {
        info: {
          label: "All Contacts", createable: true,
          displayColumns: [{ fieldApiName: "Name", label: "Name", dataType: "String", sortable: true }, { fieldApiName: "Account.Name", label: "Account Name", dataType: "String", sortable: true }],
          orderedByInfo: [{ fieldApiName: "LastName", isAscending: false }],
        },
        records: {
          count: 60, pageSize: 25, currentPageToken: "25", nextPageToken: "50", previousPageToken: "0",
          records: [{ apiName: "Contact", id: "003000000000001AAA", fields: { Name: { value: "Ada" }, "Account.Name": { value: "Acme" } }, access: { editable: true, deletable: false } }],
        },
      },
    };
    const page = await listRecords("Contact", { listView: "All_Contacts", pageSize: 25, pageToken: "25", sortBy: { path: "Name", descending: true } });
    expect(calls[0]).toContain("pageToken=25");
    expect(calls[0]).toContain("sortBy=-Name");
    expect(page.columns.map((c) => c.path)).toEqual(["Name", "Account.Name"]);
    expect(page.records[0].fields["Account.Name"]).toBe("Acme");
    expect(page.records[0].access).toEqual({ editable: true, deletable: false });
    expect(page.sortBy).toEqual({ path: "LastName", descending: true });
    expect([page.count, page.nextPageToken, page.previousPageToken]).toEqual([60, "50", "0"]);
  });

  it("search: groups labelled from nav-items", async () => {
    replies = {
      "/ui-api/nav-items": { navItems: [{ objectApiName: "Account", label: "Account", labelPlural: "Accounts", createable: true, defaultListViewApiName: null }] },
      "/ui-api/search": { query: "acm", results: [{ objectApiName: "Account", records: [{ id: ID, apiName: "Account", name: "Acme" }] }] },
    };
    const groups = await search("acm", "Account");
    expect(calls.find((c) => c.includes("/search"))).toContain("objectApiName=Account");
    expect(groups).toEqual([{ objectApiName: "Account", label: "Accounts", records: [{ id: ID, apiName: "Account", name: "Acme" }] }]);
  });
});
