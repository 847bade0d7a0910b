"""valueFormat=avro: registry-framed Avro values (and keys) read as typed columns, batch and
streaming, with schema evolution across writer versions in one read (issue 37, test 6).

The input is produced by confluent-kafka's own AvroSerializer with its SchemaRegistryClient
against a real broker serving the registry; the reads are real Spark (local mode)."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import time

import pyarrow.parquet as pq
import pytest

from tests.registry.conftest import registry_broker
from tests.spark.helpers import create_topic
from tests.support.deps import require_module

QUERY_TIMEOUT_S = 180

V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    ],
}
# v2: qty widened to long (a promotion), a nullable note and a map with defaults (a
# BACKWARD-compatible evolution: the registry accepts it under the default level)
V2 = json.loads(json.dumps(V1))
V2["fields"][2] = {"name": "qty", "type": "long"}
V2["fields"] += [
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "attrs", "type": {"type": "map", "values": "double"}, "default": {}},
]
AT = datetime.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.timezone.utc)


def v1_record(i: int) -> dict:
    return {
        "id": i,
        "item": f"item-{i}",
        "qty": i % 5,
        "price": decimal.Decimal(i) / 4,
        "at": AT + datetime.timedelta(seconds=i),
        "tags": [f"t{j}" for j in range(i % 3)],
        "status": "PAID" if i % 2 else "NEW",
    }


def v2_record(i: int) -> dict:
    return {**v1_record(i), "qty": 10_000_000_000 + i, "note": None if i % 3 else f"n{i}", "attrs": {"w": i * 1.5}}


@pytest.fixture(scope="module")
def sr_broker(tmp_path_factory):
    with registry_broker(tmp_path_factory, {"num.partitions": 1}, name="spark-avro") as b:
        b.registry_url = f"http://127.0.0.1:{b.registry_port}"
        yield b


@pytest.fixture(scope="module")
def sr(sr_broker):
    require_module("confluent_kafka")
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": sr_broker.registry_url})


def produce_avro(broker, sr, topic: str, schema: dict, records: list, partition: int = 0) -> None:
    """Frames each record with confluent-kafka's AvroSerializer (it registers the schema
    under <topic>-value) and produces it with confluent-kafka's Producer."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    ser = AvroSerializer(sr, json.dumps(schema))
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for rec in records:
        p.produce(topic, ser(rec, SerializationContext(topic, MessageField.VALUE)), partition=partition)
    assert p.flush(30) == 0


def produce_raw(broker, topic: str, values: list) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap})
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0


def two_versions(sr_broker, sr, topic: str, n1: int = 30, n2: int = 20) -> None:
    create_topic(sr_broker.bootstrap, topic, 1)
    produce_avro(sr_broker, sr, topic, V1, [v1_record(i) for i in range(n1)])
    produce_avro(sr_broker, sr, topic, V2, [v2_record(i) for i in range(n1, n1 + n2)])


def read(spark, broker, topic: str, **options):
    r = (
        spark.read.format("kbroker")
        .option("kbroker.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("valueFormat", "avro")
        .option("schema.registry.url", broker.registry_url)
    )
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def expected_v2_view(i: int, n1: int) -> dict:
    """Record i as the latest (v2) reader schema reads it."""
    if i < n1:
        r = v1_record(i)
        return {**r, "note": None, "attrs": {}}
    return v2_record(i)


def as_dicts(rows) -> list[dict]:
    out = []
    for row in rows:
        d = row.asDict(recursive=True)
        d["attrs"] = dict(d["attrs"]) if d.get("attrs") is not None else None
        out.append(d)
    return out


def normal(d: dict) -> dict:
    d = dict(d)
    d["at"] = (
        d["at"].astimezone(datetime.timezone.utc) if d["at"].tzinfo else d["at"].replace(tzinfo=datetime.timezone.utc)
    )
    d["price"] = decimal.Decimal(d["price"]).quantize(decimal.Decimal("0.01"))
    return d


def test_batch_read_two_versions_latest_reader(spark, sr_broker, sr, topic_name):
    two_versions(sr_broker, sr, topic_name)
    df = read(spark, sr_broker, topic_name)
    assert df.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,item:string,qty:bigint,price:decimal(9,2),at:timestamp,tags:array<string>,"
        "status:string,note:string,attrs:map<string,double>>"
    )
    rows = df.orderBy("offset").select("value.*").collect()
    got = [normal(d) for d in as_dicts(rows)]
    assert got == [normal(expected_v2_view(i, 30)) for i in range(50)]


