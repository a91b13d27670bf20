"""Composed names: a text name field `composed_of` other text fields of its object.

Salesforce's Contact.Name and Lead.Name are derived from FirstName and LastName and never sent
by its clients. On save the name becomes the non-empty parts (trimmed) joined by one space,
when the record is created or one of its parts changes, unless the same save sets the name to
a value itself (Nexus clients that write the name keep their value). A save that sets the name
to nothing gets the composed value back. This runs after before-save flows (a flow may set a
part, or the name) and before the required-field checks and validation rules, which see the
composed name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from nexus.runtime.formula.nodes import Context
from nexus.runtime.metadata.definitions import FieldDef, ObjectDef
from nexus.runtime.schema.spec import column_name


class Saving(Protocol):
    """One item being saved: the column values this save sets."""

    values: dict[str, Any]


def with_composed_names(
    obj: ObjectDef,
    saves: Sequence[tuple[Saving, Any, Context]],
    required: list[tuple[FieldDef, str]],
) -> list[tuple[FieldDef, str]]:
    """Compose the name of each (item, row before or None, formula context) of `obj`; return
    `required` less a composed name that has a required part: the part is reported missing
    instead (Contact: LastName, as on Salesforce), and while it has a value so has the name."""
    name = obj.name_field
    if name.composed_of is None or name.type != "text":
        return required
    by_name = {f.api_name.lower(): f for f in obj.fields}
    parts = [by_name[p.lower()] for p in name.composed_of if p.lower() in by_name]
    columns = [column_name(p.api_name) for p in parts]
    target = column_name(name.api_name)
    for item, _old, context in saves:
        if item.values.get(target) is not None:
            continue  # the save names the record itself
        prior = context.prior
        changed = (
            prior is None
            or target in item.values
            or any(c in item.values and item.values[c] != prior.get(c) for c in columns)
        )
        if changed:
            composed = compose(context.values.get(c) for c in columns)
            item.values[target] = composed
            context.values[target] = composed
    if any(p.required for p in parts):
        return [(f, column) for f, column in required if f.api_name != name.api_name]
    return required


def compose(values: Any) -> str | None:
    """The non-empty values, trimmed, joined by one space; None when there is none."""
    words = [str(v).strip() for v in values if v is not None]
    return " ".join(w for w in words if w) or None
