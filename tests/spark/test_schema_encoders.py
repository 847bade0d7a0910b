"""The sink's native Protobuf and JSON encoders (broker._native.avro.encode_schema, driven
by broker.spark.schema_sink) on their own, without Spark or a broker: random Arrow
columns of every type the sink writes, with nulls, nesting and sliced arrays, encoded and
read back by the reference readers (protobuf's Python runtime parsing the message, with
the descriptors protoc made of the sink's derived .proto; json.loads for the JSON) and
compared value by value with the rows; the user's own schemas (every Protobuf scalar
type, enums by name, a message other than the file's first); and bad input refused with
the column named. The random seed is printed (KBROKER_FUZZ_SEED replays a run)."""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import os
import random
import struct

import pyarrow as pa
import pytest
from google.protobuf import descriptor_pool, message_factory

from broker.registry.formats.protobuf import parse_protobuf
from broker.spark import schema_sink as ss

UTC = datetime.timezone.utc
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)


def message_class(text: str, name: str):
    """The message `name` of .proto `text`, as protoc parses it (what the registry keeps)."""
    schema = parse_protobuf(text)
    pool = descriptor_pool.DescriptorPool()
    for dep, f in schema.files.items():
        if dep != schema.file.name:
            pool.Add(f)
    pool.Add(schema.file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


# ---------------------------------------------------------------- random columns

STRING_POOL = ['"', "\\", "\n", "\t", "\x00", "\x01", "\x1f", "é", "€", "😀", "a", "z", " ", "/", "\u2028", "'"]


def rand_string(rng: random.Random) -> str:
    return "".join(rng.choice(STRING_POOL) for _ in range(rng.randint(0, 12)))


def rand_type(rng: random.Random, depth: int, fmt: str):
    """A random Arrow type the sink writes as `fmt` (protobuf: what its derived schema
    takes; json: also dates, decimals, timestamp_ntz, nested lists and maps)."""
    scalars = [pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(), pa.string()]
    scalars += [pa.binary(), pa.timestamp("us", "UTC")]
    if fmt == "json":
        scalars += [
            pa.date32(),
            pa.decimal128(20, 4),
            pa.decimal128(38, 0),
            pa.timestamp("us"),
            pa.timestamp("ms", "UTC"),
        ]
    r = rng.random()
    if depth < 2 and r < 0.15:
        return rand_struct(rng, depth + 1, fmt)
    if depth < 2 and r < 0.3:
        return pa.list_(pa.field("element", rand_elem(rng, depth + 1, fmt), fmt == "json" and rng.random() < 0.5))
    if depth < 2 and r < 0.4:
        return pa.map_(pa.string(), pa.field("value", rand_elem(rng, depth + 1, fmt), rng.random() < 0.5))
    return rng.choice(scalars)


def rand_elem(rng: random.Random, depth: int, fmt: str):
    t = rand_type(rng, depth, fmt)
    while fmt == "protobuf" and (pa.types.is_list(t) or pa.types.is_map(t)):
        t = rand_type(rng, depth, fmt)
    return t


def rand_struct(rng: random.Random, depth: int, fmt: str):
    n = rng.randint(1, 6)
    return pa.struct([pa.field(f"f{i}", rand_type(rng, depth, fmt), rng.random() < 0.6 or depth > 0) for i in range(n)])


def rand_value(rng: random.Random, t, nullable: bool):
    if nullable and rng.random() < 0.2:
        return None
    if pa.types.is_struct(t):
        return {f.name: rand_value(rng, f.type, f.nullable) for f in t}
    if pa.types.is_list(t):
        return [rand_value(rng, t.value_type, t.value_field.nullable) for _ in range(rng.randint(0, 4))]
    if pa.types.is_map(t):
        keys = {rand_string(rng) for _ in range(rng.randint(0, 3))}
        return [(k, rand_value(rng, t.item_type, t.item_field.nullable)) for k in keys]
    if pa.types.is_boolean(t):
        return rng.random() < 0.5
    if pa.types.is_integer(t):
        bits = t.bit_width
        return rng.choice(
            [0, 1, -1, 2 ** (bits - 1) - 1, -(2 ** (bits - 1)), rng.randint(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)]
        )
    if pa.types.is_floating(t):
        v = rng.choice([0.0, -0.0, 0.1, 1e300, -1e-300, 5e-324, 3.4e38, 1.0, rng.uniform(-1e6, 1e6), rng.random()])
        if t.bit_width == 32:
            v = struct.unpack("<f", struct.pack("<f", max(-3.4e38, min(3.4e38, v))))[0]
        return v
    if pa.types.is_string(t):
        return rand_string(rng)
    if pa.types.is_binary(t):
        return bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 10)))
    if pa.types.is_timestamp(t):
        us = rng.choice([0, -1, 1, -500_000, rng.randint(-2 * 10**15, 4 * 10**15)])
        if t.unit == "ms":
            us -= us % 1000
        v = EPOCH + datetime.timedelta(microseconds=us)
        return v if t.tz else v.replace(tzinfo=None)
    if pa.types.is_date32(t):
        return datetime.date(1970, 1, 1) + datetime.timedelta(days=rng.randint(-700_000, 2_900_000))
    if pa.types.is_decimal(t):
        digits = rng.randint(1, t.precision)
        unscaled = rng.randint(-(10**digits) + 1, 10**digits - 1)
        return decimal.Decimal(unscaled).scaleb(-t.scale)
    raise AssertionError(t)


