"""A stored release: its manifest and components, and what each consumer sees of them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from nexus.catalog.loader import strip_aliases
from nexus.catalog.package import KIND_CAPABILITY, Component, Manifest

#: component kinds Runtime executes (connector routes are Integration's)
RUNTIME_KINDS = frozenset(k for k, cap in KIND_CAPABILITY.items() if cap.startswith("runtime."))


@dataclass(frozen=True)
class Release:
    manifest: Manifest
    components: tuple[Component, ...]

    @property
    def app_id(self) -> str:
        return self.manifest.app_id

    def runtime_components(self) -> list[tuple[Component, dict[str, Any]]]:
        """Runtime's components with every `alias:Name` reference resolved to `Name`,
        roles first (sharing rules name them), in a stable order."""
        chosen = [c for c in self.components if c.kind in RUNTIME_KINDS]
        chosen.sort(key=lambda c: (c.kind != "role", c.kind, c.key))
        return [(c, strip_aliases(c)) for c in chosen]

    def runtime_definitions(self) -> dict[tuple[str, str], dict[str, Any]]:
        return {(c.kind, c.key): d for c, d in self.runtime_components()}

    def routes(self) -> list[dict[str, Any]]:
        return [strip_aliases(c) for c in self.components if c.kind == "connector_route"]

    def component_keys(self) -> set[tuple[str, str]]:
        return {(c.kind, c.key.lower()) for c in self.components}


def release_from_body(body: str) -> Release:
    data = json.loads(body)
    return Release(
        manifest=Manifest.model_validate(data["manifest"]),
        components=tuple(Component.model_validate(c) for c in data["components"]),
    )
