"""What an append as leader answers, and the wait of those that cannot answer at once
(Kafka's ProduceResponse.PartitionResponse and DelayedProduce).

ReplicaManager.append_records appends every partition synchronously and gives each a
PartitionResult. Most appends are complete then — acks=0 and acks=1 without a flush
policy, acks=-1 on a high watermark that already covers the batch (a broker alone), every
failure — and their AppendResult holds no DelayedProduce: nothing to await, no coroutine,
no task. The others wait, partition by partition, in two steps:

    flush         the topic's flush policy asked for an fsync (flush.messages,
                  flush.ms; acks 1 and -1): the group commit that makes the batch durable
                  (Partition.flush); KAFKA_STORAGE_ERROR when the fsync fails
    replication   acks=-1: sleeps in the purgatory, woken by every move of the high
                  watermark (and every change of leadership), until
                  Partition.check_enough_replicas_reach_offset decides the partition —
                  NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND or NOT_LEADER_OR_FOLLOWER — or
                  timeout_ms passes (REQUEST_TIMED_OUT, counted from the start of this step)

Invariants:
- the records of a partition without an error are in the local log when append_records
  returns; only the waiting is asynchronous;
- a partition answered with an error is not waited for any more (Kafka's acksPending),
  and a partition's answer, once decided, is final;
- a Partition the ReplicaManager no longer holds for its topic partition (deleted, or
  created again) is NOT_LEADER_OR_FOLLOWER at once, as Kafka's getPartitionOrError;
- AppendResult.wait() is awaited at most once, on the event loop; its caller reads the
  results after it returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from broker.cluster.replica.partition import Partition
from broker.cluster.replica.purgatory import HIGH_WATERMARK, Purgatory
from broker.log import LogStorageError, TopicPartition
from broker.protocol.errors import ErrorCode


@dataclass(slots=True)
class PartitionResult:
    """One partition's answer to an append (Kafka's ProduceResponse.PartitionResponse),
    plus the last offset the group coordinator needs. The offsets are those of the
    append (of its first write, for a retried idempotent batch); -1 when it failed."""

    error: int = 0
    error_message: str | None = None
    base_offset: int = -1
    last_offset: int = -1
    log_append_time: int = -1  # -1 unless the topic uses LogAppendTime
    log_start_offset: int = -1
    #: INVALID_RECORD's record errors (KIP-467): [(the record's index in the batch, why)]
    record_errors: list[tuple[int, str | None]] | None = None


class AppendResult:
    """What ReplicaManager.append_records returns: one PartitionResult per entry, in the
    entries' order. When `pending` is False they are final now (await nothing); when True
    some partition still waits and `await wait()` returns them once every wait is over."""

    __slots__ = ("partitions", "pending", "_delayed")

    def __init__(self, partitions: list[PartitionResult], delayed: DelayedProduce | None = None) -> None:
        self.partitions = partitions
        self.pending = delayed is not None  # an attribute, not a property: read on every produce
        self._delayed = delayed

    async def wait(self) -> list[PartitionResult]:
        if self._delayed is not None:
            await self._delayed.complete()
            self._delayed = None
            self.pending = False
        return self.partitions


class AcksPending(NamedTuple):
    """A partition of an acks=-1 append waiting for the ISR (Kafka's ProducePartitionStatus)."""

    result: PartitionResult
    partition: Partition
    required_offset: int  # its last offset + 1: the high watermark must reach it
    leader_epoch: int  # the leader epoch it was appended in


class DelayedProduce:
    """The waiting partitions of one append_records call (see the module docstring)."""

    __slots__ = ("purgatory", "lookup", "timeout_ms", "flushes", "acks_pending")

    def __init__(
        self, purgatory: Purgatory, lookup: Callable[[TopicPartition], Partition | None], timeout_ms: int
    ) -> None:
        self.purgatory = purgatory
        self.lookup = lookup  # tp -> the Partition the ReplicaManager holds now
        self.timeout_ms = timeout_ms
        self.flushes: list[tuple[PartitionResult, Partition]] = []
        self.acks_pending: list[AcksPending] = []

    async def complete(self) -> None:
        if self.flushes:
            await self._flush()
        if self.acks_pending:
            await self._await_replication()

    async def _flush(self) -> None:
        """One group commit per partition, concurrently; a failed fsync fails every batch of
        its partition (nothing above the recovery point is known durable)."""
        parts = list(dict.fromkeys(part for _, part in self.flushes))
        flushing = [(part, fut) for part in parts if (fut := part.flush()) is not None]
        outcomes = await asyncio.gather(*(fut for _, fut in flushing), return_exceptions=True)
        failed: dict[Partition, LogStorageError] = {}
        for (part, _), outcome in zip(flushing, outcomes):
            if isinstance(outcome, LogStorageError):
                failed[part] = outcome
            elif isinstance(outcome, BaseException):
                raise outcome
        for result, part in self.flushes:
            exc = failed.get(part)
            if exc is not None:
                result.error, result.error_message = ErrorCode.KAFKA_STORAGE_ERROR, str(exc)
            elif part.log.closed:
                # closed before its fsync (its log dir failed, or it was deleted): not durable
                result.error = ErrorCode.KAFKA_STORAGE_ERROR
                result.error_message = f"the log of {part.tp} was closed before the batch was flushed"

    async def _await_replication(self) -> None:
        """Sleeps in the purgatory until every partition is decided or the timeout passes.
        Each round checks, then registers (purgatory.wait registers before it first
        suspends): no move of a high watermark between the two is missed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(self.timeout_ms, 0) / 1000
        waiting = [w for w in self.acks_pending if not w.result.error]
        while True:
            waiting = [w for w in waiting if not self._try_complete(w)]
            if not waiting:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await self.purgatory.wait([(w.partition.tp, HIGH_WATERMARK) for w in waiting], remaining)
        for w in waiting:
            w.result.error = ErrorCode.REQUEST_TIMED_OUT

    def _try_complete(self, w: AcksPending) -> bool:
        """Decides one partition if it can (Kafka's DelayedProduce.tryComplete, one
        partition): True once its answer is in its result."""
        part = w.partition
        if self.lookup(part.tp) is not part:
            error: int = ErrorCode.NOT_LEADER_OR_FOLLOWER
        else:
            done, error = part.check_enough_replicas_reach_offset(w.required_offset, w.leader_epoch)
            if not done:
                return False
        if error:
            w.result.error, w.result.error_message = error, _wait_error_message(part, error, self.lookup)
        return True


def _wait_error_message(part: Partition, error: int, lookup: Callable[[TopicPartition], Partition | None]) -> str:
    if error == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
        return (
            f"the ISR {part.maximal_isr} of {part.tp} shrank below min.insync.replicas "
            f"{part.log.config.min_insync_replicas} while waiting"
        )
    if part.is_leader and lookup(part.tp) is part:
        return f"the batch of {part.tp} was truncated while it waited for the ISR"
    return f"this broker stopped leading {part.tp} while the batch waited for the ISR"
