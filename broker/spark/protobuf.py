"""Protobuf schemas -> Spark types, Arrow column layouts and the native decoder's program
(valueFormat=protobuf / keyFormat=protobuf).

Protobuf needs no writer schema to decode: fields are found by number, so every version
of a message reads with the reader's (a field the reader does not know is skipped, one
the record lacks is null) — Protobuf's own compatibility. The reader message is the
first message of the reader schema's file (Confluent's message index [0]), or the one
`valueProtobufMessage` names. The message indexes of Confluent's framing are skipped.

Types as Spark's from_protobuf maps them: int32, sint32, sfixed32, uint32, fixed32 ->
int; int64, sint64, sfixed64, uint64, fixed64 -> long; bool, float, double, string,
bytes; enum -> string (its name; a number the reader's enum does not name: null);
message -> struct; repeated -> array; map<string, V> -> map; google.protobuf.Timestamp
-> timestamp. Every field is nullable (absent: null, as from_protobuf without
emit.default.values). Refused: recursive messages, maps whose keys are not strings,
groups, messages of more than 64 fields.
"""

from __future__ import annotations

from array import array
from typing import Any

from broker._native import avro as _n
from broker.spark.avro import AvroSchemaError as SchemaError, RegistryDecoder

# FieldDescriptorProto.Type
T_DOUBLE, T_FLOAT, T_INT64, T_UINT64, T_INT32, T_FIXED64, T_FIXED32, T_BOOL = 1, 2, 3, 4, 5, 6, 7, 8
T_STRING, T_GROUP, T_MESSAGE, T_BYTES, T_UINT32, T_ENUM, T_SFIXED32, T_SFIXED64 = 9, 10, 11, 12, 13, 14, 15, 16
T_SINT32, T_SINT64 = 17, 18
LABEL_REPEATED = 3
TIMESTAMP = ".google.protobuf.Timestamp"


