"""The native Avro decoder (broker._native.avro, driven by broker.spark.avro) on its own,
without Spark or a broker: every type against fastavro's own decoding of the same bytes,
schema resolution across writer versions, defaults, and random bytes (no crash, ever)."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import os
import random
import struct

import pyarrow as pa
import pytest

from broker.registry.formats.avro import parse_avro
from broker.spark.avro import AvroDecodeError, AvroSchemaError, Decoder

fastavro = pytest.importorskip("fastavro")

ALL_TYPES = {
    "type": "record",
    "name": "All",
    "namespace": "t",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "by", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "arr", "type": {"type": "array", "items": ["null", "long"]}},
        {"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "string"}}},
        {"name": "date", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tsm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "ltm", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 3}},
        {
            "name": "decf",
            "type": {"type": "fixed", "name": "D8", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 0},
        },
        {
            "name": "opt",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "In",
                    "fields": [{"name": "x", "type": "int"}, {"name": "fx2", "type": "Four"}],
                },
            ],
        },
        {"name": "bits", "type": {"type": "array", "items": "boolean"}},
    ],
}


def framed(schema, records, sid=1) -> pa.Array:
    parsed = fastavro.parse_schema(schema)
    out = []
    for rec in records:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, rec)
        out.append(b"\x00" + struct.pack(">I", sid) + buf.getvalue())
    return pa.array(out, pa.binary())


def decoder(reader, writers: dict, permissive=False) -> Decoder:
    parsed = {sid: parse_avro(json.dumps(w)) for sid, w in writers.items()}

    def fetch(sid):
        p = parsed.get(sid)
        return (p.parsed, p.named) if p else None

    return Decoder(json.dumps(reader), fetch_writer=fetch, permissive=permissive)


def random_all(rng: random.Random, i: int) -> dict:
    utc = datetime.timezone.utc
    return {
        "b": rng.random() < 0.5,
        "i": rng.randint(-(2**31), 2**31 - 1),
        "l": rng.randint(-(2**63), 2**63 - 1),
        "f": struct.unpack("<f", struct.pack("<f", rng.uniform(-1e6, 1e6)))[0],
        "d": rng.uniform(-1e300, 1e300),
        "by": os.urandom(rng.randint(0, 20)),
        "s": "".join(rng.choice("aé中🙂x") for _ in range(rng.randint(0, 10))),
        "fx": os.urandom(4),
        "e": rng.choice("ABC"),
        "arr": [rng.choice([None, rng.randint(-5, 5)]) for _ in range(rng.randint(0, 4))],
        "m": {f"k{j}": [str(j)] * j for j in range(rng.randint(0, 3))},
        "date": datetime.date(1970, 1, 1) + datetime.timedelta(days=rng.randint(-1000, 30000)),
        "tsm": datetime.datetime(2000, 1, 1, tzinfo=utc) + datetime.timedelta(milliseconds=rng.randint(0, 10**12)),
        "tsu": datetime.datetime(2000, 1, 1, tzinfo=utc) + datetime.timedelta(microseconds=rng.randint(0, 10**15)),
        "ltm": datetime.datetime(2000, 1, 1) + datetime.timedelta(milliseconds=rng.randint(0, 10**12)),
        "dec": decimal.Decimal(rng.randint(-(10**20) + 1, 10**20 - 1)).scaleb(-3),
        "decf": decimal.Decimal(rng.randint(-(10**18) + 1, 10**18 - 1)),
        "opt": None if i % 3 == 0 else {"x": i, "fx2": b"abcd"},
        "bits": [rng.random() < 0.5 for _ in range(rng.randint(0, 11))],
    }


def test_every_type_decodes_as_fastavro_reads_it():
    seed = random.randrange(2**32)
    print("seed", seed)
    rng = random.Random(seed)
    records = [random_all(rng, i) for i in range(300)]
    values = framed(ALL_TYPES, records)
    got = decoder(ALL_TYPES, {1: ALL_TYPES}).decode(values)
    got.validate(full=True)
    # (Spark's nullability, as from_avro: only [null, T] is nullable)
    assert "b: bool not null" in str(got.type) and "opt: struct<x: int32 not null" in str(got.type)
    assert str(got.type).replace(" not null", "") == (
        "struct<b: bool, i: int32, l: int64, f: float, d: double, by: binary, s: string, fx: binary, e: string, "
        "arr: list<element: int64>, m: map<string, list<element: string>>, date: date32[day], "
        "tsm: timestamp[us, tz=UTC], tsu: timestamp[us, tz=UTC], ltm: timestamp[us], dec: decimal128(20, 3), "
        "decf: decimal128(18, 0), opt: struct<x: int32, fx2: binary>, bits: list<element: bool>>"
    )
    for rec, row in zip(records, got.to_pylist(), strict=True):
        row["m"] = dict(row["m"])
        row["tsm"] = row["tsm"].astimezone(datetime.timezone.utc)
        row["tsu"] = row["tsu"].astimezone(datetime.timezone.utc)
        assert row == rec


def test_evolution_defaults_promotions_and_skips():
    w1 = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "int"},
        {"name": "gone", "type": {"type": "map", "values": {"type": "array", "items": "string"}}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y", "Z"]}},
        {"name": "s", "type": "bytes"},
    ]}  # fmt: skip
    reader = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "double"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y", "U"], "default": "U"}},
        {"name": "s", "type": "string"},
        {"name": "added", "type": {"type": "array", "items": "int"}, "default": [1, 2]},
        {"name": "rec", "type": {"type": "record", "name": "S", "fields": [{"name": "q", "type": "string"}]},
         "default": {"q": "dq"}},
        {"name": "n", "type": ["null", "long"], "default": None},
    ]}  # fmt: skip
    values = framed(w1, [{"a": 7, "gone": {"k": ["x", "y"]}, "e": "Z", "s": b"hi"}], sid=5)
    row = decoder(reader, {5: w1}).decode(values).to_pylist()[0]
    assert row == {"a": 7.0, "e": "U", "s": "hi", "added": [1, 2], "rec": {"q": "dq"}, "n": None}


def test_a_writer_the_reader_cannot_take_fails_its_records_only():
    reader = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    bad_writer = {"type": "record", "name": "R", "fields": [{"name": "b", "type": "int"}]}  # a has no default
    values = pa.concat_arrays([framed(reader, [{"a": 1}], 1), framed(bad_writer, [{"b": 2}], 2)])
    assert decoder(reader, {1: reader, 2: bad_writer}, permissive=True).decode(values).to_pylist() == [{"a": 1}, None]
    with pytest.raises(AvroDecodeError, match="writer schema id 2 cannot be read .* has no default"):
        decoder(reader, {1: reader, 2: bad_writer}).decode(values)


@pytest.mark.parametrize(
    "schema, words",
    [
        (["int", "string"], "unions of more than one non-null type"),
        ("null", "null type alone"),
        ({"type": "record", "name": "L", "fields": [{"name": "next", "type": ["null", "L"]}]}, "recursive"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}, "precision 1..38"),
    ],
)
def test_reader_schemas_spark_cannot_take_are_refused(schema, words):
    with pytest.raises(AvroSchemaError, match=words):
        decoder(schema, {})


FUZZ_SCHEMAS = [
    ALL_TYPES,
    {"type": "array", "items": {"type": "map", "values": ["null", "string", "long"][:2]}},
    {
        "type": "record",
        "name": "U",
        "fields": [
            {"name": "u", "type": ["null", "double"]},
            {"name": "n", "type": {"type": "array", "items": {"type": "array", "items": "bytes"}}},
        ],
    },  # fmt: skip
]


@pytest.mark.parametrize("schema", FUZZ_SCHEMAS, ids=["all-types", "array-of-maps", "nested"])
def test_fuzz_random_and_mutated_bytes_never_crash(schema):
    """Random bytes, and valid records with bytes flipped, cut or appended: each decodes,
    or is a null row (PERMISSIVE) / one AvroDecodeError (FAILFAST); the arrays are valid."""
    seed = random.randrange(2**32)
    print("seed", seed)
    rng = random.Random(seed)
    writer = ALL_TYPES if schema is ALL_TYPES else schema
    if schema is ALL_TYPES:
        good = [v for v in framed(ALL_TYPES, [random_all(rng, i) for i in range(40)]).to_pylist()]
    else:
        good = [b"\x00\x00\x00\x00\x01" + bytes([2, 2, 0, 0])]
    values = []
    for _ in range(3000):
        kind = rng.random()
        if kind < 0.3:
            v = b"\x00\x00\x00\x00\x01" + os.urandom(rng.randint(0, 60))
        elif kind < 0.4:
            v = os.urandom(rng.randint(0, 12))
        else:
            v = bytearray(rng.choice(good))
            for _ in range(rng.randint(1, 4)):
                op = rng.random()
                if op < 0.5 and len(v) > 5:
                    v[rng.randrange(5, len(v))] = rng.randrange(256)
                elif op < 0.8:
                    del v[rng.randrange(5, len(v) + 1) :]
                else:
                    v += os.urandom(rng.randint(1, 8))
            v = bytes(v)
        values.append(v)
    arr = pa.array(values, pa.binary())
    d = decoder(schema, {1: writer}, permissive=True)
    out = d.decode(arr)
    out.validate(full=True)
    assert len(out) == len(values)
    with pytest.raises(AvroDecodeError):
        decoder(schema, {1: writer}).decode(pa.array([b"\x00\x00\x00\x00\x01\xff"] * 2 + values, pa.binary()))
    # sliced input decodes the same rows
    assert d.decode(arr.slice(100, 50)).to_pylist() == out.slice(100, 50).to_pylist()


BASE = {"kbroker.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}


@pytest.mark.parametrize(
    "options, option, words",
    [
        ({"valueFormat": "xml"}, "valueFormat", "must be one of raw, avro, protobuf, json-schema"),
        (
            {"valueFormat": "json-schema", "schema.registry.url": "http://h:1", "valueAvroSchema": "{}"},
            "valueAvroSchema",
            "is for valueFormat=avro, not json-schema",
        ),
        ({"valueFormat": "avro"}, "schema.registry.url", "must be given with valueFormat=avro"),
        ({"valueFormat": "avro", "schema.registry.url": "localhost:8081"}, "schema.registry.url", "http://"),
        ({"valueSubject": "x"}, "valueSubject", "needs valueFormat=avro"),
        ({"mode": "PERMISSIVE"}, "mode", "give valueFormat or keyFormat"),
        (
            {"valueFormat": "avro", "schema.registry.url": "http://h:1", "mode": "DROPMALFORMED"},
            "mode",
            "FAILFAST or PERMISSIVE",
        ),
        (
            {"valueFormat": "avro", "schema.registry.url": "http://h:1", "subscribe": "a,b"},
            "valueSubject",
            "no default subject",
        ),
        (
            {"valueFormat": "avro", "schema.registry.url": "http://h:1", "valueSchemaVersion": "0"},
            "valueSchemaVersion",
            "latest or a version number",
        ),
        (
            {"keyFormat": "avro", "schema.registry.url": "http://h:1", "keyAvroSchema": "{not json"},
            "keyAvroSchema",
            "is not JSON",
        ),
    ],
)
def test_format_options_refused_with_one_line_naming_the_option(options, option, words):
    from broker.spark.options import KBrokerOptionError, SourceOptions

    with pytest.raises(KBrokerOptionError) as err:
        SourceOptions.parse({**BASE, **options}, streaming=None)
    assert err.value.option == option
    assert words in str(err.value) and "\n" not in str(err.value)


def test_format_options_defaults():
    from broker.spark.options import SourceOptions

    o = SourceOptions.parse(
        {**BASE, "valueFormat": "AVRO", "keyFormat": "avro", "schema.registry.url": "http://h:1"}, streaming=None
    )
    assert o.value_format is not None and o.value_format.subject == "orders-value"
    assert o.key_format is not None and o.key_format.subject == "orders-key"
    assert o.value_format.version == "latest" and not o.value_format.permissive
    assert SourceOptions.parse(BASE, streaming=None).value_format is None


def test_sink_encoder_round_trips_through_fastavro_and_the_decoder():
    """The sink's native encoder (avro_sink) on every type Spark hands it, sliced input
    included: fastavro reads each value, and the source's decoder gives the rows back."""
    from broker.spark.avro_sink import encode_column, schema_for

    seed = random.randrange(2**32)
    print("seed", seed)
    rng = random.Random(seed)
    t = pa.struct(
        [
            pa.field("id", pa.int64(), False),
            pa.field("n", pa.int32()),
            pa.field("s", pa.string()),
            pa.field("b", pa.binary()),
            pa.field("ok", pa.bool_()),
            pa.field("f", pa.float32()),
            pa.field("d", pa.float64()),
            pa.field("day", pa.date32()),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("dec", pa.decimal128(38, 4)),
            pa.field("l", pa.list_(pa.field("element", pa.string()))),
            pa.field("m", pa.map_(pa.string(), pa.int64())),
            pa.field("sub", pa.struct([pa.field("x", pa.int32())])),
        ]
    )
    utc = datetime.timezone.utc

    def maybe(v):
        return None if rng.random() < 0.2 else v

    rows = [
        {
            "id": rng.randint(-(2**63), 2**63 - 1),
            "n": maybe(rng.randint(-(2**31), 2**31 - 1)),
            "s": maybe("é" * rng.randint(0, 5)),
            "b": maybe(os.urandom(rng.randint(0, 9))),
            "ok": maybe(rng.random() < 0.5),
            "f": maybe(0.25 * rng.randint(-100, 100)),
            "d": maybe(rng.uniform(-1e9, 1e9)),
            "day": maybe(datetime.date(2000, 1, 1) + datetime.timedelta(days=rng.randint(0, 20000))),
            "ts": maybe(
                datetime.datetime(2000, 1, 1, tzinfo=utc) + datetime.timedelta(microseconds=rng.randint(0, 10**15))
            ),
            "dec": maybe(decimal.Decimal(rng.randint(-(10**34), 10**34)).scaleb(-4)),
            "l": maybe([maybe(str(j)) for j in range(rng.randint(0, 3))]),
            "m": maybe([(f"k{j}", maybe(j)) for j in range(rng.randint(0, 3))]),
            "sub": maybe({"x": maybe(rng.randint(0, 9))}),
        }
        for _ in range(500)
    ]
    arr = pa.array(rows, t).slice(7, 400)
    schema = schema_for(arr.type)
    parsed = parse_avro(json.dumps(schema))
    out = encode_column(arr, parsed.parsed, parsed.named, 3, "value")
    fp = fastavro.parse_schema(schema)
    for v, want in zip(out.to_pylist(), rows[7:407], strict=True):
        assert v[:5] == b"\x00\x00\x00\x00\x03"
        got = fastavro.schemaless_reader(io.BytesIO(v[5:]), fp, fp)
        want = {**want, "m": dict(want["m"]) if want["m"] is not None else None}
        if want["f"] is not None:
            want["f"] = pytest.approx(want["f"])
        assert got == want
    back = decoder(schema, {3: schema}).decode(out)
    assert back.to_pylist() == arr.to_pylist()


