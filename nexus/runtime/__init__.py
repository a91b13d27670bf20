"""Runtime (L0): metadata, schema owner, records, permissions, query, formulas, flows."""
