"""The in-flight records of one share group on one topic-partition, on its leader (Kafka's
SharePartition, KIP-932).

A share group's consumers read one partition together: each ShareFetch *acquires* records
for one member, which holds them under an acquisition lock until it acknowledges them —
ACCEPT (done: acknowledged), RELEASE (give back: available again), REJECT (unprocessable:
archived) or RENEW (KIP-1222: keep the lock longer) — or until the lock expires
(`lock_ms`: released as by RELEASE). Every acquisition counts a delivery; a record
released (or timed out) after `delivery_limit` deliveries is archived instead of being
delivered again.

The window: the share-partition start offset (SPSO, `start`) is the first offset not yet
acknowledged or archived; the end (`end`, one past the last offset ever acquired, Kafka's
SPEO + 1). Offsets below `start` are done; offsets at or after `end` have never been
delivered. Between them, the state of every offset is kept in RANGES — runs of offsets
with one state, delivery count, owner and lock deadline — split only where an
acknowledgement or an acquisition cuts one and merged again with equal neighbours: never a
Python object per record. A window of a few thousand records acknowledged one batch at a
time holds a handful of ranges. When the prefix of the window is all acknowledged or
archived, `start` moves past it and those ranges go. At most `max_locks` records are in
flight (`end - start`, group.share.partition.max.record.locks): beyond that no new record
is acquired until the start moves (records released within the window still are).

States (Kafka's RecordState ids, as the persister stores them): AVAILABLE 0, ACQUIRED 1,
ACKNOWLEDGED 2, ARCHIVED 4. The persisted form (`state_batches`) writes acquired records
as AVAILABLE with their delivery count — a lock does not survive its leader — and the
load (`load`) starts from a start offset and such batches; offsets between them that no
batch names are available and undelivered.

Times are the caller's clock in milliseconds (the manager passes the event loop's), so
the class is plain synchronous bookkeeping, tested against a per-offset model
(tests/unit/share/test_partition.py).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence

from broker.protocol.errors import ErrorCode

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4

# acknowledge types (ShareFetch/ShareAcknowledge AcknowledgeTypes)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4

_DONE = (ACKNOWLEDGED, ARCHIVED)


class AcknowledgeError(Exception):
    """An acknowledgement refused as a whole (nothing of it applied): `code` is what the
    partition answers."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Range:
    """Offsets first..last (inclusive) in one state."""

    __slots__ = ("first", "last", "state", "count", "member", "deadline")

    def __init__(self, first: int, last: int, state: int, count: int, member: str = "", deadline: float = 0.0):
        self.first = first
        self.last = last
        self.state = state
        self.count = count  # deliveries so far
        self.member = member  # the holder while ACQUIRED
        self.deadline = deadline  # while ACQUIRED: when its lock expires

    def cut(self, at: int) -> _Range:
        """Splits off [at, last] (first < at <= last), returned; self keeps [first, at-1]."""
        tail = _Range(at, self.last, self.state, self.count, self.member, self.deadline)
        self.last = at - 1
        return tail

    def same(self, o: _Range) -> bool:
        return (
            self.state == o.state and self.count == o.count and self.member == o.member and self.deadline == o.deadline
        )

    def __repr__(self) -> str:
        return f"_Range({self.first}..{self.last} s={self.state} n={self.count} m={self.member!r})"


