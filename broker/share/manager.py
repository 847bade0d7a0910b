"""The share partitions a broker leads and the share sessions of its share consumers
(Kafka's SharePartitionManager, KIP-932).

One SharePartition (partition.py) per (share group, topic-partition) led here, made on
the first ShareFetch or ShareAcknowledge that names it: its state is read from the
persister (Interface 1: the share coordinator's __share_group_state, broker/share/
persister.py); a partition whose state was never initialized starts at the group's
`share.auto.offset.reset` (latest: the high watermark; earliest: the log start;
by_duration: the first record at most that old), written with `Persister.initialize`.
The group's settings are its group configs over the broker's group.share.* defaults
(`settings`), read when a share partition loads. The state is kept per leader epoch: when this broker stops
leading the partition (or leads it again at a new epoch) the in-memory state goes and the
next use reads it back, so the new leader continues from what was persisted — the
acknowledged records stay acknowledged, the acquired ones are available again (their locks
were the old leader's).

Every change an acknowledgement makes is written to the persister before the
acknowledgement is answered (the whole window, in ranges: see partition.py's
state_batches); releases by lock expiry and by members leaving are written in the
background. Writes of one partition are serialized, and a write takes the state as it is
when its turn comes (so concurrent acknowledgements share one write).

Reads: `read` reads each partition's log from its next fetch offset (the first available
record of its window, or its end) below the high watermark, as Fetch reads it (file
ranges, sent with sendfile); `acquire` then acquires, for the fetching member, what the
batches read hold (whole batches, or exactly max_records in KIP-1206's record-limit
mode) and trims each file range to the last batch it acquired from. The read is the
`Read` of a DelayedFetch (delayed_fetch.py): a ShareFetch that finds less than min_bytes
waits in the purgatory for the partition's high watermark to move or for records of the
group to be released there (`_wake`). Acquisition happens only on the read that answers.
A group whose share.isolation.level is read_committed reads below the last stable
offset, and the records of aborted transactions it acquires are archived at once, left
out of the acquired runs (as Kafka's filterAbortedTransactionalAcquiredRecords).

Acquisition locks expire on a timer per partition (`_schedule`), which releases the
expired records, wakes the waiting fetches and persists the change.

Membership (Interface 2): `on_member_left` closes the member's sessions and releases
what it holds; a closed connection does the same for the sessions it opened
(`connection_closed`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import struct
import time
import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from broker.cluster.replica.purgatory import HIGH_WATERMARK
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.share.partition import REJECT, AcknowledgeError, SharePartition
from broker.share.records import StateBatch
from broker.share.session import ShareSessionCache

if TYPE_CHECKING:
    from broker.cluster.replica.manager import ReplicaManager
    from broker.cluster.replica.partition import Partition
    from broker.config import BrokerConfig
    from broker.log import FileSlice

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">qi")  # a batch's base offset and length
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta, at byte 23 of the batch
_ATTRIBUTES = struct.Struct(">h")  # at byte 21
_PRODUCER = struct.Struct(">q")  # producerId, at byte 43


@dataclass(frozen=True)
class ShareSettings:
    """A share group's settings as the share partitions use them."""

    lock_ms: int
    delivery_limit: int
    max_locks: int
    auto_offset_reset: str  # "latest" | "earliest" | "by_duration:<ISO-8601 duration>"
    read_committed: bool = False  # share.isolation.level


def share_settings(config: BrokerConfig, group_id: str) -> ShareSettings:
    """The broker's defaults (group.share.*): a group without configs of its own."""
    return ShareSettings(
        config["group.share.record.lock.duration.ms"],
        config["group.share.delivery.count.limit"],
        config["group.share.partition.max.record.locks"],
        "latest",
    )


_ISO_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


def duration_ms(text: str) -> int:
    """The milliseconds of an ISO-8601 duration PnDTnHnMn.nS (share.auto.offset.reset's
    by_duration, validated when it was set); 0 when it does not parse."""
    m = _ISO_DURATION.fullmatch(text)
    if m is None:
        return 0
    d, h, mi, sec = (float(x) if x else 0.0 for x in m.groups())
    return int((((d * 24 + h) * 60 + mi) * 60 + sec) * 1000)


