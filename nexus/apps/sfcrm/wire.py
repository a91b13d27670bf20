"""Neutral Runtime results projected into Salesforce REST shapes (describe, records, results)."""

from __future__ import annotations

from typing import Any

from nexus.apps.sfcrm.errors import error_item
from nexus.contracts.describe import FieldDescribe, ObjectDescribe, ObjectSummary
from nexus.contracts.records import ItemResult

#: Nexus field type -> (Salesforce type, soapType)
FIELD_TYPES: dict[str, tuple[str, str]] = {
    "id": ("id", "tns:ID"),  # a system object's (User, Organization) own Id field
    "text": ("string", "xsd:string"),
    "textarea": ("textarea", "xsd:string"),
    "long_text": ("textarea", "xsd:string"),
    "email": ("email", "xsd:string"),
    "phone": ("phone", "xsd:string"),
    "url": ("url", "xsd:string"),
    "number": ("double", "xsd:double"),
    "currency": ("currency", "xsd:double"),
    "percent": ("percent", "xsd:double"),
    "checkbox": ("boolean", "xsd:boolean"),
    "date": ("date", "xsd:date"),
    "datetime": ("datetime", "xsd:dateTime"),
    "picklist": ("picklist", "xsd:string"),
    "multi_picklist": ("multipicklist", "xsd:string"),
    "lookup": ("reference", "tns:ID"),
    "master_detail": ("reference", "tns:ID"),
    "auto_number": ("string", "xsd:string"),
    "formula": ("string", "xsd:string"),
}

#: The fields every record has (Runtime's system fields), as describe lists them.
SYSTEM_FIELDS: tuple[tuple[str, str, str, list[str]], ...] = (
    ("Id", "Record ID", "id", []),
    ("OwnerId", "Owner ID", "reference", ["User"]),
    ("IsDeleted", "Deleted", "boolean", []),
    ("CreatedDate", "Created Date", "datetime", []),
    ("CreatedById", "Created By ID", "reference", ["User"]),
    ("LastModifiedDate", "Last Modified Date", "datetime", []),
    ("LastModifiedById", "Last Modified By ID", "reference", ["User"]),
    ("SystemModstamp", "System Modstamp", "datetime", []),
)
SOAP_TYPES = {
    "id": "tns:ID",
    "reference": "tns:ID",
    "boolean": "xsd:boolean",
    "datetime": "xsd:dateTime",
}
SYSTEM_RELATIONSHIPS = {
    "OwnerId": "Owner",
    "CreatedById": "CreatedBy",
    "LastModifiedById": "LastModifiedBy",
}


def base(version: str) -> str:
    return f"/services/data/{version}"


def object_urls(version: str, name: str) -> dict[str, str]:
    root = f"{base(version)}/sobjects/{name}"
    return {"sobject": root, "describe": f"{root}/describe", "rowTemplate": f"{root}/{{ID}}"}


def object_summary(version: str, summary: ObjectSummary) -> dict[str, Any]:
    return {
        "name": summary.name,
        "label": summary.label,
        "labelPlural": summary.label_plural,
        "keyPrefix": summary.key_prefix,
        "custom": summary.custom,
        "customSetting": False,
        "createable": summary.createable,
        "updateable": summary.updateable,
        "deletable": summary.deletable,
        "undeletable": summary.deletable,
        "queryable": summary.queryable,
        "retrieveable": True,
        "searchable": True,
        "layoutable": True,
        "mergeable": False,
        "replicateable": summary.replicateable,
        "triggerable": True,
        "activateable": False,
        "feedEnabled": False,
        "deprecatedAndHidden": False,
        "hasSubtypes": False,
        "isSubtype": False,
        "urls": object_urls(version, summary.name),
    }


def _system_field(name: str, label: str, kind: str, reference_to: list[str]) -> dict[str, Any]:
    date = kind == "datetime"
    return _field_shape(
        name=name,
        label=label,
        kind=kind,
        soap=SOAP_TYPES[kind],
        length=18 if kind in ("id", "reference") else 0,
        nillable=False,
        createable=False,
        updateable=name == "OwnerId",
        filterable=True,
        sortable=True,
        unique=False,
        external_id=False,
        id_lookup=name == "Id",
        name_field=False,
        custom=False,
        reference_to=reference_to,
        relationship_name=SYSTEM_RELATIONSHIPS.get(name),
        defaulted=date or name == "IsDeleted",
    )


def _field_shape(**f: Any) -> dict[str, Any]:
    return {
        "name": f["name"],
        "label": f["label"],
        "type": f["kind"],
        "soapType": f["soap"],
        "length": f["length"],
        "byteLength": f["length"] * 3,
        "digits": 0,
        "precision": f.get("precision", 0),
        "scale": f.get("scale", 0),
        "nillable": f["nillable"],
        "createable": f["createable"],
        "updateable": f["updateable"],
        "filterable": f["filterable"],
        "sortable": f["sortable"],
        "groupable": f["sortable"],
        "unique": f["unique"],
        "externalId": f["external_id"],
        "idLookup": f["id_lookup"],
        "nameField": f["name_field"],
        "custom": f["custom"],
        "calculated": f.get("calculated", False),
        "calculatedFormula": f.get("formula"),
        "autoNumber": f.get("auto_number", False),
        "defaultValue": f.get("default"),
        "defaultedOnCreate": f.get("defaulted", False),
        "picklistValues": f.get("picklist", []),
        "restrictedPicklist": f.get("restricted", False),
        "dependentPicklist": False,
        "referenceTo": f["reference_to"],
        "relationshipName": f["relationship_name"],
        "relationshipOrder": None,
        "cascadeDelete": False,
        "htmlFormatted": False,
        "caseSensitive": False,
        "permissionable": f["custom"],
        "deprecatedAndHidden": False,
        "inlineHelpText": None,
        "controllerName": None,
    }


