"""Avro schemas -> Spark types, Arrow column layouts and the native decoder's programs.

Per schema, once, in Python (a worker compiles each writer schema it meets once and keeps
the program): the reader schema gives the Spark type (as Spark's from_avro maps Avro:
SchemaConverters.toSqlType) and a layout of Arrow columns; each writer schema id gives a
program, the writer schema resolved against the reader schema as the Avro
specification's "Schema Resolution" says:

    records     fields matched by name (or a reader field's alias); a writer field the
                reader lacks is skipped; a reader field the writer lacks takes its default
                (encoded once, decoded like a record's bytes); none: the id cannot be read
    promotions  int -> long, float, double; long -> float, double; float -> double;
                string <-> bytes
    enums       a writer symbol the reader lacks: the reader's default symbol, else an error
    unions      a writer union: each branch resolved on its own (a branch the reader cannot
                take fails the records that use it); a reader [null, T]: T, nullable

Types (Spark's from_avro): record -> struct, [null, T] -> T nullable, enum -> string,
fixed -> binary, bytes -> binary, string (and uuid) -> string, array -> array, map ->
map<string, V>, date -> date, timestamp-millis/micros -> timestamp,
local-timestamp-millis/micros -> timestamp_ntz, decimal (bytes or fixed) -> decimal(p, s).
Refused with a clear error: unions of two or more non-null types, null alone, recursive
records, decimals of precision above 38.

The native side (broker._native.avro) runs the programs; nothing here runs per record.
"""

from __future__ import annotations

import json
import struct
from array import array
from dataclasses import dataclass, field
from typing import Any

from broker._native import avro as _n


class AvroSchemaError(ValueError):
    """A reader schema Spark cannot take, or a writer schema that cannot be resolved against it."""


PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
NAMED = ("record", "error", "enum", "fixed")


def _resolve(t: Any, named: dict[str, Any]) -> Any:
    """A type with a named-type reference replaced by its definition, a bare primitive as
    {"type": name}."""
    if isinstance(t, str):
        if t in PRIMITIVES:
            return {"type": t}
        if t in named:
            return named[t]
        raise AvroSchemaError(f"unknown Avro type {t!r}")
    if isinstance(t, list):
        return t
    if isinstance(t.get("type"), (dict, list)) or (isinstance(t.get("type"), str) and t["type"] in named):
        return _resolve(t["type"], named)
    return t


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


# ---------------------------------------------------------------- the reader side


@dataclass
class RNode:
    """A reader type: its Avro kind (after [null, T] is unwrapped), its Arrow column."""

    kind: str  # boolean int long float double bytes string fixed enum record array map
    logical: str | None
    nullable: bool
    col: int
    schema: Any
    kids: list[RNode] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # record: field names
    aliases: list[list[str]] = field(default_factory=list)
    defaults: list[Any] = field(default_factory=list)  # record: (has, value) per field
    field_schemas: list[Any] = field(default_factory=list)


_NO_DEFAULT = object()


