"""Validation of composed name fields (`name_field.composed_of`) in metadata definitions: the
online metadata API and a release's metadata both go through `parse_batch` + `check_batch`."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from nexus.apps import sfcrm
from nexus.runtime.metadata.definitions import InvalidMetadata, check_batch, parse_batch
from nexus.runtime.records.compose import compose

OBJECTS = Path(sfcrm.__file__).parent / "package" / "components" / "objects.yaml"


def text(name: str, length: int, **extra: Any) -> dict[str, Any]:
    return {"api_name": name, "label": name, "type": "text", "length": length, **extra}


def person(name_field: dict[str, Any], *extra_fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "api_name": "Person__c",
        "label": "Person",
        "plural_label": "People",
        "key_prefix": "a0P",
        "name_field": name_field,
        "fields": [text("First__c", 40), text("Last__c", 80), *extra_fields],
    }


def problems(raw: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        batch = parse_batch(raw)
    except InvalidMetadata as exc:
        return [(p.path, p.message) for p in exc.problems]
    return [(p.path, p.message) for p in check_batch(batch, {})]


def test_a_name_composed_of_text_fields_that_fit_is_valid() -> None:
    name = text("Name", 121, composed_of=["First__c", "Last__c"])
    assert problems({"objects": [person(name)]}) == []


@pytest.mark.parametrize(
    ("parts", "path", "message"),
    [
        (["First__c", "Nick__c"], "[1]", "no field 'Nick__c' on Person__c to compose the name of"),
        (["First__c", "first__c"], "[1]", "'first__c' is listed twice"),
        (["Name", "Last__c"], "[0]", "the name cannot be composed of itself"),
        (["Id", "Last__c"], "[0]", "no field 'Id' on Person__c to compose the name of"),
        (["First__c", "Age__c"], "[1]", "'Age__c' is number: a name is composed of text fields"),
        (["First__c", "Mail__c"], "[1]", "'Mail__c' is email: a name is composed of text fields"),
    ],
)
def test_parts_are_distinct_text_fields_of_the_object(
    parts: list[str], path: str, message: str
) -> None:
    name = text("Name", 255, composed_of=parts)
    age = {"api_name": "Age__c", "label": "Age", "type": "number"}
    mail = {"api_name": "Mail__c", "label": "Mail", "type": "email"}
    assert problems({"objects": [person(name, age, mail)]}) == [
        (f"objects[0].name_field.composed_of{path}", message)
    ]


def test_the_parts_joined_must_fit_the_name() -> None:
    name = text("Name", 120, composed_of=["First__c", "Last__c"])  # 40 + 1 + 80 = 121
    assert problems({"objects": [person(name)]}) == [
        (
            "objects[0].name_field.composed_of",
            "the parts joined are up to 121 characters: the name's length (120) must be at "
            "least that",
        )
    ]


def test_only_a_text_name_field_is_composed() -> None:
    numbered = {
        "api_name": "Name",
        "label": "No",
        "type": "auto_number",
        "format": "P-{0000}",
        "composed_of": ["First__c"],
    }
    assert problems({"objects": [person(numbered)]}) == [
        ("objects[0].name_field", "auto_number cannot be composed_of other fields (text only)")
    ]
    plain = text("Name", 121)
    other = text("Full__c", 121, composed_of=["First__c", "Last__c"])
    assert problems({"objects": [person(plain, other)]}) == [
        ("objects[0].fields[2].composed_of", "only the name field can be composed")
    ]


def test_a_composed_name_has_no_default_and_at_least_one_part() -> None:
    defaulted = text("Name", 121, composed_of=["Last__c"], default_value="Anonymous")
    assert problems({"objects": [person(defaulted)]}) == [
        ("objects[0].name_field", "a composed field is set from its parts: no default_value")
    ]
    [(path, message)] = problems({"objects": [person(text("Name", 121, composed_of=[]))]})
    assert path == "objects[0].name_field.composed_of"
    assert "at least 1 item" in message


def package_objects() -> list[dict[str, Any]]:
    components = yaml.safe_load(OBJECTS.read_text())["components"]
    return [copy.deepcopy(c["definition"]) for c in components if c["kind"] == "object"]


def test_the_sfcrm_contact_and_lead_compose_their_names_as_on_salesforce() -> None:
    objects = package_objects()
    assert problems({"objects": objects}) == []
    composed = {o["api_name"]: o["name_field"].get("composed_of") for o in objects}
    assert composed["Contact"] == composed["Lead"] == ["FirstName", "LastName"]
    assert composed["Account"] is None


def test_a_flow_creating_a_contact_needs_its_last_name_not_its_name() -> None:
    objects = package_objects()

    def flow(fields: dict[str, str]) -> dict[str, Any]:
        return {
            "api_name": "Contact_From_Account",
            "object": "Account",
            "when": "after_save",
            "after_save": [{"kind": "create_record", "object": "Contact", "fields": fields}],
        }

    assert problems({"objects": objects, "flows": [flow({"LastName": "Name"})]}) == []
    assert problems({"objects": objects, "flows": [flow({"FirstName": "Name"})]}) == [
        ("flows[0].after_save[0].fields", "Contact.LastName is required")
    ]


@pytest.mark.parametrize(
    ("parts", "name"),
    [
        (["Ada", "Lovelace"], "Ada Lovelace"),
        ([None, "Lovelace"], "Lovelace"),
        (["  Ada ", " Lovelace"], "Ada Lovelace"),
        (["", "Lovelace", None], "Lovelace"),
        ([None, "  "], None),
        ([], None),
    ],
)
def test_compose_joins_the_non_empty_parts_by_one_space(
    parts: list[str | None], name: str | None
) -> None:
    assert compose(parts) == name