def test_sink_encoder_refuses_a_null_the_schema_has_no_room_for():
    from broker.spark.avro_sink import AvroEncodeError, encode_column

    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}
    parsed = parse_avro(json.dumps(schema))
    arr = pa.array([{"a": 1}, {"a": None}], pa.struct([pa.field("a", pa.int64())]))
    with pytest.raises(AvroEncodeError, match="row 1 of the batch has a null in value"):
        encode_column(arr, parsed.parsed, parsed.named, 1, "value")
    wrong = pa.array([{"a": "x"}], pa.struct([pa.field("a", pa.string())]))
    with pytest.raises(AvroEncodeError, match="value.a: a column of type string cannot be written as Avro long"):
        encode_column(wrong, parsed.parsed, parsed.named, 1, "value")


PROTO_FUZZ = """syntax = "proto3";
package f;
import "google/protobuf/timestamp.proto";
message M {
  string s = 1; double d = 2; google.protobuf.Timestamp at = 3; map<string, Inner> m = 4;
  repeated sint64 nums = 5; E e = 6; Inner inner = 7; repeated Inner inners = 8; bytes b = 9;
  fixed32 f32 = 10; sfixed64 f64 = 11; bool ok = 12; float fl = 13; repeated string names = 14;
  enum E { A = 0; B = 1; }
  message Inner { bool ok = 1; float f = 2; repeated int32 xs = 3; }
}
"""