class Reader:
    """The reader schema, as Spark columns: `spark_type`, `layout` (for the decoder),
    `root` (the tree the programs are compiled against)."""

    def __init__(self, parsed: Any, named: dict[str, Any]):
        self.named = named
        self.layout: list[list[int]] = []
        self.root = self._node(parsed, nullable=True, path=())
        self.spark_type = self._spark(self.root)

    def _new_col(self) -> int:
        self.layout.append([0, 0, 0, 0])
        return len(self.layout) - 1

    def _node(self, t: Any, nullable: bool, path: tuple[str, ...], col: int | None = None) -> RNode:
        t = _resolve(t, self.named)
        if isinstance(t, list):
            branches = [_resolve(b, self.named) for b in t]
            others = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
            if len(others) != 1:
                raise AvroSchemaError(
                    "unions of more than one non-null type (" + ", ".join(_describe(b) for b in others) + ") "
                    'are not supported by the kbroker source; use ["null", T]'
                    if others
                    else "a union of only null cannot be a Spark column"
                )
            return self._node(others[0], True, path, col)
        kind = t["type"]
        if kind == "null":
            raise AvroSchemaError("the null type alone cannot be a Spark column")
        if kind == "error":
            kind = "record"
        logical = t.get("logicalType")
        if col is None:
            col = self._new_col()
        node = RNode(kind, logical, nullable, col, t)
        if kind == "record":
            name = t["name"]
            if name in path:
                raise AvroSchemaError(f"the record {name!r} is recursive, which Spark cannot represent (as from_avro)")
            fields = t["fields"]
            kid0 = len(self.layout)
            for _ in fields:
                self._new_col()
            self.layout[col] = [_n.K_STRUCT, kid0, len(fields), 0]
            for i, f in enumerate(fields):
                node.kids.append(self._node(f["type"], False, path + (name,), kid0 + i))
                node.names.append(f["name"])
                node.aliases.append(list(f.get("aliases") or ()))
                node.defaults.append(f.get("default", _NO_DEFAULT))
                node.field_schemas.append(f["type"])
            return node
        if kind in ("array", "map"):
            kid0 = len(self.layout)
            if kind == "map":
                self._new_col()
                self.layout[kid0] = [_n.K_BIN, 0, 0, 0]
            item_col = self._new_col()
            self.layout[col] = [_n.K_LIST if kind == "array" else _n.K_MAP, kid0, 2 if kind == "map" else 1, 0]
            node.kids.append(self._node(t["items" if kind == "array" else "values"], False, path, item_col))
            return node
        if logical == "decimal" and kind in ("bytes", "fixed"):
            precision, scale = int(t.get("precision", 0)), int(t.get("scale", 0))
            if not 1 <= precision <= 38 or not 0 <= scale <= precision:
                raise AvroSchemaError(
                    f"decimal({precision}, {scale}) does not fit Spark's decimals (precision 1..38, 0 <= scale <= precision)"
                )
            node.kind = "decimal"
            self.layout[col] = [_n.K_DEC, 0, 0, precision]
            return node
        kinds = {
            "boolean": _n.K_BOOL,
            "int": _n.K_I32,
            "long": _n.K_I64,
            "float": _n.K_F32,
            "double": _n.K_F64,
            "bytes": _n.K_BIN,
            "string": _n.K_BIN,
            "fixed": _n.K_BIN,
            "enum": _n.K_BIN,
        }
        if kind not in kinds:
            raise AvroSchemaError(f"unknown Avro type {kind!r}")
        self.layout[col] = [kinds[kind], 0, 0, 0]
        return node

    def _spark(self, n: RNode):
        from pyspark.sql import types as T

        if n.kind == "record":
            return T.StructType(
                [T.StructField(name, self._spark(k), k.nullable) for name, k in zip(n.names, n.kids, strict=True)]
            )
        if n.kind == "array":
            return T.ArrayType(self._spark(n.kids[0]), n.kids[0].nullable)
        if n.kind == "map":
            return T.MapType(T.StringType(), self._spark(n.kids[0]), n.kids[0].nullable)
        if n.kind == "decimal":
            return T.DecimalType(int(n.schema["precision"]), int(n.schema.get("scale", 0)))
        if n.kind == "int":
            return T.DateType() if n.logical == "date" else T.IntegerType()
        if n.kind == "long":
            if n.logical in ("timestamp-millis", "timestamp-micros"):
                return T.TimestampType()
            if n.logical in ("local-timestamp-millis", "local-timestamp-micros"):
                return T.TimestampNTZType()
            return T.LongType()
        return {
            "boolean": T.BooleanType(),
            "float": T.FloatType(),
            "double": T.DoubleType(),
            "bytes": T.BinaryType(),
            "fixed": T.BinaryType(),
            "string": T.StringType(),
            "enum": T.StringType(),
        }[n.kind]


def _describe(t: Any) -> str:
    if isinstance(t, dict):
        return str(t.get("name") or t.get("type"))
    return str(t)


# ---------------------------------------------------------------- the writer side: programs


