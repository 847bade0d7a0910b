"""The sink's valueFormat=protobuf / json-schema (and keyFormat=): rows' columns encoded
natively into registry-framed Protobuf or JSON before they are written.

The writer schema is the user's (valueProtobufSchema / valueJsonSchema), the subject's
latest version (use.latest.version=true), or derived from the column's Spark type:

Protobuf (proto3; the column must be a struct, the message; its fields numbered 1, 2, ...
in the struct's order, nested messages named after their field):
    boolean -> bool, byte/short/int -> int32, long -> int64, float, double, string,
    binary -> bytes, timestamp -> google.protobuf.Timestamp, struct -> a nested message,
    array -> repeated, map<string, V> -> map<string, V>; a nullable scalar is `optional`
    (a null is absent, a zero is written). Refused: date, timestamp_ntz, decimal (no
    proto3 scalar; cast them or give a schema), arrays of arrays or maps, maps of
    arrays or maps, maps whose keys are not strings, column names that are not
    Protobuf identifiers.
JSON Schema (draft-07, Confluent's JSON Schema serializer's conventions: every property
written, a null as null; closed objects, additionalProperties false):
    boolean, byte..long -> integer, float/double/decimal -> number, string,
    binary -> string with contentEncoding base64, date -> string format date,
    timestamp -> string format date-time (RFC 3339, UTC, "Z"), timestamp_ntz -> string
    (the same without a zone), struct -> object (required: its non-nullable fields),
    array -> array, map<string, V> -> object of additionalProperties V; a nullable type
    ["T", "null"]. NaN and the infinities have no JSON number: such a row fails the
    write, naming it (Jackson's "NaN" strings would not validate as numbers).

A user's schema is checked against the column's type before any row is written: every
field of the data must be a field (property) of the schema, of a type it can carry (a
string column for an enum field: by name; a long for an int32 field is refused), and for
JSON a null only where the schema's type admits null; the error names the column. The
values' own constraints (minimum, pattern, enum of JSON Schema) are not checked, as
Confluent's Java serializer does not by default.

The subject is valueSubject, or as `value.subject.name.strategy` says (TopicNameStrategy
<topic>-value by default, RecordNameStrategy the record's name: the message's full name,
the JSON schema's title; TopicRecordNameStrategy <topic>-<name>). The framing is
Confluent's: magic 0, the id, for Protobuf the message indexes (a single 0 byte for the
file's first message) then the message; for JSON the UTF-8 text.
"""

from __future__ import annotations

import json
import re
import struct
import threading
from array import array
from typing import Any

from broker._native import avro as _n

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DRAFT7 = "http://json-schema.org/draft-07/schema#"
TIMESTAMP = ".google.protobuf.Timestamp"


class SchemaEncodeError(ValueError):
    """Rows that cannot be written with the writer schema (or a type no schema is derived for)."""


# ---------------------------------------------------------------- Arrow normalization


def normal_type(t):
    """The Arrow type the encoders take for `t`: int8/int16 as int32, timestamps in
    microseconds, large strings/binaries/lists as the 32-bit ones."""
    import pyarrow as pa

    if pa.types.is_int8(t) or pa.types.is_int16(t):
        return pa.int32()
    if pa.types.is_timestamp(t) and t.unit != "us":
        return pa.timestamp("us", t.tz)
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, normal_type(f.type), f.nullable) for f in t])
    if pa.types.is_map(t):
        return pa.map_(normal_type(t.key_type), pa.field("value", normal_type(t.item_type), t.item_field.nullable))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field("element", normal_type(t.value_type), t.value_field.nullable))
    return t


def normalize(arr):
    t = normal_type(arr.type)
    return arr if t.equals(arr.type) else arr.cast(t)


# ---------------------------------------------------------------- Protobuf


def proto_for(arrow_type, name: str = "topLevelRecord", where: str = "value") -> str:
    """A proto3 file whose first message is `arrow_type` (a struct)."""
    import pyarrow as pa

    if not pa.types.is_struct(arrow_type):
        raise SchemaEncodeError(f"{where}: a {arrow_type} column cannot be a Protobuf message: give a struct")
    imports: set[str] = set()
    body = _proto_message(arrow_type, name, where, imports, "")
    head = 'syntax = "proto3";\n' + "".join(f'import "{i}";\n' for i in sorted(imports))
    return head + "\n" + body


