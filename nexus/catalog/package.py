"""The App package format: a manifest and a metadata bundle of components.

A package is a directory (or a `.nexuspkg` zip of one):

    manifest.yaml                 app id, publisher, version, dependencies, namespaces,
                                  engine requirements, provided capabilities
    components/**/*.yaml          each file: `components: [ {kind, key, definition, ...} ]`

Its JSON Schema is `nexus/catalog/package.schema.json`, generated from the models below
(`python -m nexus.catalog.schema_export`); a test keeps the published file identical to
them, so the schema users read is exactly the one `nexus catalog validate` applies.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

SEMVER = (
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
APP_ID = r"^[a-z][a-z0-9_-]{1,39}$"
CAPABILITY = r"^[a-z][a-z0-9_.-]{1,79}$"
COMPONENT_KEY = r"^(?:[a-z][a-z0-9_-]{0,39}:)?[A-Za-z][A-Za-z0-9_./-]{0,119}$"
ALIAS = r"^[a-z][a-z0-9_-]{0,39}$"
RANGE = re.compile(r"^\s*(>=|<=|>|<|==|=|\^|~)?\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?\s*$")

#: Every component kind a bundle may hold, and the engine capability that executes it.
KIND_CAPABILITY: dict[str, str] = {
    "object": "runtime.metadata.v1",
    "field": "runtime.metadata.v1",
    "permission_set": "runtime.metadata.v1",
    "sharing_rule": "runtime.metadata.v1",
    "layout": "runtime.metadata.v1",
    "list_view": "runtime.metadata.v1",
    "validation_rule": "runtime.metadata.v1",
    "flow": "runtime.flows.v1",
    "role": "runtime.roles.v1",
    "connector_route": "webhooks.ingress.v1",
}
ComponentKind = Literal[
    "object",
    "field",
    "permission_set",
    "sharing_rule",
    "layout",
    "list_view",
    "validation_rule",
    "flow",
    "role",
    "connector_route",
]
_STRICT = ConfigDict(extra="forbid")


class Dependency(BaseModel):
    """Another App this one builds on; its components are referenced as `alias:Name`."""

    model_config = _STRICT

    app_id: Annotated[str, Field(pattern=APP_ID)]
    version: Annotated[str, Field(min_length=1, max_length=100)] = Field(
        description="comma-separated comparators, e.g. '>=1.0.0, <2.0.0' or '^1.2'"
    )
    alias: Annotated[str, Field(pattern=ALIAS)]

    @field_validator("version")
    @classmethod
    def _range(cls, value: str) -> str:
        for part in value.split(","):
            if not RANGE.match(part):
                raise ValueError(f"{part.strip()!r} is not a version comparator")
        return value


class EngineRequirements(BaseModel):
    model_config = _STRICT

    engine_generation: Annotated[int, Field(ge=1)] = 1
    capabilities: list[Annotated[str, Field(pattern=CAPABILITY)]] = Field(default_factory=list)


class Manifest(BaseModel):
    """`manifest.yaml`. The release digest is not a field here: it is computed."""

    model_config = _STRICT

    format: Literal["nexus.app/v1"]
    app_id: Annotated[str, Field(pattern=APP_ID)]
    publisher_id: Annotated[str, Field(pattern=APP_ID)]
    version: Annotated[str, Field(pattern=SEMVER)]
    label: Annotated[str, Field(min_length=1, max_length=80)]
    description: Annotated[str, Field(max_length=2000)] | None = None
    dependencies: list[Dependency] = Field(default_factory=list)
    namespaces: list[Annotated[str, Field(pattern=ALIAS)]] = Field(min_length=1)
    requires: EngineRequirements = Field(default_factory=EngineRequirements)
    provides: list[Annotated[str, Field(pattern=CAPABILITY)]] = Field(default_factory=list)


class Component(BaseModel):
    """One metadata component. Its owner is the App of the package that holds it.

    `override_policy` decides what an upgrade of this App does to an org's customization
    of the component: `replace` (the release wins), `keep` (a customized definition is
    kept) or `merge` (objects: fields the org added are kept beside the release's).
    `removal_policy` decides what uninstalling the App does: `retain` (definitions and data
    stay, unowned) or `deactivate` (flows and validation rules stop running).
    """

    model_config = _STRICT

    kind: ComponentKind
    key: Annotated[str, Field(pattern=COMPONENT_KEY)]
    definition_version: Annotated[int, Field(ge=1)] = 1
    override_policy: Literal["replace", "keep", "merge"] = "replace"
    removal_policy: Literal["retain", "deactivate"] = "retain"
    definition: dict[str, Any]


class ComponentFile(BaseModel):
    """One file under `components/`."""

    model_config = _STRICT

    components: list[Component] = Field(min_length=1)


class PackageSchema(BaseModel):
    """The JSON Schema document: a manifest and the component files."""

    model_config = _STRICT

    manifest: Manifest
    component_files: dict[str, ComponentFile]


def version_key(version: str) -> tuple[int, int, int, int, str]:
    """Semantic-version order (a pre-release sorts before its release)."""
    core, _, pre = version.partition("-")
    major, minor, patch = (int(p) for p in core.split("."))
    return major, minor, patch, 0 if pre else 1, pre


def satisfies(version: str, spec: str) -> bool:
    """Does `version` satisfy every comparator of `spec` (`>=1.0.0, <2.0.0`, `^1.2`, `~1.2`)?"""
    have = version_key(version)[:3]
    for part in spec.split(","):
        match = RANGE.match(part)
        if match is None:
            return False
        op = match.group(1) or "=="
        want = tuple(int(g) if g is not None else 0 for g in match.group(2, 3, 4))
        if op == "^":
            upper = (want[0] + 1, 0, 0) if want[0] else (0, want[1] + 1, 0)
            ok = want <= have < upper
        elif op == "~":
            ok = want <= have < (want[0], want[1] + 1, 0)
        else:
            ok = {
                ">=": have >= want,
                "<=": have <= want,
                ">": have > want,
                "<": have < want,
                "==": have == want,
                "=": have == want,
            }[op]
        if not ok:
            return False
    return True