class SharePartition:
    """See the module docstring."""

    def __init__(
        self,
        start: int = 0,
        *,
        lock_ms: int = 30000,
        delivery_limit: int = 5,
        max_locks: int = 2000,
    ) -> None:
        self.start = start
        self.end = start
        self.lock_ms = lock_ms
        self.delivery_limit = delivery_limit
        self.max_locks = max_locks
        self._ranges: list[_Range] = []  # contiguous, covering [start, end)
        self._firsts: list[int] = []  # each range's first offset (bisect)
        #: how many offsets are ACQUIRED now (for a quick "nothing locked" check)
        self.acquired = 0
        #: the state changed since the last state_batches() (what the manager persists)
        self.dirty = False
        #: records became available again (released, timed out) since the manager last
        #: looked: fetches waiting for records should read again
        self.available_changed = False

    # ------------------------------------------------------------------ load and persist

    def load(self, start: int, batches: Iterable[tuple[int, int, int, int]]) -> None:
        """The state read back: `start` and (first, last, state, delivery count) batches;
        offsets of the window no batch names are available, never delivered."""
        self.start = self.end = start
        self._ranges = []
        for first, last, state, count in sorted(batches):
            if last < self.end:
                continue
            first = max(first, self.end)
            if first > self.end:
                self._ranges.append(_Range(self.end, first - 1, AVAILABLE, 0))
            if state not in (AVAILABLE, ACKNOWLEDGED, ARCHIVED):
                state = AVAILABLE
            self._ranges.append(_Range(first, last, state, count))
            self.end = last + 1
        self.acquired = 0
        self._normalize(0, len(self._ranges))
        self._rebuild()
        self._advance()

    def state_batches(self) -> list[tuple[int, int, int, int]]:
        """(first, last, state, delivery count) of the window as persisted: acquired
        records as available with their count."""
        out: list[tuple[int, int, int, int]] = []
        for r in self._ranges:
            state = AVAILABLE if r.state == ACQUIRED else r.state
            if out and out[-1][2] == state and out[-1][3] == r.count and out[-1][1] + 1 == r.first:
                out[-1] = (out[-1][0], r.last, state, r.count)
            else:
                out.append((r.first, r.last, state, r.count))
        self.dirty = False
        return out

    def ranges(self) -> list[tuple[int, int, int, int, str]]:
        """(first, last, state, delivery count, member) of every range (describe, tests)."""
        return [(r.first, r.last, r.state, r.count, r.member) for r in self._ranges]

    # ------------------------------------------------------------------ reading

    def next_fetch_offset(self) -> int:
        """Where the next fetch reads from: the first available record of the window, or
        its end."""
        for r in self._ranges:
            if r.state == AVAILABLE:
                return r.first
        return self.end

    def can_acquire(self) -> bool:
        """Is there anything a fetch could acquire (an available record in the window, or
        room for new ones)?"""
        if self.end - self.start < self.max_locks:
            return True
        return any(r.state == AVAILABLE for r in self._ranges)

    def acquire(
        self,
        member: str,
        batches: Sequence[tuple[int, int]],
        now: float,
        max_records: int = 0x7FFFFFFF,
        whole_batches: bool = True,
    ) -> list[tuple[int, int, int]]:
        """Acquires for `member` what of the fetched log batches ((base, last offset) each,
        in order, as read from the next fetch offset) it may: the available records of the
        window they cover, then records after the window's end — whole batches (a batch
        is delivered whole, so it is acquired whole, as Kafka's batch-optimized mode
        does), while fewer than `max_locks` are in flight and fewer than `max_records`
        were acquired (exactly max_records, cutting a batch, when not `whole_batches`:
        KIP-1206's record-limit mode). Returns the acquired runs (first, last, delivery
        count)."""
        if not batches or max_records <= 0:
            return []
        lo = max(batches[0][0], self.start)
        hi = batches[-1][1]
        deadline = now + self.lock_ms
        out: list[tuple[int, int, int]] = []
        left = max_records
        # 1. available records within the window
        if lo < self.end:
            i = self._index(lo)
            top = min(hi, self.end - 1)
            while i < len(self._ranges) and left > 0:
                r = self._ranges[i]
                if r.first > top:
                    break
                if r.state != AVAILABLE or r.last < lo:
                    i += 1
                    continue
                if r.first < lo:
                    self._insert(i + 1, r.cut(lo))
                    i += 1
                    r = self._ranges[i]
                stop = min(r.last, top, r.first + left - 1)
                if stop < r.last:
                    self._insert(i + 1, r.cut(stop + 1))
                r.state = ACQUIRED
                r.count += 1
                r.member = member
                r.deadline = deadline
                n = r.last - r.first + 1
                left -= n
                self.acquired += n
                _append_run(out, r.first, r.last, r.count)
                i += 1
            self._normalize(0, len(self._ranges))
        # 2. new records after the window, whole batches
        if hi >= self.end and left > 0 and self.end - self.start < self.max_locks:
            begin = -1
            last = self.end - 1
            for base, blast in batches:
                if blast <= last:
                    continue
                if left <= 0 or last - self.start + 1 >= self.max_locks:
                    break
                if begin < 0:
                    begin = max(base, self.end)
                    if begin > self.end:
                        # a hole in the log before this batch (deleted or compacted away)
                        self._append(_Range(self.end, begin - 1, ARCHIVED, 0))
                    last = begin - 1
                top = blast if whole_batches else min(blast, last + left)
                left -= top - last
                last = top
            if begin >= 0 and last >= begin:
                self._append(_Range(begin, last, ACQUIRED, 1, member, deadline))
                self.acquired += last - begin + 1
                self.end = last + 1
                _append_run(out, begin, last, 1)
            self._advance()
        if out:
            self.dirty = True
        return out

    # ------------------------------------------------------------------ acknowledging

    def acknowledge(self, member: str, batches: Sequence[tuple[int, int, Sequence[int]]], now: float) -> None:
        """Applies `member`'s acknowledgements ((first, last, types) each: one type for the
        whole run, or one per offset) all or nothing, as Kafka's SharePartition checks
        them: AcknowledgeError INVALID_REQUEST when a run is malformed or goes past the
        records delivered; INVALID_RECORD_STATE when it names a record of the window this
        member does not hold acquired (acquired by another member, available again,
        already acknowledged or archived: its lock expired, or it was acknowledged
        before) or lies wholly below the start. Offsets of a run below the start (done
        since) are skipped."""
        runs: list[tuple[int, int, int]] = []
        for first, last, types in batches:
            if first > last or first < 0:
                raise AcknowledgeError(ErrorCode.INVALID_REQUEST, f"acknowledgement batch {first}..{last} is empty")
            if len(types) == 1:
                runs.append((first, last, types[0]))
            elif len(types) == last - first + 1:
                off = first
                for t, g in itertools.groupby(types):
                    n = sum(1 for _ in g)
                    runs.append((off, off + n - 1, t))
                    off += n
            else:
                raise AcknowledgeError(
                    ErrorCode.INVALID_REQUEST,
                    f"acknowledgement batch {first}..{last} has {len(types)} types: one, or one per offset",
                )
        for first, last, t in runs:
            if t < GAP or t > RENEW:
                raise AcknowledgeError(ErrorCode.INVALID_REQUEST, f"unknown acknowledge type {t}")
            self._check_held(member, first, last)
        deadline = now + self.lock_ms
        for first, last, t in runs:
            # offsets below the start (done, or gone with the log's start) are skipped, as
            # Kafka skips them when the start moved into an acknowledged batch
            if last >= self.start:
                self._apply(max(first, self.start), last, t, deadline)
        self.dirty = True
        self._advance()

    def _check_held(self, member: str, first: int, last: int) -> None:
        if last >= self.end:
            raise AcknowledgeError(
                ErrorCode.INVALID_REQUEST,
                f"offsets {first}..{last} go past the records delivered (up to {self.end - 1})",
            )
        if last < self.start:
            raise AcknowledgeError(
                ErrorCode.INVALID_RECORD_STATE, f"offsets {first}..{last} are no longer in flight (start {self.start})"
            )
        first = max(first, self.start)
        i = self._index(first)
        while i < len(self._ranges) and self._ranges[i].first <= last:
            r = self._ranges[i]
            if r.state != ACQUIRED:
                raise AcknowledgeError(
                    ErrorCode.INVALID_RECORD_STATE,
                    f"offsets {max(r.first, first)}..{min(r.last, last)} are not acquired",
                )
            if r.member != member:
                raise AcknowledgeError(
                    ErrorCode.INVALID_RECORD_STATE,
                    f"offsets {max(r.first, first)}..{min(r.last, last)} are acquired by another member",
                )
            i += 1

    def _apply(self, first: int, last: int, t: int, deadline: float) -> None:
        i = self._split(first, last)
        j = i
        while j < len(self._ranges) and self._ranges[j].first <= last:
            r = self._ranges[j]
            if t == RENEW:
                r.deadline = deadline
            else:
                self.acquired -= r.last - r.first + 1
                if t == ACCEPT:
                    r.state = ACKNOWLEDGED
                elif t == RELEASE:
                    r.state = ARCHIVED if r.count >= self.delivery_limit else AVAILABLE
                    self.available_changed |= r.state == AVAILABLE
                else:  # REJECT, GAP
                    r.state = ARCHIVED
                r.member = ""
                r.deadline = 0.0
            j += 1
        self._normalize(max(i - 1, 0), j + 1)

    # ------------------------------------------------------------------ releasing

    def release_member(self, member: str) -> int:
        """Releases everything `member` holds (it left the group or closed its share
        session); returns how many records."""
        n = 0
        for r in self._ranges:
            if r.state == ACQUIRED and r.member == member:
                n += self._release(r)
        if n:
            self._normalize(0, len(self._ranges))
            self.dirty = True
            self._advance()
        return n

    def expire(self, now: float) -> float | None:
        """Releases every acquired range whose lock expired by `now`; returns the next
        deadline of a lock still held (None: none held)."""
        n = 0
        nxt: float | None = None
        if self.acquired:
            for r in self._ranges:
                if r.state == ACQUIRED:
                    if r.deadline <= now:
                        n += self._release(r)
                    elif nxt is None or r.deadline < nxt:
                        nxt = r.deadline
        if n:
            self._normalize(0, len(self._ranges))
            self.dirty = True
            self._advance()
        return nxt

    def _release(self, r: _Range) -> int:
        n = r.last - r.first + 1
        self.acquired -= n
        r.state = ARCHIVED if r.count >= self.delivery_limit else AVAILABLE
        self.available_changed |= r.state == AVAILABLE
        r.member = ""
        r.deadline = 0.0
        return n

    def next_deadline(self) -> float | None:
        """When the first lock still held expires (None: none held)."""
        if not self.acquired:
            return None
        return min((r.deadline for r in self._ranges if r.state == ACQUIRED), default=None)

    def move_start(self, offset: int) -> None:
        """The log no longer holds records below `offset` (retention, DeleteRecords): the
        window starts there at least, whatever state its records had."""
        if offset <= self.start:
            return
        if offset >= self.end:
            self._ranges, self._firsts = [], []
            self.start = self.end = offset
            self.acquired = 0
        else:
            i = self._split(offset, offset)
            for r in self._ranges[:i]:
                if r.state == ACQUIRED:
                    self.acquired -= r.last - r.first + 1
            del self._ranges[:i]
            del self._firsts[:i]
            self.start = offset
        self.dirty = True
        self._advance()

    # ------------------------------------------------------------------ ranges

    def _index(self, offset: int) -> int:
        """The index of the range holding `offset` (start <= offset < end)."""
        return max(bisect.bisect_right(self._firsts, offset) - 1, 0)

    def _split(self, first: int, last: int) -> int:
        """Cuts ranges so that [first, last] (within the window) is whole ranges; returns
        the index of the range starting at `first`."""
        i = self._index(first)
        r = self._ranges[i]
        if r.first < first:
            self._insert(i + 1, r.cut(first))
            i += 1
        j = self._index(last)
        r = self._ranges[j]
        if r.last > last:
            self._insert(j + 1, r.cut(last + 1))
        return i

    def _insert(self, i: int, r: _Range) -> None:
        self._ranges.insert(i, r)
        self._firsts.insert(i, r.first)

    def _append(self, r: _Range) -> None:
        rs = self._ranges
        if rs and rs[-1].same(r) and rs[-1].last + 1 == r.first:
            rs[-1].last = r.last
        else:
            rs.append(r)
            self._firsts.append(r.first)

    def _rebuild(self) -> None:
        self._firsts = [r.first for r in self._ranges]

    def _normalize(self, lo: int, hi: int) -> None:
        """Merges equal neighbours among ranges lo..hi."""
        rs = self._ranges
        hi = min(hi, len(rs))
        i = max(lo, 0)
        merged = False
        out_i = i + 1
        while out_i < hi:
            a, b = rs[i], rs[out_i]
            if a.same(b):
                a.last = b.last
                rs[out_i] = None  # type: ignore[call-overload]
                merged = True
            else:
                i = out_i
            out_i += 1
        if merged:
            self._ranges = [r for r in rs if r is not None]
            self._rebuild()

    def _advance(self) -> None:
        """Moves the start past a prefix that is all acknowledged or archived."""
        rs = self._ranges
        k = 0
        while k < len(rs) and rs[k].state in _DONE:
            k += 1
        if k:
            self.start = rs[k - 1].last + 1
            del rs[:k]
            del self._firsts[:k]
            self.dirty = True
        if not rs:
            self.start = max(self.start, self.end)
            self.end = self.start


def _append_run(out: list[tuple[int, int, int]], first: int, last: int, count: int) -> None:
    if out and out[-1][1] + 1 == first and out[-1][2] == count:
        out[-1] = (out[-1][0], last, count)
    else:
        out.append((first, last, count))
