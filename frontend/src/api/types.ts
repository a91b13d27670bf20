// The shapes the screens use. They follow the UI API contract (docs/ui-api.md: object-info,
// record layout sections, search groups) so the adapter can move to those endpoints alone.

export type DataType =
  | "String" | "TextArea" | "Email" | "Phone" | "Url" | "Double" | "Int" | "Currency"
  | "Percent" | "Boolean" | "Date" | "DateTime" | "Picklist" | "MultiPicklist" | "Reference"
  | "Id";

export interface PicklistValue {
  value: string;
  label: string;
  active: boolean;
}

export interface FieldInfo {
  apiName: string;
  label: string;
  dataType: DataType;
  required: boolean;
  createable: boolean;
  updateable: boolean;
  nameField: boolean;
  calculated: boolean;
  length: number;
  scale: number;
  picklistValues: PicklistValue[];
  referenceTo: string[];
  relationshipName: string | null;
  system: boolean;
  /** An external id field (CSV upsert matches on it). */
  externalId?: boolean;
}

export interface LayoutSection {
  heading: string;
  columns: number;
  fields: string[];
}

export interface ChildRelationship {
  childObjectApiName: string;
  fieldName: string;
  relationshipName: string | null;
}

export interface ObjectInfo {
  apiName: string;
  label: string;
  labelPlural: string;
  createable: boolean;
  updateable: boolean;
  deletable: boolean;
  nameField: string;
  fields: Record<string, FieldInfo>;
  fieldOrder: string[];
  childRelationships: ChildRelationship[];
  layout: { sections: LayoutSection[] };
}

export interface NavItem {
  objectApiName: string;
  label: string;
  labelPlural: string;
  createable: boolean;
  defaultListViewApiName: string | null;
  listViews: Array<{ apiName: string; label: string }>;
}

export interface Access {
  editable: boolean;
  deletable: boolean;
}

export type FieldValue = string | number | boolean | null;

export interface RecordData {
  id: string;
  apiName: string;
  fields: Record<string, FieldValue>;
  /** Display names of looked-up records, by reference field. */
  lookups: Record<string, string>;
  access: Access;
}

export interface HistoryEntry {
  field: string;
  oldValue: FieldValue;
  newValue: FieldValue;
  changedDate: string;
}

export interface RecordPage {
  record: RecordData;
  sections: LayoutSection[];
  relatedLists: RelatedList[];
  history: HistoryEntry[];
}

export interface ListColumn {
  path: string;
  label: string;
  dataType: DataType;
  sortable: boolean;
}

export interface RelatedList {
  childObjectApiName: string;
  fieldName: string;
  label: string;
  records: Array<{ id: string; name: string }>;
  hasMore: boolean;
}

export interface ListPage {
  label: string;
  columns: ListColumn[];
  records: RecordData[];
  count: number;
  sortBy: { path: string; descending: boolean } | null;
  nextPageToken: string | null;
  previousPageToken: string | null;
  currentPageToken: string | null;
  createable: boolean;
}

export interface SearchGroup {
  objectApiName: string;
  label: string;
  records: Array<{ id: string; apiName: string; name: string }>;
}
