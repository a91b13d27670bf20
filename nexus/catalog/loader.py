"""Read and validate an App package; compute its release digest.

Validation names every problem by file and path (`components/flows.yaml: components[2].kind:
unknown component kind 'macro'`). Static checks: the JSON Schema (the models of
`package.py`), unknown component kinds, duplicate business keys, keys that disagree with
their definitions, component kinds whose engine capability the manifest does not require,
and references that leave the package without naming a declared dependency (`alias:Name`).
"""

from __future__ import annotations

import copy
import io
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from nexus.catalog.package import KIND_CAPABILITY, Component, ComponentFile, Manifest
from nexus.contracts.catalog import sha256_hex

M = TypeVar("M", bound=BaseModel)
MANIFEST = "manifest.yaml"
COMPONENTS_DIR = "components"
MAX_PACKAGE_BYTES = 16 * 1024 * 1024
MAX_FILES = 500
#: kinds whose business key is the definition's `api_name`
API_NAMED = frozenset(
    {"object", "permission_set", "sharing_rule", "layout", "list_view", "validation_rule", "flow"}
)


@dataclass(frozen=True)
class PackageProblem:
    file: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.path}: {self.message}"


class InvalidPackage(Exception):
    def __init__(self, problems: list[PackageProblem]) -> None:
        super().__init__("; ".join(str(p) for p in problems[:5]))
        self.problems = problems


@dataclass(frozen=True)
class PlacedComponent:
    """A component and where it was read from (for error messages)."""

    file: str
    index: int
    component: Component

    @property
    def where(self) -> str:
        return f"components[{self.index}]"

    @property
    def identity(self) -> tuple[str, str]:
        return self.component.kind, self.component.key


@dataclass
class Package:
    manifest: Manifest
    components: list[PlacedComponent] = field(default_factory=list)

    @property
    def digest(self) -> str:
        return release_digest(self.manifest, [c.component for c in self.components])

    def canonical(self) -> dict[str, Any]:
        return canonical_release(self.manifest, [c.component for c in self.components])


def canonical_release(manifest: Manifest, components: list[Component]) -> dict[str, Any]:
    """What the digest covers: the manifest and every component, order-independent."""
    ordered = sorted(components, key=lambda c: (c.kind, c.key))
    return {
        "manifest": manifest.model_dump(mode="json"),
        "components": [c.model_dump(mode="json") for c in ordered],
    }


def release_digest(manifest: Manifest, components: list[Component]) -> str:
    return "sha256:" + sha256_hex(canonical_release(manifest, components))


# ---------------------------------------------------------------------------- reading


def read_files(path: Path) -> dict[str, bytes]:
    """The package's files by relative POSIX path, from a directory or a `.nexuspkg` zip."""
    if path.is_dir():
        files = {
            p.relative_to(path).as_posix(): p.read_bytes()
            for p in sorted(path.rglob("*"))
            if p.is_file() and p.suffix in (".yaml", ".yml")
        }
    elif path.is_file() and zipfile.is_zipfile(path):
        files = _zip_files(path.read_bytes())
    else:
        raise InvalidPackage(
            [PackageProblem(str(path), "(package)", "not a package directory or .nexuspkg zip")]
        )
    if len(files) > MAX_FILES or sum(len(b) for b in files.values()) > MAX_PACKAGE_BYTES:
        raise InvalidPackage([PackageProblem(str(path), "(package)", "the package is too large")])
    return files


def _zip_files(data: bytes) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = [i.filename for i in archive.infolist() if not i.is_dir()]
        # a zip of the package directory itself (`sfcrm/manifest.yaml`) is accepted too
        roots = {PurePosixPath(n).parts[0] for n in names}
        strip = len(roots) == 1 and f"{next(iter(roots))}/{MANIFEST}" in names
        total = 0
        for info in archive.infolist():
            name = PurePosixPath(info.filename)
            if info.is_dir() or name.suffix not in (".yaml", ".yml"):
                continue
            if name.is_absolute() or ".." in name.parts:
                raise InvalidPackage([PackageProblem(info.filename, "(file)", "unsafe path")])
            total += info.file_size
            if total > MAX_PACKAGE_BYTES:
                raise InvalidPackage([PackageProblem("(zip)", "(package)", "too large")])
            relative = PurePosixPath(*name.parts[1:]) if strip else name
            files[relative.as_posix()] = archive.read(info)
    return files


