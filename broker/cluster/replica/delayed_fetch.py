"""What a fetch reads, and the wait of a fetch that cannot answer at once (Kafka's
FetchParams, LogReadResult and DelayedFetch).

ReplicaManager.fetch_records reads every partition of a fetch synchronously
(ReplicaManager.read_from_log, Kafka's readFromLog) and gives each a PartitionRead. A
fetch is answered with that first read — its FetchResult holds no DelayedFetch: nothing
to await, no coroutine, no task — when any of these holds (Kafka's conditions):

    it read min_bytes            (a follower's or a consumer's, the first batch counted whole)
    a partition answered with an error or a diverging epoch
    nothing it reads can move    (no partition led here to watch)
    its client has gone          (the connection closed)
    its wait is over             (max_wait_ms, already bounded by the handler, passed)

Otherwise what it read is let go (its file ranges closed) and it waits: a DelayedFetch
registers in the ReplicaManager's purgatory, in the same synchronous step as the read
that found too little (no move in between is missed), on each partition it read — its
high watermark for a consumer (the last stable offset of a read_committed one stays
below it), its log end for a follower — and is woken by appends, moves of the high
watermark and changes of leadership (every waiter re-checks then). Each wake reads every
partition again, and the first read that satisfies the conditions above is the answer;
one that does not is let go, and the wait goes on until the deadline.

The wait is generic over what it reads (`Read`: its bytes, whether it failed, what to
watch, how to let it go): a fetch from a share group's partitions (ShareFetch's long
poll) is the same wait over another read.

Invariants:
- a read's file ranges are either handed to the caller (the answer) or closed here;
- the answer is the last read, made after the last wake, never one from before a wait;
- DelayedFetch.complete() is awaited at most once, on the event loop.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, NamedTuple, Protocol, TypeVar

from broker.cluster.replica.purgatory import Purgatory, Watch

if TYPE_CHECKING:
    from broker.log import FileSlice
    from broker.log.txn_index import AbortedTxn


class FetchPartition(NamedTuple):
    """One partition a fetch reads (Kafka's FetchRequest.PartitionData)."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int  # partition_max_bytes
    current_leader_epoch: int = -1  # -1: not named
    last_fetched_epoch: int = -1  # a follower's (v12+): the epoch of its last record; -1: none
    topic_id: uuid.UUID | None = None  # v13+: each read resolves the topic's name from it again


@dataclass(slots=True)
class FetchParams:
    """What a fetch asks of every partition (Kafka's FetchParams)."""

    replica_id: int  # a follower's broker id; -1: a consumer
    max_bytes: int  # the whole answer (beyond the first batch, always whole)
    min_bytes: int
    max_wait_ms: int  # bounded by fetch.wait.max.ms (the handler's)
    received: float  # when the request came (the event loop's clock): the wait counts from then
    read_committed: bool = False  # isolation level 1: below the last stable offset

    @property
    def deadline(self) -> float:
        return self.received + max(self.max_wait_ms, 0) / 1000


class PartitionRead:
    """What one partition answers a fetch (Kafka's LogReadResult). With an error, the
    offsets are -1 and nothing was read."""

    __slots__ = ("error", "high_watermark", "last_stable_offset", "log_start_offset", "records", "aborted", "diverging")

    def __init__(self) -> None:
        self.error = 0
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        #: the file range to send (None: nothing this time)
        self.records: FileSlice | None = None
        #: read_committed: the aborted transactions the records overlap (None: none named)
        self.aborted: list[AbortedTxn] | None = None
        #: a follower whose last fetched epoch diverges here: (epoch, where it ends); no records
        self.diverging: tuple[int, int] | None = None


class Read(Protocol):
    """What a DelayedFetch re-reads after each wake (a LogReads, or a share fetch's read)."""

    @property
    def bytes(self) -> int: ...

    @property
    def errors(self) -> bool: ...

    @property
    def watches(self) -> Sequence[tuple[Hashable, int]]: ...

    def release(self) -> None: ...


class RemoteRecords(bytes):
    """Records read from remote storage (tiered storage): bytes, sent as they are, with the
    FileSlice's `length` and `close()` a fetch's answer expects of its records."""

    __slots__ = ()

    @property
    def length(self) -> int:
        return len(self)

    def close(self) -> None:
        pass


class RemoteReads(Protocol):
    """Reads of offsets a partition holds in remote storage only (broker/server/tier.py)."""

    async def read(
        self, tp: Hashable, offset: int, max_bytes: int, limit: int, min_one_batch: bool, read_committed: bool
    ) -> tuple[bytes, list[AbortedTxn] | None]:
        """(whole batches from `offset`, the aborted transactions they overlap for a
        read_committed read); KafkaProtocolError with the partition's error code."""
        ...


#: a partition of a fetch to read from remote storage: (its PartitionRead, partition,
#: offset, max bytes, limit, min one batch, read_committed)
PendingRemote = tuple["PartitionRead", Hashable, int, int, int, bool, bool]


class LogReads:
    """One read of every partition of a fetch (ReplicaManager.read_from_log), in the
    fetch's order. `remote`: partitions whose offsets are in remote storage only, read
    by RemoteFetch before the fetch is answered."""

    __slots__ = ("partitions", "bytes", "errors", "watches", "throttled_bytes", "remote")

    def __init__(
        self,
        partitions: list[PartitionRead],
        size: int,
        errors: bool,
        watches: list[tuple[Hashable, int]],
        throttled_bytes: int,
    ) -> None:
        self.partitions = partitions
        self.bytes = size  # the records' bytes
        self.errors = errors  # a partition answers with an error or a diverging epoch
        self.watches = watches  # (partition, HIGH_WATERMARK | LOG_END) whose moves end a wait
        #: a follower's: the bytes read from partitions this broker throttles as leader
        #: (-1: none throttled here)
        self.throttled_bytes = throttled_bytes
        self.remote: list[PendingRemote] = []

    def release(self) -> None:
        """Closes the file ranges read (a read that is not the answer)."""
        for r in self.partitions:
            if r.records is not None:
                r.records.close()


R = TypeVar("R", bound=Read)


def satisfied(read: Read, min_bytes: int, deadline: float, gone: Callable[[], bool]) -> bool:
    """Is `read` the answer (the module docstring's conditions; Kafka's
    DelayedFetch.tryComplete)? The event loop's clock is looked at last: only a fetch that
    would wait needs it."""
    return (
        read.bytes >= min_bytes
        or read.errors
        or not read.watches
        or gone()
        or asyncio.get_running_loop().time() >= deadline
    )


def _never() -> bool:
    return False


class DelayedFetch(Generic[R]):
    """A fetch waiting in the purgatory for enough to read (see the module docstring).
    Registers at once: create it in the same synchronous step as the read that found too
    little."""

    __slots__ = ("purgatory", "read", "min_bytes", "deadline", "gone", "_watch")

    def __init__(
        self,
        purgatory: Purgatory,
        read: Callable[[], R],
        min_bytes: int,
        deadline: float,
        watches: Sequence[tuple[Hashable, int]],
        gone: Callable[[], bool] = _never,
    ) -> None:
        self.purgatory = purgatory
        self.read = read  # reads again: the answer, or what it lets go
        self.min_bytes = min_bytes
        self.deadline = deadline
        self.gone = gone
        self._watch: Watch = purgatory.watch(watches)

    async def complete(self) -> R:
        """The first read after a wake that satisfies the conditions, or the read at the
        deadline."""
        loop = asyncio.get_running_loop()
        watch = self._watch
        while True:
            await watch.wait(self.deadline - loop.time())
            read = self.read()
            if satisfied(read, self.min_bytes, self.deadline, self.gone):
                return read
            read.release()
            watch = self.purgatory.watch(read.watches)


class RemoteFetch:
    """A fetch with partitions to read from remote storage (Kafka's DelayedRemoteFetch):
    answered once those reads are done, in worker threads, whatever min_bytes asks. A
    read that fails answers its partition with the error (KAFKA_STORAGE_ERROR for a
    store that fails or holds something damaged), never with other bytes."""

    __slots__ = ("_read", "_reads")

    def __init__(self, read: LogReads, reads: RemoteReads) -> None:
        self._read = read
        self._reads = reads

    async def complete(self) -> LogReads:
        from broker.protocol.errors import KafkaProtocolError

        read = self._read
        for r, tp, offset, max_bytes, limit, min_one, committed in read.remote:
            try:
                data, aborted = await self._reads.read(tp, offset, max_bytes, limit, min_one, committed)
            except KafkaProtocolError as exc:
                r.error = exc.code
                r.high_watermark = r.last_stable_offset = r.log_start_offset = -1
                read.errors = True
                continue
            if data:
                r.records = RemoteRecords(data)  # type: ignore[assignment]
                r.aborted = aborted or None
                read.bytes += len(data)
        read.remote = []
        return read


class FetchResult:
    """What ReplicaManager.fetch_records returns. When `pending` is False, `read` is the
    answer now (await nothing); when True the fetch waits and `await wait()` returns the
    answer's read."""

    __slots__ = ("read", "pending", "_delayed", "_completed")

    def __init__(
        self,
        read: LogReads | None,
        delayed: DelayedFetch[LogReads] | RemoteFetch | None = None,
        completed: Callable[[LogReads], None] | None = None,
    ) -> None:
        self.read = read
        self.pending = delayed is not None  # an attribute, not a property: read on every fetch
        self._delayed = delayed
        self._completed = completed

    async def wait(self) -> LogReads:
        if self._delayed is not None:
            read = await self._delayed.complete()
            self._delayed = None
            if self._completed is not None:
                self._completed(read)
            self.read = read
            self.pending = False
        assert self.read is not None
        return self.read
