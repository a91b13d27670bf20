"""The formula language: one parser for formula fields, validation rules, flow conditions and
sharing criteria; type-checked at save time; compiled to closures (never `eval`)."""
