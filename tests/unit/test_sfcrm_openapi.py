"""The dialect's OpenAPI document (nexus/apps/sfcrm/openapi.py) describes every operation the
App serves, and nothing it does not: schemathesis fuzzes only what the document holds
(tests/e2e/test_sfcrm_clients.py), so a resource missing here is a resource never fuzzed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from nexus.apps.sfcrm import openapi
from nexus.apps.sfcrm.app import create_app
from nexus.apps.sfcrm.openapi_parts import Area
from nexus.platform.settings import load_settings

METHODS = ("GET", "POST", "PATCH", "PUT", "DELETE")
#: Served and not (yet) in the document: the Bulk API 2.0 (being written), the browser's UI
#: API (docs/ui-api.md), the document itself and the catch-all that answers NOT_FOUND.
UNDESCRIBED = re.compile(
    r"^/services/data/(\{version\}/(jobs|ui-api)(/.*)?|openapi\.json|\{rest:path\})$"
)


def _routes(routes: list[Any]) -> list[Any]:
    found = []
    for route in routes:
        included = getattr(route, "original_router", None)
        found += _routes(list(included.routes)) if included is not None else [route]
    return found


def _shape(path: str) -> str:
    """A path template with its parameters unnamed: `{name}` and `{value:path}` are `{}`."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def served(tmp_path: Path) -> set[tuple[str, str]]:
    app = create_app(load_settings(var_dir=tmp_path))
    return {
        (method, _shape(route.path))
        for route in _routes(list(app.router.routes))
        if route.path.startswith("/services/data") and not UNDESCRIBED.match(route.path)
        for method in getattr(route, "methods", ()) or ()
        if method in METHODS
    }


def described() -> set[tuple[str, str]]:
    paths = openapi.openapi_document()["paths"]
    return {(m.upper(), _shape(p)) for p, operations in paths.items() for m in operations}


def test_the_document_describes_every_operation_the_app_serves(tmp_path: Path) -> None:
    app = served(tmp_path)
    document = described()
    assert app - document == set(), "served, not described"
    assert document - app == set(), "described, not served"
    assert ("GET", "/services/data/{}/sobjects/{}/updated") in document
    assert ("POST", "/services/data/{}/composite/tree/{}") in document


def test_every_operation_answers_its_errors_in_the_dialects_shape() -> None:
    document = openapi.openapi_document()
    errors = {"$ref": "#/components/schemas/Errors"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert any(s.startswith("2") for s in responses), (method, path)
            if path == "/services/data":  # the versions: no authentication, no errors
                continue
            for status in ("401", "404", "503"):
                schema = responses[status]["content"]["application/json"]["schema"]
                assert schema == errors, (method, path, status)


def test_every_reference_names_a_schema() -> None:
    document = openapi.openapi_document()
    names = set(document["components"]["schemas"])
    references = set(re.findall(r"#/components/schemas/(\w+)", str(document)))
    assert references <= names
    assert names - references == set(), "a schema nothing names"


def test_two_areas_cannot_describe_the_same_path_or_schema() -> None:
    one = Area(paths={"/services/data/{version}/x": {}}, schemas={"X": {}})
    with pytest.raises(ValueError, match="path"):
        openapi._union([one, Area(paths={"/services/data/{version}/x": {}})])
    with pytest.raises(ValueError, match="schema"):
        openapi._union([one, Area(paths={}, schemas={"X": {}})])
    with pytest.raises(ValueError, match="schema"):
        openapi._union([Area(paths={}, schemas={"Errors": {}})])  # a shared one
