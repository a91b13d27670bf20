// A list screen's own filters (docs/ui-api.md, list-ui `filter=Field:operator:value`): which
// fields and operators a user may pick, and how filters travel in the screen's URL and the API.
import type { FieldInfo, ObjectInfo } from "./types";

export interface ListFilter {
  field: string;
  operator: string;
  /** One value; several only for `in`. */
  values: string[];
}

export const MAX_FILTERS = 10;

const TEXT = ["equals", "contains", "starts_with"];
const RANGE = ["equals", "less", "less_or_equal", "greater", "greater_or_equal"];
const BY_TYPE: Record<string, string[]> = {
  String: TEXT, Email: TEXT, Phone: TEXT, Url: TEXT,
  Picklist: ["equals", "in"],
  Int: RANGE, Double: RANGE, Currency: RANGE, Percent: RANGE, Date: RANGE, DateTime: RANGE,
  Boolean: ["equals"],
  Reference: ["equals"],
};

export const OPERATOR_LABELS: Record<string, string> = {
  equals: "equals", contains: "contains", starts_with: "starts with", in: "is any of",
  less: "less than", less_or_equal: "at most", greater: "greater than", greater_or_equal: "at least",
};

/** The system fields the server lets a user filter on. */
const SYSTEM_FILTERABLE = ["CreatedDate", "LastModifiedDate"];

/** The operators the server accepts for this field ([] when it cannot be filtered on). */
export function operatorsFor(field: FieldInfo): string[] {
  if (field.system ? !SYSTEM_FILTERABLE.includes(field.apiName) : field.calculated) return [];
  return BY_TYPE[field.dataType] ?? [];
}

export function filterableFields(info: ObjectInfo): FieldInfo[] {
  return Object.values(info.fields)
    .filter((f) => operatorsFor(f).length > 0)
    .sort((a, b) => a.label.localeCompare(b.label));
}

/** `Field:operator:value`; the values of `in` are joined by `,` with `\,` for a comma. */
export function encodeFilter(filter: ListFilter): string {
  const value = filter.operator === "in"
    ? filter.values.map((v) => v.replace(/,/g, "\\,")).join(",")
    : (filter.values[0] ?? "");
  return `${filter.field}:${filter.operator}:${value}`;
}

export function decodeFilter(text: string): ListFilter | null {
  const first = text.indexOf(":");
  const second = first < 0 ? -1 : text.indexOf(":", first + 1);
  if (first <= 0 || second <= first + 1) return null;
  const field = text.slice(0, first);
  const operator = text.slice(first + 1, second);
  const value = text.slice(second + 1);
  const values = operator === "in" ? value.split(/(?<!\\),/).map((v) => v.replace(/\\,/g, ",")) : [value];
  return { field, operator, values };
}

/** The filters kept in a URL's query (`?view=...&filter=...&filter=...`). */
export function filtersFromSearch(search: string): ListFilter[] {
  return new URLSearchParams(search).getAll("filter")
    .map(decodeFilter)
    .filter((f): f is ListFilter => f !== null)
    .slice(0, MAX_FILTERS);
}

/** The same query with `filters` in place of its filters (other parameters kept). */
export function searchWithFilters(search: string, filters: ListFilter[]): string {
  const params = new URLSearchParams(search);
  params.delete("filter");
  for (const f of filters) params.append("filter", encodeFilter(f));
  const text = params.toString();
  return text ? `?${text}` : "";
}

export function appendFilters(params: URLSearchParams, filters: ListFilter[] | undefined): void {
  for (const f of filters ?? []) params.append("filter", encodeFilter(f));
}

/** What a chip says: `Industry equals Energy`, `Industry is any of Energy, Media`. */
export function describeFilter(filter: ListFilter, info: ObjectInfo): string {
  const field = info.fields[filter.field];
  const label = field?.label ?? filter.field;
  const shown = filter.values.map((v) => {
    if (field?.dataType === "Picklist") return field.picklistValues.find((p) => p.value === v)?.label ?? v;
    if (field?.dataType === "DateTime") return new Date(v).toLocaleString();
    return v;
  });
  return `${label} ${OPERATOR_LABELS[filter.operator] ?? filter.operator} ${shown.join(", ")}`;
}