def test_batch_read_with_an_older_reader_version_and_explicit_schema(spark, sr_broker, sr, topic_name):
    two_versions(sr_broker, sr, topic_name, 5, 5)
    # version 1 as the reader: v2's records lose note/attrs, and their qty (a long) cannot
    # be read as v1's int -> those records fail; PERMISSIVE reads them as null
    rows = (
        read(spark, sr_broker, topic_name, valueSchemaVersion="1", mode="PERMISSIVE")
        .orderBy("offset")
        .select("value")
        .collect()
    )
    assert [r.value is None for r in rows] == [False] * 5 + [True] * 5
    assert rows[0].value.asDict()["item"] == "item-0"
    # an explicit reader schema: a projection of two fields
    reader = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "item", "type": "string"}, {"name": "id", "type": "long"}],
    }
    got = (
        read(spark, sr_broker, topic_name, valueAvroSchema=json.dumps(reader))
        .orderBy("offset")
        .select("value.*")
        .collect()
    )
    assert [(r.item, r.id) for r in got] == [(f"item-{i}", i) for i in range(10)]


def test_unknown_id_and_corrupt_bytes_failfast_and_permissive(spark, sr_broker, sr, topic_name):
    create_topic(sr_broker.bootstrap, topic_name, 1)
    produce_avro(sr_broker, sr, topic_name, V1, [v1_record(0)])
    good_id = sr.get_latest_version(f"{topic_name}-value").schema_id
    produce_raw(
        sr_broker,
        topic_name,
        [
            b"\x00" + (987654).to_bytes(4, "big") + b"\x02",  # an id the registry does not have
            b"plain text, not framed",
            b"\x00" + good_id.to_bytes(4, "big") + b"\x02\x08it",  # truncated datum
        ],
    )
    produce_avro(sr_broker, sr, topic_name, V1, [v1_record(1)])
    with pytest.raises(Exception) as err:
        read(spark, sr_broker, topic_name).collect()
    text = str(err.value)
    assert "kbroker: the value of offset 1 of" in text and "schema id 987654 is not in the registry" in text
    assert "mode=PERMISSIVE" in text
    rows = read(spark, sr_broker, topic_name, mode="PERMISSIVE").orderBy("offset").select("offset", "value").collect()
    assert [r.value is None for r in rows] == [False, True, True, True, False]
    assert [r.value.id for r in rows if r.value is not None] == [0, 1]


def test_stream_two_versions_to_typed_parquet(spark, sr_broker, sr, topic_name, tmp_path):
    """Issue 37's test 6, first half: a streaming job reads Avro records of two schema
    versions and writes typed Parquet."""
    two_versions(sr_broker, sr, topic_name, 40, 25)
    df = (
        spark.readStream.format("kbroker")
        .option("kbroker.bootstrap.servers", sr_broker.bootstrap)
        .option("subscribe", topic_name)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 20)
        .option("valueFormat", "avro")
        .option("schema.registry.url", sr_broker.registry_url)
        .load()
        .select("offset", "value.*")
    )
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(QUERY_TIMEOUT_S), "availableNow query did not finish"
    assert q.exception() is None, q.exception()
    table = pq.read_table(str(out))
    types = {f.name: str(f.type) for f in table.schema}
    assert types["id"] == "int64" and types["qty"] == "int64" and types["item"] == "string"
    assert types["price"] == "decimal128(9, 2)" and types["at"].startswith("timestamp[")
    assert types["attrs"].startswith("map<string, double")
    rows = sorted(table.to_pylist(), key=lambda r: r["offset"])
    assert [r["offset"] for r in rows] == list(range(65))
    for i, r in enumerate(rows):
        want = normal(expected_v2_view(i, 40))
        r = dict(r)
        del r["offset"]
        r["attrs"] = dict(r["attrs"])
        assert normal(r) == want, i


