"""Compatibility of a new schema with the versions before it, as Confluent's registry
decides it (its CompatibilityChecker and each type's checker).

    problems, at = check(level, new, previous)  # ([], -1) when compatible; else what, and
                                                # the index in previous of the version refused

`level` is a compatibility level (BACKWARD, BACKWARD_TRANSITIVE, FORWARD,
FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE, NONE); `previous` the subject's versions
that are not deleted, oldest first. A non-transitive level checks the latest one only,
a transitive one every one. BACKWARD: the new schema can read what the old one wrote
(a consumer upgraded first); FORWARD: the old can read what the new one writes (the
producer upgraded first); FULL: both.

Each type's rules are its own module: avro.py (Avro's schema resolution, as Avro's
SchemaCompatibility applies it), protobuf.py and jsonschema.py (Confluent's SchemaDiff
of each: differences found, then refused unless in the compatible set). Schemas of
different types are never compatible.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE")
DEFAULT_LEVEL = "BACKWARD"


def backward(new: Any, old: Any, roles: tuple[str, str] = ("new", "old")) -> list[str]:
    """What keeps `new` from reading data written with `old` ([] when it can). `roles`
    name the two in the messages (a FORWARD check asks whether the old reads the new)."""
    if new.schema_type != old.schema_type:
        return ["Incompatible because of different schema type"]
    if new.schema_type == "AVRO":
        from broker.registry.compat.avro import reader_writer

        return reader_writer(new, old, roles)
    if new.schema_type == "PROTOBUF":
        from broker.registry.compat.protobuf import compare

        return compare(old, new, roles)
    from broker.registry.compat.jsonschema import compare as compare_json

    return compare_json(old, new, roles)


def check(level: str, new: Any, previous: Sequence[Any]) -> tuple[list[str], int]:
    if level == "NONE" or not previous:
        return [], -1
    first = 0 if level.endswith("_TRANSITIVE") else len(previous) - 1
    for i in range(len(previous) - 1, first - 1, -1):
        old = previous[i]
        problems: list[str] = []
        if level.startswith(("BACKWARD", "FULL")):
            problems.extend(backward(new, old))
        if level.startswith(("FORWARD", "FULL")):
            problems.extend(backward(old, new, ("old", "new")))
        if problems:
            return problems, i
    return [], -1
