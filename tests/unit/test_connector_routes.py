"""Route declarations: strict, provider-neutral, secrets by reference only."""

from __future__ import annotations

from typing import Any

import pytest

from nexus.integration.routing.routes import RouteFileError, parse_route_file, resolve_pointer

BASE: dict[str, Any] = {
    "connector": "crm-demo",
    "route": "contacts",
    "signature": {"scheme": "stripe"},
    "secrets": ["crm-demo"],
}


def problems(route: dict[str, Any]) -> str:
    with pytest.raises(RouteFileError) as caught:
        parse_route_file({"routes": [route]})
    return " | ".join(f"{where}: {message}" for where, message in caught.value.problems)


def test_a_minimal_route_parses_and_its_digest_is_stable() -> None:
    one = parse_route_file({"routes": [BASE]}).routes[0]
    two = parse_route_file({"routes": [dict(reversed(list(BASE.items())))]}).routes[0]
    assert one.digest() == two.digest()
    assert one.scheme.scheme == "stripe"
    assert one.signature["tolerance_seconds"] == 300  # defaults are part of the version


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colour": "red"}, "Extra inputs are not permitted"),
        ({"signature": {"scheme": "carrier-pigeon"}}, "unknown signature scheme"),
        ({"secrets": ["../etc/passwd"]}, "secrets.0"),
        ({"secrets": []}, "secrets"),
        ({"connector": "Has Spaces"}, "connector"),
        ({"event_kind": {"header": "x-kind", "pointer": "/kind"}}, "exactly one"),
        ({"delivery_id": {"pointer": "id"}}, "starts with '/'"),
        ({"target_lane": "lane:{data}"}, "starts with '/'"),
        ({"command": {"op": "upsert", "object": "Contact"}}, "external_id_field"),
        (
            {"command": {"op": "upsert", "object": "Contact", "external_id_field": "Ext__c"}},
            "fields must map external_id_field",
        ),
    ],
)
def test_invalid_routes_name_the_problem(change: dict[str, Any], message: str) -> None:
    assert message in problems(BASE | change)


def test_a_route_file_refuses_duplicates_and_non_mappings() -> None:
    with pytest.raises(RouteFileError, match="1 problem"):
        parse_route_file({"routes": [BASE, BASE]})
    with pytest.raises(RouteFileError):
        parse_route_file(["not", "a", "mapping"])


def test_json_pointers_follow_rfc_6901() -> None:
    doc = {"a/b": {"m~n": [10, {"x": "y"}]}, "": 1}
    assert resolve_pointer(doc, "") is doc
    assert resolve_pointer(doc, "/a~1b/m~0n/1/x") == "y"
    assert resolve_pointer(doc, "/a~1b/m~0n/0") == 10
    assert resolve_pointer(doc, "/") == 1
    assert resolve_pointer(doc, "/a~1b/m~0n/7") is None
    assert resolve_pointer(doc, "/missing/deeper") is None
    assert resolve_pointer("scalar", "/x") is None
