import type { FieldInfo, ObjectInfo } from "./api/types";

export function field(apiName: string, dataType: FieldInfo["dataType"], extra: Partial<FieldInfo> = {}): FieldInfo {
  return {
    apiName, label: apiName.replace(/([a-z])([A-Z])/g, "$1 $2"), dataType, required: false,
    createable: true, updateable: true, nameField: false, calculated: false, length: 255, scale: 0,
    picklistValues: [], referenceTo: [], relationshipName: null, system: false, ...extra,
  };
}

export function accountInfo(): ObjectInfo {
  const fields = [
    field("Name", "String", { required: true, nameField: true, label: "Account Name" }),
    field("Industry", "Picklist", {
      picklistValues: [
        { value: "Tech", label: "Technology", active: true },
        { value: "Old", label: "Retired", active: false },
      ],
    }),
    field("AnnualRevenue", "Currency", { label: "Annual Revenue", scale: 2 }),
    field("ParentId", "Reference", { label: "Parent Account", referenceTo: ["Account"], relationshipName: "Parent" }),
    field("Description", "TextArea"),
    field("AccountNumber", "String", { updateable: false, label: "Account Number" }),
    field("Score", "Int", { calculated: true }),
    field("CreatedDate", "DateTime", { createable: false, updateable: false, system: true, label: "Created Date" }),
  ];
  return {
    apiName: "Account", label: "Account", labelPlural: "Accounts", createable: true, updateable: true,
    deletable: true, nameField: "Name", fields: Object.fromEntries(fields.map((f) => [f.apiName, f])),
    fieldOrder: fields.map((f) => f.apiName), childRelationships: [],
    layout: {
      sections: [
        { heading: "Account Information", columns: 2, fields: ["Name", "Industry", "AnnualRevenue", "ParentId", "AccountNumber", "Score"] },
        { heading: "Description", columns: 1, fields: ["Description", "Unknown__c"] },
        { heading: "System Information", columns: 2, fields: ["CreatedDate"] },
      ],
    },
  };
}
