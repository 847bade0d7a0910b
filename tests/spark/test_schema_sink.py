"""valueFormat=protobuf / json-schema on the sink (issue 37): batch Spark jobs write
registry-framed Protobuf and JSON to a real broker serving its registry; confluent-kafka's
ProtobufDeserializer and JSONDeserializer read the records back, unchanged, and the values
equal the rows; the kbroker source reads them back as typed columns equal to what was
written. Also: the user's own schema (enums by name, a message other than the file's
first, RecordNameStrategy, use.latest.version), and bad input — a row that does not fit
the user's schema, an option that does not fit, a schema the registry refuses as
incompatible — each a clear error."""

from __future__ import annotations

import base64
import datetime
import decimal
import json

import pytest

from tests.registry.conftest import registry_broker
from tests.spark.helpers import create_topic
from tests.spark.test_avro import consume_all
from tests.spark.test_schema_encoders import USER_PROTO, message_class
from tests.support.deps import require_module

UTC = datetime.timezone.utc


@pytest.fixture(scope="module")
def sr_broker(tmp_path_factory):
    with registry_broker(tmp_path_factory, {"num.partitions": 1}, name="spark-schema-sink") as b:
        b.registry_url = f"http://127.0.0.1:{b.registry_port}"
        yield b


@pytest.fixture(scope="module")
def sr(sr_broker):
    require_module("confluent_kafka")
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": sr_broker.registry_url})