def test_the_pipelines_page_avro_example_runs_as_written(spark, sr_broker, sr, capsys):
    """docs/pipelines.md's Avro example, as written, against this module's broker and
    registry (ports replaced), on a topic `orders` of two schema versions."""
    from tests.pipelines.helpers import ROOT, fenced_blocks

    block = next(
        b for b in fenced_blocks(ROOT / "docs" / "pipelines.md", "python") if any("valueFormat" in x for x in b)
    )
    code = "\n".join(block).replace("127.0.0.1:9092", sr_broker.bootstrap)
    code = code.replace("http://127.0.0.1:8081", sr_broker.registry_url)
    two_versions(sr_broker, sr, "orders", 3, 2)
    capsys.readouterr()
    exec(compile(code, "docs/pipelines.md", "exec"), {})
    out = capsys.readouterr().out
    assert " |-- value: struct" not in out and " |-- qty: long" in out and "|-- attrs: map" in out, out
    assert "item-0" in out and "item-4" in out and "10000000004" in out, out


def consume_all(broker, topic: str, n: int, timeout_s: float = 60.0) -> list:
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"check-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    out: list = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None or m.error():
                continue
            out.append(m)
    finally:
        c.close()
    return out


def test_batch_write_avro_read_back_by_confluents_deserializer(spark, sr_broker, sr, topic_name):
    """Issue 37's test 6, second half: a batch job writes registry-framed Avro (its schema
    derived from the rows' type and registered under <topic>-value) that confluent-kafka's
    AvroDeserializer reads back."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from pyspark.sql import functions as F

    create_topic(sr_broker.bootstrap, topic_name, 2)
    df = spark.range(0, 200).select(
        F.col("id").cast("string").alias("key"),
        F.struct(
            F.col("id").alias("id"),
            F.concat(F.lit("item-"), F.col("id").cast("string")).alias("item"),
            F.when(F.col("id") % 3 == 0, F.lit(None)).otherwise(F.col("id") * 1.5).alias("price"),
            F.array(F.lit(1), (F.col("id") % 7).cast("int")).alias("counts"),
            F.to_date(F.lit("2026-03-04")).alias("day"),
        ).alias("value"),
    )
    (
        df.write.format("kbroker")
        .option("kbroker.bootstrap.servers", sr_broker.bootstrap)
        .option("topic", topic_name)
        .option("valueFormat", "avro")
        .option("schema.registry.url", sr_broker.registry_url)
        .mode("append")
        .save()
    )
    registered = sr.get_latest_version(f"{topic_name}-value")
    assert json.loads(registered.schema.schema_str)["name"] == "topLevelRecord"
    deser = AvroDeserializer(sr)
    msgs = consume_all(sr_broker, topic_name, 200)
    got = {}
    for m in msgs:
        assert m.value()[0] == 0 and int.from_bytes(m.value()[1:5], "big") == registered.schema_id
        rec = deser(m.value(), SerializationContext(topic_name, MessageField.VALUE))
        assert m.key() == str(rec["id"]).encode()
        got[rec["id"]] = rec
    assert sorted(got) == list(range(200))
    for i, rec in got.items():
        assert rec == {
            "id": i,
            "item": f"item-{i}",
            "price": None if i % 3 == 0 else i * 1.5,
            "counts": [1, i % 7],
            "day": datetime.date(2026, 3, 4),
        }
    # and the source reads the sink's records back as the same rows
    back = read(spark, sr_broker, topic_name).select("value.*").orderBy("id").collect()
    assert [r.item for r in back] == [f"item-{i}" for i in range(200)]


def test_keys_too_written_and_read_as_avro(spark, sr_broker, sr, topic_name):
    """keyFormat=avro on both sides: the sink registers <topic>-key, the source decodes it."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from pyspark.sql import functions as F

    create_topic(sr_broker.bootstrap, topic_name, 1)
    df = spark.range(0, 30).select(
        F.struct(F.col("id").alias("user"), F.lit("eu").alias("region")).alias("key"),
        F.struct((F.col("id") * 2).alias("n")).alias("value"),
    )
    options = {
        "kbroker.bootstrap.servers": sr_broker.bootstrap,
        "topic": topic_name,
        "keyFormat": "avro",
        "valueFormat": "avro",
        "schema.registry.url": sr_broker.registry_url,
    }
    df.write.format("kbroker").options(**options).mode("append").save()
    msgs = consume_all(sr_broker, topic_name, 30)
    deser = AvroDeserializer(sr)
    keys = sorted(deser(m.key(), SerializationContext(topic_name, MessageField.KEY))["user"] for m in msgs)
    assert keys == list(range(30))
    rows = (
        read(spark, sr_broker, topic_name, keyFormat="avro")
        .select("key.user", "key.region", "value.n")
        .orderBy("user")
        .collect()
    )
    assert [(r.user, r.region, r.n) for r in rows] == [(i, "eu", 2 * i) for i in range(30)]


