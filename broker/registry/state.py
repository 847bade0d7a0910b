"""The registry's view: everything `_schemas` says, applied record by record in offset
order, on every broker (Confluent's lookup cache). Reads are served from it; the writer
decides from it.

Invariants:
- `next_offset` is the offset after the last record applied; records below the
  partition's high watermark only are ever applied (the reader fetches as a consumer),
  so the view never shows what a failover could take back.
- A schema id names one schema (type, text, references) for ever: a SCHEMA record giving
  a known id to another schema is refused (logged, skipped), as Confluent's reader does.
- `max_id` is the highest id any record ever named, NOOPs' `maxId` included: the next id
  given is above it, even after the records of a permanently deleted schema were
  compacted away.
- `ids_for(subject)` is the set of ids of the subject's versions that are not deleted,
  kept current by every apply: the question "is id N registered under subject S" is
  one set lookup (for validation on produce).
- A record that is not the registry's is logged and skipped (`corrupt` counts them);
  nothing in `_schemas` can stop the view.

Everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.registry import records as R
from broker.timeouts import wait_for

log = logging.getLogger(__name__)

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT", "FORWARD")


@dataclass
class Version:
    """One version of a subject."""

    subject: str
    version: int
    id: int
    deleted: bool
    offset: int


@dataclass
class Schema:
    """A schema by id: what GET /schemas/ids/{id} answers. `cache` keeps encoded answers
    (the API's), dropped with the entry when the schema changes."""

    id: int
    schema_type: str
    text: str
    references: tuple[R.Reference, ...]
    cache: dict[Any, bytes] = field(default_factory=dict)
    #: the canonical form of `text` (registry.py computes it once, when first compared)
    canonical: str | None = None

    @property
    def identity(self) -> tuple[str, str, tuple[R.Reference, ...]]:
        return (self.schema_type, self.text, self.references)


class RegistryState:
    def __init__(self) -> None:
        self.next_offset = 0
        #: subject -> version -> Version (soft-deleted ones included, permanently deleted gone)
        self.subjects: dict[str, dict[int, Version]] = {}
        self.schemas: dict[int, Schema] = {}
        #: (type, text, references) -> id: the schema registered before, whatever the subject
        self.by_identity: dict[tuple[str, str, tuple[R.Reference, ...]], int] = {}
        #: id -> {(subject, version)}
        self.uses: dict[int, set[tuple[str, int]]] = {}
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        self.max_id = 0
        #: broker id -> (leader epoch, url): where each broker took writes when it last led
        self.writers: dict[int, tuple[int, str]] = {}
        self.corrupt = 0
        #: the view has read `_schemas` up to the high watermark it saw when it started
        #: (or found no `_schemas`): reads are answered from then on, not from a view
        #: still loading (a schema that exists is never answered 40403 after a restart)
        self.caught_up = False
        self._caught_up: asyncio.Event | None = None
        self._live_ids: dict[str, frozenset[int]] = {}
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        #: called after each batch of records applied (the API drops cached lists)
        self.listeners: list[Callable[[], None]] = []

    def reset(self) -> None:
        """Forgets everything (the topic is read again from its start); waiters and
        listeners stay."""
        listeners, waiters, caught_up, event = self.listeners, self._waiters, self.caught_up, self._caught_up
        self.__init__()  # type: ignore[misc]
        self.listeners, self._waiters, self.caught_up, self._caught_up = listeners, waiters, caught_up, event
        for fn in listeners:
            fn()

    # ------------------------------------------------------------------ questions

    def ids_for(self, subject: str) -> frozenset[int]:
        """The ids registered under `subject` (versions not deleted)."""
        return self._live_ids.get(subject, frozenset())

    def has_id(self, subject: str, schema_id: int) -> bool:
        return schema_id in self._live_ids.get(subject, ())

    def versions(self, subject: str, deleted: bool = False) -> list[Version]:
        """The subject's versions in order, soft-deleted ones only with `deleted`."""
        vs = self.subjects.get(subject)
        if not vs:
            return []
        return [vs[v] for v in sorted(vs) if deleted or not vs[v].deleted]

    def has_subject(self, subject: str, deleted: bool = False) -> bool:
        return bool(self.versions(subject, deleted))

    def subject_names(self, deleted: bool = False) -> list[str]:
        return sorted(s for s in self.subjects if self.has_subject(s, deleted))

    def config(self, subject: str | None) -> str | None:
        return self.configs.get(subject)

    def mode(self, subject: str | None) -> str | None:
        return self.modes.get(subject)

    def referenced_by(self, subject: str, version: int, deleted: bool = False) -> list[int]:
        """Ids of schemas that reference (subject, version), through a version not deleted."""
        out = set()
        for vs in self.subjects.values():
            for v in vs.values():
                if v.deleted and not deleted:
                    continue
                s = self.schemas.get(v.id)
                if s is not None and any(r.subject == subject and r.version == version for r in s.references):
                    out.add(v.id)
        return sorted(out)

    def referencing_subjects(self, subject: str, version: int, deleted: bool = False) -> set[str]:
        """The subjects with a version (not deleted, unless `deleted`) whose schema
        references (subject, version)."""
        out = set()
        for vs in self.subjects.values():
            for v in vs.values():
                if v.deleted and not deleted:
                    continue
                s = self.schemas.get(v.id)
                if s is not None and any(r.subject == subject and r.version == version for r in s.references):
                    out.add(v.subject)
        return out

    # ------------------------------------------------------------------ waiting

    async def wait_for(self, offset: int, timeout: float) -> bool:
        """Waits until every record below `offset` is applied (read-your-writes); False
        on timeout."""
        if self.next_offset >= offset:
            return True
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        try:
            await wait_for(asyncio.shield(fut), timeout)
            return True
        except asyncio.TimeoutError:
            fut.cancel()  # dropped from the waiters at the next wake
            return self.next_offset >= offset

    def mark_caught_up(self) -> None:
        if not self.caught_up:
            self.caught_up = True
            if self._caught_up is not None:
                self._caught_up.set()

    async def wait_caught_up(self, timeout: float) -> bool:
        if self.caught_up:
            return True
        if self._caught_up is None:
            self._caught_up = asyncio.Event()
        try:
            await wait_for(self._caught_up.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return self.caught_up

    def _wake(self) -> None:
        if not self._waiters:
            return
        keep = []
        for offset, fut in self._waiters:
            if self.next_offset >= offset:
                if not fut.done():
                    fut.set_result(None)
            elif not fut.done():
                keep.append((offset, fut))
        self._waiters = keep

    # ------------------------------------------------------------------ applying

    def applied(self, next_offset: int) -> None:
        """A batch of records is applied up to `next_offset` (exclusive)."""
        self.next_offset = max(self.next_offset, next_offset)
        for fn in self.listeners:
            fn()
        self._wake()

    def apply(self, offset: int, key_raw: bytes | None, value_raw: bytes | None) -> None:
        """One record of _schemas (a corrupt one is logged and skipped)."""
        try:
            if key_raw is None:
                raise R.CorruptRecord("a record without a key")
            key = R.decode_key(key_raw)
            self._apply(offset, key, value_raw)
        except R.CorruptRecord as exc:
            self.corrupt += 1
            log.error("_schemas offset %d: %s; skipped", offset, exc)

    def _apply(self, offset: int, key: dict[str, Any], value_raw: bytes | None) -> None:
        kind = key["keytype"]
        subject = key.get("subject")
        if kind == "SCHEMA":
            if value_raw is None:
                self._tombstone(key["subject"], key["version"])
            else:
                self._schema(offset, R.decode_schema_value(key, value_raw))
        elif kind == "CONFIG":
            if value_raw is None:
                self.configs.pop(subject, None)
            else:
                level = R.decode_value(value_raw).get("compatibilityLevel")
                if isinstance(level, str) and level:
                    self.configs[subject] = level.upper()
                else:
                    self.configs.pop(subject, None)
        elif kind == "MODE":
            if value_raw is None:
                self.modes.pop(subject, None)
            else:
                mode = R.decode_value(value_raw).get("mode")
                if not isinstance(mode, str) or mode.upper() not in MODES:
                    raise R.CorruptRecord(f"a MODE value of mode {mode!r}")
                self.modes[subject] = mode.upper()
        elif kind == "DELETE_SUBJECT":
            if value_raw is not None:
                upto = R.decode_value(value_raw).get("version")
                if not isinstance(upto, int):
                    raise R.CorruptRecord("a DELETE_SUBJECT value without a version")
                for v in self.subjects.get(key["subject"], {}).values():
                    if v.version <= upto:
                        v.deleted = True
                self._refresh(key["subject"])
        elif kind == "CLEAR_SUBJECT":
            if value_raw is not None:
                for v in list(self.subjects.get(key["subject"], {}).values()):
                    self._tombstone(v.subject, v.version)
        elif kind == "NOOP":
            if value_raw is not None:
                value = R.decode_value(value_raw)
                max_id = value.get("maxId")
                if isinstance(max_id, int):
                    self.max_id = max(self.max_id, max_id)
                writer = value.get("writer")
                if (
                    isinstance(writer, dict)
                    and isinstance(writer.get("broker"), int)
                    and isinstance(writer.get("url"), str)
                ):
                    self.writers[writer["broker"]] = (int(writer.get("epoch", -1)), writer["url"])
        # CONTEXT and ASSOC records (Confluent's contexts and associations) are not used here

    def _schema(self, offset: int, v: R.SchemaValue) -> None:
        identity = (v.schema_type, v.schema, v.references)
        known = self.schemas.get(v.id)
        if known is not None and known.identity != identity:
            raise R.CorruptRecord(
                f"schema id {v.id} for subject {v.subject!r} version {v.version} names another "
                f"schema than the one it was first given to; the record is not applied"
            )
        versions = self.subjects.setdefault(v.subject, {})
        old = versions.get(v.version)
        if old is not None and old.id != v.id:
            self._unuse(old.id, v.subject, v.version)
        versions[v.version] = Version(v.subject, v.version, v.id, v.deleted, offset)
        if known is None:
            self.schemas[v.id] = Schema(v.id, v.schema_type, v.schema, v.references)
            self.by_identity.setdefault(identity, v.id)
        self.uses.setdefault(v.id, set()).add((v.subject, v.version))
        self.max_id = max(self.max_id, v.id)
        self._refresh(v.subject)

    def _tombstone(self, subject: str, version: int) -> None:
        versions = self.subjects.get(subject)
        if not versions or version not in versions:
            return
        old = versions.pop(version)
        if not versions:
            del self.subjects[subject]
        self._unuse(old.id, subject, version)
        self._refresh(subject)

    def _unuse(self, schema_id: int, subject: str, version: int) -> None:
        uses = self.uses.get(schema_id)
        if uses is None:
            return
        uses.discard((subject, version))
        if not uses:
            del self.uses[schema_id]
            gone = self.schemas.pop(schema_id, None)
            if gone is not None and self.by_identity.get(gone.identity) == schema_id:
                del self.by_identity[gone.identity]

    def _refresh(self, subject: str) -> None:
        live = frozenset(v.id for v in self.subjects.get(subject, {}).values() if not v.deleted)
        if live:
            self._live_ids[subject] = live
        else:
            self._live_ids.pop(subject, None)
