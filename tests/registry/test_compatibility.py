"""Compatibility: for each schema type and level, a table of evolutions accepted or
refused as Confluent's checkers decide, asked of the broker's registry
(POST /compatibility/subjects/S/versions/latest, then the registration itself).

Where each expectation comes from:
- Avro: Confluent's "Schema Evolution and Compatibility" (Confluent Platform docs,
  schema-registry/fundamentals/schema-evolution): BACKWARD allows deleting fields and
  adding optional fields (with a default), FORWARD adding fields and deleting optional
  ones, FULL adding and deleting optional fields only; transitive levels check every
  earlier version, the others the latest only. The per-type rules are the Avro
  specification's "Schema Resolution" (promotions int->long->float->double,
  string<->bytes; a reader's enum must hold every writer symbol unless it has a default;
  unions resolve branch by branch; fields matched by name or the reader's aliases).
- Protobuf: the same page's Protobuf section and Confluent's "Formats, Serializers and
  Deserializers" Protobuf compatibility rules: adding and removing fields, renaming them
  and adding enum constants are compatible; reusing a field number for another type, a
  type of another wire kind (int32 and sint32, int32 and string), another message type,
  a numeric field made repeated, a required field added or removed, a removed message
  or a changed package are not; int32, int64, uint32, uint64 and bool share one wire
  kind, string and bytes another.
- JSON Schema: Confluent's "Understanding JSON Schema Compatibility" (open, closed and
  partially open content models): with the default (strict) policy a property may be
  added to a closed content model, or removed from an open one, and not the other way;
  constraints may be relaxed (a larger maxLength, an enum extended, integer widened to
  number), not tightened; a required property may be dropped, not added without a default.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.interop

B, BT, F, FT, FU, FUT, N = (
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    "NONE",
)


def avro(*fields, enum=None):
    out = [
        {"name": n, "type": t, **({"default": d} if d is not ... else {}), **extra}
        for n, t, d, extra in (f if len(f) == 4 else (*f, {}) for f in fields)
    ]
    if enum is not None:
        out.append({"name": "color", "type": {"type": "enum", "name": "Color", "symbols": enum}})
    return json.dumps({"type": "record", "name": "Rec", "namespace": "t", "fields": out})


def proto(body, syntax="proto3", package="t"):
    return f'syntax = "{syntax}";\npackage {package};\n{body}\n'


def js(properties, required=(), closed=False, **extra):
    doc = {"type": "object", "properties": properties, **extra}
    if required:
        doc["required"] = list(required)
    if closed:
        doc["additionalProperties"] = False
    return json.dumps(doc)


_ = ...
A1 = avro(("a", "int", _))
# (name, type, old, new, {level: compatible}) — every level not named is the same as the
# non-transitive one it extends (one version before: transitive and not agree); NONE always
AVRO = [
    (
        "add a field with a default",
        avro(("a", "int", _)),
        avro(("a", "int", _), ("b", "string", "x")),
        {B: True, F: True, FU: True},
    ),
    ("add a field without a default", A1, avro(("a", "int", _), ("b", "string", _)), {B: False, F: True, FU: False}),
    (
        "remove a field that had a default",
        avro(("a", "int", _), ("b", "string", "x")),
        A1,
        {B: True, F: True, FU: True},
    ),
    ("remove a field without a default", avro(("a", "int", _), ("b", "string", _)), A1, {B: True, F: False, FU: False}),
    ("rename a field", avro(("a", "int", _)), avro(("c", "int", _)), {B: False, F: False, FU: False}),
    (
        "rename a field, the old name as an alias",
        A1,
        avro(("c", "int", _, {"aliases": ["a"]})),
        {B: True, F: False, FU: False},
    ),
    ("int to long (a promotion)", A1, avro(("a", "long", _)), {B: True, F: False, FU: False}),
    ("int to string", A1, avro(("a", "string", _)), {B: False, F: False, FU: False}),
    ("string to bytes", avro(("a", "string", _)), avro(("a", "bytes", _)), {B: True, F: True, FU: True}),
    (
        "add an enum symbol",
        avro(enum=["RED", "GREEN"]),
        avro(enum=["RED", "GREEN", "BLUE"]),
        {B: True, F: False, FU: False},
    ),
    ("remove an enum symbol", avro(enum=["RED", "GREEN"]), avro(enum=["RED"]), {B: False, F: True, FU: False}),
    ("int to a union of null and int", A1, avro(("a", ["null", "int"], _)), {B: True, F: False, FU: False}),
    ("rename the record", A1, A1.replace('"Rec"', '"Other"'), {B: False, F: False, FU: False}),
]
PROTOBUF = [
    (
        "add a field",
        proto("message M { int32 a = 1; }"),
        proto("message M { int32 a = 1; string b = 2; }"),
        {B: True, F: True, FU: True},
    ),
    (
        "remove a field",
        proto("message M { int32 a = 1; string b = 2; }"),
        proto("message M { int32 a = 1; }"),
        {B: True, F: True, FU: True},
    ),
    (
        "rename a field",
        proto("message M { int32 a = 1; }"),
        proto("message M { int32 b = 1; }"),
        {B: True, F: True, FU: True},
    ),
    (
        "a field number reused for a string",
        proto("message M { int32 a = 1; }"),
        proto("message M { string a = 1; }"),
        {B: False, F: False, FU: False},
    ),
    (
        "a removed field's number reused with another type",
        proto("message M { int32 a = 1; bytes c = 3; }"),
        proto("message M { int32 a = 1; double d = 3; }"),
        {B: False, F: False, FU: False},
    ),
    (
        "int32 to int64 (one wire kind)",
        proto("message M { int32 a = 1; }"),
        proto("message M { int64 a = 1; }"),
        {B: True, F: True, FU: True},
    ),
    (
        "int32 to sint32 (zigzag)",
        proto("message M { int32 a = 1; }"),
        proto("message M { sint32 a = 1; }"),
        {B: False, F: False, FU: False},
    ),
    (
        "string to bytes",
        proto("message M { string a = 1; }"),
        proto("message M { bytes a = 1; }"),
        {B: True, F: True, FU: True},
    ),
    (
        "add an enum constant",
        proto("enum E { X = 0; } message M { E e = 1; }"),
        proto("enum E { X = 0; Y = 1; } message M { E e = 1; }"),
        {B: True, F: True, FU: True},
    ),
    (
        "a message field changes message type",
        proto("message A { int32 x = 1; } message B { string y = 1; } message M { A f = 1; }"),
        proto("message A { int32 x = 1; } message B { string y = 1; } message M { B f = 1; }"),
        {B: False, F: False, FU: False},
    ),
    (
        "remove a message",
        proto("message M { int32 a = 1; } message N { int32 b = 1; }"),
        proto("message M { int32 a = 1; }"),
        {B: False, F: True, FU: False},
    ),
    (
        "change the package",
        proto("message M { int32 a = 1; }"),
        proto("message M { int32 a = 1; }", package="u"),
        {B: False, F: False, FU: False},
    ),
    (
        "a numeric field made repeated",
        proto("message M { optional int32 a = 1; }", "proto2"),
        proto("message M { repeated int32 a = 1; }", "proto2"),
        {B: False, F: False, FU: False},
    ),
    (
        "a string field made repeated",
        proto("message M { optional string a = 1; }", "proto2"),
        proto("message M { repeated string a = 1; }", "proto2"),
        {B: True, F: True, FU: True},
    ),
    (
        "add a required field",
        proto("message M { optional int32 a = 1; }", "proto2"),
        proto("message M { optional int32 a = 1; required int32 b = 2; }", "proto2"),
        {B: False, F: False, FU: False},
    ),
    (
        "a field moved into an existing oneof",
        proto("message M { int32 a = 1; oneof o { string b = 2; } }"),
        proto("message M { oneof o { int32 a = 1; string b = 2; } }"),
        {B: False, F: True, FU: False},
    ),
]
S = {"type": "string"}
I_ = {"type": "integer"}
JSON = [
    (
        "add an optional property to an open content model",
        js({"a": S}),
        js({"a": S, "b": I_}),
        {B: False, F: True, FU: False},
    ),
    (
        "add an optional property to a closed content model",
        js({"a": S}, closed=True),
        js({"a": S, "b": I_}, closed=True),
        {B: True, F: False, FU: False},
    ),
    (
        "remove a property from an open content model",
        js({"a": S, "b": I_}),
        js({"a": S}),
        {B: True, F: False, FU: False},
    ),
    ("change a property's type", js({"a": S}), js({"a": I_}), {B: False, F: False, FU: False}),
    ("integer to number", js({"a": I_}), js({"a": {"type": "number"}}), {B: True, F: False, FU: False}),
    (
        "extend an enum",
        js({"a": {"enum": ["x", "y"]}}),
        js({"a": {"enum": ["x", "y", "z"]}}),
        {B: True, F: False, FU: False},
    ),
    (
        "raise maxLength",
        js({"a": {"type": "string", "maxLength": 5}}),
        js({"a": {"type": "string", "maxLength": 9}}),
        {B: True, F: False, FU: False},
    ),
    ("require a property (no default)", js({"a": S}), js({"a": S}, required=["a"]), {B: False, F: True, FU: False}),
    ("allow additional properties", js({"a": S}, closed=True), js({"a": S}), {B: True, F: False, FU: False}),
]
ROWS = [("AVRO", *r) for r in AVRO] + [("PROTOBUF", *r) for r in PROTOBUF] + [("JSON", *r) for r in JSON]


def _expected(row_levels: dict, level: str) -> bool:
    if level == N:
        return True
    return row_levels[level.replace("_TRANSITIVE", "")]


@pytest.mark.parametrize("level", [B, BT, F, FT, FU, FUT, N])
@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]}: {r[1]}" for r in ROWS])
def test_one_evolution(registry, subject, row, level):
    schema_type, _name, old, new, levels = row
    status, out = registry.call("PUT", f"/config/{subject}", {"compatibility": level})
    assert status == 200 and out == {"compatibility": level}
    status, out = registry.register(subject, old, schema_type)
    assert status == 200, out
    expected = _expected(levels, level)
    body = {"schema": new, "schemaType": schema_type}
    status, out = registry.call("POST", f"/compatibility/subjects/{subject}/versions/latest?verbose=true", body)
    assert status == 200 and out["is_compatible"] is expected, out
    status, out = registry.register(subject, new, schema_type)
    if expected:
        assert status == 200, out
    else:
        assert (status, out["error_code"]) == (409, 409), out
        assert out["message"].startswith(
            f'Schema being registered is incompatible with an earlier schema for subject "{subject}"'
        ), out


TRANSITIVE = [
    # v1 {a}, v2 {a, b="x"}, v3 {a, b}: v3 reads v2's data (b is there) but not v1's (no b, no default)
    (
        "AVRO",
        [A1, avro(("a", "int", _), ("b", "string", "x")), avro(("a", "int", _), ("b", "string", _))],
        {B: True, BT: False, F: True, FT: True, FU: True, FUT: False},
    ),
    # v1 {a}, v2 {a, b="x"} closed, v3 {a, b} where b must be an integer: against v2 a type change
    (
        "JSON",
        [js({"a": S}, closed=True), js({"a": S, "b": S}, closed=True), js({"a": S, "b": I_}, closed=True)],
        {B: False, BT: False, F: False, FT: False, FU: False, FUT: False},
    ),
    # v1 {a=1, b=2}, v2 {a=1}, v3 {a=1, b=2 as sint32}: against v2 an added field, against v1 a kind change
    (
        "PROTOBUF",
        [
            proto("message M { int32 a = 1; int32 b = 2; }"),
            proto("message M { int32 a = 1; }"),
            proto("message M { int32 a = 1; sint32 b = 2; }"),
        ],
        {B: True, BT: False, F: True, FT: False, FU: True, FUT: False},
    ),
]


@pytest.mark.parametrize("level", [B, BT, F, FT, FU, FUT])
@pytest.mark.parametrize("case", TRANSITIVE, ids=[c[0] for c in TRANSITIVE])
def test_transitive_levels_check_every_version(registry, subject, case, level):
    schema_type, versions, expected = case
    assert registry.call("PUT", f"/config/{subject}", {"compatibility": "NONE"})[0] == 200
    for v in versions[:2]:
        assert registry.register(subject, v, schema_type)[0] == 200
    assert registry.call("PUT", f"/config/{subject}", {"compatibility": level})[0] == 200
    status, out = registry.call(
        "POST",
        f"/compatibility/subjects/{subject}/versions?verbose=true",
        {"schema": versions[2], "schemaType": schema_type},
    )
    assert status == 200 and out["is_compatible"] is expected[level], out
    status, out = registry.register(subject, versions[2], schema_type)
    assert (status == 200) is expected[level], out


def test_the_default_level_is_backward(registry, subject):
    status, out = registry.call("GET", "/config")
    assert (status, out) == (200, {"compatibilityLevel": "BACKWARD"})
    assert registry.register(subject, A1)[0] == 200
    status, out = registry.register(subject, avro(("a", "int", _), ("b", "string", _)))
    assert (status, out["error_code"]) == (409, 409)