def _pb_scalar(t) -> str | None:
    import pyarrow as pa

    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "int32"
    if pa.types.is_int64(t):
        return "int64"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if pa.types.is_timestamp(t) and t.tz is not None:
        return "google.protobuf.Timestamp"
    return None


def _proto_message(t, name: str, where: str, imports: set, indent: str) -> str:
    import pyarrow as pa

    lines = [f"{indent}message {name} {{"]
    nested: list[str] = []
    taken = {t.field(i).name for i in range(t.num_fields)}

    def message_name(field_name: str) -> str:
        base = field_name[0].upper() + field_name[1:]
        cand = base
        n = 2
        while cand in taken:
            cand = f"{base}{n}"
            n += 1
        taken.add(cand)
        return cand

    def type_of(ft, fname: str, fwhere: str) -> str:
        scalar = _pb_scalar(ft)
        if scalar is not None:
            if scalar.startswith("google."):
                imports.add("google/protobuf/timestamp.proto")
            return scalar
        if pa.types.is_struct(ft):
            mname = message_name(fname)
            nested.append(_proto_message(ft, mname, fwhere, imports, indent + "  "))
            return mname
        if pa.types.is_timestamp(ft):
            raise SchemaEncodeError(
                f"{fwhere}: timestamp_ntz has no Protobuf type (cast it to a timestamp or a string, or give "
                "valueProtobufSchema)"
            )
        if pa.types.is_list(ft) or pa.types.is_large_list(ft) or pa.types.is_map(ft):
            raise SchemaEncodeError(
                f"{fwhere}: Protobuf has no repeated field of repeated fields or maps (nor maps of them)"
            )
        raise SchemaEncodeError(
            f"{fwhere}: a {ft} column has no Protobuf type (dates and decimals: cast them, e.g. to a string, "
            "or give valueProtobufSchema)"
        )

    for i in range(t.num_fields):
        f = t.field(i)
        fwhere = f"{where}.{f.name}"
        if not _IDENT.match(f.name):
            raise SchemaEncodeError(f"{fwhere}: {f.name!r} is not a Protobuf field name; rename the column")
        ft = f.type
        if pa.types.is_map(ft):
            if not pa.types.is_string(ft.key_type):
                raise SchemaEncodeError(
                    f"{fwhere}: Protobuf maps written by the sink have string keys, not {ft.key_type}"
                )
            vt = type_of(ft.item_type, f.name, f"{fwhere}{{}}")
            lines.append(f"{indent}  map<string, {vt}> {f.name} = {i + 1};")
        elif pa.types.is_list(ft) or pa.types.is_large_list(ft):
            et = type_of(ft.value_type, f.name, f"{fwhere}[]")
            lines.append(f"{indent}  repeated {et} {f.name} = {i + 1};")
        else:
            ty = type_of(ft, f.name, fwhere)
            # a nullable scalar: `optional` (explicit presence); messages have it anyway
            scalar = _pb_scalar(ft)
            optional = "optional " if f.nullable and scalar is not None and "." not in scalar else ""
            lines.append(f"{indent}  {optional}{ty} {f.name} = {i + 1};")
    lines += [n.rstrip("\n") for n in nested]
    lines.append(f"{indent}}}")
    return "\n".join(lines) + "\n"


