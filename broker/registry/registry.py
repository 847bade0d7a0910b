"""What the registry answers and decides, over the view (state.py): Confluent's
KafkaSchemaRegistry, without its storage.

Reads are answered from the view of this broker. A change (register, delete, config,
mode) is planned here — checked against the view, turned into `_schemas` records — and
carried out by the writer (writer.py), which runs `plan_*` on the broker that leads
`_schemas`' partition, under its lock, with the view caught up, and applies nothing
itself: the records come back through the view like any others.

Registration, as Confluent's:
- the schema is parsed with its references resolved (each must name an existing
  subject version); a schema already registered under the subject (not deleted, same
  canonical text and references) is answered with its id and version, nothing written;
- else it gets the id it has anywhere else in the registry (a schema has one id, whatever
  the subject), or the next one above every id ever given (`max_id`);
- it must be compatible with the subject's versions as the subject's compatibility level
  (else the global one, else BACKWARD) asks; its version is one above the subject's
  highest, deleted versions included.
"""

from __future__ import annotations

import collections
import collections.abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from broker.registry import errors as E, records as R
from broker.registry.compat import DEFAULT_LEVEL, LEVELS, check
from broker.registry.formats import SCHEMA_TYPES, InvalidSchema, Resolved, parse
from broker.registry.state import MODES, RegistryState, Version

DEFAULT_MODE = "READWRITE"
MAX_VERSION = 2**31 - 1
PARSE_CACHE = 1000


@dataclass(frozen=True)
class SchemaRequest:
    """The body of a register, lookup or compatibility request."""

    schema: str
    schema_type: str
    references: tuple[R.Reference, ...]
    id: int | None = None
    version: int | None = None

    @classmethod
    def from_json(cls, body: Any) -> SchemaRequest:
        if not isinstance(body, dict):
            raise E.invalid_schema("Invalid schema: the request body is not a JSON object")
        schema = body.get("schema")
        if not isinstance(schema, str) or not schema.strip():
            raise E.invalid_schema("Empty schema")
        schema_type = body.get("schemaType") or "AVRO"
        if not isinstance(schema_type, str) or schema_type.upper() not in SCHEMA_TYPES:
            raise E.invalid_schema(f"Invalid schema type {schema_type}")
        refs = []
        for r in body.get("references") or ():
            try:
                refs.append(R.Reference(str(r["name"]), str(r["subject"]), int(r["version"])))
            except (KeyError, TypeError, ValueError):
                raise E.invalid_schema(
                    f"Invalid schema reference {r!r}: name, subject and version are needed"
                ) from None
        ident, version = body.get("id"), body.get("version")
        if ident is not None and (not isinstance(ident, int) or isinstance(ident, bool)):
            raise E.invalid_schema("Invalid schema: id is not an integer")
        if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
            raise E.invalid_schema("Invalid schema: version is not an integer")
        return cls(
            schema,
            schema_type.upper(),
            tuple(refs),
            ident if ident is not None and ident >= 0 else None,
            version if version is not None and version > 0 else None,
        )


def parse_version(text: str) -> int:
    """A version path segment: 1..2^31-1, or latest (-1)."""
    if text == "latest" or text == "-1":
        return -1
    try:
        v = int(text)
    except ValueError:
        raise E.invalid_version(text) from None
    if v < 1 or v > MAX_VERSION:
        raise E.invalid_version(text)
    return v


