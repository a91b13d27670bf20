"""Bulk API 1.0 batch parsing in the sfcrm App (ADR 0077): XML read safely and bounded,
JSON and XML records as one header and text rows, CSV with a byte-order mark."""

from __future__ import annotations

import pytest

from nexus.apps.sfcrm import bulk1
from nexus.apps.sfcrm.bulk1 import BulkError

NS = "http://www.force.com/2009/06/asyncapi/dataload"


def test_a_dtd_or_an_external_entity_is_refused() -> None:
    for body in (
        b'<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x "y">]><a>&x;</a>',
        b'<?xml version="1.0"?><!DOCTYPE a SYSTEM "file:///etc/passwd"><a/>',
    ):
        with pytest.raises(BulkError) as refused:
            bulk1.parse_xml(body)
        assert refused.value.code == "InvalidXML"


def test_xml_bounds_depth_elements_and_well_formedness(monkeypatch: pytest.MonkeyPatch) -> None:
    deep = b"<a>" * (bulk1.MAX_XML_DEPTH + 1) + b"</a>" * (bulk1.MAX_XML_DEPTH + 1)
    with pytest.raises(BulkError, match="too many elements"):
        bulk1.parse_xml(deep)
    monkeypatch.setattr(bulk1, "MAX_XML_ELEMENTS", 10)
    with pytest.raises(BulkError, match="too many elements"):
        bulk1.parse_xml(b"<a>" + b"<b/>" * 10 + b"</a>")
    with pytest.raises(BulkError, match="not well-formed"):
        bulk1.parse_xml(b"<a><b></a>")


def test_json_records_become_one_header_and_text_rows() -> None:
    body = (
        b'[{"attributes": {"type": "Contact"}, "LastName": "A", "Title": null, "Ok": true},'
        b' {"LastName": "B", "Age": 7, "Account": {"Ext__c": "X-1"}}]'
    )
    columns, rows = bulk1._json_records(body)
    assert columns == ["LastName", "Title", "Ok", "Age", "Account.Ext__c"]
    assert rows == [["A", "#N/A", "true", "", ""], ["B", "", "", "7", "X-1"]]
    for bad in (b'{"LastName": "A"}', b"[1]", b"[{", b'[{"A": [1]}]'):
        with pytest.raises(BulkError) as refused:
            bulk1._json_records(bad)
        assert refused.value.code == "InvalidBatch"


def test_xml_records_with_nil_and_a_parent_by_external_id() -> None:
    body = (
        f'<sObjects xmlns="{NS}" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
        "<sObject><LastName>A &amp; B</LastName><Title xsi:nil='true'/>"
        "<Account><Ext__c>X-1</Ext__c></Account></sObject>"
        "<sObject><LastName>C</LastName></sObject></sObjects>"
    ).encode()
    columns, rows = bulk1._xml_records(body)
    assert columns == ["LastName", "Title", "Account.Ext__c"]
    assert rows == [["A & B", "#N/A", "X-1"], ["C", "", ""]]


def test_csv_records_drop_a_byte_order_mark() -> None:
    columns, rows = bulk1._csv_records('\ufeffLastName,Title\n"A, B","x\ny"\n'.encode())
    assert columns == ["LastName", "Title"]
    assert rows == [["A, B", "x\ny"]]
