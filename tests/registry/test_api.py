"""Confluent's REST API v1 as the broker's registry answers it: each endpoint, its
answers and its error codes; references; soft and permanent deletion; config and mode;
one id for one schema across subjects."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.interop

REC = '{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}'
REC2 = '{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"int","default":0}]}'


def test_register_is_idempotent_and_ids_are_per_schema(registry, subject):
    s, first = registry.register(subject, REC)
    assert s == 200 and first["version"] == 1
    # the same schema, written differently (whitespace, attribute order): the same version and id
    s, again = registry.register(
        subject,
        json.dumps(json.loads(REC), indent=2).replace('"type": "record", ', "").replace("{", '{"type": "record", ', 1),
    )
    assert s == 200 and (again["id"], again["version"]) == (first["id"], 1)
    assert registry.call("GET", f"/subjects/{subject}/versions")[1] == [1]
    # under another subject: the same id, its own version 1
    s, other = registry.register(subject + "-other", REC)
    assert s == 200 and (other["id"], other["version"]) == (first["id"], 1)
    s, versions = registry.call("GET", f"/schemas/ids/{first['id']}/versions")
    assert versions == [{"subject": subject, "version": 1}, {"subject": subject + "-other", "version": 1}]
    assert registry.call("GET", f"/schemas/ids/{first['id']}/subjects")[1] == [subject, subject + "-other"]


def test_reads(registry, subject):
    _, v1 = registry.register(subject, REC)
    _, v2 = registry.register(subject, REC2)
    assert v2["id"] != v1["id"] and v2["version"] == 2
    s, got = registry.call("GET", f"/subjects/{subject}/versions/1")
    assert s == 200 and got == {"subject": subject, "version": 1, "id": v1["id"], "schema": REC}
    assert registry.call("GET", f"/subjects/{subject}/versions/latest")[1]["version"] == 2
    assert registry.call("GET", f"/subjects/{subject}/versions/-1")[1]["version"] == 2
    s, raw = registry.call("GET", f"/subjects/{subject}/versions/2/schema")
    assert s == 200 and raw == json.loads(REC2)
    s, by_id = registry.call("GET", f"/schemas/ids/{v1['id']}")
    assert (s, by_id) == (200, {"schema": REC})
    assert registry.call("GET", f"/schemas/ids/{v1['id']}/schema")[1] == json.loads(REC)
    assert subject in registry.call("GET", "/subjects")[1]
    assert registry.call("GET", "/schemas/types")[1] == ["JSON", "PROTOBUF", "AVRO"]
    s, found = registry.call("POST", f"/subjects/{subject}", {"schema": REC})
    assert s == 200 and (found["version"], found["id"]) == (1, v1["id"])
    assert registry.call("GET", "/")[0] == 200


def test_not_found_and_invalid(registry, subject):
    assert registry.call("GET", "/subjects/nope-nope/versions") == (
        404,
        {"error_code": 40401, "message": "Subject 'nope-nope' not found."},
    )
    registry.register(subject, REC)
    assert registry.call("GET", f"/subjects/{subject}/versions/7") == (
        404,
        {"error_code": 40402, "message": "Version 7 not found."},
    )
    assert registry.call("GET", "/schemas/ids/987654") == (
        404,
        {"error_code": 40403, "message": "Schema 987654 not found"},
    )
    s, out = registry.call("GET", f"/subjects/{subject}/versions/abc")
    assert (s, out["error_code"]) == (422, 42202)
    s, out = registry.call("GET", f"/subjects/{subject}/versions/0")
    assert (s, out["error_code"]) == (422, 42202)
    s, out = registry.call("POST", f"/subjects/{subject}", {"schema": REC2})
    assert (s, out) == (404, {"error_code": 40403, "message": "Schema not found"})
    s, out = registry.call("PUT", "/config", {"compatibility": "SIDEWAYS"})
    assert (s, out["error_code"]) == (422, 42203)
    s, out = registry.call("PUT", "/mode", {"mode": "SOMETIMES"})
    assert (s, out["error_code"]) == (422, 42204)
    assert registry.call("GET", f"/config/{subject}")[1]["error_code"] == 40408
    assert registry.call("GET", f"/config/{subject}?defaultToGlobal=true")[1] == {"compatibilityLevel": "BACKWARD"}
    assert registry.call("GET", f"/mode/{subject}")[1]["error_code"] == 40409
    assert registry.call("GET", "/mode")[1] == {"mode": "READWRITE"}
    assert registry.call("GET", "/nowhere") == (404, {"error_code": 404, "message": "HTTP 404 Not Found"})
    assert registry.call("PUT", "/subjects") == (405, {"error_code": 405, "message": "HTTP 405 Method Not Allowed"})


def test_soft_then_permanent_deletion(registry, subject):
    _, v1 = registry.register(subject, REC)
    registry.register(subject, REC2)
    assert registry.call("DELETE", f"/subjects/{subject}/versions/2?permanent=true")[1]["error_code"] == 40407
    assert registry.call("DELETE", f"/subjects/{subject}/versions/2") == (200, 2)
    assert registry.call("DELETE", f"/subjects/{subject}/versions/2")[1]["error_code"] == 40406
    assert registry.call("GET", f"/subjects/{subject}/versions")[1] == [1]
    assert registry.call("GET", f"/subjects/{subject}/versions?deleted=true")[1] == [1, 2]
    assert registry.call("GET", f"/subjects/{subject}/versions/2")[1]["error_code"] == 40402
    assert registry.call("GET", f"/subjects/{subject}/versions/2?deleted=true")[0] == 200
    assert registry.call("DELETE", f"/subjects/{subject}/versions/2?permanent=true") == (200, 2)
    assert registry.call("GET", f"/subjects/{subject}/versions?deleted=true")[1] == [1]
    assert registry.call("DELETE", f"/subjects/{subject}?permanent=true")[1]["error_code"] == 40405
    assert registry.call("DELETE", f"/subjects/{subject}") == (200, [1])
    assert registry.call("DELETE", f"/subjects/{subject}")[1]["error_code"] == 40404
    assert subject not in registry.call("GET", "/subjects")[1]
    assert subject in registry.call("GET", "/subjects?deleted=true")[1]
    # a soft-deleted schema is still readable by id (data written with it stays readable)
    assert registry.call("GET", f"/schemas/ids/{v1['id']}")[0] == 200
    # registering again after a soft delete: a new version, the same id
    s, again = registry.register(subject, REC)
    assert s == 200 and (again["id"], again["version"]) == (v1["id"], 2)
    registry.call("DELETE", f"/subjects/{subject}")
    assert registry.call("DELETE", f"/subjects/{subject}?permanent=true") == (200, [1, 2])
    assert registry.call("GET", f"/subjects/{subject}/versions?deleted=true")[1]["error_code"] == 40401


def test_an_id_is_never_given_again(registry, subject):
    _, gone = registry.register(subject, '{"type":"fixed","name":"F","size":3}')
    registry.call("DELETE", f"/subjects/{subject}")
    assert registry.call("DELETE", f"/subjects/{subject}?permanent=true")[0] == 200
    assert registry.call("GET", f"/schemas/ids/{gone['id']}")[1]["error_code"] == 40403
    _, new = registry.register(subject, '{"type":"fixed","name":"G","size":4}')
    assert new["id"] > gone["id"]


def test_references(registry, subject):
    addr = '{"type":"record","name":"Address","namespace":"t","fields":[{"name":"city","type":"string"}]}'
    _, a = registry.register(f"{subject}-address", addr)
    person = '{"type":"record","name":"Person","namespace":"t","fields":[{"name":"home","type":"t.Address"}]}'
    refs = [{"name": "t.Address", "subject": f"{subject}-address", "version": 1}]
    s, p = registry.register(subject, person, references=refs)
    assert s == 200, p
    s, got = registry.call("GET", f"/subjects/{subject}/versions/1")
    assert got["references"] == refs and got["id"] == p["id"]
    assert registry.call("GET", f"/subjects/{subject}-address/versions/1/referencedby")[1] == [p["id"]]
    assert registry.call("DELETE", f"/subjects/{subject}-address/versions/1")[1]["error_code"] == 42206
    # a reference to nothing: invalid
    s, out = registry.register(
        subject + "-x", person, references=[{"name": "t.Address", "subject": "missing", "version": 1}]
    )
    assert (s, out["error_code"]) == (422, 42201)
    assert a["id"] != p["id"]
    # Protobuf imports and JSON $refs are references too
    s, dep = registry.register(
        f"{subject}-pdep", 'syntax = "proto3"; package t; message Money { int64 cents = 1; }', "PROTOBUF"
    )
    assert s == 200
    s, out = registry.register(
        f"{subject}-p",
        'syntax = "proto3"; package t; import "money.proto"; message Order { Money total = 1; }',
        "PROTOBUF",
        [{"name": "money.proto", "subject": f"{subject}-pdep", "version": 1}],
    )
    assert s == 200, out
    s, dep = registry.register(f"{subject}-jdep", '{"type": "string", "maxLength": 3}', "JSON")
    s, out = registry.register(
        f"{subject}-j",
        '{"type": "object", "properties": {"code": {"$ref": "code.json"}}}',
        "JSON",
        [{"name": "code.json", "subject": f"{subject}-jdep", "version": 1}],
    )
    assert s == 200, out


def test_config_and_mode(registry, subject):
    registry.register(subject, REC)
    assert registry.call("PUT", f"/config/{subject}", {"compatibility": "none"}) == (200, {"compatibility": "NONE"})
    assert registry.call("GET", f"/config/{subject}")[1] == {"compatibilityLevel": "NONE"}
    assert registry.register(subject, '{"type":"record","name":"R","fields":[{"name":"z","type":"string"}]}')[0] == 200
    assert registry.call("DELETE", f"/config/{subject}") == (200, {"compatibilityLevel": "NONE"})
    assert registry.call("PUT", f"/mode/{subject}", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    s, out = registry.register(subject, REC2)
    assert (s, out["error_code"]) == (422, 42205)
    assert registry.call("DELETE", f"/mode/{subject}") == (200, {"mode": "READONLY"})
    assert registry.call("GET", f"/mode/{subject}?defaultToGlobal=true")[1] == {"mode": "READWRITE"}


def test_compatibility_endpoint(registry, subject):
    assert registry.call("POST", f"/compatibility/subjects/{subject}/versions/latest", {"schema": REC}) == (
        200,
        {"is_compatible": True},
    )
    registry.register(subject, REC)
    bad = '{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}'
    s, out = registry.call("POST", f"/compatibility/subjects/{subject}/versions/1?verbose=true", {"schema": bad})
    assert s == 200 and out["is_compatible"] is False and "TYPE_MISMATCH" in out["messages"][0]
    assert (
        registry.call("POST", f"/compatibility/subjects/{subject}/versions/5", {"schema": REC})[1]["error_code"]
        == 40402
    )