class SchemaRegistry:
    def __init__(self, state: RegistryState):
        self.state = state
        self._parsed: collections.OrderedDict[Any, Any] = collections.OrderedDict()

    # ------------------------------------------------------------------ parsing

    def resolve(
        self, refs: Sequence[R.Reference], seen: frozenset[tuple[str, int]] = frozenset()
    ) -> tuple[Resolved, ...]:
        out = []
        for r in refs:
            if (r.subject, r.version) in seen:
                raise E.invalid_schema(f"Invalid schema: circular reference to {r.subject} version {r.version}")
            v = self._version(r.subject, r.version, deleted=True)
            if v is None:
                raise E.invalid_schema(
                    f"Invalid schema: reference {r.name} names subject {r.subject!r} version "
                    f"{r.version}, which does not exist"
                )
            s = self.state.schemas[v.id]
            out.append(
                Resolved(r.name, s.schema_type, s.text, self.resolve(s.references, seen | {(r.subject, r.version)}))
            )
        return tuple(out)

    def parse(self, schema_type: str, text: str, refs: Sequence[R.Reference]) -> Any:
        key = (schema_type, text, tuple(refs))
        got = self._parsed.get(key)
        if got is not None:
            self._parsed.move_to_end(key)
            return got
        try:
            parsed = parse(schema_type, text, self.resolve(refs))
            if schema_type == "JSON":
                from broker.registry.compat.jsonschema import check_refs

                try:
                    check_refs(parsed)
                except ValueError as exc:
                    raise InvalidSchema(f"Invalid schema: {exc}") from None
        except InvalidSchema as exc:
            raise E.invalid_schema(str(exc)) from None
        self._parsed[key] = parsed
        if len(self._parsed) > PARSE_CACHE:
            self._parsed.popitem(last=False)
        return parsed

    def parse_stored(self, schema_id: int) -> Any:
        s = self.state.schemas[schema_id]
        return self.parse(s.schema_type, s.text, s.references)

    # ------------------------------------------------------------------ reads

    def _version(self, subject: str, version: int, deleted: bool = False) -> Version | None:
        vs = self.state.versions(subject, deleted)
        if not vs:
            return None
        if version == -1:
            return vs[-1]
        return next((v for v in vs if v.version == version), None)

    def get_version(self, subject: str, version: int, deleted: bool = False) -> Version:
        v = self._version(subject, version, deleted)
        if v is None:
            if not self.state.has_subject(subject, deleted):
                raise E.subject_not_found(subject)
            raise E.version_not_found(version)
        return v

    def version_json(self, v: Version, fmt: str = "") -> dict[str, Any]:
        s = self.state.schemas[v.id]
        out: dict[str, Any] = {"subject": v.subject, "version": v.version, "id": v.id}
        if s.schema_type != "AVRO":
            out["schemaType"] = s.schema_type
        if s.references:
            out["references"] = [r.to_json() for r in s.references]
        out["schema"] = self.formatted(v.id, fmt)
        return out

    def formatted(self, schema_id: int, fmt: str) -> str:
        s = self.state.schemas[schema_id]
        if not fmt:
            return s.text
        try:
            return str(self.parse_stored(schema_id).formatted(fmt))
        except E.RestError:
            return s.text

    def schema_json(self, schema_id: int, fmt: str = "") -> dict[str, Any]:
        s = self.state.schemas.get(schema_id)
        if s is None:
            raise E.schema_not_found(schema_id)
        out: dict[str, Any] = {}
        if s.schema_type != "AVRO":
            out["schemaType"] = s.schema_type
        if s.references:
            out["references"] = [r.to_json() for r in s.references]
        out["schema"] = self.formatted(schema_id, fmt)
        return out

    def id_versions(self, schema_id: int, deleted: bool = False) -> list[dict[str, Any]]:
        if schema_id not in self.state.schemas:
            raise E.schema_not_found(schema_id)
        out = []
        for subject, version in sorted(self.state.uses.get(schema_id, ())):
            v = self.state.subjects[subject][version]
            if deleted or not v.deleted:
                out.append({"subject": subject, "version": version})
        return out

    def lookup(self, subject: str, req: SchemaRequest, deleted: bool = False) -> Version:
        """POST /subjects/{subject}: the version of the subject with this schema."""
        if not self.state.has_subject(subject, deleted):
            raise E.subject_not_found(subject)
        parsed = self.parse(req.schema_type, req.schema, req.references)
        found = self._find(subject, parsed, req, deleted)
        if found is None:
            raise E.schema_not_found()
        return found

    def _find(self, subject: str, parsed: Any, req: SchemaRequest, deleted: bool = False) -> Version | None:
        identity = (req.schema_type, parsed.canonical, req.references)
        schema_id = self.state.by_identity.get(identity)
        versions = self.state.versions(subject, deleted)
        if schema_id is not None:
            for v in reversed(versions):
                if v.id == schema_id:
                    return v
        # a version stored in another form (written by another registry): compared in its
        # canonical form, computed once per schema
        for v in reversed(versions):
            s = self.state.schemas[v.id]
            if s.schema_type != req.schema_type or s.references != req.references:
                continue
            if s.canonical is None:
                try:
                    s.canonical = self.parse_stored(v.id).canonical
                except E.RestError:
                    s.canonical = ""
            if s.canonical == parsed.canonical:
                return v
        return None

    def compatibility_level(self, subject: str | None) -> str:
        return self.state.config(subject) or self.state.config(None) or DEFAULT_LEVEL

    def mode(self, subject: str | None) -> str:
        return self.state.mode(subject) or self.state.mode(None) or DEFAULT_MODE

    def test_compatibility(self, subject: str, version: int | None, req: SchemaRequest) -> list[str]:
        """POST /compatibility/subjects/{subject}/versions[/{version}]: the problems."""
        parsed = self.parse(req.schema_type, req.schema, req.references)
        level = self.compatibility_level(subject)
        if version is None:
            problems, _ = check(level, parsed, _Parsed(self, [v.id for v in self.state.versions(subject)]))
            return problems
        v = self._version(subject, version)
        if v is None:
            if version == -1:
                return []  # nothing to be compatible with, as Confluent's
            raise E.version_not_found(version)
        if level == "NONE":
            return []
        problems, _ = check(level.replace("_TRANSITIVE", ""), parsed, [self.parse_stored(v.id)])
        return problems

    # ------------------------------------------------------------------ plans (run by the writer)

    def plan_register(
        self, subject: str, req: SchemaRequest, normalize: bool = False
    ) -> tuple[dict[str, Any], list[tuple[bytes, bytes | None]]]:
        mode = self.mode(subject)
        if mode in ("READONLY", "READONLY_OVERRIDE"):
            raise E.not_permitted(f"Subject {subject} is in read-only mode")
        if req.id is not None and mode != "IMPORT":
            raise E.not_permitted(f"Subject {subject} is not in import mode")
        parsed = self.parse(req.schema_type, req.schema, req.references)
        if req.id is None and req.version is None:
            existing = self._find(subject, parsed, req)
            if existing is not None:
                return self._registered(existing.id, existing.version, req), []
        identity = (req.schema_type, parsed.canonical, req.references)
        schema_id = self.state.by_identity.get(identity)
        if req.id is not None:
            known = self.state.schemas.get(req.id)
            if known is not None and known.identity != identity:
                raise E.id_does_not_match(f"Schema already registered with id {req.id} is a different schema")
            if schema_id is not None and schema_id != req.id:
                raise E.id_does_not_match(f"Schema already registered with id {schema_id} instead of input id {req.id}")
            schema_id = req.id
        all_versions = self.state.versions(subject, deleted=True)
        new_version = (all_versions[-1].version + 1) if all_versions else 1
        if req.version is not None:
            if mode != "IMPORT" and req.version != new_version:
                raise E.invalid_schema("Version is not one more than previous version")
            new_version = req.version
        if mode != "IMPORT":
            live = self.state.versions(subject)
            previous = _Parsed(self, [v.id for v in live])
            level = self.compatibility_level(subject)
            problems, at = check(level, parsed, previous)
            if problems:
                old = live[at]
                details = [
                    *problems,
                    f"{{oldSchemaVersion: {old.version}}}",
                    f"{{oldSchema: '{self.state.schemas[old.id].text}'}}",
                    f"{{compatibility: '{level}'}}",
                ]
                raise E.incompatible(
                    f"Schema being registered is incompatible with an earlier schema for subject "
                    f'"{subject}", details: [{", ".join(details)}]'
                )
        if schema_id is None:
            schema_id = self.state.max_id + 1
        value = R.SchemaValue(subject, new_version, schema_id, req.schema_type, req.references, parsed.canonical)
        return (
            self._registered(schema_id, new_version, req),
            [(R.schema_key(subject, new_version), R.schema_value(value))],
        )

    @staticmethod
    def _registered(schema_id: int, version: int, req: SchemaRequest) -> dict[str, Any]:
        """The answer to a registration: the id and version, and the schema as the client
        sent it (clients cache the answer's schema under the id: Confluent's Python client
        reads a Protobuf schema it registered as a FileDescriptorProto back from there)."""
        out: dict[str, Any] = {"id": schema_id, "version": version}
        if req.schema_type != "AVRO":
            out["schemaType"] = req.schema_type
        if req.references:
            out["references"] = [r.to_json() for r in req.references]
        out["schema"] = req.schema
        return out

    def _check_writable(self, subject: str) -> None:
        if self.mode(subject) in ("READONLY", "READONLY_OVERRIDE"):
            raise E.not_permitted(f"Subject {subject} is in read-only mode")

    def plan_delete_version(
        self, subject: str, version: int, permanent: bool
    ) -> tuple[int, list[tuple[bytes, bytes | None]]]:
        self._check_writable(subject)
        if not self.state.has_subject(subject, deleted=True):
            raise E.subject_not_found(subject)
        v = self._version(subject, version, deleted=permanent)
        if v is None:
            if not permanent and self._version(subject, version, deleted=True) is not None:
                raise E.version_soft_deleted(subject, version)
            raise E.version_not_found(version)
        if self.state.referenced_by(subject, v.version, deleted=permanent):
            raise E.reference_exists(subject, v.version)
        if permanent:
            if not v.deleted:
                raise E.version_not_soft_deleted(subject, v.version)
            records: list[tuple[bytes, bytes | None]] = [(R.schema_key(subject, v.version), None)]
            if len(self.state.versions(subject, deleted=True)) == 1:
                records += self._drop_settings(subject)
            return v.version, records + [self._id_floor()]
        s = self.state.schemas[v.id]
        value = R.SchemaValue(subject, v.version, v.id, s.schema_type, s.references, s.text, deleted=True)
        return v.version, [(R.schema_key(subject, v.version), R.schema_value(value))]

    def plan_delete_subject(self, subject: str, permanent: bool) -> tuple[list[int], list[tuple[bytes, bytes | None]]]:
        self._check_writable(subject)
        if not self.state.has_subject(subject, deleted=True):
            raise E.subject_not_found(subject)
        if not permanent and not self.state.has_subject(subject):
            raise E.subject_soft_deleted(subject)
        versions = self.state.versions(subject, deleted=permanent)
        for v in versions:
            if self.state.referencing_subjects(subject, v.version, deleted=permanent) - {subject}:
                raise E.reference_exists(subject, v.version)
            if permanent and not v.deleted:
                raise E.subject_not_soft_deleted(subject)
        numbers = [v.version for v in versions]
        if not permanent:
            return numbers, [(R.subject_key("DELETE_SUBJECT", subject), R.delete_subject_value(subject, numbers[-1]))]
        records: list[tuple[bytes, bytes | None]] = [(R.schema_key(subject, n), None) for n in reversed(numbers)]
        return numbers, records + self._drop_settings(subject) + [self._id_floor()]

    def _drop_settings(self, subject: str) -> list[tuple[bytes, bytes | None]]:
        out: list[tuple[bytes, bytes | None]] = []
        if self.state.config(subject) is not None:
            out.append((R.subject_key("CONFIG", subject), None))
        if self.state.mode(subject) is not None:
            out.append((R.subject_key("MODE", subject), None))
        return out

    def _id_floor(self) -> tuple[bytes, bytes | None]:
        """A NOOP keeping max_id (written with every permanent deletion: the deleted
        schema's record may be compacted away, its id must not be given again)."""
        return R.NOOP_KEY, R.noop_value(self.state.max_id, *self.writer_identity)

    #: (broker id, leader epoch, url) of this broker as a writer; set by the writer
    writer_identity: tuple[int, int, str] = (-1, -1, "")

    def plan_config(self, subject: str | None, level: Any) -> tuple[dict[str, Any], list[tuple[bytes, bytes | None]]]:
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise E.invalid_compatibility(level)
        level = level.upper()
        return {"compatibility": level}, [(R.subject_key("CONFIG", subject), R.config_value(subject, level))]

    def plan_delete_config(self, subject: str | None) -> tuple[dict[str, Any], list[tuple[bytes, bytes | None]]]:
        current = self.state.config(subject)
        if subject is not None and current is None:
            raise (
                E.subject_not_found(subject)
                if not self.state.has_subject(subject, True)
                else E.no_subject_compatibility(subject)
            )
        return {"compatibilityLevel": current or DEFAULT_LEVEL}, [(R.subject_key("CONFIG", subject), None)]

    def plan_mode(
        self, subject: str | None, mode: Any, force: bool
    ) -> tuple[dict[str, Any], list[tuple[bytes, bytes | None]]]:
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise E.invalid_mode(mode)
        mode = mode.upper()
        if mode == "IMPORT" and not force:
            non_empty = self.state.has_subject(subject, True) if subject is not None else bool(self.state.subjects)
            if non_empty:
                raise E.not_permitted("Cannot import since found existing subjects")
        return {"mode": mode}, [(R.subject_key("MODE", subject), R.mode_value(subject, mode))]

    def plan_delete_mode(self, subject: str) -> tuple[dict[str, Any], list[tuple[bytes, bytes | None]]]:
        current = self.state.mode(subject)
        if current is None:
            raise (
                E.subject_not_found(subject)
                if not self.state.has_subject(subject, True)
                else E.no_subject_mode(subject)
            )
        return {"mode": current}, [(R.subject_key("MODE", subject), None)]


class _Parsed(collections.abc.Sequence):
    """The parsed schemas of some ids, each parsed when the compatibility check reads it
    (a non-transitive level reads the latest only)."""

    def __init__(self, registry: SchemaRegistry, ids: list[int]):
        self.registry = registry
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self.registry.parse_stored(x) for x in self.ids[i]]
        return self.registry.parse_stored(self.ids[i])
