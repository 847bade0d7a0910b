"""`_schemas` on the log: the reader that keeps every broker's view current, and the one
writer, the broker leading `_schemas`' partition.

The reader (every broker). A task fetches the partition from its leader as a consumer
would (Fetch, replica id -1, read_uncommitted: up to the high watermark), over the
broker's own inter-broker channel (broker.cluster.channel, the inter-broker listener's
TLS and SASL), and applies each record to the view in offset order. It follows the
leader through failovers (the metadata cache names it); a topic deleted and created
again, or a log start moved past the view, starts the view again from the beginning.
Until `_schemas` exists the registry is empty.

The writer (the leader of `_schemas`-0, at most one per leader epoch). When this broker
becomes the leader it first lets its view catch up with its log end (everything the
previous leader acknowledged is there: the new leader was in the ISR), then appends a
NOOP naming itself (broker, leader epoch, URL) and the highest id ever given, and is
ready once its view has read that NOOP back. Each change then runs under one lock:
the view is caught up with the log end again (a record produced to `_schemas` by
anyone else is seen before ids are chosen), the registry plans the change from the view
(registry.py), its records are appended with acks=all through the replica layer's
PartitionWriter, and the change is answered once the view has read them back — with
the offset after them, which a broker that forwarded the change waits for in its own
view before answering its client (read-your-writes). A change this broker cannot finish
because it stopped leading is refused NOT_WRITER; the other brokers learn the new
writer's URL from its NOOP.

Ids are unique because one writer gives them, each from a view that has read every
record before (the lock and the catch-up), and a new writer starts above the highest id
any record or NOOP names. An id given in a record that a failover truncated (never
acknowledged, never in any view: views read below the high watermark) may be given
again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from broker.cluster.channel import BrokerChannel, ChannelError
from broker.cluster.metadata import BrokerInfo, TopicInfo
from broker.log import TopicPartition
from broker.native import BatchBuilder, iter_batches
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.fetch import FetchRequest
from broker.registry import errors as E, records as R
from broker.registry.state import RegistryState
from broker.timeouts import wait_for

log = logging.getLogger(__name__)

FETCH_WAIT_MS = 500
FETCH_MAX_BYTES = 8 * 1024 * 1024
RETRY_S = 0.2
T = TypeVar("T")


class PartitionWrite(Protocol):
    @property
    def error(self) -> int: ...

    @property
    def error_message(self) -> str | None: ...

    @property
    def last_offset(self) -> int: ...

    async def wait(self) -> int: ...


class PartitionWriter(Protocol):
    """What the writer needs of the replica layer (server/partition_writer.py implements it)."""

    def is_leader(self, tp: TopicPartition) -> bool: ...

    def leader_epoch(self, tp: TopicPartition) -> int: ...

    def append(self, tp: TopicPartition, records: bytearray, timeout_ms: int) -> PartitionWrite: ...

    def loadable_range(self, tp: TopicPartition) -> tuple[int, int]: ...


class TopicReader(Protocol):
    """What the registry reads of the cluster (the metadata cache)."""

    def topic(self, name: str) -> TopicInfo | None: ...

    def broker(self, broker_id: int) -> BrokerInfo | None: ...

    def brokers(self) -> Mapping[int, BrokerInfo]: ...

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool: ...


class NotWriter(Exception):
    """This broker does not (or no longer) lead _schemas: the change goes to the writer."""


class SchemasLog:
    def __init__(
        self,
        topic: str,
        broker_id: int,
        state: RegistryState,
        writer: PartitionWriter,
        metadata: TopicReader,
        create_topic: Callable[[], Awaitable[None]],
        url: str,
        timeout_s: float = 30.0,
    ):
        self.topic = topic
        self.tp = TopicPartition(topic, 0)
        self.broker_id = broker_id
        self.state = state
        self.writer = writer
        self.metadata = metadata
        self.create_topic = create_topic
        self.url = url
        self.timeout_s = timeout_s
        self.lock = asyncio.Lock()
        #: the leader epoch this broker writes in once ready (-1: not the writer)
        self.writer_epoch = -1
        self._ready = asyncio.Event()
        self._takeover: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._channels: dict[int, BrokerChannel] = {}
        self._topic_id: Any = None
        self.on_writer_identity: Callable[[tuple[int, int, str]], None] = lambda _identity: None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())
        if self.writer.is_leader(self.tp):
            self.leadership_changed([self.tp], [])

    async def close(self) -> None:
        for task in (self._reader, self._takeover):
            if task is not None:
                task.cancel()
        for task in (self._reader, self._takeover):
            if task is not None:
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()

    # ------------------------------------------------------------------ reading

    async def _read_loop(self) -> None:
        while True:
            try:
                await self._read_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("schema registry: reading %s failed; trying again", self.topic)
                await asyncio.sleep(1.0)

    def _leader(self) -> tuple[TopicInfo, int] | None:
        info = self.metadata.topic(self.topic)
        if info is None or 0 not in info.partitions:
            return None
        leader = info.partitions[0].leader
        return (info, leader) if leader >= 0 else None

    async def _read_once(self) -> None:
        found = self._leader()
        if found is None:
            if self.metadata.topic(self.topic) is None and getattr(self.metadata, "initialized", True):
                self.state.mark_caught_up()  # no _schemas yet: nothing to read
            await self.metadata.wait_for(lambda: self._leader() is not None, 1.0)
            return
        info, leader = found
        if self._topic_id is not None and info.topic_id != self._topic_id:
            log.warning("schema registry: %s was created again; reading it from the start", self.topic)
            self.state.reset()
        self._topic_id = info.topic_id
        broker = self.metadata.broker(leader)
        if broker is None:
            await asyncio.sleep(RETRY_S)
            return
        ch = self._channels.get(leader)
        if ch is None or (ch.host, ch.port) != (broker.host, broker.port):
            if ch is not None:
                await ch.close()
            ch = self._channels[leader] = BrokerChannel(
                broker.host,
                broker.port,
                client_id=f"broker-{self.broker_id}-schema-registry",
                request_timeout=self.timeout_s,
                reconnect_backoff=RETRY_S,
            )
        F = FetchRequest
        start = self.state.next_offset
        req = F(
            replica_id=-1,
            replica_state=F.ReplicaState(replica_id=-1, replica_epoch=-1),
            max_wait_ms=FETCH_WAIT_MS,
            min_bytes=1,
            max_bytes=FETCH_MAX_BYTES,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                F.FetchTopic(
                    topic=self.topic,
                    topic_id=info.topic_id,
                    partitions=[
                        F.FetchPartition(
                            partition=0,
                            current_leader_epoch=-1,
                            fetch_offset=start,
                            last_fetched_epoch=-1,
                            log_start_offset=-1,
                            partition_max_bytes=FETCH_MAX_BYTES,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
        )
        try:
            resp = await ch.request(req, timeout=self.timeout_s)
        except ChannelError as exc:
            log.debug("schema registry: fetching %s from broker %d: %s", self.topic, leader, exc)
            await asyncio.sleep(RETRY_S)
            return
        err = resp.error_code
        parts = [p for t in resp.responses for p in t.partitions]
        if err or not parts:
            await asyncio.sleep(RETRY_S)
            return
        p = parts[0]
        if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if start < p.log_start_offset or p.high_watermark < 0 or start > p.high_watermark:
                self._restart(p.log_start_offset if start < p.log_start_offset else 0, start)
            await asyncio.sleep(RETRY_S)
            return
        if p.error_code:
            # NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION ...: the metadata moves on
            await self.metadata.wait_for(lambda: False, RETRY_S)
            return
        if p.records is not None and len(p.records):
            self._apply(p.records, start)
        elif start > p.high_watermark >= 0:
            self._restart(0, start)
            return
        if self.state.next_offset >= p.high_watermark:
            self.state.mark_caught_up()

    def _restart(self, offset: int, was: int) -> None:
        log.warning(
            "schema registry: %s offset %d is gone (log start or end moved); reading again from %d",
            self.topic,
            was,
            offset,
        )
        if offset == 0:
            self.state.reset()
        else:
            self.state.next_offset = offset

    def _apply(self, data: Any, start: int) -> None:
        end = start
        for batch in iter_batches(data):
            if batch.next_offset <= start:
                continue
            end = max(end, batch.next_offset)
            if batch.is_control:
                continue
            for rec in batch.records():
                if rec.offset >= start:
                    self.state.apply(rec.offset, rec.key, rec.value)
        if end > start:
            self.state.applied(end)

    # ------------------------------------------------------------------ the writer

    def leadership_changed(self, became_leader: Any, became_follower: Any) -> None:
        """The replica manager's leadership listener."""
        if self.tp in became_follower and self.writer_epoch >= 0:
            log.info(
                "schema registry: broker %d no longer leads %s: it stops taking writes", self.broker_id, self.topic
            )
            self._stop_writing()
        if self.tp in became_leader:
            self._stop_writing()
            self.writer_epoch = self.writer.leader_epoch(self.tp)
            self._takeover = asyncio.get_running_loop().create_task(self._take_over(self.writer_epoch))

    def _stop_writing(self) -> None:
        self.writer_epoch = -1
        self._ready.clear()
        if self._takeover is not None:
            self._takeover.cancel()
            self._takeover = None

    @property
    def is_writer(self) -> bool:
        return self.writer_epoch >= 0 and self.writer.is_leader(self.tp)

    async def _take_over(self, epoch: int) -> None:
        while self.writer_epoch == epoch:
            try:
                async with self.lock:
                    await self._catch_up()
                    identity = (self.broker_id, epoch, self.url)
                    self.on_writer_identity(identity)
                    end = await self._append([(R.NOOP_KEY, R.noop_value(self.state.max_id, *identity))])
                    if not await self.state.wait_for(end, self.timeout_s):
                        raise E.timeout("the NOOP of the new writer was not read back")
                self._ready.set()
                log.info(
                    "schema registry: broker %d takes writes for %s (leader epoch %d, next id above %d)",
                    self.broker_id,
                    self.topic,
                    epoch,
                    self.state.max_id,
                )
                return
            except asyncio.CancelledError:
                raise
            except NotWriter:
                return
            except Exception as exc:
                log.warning("schema registry: broker %d cannot take writes yet (%s); trying again", self.broker_id, exc)
                await asyncio.sleep(0.5)

    async def _catch_up(self) -> None:
        """The view has read this broker's log to its end (everything there is committed
        once the high watermark reaches it)."""
        if not self.writer.is_leader(self.tp):
            raise NotWriter()
        _start, end = self.writer.loadable_range(self.tp)
        if not await self.state.wait_for(end, self.timeout_s):
            raise E.timeout(f"the registry's view did not read {self.topic} up to offset {end} in time")

    async def _append(self, records: list[tuple[bytes, bytes | None]]) -> int:
        """Appends with acks=all and waits for the ISR; the offset after the records."""
        b = BatchBuilder()
        ts = int(time.time() * 1000)
        for key, value in records:
            b.append(ts, key, value)
        w = self.writer.append(self.tp, bytearray(b.build()), int(self.timeout_s * 1000))
        if w.error:
            if w.error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                raise NotWriter()
            raise E.store_error(f"Error while writing to {self.topic}: {ErrorCode(w.error).name}")
        err = await w.wait()
        if err == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            raise NotWriter()
        if err == ErrorCode.REQUEST_TIMED_OUT:
            raise E.timeout("Write to the Kafka store timed out")
        if err:
            raise E.store_error(f"Error while writing to {self.topic}: {ErrorCode(err).name}")
        return w.last_offset + 1

    async def write(self, plan: Callable[[], tuple[T, list[tuple[bytes, bytes | None]]]]) -> tuple[T, int]:
        """Runs `plan` (a registry.plan_* call) as the writer and appends its records;
        (its result, the offset after its records). NotWriter when this broker does not
        lead _schemas."""
        if self.writer_epoch < 0:
            raise NotWriter()
        try:
            await wait_for(self._ready.wait(), self.timeout_s)
        except asyncio.TimeoutError:
            raise E.timeout("the registry's writer is not ready") from None
        epoch = self.writer_epoch
        async with self.lock:
            if self.writer_epoch != epoch or epoch < 0:
                raise NotWriter()
            await self._catch_up()
            result, records = plan()
            if not records:
                return result, self.state.next_offset
            end = await self._append(records)
            if not await self.state.wait_for(end, self.timeout_s):
                raise E.timeout("Write to the Kafka store timed out while waiting for it to be read back")
            return result, end

    async def ensure_topic(self) -> None:
        """Creates _schemas on the first write (a compacted topic of one partition) and
        waits (bounded) for its leader."""
        if self._leader() is not None:
            return
        if self.metadata.topic(self.topic) is None:
            await self.create_topic()
        if not await self.metadata.wait_for(lambda: self._leader() is not None, self.timeout_s):
            raise E.unknown_leader(f"{self.topic} has no leader")