class _Compiler:
    def __init__(self, reader: Reader, named: dict[str, Any]):
        self.reader = reader
        self.named = named  # the writer's named types
        self.ops: list[list[int]] = []
        self.kids: list[int] = []
        self.blob = bytearray()
        self._skips: dict[str, int] = {}

    def op(self, code: int, col: int = -1, a: int = 0, b: int = 0, c: int = 0, d: int = 0) -> int:
        self.ops.append([code, col, a, b, c, d])
        return len(self.ops) - 1

    def kid_list(self, items: list[int]) -> int:
        start = len(self.kids)
        self.kids.extend(items)
        return start

    # -- skipping a writer value the reader does not read
    def skip(self, w: Any) -> int:
        w = _resolve(w, self.named)
        if isinstance(w, list):
            i = self.op(_n.OP_SKIP_UNION)
            branches = [self.skip(b) for b in w]
            self.ops[i][2], self.ops[i][3] = self.kid_list(branches), len(branches)
            return i
        kind = w["type"]
        if kind in ("record", "error"):
            name = w["name"]
            if name in self._skips:
                return self._skips[name]
            i = self._skips[name] = self.op(_n.OP_SKIP_RECORD)
            fields = [self.skip(f["type"]) for f in w["fields"]]
            self.ops[i][2], self.ops[i][3] = self.kid_list(fields), len(fields)
            return i
        if kind in ("array", "map"):
            i = self.op(_n.OP_SKIP_ARRAY if kind == "array" else _n.OP_SKIP_MAP)
            self.ops[i][2] = self.skip(w["items" if kind == "array" else "values"])
            return i
        simple = {
            "null": (_n.OP_SKIP_NULL, 0),
            "boolean": (_n.OP_SKIP_BOOL, 0),
            "int": (_n.OP_SKIP_VARINT, 0),
            "long": (_n.OP_SKIP_VARINT, 0),
            "enum": (_n.OP_SKIP_VARINT, 0),
            "float": (_n.OP_SKIP_FIXED, 4),
            "double": (_n.OP_SKIP_FIXED, 8),
            "bytes": (_n.OP_SKIP_BYTES, 0),
            "string": (_n.OP_SKIP_BYTES, 0),
        }
        if kind == "fixed":
            return self.op(_n.OP_SKIP_FIXED, a=int(w["size"]))
        code, a = simple[kind]
        return self.op(code, a=a)

    # -- reading a writer value into a reader column
    def read(self, w: Any, r: RNode, where: str) -> int:
        w = _resolve(w, self.named)
        if isinstance(w, list):
            i = self.op(_n.OP_UNION)
            branches = []
            for b in w:
                try:
                    branches.append(self.read(b, r, where))
                except AvroSchemaError:
                    # a branch the reader cannot take: the records that use it fail
                    branches.append(self.op(_n.OP_ERROR, a=_n.R_BAD_BRANCH))
            self.ops[i][2], self.ops[i][3] = self.kid_list(branches), len(branches)
            return i
        wk = w["type"]
        if wk == "error":
            wk = "record"
        if wk == "null":
            if not r.nullable:
                raise AvroSchemaError(f"{where}: the writer's null cannot be read as the reader's non-null {r.kind}")
            return self.op(_n.OP_NULL, r.col)
        rk, col = r.kind, r.col
        if rk == "record" and wk == "record":
            if _short(w["name"]) != _short(r.schema["name"]) and _short(w["name"]) not in map(
                _short, r.schema.get("aliases") or ()
            ):
                raise AvroSchemaError(
                    f"{where}: the writer's record {w['name']!r} is not the reader's {r.schema['name']!r}"
                )
            by_name: dict[str, int] = {}
            for j, (name, aliases) in enumerate(zip(r.names, r.aliases, strict=True)):
                by_name.setdefault(name, j)
                for a in aliases:
                    by_name.setdefault(a, j)
            i = self.op(_n.OP_RECORD, col)
            fields, seen = [], set()
            for f in w["fields"]:
                j = by_name.get(f["name"], -1)
                if j < 0 or j in seen:
                    fields.append(self.skip(f["type"]))
                else:
                    seen.add(j)
                    fields.append(self.read(f["type"], r.kids[j], f"{where}.{r.names[j]}"))
            for j, name in enumerate(r.names):
                if j in seen:
                    continue
                default = r.defaults[j]
                if default is _NO_DEFAULT:
                    raise AvroSchemaError(
                        f"{where}.{name}: the reader's field has no default and the writer's record has no such field"
                    )
                data = encode_default(r.field_schemas[j], default, self.reader.named)
                sub = _Compiler(self.reader, self.reader.named)
                sub.ops, sub.kids, sub.blob = self.ops, self.kids, self.blob  # one program
                inner = sub.read(r.field_schemas[j], r.kids[j], f"{where}.{name} (default)")
                start = len(self.blob)
                self.blob += data
                fields.append(self.op(_n.OP_DEFAULT, -1, inner, start, len(data)))
            self.ops[i][2], self.ops[i][3] = self.kid_list(fields), len(fields)
            return i
        if rk in ("array", "map") and wk == rk:
            i = self.op(_n.OP_ARRAY if rk == "array" else _n.OP_MAP, col)
            self.ops[i][2] = self.read(w["items" if rk == "array" else "values"], r.kids[0], f"{where}[]")
            return i
        if rk == "enum" and wk == "enum":
            rsyms = r.schema["symbols"]
            rdefault = r.schema.get("default")
            pairs = []
            for s in w["symbols"]:
                sym = s if s in rsyms else rdefault
                if sym is None:
                    pairs += [-1, 0]
                else:
                    enc = sym.encode()
                    pairs += [len(self.blob), len(enc)]
                    self.blob += enc
            return self.op(_n.OP_ENUM, col, self.kid_list(pairs), len(w["symbols"]))
        if rk == "decimal":
            if w.get("logicalType") != "decimal" or wk not in ("bytes", "fixed"):
                raise AvroSchemaError(f"{where}: the writer's {wk} is not a decimal")
            if int(w.get("scale", 0)) != int(r.schema.get("scale", 0)):
                raise AvroSchemaError(
                    f"{where}: the writer's decimal scale {w.get('scale', 0)} is not the reader's {r.schema.get('scale', 0)}"
                )
            if wk == "bytes":
                return self.op(_n.OP_DEC_BYTES, col)
            return self.op(_n.OP_DEC_FIXED, col, int(w["size"]))
        if rk == "fixed" and wk == "fixed":
            if int(w["size"]) != int(r.schema["size"]):
                raise AvroSchemaError(
                    f"{where}: the writer's fixed of {w['size']} bytes is not the reader's {r.schema['size']}"
                )
            return self.op(_n.OP_FIXED_BIN, col, int(w["size"]))
        if rk == "long" and r.logical in ("timestamp-millis", "local-timestamp-millis") and wk == "long":
            return self.op(_n.OP_LONG_MS_US, col)
        table = {
            ("boolean", "boolean"): _n.OP_BOOL,
            ("int", "int"): _n.OP_INT_I32,
            ("int", "long"): _n.OP_INT_I64,
            ("long", "long"): _n.OP_LONG_I64,
            ("int", "float"): _n.OP_INT_F32,
            ("long", "float"): _n.OP_LONG_F32,
            ("int", "double"): _n.OP_INT_F64,
            ("long", "double"): _n.OP_LONG_F64,
            ("float", "float"): _n.OP_FLOAT_F32,
            ("float", "double"): _n.OP_FLOAT_F64,
            ("double", "double"): _n.OP_DOUBLE_F64,
        }
        if (wk, rk) in table:
            return self.op(table[(wk, rk)], col)
        if wk in ("string", "bytes") and rk in ("string", "bytes"):
            return self.op(_n.OP_BYTES_BIN, col, 1 if rk == "string" else 0)
        raise AvroSchemaError(f"{where}: the writer's {_describe(w)} cannot be read as the reader's {rk}")