def test_protobuf_decoder_fuzz_random_and_mutated_bytes_never_crash():
    """The Protobuf half of the native decoder on random bytes and mutated valid messages:
    each decodes or is a null row (PERMISSIVE); the arrays are valid Arrow."""
    pytest.importorskip("grpc_tools")
    from google.protobuf import descriptor_pool, message_factory

    from broker.registry.formats.protobuf import parse_protobuf
    from broker.spark.protobuf import ProtoDecoder

    seed = random.randrange(2**32)
    print("seed", seed)
    rng = random.Random(seed)
    schema = parse_protobuf(PROTO_FUZZ)
    pool = descriptor_pool.DescriptorPool()
    for name, f in schema.files.items():
        if name != schema.file.name:
            pool.Add(f)
    pool.Add(schema.file)
    M = message_factory.GetMessageClass(pool.FindMessageTypeByName("f.M"))
    good = []
    for i in range(30):
        m = M(s="é" * i, d=i * 0.5, nums=[-i, i], e=i % 2, b=os.urandom(i % 5), f32=i, f64=-i, ok=bool(i % 2))
        m.at.seconds, m.at.nanos = 1_700_000_000 + i, 1000 * i
        m.m[f"k{i}"].xs.extend([1, 2])
        m.inner.f = 1.5
        m.inners.add(ok=True, xs=[i])
        m.names.extend(["a", "b"][: i % 3])
        good.append(b"\x00\x00\x00\x00\x07\x00" + m.SerializeToString())
    dec = ProtoDecoder(PROTO_FUZZ, message=None, fetch_type=lambda sid: "PROTOBUF", permissive=True)
    clean = dec.decode(pa.array(good, pa.binary()))
    assert clean.null_count == 0
    assert clean.to_pylist()[3]["nums"] == [-3, 3] and clean.to_pylist()[3]["m"] == [
        ("k3", {"ok": None, "f": None, "xs": [1, 2]})
    ]
    values = []
    for _ in range(3000):
        if rng.random() < 0.3:
            v = b"\x00\x00\x00\x00\x07" + os.urandom(rng.randint(0, 60))
        else:
            v = bytearray(rng.choice(good))
            for _ in range(rng.randint(1, 4)):
                op = rng.random()
                if op < 0.5 and len(v) > 5:
                    v[rng.randrange(5, len(v))] = rng.randrange(256)
                elif op < 0.8:
                    del v[rng.randrange(5, len(v) + 1) :]
                else:
                    v += os.urandom(rng.randint(1, 8))
            v = bytes(v)
        values.append(v)
    out = dec.decode(pa.array(values, pa.binary()))
    out.validate(full=True)
    assert len(out) == len(values)