# FieldDescriptorProto.Type (as broker/spark/protobuf.py)
_T_DOUBLE, _T_FLOAT, _T_INT64, _T_UINT64, _T_INT32, _T_FIXED64, _T_FIXED32, _T_BOOL = 1, 2, 3, 4, 5, 6, 7, 8
_T_STRING, _T_GROUP, _T_MESSAGE, _T_BYTES, _T_UINT32, _T_ENUM, _T_SFIXED32, _T_SFIXED64 = 9, 10, 11, 12, 13, 14, 15, 16
_T_SINT32, _T_SINT64 = 17, 18
_TYPE_NAMES = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
    9: "string", 10: "group", 11: "message", 12: "bytes", 13: "uint32", 14: "enum", 15: "sfixed32",
    16: "sfixed64", 17: "sint32", 18: "sint64",
}  # fmt: skip
_WIRE = {
    _T_DOUBLE: 1, _T_FIXED64: 1, _T_SFIXED64: 1, _T_FLOAT: 5, _T_FIXED32: 5, _T_SFIXED32: 5,
    _T_STRING: 2, _T_BYTES: 2, _T_MESSAGE: 2,
}  # fmt: skip
# (column kind, field type) -> encoder kind
_PB_KINDS = {
    ("int32", _T_INT32): _n.PE_I32_VARINT, ("int32", _T_INT64): _n.PE_I32_VARINT,
    ("int32", _T_UINT64): _n.PE_I32_VARINT, ("int32", _T_ENUM): _n.PE_I32_VARINT,
    ("int32", _T_UINT32): _n.PE_I32_UVARINT, ("int32", _T_SINT32): _n.PE_I32_ZIGZAG,
    ("int32", _T_SINT64): _n.PE_I32_ZIGZAG, ("int32", _T_FIXED32): _n.PE_I32_FIXED32,
    ("int32", _T_SFIXED32): _n.PE_I32_FIXED32, ("int32", _T_FIXED64): _n.PE_I32_FIXED64,
    ("int32", _T_SFIXED64): _n.PE_I32_FIXED64,
    ("int64", _T_INT64): _n.PE_I64_VARINT, ("int64", _T_UINT64): _n.PE_I64_VARINT,
    ("int64", _T_SINT64): _n.PE_I64_ZIGZAG, ("int64", _T_FIXED64): _n.PE_I64_FIXED64,
    ("int64", _T_SFIXED64): _n.PE_I64_FIXED64,
    ("bool", _T_BOOL): _n.PE_BOOL,
    ("float", _T_FLOAT): _n.PE_F32, ("float", _T_DOUBLE): _n.PE_F32_F64, ("double", _T_DOUBLE): _n.PE_F64,
    ("string", _T_STRING): _n.PE_BYTES, ("string", _T_BYTES): _n.PE_BYTES, ("string", _T_ENUM): _n.PE_ENUM,
    ("binary", _T_BYTES): _n.PE_BYTES, ("binary", _T_STRING): _n.PE_BYTES,
}  # fmt: skip


def _column_kind(t) -> str:
    import pyarrow as pa

    for name, test in (
        ("bool", pa.types.is_boolean),
        ("int32", pa.types.is_int32),
        ("int64", pa.types.is_int64),
        ("float", pa.types.is_float32),
        ("double", pa.types.is_float64),
        ("string", pa.types.is_string),
        ("binary", pa.types.is_binary),
    ):
        if test(t):
            return name
    return str(t)


