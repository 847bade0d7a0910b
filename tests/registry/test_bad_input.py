"""Bad input to the registry: malformed schemas, wrong content types, bad JSON, huge
bodies and heads, unknown ids — each answered with Confluent's status and error code,
the broker serving on; corrupt records in `_schemas` logged and skipped, never a crash,
at once and after a restart."""

from __future__ import annotations

import json
import socket

import pytest

from tests.registry.conftest import registry_broker
from tests.support.ports import wait_port

pytestmark = pytest.mark.interop

REC = '{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}'
MAX_BODY = 65536


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with registry_broker(tmp_path_factory, {"schema.registry.max.request.bytes": MAX_BODY}) as b:
        yield b


@pytest.mark.parametrize(
    "schema_type, schema",
    [
        ("AVRO", "{not json"),
        ("AVRO", '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "Nope"}]}'),
        ("AVRO", '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]}'),
        ("AVRO", '{"type": "enum", "name": "E", "symbols": ["A", "A"]}'),
        ("PROTOBUF", 'syntax = "proto3"; message M { strin a = 1; }'),
        ("PROTOBUF", 'syntax = "proto3"; message M { int32 a = 1; int32 b = 1; }'),
        ("PROTOBUF", 'syntax = "proto3"; import "missing.proto"; message M { int32 a = 1; }'),
        ("JSON", '{"type": 12}'),
        ("JSON", "[1, 2]"),
        ("JSON", "nope"),
    ],
)
def test_malformed_schemas_are_42201(registry, subject, schema_type, schema):
    status, out = registry.register(subject, schema, schema_type)
    assert (status, out["error_code"]) == (422, 42201), out
    assert out["message"].startswith(("Invalid schema", "Empty schema")), out
    assert registry.call("GET", f"/subjects/{subject}/versions")[1]["error_code"] == 40401


@pytest.mark.parametrize(
    "body",
    [
        {"schema": ""},
        {"schemaType": "AVRO"},
        {"schema": 12},
        {"schema": REC, "schemaType": "XML"},
        ["not", "an", "object"],
        {"schema": REC, "references": [{"name": "x"}]},
    ],
)
def test_bad_bodies_are_42201(registry, subject, body):
    status, out = registry.call("POST", f"/subjects/{subject}/versions", body)
    assert (status, out["error_code"]) == (422, 42201), out


def test_wrong_content_type_is_415(registry, subject):
    status, out = registry.call("POST", f"/subjects/{subject}/versions", {"schema": REC}, content_type="text/plain")
    assert (status, out) == (415, {"error_code": 415, "message": "HTTP 415 Unsupported Media Type"})


def test_json_that_does_not_parse_is_400(registry, subject):
    status, out = registry.call("POST", f"/subjects/{subject}/versions", raw=b'{"schema": ')
    assert (status, out["error_code"]) == (400, 400), out


def test_a_huge_body_is_413(registry, subject):
    status, out = registry.call(
        "POST", f"/subjects/{subject}/versions", {"schema": json.dumps({"type": "string", "doc": "x" * MAX_BODY})}
    )
    assert status == 413 and out["error_code"] == 413
    assert registry.call("GET", "/subjects")[0] == 200  # and the next connection is served


def test_a_huge_head_is_431_and_garbage_400(broker, registry):
    for request in (
        b"GET /subjects HTTP/1.1\r\nX: " + b"y" * 20000 + b"\r\n\r\n",
        b"\x16\x03\x01garbage\r\n\r\n",
        b"GET /subjects SPDY/9\r\n\r\n",
    ):
        with socket.create_connection(("127.0.0.1", broker.registry_port), timeout=10) as s:
            s.sendall(request)
            answer = s.recv(65536)
            assert answer.startswith((b"HTTP/1.1 431", b"HTTP/1.1 400")), answer
    assert registry.call("GET", "/subjects")[0] == 200


def test_unknown_ids(registry):
    assert registry.call("GET", "/schemas/ids/424242")[1] == {"error_code": 40403, "message": "Schema 424242 not found"}
    assert registry.call("GET", "/schemas/ids/abc")[1]["error_code"] == 40403
    assert registry.call("GET", "/schemas/ids/-1/versions")[1]["error_code"] == 40403


def test_corrupt_records_are_logged_and_skipped(broker, registry, subject):
    from confluent_kafka import Producer

    s, first = registry.register(subject, REC)
    assert s == 200
    topic = "_schemas"
    dup = {"subject": "stolen", "version": 1, "id": first["id"], "schema": '"string"', "deleted": False}
    garbage = [
        (b"not json", b"{}"),
        (b'{"keytype":"WHATEVER","magic":0}', b"{}"),
        (b'{"keytype":"SCHEMA","subject":"x","version":1,"magic":1}', b"not json"),
        (b'{"keytype":"SCHEMA","subject":"x","version":1,"magic":1}', b'{"schema": 5}'),
        (b'{"keytype":"SCHEMA","subject":"stolen","version":1,"magic":1}', json.dumps(dup).encode()),
        (b'{"keytype":"MODE","subject":"x","magic":0}', b'{"mode": "PARTY"}'),
        (b'{"keytype":"DELETE_SUBJECT","subject":"x","magic":0}', b"[]"),
    ]
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for k, v in garbage:
        p.produce(topic, key=k, value=v)
    assert p.flush(30) == 0
    # the registry goes on: the next registration is seen and answered (its view read past the garbage)
    s, second = registry.register(subject + "-after", '{"type":"record","name":"S","fields":[]}')
    assert s == 200 and second["id"] > first["id"]
    assert "stolen" not in registry.call("GET", "/subjects")[1]
    assert registry.call("GET", f"/schemas/ids/{first['id']}")[1] == {"schema": REC}
    log = broker.log_tail(400)
    assert log.count("; skipped") >= len(garbage), log
    # read again from the start after a restart: the same; the first request after the start
    # waits for the view to have read `_schemas` (never a 40403 for a schema that exists)
    broker.stop()
    broker.start(wait=False)
    assert wait_port("127.0.0.1", broker.registry_port, 60)
    assert registry.call("GET", f"/schemas/ids/{second['id']}")[0] == 200
    broker.wait_ready()  # (test_state.py holds the wait itself, without timing)
    assert registry.call("GET", f"/schemas/ids/{first['id']}")[1] == {"schema": REC}
    assert "stolen" not in registry.call("GET", "/subjects")[1]
    s, third = registry.register(subject + "-later", '{"type":"record","name":"T","fields":[]}')
    assert s == 200 and third["id"] > second["id"]
