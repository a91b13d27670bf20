"""Connector route declarations: how one webhook endpoint is verified, keyed and mapped.

Provider-neutral: a route names a signature scheme by its signing format, secrets by
reference (the values live in the secrets store, never here), and where in the request the
delivery id, event kind and source object are found. The `command` mapping to a Runtime
command is stored with the route and executed later by the work engine.

A route file (`nexus integration apply-routes FILE.yaml`):

    org_id: 00D...            # optional: else NEXUS_INTEGRATION_ORG_ID
    routes:
      - connector: crm-demo
        route: contacts
        signature: {scheme: standard_webhooks}
        secrets: [crm-demo-contacts]
        event_kind: {pointer: /type}
        source: {object_kind: {pointer: /object}, object_id: {pointer: /data/id}}
        target_lane: "contact:{/data/email}"
        command: {op: upsert, object: Contact, external_id_field: External_Id__c,
                  fields: {External_Id__c: /data/id, LastName: /data/last_name,
                           Email: /data/email}}

How the receipt router maps a delivery (`mapping.py`, ADR 0018), with the route's CURRENT
active version (a route that is no longer active fails the receipt):
- The body is parsed as JSON whenever the route reads it (a command, a target lane, or a
  pointer-based source); a body that is not JSON fails the receipt. A route with none of
  these records the event without parsing (`parse_outcome` `no_command`, no work).
- `command.fields` maps API names to JSON Pointers. A value keeps its JSON type (a number
  stays a number, `true` stays a boolean, `null` clears the field); an absent pointer is
  omitted (the record keeps its value); an object or a list fails the receipt.
- The external id is the value `fields` maps to `external_id_field` and must be present: a
  non-blank string (stripped) or an integer (sent as text), at most 255 characters, else the
  receipt fails. It travels as `external_id` and, for upsert/update, also in `fields`.
  `op: delete` maps only `external_id_field` and sends no fields.
- `source` (object kind and id, each a pointer or a header; ingress keeps header values in
  the receipt's correlation) keys the source lane `<kind>:<id>`: work on one source object
  runs in delivery order. `target_lane` renders each `{pointer}` with the value there: at
  most one command per target key is in flight. When either is declared, every pointer in it
  must find text or a number, else the receipt fails. Keys longer than the columns are
  shortened stably (prefix + hash).
- Failures are stored on the receipt as `error`, naming the route's pointer or field, never
  a payload value.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from nexus.integration.ingress.signatures import AnyScheme, SignatureConfigError, parse_scheme
from nexus.platform.secrets import WEBHOOK_SECRET_REF

_KEY = r"^[a-z0-9][a-z0-9_-]{0,63}$"
_HEADER = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$"
_API_NAME = r"^[A-Za-z][A-Za-z0-9_]{0,79}$"
TEMPLATE_FIELD = re.compile(r"\{([^{}]*)\}")
MAX_BODY_LIMIT = 64 * 1024 * 1024

Key = Annotated[str, Field(pattern=_KEY)]
SecretRef = Annotated[str, Field(pattern=WEBHOOK_SECRET_REF.pattern)]


class RouteFileError(ValueError):
    """A route file is invalid; `problems` are (path, message) pairs naming no secret."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__(f"{len(problems)} problem(s)")
        self.problems = problems


def check_pointer(value: str) -> str:
    """A JSON Pointer (RFC 6901): empty (the whole document) or `/`-separated tokens."""
    if value and not value.startswith("/"):
        raise ValueError("a JSON Pointer is empty or starts with '/'")
    if re.search(r"~(?![01])", value):
        raise ValueError("'~' in a JSON Pointer must be escaped as ~0 or ~1")
    return value


Pointer = Annotated[str, Field(max_length=256)]