def _index(files: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    messages: dict[str, Any] = {}
    enums: dict[str, Any] = {}

    def walk(prefix: str, msgs, ens) -> None:
        for e in ens:
            enums[f"{prefix}.{e.name}"] = e
        for m in msgs:
            name = f"{prefix}.{m.name}"
            messages[name] = m
            walk(name, m.nested_type, m.enum_type)

    for f in files.values():
        walk("." + f.package if f.package else "", f.message_type, f.enum_type)
    return messages, enums


class ProtoReader:
    """The reader message as Spark columns and the one program every record runs."""

    def __init__(self, schema, message: str | None = None):
        self.files = dict(schema.files)
        self.files.setdefault(schema.file.name, schema.file)
        self.messages, self.enums = _index(self.files)
        f = schema.file
        if message is None:
            if not f.message_type:
                raise SchemaError("the Protobuf schema has no message")
            message = ("." + f.package if f.package else "") + "." + f.message_type[0].name
        elif not message.startswith("."):
            message = "." + message
        if message not in self.messages:
            raise SchemaError(f"the Protobuf schema has no message {message[1:]!r}")
        self.layout: list[list[int]] = [[0, 0, 0, 0]]
        self.ops: list[list[int]] = []
        self.kids: list[int] = []
        self.blob = bytearray()
        self.root, self.spark_type = self._message(message, 0, ())

    def _op(self, *v: int) -> int:
        self.ops.append(list(v) + [0] * (6 - len(v)))
        return len(self.ops) - 1

    def _new_cols(self, n: int) -> int:
        self.layout.extend([0, 0, 0, 0] for _ in range(n))
        return len(self.layout) - n

    def _message(self, name: str, col: int, path: tuple[str, ...]):
        from pyspark.sql import types as T

        if name in path:
            raise SchemaError(f"the message {name[1:]!r} is recursive, which Spark cannot represent")
        m = self.messages[name]
        fields = list(m.field)
        if len(fields) > 64:
            raise SchemaError(f"the message {name[1:]!r} has more than 64 fields")
        kid0 = self._new_cols(len(fields))
        self.layout[col] = [_n.K_STRUCT, kid0, len(fields), 0]
        entries: list[int] = []
        spark_fields = []
        for i, fd in enumerate(fields):
            fcol = kid0 + i
            where = f"{name[1:]}.{fd.name}"
            if fd.label == LABEL_REPEATED:
                entry = self.messages.get(fd.type_name) if fd.type == T_MESSAGE else None
                if entry is not None and entry.options.map_entry:
                    key, value = entry.field[0], entry.field[1]
                    if key.type != T_STRING:
                        raise SchemaError(f"{where}: maps with keys other than strings are not supported")
                    k0 = self._new_cols(2)
                    self.layout[fcol] = [_n.K_MAP, k0, 2, 0]
                    self.layout[k0] = [_n.K_BIN, 0, 0, 0]
                    key_op = self._op(_n.OP_PB_BYTES, k0, 1)
                    value_op, vtype = self._value(value, k0 + 1, path + (name,), where)
                    op = self._op(_n.OP_PB_MAPENTRY, fcol, key_op, value_op)
                    spark_fields.append(T.StructField(fd.name, T.MapType(T.StringType(), vtype, True), True))
                    entries += [fd.number, op, _n.PB_REPEATED]
                    continue
                item = self._new_cols(1)
                self.layout[fcol] = [_n.K_LIST, item, 1, 0]
                op, itype = self._value(fd, item, path + (name,), where)
                packable = fd.type not in (T_STRING, T_BYTES, T_MESSAGE, T_GROUP)
                entries += [fd.number, op, _n.PB_REPEATED | (_n.PB_PACKABLE if packable else 0)]
                spark_fields.append(T.StructField(fd.name, T.ArrayType(itype, True), True))
                continue
            op, ftype = self._value(fd, fcol, path + (name,), where)
            entries += [fd.number, op, 0]
            spark_fields.append(T.StructField(fd.name, ftype, True))
        start = len(self.kids)
        self.kids += entries
        return self._op(_n.OP_PB_MSG, col, start, len(fields)), T.StructType(spark_fields)

    def _value(self, fd, col: int, path: tuple[str, ...], where: str):
        from pyspark.sql import types as T

        t = fd.type
        simple = {
            T_INT32: (_n.OP_PB_VARINT_I32, _n.K_I32, T.IntegerType()),
            T_UINT32: (_n.OP_PB_VARINT_I32, _n.K_I32, T.IntegerType()),
            T_SINT32: (_n.OP_PB_ZIGZAG_I32, _n.K_I32, T.IntegerType()),
            T_FIXED32: (_n.OP_PB_FIXED32, _n.K_I32, T.IntegerType()),
            T_SFIXED32: (_n.OP_PB_FIXED32, _n.K_I32, T.IntegerType()),
            T_INT64: (_n.OP_PB_VARINT_I64, _n.K_I64, T.LongType()),
            T_UINT64: (_n.OP_PB_VARINT_I64, _n.K_I64, T.LongType()),
            T_SINT64: (_n.OP_PB_ZIGZAG_I64, _n.K_I64, T.LongType()),
            T_FIXED64: (_n.OP_PB_FIXED64, _n.K_I64, T.LongType()),
            T_SFIXED64: (_n.OP_PB_FIXED64, _n.K_I64, T.LongType()),
            T_BOOL: (_n.OP_PB_BOOL, _n.K_BOOL, T.BooleanType()),
            T_FLOAT: (_n.OP_PB_FIXED32, _n.K_F32, T.FloatType()),
            T_DOUBLE: (_n.OP_PB_FIXED64, _n.K_F64, T.DoubleType()),
        }
        if t in simple:
            code, kind, stype = simple[t]
            self.layout[col] = [kind, 0, 0, 0]
            return self._op(code, col), stype
        if t in (T_STRING, T_BYTES):
            self.layout[col] = [_n.K_BIN, 0, 0, 0]
            return self._op(_n.OP_PB_BYTES, col, 1 if t == T_STRING else 0), (
                T.StringType() if t == T_STRING else T.BinaryType()
            )
        if t == T_ENUM:
            e = self.enums.get(fd.type_name)
            if e is None:
                raise SchemaError(f"{where}: unknown enum {fd.type_name}")
            self.layout[col] = [_n.K_BIN, 0, 0, 0]
            start = len(self.kids)
            for v in e.value:
                enc = v.name.encode()
                self.kids += [v.number, len(self.blob), len(enc)]
                self.blob += enc
            return self._op(_n.OP_PB_ENUM, col, start, len(e.value)), T.StringType()
        if t == T_MESSAGE:
            if fd.type_name == TIMESTAMP:
                self.layout[col] = [_n.K_I64, 0, 0, 0]
                return self._op(_n.OP_PB_TIMESTAMP, col), T.TimestampType()
            if fd.type_name not in self.messages:
                raise SchemaError(f"{where}: unknown message {fd.type_name}")
            msg_op, stype = self._message(fd.type_name, col, path)
            return self._op(_n.OP_PB_SUBMSG, col, msg_op), stype
        raise SchemaError(f"{where}: Protobuf groups are not supported")

    def program(self, schema_id: int):
        ops = array("i", [v for o in self.ops for v in o]).tobytes()
        return _n.Program(
            schema_id, ops, array("i", self.kids).tobytes(), bytes(self.blob), self.root, len(self.layout), 1
        )


class ProtoDecoder(RegistryDecoder):
    """One column's reader message; the registry ids met so far (each checked once: an id
    the registry does not have, or of another type, fails its records)."""

    format_name = "Protobuf"
    schema_type = "PROTOBUF"
    option = "protobuf"

    def __init__(
        self, reader_text: str, reader_refs=(), *, message: str | None, fetch_type, permissive: bool, what="value"
    ):
        from broker.registry.formats import InvalidSchema
        from broker.registry.formats.protobuf import parse_protobuf

        try:
            parsed = parse_protobuf(reader_text, reader_refs)
        except InvalidSchema as exc:
            raise SchemaError(f"the reader schema is not valid Protobuf: {exc}") from None
        self.reader = ProtoReader(parsed, message)
        self._start(fetch_type, permissive, what)