class Persister(Protocol):
    """Interface 1 (broker/share/persister.py): what the manager asks of it."""

    async def initialize(
        self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int, start_offset: int
    ) -> int: ...

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> Any: ...

    async def write(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: list[Any],
        delivery_complete_count: int = -1,
    ) -> int: ...


class Entry:
    """One share partition led here, at one leader epoch."""

    __slots__ = (
        "group",
        "topic_id",
        "partition",
        "part",
        "leader_epoch",
        "state_epoch",
        "sp",
        "loading",
        "write_lock",
        "timer",
        "timer_at",
        "wake_key",
        "read_committed",
    )

    def __init__(self, group: str, topic_id: uuid.UUID, part: Partition) -> None:
        self.group = group
        self.topic_id = topic_id
        self.part = part
        self.partition = part.tp.partition
        self.leader_epoch = part.state.leader_epoch
        self.state_epoch = 0
        self.sp: SharePartition | None = None
        self.loading: asyncio.Future[None] | None = None
        self.write_lock = asyncio.Lock()
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0
        self.wake_key: Hashable = ("share", group, part.tp)
        self.read_committed = False


class PartitionRead:
    __slots__ = ("entry", "records", "error")

    def __init__(self, entry: Entry | None, error: int = 0) -> None:
        self.entry = entry
        self.records: FileSlice | None = None
        self.error = error


class ShareRead:
    """One read of the partitions of a ShareFetch (the `Read` of a DelayedFetch)."""

    __slots__ = ("partitions", "bytes", "errors", "watches")

    def __init__(self, partitions: list[PartitionRead], size: int, errors: bool, watches: list[tuple[Hashable, int]]):
        self.partitions = partitions
        self.bytes = size
        self.errors = errors
        self.watches = watches

    def release(self) -> None:
        for r in self.partitions:
            if r.records is not None:
                r.records.close()
                r.records = None


def _now_ms() -> float:
    return asyncio.get_running_loop().time() * 1000