def rand_column(rng: random.Random, fmt: str, rows: int):
    t = rand_struct(rng, 0, fmt)
    values = [rand_value(rng, t, True) for _ in range(rows)]
    arr = pa.array(values, t)
    if rng.random() < 0.5 and rows > 2:  # a slice: the arrays' offsets are not 0
        start = rng.randint(1, rows // 2)
        arr = arr.slice(start)
        values = values[start:]
    return t, arr, values


# ---------------------------------------------------------------- comparing


def f32(v: float) -> float:
    return struct.unpack("<f", struct.pack("<f", v))[0]


def check_proto(msg, value: dict, t, where: str) -> None:
    for f in t:
        w = f"{where}.{f.name}"
        v = value[f.name]
        ft = f.type
        got = getattr(msg, f.name)
        if pa.types.is_list(ft):
            assert len(got) == len(v or []), w
            for j, item in enumerate(v or []):
                check_scalar_or_msg(got[j], item, ft.value_type, f"{w}[{j}]")
            continue
        if pa.types.is_map(ft):
            assert set(got.keys()) == {k for k, _ in (v or [])}, w
            for k, item in v or []:
                if item is None:  # the entry without a value: the value type's default
                    continue
                check_scalar_or_msg(got[k], item, ft.item_type, f"{w}{{{k!r}}}")
            continue
        if v is None:
            assert not msg.HasField(f.name), w
            continue
        if pa.types.is_struct(ft) or pa.types.is_timestamp(ft) or f.nullable:
            assert msg.HasField(f.name), w
        check_scalar_or_msg(got, v, ft, w)


def check_scalar_or_msg(got, v, t, w: str) -> None:
    if pa.types.is_struct(t):
        check_proto(got, v, t, w)
    elif pa.types.is_timestamp(t):
        us = (v - EPOCH) // datetime.timedelta(microseconds=1)
        assert got.seconds * 1_000_000 + got.nanos // 1000 == us and 0 <= got.nanos < 10**9, w
    elif pa.types.is_float32(t):
        assert f32(got) == v or (math.isnan(got) and math.isnan(v)), w
    else:
        assert got == v, (w, got, v)


def check_json(got, v, t, w: str) -> None:
    if v is None:
        assert got is None, w
        return
    if pa.types.is_struct(t):
        assert list(got) == [f.name for f in t], w  # every property, in the struct's order
        for f in t:
            check_json(got[f.name], v[f.name], f.type, f"{w}.{f.name}")
    elif pa.types.is_list(t):
        assert len(got) == len(v), w
        for j, item in enumerate(v):
            check_json(got[j], item, t.value_type, f"{w}[{j}]")
    elif pa.types.is_map(t):
        assert sorted(got) == sorted(k for k, _ in v), w
        for k, item in v:
            check_json(got[k], item, t.item_type, f"{w}{{{k!r}}}")
    elif pa.types.is_boolean(t):
        assert got is v, w
    elif pa.types.is_integer(t):
        assert type(got) is int and got == v, w
    elif pa.types.is_float32(t):
        assert isinstance(got, decimal.Decimal) and f32(float(got)) == v, (w, got, v)
    elif pa.types.is_floating(t):
        assert isinstance(got, decimal.Decimal) and float(got) == v, (w, got, v)
    elif pa.types.is_decimal(t):
        assert decimal.Decimal(got) == v, (w, got, v)
    elif pa.types.is_binary(t):
        assert base64.b64decode(got, validate=True) == v, w
    elif pa.types.is_date32(t):
        assert got == v.isoformat(), w
    elif pa.types.is_timestamp(t):
        if t.tz:
            assert got.endswith("Z") and datetime.datetime.fromisoformat(got) == v, (w, got, v)
        else:
            assert datetime.datetime.fromisoformat(got) == v and "Z" not in got, (w, got, v)
    else:
        assert got == v, (w, got, v)


# ---------------------------------------------------------------- the fuzz tests


def seed() -> int:
    s = int(os.environ.get("KBROKER_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    print(f"fuzz seed {s} (KBROKER_FUZZ_SEED={s} replays it)")
    return s


def test_protobuf_encoder_against_protobufs_runtime():
    rng = random.Random(seed())
    for case in range(60):
        t, arr, values = rand_column(rng, "protobuf", rng.randint(1, 25))
        text = ss.proto_for(t)
        writer = ss.writer_for("protobuf", text)
        out = ss.encode_column(arr, writer, 258 + case, "value", "protobuf").to_pylist()
        cls = message_class(text, "topLevelRecord")
        for i, (enc, v) in enumerate(zip(out, values, strict=True)):
            if v is None:
                assert enc is None
                continue
            # Confluent's framing: magic 0, the id, the message indexes [0] as one 0 byte
            assert enc[:6] == b"\x00" + struct.pack(">I", 258 + case) + b"\x00", (case, i)
            msg = cls()
            msg.ParseFromString(enc[6:])
            check_proto(msg, v, t, f"case {case} row {i} ({text})")


def test_json_encoder_against_json_loads():
    rng = random.Random(seed())
    for case in range(80):
        t, arr, values = rand_column(rng, "json", rng.randint(1, 25))
        doc = ss.json_schema_for(t)
        writer = ss.writer_for("json-schema", json.dumps(doc))
        out = ss.encode_column(arr, writer, 7 + case, "value", "json-schema").to_pylist()
        for i, (enc, v) in enumerate(zip(out, values, strict=True)):
            if v is None:
                assert enc is None
                continue
            assert enc[:5] == b"\x00" + struct.pack(">I", 7 + case)
            text = enc[5:].decode("utf-8")  # UTF-8, strictly
            got = json.loads(text, parse_float=decimal.Decimal, parse_constant=lambda c: pytest.fail(c))
            check_json(got, v, t, f"case {case} row {i}")


def test_json_numbers_strings_and_times_as_written():
    """The conventions, byte for byte: shortest round-trip numbers (a double with no
    fraction keeps its .0), decimals exactly, strings escaped, RFC 3339 times in UTC."""
    t = pa.struct(
        [
            ("d", pa.float64()),
            ("f", pa.float32()),
            ("n", pa.decimal128(10, 3)),
            ("s", pa.string()),
            ("ts", pa.timestamp("us", "UTC")),
            ("day", pa.date32()),
            ("b", pa.binary()),
        ]
    )
    row = {
        "d": 3.0,
        "f": 0.1,
        "n": decimal.Decimal("-0.005"),
        "s": 'q"\\\n\x07é',
        "ts": datetime.datetime(1969, 12, 31, 23, 59, 59, 250000, tzinfo=UTC),
        "day": datetime.date(2026, 3, 4),
        "b": b"\xff\x00",
    }
    writer = ss.writer_for("json-schema", json.dumps(ss.json_schema_for(t)))
    (enc,) = ss.encode_column(pa.array([row], t), writer, 1, "value", "json-schema").to_pylist()
    assert enc[5:].decode() == (
        '{"d":3.0,"f":0.1,"n":-0.005,"s":"q\\"\\\\\\n\\u0007é","ts":"1969-12-31T23:59:59.250000Z",'
        '"day":"2026-03-04","b":"/wA="}'
    )


# ---------------------------------------------------------------- the user's own schemas

USER_PROTO = """syntax = "proto3";
package shop.v1;
message Other { string x = 1; }
message Reading {
  int32 i32 = 1;
  int64 i64 = 2;
  uint32 u32 = 3;
  uint64 u64 = 4;
  sint32 s32 = 5;
  sint64 s64 = 6;
  fixed32 f32 = 7;
  fixed64 f64 = 8;
  sfixed32 sf32 = 9;
  sfixed64 sf64 = 10;
  float fl = 11;
  double db = 12;
  bool ok = 13;
  string name = 14;
  bytes raw = 15;
  Kind kind = 16;
  repeated sint64 deltas = 17;
  repeated int32 unpacked = 18 [packed = false];
  message Inner { int64 a = 1; }
  repeated Inner inner = 19;
  map<string, Inner> by_name = 20;
  double wide = 21;
  enum Kind { UNKNOWN = 0; HOT = 1; COLD = 5; }
}
"""


def test_a_users_protobuf_schema_every_scalar_type_and_enums_by_name():
    t = pa.struct(
        [
            ("i32", pa.int32()), ("i64", pa.int64()), ("u32", pa.int32()), ("u64", pa.int64()),
            ("s32", pa.int32()), ("s64", pa.int64()), ("f32", pa.int32()), ("f64", pa.int64()),
            ("sf32", pa.int32()), ("sf64", pa.int64()), ("fl", pa.float32()), ("db", pa.float64()),
            ("ok", pa.bool_()), ("name", pa.binary()), ("raw", pa.string()), ("kind", pa.string()),
            ("deltas", pa.list_(pa.int64())), ("unpacked", pa.list_(pa.int16())),
            ("inner", pa.list_(pa.struct([("a", pa.int64())]))),
            ("by_name", pa.map_(pa.string(), pa.struct([("a", pa.int64())]))),
            ("wide", pa.float32()),
        ]
    )  # fmt: skip
    rows = [
        {
            "i32": -7, "i64": -(2**62), "u32": -1, "u64": -1, "s32": -(2**31), "s64": 2**63 - 1,
            "f32": -1, "f64": -(2**63), "sf32": -5, "sf64": -6, "fl": 1.5, "db": -2.25, "ok": True,
            "name": "héllo".encode(), "raw": "r", "kind": "COLD", "deltas": [-1, 0, 1, 2**40],
            "unpacked": [3, -4], "inner": [{"a": 1}, {"a": -2}], "by_name": [("x", {"a": 9})], "wide": 0.1,
        },
        {k: None for k in t.names} | {"kind": "UNKNOWN"},
    ]  # fmt: skip
    writer = ss.writer_for("protobuf", USER_PROTO, "shop.v1.Reading")
    assert writer.record_name == "shop.v1.Reading"
    out = ss.encode_column(pa.array(rows, t), writer, 300, "value", "protobuf").to_pylist()
    # the second message of the file: indexes [1], as Confluent writes them (zigzag varints)
    assert all(o[:7] == b"\x00" + struct.pack(">I", 300) + b"\x02\x02" for o in out)
    cls = message_class(USER_PROTO, "shop.v1.Reading")
    m = cls()
    m.ParseFromString(out[0][7:])
    assert (m.i32, m.i64, m.u32, m.u64, m.s32, m.s64) == (-7, -(2**62), 2**32 - 1, 2**64 - 1, -(2**31), 2**63 - 1)
    assert (m.f32, m.f64, m.sf32, m.sf64, m.fl, m.db, m.ok) == (2**32 - 1, 2**63, -5, -6, 1.5, -2.25, True)
    assert (m.name, m.raw, m.kind, list(m.deltas), list(m.unpacked)) == ("héllo", b"r", 5, [-1, 0, 1, 2**40], [3, -4])
    assert [i.a for i in m.inner] == [1, -2] and m.by_name["x"].a == 9 and m.wide == f32(0.1)
    # packed = false is honoured: each element with its own tag (field 18, varint)
    assert b"\x90\x01\x03\x90\x01" in out[0]
    empty = cls()
    empty.ParseFromString(out[1][7:])
    assert empty == cls()


ONEOF_PROTO = """syntax = "proto3";
package shop.v1;
message Reading { optional int32 c = 3; oneof choice { int32 a = 1; string b = 2; } }
"""


@pytest.mark.parametrize(
    ("fmt", "schema", "arrow_type", "rows", "error"),
    [
        ("protobuf", USER_PROTO, pa.struct([("i32", pa.int64())]), [{"i32": 1}],
         "value.i32: a int64 column cannot be written as the Protobuf int32 field 'i32'"),
        ("protobuf", ONEOF_PROTO, pa.struct([("a", pa.int32()), ("b", pa.string())]), [{"a": 1, "b": None}],
         r"value: the columns a, b are fields of one oneof \(choice\)"),
        ("protobuf", USER_PROTO, pa.struct([("nope", pa.int32())]), [{"nope": 1}],
         "value.nope: the message shop.v1.Reading has no field 'nope'"),
        ("protobuf", USER_PROTO, pa.struct([("kind", pa.string())]), [{"kind": "HOT"}, {"kind": "WARM"}],
         "row 1 of the batch: value.kind is a string the Protobuf enum does not name"),
        ("protobuf", USER_PROTO, pa.struct([("deltas", pa.list_(pa.int64()))]), [{"deltas": [1, None]}],
         r"row 0 of the batch: value.deltas\[\] is null"),
        ("protobuf", USER_PROTO, pa.struct([("name", pa.binary())]), [{"name": b"\xff"}],
         "row 0 of the batch: value.name is not UTF-8"),
        ("json-schema", '{"type": "object", "properties": {"a": {"type": "integer"}}}',
         pa.struct([("a", pa.float64())]), [{"a": 1.0}],
         "value.a: a double column cannot be written as JSON Schema type 'integer'"),
        ("json-schema", '{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]}',
         pa.struct([("a", pa.int64())]), [{"a": 1}], r"the data has no column for the required propert\(ies\) \['b'\]"),
        ("json-schema", '{"type": "object", "properties": {"a": {"type": "integer"}}}',
         pa.struct([("a", pa.int64())]), [{"a": 1}, {"a": None}],
         "row 1 of the batch: value.a is null, which the JSON schema does not take there"),
        ("json-schema", '{"type": "object", "properties": {"a": {"type": "array", "items": {"type": "number"}}}}',
         pa.struct([("a", pa.list_(pa.float64()))]), [{"a": [1.0, float("nan")]}],
         r"row 0 of the batch: value.a\[\] is NaN or infinite, which JSON has no number for"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_naming_the_column(fmt, schema, arrow_type, rows, error):
    writer = ss.writer_for(fmt, schema, "shop.v1.Reading" if fmt == "protobuf" else None)
    with pytest.raises(ss.SchemaEncodeError, match=error):
        ss.encode_column(pa.array(rows, arrow_type), writer, 1, "value", fmt)


@pytest.mark.parametrize(
    ("arrow_type", "error"),
    [
        (pa.struct([("d", pa.date32())]), r"value.d: a date32\[day\] column has no Protobuf type"),
        (pa.struct([("n", pa.decimal128(5, 2))]), r"value.n: a decimal128\(5, 2\) column has no Protobuf type"),
        (pa.struct([("t", pa.timestamp("us"))]), "value.t: timestamp_ntz has no Protobuf type"),
        (pa.struct([("ll", pa.list_(pa.list_(pa.int32())))]), "value.ll.*no repeated field of repeated fields"),
        (pa.struct([("m", pa.map_(pa.int32(), pa.int32()))]), "value.m: Protobuf maps written by the sink have string keys"),
        (pa.struct([("my col", pa.int32())]), "'my col' is not a Protobuf field name"),
        (pa.int64(), "value: a int64 column cannot be a Protobuf message: give a struct"),
    ],
)  # fmt: skip
def test_types_without_a_derived_protobuf_type_are_refused(arrow_type, error):
    with pytest.raises(ss.SchemaEncodeError, match=error):
        ss.proto_for(arrow_type)


def test_the_avro_sink_writes_byte_short_and_millisecond_columns():
    """Spark's byte and short columns come as Arrow int8/int16: the Avro sink wrote them
    as Avro int in its derived schema, then refused them ("a column of type int8 cannot be
    written as Avro int"); they are widened to int32 now, as for Protobuf and JSON."""
    import io

    import fastavro

    from broker.registry.formats.avro import parse_avro
    from broker.spark.avro_sink import encode_column, schema_for

    t = pa.struct([("b", pa.int8()), ("s", pa.int16()), ("ts", pa.timestamp("ms", "UTC"))])
    rows = [{"b": -128, "s": 32767, "ts": datetime.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)}]
    schema = schema_for(t)
    parsed = parse_avro(json.dumps(schema))
    (enc,) = encode_column(pa.array(rows, t), parsed.parsed, parsed.named, 3, "value").to_pylist()
    assert enc[:5] == b"\x00\x00\x00\x00\x03"
    assert fastavro.schemaless_reader(io.BytesIO(enc[5:]), fastavro.parse_schema(schema)) == rows[0]