def write(df, broker, topic: str, **options) -> None:
    w = (
        df.write.format("kbroker")
        .option("kbroker.bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .option("schema.registry.url", broker.registry_url)
    )
    for k, v in options.items():
        w = w.option(k, v)
    w.mode("append").save()


def read(spark, broker, topic: str, **options):
    r = (
        spark.read.format("kbroker")
        .option("kbroker.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("schema.registry.url", broker.registry_url)
    )
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows_frame(spark, n: int):
    """n rows of a value struct of most types, nulls included; the timestamps in UTC."""
    from pyspark.sql import functions as F

    i = F.col("id")
    return spark.range(0, n).select(
        i.cast("string").alias("key"),
        F.struct(
            i.alias("id"),
            F.concat(F.lit('it"em\n\\é-'), i.cast("string")).alias("item"),
            F.when(i % 3 == 0, F.lit(None)).otherwise(i * 1.5).alias("price"),
            F.array(F.lit(1), (i % 7).cast("int")).alias("counts"),
            F.create_map(F.lit("w"), i * 2).alias("attrs"),
            F.timestamp_micros(F.lit(1_767_323_045_678_901) + i * 1_000_001).alias("at"),
            F.when(i % 4 == 0, F.lit(None))
            .otherwise(F.struct(F.concat(F.lit("n"), i.cast("string")).alias("name"), (i + 10**12).alias("account")))
            .alias("payer"),
            (i % 2 == 0).alias("ok"),
        ).alias("value"),
    )


def expected(i: int) -> dict:
    return {
        "id": i,
        "item": f'it"em\n\\é-{i}',
        "price": None if i % 3 == 0 else i * 1.5,
        "counts": [1, i % 7],
        "attrs": {"w": i * 2},
        "at": datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
        + datetime.timedelta(microseconds=i * 1_000_001),
        "payer": None if i % 4 == 0 else {"name": f"n{i}", "account": i + 10**12},
        "ok": i % 2 == 0,
    }


def as_plain(row) -> dict:
    d = row.asDict(recursive=True)
    for k, v in d.items():
        if isinstance(v, datetime.datetime):
            d[k] = v.astimezone(UTC) if v.tzinfo else v.replace(tzinfo=UTC)
    return d


@pytest.fixture
def utc_session(spark):
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    yield spark
    spark.conf.set("spark.sql.session.timeZone", old)


def test_batch_write_protobuf_read_back_by_confluents_deserializer_and_the_source(
    utc_session, sr_broker, sr, topic_name
):
    """The message derived from the rows' type (proto3, registered under <topic>-value):
    ProtobufDeserializer, with the message class protoc makes of the registered schema,
    reads each value as the row; the kbroker source reads the same rows back."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    spark = utc_session
    create_topic(sr_broker.bootstrap, topic_name, 2)
    write(rows_frame(spark, 120), sr_broker, topic_name, valueFormat="protobuf")
    registered = sr.get_latest_version(f"{topic_name}-value")
    assert registered.schema.schema_type == "PROTOBUF"
    text = registered.schema.schema_str
    assert "message topLevelRecord" in text and "optional double price = 3;" in text, text
    deser = ProtobufDeserializer(message_class(text, "topLevelRecord"), {"use.deprecated.format": False})
    got = {}
    for m in consume_all(sr_broker, topic_name, 120):
        v = m.value()
        assert v[:6] == b"\x00" + registered.schema_id.to_bytes(4, "big") + b"\x00"
        msg = deser(v, SerializationContext(topic_name, MessageField.VALUE))
        assert m.key() == str(msg.id).encode()
        got[msg.id] = msg
    assert sorted(got) == list(range(120))
    for i, msg in got.items():
        e = expected(i)
        assert (msg.item, list(msg.counts), dict(msg.attrs), msg.ok) == (e["item"], e["counts"], e["attrs"], e["ok"])
        assert msg.HasField("price") == (e["price"] is not None) and msg.price == (e["price"] or 0.0)
        assert msg.at.ToDatetime(tzinfo=UTC) == e["at"]
        assert msg.HasField("payer") == (e["payer"] is not None)
        if e["payer"]:
            assert (msg.payer.name, msg.payer.account) == (e["payer"]["name"], e["payer"]["account"])
    back = read(spark, sr_broker, topic_name, valueFormat="protobuf").select("value.*")
    assert back.schema.simpleString() == (
        "struct<id:bigint,item:string,price:double,counts:array<int>,attrs:map<string,bigint>,at:timestamp,"
        "payer:struct<name:string,account:bigint>,ok:boolean>"
    )
    assert sorted((as_plain(r) for r in back.collect()), key=lambda d: d["id"]) == [expected(i) for i in range(120)]


def test_batch_write_json_schema_read_back_by_confluents_deserializer_and_the_source(
    utc_session, sr_broker, sr, topic_name
):
    """The JSON Schema derived from the rows' type: JSONDeserializer (which validates each
    record against the registered schema) reads each value, and the key (keyFormat), as
    the row in JSON's terms — a decimal a number, bytes base64, times RFC 3339 — and the
    kbroker source reads the same back as typed columns."""
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from pyspark.sql import functions as F

    spark = utc_session
    create_topic(sr_broker.bootstrap, topic_name, 2)
    df = rows_frame(spark, 80).select(
        F.struct(F.col("value.id").alias("user"), F.lit("eu").alias("region")).alias("key"),
        F.struct(
            "value.*",
            (F.col("value.id") / 4).cast("decimal(10,2)").alias("amount"),
            F.date_add(F.to_date(F.lit("2026-03-04")), F.col("value.id").cast("int")).alias("day"),
            F.unhex(F.lit("00FF10")).alias("payload"),
        ).alias("value"),
    )
    write(df, sr_broker, topic_name, valueFormat="json-schema", keyFormat="json-schema")
    registered = sr.get_latest_version(f"{topic_name}-value")
    schema = json.loads(registered.schema.schema_str)
    assert registered.schema.schema_type == "JSON" and schema["title"] == "topLevelRecord"
    assert schema["properties"]["at"] == {"type": "string", "format": "date-time"}
    deser = JSONDeserializer(None, schema_registry_client=sr)
    got = {}
    for m in consume_all(sr_broker, topic_name, 80):
        doc = deser(m.value(), SerializationContext(topic_name, MessageField.VALUE))
        key = deser(m.key(), SerializationContext(topic_name, MessageField.KEY))
        assert key == {"user": doc["id"], "region": "eu"}
        got[doc["id"]] = doc
    assert sorted(got) == list(range(80))

    def as_json(i: int) -> dict:
        e = expected(i)
        return {
            **e,
            "at": e["at"].isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "amount": float(decimal.Decimal(i) / 4),
            "day": (datetime.date(2026, 3, 4) + datetime.timedelta(days=i)).isoformat(),
            "payload": base64.b64encode(b"\x00\xff\x10").decode(),
        }

    for i, doc in got.items():
        assert list(doc) == ["id", "item", "price", "counts", "attrs", "at", "payer", "ok", "amount", "day", "payload"]
        assert doc == as_json(i), i
    back = read(spark, sr_broker, topic_name, valueFormat="json-schema", keyFormat="json-schema")
    assert back.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,item:string,price:double,counts:array<bigint>,attrs:map<string,bigint>,at:string,"
        "payer:struct<name:string,account:bigint>,ok:boolean,amount:double,day:string,payload:string>"
    )
    rows = back.select("key.user", "value").collect()
    assert sorted((r.user, r.value.asDict(recursive=True)) for r in rows) == [(i, as_json(i)) for i in range(80)]


def test_a_users_protobuf_schema_its_second_message_by_record_name_then_use_latest(
    utc_session, sr_broker, sr, topic_name
):
    """valueProtobufSchema with valueProtobufMessage (the file's second message: message
    indexes [1]) registered under its record name (RecordNameStrategy), an enum written
    from strings; then a write with use.latest.version and auto.register.schemas=false
    takes that registered version (the same id). ProtobufDeserializer and the source read
    both writes back."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from pyspark.sql import functions as F

    spark = utc_session
    create_topic(sr_broker.bootstrap, topic_name, 1)
    i = F.col("id")
    df = spark.range(0, 20).select(
        F.struct(
            (i - 10).cast("int").alias("s32"),
            F.when(i % 3 == 0, F.lit("HOT")).otherwise(F.lit("COLD")).alias("kind"),
            F.array(i, -i).alias("deltas"),
            F.create_map(F.lit("k"), F.struct((i * 7).alias("a"))).alias("by_name"),
        ).alias("value")
    )
    options = {
        "valueFormat": "protobuf",
        "valueProtobufSchema": USER_PROTO,
        "valueProtobufMessage": "shop.v1.Reading",
        "value.subject.name.strategy": "io.confluent.kafka.serializers.subject.RecordNameStrategy",
    }
    write(df, sr_broker, topic_name, **options)
    registered = sr.get_latest_version("shop.v1.Reading")
    write(
        df.where("id < 5"),
        sr_broker,
        topic_name,
        valueFormat="protobuf",
        valueSubject="shop.v1.Reading",
        valueProtobufMessage="shop.v1.Reading",
        **{"use.latest.version": "true", "auto.register.schemas": "false"},
    )
    assert [v.version for v in [sr.get_latest_version("shop.v1.Reading")]] == [registered.version]
    deser = ProtobufDeserializer(message_class(USER_PROTO, "shop.v1.Reading"), {"use.deprecated.format": False})
    msgs = consume_all(sr_broker, topic_name, 25)
    assert len(msgs) == 25
    seen = []
    for m in msgs:
        assert m.value()[:7] == b"\x00" + registered.schema_id.to_bytes(4, "big") + b"\x02\x02"
        r = deser(m.value(), SerializationContext(topic_name, MessageField.VALUE))
        n = r.s32 + 10
        assert (r.kind, list(r.deltas), r.by_name["k"].a) == (1 if n % 3 == 0 else 5, [n, -n], n * 7)
        seen.append(n)
    assert sorted(seen) == sorted(list(range(20)) + list(range(5)))
    back = read(
        spark,
        sr_broker,
        topic_name,
        valueFormat="protobuf",
        valueSubject="shop.v1.Reading",
        valueProtobufMessage="shop.v1.Reading",
    ).select("value.s32", "value.kind", "value.deltas")
    got = sorted((r.s32 + 10, r.kind, r.deltas) for r in back.collect())
    want = sorted(
        (n, "HOT" if n % 3 == 0 else "COLD", [n, -n] if n else [0, 0]) for n in list(range(20)) + list(range(5))
    )
    assert got == want


def test_a_row_that_does_not_fit_the_users_schema_fails_the_job_naming_the_column(spark, sr_broker, topic_name):
    from pyspark.sql import functions as F

    create_topic(sr_broker.bootstrap, topic_name, 1)
    df = spark.range(0, 3).select(F.struct(F.col("id").alias("i32")).alias("value"))
    with pytest.raises(Exception, match="value.i32: a int64 column cannot be written as the Protobuf int32 field"):
        write(
            df,
            sr_broker,
            topic_name,
            valueFormat="protobuf",
            valueProtobufSchema=USER_PROTO,
            valueProtobufMessage="shop.v1.Reading",
        )
    df = spark.range(0, 3).select(
        F.struct(F.when(F.col("id") == 2, F.lit("WARM")).otherwise("HOT").alias("kind")).alias("value")
    )
    with pytest.raises(Exception, match="row 2 of the batch: value.kind is a string the Protobuf enum does not name"):
        write(
            df.coalesce(1),
            sr_broker,
            topic_name,
            valueFormat="protobuf",
            valueProtobufSchema=USER_PROTO,
            valueProtobufMessage="shop.v1.Reading",
        )
    assert consume_all(sr_broker, topic_name, 1, timeout_s=3) == []  # nothing written


def test_the_registry_refusing_an_incompatible_schema_is_a_clear_error(sr_broker, topic_name):
    """Without Spark: the tasks' encoding (encode_rows) against the real registry. A JSON
    schema whose property changed type is refused by the subject's BACKWARD level (409);
    with auto.register.schemas=false a schema not registered is not found (40403)."""
    import pyarrow as pa

    from broker.spark.avro_sink import encode_rows
    from broker.spark.formats import RegistryError, SinkFormat

    fmt = SinkFormat("value", sr_broker.registry_url, None, None, None, fmt="json-schema")
    first = pa.RecordBatch.from_pydict({"value": pa.array([{"a": 1}], pa.struct([("a", pa.int64())]))})
    out = encode_rows(first, [fmt], topic_name)
    assert json.loads(out.column(0)[0].as_py()[5:]) == {"a": 1}
    second = pa.RecordBatch.from_pydict({"value": pa.array([{"a": "x"}], pa.struct([("a", pa.string())]))})
    with pytest.raises(
        RegistryError, match=f"registering a schema under '{topic_name}-value': HTTP 409: .*incompatible"
    ):
        encode_rows(second, [fmt], topic_name)
    import dataclasses

    with pytest.raises(RegistryError, match="HTTP 404: Schema not found"):
        encode_rows(second, [dataclasses.replace(fmt, auto_register=False)], topic_name)


BASE = {"kbroker.bootstrap.servers": "127.0.0.1:9092", "topic": "t", "schema.registry.url": "http://h:1"}


@pytest.mark.parametrize(
    ("options", "option", "words"),
    [
        ({"valueFormat": "json-schema", "valueProtobufSchema": "x"}, "valueProtobufSchema",
         "is for valueFormat=protobuf, not json-schema"),
        ({"valueFormat": "json-schema", "valueJsonSchema": "{nope"}, "valueJsonSchema", "is not JSON"),
        ({"valueFormat": "avro", "valueProtobufMessage": "a.B"}, "valueProtobufMessage", "is for valueFormat=protobuf"),
        ({"valueFormat": "protobuf", "value.subject.name.strategy": "Mine"}, "value.subject.name.strategy",
         "must be one of TopicNameStrategy, RecordNameStrategy, TopicRecordNameStrategy"),
        ({"valueFormat": "protobuf", "valueSubject": "s", "value.subject.name.strategy": "RecordNameStrategy"},
         "valueSubject", "cannot be combined with value.subject.name.strategy"),
        ({"valueFormat": "json-schema", "valueJsonSchema": "{}", "use.latest.version": "true"}, "use.latest.version",
         "cannot be combined with valueJsonSchema"),
        ({"valueJsonSchema": "{}"}, "valueJsonSchema", "needs valueFormat=avro, protobuf or json-schema"),
        ({"valueFormat": "protobuf", "valueProtobufMessage": "a.B"}, "valueProtobufMessage",
         "names a message of valueProtobufSchema or of the latest version"),
    ],
)  # fmt: skip
def test_sink_format_options_refused_naming_the_option(options, option, words):
    from broker.spark.options import KBrokerOptionError, SinkOptions

    with pytest.raises(KBrokerOptionError, match=words) as err:
        SinkOptions.parse({**BASE, **options})
    assert err.value.option == option


def test_the_pipelines_page_sink_examples_run_as_written(utc_session, sr_broker, sr):
    """docs/pipelines.md's Protobuf and JSON Schema sink examples, as written, against this
    module's broker and registry (ports replaced): the Protobuf one registers the .proto
    the page shows, the JSON one writes the records the page shows under shop.Visit."""
    from tests.pipelines.helpers import ROOT, fenced_blocks

    doc = ROOT / "docs" / "pipelines.md"
    blocks = [b for b in fenced_blocks(doc, "python") if any('.write.format("kbroker")' in x for x in b)]
    proto = next(b for b in blocks if any('"protobuf"' in x for x in b))
    js = next(b for b in blocks if any('"json-schema"' in x for x in b))
    for topic in ("payments", "visits"):
        create_topic(sr_broker.bootstrap, topic, 1)
    for block in (proto, js):
        code = "\n".join(block).replace("127.0.0.1:9092", sr_broker.bootstrap)
        code = code.replace("http://127.0.0.1:8081", sr_broker.registry_url)
        exec(compile(code, "docs/pipelines.md", "exec"), {})
    (shown,) = fenced_blocks(doc, "proto")
    registered = sr.get_latest_version("payments-value")
    # the registry keeps the canonical form of what the sink registered: the page's schema
    from broker.registry.formats.protobuf import parse_protobuf

    assert registered.schema.schema_str == parse_protobuf("\n".join(shown)).canonical
    assert len(consume_all(sr_broker, "payments", 100)) == 100
    texts = sorted((m.value()[5:] for m in consume_all(sr_broker, "visits", 10)), key=lambda v: json.loads(v)["id"])
    assert texts[:2] == [b'{"id":0,"page":"/p/0","ms":0.0}', b'{"id":1,"page":"/p/1","ms":null}']
    assert sr.get_latest_version("shop.Visit").schema.schema_type == "JSON"


def test_subject_name_strategies_for_avro_too(sr_broker, sr, topic_name):
    """Without Spark: value.subject.name.strategy names the subject of the Avro sink's
    schema as well (the record's full name; <topic>-<full name>)."""
    import pyarrow as pa

    from broker.spark.avro_sink import encode_rows
    from broker.spark.formats import SinkFormat

    schema = {"type": "record", "name": "Tick", "namespace": "mkt", "fields": [{"name": "p", "type": "long"}]}
    rb = pa.RecordBatch.from_pydict({"value": pa.array([{"p": 5}], pa.struct([pa.field("p", pa.int64(), False)]))})
    for strategy, subject in (
        ("RecordNameStrategy", "mkt.Tick"),
        ("TopicRecordNameStrategy", f"{topic_name}-mkt.Tick"),
    ):
        fmt = SinkFormat("value", sr_broker.registry_url, None, None, json.dumps(schema), strategy=strategy)
        out = encode_rows(rb, [fmt], topic_name).column(0)[0].as_py()
        assert int.from_bytes(out[1:5], "big") == sr.get_latest_version(subject).schema_id