def compile_program(schema_id: int, writer: Any, writer_named: dict[str, Any], reader: Reader):
    """(native Program, None), or (an always-failing Program, why) when the writer schema
    cannot be resolved against the reader's: its records fail as undecodable ones do."""
    c = _Compiler(reader, writer_named)
    try:
        root = c.read(writer, reader.root, "value")
        why = None
    except AvroSchemaError as exc:
        c = _Compiler(reader, writer_named)
        root = c.op(_n.OP_ERROR, a=_n.R_BAD_BRANCH)
        why = str(exc)
    ops = array("i", [v for o in c.ops for v in o]).tobytes()
    return _n.Program(schema_id, ops, array("i", c.kids).tobytes(), bytes(c.blob), root, len(reader.layout)), why


# ---------------------------------------------------------------- defaults


def encode_default(t: Any, value: Any, named: dict[str, Any]) -> bytes:
    """A field default (JSON, as the Avro specification writes it) in Avro's binary encoding."""
    out = bytearray()
    _enc(t, value, named, out)
    return bytes(out)


def _zigzag(n: int, out: bytearray) -> None:
    v = (n << 1) ^ (n >> 63)
    v &= (1 << 64) - 1
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _enc(t: Any, v: Any, named: dict[str, Any], out: bytearray) -> None:
    t = _resolve(t, named)
    if isinstance(t, list):
        out.append(0)  # a union's default is of its first branch
        _enc(t[0], v, named, out)
        return
    k = t["type"]
    try:
        if k == "null":
            return
        if k == "boolean":
            out.append(1 if v else 0)
        elif k in ("int", "long"):
            _zigzag(int(v), out)
        elif k == "float":
            out += struct.pack("<f", float(v))
        elif k == "double":
            out += struct.pack("<d", float(v))
        elif k in ("bytes", "string"):
            data = v.encode("latin-1") if k == "bytes" else v.encode()
            _zigzag(len(data), out)
            out += data
        elif k == "fixed":
            out += v.encode("latin-1")
        elif k == "enum":
            _zigzag(t["symbols"].index(v), out)
        elif k == "array":
            if v:
                _zigzag(len(v), out)
                for item in v:
                    _enc(t["items"], item, named, out)
            out.append(0)
        elif k == "map":
            if v:
                _zigzag(len(v), out)
                for key, item in v.items():
                    data = key.encode()
                    _zigzag(len(data), out)
                    out += data
                    _enc(t["values"], item, named, out)
            out.append(0)
        elif k in ("record", "error"):
            for f in t["fields"]:
                _enc(f["type"], v.get(f["name"], f.get("default")), named, out)
        else:
            raise AvroSchemaError(f"cannot encode a default of type {k!r}")
    except (AttributeError, TypeError, ValueError) as exc:
        if isinstance(exc, AvroSchemaError):
            raise
        raise AvroSchemaError(f"the default {json.dumps(v)} is not a {k}: {exc}") from None