def load_package(path: Path) -> Package:
    """Read and statically validate the package at `path` (InvalidPackage names problems)."""
    return parse_package(read_files(path))


def parse_package(files: dict[str, bytes]) -> Package:
    problems: list[PackageProblem] = []
    if MANIFEST not in files:
        raise InvalidPackage([PackageProblem(MANIFEST, "(file)", "the package has no manifest")])
    manifest = _model(Manifest, MANIFEST, files[MANIFEST], problems)
    placed: list[PlacedComponent] = []
    for name in sorted(files):
        if name == MANIFEST:
            continue
        if not name.startswith(f"{COMPONENTS_DIR}/"):
            problems.append(PackageProblem(name, "(file)", "files live under components/"))
            continue
        parsed = _model(ComponentFile, name, files[name], problems)
        if parsed is not None:
            placed += [PlacedComponent(name, i, c) for i, c in enumerate(parsed.components)]
    if manifest is None:
        raise InvalidPackage(problems)
    package = Package(manifest=manifest, components=placed)
    problems += check_package(package)
    if problems:
        raise InvalidPackage(problems)
    return package


def _model(model: type[M], name: str, raw: bytes, problems: list[PackageProblem]) -> M | None:
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        problems.append(PackageProblem(name, "(file)", f"not YAML: {type(exc).__name__}"))
        return None
    except RecursionError:  # PyYAML composes nested collections recursively
        problems.append(PackageProblem(name, "(file)", "not YAML: nested too deeply"))
        return None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            path = _loc(error["loc"])
            message = str(error["msg"]).removeprefix("Value error, ")
            if error["type"] == "literal_error" and path.endswith(".kind"):
                message = f"unknown component kind {error.get('input')!r}"
            problems.append(PackageProblem(name, path, message))
        return None


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


# ---------------------------------------------------------------------------- checks


def check_package(package: Package) -> list[PackageProblem]:
    problems: list[PackageProblem] = []
    manifest = package.manifest
    aliases = {d.alias for d in manifest.dependencies}
    if len(aliases) != len(manifest.dependencies):
        problems.append(PackageProblem(MANIFEST, "dependencies", "aliases must be unique"))
    if any(d.app_id == manifest.app_id for d in manifest.dependencies):
        problems.append(PackageProblem(MANIFEST, "dependencies", "an App cannot depend on itself"))
    required = set(manifest.requires.capabilities)
    seen: dict[tuple[str, str], PlacedComponent] = {}
    names: dict[str, set[str]] = {}
    for placed in package.components:
        comp = placed.component
        if placed.identity in seen:
            first = seen[placed.identity]
            problems.append(
                PackageProblem(
                    placed.file,
                    f"{placed.where}.key",
                    f"{comp.kind} {comp.key!r} is also defined in {first.file} {first.where}",
                )
            )
        seen[placed.identity] = placed
        names.setdefault(comp.kind, set()).add(comp.key.lower())
        need = KIND_CAPABILITY[comp.kind]
        if need not in required:
            problems.append(
                PackageProblem(
                    placed.file,
                    f"{placed.where}.kind",
                    f"{comp.kind} needs engine capability {need!r}: add it to "
                    "manifest.yaml requires.capabilities",
                )
            )
        problems += [
            PackageProblem(placed.file, f"{placed.where}.{p}", m) for p, m in _key_problems(comp)
        ]
    for placed in package.components:

        def check(kind: str, ref: str, path: str, placed: PlacedComponent = placed) -> str:
            alias, sep, name = ref.rpartition(":")
            if sep:
                if alias not in aliases:
                    problems.append(
                        PackageProblem(
                            placed.file,
                            f"{placed.where}.definition.{path}",
                            f"{ref!r} names App alias {alias!r}, which is not a declared "
                            "dependency in manifest.yaml",
                        )
                    )
            elif name.lower() not in names.get(kind, set()):
                problems.append(
                    PackageProblem(
                        placed.file,
                        f"{placed.where}.definition.{path}",
                        f"no {kind} {name!r} in this package (a component of another App is "
                        "referenced as alias:Name, with that App declared as a dependency)",
                    )
                )
            return ref

        for kind, ref, path in references(placed.component):
            check(kind, ref, path)
    return problems


