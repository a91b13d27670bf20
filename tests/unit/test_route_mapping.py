"""Route-level mapping: how a delivery's JSON becomes a Runtime command, lanes and keys."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nexus.contracts.commands import AcceptCommandRequest, RecordCommand
from nexus.integration.routing.mapping import (
    SOURCE_KIND,
    MappingFailed,
    map_delivery,
    needs_document,
    parse_json,
)
from nexus.integration.routing.router import command_payload
from nexus.integration.routing.routes import RouteDeclaration, RouteFileError, parse_route_file
from nexus.platform.ids import fit

ROUTE: dict[str, Any] = {
    "connector": "crm-demo",
    "route": "contacts",
    "signature": {"scheme": "standard_webhooks"},
    "secrets": ["crm-demo"],
    "source": {"object_kind": {"pointer": "/object"}, "object_id": {"pointer": "/data/id"}},
    "target_lane": "contact:{/data/email}",
    "command": {
        "op": "upsert",
        "object": "Contact",
        "external_id_field": "External_Id__c",
        "fields": {
            "External_Id__c": "/data/id",
            "LastName": "/data/last_name",
            "Employees__c": "/data/employees",
            "Revenue__c": "/data/revenue",
            "Active__c": "/data/active",
            "Phone": "/data/phone",
            "Title": "/data/title",
        },
    },
}


def route(**change: Any) -> RouteDeclaration:
    return parse_route_file({"routes": [ROUTE | change]}).routes[0]


def payload(**data: Any) -> dict[str, Any]:
    return {"object": "contact", "data": {"id": "c-1", "email": "a@example.com"} | data}


def test_values_keep_their_json_type_and_missing_fields_are_omitted() -> None:
    document = payload(last_name="Lovelace", employees=12, revenue=1.5, active=False, phone=None)
    mapped = map_delivery(route(), document, {})
    assert mapped.command is not None
    assert mapped.command.external_id == "c-1"
    assert mapped.command.fields == {
        "External_Id__c": "c-1",
        "LastName": "Lovelace",
        "Employees__c": 12,
        "Revenue__c": 1.5,
        "Active__c": False,
        "Phone": None,  # JSON null: clears the field
    }  # no Title: absent in the payload, so the record keeps its value
    assert type(mapped.command.fields["Employees__c"]) is int
    assert (mapped.source_kind, mapped.source_id, mapped.lane_key) == (
        "contact",
        "c-1",
        "contact:c-1",
    )
    assert mapped.target_key == "contact:a@example.com"


def test_an_integer_external_id_is_sent_as_text() -> None:
    mapped = map_delivery(route(), {"object": "contact", "data": {"id": 42, "email": 7}}, {})
    assert mapped.command is not None
    assert mapped.command.external_id == "42"
    assert mapped.command.fields["External_Id__c"] == "42"
    assert mapped.target_key == "contact:7"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"id": None}, "external id (External_Id__c) has no text or integer at /data/id"),
        ({"id": "   "}, "external id (External_Id__c) has no text or integer"),
        ({"id": True}, "external id (External_Id__c) has no text or integer"),
        ({"id": {"nested": "x"}}, "external id (External_Id__c) has no text or integer"),
        ({"id": "x" * 256}, "longer than 255 characters"),
        ({"last_name": {"first": "Ada"}}, "command.fields.LastName: the value at /data/last_name"),
        ({"title": ["a"]}, "is a list, not a single value"),
        ({"email": None}, "target_lane: no text or number at /data/email"),
    ],
)
def test_a_delivery_that_cannot_be_mapped_names_the_route_setting(
    data: dict[str, Any], message: str
) -> None:
    document = payload(**data)
    with pytest.raises(MappingFailed) as caught:
        map_delivery(route(source=None), document, {})
    assert message in str(caught.value)
    assert "Ada" not in str(caught.value)


def test_a_declared_source_must_be_present() -> None:
    with pytest.raises(MappingFailed, match=r"source\.object_kind: no text or integer at /object"):
        map_delivery(route(), {"data": {"id": "c-1", "email": "e"}}, {})


def test_a_header_source_is_read_from_the_receipt_correlation() -> None:
    declaration = route(
        source={"object_kind": {"header": "x-topic"}, "object_id": {"pointer": "/data/id"}},
        target_lane=None,
    )
    mapped = map_delivery(declaration, payload(), {SOURCE_KIND: "orders"})
    assert mapped.lane_key == "orders:c-1"
    with pytest.raises(MappingFailed, match="header x-topic"):
        map_delivery(declaration, payload(), {})


def test_delete_maps_only_the_external_id_and_sends_no_fields() -> None:
    declaration = route(
        command={
            "op": "delete",
            "object": "Contact",
            "external_id_field": "External_Id__c",
            "fields": {"External_Id__c": "/data/id"},
        }
    )
    mapped = map_delivery(declaration, payload(last_name="x"), {})
    assert mapped.command is not None
    assert (mapped.command.op, mapped.command.external_id, mapped.command.fields) == (
        "delete",
        "c-1",
        {},
    )
    with pytest.raises(RouteFileError) as caught:
        route(
            command={
                "op": "delete",
                "object": "Contact",
                "external_id_field": "External_Id__c",
                "fields": {"External_Id__c": "/data/id", "LastName": "/x"},
            }
        )
    assert "op 'delete' maps only external_id_field" in str(caught.value.problems)


def test_a_route_without_command_or_pointers_does_not_read_the_body() -> None:
    plain = route(source=None, target_lane=None, command=None)
    assert not needs_document(plain)
    assert needs_document(route())
    mapped = map_delivery(plain, None, {})
    assert (mapped.command, mapped.lane_key, mapped.target_key) == (None, None, None)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"token": "sk_live_secret"', "not valid JSON (Expecting"),
        (b"\xff\xfe\x00garbage sk_live_secret", "not valid JSON"),
        (b'{"n": NaN}', "not valid JSON"),
    ],
)
def test_a_body_that_is_not_json_fails_without_quoting_it(body: bytes, message: str) -> None:
    with pytest.raises(MappingFailed) as caught:
        parse_json(body)
    assert message in str(caught.value)
    assert "sk_live" not in str(caught.value)


def test_long_keys_are_shortened_stably() -> None:
    long_a, long_b = "k" * 300, "k" * 299 + "j"
    assert len(fit(long_a, 191)) == 191
    assert fit(long_a, 191) == fit(long_a, 191)
    assert fit(long_a, 191) != fit(long_b, 191)
    assert fit("short", 191) == "short"
    assert json.dumps(fit(long_a, 32, digest=8))  # text


@pytest.mark.parametrize(
    "body",
    [
        b'{"a": [1, 2.5, "x\\u00e9", null, true]}',
        '{"name": "Zoë"}'.encode(),
        '\ufeff{"bom": 1}'.encode(),  # a UTF-8 BOM, skipped as json.loads skips it
        '{"wide": "ü"}'.encode("utf-16"),
        '{"wide": "ü"}'.encode("utf-32-le"),
        b"[]",
        b'"just a string"',
    ],
)
def test_bodies_parse_as_json_loads_parses_them(body: bytes) -> None:
    assert parse_json(body) == json.loads(body)


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity", b'{"x": [Infinity]}'])
def test_non_json_constants_are_refused_every_time(constant: bytes) -> None:
    for _ in range(2):  # the decoder is built once: the refusal does not wear off
        with pytest.raises(MappingFailed, match="not valid JSON"):
            parse_json(constant)


@pytest.mark.parametrize(
    ("fields", "correlation"),
    [
        ({"LastName": "Doe"}, {"event_id": "e-0", "receipt_id": "r", "delivery_id": "d"}),
        (
            {"LastName": 'Zoë "Q" \\ \n\t\u2028 😀', "N": 3, "R": 2.5, "B": False, "Z": None},
            {"event_id": "e-0", "receipt_id": "r", "delivery_id": 'é"\\\u0001</script>'},
        ),
        ({}, {}),
    ],
)
def test_the_command_payload_is_the_request_serialised_once(
    fields: dict[str, Any], correlation: dict[str, str]
) -> None:
    request = AcceptCommandRequest(
        org_id="00D000000000001AAA",
        message_id='m-"1"-é',
        command=RecordCommand(
            op="upsert",
            object="Contact",
            external_id_field="External_Id__c",
            external_id="c-1",
            fields=fields,
        ),
        correlation=correlation,
    )
    payload = command_payload(request, request.command.model_dump_json())
    assert payload == request.model_dump_json()  # byte for byte, as before
    assert AcceptCommandRequest.model_validate_json(payload) == request