# ---------------------------------------------------------------- decoding a column


class Decoder:
    """One column's reader schema and the programs of the writer ids met so far."""

    format_name = "Avro"

    def __init__(self, reader_text: str, reader_refs=(), *, fetch_writer, permissive: bool, what: str = "value"):
        from broker.registry.formats import InvalidSchema
        from broker.registry.formats.avro import parse_avro

        try:
            parsed = parse_avro(reader_text, reader_refs)
        except InvalidSchema as exc:
            raise AvroSchemaError(f"the reader schema is not valid Avro: {exc}") from None
        self.reader = Reader(parsed.parsed, parsed.named)
        self.layout = [tuple(c) for c in self.reader.layout]
        # id -> (parsed, named), None (an id the registry does not have) or why it cannot be read
        self.fetch_writer = fetch_writer
        self.permissive = permissive
        self.what = what
        self.programs: dict[int, Any] = {}
        self.why: dict[int, str] = {}
        self._arrow_type = None

    def arrow_type(self):
        if self._arrow_type is None:
            from pyspark.sql.pandas.types import to_arrow_schema
            from pyspark.sql.types import StructField, StructType

            self._arrow_type = (
                to_arrow_schema(StructType([StructField("v", self.reader.spark_type, True)]), timezone="UTC")
                .field("v")
                .type
            )
        return self._arrow_type

    def _learn(self, ids: list[int]) -> None:
        for sid in ids:
            if sid in self.programs or sid in self.why:
                continue
            writer = self.fetch_writer(sid)
            if writer is None or isinstance(writer, str):
                self.why[sid] = writer or f"schema id {sid} is not in the registry"
                continue
            prog, why = compile_program(sid, writer[0], writer[1], self.reader)
            self.programs[sid] = prog
            if why:
                self.why[sid] = f"writer schema id {sid} cannot be read with the reader schema: {why}"

    def decode(self, values, row_name=None):
        """A binary pyarrow array of framed values -> a pyarrow array of the reader type.
        row_name(i): how to name row i in an error (FAILFAST)."""
        self._learn(_n.scan_ids(values))
        cols, bad, reason, sid = _n.decode(values, self.layout, list(self.programs.values()), self.permissive)
        if bad >= 0:
            where = row_name(bad) if row_name else f"row {bad}"
            detail = self.why.get(sid) if sid in self.why else _n.REASONS.get(reason, f"reason {reason}")
            if reason == _n.R_UNKNOWN_ID and sid not in self.why:
                detail = f"schema id {sid} is not in the registry"
            raise AvroDecodeError(
                f"kbroker: the {self.what} of {where} does not decode as {self.format_name}: {detail} "
                f"(mode FAILFAST; with option mode=PERMISSIVE such records are read as null)"
            )
        return _assemble(cols, self.layout, 0, self.arrow_type())