class SharePartitionManager:
    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        persister: Persister | None,
        max_sessions: int,
        settings: Callable[[str], ShareSettings] | None = None,
    ) -> None:
        self.config = config
        self._settings = settings or (lambda group_id: share_settings(config, group_id))
        self.replicas = replicas
        self.persister = persister
        self.sessions = ShareSessionCache(max_sessions)
        self.entries: dict[tuple[str, uuid.UUID, int], Entry] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def settings(self, group_id: str) -> ShareSettings:
        """The group's settings (its group configs over the broker's group.share.*), read
        when a share partition loads and for each answer's lock timeout."""
        return self._settings(group_id)

    # ------------------------------------------------------------------ partitions

    async def partition(self, group: str, topic_id: uuid.UUID, topic: str, index: int) -> Entry:
        """The share partition, loaded; KafkaProtocolError when this broker does not lead
        it (NOT_LEADER_OR_FOLLOWER...) or its state cannot be read."""
        part = self.replicas.leader_partition(topic, index)
        key = (group, topic_id, index)
        e = self.entries.get(key)
        if e is None or e.leader_epoch != part.state.leader_epoch or e.part is not part:
            if e is not None:
                self._drop(e)
            e = Entry(group, topic_id, part)
            self.entries[key] = e
        while e.sp is None:
            if e.loading is None:
                e.loading = asyncio.get_running_loop().create_future()
                try:
                    await self._load(e)
                except BaseException as exc:
                    if self.entries.get(key) is e:
                        del self.entries[key]
                    e.loading.set_result(None)
                    if isinstance(exc, KafkaProtocolError):
                        raise
                    if isinstance(exc, Exception):
                        log.exception("share group %s: cannot load %s", group, part.tp)
                        raise KafkaProtocolError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)) from None
                    raise
                e.loading.set_result(None)
            else:
                await asyncio.shield(e.loading)
                if e.sp is None:
                    raise KafkaProtocolError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the share state did not load")
        return e

    def loaded(self, group: str, topic_id: uuid.UUID, topic: str, index: int) -> Entry:
        """The share partition if it is loaded here (acknowledgements never load one: as
        Kafka's, they answer UNKNOWN_TOPIC_OR_PARTITION for a share partition this leader
        has not fetched from); KafkaProtocolError when this broker does not lead it."""
        part = self.replicas.leader_partition(topic, index)
        e = self.entries.get((group, topic_id, index))
        if e is None or e.sp is None or e.part is not part or e.leader_epoch != part.state.leader_epoch:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no share partition loaded")
        return e

    async def _load(self, e: Entry) -> None:
        if self.persister is None:
            raise KafkaProtocolError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no share state persister")
        s = self.settings(e.group)
        st = await self.persister.read(e.group, e.topic_id, e.partition, e.leader_epoch)
        if st.error:
            raise KafkaProtocolError(st.error, "reading the share-partition state")
        lg = e.part.log
        sp = SharePartition(0, lock_ms=s.lock_ms, delivery_limit=s.delivery_limit, max_locks=s.max_locks)
        e.read_committed = s.read_committed
        if st.start_offset < 0:
            start = _initial_offset(lg, s.auto_offset_reset)
            err = await self.persister.initialize(e.group, e.topic_id, e.partition, max(st.state_epoch, 0), start)
            if err:
                raise KafkaProtocolError(err, "initializing the share-partition state")
            e.state_epoch = max(st.state_epoch, 0)
            sp.load(start, [])
        else:
            e.state_epoch = st.state_epoch
            sp.load(
                st.start_offset,
                [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in st.batches],
            )
        sp.move_start(lg.log_start_offset)
        sp.dirty = False
        e.sp = sp

    def _drop(self, e: Entry) -> None:
        if e.timer is not None:
            e.timer.cancel()
            e.timer = None
        key = (e.group, e.topic_id, e.partition)
        if self.entries.get(key) is e:
            del self.entries[key]

    def leadership_changed(self, became_leader: Sequence[Any], became_follower: Sequence[Any]) -> None:
        """The partitions whose leadership changed: their state is read again on next use
        (from what the persister holds)."""
        moved = {tp for tp in list(became_leader) + list(became_follower)}
        if not moved:
            return
        for e in list(self.entries.values()):
            if e.part.tp in moved:
                self._drop(e)
                self.replicas.purgatory.high_watermark_moved(e.wake_key)

    # ------------------------------------------------------------------ reading

    def read(self, entries: Sequence[Entry | int], max_bytes: int) -> ShareRead:
        """Reads each partition (an Entry, or the error code it answers with) from its
        next fetch offset, in order, at most max_bytes over all (the first batch whole)."""
        now = _now_ms()
        reads: list[PartitionRead] = []
        watches: list[tuple[Hashable, int]] = []
        total = 0
        errors = False
        first = True
        for e in entries:
            if isinstance(e, int):
                reads.append(PartitionRead(None, e))
                errors = True
                continue
            r = PartitionRead(e)
            reads.append(r)
            sp = e.sp
            part = e.part
            if sp is None or not part.is_leader or part.state.leader_epoch != e.leader_epoch:
                r.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
                errors = True
                continue
            watches.append((part.tp, HIGH_WATERMARK))
            watches.append((e.wake_key, HIGH_WATERMARK))
            if sp.acquired:
                sp.expire(now)
            lg = part.log
            if sp.start < lg.log_start_offset:
                sp.move_start(lg.log_start_offset)
            if not sp.can_acquire():
                continue
            off = sp.next_fetch_offset()
            hw = lg.last_stable_offset if e.read_committed else lg.high_watermark
            if off >= hw:
                continue
            if max_bytes - total <= 0 and not first:
                continue
            try:
                sl = lg.read(off, max(max_bytes - total, 0), hw, min_one_batch=first)
            except Exception as exc:  # OffsetOutOfRange after a truncation, EMFILE: nothing this time
                log.debug("share fetch of %s at %d: %s", part.tp, off, exc)
                continue
            if sl is not None:
                r.records = sl
                total += sl.length
                first = False
        return ShareRead(reads, total, errors, watches)

    def acquire(
        self, member: str, read: ShareRead, max_records: int, strict: bool
    ) -> list[tuple[FileSlice | None, list[tuple[int, int, int]]]]:
        """Acquires for `member` what `read` read, partition by partition, at most
        max_records over all: (the records to send, the acquired runs) of each."""
        now = _now_ms()
        out: list[tuple[FileSlice | None, list[tuple[int, int, int]]]] = []
        left = max_records
        for r in read.partitions:
            sl = r.records
            e = r.entry
            if sl is None or e is None or e.sp is None or left <= 0:
                if sl is not None:
                    sl.close()
                    r.records = None
                out.append((None, []))
                continue
            batches, ends, pids = _batches(sl)
            acquired = e.sp.acquire(member, batches, now, left, whole_batches=not strict) if batches else []
            if acquired and e.read_committed:
                acquired = self._archive_aborted(e, member, batches, pids, acquired, now)
            if not acquired:
                sl.close()
                r.records = None
                out.append((None, []))
                continue
            left -= sum(last - first + 1 for first, last, _ in acquired)
            top = acquired[-1][1]
            for (_base, last), end in zip(batches, ends):
                if last >= top:
                    sl.length = end - sl.offset  # up to the last batch acquired from
                    break
            r.records = None  # handed to the answer
            out.append((sl, acquired))
            self._schedule(e)
        return out

    def _archive_aborted(
        self,
        e: Entry,
        member: str,
        batches: list[tuple[int, int]],
        pids: list[int],
        acquired: list[tuple[int, int, int]],
        now: float,
    ) -> list[tuple[int, int, int]]:
        """read_committed: the records of aborted transactions among what was just
        acquired are archived at once and left out of the acquired runs (Kafka's
        filterAbortedTransactionalAcquiredRecords); the consumer never sees them acquired."""
        assert e.sp is not None
        aborted = e.part.log.collect_aborted(batches[0][0], batches[-1][1] + 1)
        if not aborted:
            return acquired
        cut: list[tuple[int, int]] = []
        for (base, last), pid in zip(batches, pids):
            if pid >= 0 and any(a.producer_id == pid and a.first_offset <= base <= a.last_offset for a in aborted):
                cut.append((base, last))
        if not cut:
            return acquired
        out: list[tuple[int, int, int]] = []
        drop: list[tuple[int, int]] = []
        for first, last, n in acquired:
            pos = first
            for cf, cl in cut:
                if cl < pos or cf > last:
                    continue
                if cf > pos:
                    out.append((pos, cf - 1, n))
                drop.append((max(cf, pos), min(cl, last)))
                pos = min(cl, last) + 1
            if pos <= last:
                out.append((pos, last, n))
        if drop:
            e.sp.acknowledge(member, [(f, la, [REJECT]) for f, la in drop], now)
        return out

    # ------------------------------------------------------------------ acknowledging

    async def acknowledge(self, e: Entry, member: str, batches: Sequence[tuple[int, int, Sequence[int]]]) -> int:
        """Applies `member`'s acknowledgements to the partition and persists them; the
        partition's error code (0: done)."""
        sp = e.sp
        if sp is None or not e.part.is_leader or e.part.state.leader_epoch != e.leader_epoch:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        try:
            sp.acknowledge(member, batches, _now_ms())
        except AcknowledgeError as exc:
            log.debug("share group %s, %s: %s", e.group, e.part.tp, exc)
            return exc.code
        if sp.available_changed:
            self._wake(e)
        self._schedule(e)
        return await self.persist(e)

    async def persist(self, e: Entry) -> int:
        """Writes the partition's state if it changed since the last write; the error
        code of the write."""
        async with e.write_lock:
            sp = e.sp
            if sp is None or not sp.dirty or self.persister is None:
                return 0
            start = sp.start
            batches = sp.state_batches()
            err = await self.persister.write(
                e.group,
                e.topic_id,
                e.partition,
                e.state_epoch,
                e.leader_epoch,
                start,
                [StateBatch(f, la, st, n) for f, la, st, n in batches],
            )
            if err:
                sp.dirty = True
                log.warning("share group %s: writing the state of %s failed: %s", e.group, e.part.tp, _name(err))
                if err in (ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_LEADER_EPOCH):
                    # its offsets were reset (a new state epoch) or another leader took
                    # over: this state is stale; the next use reads it back
                    self._drop(e)
                    self._wake(e)
            return err

    def _persist_later(self, e: Entry) -> None:
        t = asyncio.get_running_loop().create_task(self.persist(e))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ locks and releases

    def _wake(self, e: Entry) -> None:
        """Records of the partition became available: waiting fetches read again."""
        assert e.sp is not None
        e.sp.available_changed = False
        self.replicas.purgatory.high_watermark_moved(e.wake_key)

    def _schedule(self, e: Entry) -> None:
        """Times the partition's next lock expiry."""
        sp = e.sp
        if sp is None or not sp.acquired:
            return
        deadline = sp.next_deadline()
        if deadline is None:
            return
        if e.timer is not None and e.timer_at <= deadline:
            return
        if e.timer is not None:
            e.timer.cancel()
        loop = asyncio.get_running_loop()
        e.timer_at = deadline
        e.timer = loop.call_at(deadline / 1000, self._expire, e)

    def _expire(self, e: Entry) -> None:
        e.timer = None
        sp = e.sp
        if sp is None or self.entries.get((e.group, e.topic_id, e.partition)) is not e:
            return
        nxt = sp.expire(_now_ms())
        if sp.available_changed:
            self._wake(e)
        if sp.dirty:
            self._persist_later(e)
        if nxt is not None:
            loop = asyncio.get_running_loop()
            e.timer_at = nxt
            e.timer = loop.call_at(nxt / 1000, self._expire, e)

    def release_member(self, group: str, member: str) -> None:
        """Releases everything `member` holds in the group's partitions led here."""
        for e in list(self.entries.values()):
            if e.group == group and e.sp is not None and e.sp.release_member(member):
                self._wake(e)
                self._persist_later(e)

    def on_member_left(self, group_id: str, member_id: str) -> None:
        """Interface 2: the member left the group, was fenced or expired."""
        self.sessions.remove(group_id, member_id)
        self.release_member(group_id, member_id)

    def on_group_deleted(self, group_id: str) -> None:
        for s in self.sessions.of_group(group_id):
            self.sessions.remove(s.group_id, s.member_id)
        for e in list(self.entries.values()):
            if e.group == group_id:
                self._drop(e)

    def connection_closed(self, connection: object) -> None:
        """The sessions the connection opened go, and their members' acquired records are
        released."""
        for s in self.sessions.of_connection(connection):
            self.sessions.remove(s.group_id, s.member_id)
            self.release_member(s.group_id, s.member_id)

    async def shutdown(self) -> None:
        for e in list(self.entries.values()):
            if e.timer is not None:
                e.timer.cancel()
                e.timer = None
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _initial_offset(lg: Any, reset: str) -> int:
    """Where a share partition never initialized starts (share.auto.offset.reset): the log
    start, the high watermark, or the first record at most the duration old (the high
    watermark when there is none)."""
    if reset == "earliest":
        return int(lg.log_start_offset)
    if reset.startswith("by_duration:"):
        since = int(time.time() * 1000) - duration_ms(reset.split(":", 1)[1])
        found = lg.offset_for_timestamp(since)
        if found is not None:
            return min(int(found[0]), int(lg.high_watermark))
    return int(lg.high_watermark)


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _batches(sl: FileSlice) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """The whole batches of a file range: (base offset, last offset) each, where each ends
    in the file, and the producer id of each transactional data batch (-1 for any other).
    One read of a batch's header per batch, never per record; a batch cut off at the
    range's end is left out."""
    fd = sl.fd
    pos = sl.offset
    end = pos + sl.length
    batches: list[tuple[int, int]] = []
    ends: list[int] = []
    pids: list[int] = []
    while pos + 27 <= end:
        head = os.pread(fd, 61, pos)
        if len(head) < 27:
            break
        base, length = _HEADER.unpack_from(head, 0)
        nxt = pos + 12 + length
        if length < 15 or nxt > end:
            break
        pid = -1
        if head[16] >= 2:
            (delta,) = _LAST_DELTA.unpack_from(head, 23)
            if len(head) >= 51:
                (attributes,) = _ATTRIBUTES.unpack_from(head, 21)
                if attributes & 0x10 and not attributes & 0x20:  # transactional, not a marker
                    (pid,) = _PRODUCER.unpack_from(head, 43)
        else:  # a message of the old formats: its offset is its (or its wrapper's last) record's
            delta = 0
        batches.append((base, base + delta))
        ends.append(nxt)
        pids.append(pid)
        pos = nxt
    return batches, ends, pids