class ProtoWriter:
    """A parsed Protobuf schema and the message the sink writes (its message indexes)."""

    def __init__(self, parsed, message: str | None):
        from broker.spark.protobuf import _index

        self.files = dict(parsed.files)
        self.files.setdefault(parsed.file.name, parsed.file)
        self.syntax = parsed.file.syntax or "proto2"
        self.messages, self.enums = _index(self.files)
        f = parsed.file
        prefix = "." + f.package if f.package else ""
        if not f.message_type:
            raise SchemaEncodeError("the Protobuf schema has no message")
        if message is None:
            message = prefix + "." + f.message_type[0].name
        elif not message.startswith("."):
            message = "." + message
        indexes = _message_indexes(f, prefix, message)
        if indexes is None:
            raise SchemaEncodeError(f"the Protobuf schema's file has no message {message[1:]!r}")
        self.indexes: list[int] = indexes
        self.message = message

    @property
    def record_name(self) -> str:
        return self.message[1:]

    def header(self, schema_id: int) -> bytes:
        """Confluent's framing up to the message: magic, id, the message indexes."""
        head = b"\x00" + struct.pack(">I", schema_id)
        if self.indexes == [0]:
            return head + b"\x00"
        out = bytearray(head)
        for v in [len(self.indexes)] + self.indexes:
            z = (v << 1) ^ (v >> 63)
            while z > 0x7F:
                out.append((z & 0x7F) | 0x80)
                z >>= 7
            out.append(z)
        return bytes(out)

    def nodes(self, arr, where: str) -> tuple[list, list[str]]:
        """The encoder's nodes for `arr` (a struct) written as the message, and each
        node's column name (for errors)."""
        import pyarrow as pa

        nodes: list = [None]
        names: list[str] = [where]

        def reserve(n: int) -> int:
            nodes.extend([None] * n)
            names.extend([""] * n)
            return len(nodes) - n

        def message(slot: int, mname: str, a, w: str) -> None:
            if not pa.types.is_struct(a.type):
                raise SchemaEncodeError(f"{w}: a {a.type} column cannot be written as the message {mname[1:]!r}")
            m = self.messages[mname]
            by_name = {fd.name: fd for fd in m.field}
            t = a.type
            kid0 = reserve(t.num_fields)
            for j in range(t.num_fields):
                fname = t.field(j).name
                fd = by_name.get(fname)
                if fd is None:
                    raise SchemaEncodeError(
                        f"{w}.{fname}: the message {mname[1:]} has no field {fname!r} (fields: "
                        + ", ".join(by_name)
                        + ")"
                    )
                field(kid0 + j, fd, a.field(j), f"{w}.{fname}")
            # two columns of one oneof: a reader keeps only the last, so one would be lost
            members: dict[int, list[str]] = {}
            for j in range(t.num_fields):
                fd = by_name[t.field(j).name]
                if fd.HasField("oneof_index") and not fd.proto3_optional:
                    members.setdefault(fd.oneof_index, []).append(fd.name)
            for index, cols in members.items():
                if len(cols) > 1:
                    raise SchemaEncodeError(
                        f"{w}: the columns {', '.join(cols)} are fields of one oneof "
                        f"({m.oneof_decl[index].name}): write one of them per row (one column), not several"
                    )
            nodes[slot] = (_n.PE_MSG, 0, 0, a, kid0, t.num_fields, None, None)
            names[slot] = w

        def field(slot: int, fd, a, w: str) -> None:
            names[slot] = w
            if fd.label == 3:  # repeated
                entry = self.messages.get(fd.type_name) if fd.type == _T_MESSAGE else None
                if entry is not None and entry.options.map_entry:
                    if not pa.types.is_map(a.type):
                        raise SchemaEncodeError(f"{w}: a {a.type} column cannot be written as a Protobuf map")
                    k0 = reserve(2)
                    value(k0, entry.field[0], a.keys, f"{w}{{key}}", 1)
                    value(k0 + 1, entry.field[1], a.items, f"{w}{{}}", 2)
                    nodes[slot] = (_n.PE_MAP, (fd.number << 3) | 2, 0, a, k0, 2, None, None)
                    return
                if not (pa.types.is_list(a.type)):
                    raise SchemaEncodeError(
                        f"{w}: a {a.type} column cannot be written as the repeated field {fd.name!r}"
                    )
                e = reserve(1)
                value(e, fd, a.values, f"{w}[]", fd.number)
                packable = fd.type not in (_T_STRING, _T_BYTES, _T_MESSAGE, _T_GROUP)
                packed = packable and (fd.options.packed if fd.options.HasField("packed") else self.syntax == "proto3")
                nodes[slot] = (
                    _n.PE_LIST, (fd.number << 3) | 2, _n.X_PACKED if packed else 0, a, e, 1, None, None
                )  # fmt: skip
                return
            value(slot, fd, a, w, fd.number)

        def value(slot: int, fd, a, w: str, number: int) -> None:
            names[slot] = w
            tag = (number << 3) | _WIRE.get(fd.type, 0)
            t = a.type
            if fd.type == _T_MESSAGE:
                if fd.type_name == TIMESTAMP:
                    if not (pa.types.is_timestamp(t) and t.tz is not None):
                        raise SchemaEncodeError(
                            f"{w}: a {t} column cannot be written as google.protobuf.Timestamp (a timestamp can)"
                        )
                    nodes[slot] = (_n.PE_TIMESTAMP, tag, 0, a, 0, 0, None, None)
                    return
                if fd.type_name not in self.messages:
                    raise SchemaEncodeError(f"{w}: unknown message {fd.type_name}")
                message(slot, fd.type_name, a, w)
                nodes[slot] = nodes[slot][:1] + (tag,) + nodes[slot][2:]
                return
            if fd.type == _T_GROUP:
                raise SchemaEncodeError(f"{w}: Protobuf groups are not supported by the kbroker sink")
            kind = _PB_KINDS.get((_column_kind(t), fd.type))
            if kind is None:
                raise SchemaEncodeError(
                    f"{w}: a {t} column cannot be written as the Protobuf {_TYPE_NAMES.get(fd.type, fd.type)} "
                    f"field {fd.name!r}"
                )
            flags = _n.X_UTF8 if kind == _n.PE_BYTES and fd.type == _T_STRING and _column_kind(t) == "binary" else 0
            blob = table = None
            if kind == _n.PE_ENUM:
                e = self.enums.get(fd.type_name)
                if e is None:
                    raise SchemaEncodeError(f"{w}: unknown enum {fd.type_name}")
                blob_b = bytearray()
                triples = array("i")
                for v in e.value:
                    enc = v.name.encode()
                    triples.extend([len(blob_b), len(enc), v.number])
                    blob_b += enc
                blob, table = bytes(blob_b), triples.tobytes()
            nodes[slot] = (kind, tag, flags, a, 0, 0, blob, table)

        message(0, self.message, arr, where)
        return nodes, names


