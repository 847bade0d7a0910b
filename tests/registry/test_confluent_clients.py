"""confluent-kafka's schema registry client and its Avro, Protobuf and JSON Schema
serializers, unchanged, against the broker's registry (as `make serve` runs it): records
framed with the registry's ids round-trip through the broker; auto.register.schemas on
and off; use.latest.version."""

from __future__ import annotations

import importlib.util
import itertools
import sys

import pytest

from tests.support.deps import require_module

pytestmark = pytest.mark.interop

AVRO_V1 = """{"type": "record", "name": "Click", "namespace": "shop",
  "fields": [{"name": "user", "type": "string"}, {"name": "n", "type": "int"}]}"""
AVRO_V2 = """{"type": "record", "name": "Click", "namespace": "shop",
  "fields": [{"name": "user", "type": "string"}, {"name": "n", "type": "int"},
             {"name": "page", "type": ["null", "string"], "default": null}]}"""
JSON_SCHEMA = """{"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
  "properties": {"id": {"type": "integer"}, "item": {"type": "string"}}, "required": ["id"],
  "additionalProperties": false}"""
PROTO = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Payment {
  string id = 1;
  double amount = 2;
  google.protobuf.Timestamp at = 3;
  map<string, string> tags = 4;
}
"""
_mods = itertools.count()


@pytest.fixture(scope="module")
def sr(registry):
    require_module("confluent_kafka")
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": registry.url})


def produce_consume(broker, topic: str, values: list[bytes]) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": broker.bootstrap})
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out = []
    try:
        for _ in range(200):
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
            if len(out) == len(values):
                break
    finally:
        c.close()
    return out


def ctx(topic: str):
    from confluent_kafka.serialization import MessageField, SerializationContext

    return SerializationContext(topic, MessageField.VALUE)


def test_avro_round_trip_auto_register(broker, registry, sr, subject):
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    topic = subject
    ser = AvroSerializer(sr, AVRO_V1)
    framed = [ser({"user": f"u{i}", "n": i}, ctx(topic)) for i in range(5)]
    assert all(f[0] == 0 for f in framed)
    schema_id = int.from_bytes(framed[0][1:5], "big")
    # the registry has it, under TopicNameStrategy's subject, with that id
    status, latest = registry.call("GET", f"/subjects/{topic}-value/versions/latest")
    assert status == 200 and latest["id"] == schema_id and latest["version"] == 1
    got = produce_consume(broker, topic, framed)
    de = AvroDeserializer(sr)
    assert [de(v, ctx(topic)) for v in got] == [{"user": f"u{i}", "n": i} for i in range(5)]


def test_avro_auto_register_off_looks_up(registry, sr, subject):
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    topic = subject
    off = AvroSerializer(sr, AVRO_V1, conf={"auto.register.schemas": False})
    with pytest.raises(SchemaRegistryError) as exc:
        off({"user": "a", "n": 1}, ctx(topic))  # nothing registered: the lookup is refused
    assert exc.value.http_status_code == 404 and exc.value.error_code == 40401
    schema_id = sr.register_schema(f"{topic}-value", Schema(AVRO_V1, "AVRO"))
    framed = off({"user": "a", "n": 1}, ctx(topic))
    assert int.from_bytes(framed[1:5], "big") == schema_id
    # a schema the subject does not have: 40403
    with pytest.raises(SchemaRegistryError) as exc:
        AvroSerializer(sr, AVRO_V2, conf={"auto.register.schemas": False})({"user": "a", "n": 1}, ctx(topic))
    assert exc.value.error_code == 40403


def test_avro_use_latest_version_and_evolution(broker, sr, subject):
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    topic = subject
    v1 = sr.register_schema(f"{topic}-value", Schema(AVRO_V1, "AVRO"))
    v2 = sr.register_schema(f"{topic}-value", Schema(AVRO_V2, "AVRO"))
    assert v2 != v1
    latest = AvroSerializer(sr, conf={"auto.register.schemas": False, "use.latest.version": True})
    framed_new = latest({"user": "b", "n": 2, "page": "home"}, ctx(topic))
    assert int.from_bytes(framed_new[1:5], "big") == v2
    framed_old = AvroSerializer(sr, AVRO_V1)({"user": "a", "n": 1}, ctx(topic))
    assert int.from_bytes(framed_old[1:5], "big") == v1
    got = produce_consume(broker, topic, [framed_old, framed_new])
    # the reader schema is the latest: the old record reads with the new field's default
    de = AvroDeserializer(sr, conf={"use.latest.version": True})
    assert [de(v, ctx(topic)) for v in got] == [
        {"user": "a", "n": 1, "page": None},
        {"user": "b", "n": 2, "page": "home"},
    ]


def test_json_schema_round_trip(broker, registry, sr, subject):
    from confluent_kafka.schema_registry.error import SchemaRegistryError
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

    topic = subject
    ser = JSONSerializer(JSON_SCHEMA, sr)
    framed = [ser({"id": i, "item": f"x{i}"}, ctx(topic)) for i in range(3)]
    status, latest = registry.call("GET", f"/subjects/{topic}-value/versions/latest")
    assert status == 200 and latest["schemaType"] == "JSON"
    got = produce_consume(broker, topic, framed)
    de = JSONDeserializer(None, schema_registry_client=sr)
    assert [de(v, ctx(topic)) for v in got] == [{"id": i, "item": f"x{i}"} for i in range(3)]
    off = JSONSerializer(JSON_SCHEMA, sr, conf={"auto.register.schemas": False})
    assert off({"id": 9}, ctx(topic))[1:5] == framed[0][1:5]
    with pytest.raises(SchemaRegistryError):
        JSONSerializer(JSON_SCHEMA.replace('"item"', '"thing"'), sr, conf={"auto.register.schemas": False})(
            {"id": 9}, ctx(topic)
        )


def _payment_class(tmp_path):
    """The Payment message compiled by protoc into a module, as an application has it."""
    require_module("grpc_tools")
    from grpc_tools import protoc

    name = f"payment{next(_mods)}"
    (tmp_path / f"{name}.proto").write_text(PROTO)
    import grpc_tools

    include = str(importlib.util.find_spec("grpc_tools").submodule_search_locations[0]) + "/_proto"
    assert (
        protoc.main(
            ["protoc", f"-I{tmp_path}", f"-I{include}", f"--python_out={tmp_path}", str(tmp_path / f"{name}.proto")]
        )
        == 0
    ), grpc_tools
    spec = importlib.util.spec_from_file_location(f"{name}_pb2", tmp_path / f"{name}_pb2.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.Payment


def test_protobuf_round_trip(broker, registry, sr, subject, tmp_path):
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    Payment = _payment_class(tmp_path)
    topic = subject
    ser = ProtobufSerializer(Payment, sr, {"use.deprecated.format": False})
    msgs = [Payment(id=f"p{i}", amount=i * 1.5, tags={"k": str(i)}) for i in range(3)]
    for m in msgs:
        m.at.seconds = 1700000000 + 1
    framed = [ser(m, ctx(topic)) for m in msgs]
    status, latest = registry.call("GET", f"/subjects/{topic}-value/versions/latest")
    assert status == 200 and latest["schemaType"] == "PROTOBUF"
    assert "message Payment" in latest["schema"]  # the registry answers .proto text
    got = produce_consume(broker, topic, framed)
    de = ProtobufDeserializer(Payment, {"use.deprecated.format": False}, schema_registry_client=sr)
    assert [de(v, ctx(topic)) for v in got] == msgs
    # registered again (the client sends a FileDescriptorProto): the same id
    again = ProtobufSerializer(Payment, sr, {"use.deprecated.format": False, "auto.register.schemas": False})
    assert again(msgs[0], ctx(topic))[1:5] == framed[0][1:5]
    # the text the registry answers, registered under another subject, is the same schema: same id
    status, out = registry.register(f"{topic}-copy", latest["schema"], "PROTOBUF")
    assert status == 200 and out["id"] == latest["id"], out
