"""The records of the `_schemas` topic, in the JSON of Confluent's registry
(its storage package: SchemaRegistryKey and the values), so that the topic replicates
like any other, survives failover and can be read by Confluent's tools.

Keys (compacted by them; the JSON key order is Confluent's):

    {"keytype":"SCHEMA","subject":S,"version":V,"magic":1}   a subject's version
    {"keytype":"CONFIG","subject":S,"magic":0}               a subject's compatibility
    {"keytype":"CONFIG","magic":0}                           the global compatibility
    {"keytype":"MODE","subject":S,"magic":0}                 a subject's mode (global: no subject)
    {"keytype":"DELETE_SUBJECT","subject":S,"magic":0}       a subject soft-deleted up to a version
    {"keytype":"CLEAR_SUBJECT","subject":S,"magic":0}        a subject's versions forgotten
    {"keytype":"NOOP","magic":0}                             no change (see below)

Values:

    SCHEMA          {"subject":S,"version":V,"id":N,"schemaType":"PROTOBUF","references":[
                     {"name":..,"subject":..,"version":..}],"schema":TEXT,"deleted":false}
                    (schemaType left out for AVRO, as Confluent's REST answers do)
    CONFIG          {"subject":S,"compatibilityLevel":"FULL"}
    MODE            {"subject":S,"mode":"READONLY"}
    DELETE_SUBJECT  {"subject":S,"version":V}
    CLEAR_SUBJECT   {"subject":S}
    (null)          a tombstone: a SCHEMA key's is a permanent deletion of that version;
                    CONFIG's and MODE's remove the setting

NOOP records are Confluent's way for a writer to learn that its reader has read
everything before a point; Confluent's readers skip them whatever their value. kbroker's
writer gives its NOOPs a value, {"maxId":N,"writer":{"broker":B,"epoch":E,"url":U}}:
the highest schema id ever given (so that ids stay unique after a permanently deleted
schema's record is compacted away: the last NOOP is never compacted) and where the
writer (the leader of `_schemas`' partition) takes writes, so the other brokers know
where to forward them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class CorruptRecord(ValueError):
    """A record of _schemas that is not one of the registry's (logged and skipped)."""


@dataclass(frozen=True)
class Reference:
    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class SchemaValue:
    subject: str
    version: int
    id: int
    schema_type: str
    references: tuple[Reference, ...]
    schema: str
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.to_json() for r in self.references]
        out["schema"] = self.schema
        out["deleted"] = self.deleted
        return out


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def schema_key(subject: str, version: int) -> bytes:
    return _dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def subject_key(keytype: str, subject: str | None) -> bytes:
    """CONFIG, MODE, DELETE_SUBJECT, CLEAR_SUBJECT keys (global CONFIG/MODE: subject None)."""
    if subject is None:
        return _dumps({"keytype": keytype, "magic": 0})
    return _dumps({"keytype": keytype, "subject": subject, "magic": 0})


NOOP_KEY = _dumps({"keytype": "NOOP", "magic": 0})


def schema_value(v: SchemaValue) -> bytes:
    return _dumps(v.to_json())


def config_value(subject: str | None, level: str) -> bytes:
    out: dict[str, Any] = {} if subject is None else {"subject": subject}
    out["compatibilityLevel"] = level
    return _dumps(out)


def mode_value(subject: str | None, mode: str) -> bytes:
    out: dict[str, Any] = {} if subject is None else {"subject": subject}
    out["mode"] = mode
    return _dumps(out)


def delete_subject_value(subject: str, version: int) -> bytes:
    return _dumps({"subject": subject, "version": version})


def clear_subject_value(subject: str) -> bytes:
    return _dumps({"subject": subject})


def noop_value(max_id: int, broker: int, epoch: int, url: str) -> bytes:
    return _dumps({"maxId": max_id, "writer": {"broker": broker, "epoch": epoch, "url": url}})


# ---------------------------------------------------------------------------- decoding


def decode_key(raw: bytes) -> dict[str, Any]:
    try:
        key = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptRecord(f"the key is not JSON ({exc})") from None
    if not isinstance(key, dict) or key.get("keytype") not in (
        "SCHEMA",
        "CONFIG",
        "MODE",
        "NOOP",
        "DELETE_SUBJECT",
        "CLEAR_SUBJECT",
        "CONTEXT",
        "ASSOC",
    ):
        raise CorruptRecord(f"unknown key {raw[:200]!r}")
    if key["keytype"] == "SCHEMA":
        if not isinstance(key.get("subject"), str) or not _is_int(key.get("version")):
            raise CorruptRecord(f"a SCHEMA key without subject and version: {raw[:200]!r}")
        if key.get("magic", 1) != 1:
            raise CorruptRecord(f"a SCHEMA key of magic {key.get('magic')!r}")
    elif key["keytype"] in ("DELETE_SUBJECT", "CLEAR_SUBJECT") and not isinstance(key.get("subject"), str):
        raise CorruptRecord(f"a {key['keytype']} key without a subject: {raw[:200]!r}")
    elif "subject" in key and key["subject"] is not None and not isinstance(key["subject"], str):
        raise CorruptRecord(f"a key whose subject is not a string: {raw[:200]!r}")
    return key


def decode_value(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptRecord(f"the value is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise CorruptRecord("the value is not a JSON object")
    return value


def decode_schema_value(key: dict[str, Any], raw: bytes) -> SchemaValue:
    v = decode_value(raw)
    try:
        refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in v.get("references") or ())
        out = SchemaValue(
            subject=str(v.get("subject", key["subject"])),
            version=int(v.get("version", key["version"])),
            id=int(v["id"]),
            schema_type=str(v.get("schemaType") or "AVRO"),
            references=refs,
            schema=v["schema"],
            deleted=bool(v.get("deleted", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptRecord(f"a SCHEMA value without {exc}") from None
    if not isinstance(out.schema, str) or out.id < 0 or out.version < 1:
        raise CorruptRecord("a SCHEMA value with a bad schema, id or version")
    return out


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
