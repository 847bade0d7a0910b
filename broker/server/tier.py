"""Tiered storage in the broker (remote.log.storage.system.enable; docs/tiered-storage.md):
broker/tier/'s parts run for the partitions this broker leads.

- The remote log metadata lives in __remote_log_metadata (Kafka's records, partitions and
  partitioner; `remote.log.metadata.topic.num.partitions` 50), written through the
  broker's own partitions (ReplicaPartitionWriter, acks=all) and replayed from them at
  start. A broker alone leads every partition of it (tiered storage refuses
  zookeeper.connect so far).
- Every remote.log.manager.task.interval.ms, for each partition led here whose topic has
  remote.storage.enable: copy what is rolled and stable, then total retention of the
  remote segments (broker/tier/copier.py). Local retention is the log manager's
  (Log.delete_old_segments knows a tiered log). A topic whose remote storage was turned
  off with remote.log.delete.on.disable loses its remote segments.
- A consumer's Fetch of an offset only in remote storage is read by RemoteLogReader in a
  worker thread (ReplicaManager.remote_reads), with the aborted transactions a
  read_committed consumer needs from the remote transaction indexes and the local one.
- Topic deletion deletes the partition's remote segments.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Hashable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from broker.config import BrokerConfig
from broker.log import OffsetOutOfRange, TopicPartition
from broker.log.log import Log
from broker.log.txn_index import ENTRY_SIZE, AbortedTxn
from broker.native import BatchBuilder, iter_batches
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.server.partition_writer import ReplicaPartitionWriter
from broker.tier import metadata as md
from broker.tier.copier import RemoteLogManager
from broker.tier.reader import RemoteLogReader
from broker.tier.storage import IndexType, RemoteResourceNotFound, RemoteStorageError, TopicIdPartition, storage_manager

log = logging.getLogger(__name__)

METADATA_PARTITIONS = 50  # Kafka's remote.log.metadata.topic.num.partitions default
WRITE_TIMEOUT_MS = 30_000
CACHE_DIR = "remote-log-index-cache"  # Kafka's name, in the first log dir


class TopicMetadataLog:
    """__remote_log_metadata through the broker's partitions (a MetadataLog)."""

    def __init__(self, writer: ReplicaPartitionWriter, partitions: int = METADATA_PARTITIONS):
        self.writer = writer
        self.partitions = partitions

    async def publish(self, record: md.Record) -> None:
        tp_ = record.tp if isinstance(record, md.PartitionDelete) else record.segment_id.tp
        tp = TopicPartition(md.TOPIC, md.metadata_partition(tp_, self.partitions))
        b = BatchBuilder()
        b.append(int(time.time() * 1000), None, md.encode(record))
        write = self.writer.append(tp, bytearray(b.build()), WRITE_TIMEOUT_MS)
        error = write.error or await write.wait()
        if error:
            raise RemoteStorageError(
                f"writing remote log metadata to {tp}: {ErrorCode(error).name} {write.error_message or ''}".strip()
            )

    def records(self) -> Iterable[md.Record]:
        for p in range(self.partitions):
            tp = TopicPartition(md.TOPIC, p)
            if not self.writer.is_leader(tp):
                continue
            offset, end = self.writer.loadable_range(tp)
            while offset < end:
                data = self.writer.read(tp, offset, 1 << 20, end)
                batches = list(iter_batches(data, validate=True))
                if not batches:
                    break
                for batch in batches:
                    for rec in batch.records():
                        if rec.value is not None:
                            try:
                                yield md.decode(rec.value)
                            except md.MetadataError as exc:
                                log.warning("%s offset %d: %s; skipped", tp, rec.offset, exc)
                offset = batches[-1].last_offset + 1


def _read_txn_entries(data: bytes) -> list[AbortedTxn]:
    import struct

    out = []
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last, lso = struct.unpack_from(">hqqqq", data, pos)
        if version != 0:
            raise RemoteStorageError(f"transaction index entry of version {version} at byte {pos}")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


