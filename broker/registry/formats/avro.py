"""Avro schemas: parsed and checked by fastavro, written in one canonical JSON form.

The canonical form is what Avro's Java Schema.toString writes, which is what Confluent's
registry stores and compares: no whitespace, the attributes of each kind of schema in
Avro's order (type, name, namespace, doc, fields / symbols / size / items / values, then
default, order, other properties, aliases), and a primitive without properties as its
bare name ("int", not {"type": "int"}). Two texts that differ only in whitespace or in
the order of their attributes are one schema; anything else (a doc, a default) makes
another.

`AvroSchema.parsed` is fastavro's parsed schema (names fully qualified) and
`AvroSchema.named` every named type it and its references define, by full name: the
compatibility rules (compat/avro.py) and a decoder of framed records work from them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from broker.registry.formats import AVRO, InvalidSchema, Resolved, flatten

PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))

# Avro's order of each kind's own attributes; anything else follows as a property
_ORDER = {
    "record": ("type", "name", "namespace", "doc", "fields"),
    "error": ("type", "name", "namespace", "doc", "fields"),
    "enum": ("type", "name", "namespace", "doc", "symbols", "default"),
    "fixed": ("type", "name", "namespace", "doc", "size"),
    "array": ("type", "items"),
    "map": ("type", "values"),
}
_FIELD_ORDER = ("name", "type", "doc", "default", "order")
_LAST = ("aliases",)


class AvroSchema:
    schema_type = AVRO

    def __init__(self, raw: Any, parsed: Any, named: dict[str, Any], references: Sequence[Resolved]):
        self.raw = raw
        self.parsed = parsed
        self.named = named
        self.references = tuple(references)
        self._canonical = json.dumps(normalize(raw), separators=(",", ":"), ensure_ascii=False)

    @property
    def canonical(self) -> str:
        return self._canonical

    @property
    def text(self) -> str:
        return self._canonical

    def formatted(self, fmt: str) -> str:
        return self._canonical

    def name(self) -> str | None:
        """The full name of the top-level named type (a record's), None for others."""
        if isinstance(self.parsed, dict) and self.parsed.get("type") in ("record", "error", "enum", "fixed"):
            return str(self.parsed["name"])
        return None


def parse_avro(text: str, references: Sequence[Resolved] = ()) -> AvroSchema:
    import fastavro
    from fastavro.schema import SchemaParseException, UnknownType

    named: dict[str, Any] = {}
    try:
        for ref in flatten(references):
            if ref.schema_type != AVRO:
                raise InvalidSchema(f"Invalid schema: reference {ref.name} is a {ref.schema_type} schema")
            fastavro.parse_schema(_loads(ref.text, f"reference {ref.name}"), named_schemas=named)
        raw = _loads(text, "schema")
        parsed = fastavro.parse_schema(raw, named_schemas=named)
    except UnknownType as exc:
        raise InvalidSchema(f"Invalid schema: unknown type {exc.name!r}") from None
    except (SchemaParseException, ValueError, TypeError, KeyError, AttributeError) as exc:
        if isinstance(exc, InvalidSchema):
            raise
        raise InvalidSchema(f"Invalid schema: {exc}") from None
    if isinstance(parsed, dict):
        parsed = {k: v for k, v in parsed.items() if not k.startswith("__")}
    return AvroSchema(raw, parsed, dict(named), references)


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        # Avro's Java parser takes a bare name too ("string", or a named type): so does Confluent
        stripped = text.strip()
        if stripped and all(c.isalnum() or c in "._" for c in stripped):
            return stripped
        raise InvalidSchema(f"Invalid schema: the {what} is not JSON ({exc})") from None


def normalize(schema: Any) -> Any:
    """The schema with each object's attributes in Avro's order (see the module doc)."""
    if isinstance(schema, list):
        return [normalize(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if isinstance(kind, str) and kind in PRIMITIVES and len(schema) == 1:
        return kind
    if not isinstance(kind, str) or kind not in _ORDER:
        # {"type": <a union, another schema, a named type>, ...} or a primitive with properties
        out = {"type": normalize(kind)} if "type" in schema else {}
        out.update((k, v) for k, v in schema.items() if k not in ("type", "aliases"))
        return _with_aliases(out, schema)
    out = {}
    for key in _ORDER[kind]:
        if key in schema:
            value = schema[key]
            if key == "fields" and isinstance(value, list):
                value = [_field(f) for f in value]
            elif key in ("items", "values"):
                value = normalize(value)
            out[key] = value
    out.update((k, v) for k, v in schema.items() if k not in out and k not in _LAST)
    return _with_aliases(out, schema)


def _field(f: Any) -> Any:
    if not isinstance(f, dict):
        return f
    out = {}
    for key in _FIELD_ORDER:
        if key in f:
            out[key] = normalize(f[key]) if key == "type" else f[key]
    if out.get("order") == "ascending":
        del out["order"]
    out.update((k, v) for k, v in f.items() if k not in _FIELD_ORDER and k not in _LAST)
    return _with_aliases(out, f)


def _with_aliases(out: dict[str, Any], src: dict[str, Any]) -> dict[str, Any]:
    if "aliases" in src:
        out["aliases"] = src["aliases"]
    return out
