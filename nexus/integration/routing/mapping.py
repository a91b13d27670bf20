"""How one stored delivery becomes a Runtime command, under its route (the semantics are
documented in `routes.py`).

Everything here is pure: the receipt router reads the body and the current route, calls
`map_delivery`, and writes what it returns. `MappingFailed` is a terminal routing failure;
its message names the route's configuration (a pointer, a field name), never a payload value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from nexus.contracts.commands import RecordCommand, Scalar
from nexus.integration.routing.routes import TEMPLATE_FIELD, Command, Extract, RouteDeclaration
from nexus.integration.routing.routes import resolve_pointer as resolve
from nexus.platform.ids import fit

#: Correlation keys under which ingress keeps header-extracted source values (headers are
#: not stored, so the router could not read them later).
SOURCE_KIND = "source_object_kind"
SOURCE_ID = "source_object_id"
MAX_EXTERNAL_ID = 255
LANE_KEY_BYTES = 191
_MISSING = object()


class MappingFailed(Exception):
    """The delivery cannot be mapped by its route (terminal: retrying cannot help)."""


@dataclass(frozen=True)
class Mapped:
    source_kind: str | None
    source_id: str | None
    target_key: str | None
    command: RecordCommand | None

    @property
    def lane_key(self) -> str | None:
        if self.source_kind is None or self.source_id is None:
            return None
        return fit(f"{self.source_kind}:{self.source_id}", LANE_KEY_BYTES)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: Built once: `json.loads` with a keyword argument builds a new decoder per call.
_DECODER = json.JSONDecoder(parse_constant=_no_constants)


def parse_json(body: bytes) -> Any:
    """The body as JSON; MappingFailed says why not (a position, never the text).

    Decodes as `json.loads` does (UTF-8/16/32 detected from the first bytes, a UTF-8 BOM
    skipped), with `NaN` and `Infinity` refused."""
    try:
        return _DECODER.decode(body.decode(json.detect_encoding(body), "surrogatepass"))
    except UnicodeDecodeError:
        raise MappingFailed("the body is not valid JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise MappingFailed(
            f"the body is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise MappingFailed(f"the body is not valid JSON ({type(exc).__name__})") from None


def needs_document(declaration: RouteDeclaration) -> bool:
    """Whether routing this route reads the body (anything but header-only extraction)."""
    source = declaration.source
    return (
        declaration.command is not None
        or declaration.target_lane is not None
        or (source is not None and (source.object_kind.needs_body or source.object_id.needs_body))
    )


def map_delivery(
    declaration: RouteDeclaration, document: Any, correlation: Mapping[str, str]
) -> Mapped:
    """Source lane, target lane and command of one delivery; MappingFailed when a pointer
    that keys the work (external id, source, target lane) finds nothing usable."""
    kind = source_id = None
    if declaration.source is not None:
        kind = _key("source.object_kind", declaration.source.object_kind, document, correlation)
        source_id = _key("source.object_id", declaration.source.object_id, document, correlation)
    target = None
    if declaration.target_lane is not None:
        target = fit(_render(declaration.target_lane, document), LANE_KEY_BYTES)
    command = None if declaration.command is None else _command(declaration.command, document)
    return Mapped(
        source_kind=None if kind is None else fit(kind, 128),
        source_id=None if source_id is None else fit(source_id, LANE_KEY_BYTES),
        target_key=target,
        command=command,
    )


def _key(where: str, how: Extract, document: Any, correlation: Mapping[str, str]) -> str:
    if how.header is not None:
        value: Any = correlation.get(SOURCE_KIND if where.endswith("kind") else SOURCE_ID)
        origin = f"header {how.header}"
    else:
        value = resolve(document, how.pointer or "")
        origin = how.pointer or "the whole body"
    text = _text(value)
    if text is None:
        raise MappingFailed(f"{where}: no text or integer at {origin}")
    return text


def _text(value: Any) -> str | None:
    """A key's text: a non-blank string (stripped) or an integer; else None."""
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _render(template: str, document: Any) -> str:
    def value(pointer: str) -> str:
        found = resolve(document, pointer)
        if isinstance(found, bool):
            return "true" if found else "false"
        text = _text(found) if not isinstance(found, float) else repr(found)
        if text is None:
            raise MappingFailed(f"target_lane: no text or number at {pointer or 'the body'}")
        return text

    parts: list[str] = []
    last = 0
    for match in TEMPLATE_FIELD.finditer(template):
        parts += [template[last : match.start()], value(match.group(1))]
        last = match.end()
    parts.append(template[last:])
    return "".join(parts)


def _command(command: Command, document: Any) -> RecordCommand:
    assert command.external_id_field is not None  # noqa: S101 - the declaration requires it
    key_field = command.external_id_field
    key_pointer = command.fields.get(key_field, "")
    external_id = _text(resolve(document, key_pointer))
    if external_id is None:
        raise MappingFailed(
            f"command: the external id ({key_field}) has no text or integer at "
            f"{key_pointer or 'the body'}"
        )
    if len(external_id) > MAX_EXTERNAL_ID:
        raise MappingFailed(
            f"command: the external id ({key_field}) is longer than {MAX_EXTERNAL_ID} characters"
        )
    fields: dict[str, Scalar] = {}
    if command.op != "delete":
        for name, pointer in command.fields.items():
            if name == key_field:
                fields[name] = external_id
                continue
            found = _field(document, pointer)
            if found is _MISSING:
                continue  # absent: omitted, the record keeps its value
            if isinstance(found, dict | list):
                raise MappingFailed(
                    f"command.fields.{name}: the value at {pointer or 'the body'} is "
                    f"{'an object' if isinstance(found, dict) else 'a list'}, not a single value"
                )
            fields[name] = found
    try:
        return RecordCommand(
            op=command.op,
            object=command.object,
            external_id_field=key_field,
            external_id=external_id,
            fields=fields,
        )
    except ValidationError as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"])
        raise MappingFailed(f"command: the mapped command is invalid at {where}") from None


def _field(document: Any, pointer: str) -> Any:
    """The value at `pointer`, or `_MISSING` when nothing is there (JSON null is a value)."""
    if pointer == "":
        return document
    parent_pointer, _, last = pointer.rpartition("/")
    parent = resolve(document, parent_pointer)
    token = last.replace("~1", "/").replace("~0", "~")
    if isinstance(parent, dict):
        return parent.get(token, _MISSING)
    if isinstance(parent, list) and token.isdigit() and int(token) < len(parent):
        return parent[int(token)]
    return _MISSING