def _message_indexes(f, prefix: str, full: str) -> list[int] | None:
    def walk(msgs, pre: str, path: list[int]):
        for i, m in enumerate(msgs):
            name = f"{pre}.{m.name}"
            if name == full:
                return path + [i]
            got = walk(m.nested_type, name, path + [i])
            if got is not None:
                return got
        return None

    return walk(f.message_type, prefix, [])


# ---------------------------------------------------------------- JSON Schema


def json_schema_for(arrow_type, nullable: bool = False, top: bool = True, where: str = "value") -> dict:
    """The JSON Schema (draft-07) of an Arrow type."""
    import pyarrow as pa

    t = arrow_type
    out: dict[str, Any]
    if pa.types.is_struct(t):
        out = {
            "type": "object",
            "properties": {
                t.field(i).name: json_schema_for(
                    t.field(i).type, t.field(i).nullable, False, f"{where}.{t.field(i).name}"
                )
                for i in range(t.num_fields)
            },
            "required": [t.field(i).name for i in range(t.num_fields) if not t.field(i).nullable],
            "additionalProperties": False,
        }
    elif pa.types.is_map(t):
        if not pa.types.is_string(t.key_type):
            raise SchemaEncodeError(f"{where}: JSON objects have string keys, not {t.key_type}")
        out = {
            "type": "object",
            "additionalProperties": json_schema_for(t.item_type, t.item_field.nullable, False, f"{where}{{}}"),
        }
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        out = {"type": "array", "items": json_schema_for(t.value_type, t.value_field.nullable, False, f"{where}[]")}
    elif pa.types.is_boolean(t):
        out = {"type": "boolean"}
    elif pa.types.is_integer(t):
        if pa.types.is_unsigned_integer(t):
            raise SchemaEncodeError(f"{where}: unsigned {t} columns are not written by the kbroker sink")
        out = {"type": "integer"}
    elif pa.types.is_floating(t) or pa.types.is_decimal(t):
        out = {"type": "number"}
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        out = {"type": "string"}
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        out = {"type": "string", "contentEncoding": "base64"}
    elif pa.types.is_date32(t):
        out = {"type": "string", "format": "date"}
    elif pa.types.is_timestamp(t):
        out = {"type": "string", "format": "date-time"} if t.tz is not None else {"type": "string"}
    else:
        raise SchemaEncodeError(f"{where}: a {t} column has no JSON Schema type the kbroker sink writes")
    if nullable:
        out["type"] = [out["type"], "null"]
    if top:
        out = {"$schema": DRAFT7, "title": "topLevelRecord", **out}
    return out