def field(f: FieldDescribe) -> dict[str, Any]:
    kind, soap = FIELD_TYPES.get(f.type, ("string", "xsd:string"))
    text = kind in ("string", "textarea", "email", "phone", "url", "picklist", "multipicklist")
    length = f.length or (255 if text else 18 if kind == "reference" else 0)
    searchable_text = f.type not in ("long_text", "textarea", "multi_picklist")
    return _field_shape(
        name=f.name,
        label=f.label,
        kind=kind,
        soap=soap,
        length=length,
        precision=f.precision or 0,
        scale=f.scale or 0,
        nillable=f.nillable,
        createable=f.createable,
        updateable=f.updateable,
        filterable=searchable_text,
        sortable=searchable_text,
        unique=f.unique,
        external_id=f.external_id,
        id_lookup=f.external_id or f.unique or f.name_field,
        name_field=f.name_field,
        custom=f.custom,
        calculated=f.calculated,
        formula=f.calculated_formula,
        auto_number=f.type == "auto_number",
        default=f.default_value,
        defaulted=f.default_value is not None,
        picklist=[
            {
                "value": p.value,
                "label": p.label,
                "active": p.active,
                "defaultValue": p.default_value,
                "validFor": None,
            }
            for p in f.picklist_values
        ],
        restricted=f.restricted_picklist,
        reference_to=f.reference_to,
        relationship_name=f.relationship_name,
    )


def describe(version: str, d: ObjectDescribe) -> dict[str, Any]:
    shape = object_summary(version, d.summary)
    own = {f.name for f in d.fields}
    # a describe that lists its own Id (User, Organization, ...) lists every field it has
    system = [] if "Id" in own else [_system_field(*s) for s in SYSTEM_FIELDS if s[0] not in own]
    shape["fields"] = system + [field(f) for f in d.fields]
    shape["childRelationships"] = [
        {
            "childSObject": c.child_object,
            "field": c.field,
            "relationshipName": c.relationship_name,
            "cascadeDelete": c.cascade_delete,
            "restrictedDelete": False,
            "deprecatedAndHidden": False,
            "junctionIdListNames": [],
            "junctionReferenceTo": [],
        }
        for c in d.child_relationships
    ]
    shape["recordTypeInfos"] = [
        {
            "active": True,
            "available": True,
            "defaultRecordTypeMapping": True,
            "developerName": "Master",
            "master": True,
            "name": "Master",
            "recordTypeId": "012000000000000AAA",
            "urls": {"layout": f"{object_urls(version, d.summary.name)['describe']}/layouts"},
        }
    ]
    shape["supportedScopes"] = [{"label": "All records", "name": "everything"}]
    shape["namedLayoutInfos"] = []
    shape["networkScopeFieldName"] = None
    shape["sobjectDescribeOption"] = "FULL"
    shape["actionOverrides"] = []
    shape["listviewable"] = None
    shape["lookupLayoutable"] = None
    shape["searchLayoutable"] = True
    shape["compactLayoutable"] = True
    shape["urls"] = {
        **shape["urls"],
        "uiDetailTemplate": None,
        "uiEditTemplate": None,
        "uiNewRecord": None,
    }
    return shape


def record(version: str, object_name: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A record with its `attributes`; nested parent records get theirs too.

    On the path of every query page (200 records): scalar values are copied as they are, only
    dict values (parent records, child subqueries) are walked."""
    attributes: dict[str, Any] = {"type": object_name}
    record_id = fields.get("Id")
    if isinstance(record_id, str):
        attributes["url"] = f"{base(version)}/sobjects/{object_name}/{record_id}"
    out: dict[str, Any] = {"attributes": attributes}
    out.update(fields)
    out["attributes"] = attributes
    for name, value in fields.items():
        if type(value) is dict and name != "attributes":
            out[name] = nested(version, value)
    return out


def nested(version: str, value: Any) -> Any:
    """Query output: parent records (dicts with `attributes`) get urls; child subqueries too."""
    if isinstance(value, dict) and isinstance(value.get("attributes"), dict):
        kind = str(value["attributes"].get("type", ""))
        return record(version, kind, value)
    if isinstance(value, dict) and "records" in value and "totalSize" in value:
        return {**value, "records": [nested(version, r) for r in value["records"]]}
    return value


def save_result(result: ItemResult, *, upsert: bool = False) -> dict[str, Any]:
    shape: dict[str, Any] = {
        "id": result.id,
        "success": result.success,
        "errors": [error_item(e) for e in result.errors],
    }
    if upsert:
        shape["created"] = result.created
    return shape