JSON_FUZZ = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": ["string", "null"]},
        "score": {"type": "number"},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "attrs": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer"}}},
        "addr": {"$ref": "#/definitions/Addr"},
    },
    "definitions": {"Addr": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


def test_json_decoder_against_json_loads_and_fuzzed_bytes_never_crash():
    """The JSON half of the native decoder: records as Python's json module reads them
    (escapes, surrogate pairs, unknown properties skipped, absent ones null), and random
    and mutated bytes decode or are null rows, never a crash."""
    from broker.spark.jsonschema import JsonDecoder

    seed = random.randrange(2**32)
    print("seed", seed)
    rng = random.Random(seed)
    dec = JsonDecoder(json.dumps(JSON_FUZZ), fetch_type=lambda sid: "JSON", permissive=True)
    docs = []
    for i in range(200):
        doc = {
            "id": rng.randint(-(2**63), 2**63 - 1),
            "name": rng.choice([None, 'é\n"' * (i % 3), "🙂" * (i % 2), "\u0000x"]),
            "score": rng.uniform(-1e9, 1e9),
            "ok": rng.random() < 0.5,
            "tags": [str(j) for j in range(i % 4)],
            "attrs": {f"k{j}": list(range(j)) for j in range(i % 3)},
            "addr": rng.choice([None, {"city": "Oslo", "zip": [1, {"x": None}]}]),
            "unknown": {"deep": [[1, 2.5e-3, "s", True, None]]},
        }
        for k in rng.sample(list(doc), rng.randint(0, 3)):
            del doc[k]
        docs.append(doc)
    good = [b"\x00\x00\x00\x00\x05" + json.dumps(d, ensure_ascii=rng.random() < 0.5).encode() for d in docs]
    out = dec.decode(pa.array(good, pa.binary()))
    assert out.null_count == 0
    for doc, row in zip(docs, out.to_pylist(), strict=True):
        want = {k: doc.get(k) for k in JSON_FUZZ["properties"]}
        if want["attrs"] is not None:
            want["attrs"] = list(want["attrs"].items())
        if want["addr"] is not None:
            want["addr"] = {"city": "Oslo"}
        assert row == want
    values = []
    for _ in range(3000):
        if rng.random() < 0.2:
            v = b"\x00\x00\x00\x00\x05" + os.urandom(rng.randint(0, 40))
        else:
            v = bytearray(rng.choice(good))
            for _ in range(rng.randint(1, 4)):
                op = rng.random()
                if op < 0.5 and len(v) > 5:
                    v[rng.randrange(5, len(v))] = rng.choice(
                        b'{}[]",:0123456789.eE-+tfn\\u ' + bytes([rng.randrange(256)])
                    )
                elif op < 0.8:
                    del v[rng.randrange(5, len(v) + 1) :]
                else:
                    v += os.urandom(rng.randint(1, 8))
            v = bytes(v)
        values.append(v)
    out = dec.decode(pa.array(values, pa.binary()))
    out.validate(full=True)
    assert len(out) == len(values)


def test_string_utf8_check_agrees_with_pythons_strict_decoder():
    """A string column takes exactly the values Python's strict UTF-8 decoder takes
    (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF), wherever the bad byte
    sits in a long ASCII run (the check reads ASCII eight bytes at a time)."""
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    schema = {"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"}]}
    oddities = [
        b"\x80",
        b"\xc0\xaf",
        b"\xc3",
        b"\xe0\x80\xaf",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xff",
        b"\xc3\xa9",
    ]
    oddities += ["中".encode(), "🙂".encode(), "🙂".encode()[:3]]
    values = []
    for _ in range(3000):
        before = b"a" * rng.randrange(0, 40)
        after = b"z" * rng.randrange(0, 40)
        values.append(before + rng.choice(oddities) + after if rng.random() < 0.8 else before + after)
    frames = []
    for v in values:
        n = len(v)
        zz = bytearray()
        u = n << 1
        while True:  # Avro's zigzag varint length, then the bytes
            b = u & 0x7F
            u >>= 7
            zz.append(b | (0x80 if u else 0))
            if not u:
                break
        frames.append(b"\x00" + struct.pack(">I", 1) + bytes(zz) + v)
    out = decoder(schema, {1: schema}, permissive=True).decode(pa.array(frames, pa.binary())).to_pylist()

    def ok(v: bytes) -> bool:
        try:
            v.decode("utf-8", errors="strict")
            return True
        except UnicodeDecodeError:
            return False

    for v, row in zip(values, out, strict=True):
        if ok(v):
            assert row == {"s": v.decode()}, v
        else:
            assert row is None, v
