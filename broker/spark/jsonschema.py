"""JSON Schemas -> Spark types, Arrow column layouts and the native decoder's program
(valueFormat=json-schema / keyFormat=json-schema).

A JSON record is decoded with the reader schema alone (properties by name: one the reader
does not know is skipped, one the record lacks is null), so every version of the schema
reads with the reader's. Types as Spark's from_json takes them from a schema:
object with properties -> struct (in the order of `properties`), object with only
`additionalProperties` (a schema) -> map<string, V>, array -> array of `items`, string ->
string, integer -> long, number -> double, boolean -> boolean; ["T", "null"] -> T; a local
"$ref" ("#/definitions/X", "#/$defs/X") is followed. Every column is nullable (a JSON null
is a null). Refused when the query starts: other unions (anyOf, oneOf, several types), a
schema without a type the decoder can tell, objects of more than 64 properties, recursive
references. A record whose JSON has another type than the schema's (a string for an
integer, a fraction for an integer) is undecodable: `mode` applies.
"""

from __future__ import annotations

from array import array
from typing import Any

from broker._native import avro as _n
from broker.spark.avro import AvroSchemaError as SchemaError, RegistryDecoder


class JsonReader:
    def __init__(self, document: Any):
        self.document = document
        self.layout: list[list[int]] = [[0, 0, 0, 0]]
        self.ops: list[list[int]] = []
        self.kids: list[int] = []
        self.blob = bytearray()
        self.root, self.spark_type = self._node(document, 0, (), "value")
        if self.ops[self.root][0] not in (_n.OP_JS_OBJECT, _n.OP_JS_ARRAY, _n.OP_JS_MAP):
            raise SchemaError("the JSON schema's top level must be an object or an array")

    def _op(self, *v: int) -> int:
        self.ops.append(list(v) + [0] * (6 - len(v)))
        return len(self.ops) - 1

    def _new_cols(self, n: int) -> int:
        self.layout.extend([0, 0, 0, 0] for _ in range(n))
        return len(self.layout) - n

    def _deref(self, s: Any, path: tuple[str, ...], where: str):
        while isinstance(s, dict) and "$ref" in s:
            ref = s["$ref"]
            if ref in path:
                raise SchemaError(f"{where}: the reference {ref!r} is recursive, which Spark cannot represent")
            path = path + (ref,)
            parts = ref.split("/")
            if len(parts) != 3 or parts[0] != "#" or parts[1] not in ("definitions", "$defs"):
                raise SchemaError(
                    f"{where}: only local references (#/definitions/X, #/$defs/X) are followed, not {ref!r}"
                )
            s = (self.document.get(parts[1]) or {}).get(parts[2])
            if s is None:
                raise SchemaError(f"{where}: the reference {ref!r} names nothing")
        return s, path

    def _node(self, s: Any, col: int, path: tuple[str, ...], where: str):
        from pyspark.sql import types as T

        s, path = self._deref(s, path, where)
        if not isinstance(s, dict):
            raise SchemaError(f"{where}: a schema of {s!r} cannot be a Spark column")
        if any(k in s for k in ("anyOf", "oneOf", "allOf")):
            raise SchemaError(f"{where}: anyOf, oneOf and allOf are not supported by the kbroker source")
        t = s.get("type")
        if isinstance(t, list):
            others = [x for x in t if x != "null"]
            if len(others) != 1:
                raise SchemaError(f'{where}: a union of the types {t} is not supported; use ["T", "null"]')
            t = others[0]
        if t is None:
            t = "object" if "properties" in s else ("array" if "items" in s else None)
        if t == "object":
            props = s.get("properties")
            extra = s.get("additionalProperties")
            if not props and isinstance(extra, dict):
                k0 = self._new_cols(2)
                self.layout[col] = [_n.K_MAP, k0, 2, 0]
                self.layout[k0] = [_n.K_BIN, 0, 0, 0]
                vop, vtype = self._node(extra, k0 + 1, path, f"{where}{{}}")
                return self._op(_n.OP_JS_MAP, col, vop), T.MapType(T.StringType(), vtype, True)
            if not props:
                raise SchemaError(f"{where}: an object without properties (nor an additionalProperties schema)")
            if len(props) > 64:
                raise SchemaError(f"{where}: objects of more than 64 properties are not supported")
            kid0 = self._new_cols(len(props))
            self.layout[col] = [_n.K_STRUCT, kid0, len(props), 0]
            entries, fields = [], []
            for i, (name, sub) in enumerate(props.items()):
                op, stype = self._node(sub, kid0 + i, path, f"{where}.{name}")
                enc = name.encode()
                entries += [len(self.blob), len(enc), op]
                self.blob += enc
                fields.append(T.StructField(name, stype, True))
            start = len(self.kids)
            self.kids += entries
            return self._op(_n.OP_JS_OBJECT, col, start, len(props)), T.StructType(fields)
        if t == "array":
            items = s.get("items")
            if not isinstance(items, dict):
                raise SchemaError(f"{where}: an array needs one `items` schema")
            item = self._new_cols(1)
            self.layout[col] = [_n.K_LIST, item, 1, 0]
            iop, itype = self._node(items, item, path, f"{where}[]")
            return self._op(_n.OP_JS_ARRAY, col, iop), T.ArrayType(itype, True)
        simple = {
            "string": (_n.OP_JS_STRING, _n.K_BIN, T.StringType()),
            "integer": (_n.OP_JS_INT, _n.K_I64, T.LongType()),
            "number": (_n.OP_JS_NUMBER, _n.K_F64, T.DoubleType()),
            "boolean": (_n.OP_JS_BOOL, _n.K_BOOL, T.BooleanType()),
        }
        if t not in simple:
            raise SchemaError(f"{where}: a schema without a type the kbroker source can tell ({t!r})")
        code, kind, stype = simple[t]
        self.layout[col] = [kind, 0, 0, 0]
        return self._op(code, col), stype

    def program(self, schema_id: int):
        ops = array("i", [v for o in self.ops for v in o]).tobytes()
        return _n.Program(
            schema_id, ops, array("i", self.kids).tobytes(), bytes(self.blob), self.root, len(self.layout), 2
        )


class JsonDecoder(RegistryDecoder):
    """One column's reader schema; the registry ids met so far (an id the registry does
    not have, or of another type, fails its records)."""

    format_name = "JSON"
    schema_type = "JSON"
    option = "json-schema"

    def __init__(self, reader_text: str, reader_refs=(), *, fetch_type, permissive: bool, what="value"):
        from broker.registry.formats import InvalidSchema
        from broker.registry.formats.jsonschema import parse_json

        try:
            parsed = parse_json(reader_text, reader_refs)
        except InvalidSchema as exc:
            raise SchemaError(f"the reader schema is not a valid JSON Schema: {exc}") from None
        self.reader = JsonReader(parsed.document)
        self._start(fetch_type, permissive, what)
