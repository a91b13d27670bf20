"""The consumer projections of a revision (seed §4.1.1): each consumer sees only the release
facts admitted for it. Content-addressed by the checksum Catalog stores with each."""

from __future__ import annotations

from typing import Any

from nexus.catalog.release import Release


def build_projections(releases: list[Release]) -> dict[str, dict[str, Any]]:
    ordered = sorted(releases, key=lambda r: r.app_id)
    apps = [
        {"app_id": r.app_id, "version": r.manifest.version, "publisher_id": r.manifest.publisher_id}
        for r in ordered
    ]
    return {
        "runtime": {
            "apps": apps,
            "components": [
                {
                    "owner": r.app_id,
                    "kind": c.kind,
                    "key": c.key,
                    "definition_version": c.definition_version,
                    "override_policy": c.override_policy,
                    "removal_policy": c.removal_policy,
                    "definition": definition,
                }
                for r in ordered
                for c, definition in r.runtime_components()
            ],
        },
        "integration": {
            "apps": apps,
            "routes": [{"owner": r.app_id, **route} for r in ordered for route in r.routes()],
        },
        "app": {
            "apps": [
                {
                    **app,
                    "label": r.manifest.label,
                    "provides": list(r.manifest.provides),
                    "dependencies": [d.app_id for d in r.manifest.dependencies],
                }
                for app, r in zip(apps, ordered, strict=True)
            ]
        },
    }
