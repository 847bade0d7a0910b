"""The controller's channels to the brokers (Kafka's ControllerChannelManager and
ControllerBrokerRequestBatch).

One queue and one sender task per live broker: requests to a broker go out one at a
time, in the order the controller made them (a LeaderAndIsr must never overtake the
UpdateMetadata sent before it). A request that fails on the network (no connection, no
answer within the request timeout) is sent again, after a backoff, until it is answered
or the broker is removed (it died: the controller's next decisions replace what it
would have been told) or the controller resigns (every queue closes). The controller's
own broker is reached without a socket: `local(request)` hands the request to the
same code a network request would reach.

A broker checks a control request against ZooKeeper (server/broker.py,
check_control_request) and may refuse it for a while: its ZooKeeper server had not yet
seen this controller's election or the broker's own registration. Such a refusal
(CLUSTER_AUTHORIZATION_FAILED, STALE_BROKER_EPOCH, REQUEST_TIMED_OUT) is sent again
after a growing backoff, REFUSED_RETRIES times at most, the queue waiting behind it to
keep the order (Kafka's controller keeps a request in the broker's queue until it is
answered). STALE_CONTROLLER_EPOCH says this controller has been replaced: it is not
sent again, and `on_stale(broker id)` lets the controller check its election.
STALE_BROKER_EPOCH says the broker registered again since the controller read its
registration: `on_stale_broker(broker id)` has the controller read the registrations again.

`RequestBatch` collects what one controller event decided — LeaderAndIsr per broker,
UpdateMetadata for a set of brokers, StopReplica per broker — and turns it into at most
one request of each kind per broker, stamped with the controller's id and epoch and the
recipient's broker epoch.

All methods run on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from broker.cluster.channel import BrokerChannel, ChannelError
from broker.cluster.controller.decisions import LeaderAndIsr
from broker.cluster.store.znodes import EndPoint
from broker.log import TopicPartition
from broker.protocol._runtime import Message
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.leader_and_isr import LeaderAndIsrRequest
from broker.protocol.messages.stop_replica import StopReplicaRequest
from broker.protocol.messages.update_metadata import UpdateMetadataRequest

log = logging.getLogger(__name__)

LEADER_AND_ISR_VERSION = 7
UPDATE_METADATA_VERSION = 8
STOP_REPLICA_VERSION = 4
#: Kafka's SecurityProtocol ids
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
LEADER_DURING_DELETE = -2  # Kafka's LeaderAndIsr.LeaderDuringDelete
RETRY_BACKOFF_S = 0.1
REFUSED_RETRIES = 8  # sends again of a request refused for a reason that may pass
REFUSED_BACKOFF_MAX_S = 2.0  # the backoff doubles from RETRY_BACKOFF_S up to this
RETRIABLE_REFUSALS = frozenset(
    (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.STALE_BROKER_EPOCH, ErrorCode.REQUEST_TIMED_OUT)
)

LocalDelivery = Callable[[Message], Awaitable[Message]]
ResponseCallback = Callable[[int, object, object], None]  # (broker id, request, response)


@dataclass(frozen=True)
class BrokerEndpoint:
    """A live broker as the controller sees it: host and port of the inter-broker
    listener, and every endpoint of its registration (for UpdateMetadata)."""

    broker_id: int
    host: str
    port: int
    rack: str | None
    epoch: int
    endpoints: tuple[EndPoint, ...] = ()


class _BrokerQueue:
    def __init__(self, manager: ControllerChannelManager, broker: BrokerEndpoint):
        self.manager = manager
        self.broker = broker
        self.queue: asyncio.Queue[tuple[Any, int, ResponseCallback | None]] = asyncio.Queue()
        self.channel: BrokerChannel | None = None
        if broker.broker_id != manager.broker_id:
            self.channel = BrokerChannel(
                broker.host,
                broker.port,
                client_id=f"controller-{manager.broker_id}",
                request_timeout=manager.request_timeout,
            )
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            request, version, callback = await self.queue.get()
            response = await self._deliver(request, version)
            backoff = RETRY_BACKOFF_S
            for _ in range(REFUSED_RETRIES):
                error = getattr(response, "error_code", ErrorCode.NONE)
                if error == ErrorCode.STALE_CONTROLLER_EPOCH and self.manager.on_stale is not None:
                    log.info(
                        "controller: broker %d refused a %s: it knows a newer controller epoch",
                        self.broker.broker_id,
                        type(request).__name__,
                    )
                    self.manager.on_stale(self.broker.broker_id)
                if error == ErrorCode.STALE_BROKER_EPOCH and self.manager.on_stale_broker is not None:
                    # it registered again (a new broker epoch) and the controller missed it
                    self.manager.on_stale_broker(self.broker.broker_id)
                if error not in RETRIABLE_REFUSALS:
                    break
                log.info(
                    "controller: broker %d refused a %s (%s); sending it again in %.1f s",
                    self.broker.broker_id,
                    type(request).__name__,
                    ErrorCode(error).name,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, REFUSED_BACKOFF_MAX_S)
                response = await self._deliver(request, version)
            else:
                if getattr(response, "error_code", ErrorCode.NONE) in RETRIABLE_REFUSALS:
                    log.warning(
                        "controller: broker %d still refuses a %s after %d tries; given up",
                        self.broker.broker_id,
                        type(request).__name__,
                        REFUSED_RETRIES + 1,
                    )
            if callback is not None:
                try:
                    callback(self.broker.broker_id, request, response)
                except Exception:
                    log.exception("controller: handling the answer of broker %d failed", self.broker.broker_id)

    async def _deliver(self, request: Any, version: int) -> Any:
        if self.channel is None:
            try:
                return await self.manager.local(request)
            except Exception:
                log.exception("controller: %s to this broker failed", type(request).__name__)
                return None
        while True:
            try:
                return await self.channel.request(request, version)
            except ChannelError as exc:
                log.debug("controller: broker %d unreachable (%s); retrying", self.broker.broker_id, exc)
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def close(self) -> None:
        self.task.cancel()
        try:
            await self.task
        except (asyncio.CancelledError, Exception):
            pass
        if self.channel is not None:
            await self.channel.close()


class ControllerChannelManager:
    def __init__(
        self,
        broker_id: int,
        local: LocalDelivery,
        request_timeout: float = 30.0,
        on_stale: Callable[[int], None] | None = None,
        on_stale_broker: Callable[[int], None] | None = None,
    ):
        self.broker_id = broker_id
        self.local = local
        self.request_timeout = request_timeout
        self.on_stale = on_stale
        self.on_stale_broker = on_stale_broker
        self._queues: dict[int, _BrokerQueue] = {}

    def set_brokers(self, brokers: Iterable[BrokerEndpoint]) -> None:
        """Opens queues to new brokers, closes those of brokers gone or re-registered
        (a new broker epoch: a new process behind the same id)."""
        wanted = {b.broker_id: b for b in brokers}
        for bid in list(self._queues):
            q = self._queues[bid]
            if bid not in wanted or wanted[bid] != q.broker:
                del self._queues[bid]
                asyncio.get_running_loop().create_task(q.close())
        for bid, b in wanted.items():
            if bid not in self._queues:
                self._queues[bid] = _BrokerQueue(self, b)

    def send(self, broker_id: int, request: Any, version: int, callback: ResponseCallback | None = None) -> bool:
        q = self._queues.get(broker_id)
        if q is None:
            return False
        q.queue.put_nowait((request, version, callback))
        return True

    async def close(self) -> None:
        queues, self._queues = list(self._queues.values()), {}
        for q in queues:
            await q.close()


@dataclass
class PartitionInfo:
    """What the batch needs to know of a partition to describe it."""

    topic_id: uuid.UUID
    replicas: tuple[int, ...]
    state: LeaderAndIsr
    controller_epoch: int
    offline: frozenset[int] = frozenset()  # replicas in failed log dirs
    adding: tuple[int, ...] = ()  # a reassignment's (KIP-455): LeaderAndIsr v3+ carries them
    removing: tuple[int, ...] = ()


@dataclass
class RequestBatch:
    """What one controller event tells the brokers."""

    leader_and_isr: dict[int, dict[TopicPartition, bool]] = field(default_factory=dict)  # broker -> tp -> is_new
    update_metadata: set[int] = field(default_factory=set)
    update_partitions: set[TopicPartition] | None = field(default_factory=set)  # None: every partition
    stop_replica: dict[int, dict[TopicPartition, bool]] = field(default_factory=dict)  # broker -> tp -> delete
    deleting: set[str] = field(default_factory=set)
    full: set[int] = field(default_factory=set)  # brokers getting the full LeaderAndIsr

    def add_leader_and_isr(self, brokers: Iterable[int], tp: TopicPartition, is_new: bool = False) -> None:
        for b in brokers:
            self.leader_and_isr.setdefault(b, {})[tp] = is_new

    def add_update_metadata(self, brokers: Iterable[int], tps: Iterable[TopicPartition] | None) -> None:
        self.update_metadata.update(brokers)
        if tps is None:
            self.update_partitions = None
        elif self.update_partitions is not None:
            self.update_partitions.update(tps)

    def add_stop_replica(self, broker: int, tp: TopicPartition, delete: bool) -> None:
        self.stop_replica.setdefault(broker, {})[tp] = delete

    # ------------------------------------------------------------------ building

    def build(
        self,
        controller_id: int,
        controller_epoch: int,
        brokers: dict[int, BrokerEndpoint],
        partitions: dict[TopicPartition, PartitionInfo],
    ) -> list[tuple[int, Any, int]]:
        """[(broker id, request, version)] in the order they must go out."""
        out: list[tuple[int, Any, int]] = []
        for bid in sorted(self.update_metadata):
            b = brokers.get(bid)
            if b is not None:
                updated = partitions.keys() if self.update_partitions is None else self.update_partitions
                out.append(
                    (
                        bid,
                        self._update_metadata(controller_id, controller_epoch, b, brokers, partitions, updated),
                        UPDATE_METADATA_VERSION,
                    )
                )
        for bid, tps in sorted(self.leader_and_isr.items()):
            b = brokers.get(bid)
            if b is not None:
                req = self._leader_and_isr(
                    controller_id, controller_epoch, b, brokers, partitions, tps, full=bid in self.full
                )
                if req is not None:
                    out.append((bid, req, LEADER_AND_ISR_VERSION))
        for bid, tps in sorted(self.stop_replica.items()):
            b = brokers.get(bid)
            if b is not None:
                out.append(
                    (bid, self._stop_replica(controller_id, controller_epoch, b, partitions, tps), STOP_REPLICA_VERSION)
                )
        return out

    def _leader_and_isr(
        self,
        controller_id: int,
        controller_epoch: int,
        b: BrokerEndpoint,
        brokers: dict[int, BrokerEndpoint],
        partitions: dict[TopicPartition, PartitionInfo],
        tps: dict[TopicPartition, bool],
        full: bool,
    ) -> LeaderAndIsrRequest | None:
        R = LeaderAndIsrRequest
        topics: dict[str, list[Any]] = {}
        leaders = set()
        for tp, is_new in sorted(tps.items()):
            p = partitions.get(tp)
            if p is None:
                continue
            s = p.state
            topics.setdefault(tp.topic, []).append(
                R.LeaderAndIsrPartitionState(
                    partition_index=tp.partition,
                    controller_epoch=p.controller_epoch,
                    leader=s.leader,
                    leader_epoch=s.leader_epoch,
                    isr=list(s.isr),
                    partition_epoch=s.partition_epoch,
                    replicas=list(p.replicas),
                    adding_replicas=list(p.adding),
                    removing_replicas=list(p.removing),
                    is_new=is_new,
                    leader_recovery_state=s.leader_recovery_state,
                )
            )
            if s.leader >= 0:
                leaders.add(s.leader)
        if not topics and not full:
            return None
        return R(
            controller_id=controller_id,
            is_k_raft_controller=False,
            controller_epoch=controller_epoch,
            broker_epoch=b.epoch,
            type=1 if full else 0,
            topic_states=[
                R.LeaderAndIsrTopicState(
                    topic_name=t,
                    topic_id=partitions[TopicPartition(t, ps[0].partition_index)].topic_id,
                    partition_states=ps,
                )
                for t, ps in sorted(topics.items())
            ],
            live_leaders=[
                R.LeaderAndIsrLiveLeader(broker_id=lb, host_name=brokers[lb].host, port=brokers[lb].port)
                for lb in sorted(leaders)
                if lb in brokers
            ],
        )

    def _update_metadata(
        self,
        controller_id: int,
        controller_epoch: int,
        b: BrokerEndpoint,
        brokers: dict[int, BrokerEndpoint],
        partitions: dict[TopicPartition, PartitionInfo],
        tps: Iterable[TopicPartition],
    ) -> UpdateMetadataRequest:
        R = UpdateMetadataRequest
        topics: dict[str, list[Any]] = {}
        for tp in sorted(tps):
            p = partitions.get(tp)
            if p is None:
                continue
            s = p.state
            leader = LEADER_DURING_DELETE if tp.topic in self.deleting else s.leader
            topics.setdefault(tp.topic, []).append(
                R.UpdateMetadataPartitionState(
                    partition_index=tp.partition,
                    controller_epoch=p.controller_epoch,
                    leader=leader,
                    leader_epoch=s.leader_epoch,
                    isr=list(s.isr),
                    zk_version=s.partition_epoch,
                    replicas=list(p.replicas),
                    offline_replicas=[r for r in p.replicas if r not in brokers or r in p.offline],
                )
            )
        live = [
            R.UpdateMetadataBroker(
                id=x.broker_id,
                endpoints=[
                    R.UpdateMetadataEndpoint(
                        port=e.port,
                        host=e.host,
                        listener=e.listener_name,
                        security_protocol=SECURITY_PROTOCOL_IDS[e.security_protocol],
                    )
                    for e in x.endpoints or (EndPoint("PLAINTEXT", x.host, x.port),)
                ],
                rack=x.rack,
            )
            for x in sorted(brokers.values(), key=lambda x: x.broker_id)
        ]
        return R(
            controller_id=controller_id,
            is_k_raft_controller=False,
            controller_epoch=controller_epoch,
            broker_epoch=b.epoch,
            type=1 if self.update_partitions is None else 0,
            topic_states=[
                R.UpdateMetadataTopicState(
                    topic_name=t,
                    topic_id=partitions[TopicPartition(t, ps[0].partition_index)].topic_id,
                    partition_states=ps,
                )
                for t, ps in sorted(topics.items())
            ],
            live_brokers=live,
        )

    def _stop_replica(
        self,
        controller_id: int,
        controller_epoch: int,
        b: BrokerEndpoint,
        partitions: dict[TopicPartition, PartitionInfo],
        tps: dict[TopicPartition, bool],
    ) -> StopReplicaRequest:
        R = StopReplicaRequest
        topics: dict[str, list[Any]] = {}
        for tp, delete in sorted(tps.items()):
            p = partitions.get(tp)
            # Kafka's EpochDuringDelete for a topic being deleted; a replica removed by a
            # reassignment (or stopped by a controlled shutdown) gets the current epoch
            if delete and tp.topic in self.deleting:
                epoch = LEADER_DURING_DELETE
            else:
                epoch = p.state.leader_epoch if p is not None else -1
            topics.setdefault(tp.topic, []).append(
                R.StopReplicaPartitionState(partition_index=tp.partition, leader_epoch=epoch, delete_partition=delete)
            )
        return R(
            controller_id=controller_id,
            is_k_raft_controller=False,
            controller_epoch=controller_epoch,
            broker_epoch=b.epoch,
            topic_states=[
                R.StopReplicaTopicState(topic_name=t, partition_states=ps) for t, ps in sorted(topics.items())
            ],
        )