class JsonWriter:
    def __init__(self, document: Any):
        self.document = document

    @property
    def record_name(self) -> str | None:
        title = self.document.get("title") if isinstance(self.document, dict) else None
        return title if isinstance(title, str) else None

    def header(self, schema_id: int) -> bytes:
        return b"\x00" + struct.pack(">I", schema_id)

    def _deref(self, s: Any, path: tuple, where: str):
        while isinstance(s, dict) and "$ref" in s:
            ref = s["$ref"]
            if ref in path:
                raise SchemaEncodeError(f"{where}: the reference {ref!r} is recursive")
            path = path + (ref,)
            parts = ref.split("/")
            if len(parts) != 3 or parts[0] != "#" or parts[1] not in ("definitions", "$defs"):
                raise SchemaEncodeError(
                    f"{where}: only local references (#/definitions/X, #/$defs/X) are followed, not {ref!r}"
                )
            s = (self.document.get(parts[1]) or {}).get(parts[2])
            if s is None:
                raise SchemaEncodeError(f"{where}: the reference {ref!r} names nothing")
        return s, path

    def nodes(self, arr, where: str) -> tuple[list, list[str]]:
        import pyarrow as pa

        nodes: list = [None]
        names: list[str] = [where]

        def reserve(n: int) -> int:
            nodes.extend([None] * n)
            names.extend([""] * n)
            return len(nodes) - n

        def fill(slot: int, s: Any, a, w: str, path: tuple, key: bytes | None) -> None:
            names[slot] = w
            s, path = self._deref(s, path, w)
            if s is True or s == {}:
                s = json_schema_for(a.type, True, False, w)  # any value: the column's own type
            if not isinstance(s, dict):
                raise SchemaEncodeError(f"{w}: the schema {s!r} takes no value")
            nullable = False
            one = s.get("oneOf") or s.get("anyOf")
            if one is not None:
                # Confluent's Connect converter writes an optional T as oneOf [null, T]
                others = [x for x in one if not (isinstance(x, dict) and x.get("type") == "null")]
                if len(others) != 1 or len(one) != 2:
                    raise SchemaEncodeError(
                        f"{w}: oneOf/anyOf other than [null, T] is not supported by the kbroker sink"
                    )
                fill(slot, others[0], a, w, path, key)
                node = nodes[slot]
                nodes[slot] = (node[0], node[1] | _n.X_NULLABLE) + node[2:]
                return
            if "allOf" in s:
                raise SchemaEncodeError(f"{w}: allOf is not supported by the kbroker sink")
            typ = s.get("type")
            if isinstance(typ, list):
                nullable = "null" in typ
                others = [x for x in typ if x != "null"]
                if len(others) != 1:
                    raise SchemaEncodeError(f'{w}: a union of the types {typ} is not supported; use ["T", "null"]')
                typ = others[0]
            if typ is None:
                typ = "object" if "properties" in s else ("array" if "items" in s else None)
            t = a.type
            flags = _n.X_NULLABLE if nullable else 0
            wrong = SchemaEncodeError(f"{w}: a {t} column cannot be written as JSON Schema type {typ!r}")
            if typ == "object":
                props = s.get("properties") or {}
                extra = s.get("additionalProperties", True)
                if pa.types.is_map(t):
                    if props or extra is False:
                        raise SchemaEncodeError(
                            f"{w}: a map column is written as an object of additionalProperties, which this schema "
                            "does not take"
                        )
                    if not pa.types.is_string(t.key_type):
                        raise SchemaEncodeError(f"{w}: JSON objects have string keys, not {t.key_type}")
                    k0 = reserve(2)
                    nodes[k0] = (_n.JE_STRING, 0, 0, a.keys, 0, 0, None, None)
                    names[k0] = f"{w}{{key}}"
                    fill(k0 + 1, extra if isinstance(extra, dict) else {}, a.items, f"{w}{{}}", path, None)
                    nodes[slot] = (_n.JE_MAP, flags, 0, a, k0, 2, key, None)
                    return
                if not pa.types.is_struct(t):
                    raise wrong
                kid0 = reserve(t.num_fields)
                have = set()
                for j in range(t.num_fields):
                    fname = t.field(j).name
                    have.add(fname)
                    sub = props.get(fname)
                    if sub is None:
                        raise SchemaEncodeError(
                            f"{w}.{fname}: the JSON schema has no property {fname!r} (properties: "
                            + ", ".join(props)
                            + ")"
                        )
                    fill(kid0 + j, sub, a.field(j), f"{w}.{fname}", path, json.dumps(fname).encode() + b":")
                missing = [r for r in s.get("required") or () if r not in have]
                if missing:
                    raise SchemaEncodeError(f"{w}: the data has no column for the required propert(ies) {missing}")
                nodes[slot] = (_n.JE_OBJECT, flags, 0, a, kid0, t.num_fields, key, None)
                return
            if typ == "array":
                if not (pa.types.is_list(t)):
                    raise wrong
                items = s.get("items", {})
                if not isinstance(items, (dict, bool)):
                    raise SchemaEncodeError(f"{w}: an array needs one `items` schema")
                e = reserve(1)
                fill(e, items, a.values, f"{w}[]", path, None)
                nodes[slot] = (_n.JE_ARRAY, flags, 0, a, e, 1, key, None)
                return
            kind = None
            scale = 0
            if typ == "boolean" and pa.types.is_boolean(t):
                kind = _n.JE_BOOL
            elif typ in ("integer", "number") and pa.types.is_int32(t):
                kind = _n.JE_I32
            elif typ in ("integer", "number") and pa.types.is_int64(t):
                kind = _n.JE_I64
            elif typ == "number" and pa.types.is_float32(t):
                kind = _n.JE_F32
            elif typ == "number" and pa.types.is_float64(t):
                kind = _n.JE_F64
            elif pa.types.is_decimal128(t) and (typ == "number" or (typ == "integer" and t.scale == 0)):
                kind, scale = _n.JE_DECIMAL, t.scale
            elif typ == "string":
                if pa.types.is_string(t):
                    kind = _n.JE_STRING
                elif pa.types.is_binary(t):
                    base64 = (
                        s.get("contentEncoding") == "base64" or s.get("media", {}).get("binaryEncoding") == "base64"
                    )
                    kind = _n.JE_BASE64 if base64 else _n.JE_STRING
                    if not base64:
                        scale = _n.X_UTF8
                elif pa.types.is_date32(t):
                    kind = _n.JE_DATE
                elif pa.types.is_timestamp(t):
                    kind = _n.JE_TIMESTAMP if t.tz is not None else _n.JE_TIMESTAMP_NTZ
            if kind is None:
                raise wrong
            nodes[slot] = (kind, flags, scale, a, 0, 0, key, None)

        fill(0, self.document, arr, where, (), None)
        return nodes, names