class TieredStorage:
    """The broker's tiered storage (see the module docstring)."""

    def __init__(
        self,
        config: BrokerConfig,
        broker_id: int,
        writer: ReplicaPartitionWriter,
        partitions: Callable[[], Iterable[tuple[TopicPartition, Any]]],
        create_topic: Callable[[str, int, int, dict[str, str]], Awaitable[object]],
        wait_led: Callable[[Callable[[], bool], float], Awaitable[bool]],
    ):
        self.config = config
        self.interval_s = config["remote.log.manager.task.interval.ms"] / 1000
        self.rsm = storage_manager(config["remote.log.storage.manager.class.name"], config.rsm_config)
        self.meta = TopicMetadataLog(writer)
        self.rlm = RemoteLogManager(broker_id, self.rsm, self.meta)
        self.reader = RemoteLogReader(
            self.rsm,
            self.rlm.cache,
            os.path.join(config.log_dirs[0], CACHE_DIR),
            cache_bytes=config["remote.log.index.file.cache.total.size.bytes"],
        )
        self._writer = writer
        self._partitions = partitions
        self._create_topic = create_topic
        self._wait_led = wait_led
        self._attached: dict[TopicPartition, TopicIdPartition] = {}
        self._logs: dict[TopicPartition, Log] = {}
        self._reads = ThreadPoolExecutor(2, thread_name_prefix="remote-read")
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._pass_lock = asyncio.Lock()

    # ------------------------------------------------------------------ start and stop

    async def start(self) -> None:
        """Creates __remote_log_metadata (once), waits until its partitions are led here,
        replays them, cleans orphans and starts the passes."""
        from broker.protocol.errors import KafkaProtocolError as _Err

        try:
            await self._create_topic(
                md.TOPIC,
                METADATA_PARTITIONS,
                1,
                {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"},
            )
        except _Err as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        tps = [TopicPartition(md.TOPIC, p) for p in range(METADATA_PARTITIONS)]
        if not await self._wait_led(lambda: all(self._writer.is_leader(tp) for tp in tps), 60):
            raise RuntimeError(f"{md.TOPIC}'s partitions were not led here within 60 s")
        skipped = self.rlm.cache.replay_records(self.meta.records())
        log.info(
            "tiered storage: %d remote segments of %d partitions in %s%s",
            sum(len(self.rlm.cache.copied(p)) for p in self.rlm.cache.partitions()),
            len(self.rlm.cache.partitions()),
            md.TOPIC,
            f" ({skipped} records skipped)" if skipped else "",
        )
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        self._reads.shutdown(wait=True)
        self.rlm.close()

    async def _run(self) -> None:
        first = True
        while not self._closed:
            try:
                await self.run_pass(clean_orphans=first)
                first = False
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("tiered storage pass failed")
            await asyncio.sleep(self.interval_s)

    # ------------------------------------------------------------------ the passes

    def _tiered(self) -> list[tuple[TopicPartition, Log, TopicIdPartition]]:
        out = []
        for tp, part in self._partitions():
            lg = part.log
            if not part.is_leader or lg is None or lg.topic_id is None or tp.topic == md.TOPIC:
                continue
            if lg.remote_log_enabled or tp in self._attached:
                out.append((tp, lg, TopicIdPartition(lg.topic_id, tp.topic, tp.partition)))
        return out

    async def run_pass(self, clean_orphans: bool = False) -> None:
        """One pass: orphans (first), then per led tiered partition copy and expiry."""
        async with self._pass_lock:
            if clean_orphans:
                await self.rlm.clean_orphans()
            for tp, lg, tip in self._tiered():
                if lg.remote_log_enabled:
                    if self._attached.get(tp) != tip:
                        self.rlm.attach(lg, tip)
                        self._attached[tp] = tip
                        self._logs[tp] = lg
                        lg.remote_timestamp_lookup = partial(self.offset_for_timestamp, tip, lg)
                    await self.rlm.clean_orphans(tip)
                    await self.rlm.copy(lg, tip)
                    await self.rlm.expire(lg, tip)
                elif lg.config["remote.log.delete.on.disable"]:
                    # remote storage turned off, its data to go (KIP-950)
                    await self.rlm.delete_partition(tip)
                    lg.log_start_offset = max(lg.log_start_offset, lg.local_log_start_offset)
                    self._attached.pop(tp, None)
                    self._logs.pop(tp, None)

    def partition_deleted(self, tp: TopicPartition, topic_id: uuid.UUID | None) -> None:
        """Topic deletion: the partition's remote segments go (in the background)."""
        tip = self._attached.pop(tp, None)
        self._logs.pop(tp, None)
        if tip is None and topic_id is not None:
            tip = TopicIdPartition(topic_id, tp.topic, tp.partition)
        if tip is None or not self.rlm.cache.segments(tip):
            return

        async def delete(tip: TopicIdPartition) -> None:
            try:
                async with self._pass_lock:
                    await self.rlm.delete_partition(tip)
                log.info("%s: remote segments deleted with the topic", tp)
            except Exception as exc:
                log.error("%s: deleting its remote segments failed: %s", tp, exc)

        asyncio.get_running_loop().create_task(delete(tip))

    def tip(self, tp: TopicPartition) -> TopicIdPartition | None:
        """The partition's id in the remote metadata, once a pass has taken it."""
        return self._attached.get(tp)

    # ------------------------------------------------------------------ reads

    async def read(
        self, tp: Hashable, offset: int, max_bytes: int, limit: int, min_one_batch: bool, read_committed: bool
    ) -> tuple[bytes, list[AbortedTxn] | None]:
        """ReplicaManager.remote_reads: a consumer's read of `offset` in remote storage."""
        assert isinstance(tp, TopicPartition)
        tip = self._attached.get(tp)
        lg = self._logs.get(tp)
        if tip is None or lg is None:
            raise KafkaProtocolError(ErrorCode.OFFSET_OUT_OF_RANGE, f"{tp}: offset {offset} is not readable here")
        loop = asyncio.get_running_loop()
        try:
            data = await loop.run_in_executor(
                self._reads, self.reader.read, tip, offset, max_bytes, min_one_batch, limit
            )
            aborted = None
            if read_committed and data:
                last = [b.last_offset for b in iter_batches(data)][-1]
                aborted = await loop.run_in_executor(self._reads, self._aborted, tip, offset, last + 1)
                local = lg.collect_aborted(offset, last + 1)
                aborted = sorted({*aborted, *local}, key=lambda a: a.first_offset)
        except OffsetOutOfRange as exc:
            raise KafkaProtocolError(ErrorCode.OFFSET_OUT_OF_RANGE, str(exc)) from None
        except RemoteStorageError as exc:
            log.error("%s: reading offset %d from remote storage failed: %s", tp, offset, exc)
            raise KafkaProtocolError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None
        return data, aborted

    def offset_for_timestamp(self, tip: TopicIdPartition, lg: Log, timestamp: int) -> tuple[int, int] | None:
        """ListOffsets by timestamp in remote storage: the first record at or after
        `timestamp` (and the log start offset) in the copied segments, found from the
        segment's time index, None when every remote record is older. Blocking, as the
        local lookups are (reads of the store through the chunk cache); a store that fails
        answers None, and the local log is looked at instead."""
        import struct

        try:
            for seg in self.rlm.cache.copied(tip):
                if seg.end_offset < lg.log_start_offset or seg.max_timestamp_ms < timestamp:
                    continue
                offset = max(seg.start_offset, lg.log_start_offset)
                raw = self.rsm.fetch_index(seg.segment_id, seg.start_offset, IndexType.TIMESTAMP)
                for ts, rel in struct.iter_unpack(">qi", raw[: len(raw) - len(raw) % 12]):
                    if ts >= timestamp:
                        break
                    offset = max(offset, seg.start_offset + rel)
                while offset <= seg.end_offset:
                    data = self.reader.read(tip, offset, 1 << 20)
                    batches = list(iter_batches(data))
                    if not batches:
                        break
                    for b in batches:
                        if b.max_timestamp < timestamp or b.last_offset < lg.log_start_offset:
                            continue
                        for rec in b.records():
                            if rec.offset >= lg.log_start_offset and rec.timestamp >= timestamp:
                                return (rec.offset, rec.timestamp)
                    offset = batches[-1].last_offset + 1
        except (RemoteStorageError, OffsetOutOfRange) as exc:
            log.warning("%s: timestamp lookup in remote storage failed: %s", tip, exc)
        return None

    def _aborted(self, tip: TopicIdPartition, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions of the remote segments from the one holding
        `fetch_offset` on, whose marker is at or after it and first offset below `upper`
        (Kafka's RemoteLogManager.collectAbortedTransactions)."""
        out = []
        for seg in self.rlm.cache.copied(tip):
            if seg.end_offset < fetch_offset or seg.txn_index_empty:
                continue
            try:
                raw = self.rsm.fetch_index(seg.segment_id, seg.start_offset, IndexType.TRANSACTION)
            except RemoteResourceNotFound:
                continue
            for e in _read_txn_entries(raw):
                if e.last_offset >= fetch_offset and e.first_offset < upper:
                    out.append(e)
        return out
