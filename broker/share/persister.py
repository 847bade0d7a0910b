"""The share-partition state persister (Kafka's Persister / DefaultStatePersister): how a
share-partition leader (broker/share/partition.py) and the group coordinator read and
write share-partition state, wherever its share coordinator is.

One per broker (`services.share_persister`). Each call is routed to the share
coordinator of the key "group:topic id:partition" — the broker leading the key's
partition of __share_group_state, from the metadata cache (what FindCoordinator key
type 2 answers): in process when that is this broker, otherwise with the
Initialize/Read/Write/Delete/ReadShareGroupStateSummary RPCs over an inter-broker
channel. NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE and a
failed channel are retried (the metadata may lag a leadership move; the new leader may
still be loading) with a growing backoff, within RETRY_S; after that the last error is
answered. __share_group_state is created on first use.

A share-partition never initialized reads back as `start_offset == -1` with no error
(the coordinator answers Kafka's INVALID_REQUEST "Read operation on uninitialized share
partition not allowed.", which the persister turns into that), so that its leader knows
to initialize it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from broker.cluster.channel import BrokerChannel, ChannelError
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.delete_share_group_state import DeleteShareGroupStateRequest
from broker.protocol.messages.initialize_share_group_state import InitializeShareGroupStateRequest
from broker.protocol.messages.read_share_group_state import ReadShareGroupStateRequest
from broker.protocol.messages.read_share_group_state_summary import ReadShareGroupStateSummaryRequest
from broker.protocol.messages.write_share_group_state import WriteShareGroupStateRequest
from broker.share.coordinator import READ_UNINITIALIZED, ShareCoordinator, ShareState
from broker.share.records import StateBatch, coordinator_key

if TYPE_CHECKING:
    from broker.cluster.cache import MetadataCache

__all__ = ["RETRY_S", "Persister", "ShareState", "StateBatch"]

log = logging.getLogger(__name__)

#: how long a call keeps retrying a coordinator that is moving or loading
RETRY_S = 15.0
#: how many share-partitions a delete or read_summary of many asks about at once
CONCURRENCY = 64
REQUEST_TIMEOUT_S = 10.0
_BACKOFF_S = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)

_RETRIABLE = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE}
)

T = TypeVar("T")
TP = tuple[uuid.UUID, int]


class Persister:
    def __init__(self, broker_id: int, coordinator: ShareCoordinator, metadata: MetadataCache) -> None:
        self.broker_id = broker_id
        self.coordinator = coordinator
        self.metadata = metadata
        self.channels: dict[int, BrokerChannel] = {}
        self._old: list[BrokerChannel] = []
        self.retry_s = RETRY_S

    # ------------------------------------------------------------------ the interface

    async def initialize(
        self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int, start_offset: int
    ) -> int:
        """InitializeShareGroupState: 0 or the error code."""
        c = self.coordinator

        async def local() -> int:
            return (await c.initialize(group_id, topic_id, partition, state_epoch, start_offset))[0]

        async def remote(ch: BrokerChannel) -> int:
            Q = InitializeShareGroupStateRequest
            req = Q(
                group_id=group_id,
                topics=[
                    Q.InitializeStateData(
                        topic_id=topic_id,
                        partitions=[
                            Q.PartitionData(partition=partition, state_epoch=state_epoch, start_offset=start_offset)
                        ],
                    )
                ],
            )
            resp = await ch.request(req, version=0)
            return _only(resp.results, partition).error_code

        return await self._route(group_id, topic_id, partition, local, remote, _code, _code)

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> ShareState:
        """ReadShareGroupState (fencing leader epochs below the stored one)."""
        c = self.coordinator

        async def local() -> ShareState:
            return _uninitialized(await c.read(group_id, topic_id, partition, leader_epoch))

        async def remote(ch: BrokerChannel) -> ShareState:
            Q = ReadShareGroupStateRequest
            req = Q(
                group_id=group_id,
                topics=[
                    Q.ReadStateData(
                        topic_id=topic_id, partitions=[Q.PartitionData(partition=partition, leader_epoch=leader_epoch)]
                    )
                ],
            )
            resp = await ch.request(req, version=0)
            r = _only(resp.results, partition)
            return _uninitialized(
                ShareState(
                    r.error_code,
                    r.state_epoch,
                    r.start_offset,
                    -1,
                    leader_epoch,
                    [
                        StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                        for b in r.state_batches
                    ],
                    r.error_message,
                )
            )

        return await self._route(group_id, topic_id, partition, local, remote, _error, ShareState)

    async def write(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: list[StateBatch],
        delivery_complete_count: int = -1,
    ) -> int:
        """WriteShareGroupState: 0 or the error code."""
        c = self.coordinator

        async def local() -> int:
            return (
                await c.write(
                    group_id,
                    topic_id,
                    partition,
                    state_epoch,
                    leader_epoch,
                    start_offset,
                    batches,
                    delivery_complete_count,
                )
            )[0]

        async def remote(ch: BrokerChannel) -> int:
            Q = WriteShareGroupStateRequest
            req = Q(
                group_id=group_id,
                topics=[
                    Q.WriteStateData(
                        topic_id=topic_id,
                        partitions=[
                            Q.PartitionData(
                                partition=partition,
                                state_epoch=state_epoch,
                                leader_epoch=leader_epoch,
                                start_offset=start_offset,
                                delivery_complete_count=delivery_complete_count,
                                state_batches=[
                                    Q.StateBatch(
                                        first_offset=b.first_offset,
                                        last_offset=b.last_offset,
                                        delivery_state=b.delivery_state,
                                        delivery_count=b.delivery_count,
                                    )
                                    for b in batches
                                ],
                            )
                        ],
                    )
                ],
            )
            resp = await ch.request(req)
            return _only(resp.results, partition).error_code

        return await self._route(group_id, topic_id, partition, local, remote, _code, _code)

    async def delete(self, group_id: str, partitions: list[TP]) -> dict[TP, int]:
        """DeleteShareGroupState of each share-partition: {(topic id, partition): error}."""
        c = self.coordinator

        async def one(topic_id: uuid.UUID, partition: int) -> int:
            async def local() -> int:
                return (await c.delete(group_id, topic_id, partition))[0]

            async def remote(ch: BrokerChannel) -> int:
                Q = DeleteShareGroupStateRequest
                req = Q(
                    group_id=group_id,
                    topics=[Q.DeleteStateData(topic_id=topic_id, partitions=[Q.PartitionData(partition=partition)])],
                )
                resp = await ch.request(req, version=0)
                return _only(resp.results, partition).error_code

            return await self._route(group_id, topic_id, partition, local, remote, _code, _code)

        codes = await _bounded([functools.partial(one, t, p) for t, p in partitions])
        return dict(zip(partitions, codes))

    async def read_summary(self, group_id: str, partitions: Iterable[TP]) -> dict[TP, ShareState]:
        """ReadShareGroupStateSummary of each share-partition (no fencing): its start
        offset (-1: never initialized), epochs and delivery-complete count."""
        c = self.coordinator
        tps = list(partitions)

        async def one(topic_id: uuid.UUID, partition: int) -> ShareState:
            async def local() -> ShareState:
                return c.read_summary(group_id, topic_id, partition)

            async def remote(ch: BrokerChannel) -> ShareState:
                Q = ReadShareGroupStateSummaryRequest
                req = Q(
                    group_id=group_id,
                    topics=[
                        Q.ReadStateSummaryData(
                            topic_id=topic_id, partitions=[Q.PartitionData(partition=partition, leader_epoch=0)]
                        )
                    ],
                )
                resp = await ch.request(req)
                r = _only(resp.results, partition)
                return ShareState(
                    r.error_code,
                    r.state_epoch,
                    r.start_offset,
                    r.delivery_complete_count,
                    r.leader_epoch,
                    error_message=r.error_message,
                )

            return await self._route(group_id, topic_id, partition, local, remote, _error, ShareState)

        states = await _bounded([functools.partial(one, t, p) for t, p in tps])
        return dict(zip(tps, states))

    # ------------------------------------------------------------------ routing

    async def _route(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        local: Callable[[], Awaitable[T]],
        remote: Callable[[BrokerChannel], Awaitable[T]],
        error_of: Callable[[T], int],
        failed: Callable[[int], T],
    ) -> T:
        if not group_id:
            return failed(ErrorCode.INVALID_REQUEST)
        key = coordinator_key(group_id, topic_id, partition)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_s
        attempt = 0
        result: T | None = None
        while True:
            err, result = await self._attempt(key, local, remote)
            if result is not None and error_of(result) not in _RETRIABLE:
                return result
            if result is not None:
                err = error_of(result)
            delay = _BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]
            attempt += 1
            if loop.time() + delay > deadline:
                log.info("share state %s: no coordinator answered within %.0f s (%s)", key, self.retry_s, err)
                return result if result is not None else failed(err)
            await asyncio.sleep(delay)

    async def _attempt(
        self, key: str, local: Callable[[], Awaitable[T]], remote: Callable[[BrokerChannel], Awaitable[T]]
    ) -> tuple[int, T | None]:
        """(error, None) when no coordinator could be asked, else (0, its answer)."""
        c = self.coordinator
        if not c.has_topic():
            try:
                await c.ensure_topic()
            except KafkaProtocolError as exc:
                return exc.code or ErrorCode.COORDINATOR_NOT_AVAILABLE, None
            except Exception as exc:
                log.info("creating %s failed: %s", "__share_group_state", exc)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        node = c.coordinator_node(key)
        if node < 0:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if node == self.broker_id:
            return 0, await local()
        ch = self.channel(node)
        if ch is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        try:
            return 0, await remote(ch)
        except (ChannelError, OSError) as exc:
            log.debug("share state %s: broker %d: %s", key, node, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None

    def channel(self, broker_id: int) -> BrokerChannel | None:
        info = self.metadata.brokers().get(broker_id)
        if info is None:
            return None
        ch = self.channels.get(broker_id)
        if ch is None or (ch.host, ch.port) != (info.host, info.port):
            if ch is not None:
                self._old.append(ch)
            ch = self.channels[broker_id] = BrokerChannel(
                info.host,
                info.port,
                client_id=f"broker-{self.broker_id}-share-persister",
                request_timeout=REQUEST_TIMEOUT_S,
            )
        return ch

    async def close(self) -> None:
        for ch in [*self._old, *self.channels.values()]:
            await ch.close()
        self._old.clear()
        self.channels.clear()


def _only(results: list[Any], partition: int) -> Any:
    """The one partition's result of a one-partition answer (Kafka answers nothing for
    an empty group id: INVALID_REQUEST then)."""
    for t in results:
        for r in t.partitions:
            if r.partition == partition:
                return r
    raise _NoAnswer()


class _NoAnswer(ChannelError):
    """The coordinator answered nothing for the partition (Kafka does so for an empty group id)."""


def _uninitialized(s: ShareState) -> ShareState:
    if s.error == ErrorCode.INVALID_REQUEST and s.error_message == READ_UNINITIALIZED:
        return ShareState(0)
    return s


async def _bounded(calls: list[Callable[[], Awaitable[T]]]) -> list[T]:
    """The calls' results in order, at most CONCURRENCY running at once."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def run(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    return list(await asyncio.gather(*(run(c) for c in calls)))


def _code(e: int) -> int:
    return e


def _error(s: ShareState) -> int:
    return s.error
