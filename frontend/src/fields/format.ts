// Display and wire conversion of field values by data type.
import type { FieldInfo, FieldValue } from "../api/types";

const number = new Intl.NumberFormat(undefined, { maximumFractionDigits: 6 });

export function displayValue(field: FieldInfo, value: FieldValue, lookupName?: string): string {
  if (value === null || value === undefined || value === "") return "";
  switch (field.dataType) {
    case "Boolean":
      return value ? "Yes" : "No";
    case "Currency":
      return new Intl.NumberFormat(undefined, {
        style: "currency", currency: "USD", minimumFractionDigits: field.scale || 0,
        maximumFractionDigits: Math.max(field.scale || 0, 2),
      }).format(Number(value));
    case "Percent":
      return `${number.format(Number(value))}%`;
    case "Double":
    case "Int":
      return number.format(Number(value));
    case "Date": {
      const [y, m, d] = String(value).split("-").map(Number);
      return y ? new Date(y, m - 1, d).toLocaleDateString() : String(value);
    }
    case "DateTime": {
      const parsed = new Date(String(value).replace(/\+0000$/, "Z"));
      return Number.isNaN(parsed.getTime()) ? String(value) : parsed.toLocaleString();
    }
    case "Reference":
      return lookupName ?? String(value);
    case "MultiPicklist":
      return String(value).split(";").join(", ");
    case "Picklist":
      return field.picklistValues.find((p) => p.value === value)?.label ?? String(value);
    default:
      return String(value);
  }
}

/** A server datetime -> the value of a `datetime-local` input (local time, minutes). */
export function toLocalInput(value: FieldValue): string {
  if (!value) return "";
  const parsed = new Date(String(value).replace(/\+0000$/, "Z"));
  if (Number.isNaN(parsed.getTime())) return "";
  const pad = (n: number) => String(n).padStart(2, "0");
  return (
    `${parsed.getFullYear()}-${pad(parsed.getMonth() + 1)}-${pad(parsed.getDate())}` +
    `T${pad(parsed.getHours())}:${pad(parsed.getMinutes())}`
  );
}

/** A `datetime-local` input's value -> ISO-8601 UTC for the API. */
export function fromLocalInput(value: string): string | null {
  if (!value) return null;
  const parsed = new Date(value);
  return Number.isNaN(parsed.getTime()) ? null : parsed.toISOString();
}

/** What the form sends for a field's text entry (numbers as numbers, empty as null). */
export function parseInput(field: FieldInfo, raw: string): FieldValue {
  if (raw.trim() === "") return null;
  if (["Double", "Int", "Currency", "Percent"].includes(field.dataType)) {
    const parsed = Number(raw);
    return Number.isNaN(parsed) ? raw : parsed;
  }
  return raw;
}