def test_schema_references_and_a_non_avro_id_without_spark(sr_broker, sr):
    """The decoder the tasks use (formats.decoder), against the registry: a writer schema
    with a reference (Confluent's schema references) is fetched with what it references;
    an id of a JSON Schema is refused with its type named."""
    import io
    import struct

    import fastavro
    import pyarrow as pa

    from broker.spark.formats import ColumnFormat, RegistryClient, decoder

    client = RegistryClient(sr_broker.registry_url)
    money = {"type": "record", "name": "Money", "namespace": "shop", "fields": [{"name": "cents", "type": "long"}]}
    client.register("shop.Money", json.dumps(money))
    order = {
        "type": "record",
        "name": "Priced",
        "namespace": "shop",
        "fields": [{"name": "item", "type": "string"}, {"name": "price", "type": "shop.Money"}],
    }
    status, body = client.call(
        "POST",
        "/subjects/priced-value/versions",
        {"schema": json.dumps(order), "references": [{"name": "shop.Money", "subject": "shop.Money", "version": 1}]},
    )
    assert status == 200, body
    sid = body["id"]
    json_id = client.register("json-value", '{"type": "object"}', "JSON")
    named: dict = {}
    fastavro.parse_schema(money, named_schemas=named)
    parsed = fastavro.parse_schema(order, named_schemas=named)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, {"item": "book", "price": {"cents": 1250}})
    values = pa.array(
        [b"\x00" + struct.pack(">I", sid) + buf.getvalue(), b"\x00" + struct.pack(">I", json_id) + b"{}"], pa.binary()
    )
    fmt = ColumnFormat("value", "avro", sr_broker.registry_url, None, "priced-value", "latest", None, True)
    dec = decoder(fmt, fmt.reader_schema())
    assert dec.decode(values).to_pylist() == [{"item": "book", "price": {"cents": 1250}}, None]
    strict = decoder(dataclasses.replace(fmt, permissive=False), fmt.reader_schema())
    with pytest.raises(Exception, match=f"schema id {json_id} is a JSON schema, not Avro"):
        strict.decode(values)


