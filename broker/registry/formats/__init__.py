"""Schemas of the three types a Confluent schema registry stores, parsed and put in the
form their identity is decided by.

    parsed = parse("AVRO", text, references)      # InvalidSchema on bad input
    parsed.canonical        # the text identical schemas share (what ids are decided by)
    parsed.text             # the text stored in _schemas and answered by GET
    parsed.formatted(fmt)   # GET ...?format=serialized (Protobuf: base64 FileDescriptorProto)

`references` are the schemas a schema names (Confluent's schema references), already
resolved by the caller: a list of `Resolved(name, schema_type, text, references)` in an
order where each comes after those it references. What a reference's `name` means is the
type's: an Avro named type's full name is found through it (the name itself is free), a
Protobuf import's file name, a JSON Schema `$ref`'s URI.

This module and its three submodules know nothing of the registry, the broker or HTTP:
they are the parsing the registry's compatibility checks (broker/registry/compat/) and a
reader of registry-framed records (the Spark source) share. Parsing is done by the
libraries that own each format: fastavro (Avro), protoc itself as grpcio-tools bundles it
(Protobuf .proto text, parsed in-process; see protobuf.py), jsonschema (JSON Schema's
meta-schemas).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

AVRO = "AVRO"
PROTOBUF = "PROTOBUF"
JSON = "JSON"
SCHEMA_TYPES = (JSON, PROTOBUF, AVRO)  # the order Confluent's GET /schemas/types answers


class InvalidSchema(ValueError):
    """A schema its type's parser refuses (the registry answers 422, error code 42201)."""


@dataclass(frozen=True)
class Resolved:
    """A referenced schema, resolved: the name it is referenced by, its type and text, and
    its own references (resolved too)."""

    name: str
    schema_type: str
    text: str
    references: tuple[Resolved, ...] = field(default=())


class ParsedSchema(Protocol):
    schema_type: str

    @property
    def canonical(self) -> str: ...

    @property
    def text(self) -> str: ...

    def formatted(self, fmt: str) -> str: ...


def parse(schema_type: str, text: str, references: Sequence[Resolved] = ()) -> Any:
    """The schema parsed by its type's library; InvalidSchema with the parser's words."""
    if not isinstance(text, str):
        raise InvalidSchema("Invalid schema: the schema is not a string")
    if schema_type == AVRO:
        from broker.registry.formats.avro import parse_avro

        return parse_avro(text, references)
    if schema_type == PROTOBUF:
        from broker.registry.formats.protobuf import parse_protobuf

        return parse_protobuf(text, references)
    if schema_type == JSON:
        from broker.registry.formats.jsonschema import parse_json

        return parse_json(text, references)
    raise InvalidSchema(f"Invalid schema type {schema_type}")


def flatten(references: Sequence[Resolved]) -> list[Resolved]:
    """Every schema reachable through `references`, each once (by name), those a schema
    references before it."""
    out: dict[str, Resolved] = {}

    def visit(ref: Resolved) -> None:
        if ref.name in out:
            return
        for sub in ref.references:
            visit(sub)
        out[ref.name] = ref

    for ref in references:
        visit(ref)
    return list(out.values())