# ---------------------------------------------------------------- encoding a column

_REASONS = {
    _n.X_NULL: "is null, which the {fmt} schema does not take there",
    _n.X_BAD_ENUM: "is a string the Protobuf enum does not name",
    _n.X_BAD_UTF8: "is not UTF-8, which a string needs",
    _n.X_NOT_FINITE: "is NaN or infinite, which JSON has no number for",
}


def encode_column(arr, writer, schema_id: int, where: str, fmt: str):
    """A pyarrow array -> a binary array of registry-framed values (Protobuf or JSON)."""
    import pyarrow as pa

    arr = normalize(arr)
    nodes, names = writer.nodes(arr, where)
    protobuf = fmt == "protobuf"
    offsets, data, validity, nulls, bad_row, bad_node, reason = _n.encode_schema(
        nodes, writer.header(schema_id), protobuf
    )
    if bad_row >= 0:
        what = _REASONS.get(reason, f"cannot be written (reason {reason})").format(
            fmt="Protobuf" if protobuf else "JSON"
        )
        raise SchemaEncodeError(f"kbroker sink: row {bad_row} of the batch: {names[bad_node]} {what}")
    return pa.Array.from_buffers(
        pa.binary(),
        len(arr),
        [pa.py_buffer(validity) if validity is not None else None, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls,
    )


_writers: dict[tuple, Any] = {}
_lock = threading.Lock()


def writer_for(fmt: str, text: str, message: str | None = None, refs_key: tuple = (), resolve=None):
    """The parsed writer schema (once per text and references per Python worker);
    resolve() gives the references (broker.registry's Resolved) when refs_key names some."""
    key = (fmt, text, refs_key, message)
    with _lock:
        got = _writers.get(key)
    if got is not None:
        return got
    from broker.registry.formats import InvalidSchema

    refs = resolve() if refs_key and resolve is not None else ()
    if fmt == "protobuf":
        from broker.registry.formats.protobuf import parse_protobuf

        try:
            parsed = parse_protobuf(text, refs)
        except InvalidSchema as exc:
            raise SchemaEncodeError(f"the writer schema is not valid Protobuf: {exc}") from None
        w: Any = ProtoWriter(parsed, message)
    else:
        from broker.registry.formats.jsonschema import parse_json

        try:
            parsed_js = parse_json(text, refs)
        except InvalidSchema as exc:
            raise SchemaEncodeError(f"the writer schema is not a valid JSON Schema: {exc}") from None
        w = JsonWriter(parsed_js.document)
    with _lock:
        _writers[key] = w
    return w
