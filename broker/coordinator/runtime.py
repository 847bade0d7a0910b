"""The coordinator runtime (Kafka's CoordinatorRuntime of coordinator-common): the part
every coordinator that keeps its state in a compacted internal topic shares.

A coordinator — the group coordinator on __consumer_offsets, the transaction
coordinator on __transaction_state, a share coordinator on __share_group_state — keys
its state by an id (group id, transactional id, share-partition key) placed on one
partition of its topic (placement.py). The broker leading that partition is the id's
coordinator. The runtime owns, per coordinator:

- placement: the topic's partition count, `partition_for(key)`, `coordinator_node(key)`
  (FindCoordinator) and `check(key)`: 0, or why a request for the key is not served
  here (COORDINATOR_NOT_AVAILABLE without the topic, NOT_COORDINATOR where another broker
  leads the partition, COORDINATOR_LOAD_IN_PROGRESS while this one has not loaded it);
- the topic itself: `ensure_topic` creates it compacted on first use, with fewer
  replicas than configured while fewer brokers are alive (as Kafka does), and loads
  what this broker leads of it;
- one shard per partition it leads (Kafka's CoordinatorShard: the partition's state
  machine), built by the coordinator's `new_shard(partition, coordinator epoch)`,
  loaded by replaying the partition (loader.py) and told `on_loaded`; told
  `on_unloaded` and dropped when this broker stops leading the partition. The
  coordinator epoch is the partition's leader epoch when it was loaded;
- leadership: `leadership_changed` is the replica manager's leadership listener —
  a partition led here is loaded (one loaded at an older leader epoch first
  unloaded), one no longer led is unloaded. Loading is synchronous on the event loop,
  so no request sees a partition half loaded;
- writes: `append` builds one batch (a transactional one for a producer's records)
  and appends it through the PartitionWriter with acks=all; the caller waits on the
  returned write for the ISR and maps its codes to its own answers;
- timers and tasks: `every` runs a job periodically, `spawn` a background task; both
  end with `close`.

What a shard holds is the coordinator's: the group and transaction coordinators keep
one index over all their partitions (their shards replay into it and take their
partition's entries out of it when unloaded); a share coordinator may keep its state in
the shard itself.

Everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from broker.coordinator import loader
from broker.coordinator.loader import LOAD_CHUNK, LoadSummary
from broker.coordinator.partition_writer import ClusterView, PartitionWrite, PartitionWriter
from broker.coordinator.placement import partition_for
from broker.log import TopicPartition
from broker.native import BatchBuilder
from broker.protocol.errors import ErrorCode, KafkaProtocolError

log = logging.getLogger(__name__)

#: how long ensure_topic waits for the topic it created to reach the metadata cache
TOPIC_WAIT_S = 5.0


class CoordinatorShard(Protocol):
    """One partition's state machine (Kafka's CoordinatorShard): replayed from the
    partition when it is loaded (loader.CoordinatorPlayback), then told so."""

    def replay(self, offset: int, producer_id: int, producer_epoch: int, key: bytes, value: bytes | None) -> None: ...

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None: ...

    def on_loaded(self, summary: LoadSummary) -> None:
        """The partition is loaded and its coordinator active: requests are served."""
        ...

    def on_unloaded(self) -> None:
        """This broker no longer leads the partition (or leads it at a newer epoch and
        loads it again): its requests are answered NOT_COORDINATOR from now on."""
        ...


S = TypeVar("S", bound=CoordinatorShard)


@dataclass
class CoordinatorContext(Generic[S]):
    """A partition whose coordinator is active here."""

    partition: int
    #: the partition's leader epoch when it was loaded
    epoch: int
    shard: S


class CoordinatorRuntime(Generic[S]):
    def __init__(
        self,
        topic: str,
        num_partitions: int,
        writer: PartitionWriter,
        cluster: ClusterView,
        new_shard: Callable[[int, int], S],
    ) -> None:
        self.topic = topic
        #: the topic's partition count: the configured one until the topic is known
        self.num_partitions = num_partitions
        self.writer = writer
        self.cluster = cluster
        self._new_shard = new_shard
        #: how much of the partition a load reads at a time
        self.load_chunk = LOAD_CHUNK
        self._contexts: dict[int, CoordinatorContext[S]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    # ------------------------------------------------------------------ placement

    def has_topic(self) -> bool:
        return self.cluster.topic(self.topic) is not None

    def refresh_partitions(self) -> bool:
        """Takes the topic's partition count from the metadata; False without the topic."""
        info = self.cluster.topic(self.topic)
        if info is None:
            return False
        self.num_partitions = len(info.partitions)
        return True

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

    def coordinator_node(self, key: str) -> int:
        """The broker leading the key's partition; -1 without the topic or a leader."""
        info = self.cluster.topic(self.topic)
        if info is None:
            return -1
        return info.partitions[self.partition_for(key)].leader

    def check(self, key: str) -> int:
        """0 when the key's coordinator is active here, else the error its request gets."""
        if not self.has_topic():
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        p = self.partition_for(key)
        if not self.writer.is_leader(TopicPartition(self.topic, p)):
            return ErrorCode.NOT_COORDINATOR
        if p not in self._contexts:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return 0

    def is_loaded(self, partition: int) -> bool:
        return partition in self._contexts

    def epoch(self, partition: int) -> int | None:
        """The coordinator epoch of a partition loaded here; None when it is not."""
        ctx = self._contexts.get(partition)
        return ctx.epoch if ctx is not None else None

    def shard(self, partition: int) -> S | None:
        ctx = self._contexts.get(partition)
        return ctx.shard if ctx is not None else None

    # ------------------------------------------------------------------ the topic

    async def ensure_topic(
        self,
        create: Callable[[int, int, dict[str, str]], Awaitable[object]],
        partitions: int,
        replication_factor: int,
        replication_setting: str,
        configs: Callable[[int], dict[str, str]],
    ) -> None:
        """Creates the topic (compacted: `configs(replication factor)`) on first use, as
        Kafka does, with `replication_factor` replicas (fewer, with a warning, while the
        cluster has fewer live brokers), waits (bounded) for it to reach the metadata
        and loads the partitions led here."""
        if self.has_topic():
            return
        alive = len(self.cluster.brokers())
        rf = min(replication_factor, max(alive, 1))
        if rf < replication_factor:
            log.warning(
                "creating %s with replication factor %d: %s is %d but only %d brokers are alive",
                self.topic,
                rf,
                replication_setting,
                replication_factor,
                alive,
            )
        try:
            await create(partitions, rf, configs(rf))
        except KafkaProtocolError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        await self.cluster.wait_for(self.has_topic, TOPIC_WAIT_S)
        if self.refresh_partitions():
            self.load_all()

    # ------------------------------------------------------------------ loading and leadership

    def load_all(self) -> None:
        """Loads every partition led here and not loaded yet."""
        for p in range(self.num_partitions):
            if p not in self._contexts and self.writer.is_leader(TopicPartition(self.topic, p)):
                self.load(p)

    def load(self, partition: int) -> None:
        """Replays the partition into a new shard and activates it."""
        tp = TopicPartition(self.topic, partition)
        epoch = self.writer.leader_epoch(tp)
        shard = self._new_shard(partition, epoch)
        summary = loader.load(self.writer, tp, shard, self.load_chunk)
        self._contexts[partition] = CoordinatorContext(partition, epoch, shard)
        shard.on_loaded(summary)

    def unload(self, partition: int) -> None:
        ctx = self._contexts.pop(partition, None)
        if ctx is not None:
            ctx.shard.on_unloaded()

    def leadership_changed(
        self, became_leader: Iterable[TopicPartition], became_follower: Iterable[TopicPartition]
    ) -> None:
        """The replica manager's leadership listener: a partition of the topic no
        longer led here is unloaded, one led here is loaded (again, when what is loaded
        is of an older leader epoch)."""
        self.refresh_partitions()
        for tp in became_follower:
            if tp.topic == self.topic:
                self.unload(tp.partition)
        for tp in became_leader:
            if tp.topic != self.topic:
                continue
            loaded = self.epoch(tp.partition)
            if loaded is not None:
                if loaded == self.writer.leader_epoch(tp):
                    continue
                self.unload(tp.partition)  # a stale load of an older epoch
            self.load(tp.partition)

    # ------------------------------------------------------------------ writes

    def append(
        self,
        partition: int,
        records: Iterable[tuple[bytes, bytes | None]],
        timestamp_ms: int,
        timeout_ms: int,
        producer: tuple[int, int] | None = None,
    ) -> PartitionWrite:
        """Appends the records (a tombstone's value is None) as one batch — a
        transactional batch of `producer` (id, epoch) when given — to the partition,
        with acks=all. When the write has no error its records are in the local log;
        `wait()` on it waits for the ISR."""
        if producer is None:
            b = BatchBuilder()
        else:
            b = BatchBuilder(
                producer_id=producer[0], producer_epoch=producer[1], base_sequence=-1, is_transactional=True
            )
        for key, value in records:
            b.append(timestamp_ms, key, value)
        return self.writer.append(TopicPartition(self.topic, partition), bytearray(b.build()), timeout_ms)

    # ------------------------------------------------------------------ timers and tasks

    @property
    def closed(self) -> bool:
        return self._closed

    def every(self, interval_ms: int, job: Callable[[], object], what: str) -> None:
        """Runs `job` (a function, or one returning an awaitable that is awaited) every
        interval_ms until close; an exception is logged, the next run comes all the same."""
        self.spawn(self._every(interval_ms / 1000, job, what))

    async def _every(self, interval_s: float, job: Callable[[], object], what: str) -> None:
        while not self._closed:
            await asyncio.sleep(interval_s)
            try:
                result = job()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("%s: %s failed", self.topic, what)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Runs `coro` in the background until it ends or close cancels it."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Cancels the jobs and the background tasks and waits for them to end. The
        loaded partitions stay loaded (the broker is stopping)."""
        self._closed = True
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