PROTO_V1 = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Payment {
  string id = 1;
  double amount = 2;
  google.protobuf.Timestamp at = 3;
  map<string, string> tags = 4;
  repeated int32 parts = 5;
  Method method = 6;
  enum Method { CARD = 0; CASH = 1; }
}
"""
# v2 adds a nested message (field 7): v1's records read with it as null
PROTO_V2 = PROTO_V1.replace(
    "  enum Method", "  Payer payer = 7;\n  message Payer { string name = 1; int64 account = 2; }\n  enum Method"
)


def _proto_class(text: str, name: str):
    """The Payment message of `text` (parsed by protoc, as the registry parses it), as an
    application has it: a message class, here in a descriptor pool of its own so that two
    versions of one message live side by side."""
    require_module("grpc_tools")
    from google.protobuf import descriptor_pool, message_factory

    from broker.registry.formats.protobuf import parse_protobuf

    schema = parse_protobuf(text)
    pool = descriptor_pool.DescriptorPool()
    for dep_name, f in schema.files.items():
        if dep_name != schema.file.name:
            pool.Add(f)
    file = type(schema.file)()
    file.CopyFrom(schema.file)
    file.name = f"{name}.proto"
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Payment"))


def test_batch_read_protobuf_two_versions(spark, sr_broker, sr, topic_name, tmp_path):
    """valueFormat=protobuf: records framed by confluent-kafka's ProtobufSerializer, of two
    versions of the message, read with the latest as typed columns (fields by number)."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    create_topic(sr_broker.bootstrap, topic_name, 1)
    p = Producer({"bootstrap.servers": sr_broker.bootstrap})
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    for version, text in ((1, PROTO_V1), (2, PROTO_V2)):
        Payment = _proto_class(text, f"payment_v{version}")
        ser = ProtobufSerializer(Payment, sr, {"use.deprecated.format": False})
        for i in range(5 * (version - 1), 5 * version):
            m = Payment(id=f"p{i}", amount=i * 1.5, tags={"k": str(i)}, parts=list(range(i % 4)), method=i % 2)
            m.at.seconds = 1_700_000_000 + i
            if version == 2:
                m.payer.name = f"n{i}"
                m.payer.account = 10**12 + i
            p.produce(topic_name, ser(m, ctx))
    assert p.flush(30) == 0
    df = (
        spark.read.format("kbroker")
        .option("kbroker.bootstrap.servers", sr_broker.bootstrap)
        .option("subscribe", topic_name)
        .option("valueFormat", "protobuf")
        .option("schema.registry.url", sr_broker.registry_url)
        .load()
    )
    assert df.schema["value"].dataType.simpleString() == (
        "struct<id:string,amount:double,at:timestamp,tags:map<string,string>,parts:array<int>,method:string,"
        "payer:struct<name:string,account:bigint>>"
    )
    rows = df.orderBy("offset").select("value.*").collect()
    utc = datetime.timezone.utc
    for i, r in enumerate(rows):
        assert r.id == f"p{i}"
        assert r.amount == (i * 1.5 if i else None)  # proto3 zero values are not on the wire: null
        assert r.at.astimezone(utc) == datetime.datetime.fromtimestamp(1_700_000_000 + i, utc)
        assert r.tags == {"k": str(i)} and r.parts == list(range(i % 4))
        assert r.method == ("CASH" if i % 2 else None)
        assert (r.payer.asDict() if r.payer else None) == ({"name": f"n{i}", "account": 10**12 + i} if i >= 5 else None)
    assert len(rows) == 10


JSON_V1 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Visit",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "page": {"type": "string"},
        "ms": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["id"],
    "additionalProperties": False,  # closed: adding an optional property is BACKWARD-compatible
}
JSON_V2 = json.loads(json.dumps(JSON_V1))
JSON_V2["properties"]["user"] = {"type": ["object", "null"], "properties": {"name": {"type": "string"}}}


def test_batch_read_json_schema_two_versions(spark, sr_broker, sr, topic_name):
    """valueFormat=json-schema: records framed by confluent-kafka's JSONSerializer, of two
    versions of the schema, read with the latest as typed columns."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    create_topic(sr_broker.bootstrap, topic_name, 1)
    p = Producer({"bootstrap.servers": sr_broker.bootstrap})
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    for version, schema in ((1, JSON_V1), (2, JSON_V2)):
        ser = JSONSerializer(json.dumps(schema), sr)
        for i in range(5 * (version - 1), 5 * version):
            doc = {"id": i, "page": f"/p/{i}", "ms": i / 4, "tags": ["a"] * (i % 3)}
            if version == 2:
                doc["user"] = {"name": f"u{i}"}
            p.produce(topic_name, ser(doc, ctx))
    assert p.flush(30) == 0
    df = (
        spark.read.format("kbroker")
        .option("kbroker.bootstrap.servers", sr_broker.bootstrap)
        .option("subscribe", topic_name)
        .option("valueFormat", "json-schema")
        .option("schema.registry.url", sr_broker.registry_url)
        .load()
    )
    assert df.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,page:string,ms:double,tags:array<string>,user:struct<name:string>>"
    )
    rows = df.orderBy("offset").select("value.*").collect()
    assert [(r.id, r.page, r.ms, r.tags, r.user.name if r.user else None) for r in rows] == [
        (i, f"/p/{i}", i / 4, ["a"] * (i % 3), f"u{i}" if i >= 5 else None) for i in range(10)
    ]
