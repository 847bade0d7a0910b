"""The aborted-transaction index (Kafka's TransactionIndex, `<base offset>.txnindex`).

One file per segment that saw an ABORT marker, holding an entry per aborted transaction
whose marker is in that segment, in marker order. An entry is 34 bytes, Kafka's:

    int16 version (0), int64 producer id, int64 first offset, int64 last offset (the
    marker's), int64 last stable offset (the LSO right after the marker)

A read_committed fetch answers the aborted transactions that overlap the range it
returns (Kafka's collectAbortedTxns): entries whose marker is at or after the fetch
offset and whose first offset is below the range's end. The entries are kept in memory
in marker order, one list per log (aborts are rare next to records); the files make them
survive restarts. A crash may lose the tail of a file: the log rebuilds the entries of
the batches its producer-state replay covers (the last segment roll's snapshot on).

Every method runs on the event loop thread; writes are appends of one entry (O_APPEND),
fsynced with the segment at its roll.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from dataclasses import dataclass

log = logging.getLogger(__name__)

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


@dataclass(slots=True, frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return _ENTRY.pack(0, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


def txn_index_name(base_offset: int) -> str:
    return f"{base_offset:020d}{TXN_INDEX_SUFFIX}"


def read_txn_index(path: str) -> list[AbortedTxn]:
    """The entries of a .txnindex; a torn last entry is ignored (and cut by the caller's
    rewrite), an entry of an unknown version ends the read with a warning."""
    with open(path, "rb") as f:
        data = f.read()
    out = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != 0:
            log.warning("%s: entry of version %d at byte %d: the rest is ignored", path, version, pos)
            break
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class AbortedTxnIndex:
    """The aborted transactions of one log (every segment's .txnindex)."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.entries: list[AbortedTxn] = []
        self._lasts: list[int] = []  # entries' last offsets, for bisect

    def __len__(self) -> int:
        return len(self.entries)

    def _path(self, base: int) -> str:
        return os.path.join(self.dir, txn_index_name(base))

    def load(self, bases: list[int], log_end_offset: int) -> None:
        """Reads every .txnindex of the directory, keeping the entries below the log end;
        files that belong to no segment of `bases` (segments a compaction merged while a
        crash interrupted it) are merged into the segments holding their markers."""
        self.entries = []
        orphans = False
        known = set(bases)
        for name in os.listdir(self.dir):
            if not name.endswith(TXN_INDEX_SUFFIX):
                continue
            stem = name[: -len(TXN_INDEX_SUFFIX)]
            path = os.path.join(self.dir, name)
            if not (len(stem) == 20 and stem.isdigit()):
                continue
            if int(stem) not in known:
                orphans = True
            try:
                found = read_txn_index(path)
            except OSError as exc:
                log.warning("%s unreadable (%s): its entries are rebuilt as far as the replay goes", path, exc)
                continue
            self.entries.extend(e for e in found if e.last_offset < log_end_offset)
        self.entries.sort(key=lambda e: e.last_offset)
        self._lasts = [e.last_offset for e in self.entries]
        if orphans:
            self.rewrite(bases)

    def append(self, segment_base: int, entry: AbortedTxn) -> None:
        """Records an aborted transaction whose marker went into the segment at
        `segment_base` (the active one)."""
        if self._lasts and entry.last_offset <= self._lasts[-1]:
            return  # already there (a replay over entries the file kept)
        self.entries.append(entry)
        self._lasts.append(entry.last_offset)
        fd = os.open(self._path(segment_base), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, entry.pack())
        finally:
            os.close(fd)

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions a read of [fetch_offset, upper_bound) must name: marker
        at or after fetch_offset, first offset below upper_bound. Stops at an entry whose
        LSO reaches upper_bound: every later transaction started at or after it."""
        out = []
        entries = self.entries
        for i in range(bisect.bisect_left(self._lasts, fetch_offset), len(entries)):
            e = entries[i]
            if e.first_offset < upper_bound:
                out.append(e)
            if e.last_stable_offset >= upper_bound:
                break
        return out

    def truncate(self, offset: int, bases: list[int]) -> None:
        """Drops the entries whose marker is at or after `offset` (a truncation, or a
        replay rebuilding them); the files of `bases` (segments from the one holding
        `offset` on) are rewritten or removed."""
        i = bisect.bisect_left(self._lasts, offset)
        if i == len(self.entries):
            return
        del self.entries[i:]
        del self._lasts[i:]
        self.rewrite(bases)

    def rewrite(self, bases: list[int]) -> None:
        """Writes each segment's file of `bases` from the entries (files of other bases in
        the directory go): after a truncation, a compaction's merge of segments."""
        known = set(bases)
        for name in os.listdir(self.dir):
            stem = name[: -len(TXN_INDEX_SUFFIX)]
            if (
                name.endswith(TXN_INDEX_SUFFIX)
                and stem.isdigit()
                and int(stem) not in known
                and int(stem) >= (bases[0] if bases else 0)
            ):
                _unlink(os.path.join(self.dir, name))
        for j, base in enumerate(bases):
            nxt = bases[j + 1] if j + 1 < len(bases) else None
            mine = [e for e in self.entries if e.last_offset >= base and (nxt is None or e.last_offset < nxt)]
            path = self._path(base)
            if not mine:
                _unlink(path)
                continue
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(b"".join(e.pack() for e in mine))
            os.replace(tmp, path)

    def drop_before(self, offset: int, gone_bases: list[int]) -> None:
        """Segments below `offset` went (retention): their entries and files go."""
        i = bisect.bisect_left(self._lasts, offset)
        if i:
            del self.entries[:i]
            del self._lasts[:i]
        for base in gone_bases:
            _unlink(self._path(base))

    def clear(self) -> None:
        """Every entry and file goes (a follower starting afresh at another offset)."""
        self.entries = []
        self._lasts = []
        for name in os.listdir(self.dir):
            if name.endswith(TXN_INDEX_SUFFIX):
                _unlink(os.path.join(self.dir, name))

    def fsync(self, base: int) -> None:
        """fsyncs the file of segment `base` if it exists (the segment rolled)."""
        try:
            fd = os.open(self._path(base), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