def _key_problems(comp: Component) -> Iterator[tuple[str, str]]:
    d = comp.definition
    if comp.kind in API_NAMED:
        if d.get("api_name") != comp.key:
            yield "definition.api_name", f"must equal the component key {comp.key!r}"
    elif comp.kind == "field":
        obj, fld = d.get("object"), d.get("field")
        if not isinstance(obj, str) or not isinstance(fld, dict):
            yield "definition", "a field is {object: Name, field: {api_name, label, type, ...}}"
        elif comp.key != f"{obj.rpartition(':')[2]}.{fld.get('api_name')}":
            yield "key", "a field's key is <Object>.<field api_name>"
    elif comp.kind == "role":
        if d.get("name") != comp.key:
            yield "definition.name", f"must equal the component key {comp.key!r}"
    elif comp.kind == "connector_route" and comp.key != f"{d.get('connector')}/{d.get('route')}":
        yield "key", "a connector route's key is <connector>/<route>"
    if ":" in comp.key:
        yield "key", "a component key names this App's own component (no alias)"


# ---------------------------------------------------------------------------- references

Ref = tuple[str, str, str]  # (referenced kind, reference, path inside the definition)


def references(comp: Component) -> list[Ref]:
    """Every reference a component makes to another component (by kind)."""
    refs: list[Ref] = []

    def collect(kind: str, ref: str, path: str) -> str:
        refs.append((kind, ref, path))
        return ref

    _walk_refs(comp.kind, copy.deepcopy(comp.definition), collect)
    return refs


def strip_aliases(comp: Component) -> dict[str, Any]:
    """The definition Runtime receives: every `alias:Name` reference becomes `Name`."""
    definition = copy.deepcopy(comp.definition)
    _walk_refs(comp.kind, definition, lambda _k, r, _p: r.rpartition(":")[2])
    return definition


#: where each kind's definition references other components: (path pattern, referenced
#: kind); `[*]` walks a list, `object_field` is `Object.Field` (only the object is a reference)
REF_PATHS: dict[str, tuple[tuple[str, str], ...]] = {
    "object": (("fields[*].reference_to", "object"),),
    "field": (("object", "object"), ("field.reference_to", "object")),
    "permission_set": (("objects[*].object", "object"), ("fields[*].field", "object_field")),
    "sharing_rule": (("object", "object"), ("share_with_role", "role")),
    "layout": (("object", "object"), ("related_lists[*]", "object")),
    "list_view": (("object", "object"),),
    "validation_rule": (("object", "object"),),
    "flow": (("object", "object"), ("after_save[*].object", "object")),
    "role": (("parent", "role"),),
    "connector_route": (("command.object", "object"),),
}


def _walk_refs(kind: str, d: dict[str, Any], visit: Callable[[str, str, str], Any]) -> None:
    """Call `visit(kind, ref, path)` on each reference of `d`, storing what it returns."""
    for pattern, ref_kind in REF_PATHS.get(kind, ()):
        for container, key, path in _slots(d, pattern.split("."), ""):
            value = container[key]
            if not isinstance(value, str) or not value:
                continue
            if ref_kind == "object_field":
                obj, dot, rest = value.partition(".")
                if dot:
                    container[key] = f"{visit('object', obj, path)}.{rest}"
            else:
                container[key] = visit(ref_kind, value, path)


def _slots(node: Any, parts: list[str], prefix: str) -> Iterator[tuple[Any, Any, str]]:
    """(container, key, path) of every value `parts` selects under `node`."""
    if not parts or not isinstance(node, dict):
        return
    head, rest = parts[0], parts[1:]
    name, many = head.removesuffix("[*]"), head.endswith("[*]")
    if name not in node:
        return
    path = f"{prefix}.{name}" if prefix else name
    if not many:
        if rest:
            yield from _slots(node[name], rest, path)
        else:
            yield node, name, path
        return
    items = node[name]
    if not isinstance(items, list):
        return
    for i, item in enumerate(items):
        if rest:
            yield from _slots(item, rest, f"{path}[{i}]")
        else:
            yield items, i, f"{path}[{i}]"