def resolve_pointer(document: Any, pointer: str) -> Any:
    """The value at `pointer` in a parsed JSON document, or None when it is absent."""
    if pointer == "":
        return document
    current = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict):
            if token not in current:
                return None
            current = current[token]
        elif isinstance(current, list):
            if not token.isdigit() or int(token) >= len(current):
                return None
            current = current[int(token)]
        else:
            return None
    return current


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Extract(_Model):
    """Where a value is found: a request header, or a JSON Pointer into the body."""

    header: Annotated[str, Field(pattern=_HEADER)] | None = None
    pointer: Pointer | None = None

    @field_validator("pointer")
    @classmethod
    def _pointer(cls, value: str | None) -> str | None:
        return check_pointer(value) if value is not None else None

    @model_validator(mode="after")
    def _exactly_one(self) -> Extract:
        if (self.header is None) == (self.pointer is None):
            raise ValueError("give exactly one of 'header' or 'pointer'")
        return self

    @property
    def needs_body(self) -> bool:
        return self.pointer is not None


class SourceLane(_Model):
    """The source object a delivery is about: its events run in delivery order."""

    object_kind: Extract
    object_id: Extract


class Command(_Model):
    """The Runtime command a delivery becomes (executed later by the work engine)."""

    op: Literal["upsert", "update", "delete"]
    object: Annotated[str, Field(pattern=_API_NAME)]
    external_id_field: Annotated[str, Field(pattern=_API_NAME)] | None = None
    fields: dict[Annotated[str, Field(pattern=_API_NAME)], Pointer] = Field(default_factory=dict)

    @field_validator("fields")
    @classmethod
    def _pointers(cls, value: dict[str, str]) -> dict[str, str]:
        for pointer in value.values():
            check_pointer(pointer)
        return value

    @model_validator(mode="after")
    def _shape(self) -> Command:
        if self.external_id_field is None:
            raise ValueError(f"op {self.op!r} needs external_id_field (the record key)")
        if self.external_id_field not in self.fields:
            raise ValueError("fields must map external_id_field")
        if self.op == "delete" and len(self.fields) > 1:
            raise ValueError("op 'delete' maps only external_id_field (where the key is)")
        return self


class RouteDeclaration(_Model):
    """One connector route as declared (and stored, as canonical JSON, per version)."""

    connector: Key
    route: Key
    signature: dict[str, Any]
    secrets: Annotated[list[SecretRef], Field(min_length=1, max_length=8)]
    max_body_bytes: Annotated[int, Field(ge=1, le=MAX_BODY_LIMIT)] | None = None
    delivery_id: Extract | None = None  # default: what the signature scheme defines
    event_kind: Extract | None = None
    source: SourceLane | None = None
    target_lane: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    command: Command | None = None
    active: bool = True

    @field_validator("signature")
    @classmethod
    def _signature(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            parsed = parse_scheme(value)
        except SignatureConfigError as exc:
            raise ValueError(str(exc)) from None
        return parsed.model_dump(mode="json")

    @field_validator("target_lane")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is not None:
            for pointer in TEMPLATE_FIELD.findall(value):
                check_pointer(pointer)
        return value

    @property
    def scheme(self) -> AnyScheme:
        return parse_scheme(self.signature)

    @property
    def needs_json(self) -> bool:
        return any(e is not None and e.needs_body for e in (self.delivery_id, self.event_kind))

    def canonical(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def digest(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()


class RouteFile(_Model):
    org_id: Annotated[str, Field(pattern=r"^[0-9A-Za-z]{15,18}$")] | None = None
    routes: Annotated[list[RouteDeclaration], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique(self) -> RouteFile:
        keys = [(r.connector, r.route) for r in self.routes]
        duplicates = sorted({f"{c}/{r}" for c, r in keys if keys.count((c, r)) > 1})
        if duplicates:
            raise ValueError(f"duplicate route(s): {', '.join(duplicates)}")
        return self


def parse_route_file(raw: Any) -> RouteFile:
    """Validate a parsed YAML document; RouteFileError lists every problem."""
    if not isinstance(raw, Mapping):
        raise RouteFileError([("", "a route file is a mapping with 'routes'")])
    try:
        return RouteFile.model_validate(raw)
    except ValidationError as exc:
        problems = [
            (
                ".".join(str(part) for part in error["loc"]),
                str(error["msg"]).removeprefix("Value error, "),
            )
            for error in exc.errors()
        ]
        raise RouteFileError(problems) from None


class ActiveRoute(_Model):
    """A stored route at one version, as the ingress uses it."""

    org_id: str
    version: int
    declaration: RouteDeclaration

    @property
    def key(self) -> tuple[str, str]:
        return (self.declaration.connector, self.declaration.route)
