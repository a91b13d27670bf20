"""The install-time checks of a release against what the org already has (VALIDATED).

Pure functions over the installed releases and the ownership tables; each problem is one
sentence naming the component and the reason.
"""

from __future__ import annotations

from typing import Any

from nexus.catalog.loader import references
from nexus.catalog.package import satisfies, version_key
from nexus.catalog.release import Release


def check_release(
    release: Release,
    *,
    installed: dict[str, Release],
    owners: dict[tuple[str, str], str],
    namespaces: dict[str, str],
    engine_generation: int,
    capabilities: set[str],
    rollback: bool = False,
) -> list[str]:
    app_id = release.app_id
    current = installed.get(app_id)
    problems = _admission(release, engine_generation, capabilities)
    if (
        current is not None
        and not rollback
        and (version_key(release.manifest.version) < version_key(current.manifest.version))
    ):
        problems.append(
            f"{app_id} {current.manifest.version} is installed; installing the older "
            f"{release.manifest.version} is a rollback (`nexus catalog rollback`)"
        )
    aliases, dependency_problems = _dependencies(release, installed)
    problems += dependency_problems
    problems += _ownership(release, owners, namespaces)
    problems += _cross_app_references(release, aliases)
    if current is not None:
        problems += _additive(current, release, rollback=rollback)
    return problems


def _admission(release: Release, engine_generation: int, capabilities: set[str]) -> list[str]:
    """The engine must run the generation and capabilities the release requires."""
    problems = []
    needed = release.manifest.requires
    if needed.engine_generation > engine_generation:
        problems.append(
            f"needs engine generation {needed.engine_generation}; Runtime runs {engine_generation}"
        )
    missing = sorted(set(needed.capabilities) - capabilities)
    if missing:
        problems.append(f"needs engine capabilities this deployment lacks: {', '.join(missing)}")
    return problems


def _dependencies(
    release: Release, installed: dict[str, Release]
) -> tuple[dict[str, Release], list[str]]:
    aliases: dict[str, Release] = {}
    problems = []
    for dep in release.manifest.dependencies:
        have = installed.get(dep.app_id)
        if have is None:
            problems.append(f"depends on App {dep.app_id} ({dep.version}), which is not installed")
        elif not satisfies(have.manifest.version, dep.version):
            problems.append(
                f"depends on {dep.app_id} {dep.version}; {have.manifest.version} is installed"
            )
        else:
            aliases[dep.alias] = have
    return aliases, problems


def _ownership(
    release: Release, owners: dict[tuple[str, str], str], namespaces: dict[str, str]
) -> list[str]:
    """Write-once: a component or namespace another App owns cannot be taken over."""
    problems = []
    for comp in release.components:
        owner = owners.get((comp.kind, comp.key.lower()))
        if owner is not None and owner != release.app_id:
            problems.append(f"{comp.kind} {comp.key} is owned by App {owner}")
    for name in release.manifest.namespaces:
        owner = namespaces.get(name)
        if owner is not None and owner != release.app_id:
            problems.append(f"namespace {name!r} is owned by App {owner}")
    return problems


def _cross_app_references(release: Release, aliases: dict[str, Release]) -> list[str]:
    """`alias:Name` must exist in the dependency's installed release; a field extension
    must not redefine a field the extended object already has."""
    problems = []
    for comp in release.components:
        for kind, ref, path in references(comp):
            alias, sep, name = ref.rpartition(":")
            target = aliases.get(alias) if sep else None
            if target is not None and (kind, name.lower()) not in target.component_keys():
                problems.append(
                    f"{comp.kind} {comp.key} {path}: {target.app_id} has no {kind} {name!r}"
                )
        if comp.kind == "field" and ":" in str(comp.definition.get("object", "")):
            alias, _, obj = str(comp.definition["object"]).rpartition(":")
            target = aliases.get(alias)
            field_name = str((comp.definition.get("field") or {}).get("api_name", ""))
            if target is not None and field_name.lower() in _fields_of(target, obj):
                problems.append(
                    f"field {comp.key}: {target.app_id} already defines {obj}.{field_name}"
                )
    return problems


def _fields_of(release: Release, object_name: str) -> set[str]:
    for comp in release.components:
        if comp.kind == "object" and comp.key.lower() == object_name.lower():
            return {str(f.get("api_name", "")).lower() for f in _object_fields(comp.definition)}
    return set()


def _object_fields(definition: dict[str, Any]) -> list[dict[str, Any]]:
    fields = [definition.get("name_field") or {}, *(definition.get("fields") or [])]
    return [f for f in fields if isinstance(f, dict)]


def _additive(current: Release, new: Release, *, rollback: bool) -> list[str]:
    """Phase one upgrades are additive: no removed component or field, no changed type.
    A rollback may leave out what the newer release added (it stays, unowned by change);
    it may never change a type."""
    problems: list[str] = []
    new_by_key = {(c.kind, c.key.lower()): c for c in new.components}
    for old in current.components:
        replacement = new_by_key.get((old.kind, old.key.lower()))
        if replacement is None:
            if not rollback and old.kind in ("object", "field"):
                problems.append(
                    f"removing {old.kind} {old.key} is not supported (additive upgrades only)"
                )
            continue
        if old.kind == "object":
            old_fields = {str(f.get("api_name")).lower(): f for f in _object_fields(old.definition)}
            new_fields = {
                str(f.get("api_name")).lower(): f for f in _object_fields(replacement.definition)
            }
            pairs = [(old.key, name, f, new_fields.get(name)) for name, f in old_fields.items()]
        elif old.kind == "field":
            pairs = [
                (
                    str(old.definition.get("object")),
                    str((old.definition.get("field") or {}).get("api_name")),
                    old.definition.get("field") or {},
                    replacement.definition.get("field"),
                )
            ]
        else:
            continue
        for obj, name, before, after in pairs:
            if after is None:
                if not rollback:
                    problems.append(
                        f"removing field {obj}.{before.get('api_name', name)} is not supported "
                        "(additive upgrades only)"
                    )
            elif after.get("type") != before.get("type"):
                problems.append(
                    f"changing the type of {obj}.{before.get('api_name', name)} "
                    f"({before.get('type')} -> {after.get('type')}) is refused"
                )
    return problems


def check_uninstall(app_id: str, installed: dict[str, Release]) -> list[str]:
    """Refused while other installed Apps depend on it: they are listed."""
    dependents = sorted(
        other.app_id
        for other in installed.values()
        if other.app_id != app_id and any(d.app_id == app_id for d in other.manifest.dependencies)
    )
    if dependents:
        return [
            f"installed Apps depend on {app_id}: {', '.join(dependents)} (uninstall them first)"
        ]
    return []