class AvroDecodeError(RuntimeError):
    """A record that does not decode, in FAILFAST mode."""


def _assemble(cols, layout, ci: int, typ):
    import pyarrow as pa

    count, nulls, validity, data, offsets = cols[ci]
    kind, kid0, nkids, _ = layout[ci]
    vbuf = pa.py_buffer(validity) if validity is not None else None
    if kind == _n.K_STRUCT:
        children = [_assemble(cols, layout, kid0 + k, typ.field(k).type) for k in range(nkids)]
        return pa.Array.from_buffers(typ, count, [vbuf], null_count=nulls, children=children)
    if kind == _n.K_LIST:
        item = _assemble(cols, layout, kid0, typ.value_type)
        return pa.Array.from_buffers(typ, count, [vbuf, pa.py_buffer(offsets)], null_count=nulls, children=[item])
    if kind == _n.K_MAP:
        keys = _assemble(cols, layout, kid0, typ.key_type)
        items = _assemble(cols, layout, kid0 + 1, typ.item_type)
        entries = pa.StructArray.from_arrays([keys, items], fields=[typ.key_field, typ.item_field])
        return pa.Array.from_buffers(typ, count, [vbuf, pa.py_buffer(offsets)], null_count=nulls, children=[entries])
    if kind == _n.K_BIN:
        return pa.Array.from_buffers(typ, count, [vbuf, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)
    return pa.Array.from_buffers(typ, count, [vbuf, pa.py_buffer(data)], null_count=nulls)


class RegistryDecoder:
    """What the Protobuf and JSON Schema decoders share: the registry ids met so far, each
    checked once (an id the registry does not have, or of another type, fails its
    records), and the native decoding of broker.spark.avro.Decoder over their programs.
    A subclass sets `reader`, `layout`, `fetch_type`, `permissive` and `what`, and names
    its registry type (`schema_type`) and its option value (`option`)."""

    format_name = ""
    schema_type = ""
    option = ""
    reader: Any  # the format's reader schema, compiled: .layout, .program(id)

    def _start(self, fetch_type, permissive: bool, what: str) -> None:
        self.layout = [tuple(c) for c in self.reader.layout]
        self.fetch_type = fetch_type  # id -> schema type | None (unknown)
        self.permissive = permissive
        self.what = what
        self.programs: dict[int, Any] = {}
        self.why: dict[int, str] = {}
        self._arrow_type = None

    def _learn(self, ids: list[int]) -> None:
        for sid in ids:
            if sid in self.programs or sid in self.why:
                continue
            t = self.fetch_type(sid)
            if t is None:
                self.why[sid] = f"schema id {sid} is not in the registry"
            elif t != self.schema_type:
                self.why[sid] = (
                    f"schema id {sid} is a {t} schema, not {self.format_name} ({self.what}Format={self.option})"
                )
            else:
                self.programs[sid] = self.reader.program(sid)

    def arrow_type(self):
        return Decoder.arrow_type(self)

    def decode(self, values, row_name=None):
        return Decoder.decode(self, values, row_name)
