"""The controller (Kafka's KafkaController, ZooKeeper mode): one per cluster, elected.

Every broker runs one. It tries to win the ephemeral /controller node (each win bumps
/controller_epoch); the winner is active until it loses the node (its session expired,
it shut down) and the others watch /controller to try again when it disappears. On a
broker alone the embedded store makes it active at once.

One task handles events one at a time, so the controller's state (ControllerContext)
needs no lock: store watches (brokers, topics, partitions added, deletions, config
changes) and broker requests (AlterPartition, ControlledShutdown, ElectLeaders) only
enqueue. Each event:

    1. builds a ClusterView of the context and calls a pure decision (decisions.py);
    2. writes the new partition states to the store, each conditional on its znode
       version and fenced by the controller epoch's (a controller that lost the
       election writes nothing: ControllerMoved, and it resigns). A write that finds
       another version is read again: ZooKeeper holding what was meant (a multi-op sent
       again after a connection loss had been applied) counts as written; anything else
       is decided again from what was read, WRITE_ROUNDS times at most. A write of
       unknown outcome (no answer from ZooKeeper) has its topics read again and
       announced shortly after (_reconcile);
    3. tells the brokers concerned with Kafka's own requests — LeaderAndIsr to the
       replicas, UpdateMetadata to every live broker, StopReplica — batched per broker
       and stamped with the controller epoch (channel_manager.py).

Brokers refuse requests stamped with an epoch older than the newest they have seen.

A failed log dir (Kafka's onBrokerLogDirFailure): the broker creates a
/log_dir_event_notification/log_dir_event_<seq> node naming itself; the controller
deletes it and sends that broker LeaderAndIsr for all its replicas. Every LeaderAndIsr
answer is read (Kafka's LeaderAndIsrResponseReceived): a partition answered
KAFKA_STORAGE_ERROR is a replica in an offline dir, which leaves the ISR and hands its
leadership to another online ISR member (decisions.on_replicas_offline); one answered
without error is online again. A broker registering again starts with no offline replica.

Topic deletion (Kafka's TopicDeletionManager): a marked topic is deleted once every
replica is alive: brokers first learn it is being deleted (UpdateMetadata with leader
-2), then each replica gets StopReplica(delete) and, once all answered, the topic's
znodes go and every broker forgets it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from broker.cluster.controller import decisions as D
from broker.cluster.controller.channel_manager import (
    BrokerEndpoint,
    ControllerChannelManager,
    LocalDelivery,
    PartitionInfo,
    RequestBatch,
    ResponseCallback,
)
from broker.cluster.controller.decisions import ClusterView, Decision, LeaderAndIsr, PartitionView
from broker.cluster.controller.reassignment_decisions import ReplicaAssignment
from broker.cluster.controller.reassignments import Reassignments
from broker.cluster.metadata import FEATURES, MetadataStore
from broker.cluster.store.errors import ControllerMoved
from broker.cluster.store.znodes import BrokerRegistration, LeaderIsrState
from broker.config import BrokerConfig, validate_topic_configs
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.leader_and_isr import LeaderAndIsrRequest
from broker.timeouts import wait_for
from broker.uuids import random_uuid

log = logging.getLogger(__name__)
#: Kafka's state-change log: every leadership and ISR change, with the controller epoch
#: (the broker's log configuration may send it to its own file: log.state.change.file)
state_change_log = logging.getLogger("state.change.logger")

PREFERRED, UNCLEAN = 0, 1  # ElectLeaders election types
WRITE_ROUNDS = 5  # writes of one event's decision, deciding again after each conflict
RECONCILE_BACKOFF_S = 0.5  # before reading again the states of a write of unknown outcome
FEATURES_RETRY_S = 1.0  # before writing again finalized features whose write failed

T = TypeVar("T")
#: an event of the controller's queue: a coroutine function, its arguments, the future of its result
_Event = tuple[Callable[..., Awaitable[Any]], tuple[Any, ...], asyncio.Future[Any]]
#: AlterPartition's change of one partition: (topic, partition, leader epoch, new ISR,
#: partition epoch, leader recovery state)
AlterIsrChange = tuple[str, int, int, list[int], int, int]


class ControllerMovedError(Exception):
    """This controller is no longer the active one."""


@dataclass
class ControllerContext:
    """What the active controller knows of the cluster (Kafka's ControllerContext)."""

    epoch: int
    epoch_zk_version: int
    brokers: dict[int, BrokerEndpoint] = field(default_factory=dict)  # live, with their epochs
    shutting_down: set[int] = field(default_factory=set)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    assignments: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)
    states: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    state_epochs: dict[TopicPartition, int] = field(default_factory=dict)  # controller epoch of each state
    unclean: dict[str, bool] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)
    #: replicas in failed log dirs, per live broker (Kafka's replicasOnOfflineDirs)
    offline_replicas: dict[int, set[TopicPartition]] = field(default_factory=dict)
    #: partitions being reassigned (KIP-455; `assignments` holds their RS) and the zk
    #: version of each topic node, which the controller writes during a reassignment
    reassigning: dict[TopicPartition, ReplicaAssignment] = field(default_factory=dict)
    topic_versions: dict[str, int] = field(default_factory=dict)
    #: each live broker's highest level of each feature (its registration's "features")
    feature_support: dict[int, dict[str, int]] = field(default_factory=dict)
    #: /feature as last read or written: (levels, epoch)
    finalized: tuple[dict[str, int], int] | None = None

    def offline_by_partition(self) -> dict[TopicPartition, frozenset[int]]:
        out: dict[TopicPartition, set[int]] = {}
        for b, tps in self.offline_replicas.items():
            for tp in tps:
                out.setdefault(tp, set()).add(b)
        return {tp: frozenset(bs) for tp, bs in out.items()}

    def partitions(self) -> dict[TopicPartition, PartitionInfo]:
        out = {}
        offline = self.offline_by_partition() if self.offline_replicas else {}
        for topic, parts in self.assignments.items():
            tid = self.topic_ids[topic]
            for p, replicas in parts.items():
                tp = TopicPartition(topic, p)
                state = self.states.get(tp)
                if state is not None:
                    ra = self.reassigning.get(tp)
                    out[tp] = PartitionInfo(
                        tid,
                        replicas,
                        state,
                        self.state_epochs.get(tp, self.epoch),
                        offline.get(tp, frozenset()),
                        *((ra.adding, ra.removing) if ra is not None else ()),
                    )
        return out

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.assignments.get(tp.topic, {}).get(tp.partition, ())


class Controller:
    def __init__(
        self,
        broker_id: int,
        config: BrokerConfig,
        store: MetadataStore,
        local: LocalDelivery,
        on_resign: Callable[[], None] | None = None,
    ):
        self.broker_id = broker_id
        self.config = config
        self.store = store
        self.channels = ControllerChannelManager(
            broker_id,
            local,
            config["request.timeout.ms"] / 1000,
            on_stale=self._on_stale_epoch,
            on_stale_broker=self._on_stale_broker_epoch,
        )
        self.ctx: ControllerContext | None = None
        self.on_resign = on_resign
        self._events: asyncio.Queue[_Event] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._rebalance: asyncio.TimerHandle | None = None
        self._closed = False
        self._watching = False
        self._watched_topics: set[str] = set()
        self._uncertain: set[str] = set()  # topics with a state write of unknown outcome
        self._reconcile_pending = False
        self._checking_epoch = False
        self._rereading_brokers = False
        self.failovers = 0
        #: Kafka's LeaderElectionRateAndTimeMs count and UncleanLeaderElectionsPerSec:
        #: leaderships this controller gave to another broker (or to a new partition)
        self.leader_elections = 0
        self.unclean_leader_elections = 0
        self.reassignments = Reassignments(self)

    @property
    def active(self) -> bool:
        return self.ctx is not None

    @property
    def epoch(self) -> int:
        return self.ctx.epoch if self.ctx is not None else -1

    # ------------------------------------------------------------------ lifecycle

    async def startup(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        await self.store.watch_controller(self._on_controller_change)
        self._enqueue(self._maybe_elect)

    async def shutdown(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        await self._resign()
        await self.channels.close()

    def _enqueue(self, fn: Callable[..., Awaitable[T]], *args: Any) -> asyncio.Future[T]:
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if self._closed:
            fut.set_exception(ControllerMovedError("the controller is shutting down"))
            fut.exception()
        else:
            self._events.put_nowait((fn, args, fut))
        return fut

    async def _run(self) -> None:
        while True:
            fn, args, fut = await self._events.get()
            try:
                result = await fn(*args)
            except ControllerMovedError as exc:
                if self.ctx is not None:
                    log.info("controller %d: %s; resigning", self.broker_id, exc)
                await self._resign()
                if not fut.done():
                    fut.set_exception(exc)
                    fut.exception()
                self._enqueue(self._maybe_elect)
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, ControllerMoved):
                    log.info("controller %d: another controller was elected; resigning", self.broker_id)
                    await self._resign()
                    self._enqueue(self._maybe_elect)
                else:
                    log.exception("controller %d: event %s failed", self.broker_id, getattr(fn, "__name__", fn))
                if not fut.done():
                    fut.set_exception(ControllerMovedError(str(exc)))
                    fut.exception()
                continue
            if not fut.done():
                fut.set_result(result)

    # ------------------------------------------------------------------ election

    async def _maybe_elect(self) -> None:
        current = await self.store.get_controller_id()
        if self.ctx is not None:
            if current == self.broker_id:
                return
            await self._resign()
        if current is not None and current != self.broker_id:
            return
        won = await self.store.try_elect_controller(self.broker_id)
        if won is None:
            return
        epoch, epoch_zk_version = won
        await self._on_failover(epoch, epoch_zk_version)

    async def _resign(self) -> None:
        if self.ctx is None:
            return
        log.info("controller %d: resigning (epoch %d)", self.broker_id, self.ctx.epoch)
        self.ctx = None
        self._uncertain.clear()
        if self._rebalance is not None:
            self._rebalance.cancel()
            self._rebalance = None
        self.channels.set_brokers([])
        if self.on_resign is not None:
            self.on_resign()

    async def _on_failover(self, epoch: int, epoch_zk_version: int) -> None:
        t0 = time.monotonic()
        self.failovers += 1
        ctx = ControllerContext(epoch, epoch_zk_version)
        self.ctx = ctx
        # watches first, then reads: a change in between is an event queued behind this
        # one (the events compare with what was read, so a change already read is a no-op)
        await self._arm_watches()
        await self._read_brokers(ctx)
        for topic in await self.store.get_topic_names():
            await self._watch_topic(topic)
            await self._read_topic(ctx, topic)
        ctx.deleting = set(await self.store.get_topics_marked_for_deletion()) & set(ctx.assignments)
        # as Kafka's: pending log dir events are dropped; the full LeaderAndIsr below has
        # every broker answer KAFKA_STORAGE_ERROR for its replicas in offline dirs
        events = await self.store.get_log_dir_events()
        if events:
            await self.store.delete_log_dir_events(list(events), ctx.epoch_zk_version)
        self.channels.set_brokers(ctx.brokers.values())
        log.info(
            "controller %d: active with epoch %d (%d brokers, %d topics)",
            self.broker_id,
            epoch,
            len(ctx.brokers),
            len(ctx.assignments),
        )
        batch = RequestBatch()
        batch.add_update_metadata(ctx.brokers, None)
        # brokers that died while no controller was watching (the old controller among them,
        # or before this one read the registry) still sit in ISRs: they leave them now, as if
        # their failure had been seen. Kafka's controller leaves that to the leaders' lag
        # check (replica.lag.time.max.ms later); a dead broker is not in sync either way.
        absent = {r for state in ctx.states.values() for r in state.isr if r not in ctx.brokers}
        if absent:
            log.info(
                "controller %d: brokers %s are in ISRs but not registered: taken out", self.broker_id, sorted(absent)
            )
        await self._apply(self._repair, batch)
        # every live broker learns the state of all its replicas (the full LeaderAndIsr)
        for tp, info in ctx.partitions().items():
            batch.add_leader_and_isr([r for r in info.replicas if r in ctx.brokers], tp)
        batch.full.update(ctx.brokers)
        self._send(batch)
        await self.reassignments.resume()
        await self._resume_deletions()
        self._schedule_rebalance()
        await self._finalize_features(ctx)
        log.info("controller %d: failover done in %.3f s", self.broker_id, time.monotonic() - t0)

    async def _arm_watches(self) -> None:
        """Once per process (the store re-arms them): they only enqueue, and only while
        this controller is active; what changed is read again when the event runs."""
        if self._watching:
            return
        self._watching = True
        await self.store.watch_broker_ids(lambda _ids: self._enqueue_if_active(self._on_broker_change))
        await self.store.watch_topics(lambda _names: self._enqueue_if_active(self._on_topic_change))
        await self.store.watch_topic_deletions(lambda _names: self._enqueue_if_active(self._on_deletion_change))
        await self.store.watch_config_changes(lambda paths: self._enqueue_if_active(self._on_config_change, paths))
        await self.store.watch_log_dir_events(lambda _names: self._enqueue_if_active(self._on_log_dir_event))

    def _on_controller_change(self, _controller_id: int | None) -> None:
        self._enqueue(self._maybe_elect)

    def _on_stale_broker_epoch(self, broker_id: int) -> None:
        """A broker refused a request for a broker epoch older than its own, or claimed a
        newer one: it registered again and this controller missed the change. The
        registrations are read again (a bounced broker is then handled as one)."""
        if not self._rereading_brokers and self.ctx is not None:
            log.info(
                "controller %d: broker %d has a newer registration than known; reading the brokers again",
                self.broker_id,
                broker_id,
            )
            self._rereading_brokers = True
            self._enqueue_if_active(self._reread_brokers)

    async def _reread_brokers(self) -> None:
        self._rereading_brokers = False
        await self._on_broker_change()

    def _on_stale_epoch(self, broker_id: int) -> None:
        """A broker refused a request with STALE_CONTROLLER_EPOCH: it knows a newer
        controller. Once per burst, the controller checks ZooKeeper (synced first)."""
        if not self._checking_epoch and self.ctx is not None:
            self._checking_epoch = True
            self._enqueue_if_active(self._check_epoch)

    async def _check_epoch(self) -> None:
        self._checking_epoch = False
        ctx = self._require()
        await self.store.sync()
        now = await self.store.get_controller_epoch()
        if now is not None and now[0] > ctx.epoch:
            raise ControllerMovedError(f"controller epoch {now[0]} is newer than this controller's {ctx.epoch}")

    def _enqueue_if_active(self, fn: Callable[..., Awaitable[object]], *args: Any) -> None:
        if self.ctx is not None:
            self._enqueue(fn, *args)

    # ------------------------------------------------------------------ reading the store

    async def _read_brokers(self, ctx: ControllerContext) -> None:
        regs = await self.store.get_brokers_and_epochs()
        listener = self.config.inter_broker_listener
        ctx.brokers = {bid: _endpoint(reg, epoch, listener) for bid, (reg, epoch) in regs.items()}
        ctx.feature_support = {
            bid: {name: hi for name, (_lo, hi) in reg.features.items()} for bid, (reg, _epoch) in regs.items()
        }

    async def _finalize_features(self, ctx: ControllerContext) -> None:
        """/feature holds, for each feature kbroker has, the highest level every live
        broker supports (a broker supports transaction.version up to its config of that
        name; one that registers no features, a kbroker before them, supports none): a
        broker configured with transaction.version=1 keeps the whole cluster at 1, so no
        client is told of version 2 while a broker would refuse its requests (Kafka
        finalizes features with kafka-features.sh; kbroker derives them from the brokers'
        configs). Written when it changes, fenced by this controller's epoch, after the
        event's other work (a failover is never held up by it); a write that fails for
        another reason than a newer controller is tried again after a second."""
        if not ctx.brokers or ctx is not self.ctx:
            return
        levels = {name: min(ctx.feature_support.get(b, {}).get(name, 0) for b in ctx.brokers) for name in FEATURES}
        finalized = {name: level for name, level in levels.items() if level >= 1}  # as /feature holds them
        try:
            if ctx.finalized is None:
                ctx.finalized = await self.store.get_finalized_features()
            if finalized == ctx.finalized[0]:
                return
            epoch = await self.store.set_finalized_features(finalized, ctx.epoch_zk_version)
        except ControllerMoved:
            raise
        except Exception as exc:
            log.warning(
                "controller %d: writing the finalized features %s failed (%s); trying again",
                self.broker_id,
                levels,
                exc,
            )
            asyncio.get_running_loop().call_later(
                FEATURES_RETRY_S, self._enqueue_if_active, self._finalize_features, ctx
            )
            return
        ctx.finalized = (finalized, epoch)
        log.info(
            "controller %d: finalized features %s (epoch %d; live brokers' levels %s)",
            self.broker_id,
            levels,
            epoch,
            {b: ctx.feature_support.get(b, {}) for b in sorted(ctx.brokers)},
        )

    async def _read_topic(self, ctx: ControllerContext, topic: str) -> None:
        node, version = await self.store.get_topic_assignment(topic)
        topic_id = node.topic_id
        if topic_id is None:
            topic_id = random_uuid()
        ctx.topic_ids[topic] = topic_id
        ctx.assignments[topic] = {p: tuple(r) for p, r in node.partitions.items()}
        ctx.topic_versions[topic] = version
        self.reassignments.read(ctx, topic, node)
        for p, (state, version) in (await self.store.get_partition_states(topic)).items():
            tp = TopicPartition(topic, p)
            ctx.states[tp] = LeaderAndIsr(
                state.leader, state.leader_epoch, tuple(state.isr), version, state.leader_recovery_state
            )
            ctx.state_epochs[tp] = state.controller_epoch
        await self._read_topic_config(ctx, topic)

    async def _read_topic_config(self, ctx: ControllerContext, topic: str) -> None:
        try:
            overrides = validate_topic_configs(await self.store.get_topic_configs(topic))
        except ValueError:
            overrides = {}
        ctx.unclean[topic] = overrides.get(
            "unclean.leader.election.enable", self.config["unclean.leader.election.enable"]
        )

    async def _watch_topic(self, topic: str) -> None:
        if topic in self._watched_topics:
            return
        self._watched_topics.add(topic)
        await self.store.watch_topic(topic, lambda *_a, t=topic: self._enqueue_if_active(self._on_partition_change, t))

    def _require(self) -> ControllerContext:
        if self.ctx is None:
            raise ControllerMovedError("not the active controller")
        return self.ctx

    def _view(self, shutting_down: Iterable[int] = ()) -> ClusterView:
        ctx = self._require()
        parts = {}
        for topic, assignment in ctx.assignments.items():
            for p, replicas in assignment.items():
                tp = TopicPartition(topic, p)
                parts[tp] = PartitionView(topic, p, replicas, ctx.states.get(tp))
        return ClusterView(
            frozenset(ctx.brokers),
            {b: e.rack for b, e in ctx.brokers.items()},
            frozenset(ctx.shutting_down) | frozenset(shutting_down),
            parts,
            lambda t: ctx.unclean.get(t, False),
            ctx.offline_by_partition(),
        )

    # ------------------------------------------------------------------ writing

    async def _write(
        self, states: dict[TopicPartition, LeaderAndIsr]
    ) -> tuple[dict[TopicPartition, LeaderAndIsr], set[TopicPartition]]:
        """Writes new states (creating those of new partitions), each conditional on the
        znode version the context has. Returns (written, conflicts): the states written,
        with their new znode versions, and the partitions whose write found another
        version. Those are read again into the context, and one that holds what was meant
        (same leader, leader epoch, ISR and recovery state, at a newer version: a multi-op
        sent again after a connection loss had been applied the first time) counts as
        written. A conflict is for the caller to decide again (_apply)."""
        ctx = self._require()
        written: dict[TopicPartition, LeaderAndIsr] = {}
        creates: dict[str, dict[int, LeaderIsrState]] = {}
        updates = {}
        expected: dict[TopicPartition, int] = {}
        for tp, s in states.items():
            zs = LeaderIsrState(s.leader, s.leader_epoch, tuple(s.isr), ctx.epoch, s.leader_recovery_state)
            if tp in ctx.states:
                expected[tp] = ctx.states[tp].partition_epoch
                updates[(tp.topic, tp.partition)] = (zs, expected[tp])
            else:
                expected[tp] = -1
                creates.setdefault(tp.topic, {})[tp.partition] = zs
        failed: set[TopicPartition] = set()
        try:
            try:
                for topic, new in creates.items():
                    results = await self.store.create_partition_states(topic, new, ctx.epoch_zk_version)
                    for p, res in results.items():
                        tp = TopicPartition(topic, p)
                        if isinstance(res, int):
                            written[tp] = _with_version(states[tp], res)
                        else:
                            failed.add(tp)
                if updates:
                    updated = await self.store.update_partition_states(updates, ctx.epoch_zk_version)
                    for (topic, p), res in updated.items():
                        tp = TopicPartition(topic, p)
                        if isinstance(res, int):
                            written[tp] = _with_version(states[tp], res)
                        else:
                            failed.add(tp)
            finally:
                for tp, s in written.items():
                    ctx.states[tp] = s
                    ctx.state_epochs[tp] = ctx.epoch
            conflicts: set[TopicPartition] = set()
            for topic in sorted({tp.topic for tp in failed}):
                fresh = await self._reread_states(ctx, topic)
                for tp in sorted(t for t in failed if t.topic == topic):
                    meant, now = states[tp], fresh.get(tp)
                    if now is not None and now.partition_epoch > expected[tp] and _same_state(now, meant):
                        log.info(
                            "controller %d: %s already holds the state it meant to write (a write "
                            "sent again after a connection loss)",
                            self.broker_id,
                            tp,
                        )
                        written[tp] = now
                    else:
                        log.warning(
                            "controller %d: the state of %s changed under it (now %s); deciding again",
                            self.broker_id,
                            tp,
                            now,
                        )
                        conflicts.add(tp)
        except Exception as exc:
            if not _moved(exc):
                # ZooKeeper did not answer (the connection stayed lost): each write may or
                # may not have been applied, and the context may be behind. What was
                # written is recorded; the rest is read again later and announced
                self._schedule_reconcile({tp.topic for tp in states})
            raise
        return written, conflicts

    async def _reread_states(self, ctx: ControllerContext, topic: str) -> dict[TopicPartition, LeaderAndIsr]:
        """Reads the partition states of `topic` into the context (and returns them)."""
        fresh = {}
        for p, (state, version) in (await self.store.get_partition_states(topic)).items():
            tp = TopicPartition(topic, p)
            fresh[tp] = ctx.states[tp] = LeaderAndIsr(
                state.leader, state.leader_epoch, tuple(state.isr), version, state.leader_recovery_state
            )
            ctx.state_epochs[tp] = state.controller_epoch
        return fresh

    async def _apply(
        self,
        decide: Callable[[ClusterView], Decision],
        batch: RequestBatch,
        is_new: bool = False,
        tell_replicas: bool = True,
    ) -> Decision:
        """Decides (`decide(view)`), writes the decision and adds what the brokers must hear
        of it to `batch`. A partition whose write conflicted is decided again from the state
        read again (decisions.py: "read again and decide again"), at most WRITE_ROUNDS
        times, then left for the next event. Every partition whose state is new to the
        brokers — written, or found changed — is announced: LeaderAndIsr to its live
        replicas (unless not `tell_replicas`: an AlterPartition's leader hears its answer)
        and UpdateMetadata to every live broker. Returns Decision(the states written,
        the failures of the last decision of each partition)."""
        ctx = self._require()
        decision = decide(self._view())
        todo = dict(decision.states)
        before = {tp: ctx.states.get(tp) for tp in todo}
        failed = dict(decision.failed)
        written: dict[TopicPartition, LeaderAndIsr] = {}
        changed: set[TopicPartition] = set()  # read again, different from what the brokers were told
        rounds = 0
        while todo:
            rounds += 1
            try:
                done, conflicts = await self._write(todo)
            except Exception as exc:
                if not _moved(exc):  # what earlier rounds wrote is announced with the rest
                    self._schedule_reconcile({tp.topic for tp in written})
                raise
            written.update(done)
            changed -= set(done)
            changed |= conflicts
            if not conflicts:
                break
            again = decide(self._view())
            for tp in conflicts:
                failed.pop(tp, None)
                if tp in again.failed:
                    failed[tp] = again.failed[tp]
            todo = {tp: s for tp, s in again.states.items() if tp in conflicts}
            if todo and rounds >= WRITE_ROUNDS:
                log.warning(
                    "controller %d: the states of %s kept changing under it; left for the next event",
                    self.broker_id,
                    sorted(map(str, todo)),
                )
                break
        self._log_state_changes(before, written)
        for tp in sorted(set(written) | changed):
            if tell_replicas or tp in changed:
                batch.add_leader_and_isr([r for r in ctx.replicas(tp) if r in ctx.brokers], tp, is_new)
        batch.add_update_metadata(ctx.brokers, set(written) | changed)
        for tp, failure in failed.items():
            if failure.error not in (ErrorCode.ELECTION_NOT_NEEDED,):
                log.warning("controller %d: %s has no leader: %s", self.broker_id, tp, failure.message)
        return Decision(written, failed)

    def _log_state_changes(
        self, before: dict[TopicPartition, LeaderAndIsr | None], written: dict[TopicPartition, LeaderAndIsr]
    ) -> None:
        """Every partition state this controller wrote, in the state-change log (Kafka's
        state.change.logger), and the elections among them counted."""
        epoch = self.epoch
        for tp in sorted(written):
            new, old = written[tp], before.get(tp)
            old_leader = D.NO_LEADER if old is None else old.leader
            if new.leader != old_leader and new.leader != D.NO_LEADER:
                self.leader_elections += 1
                unclean = old is not None and new.leader_recovery_state == D.RECOVERING and new.leader not in old.isr
                if unclean:
                    self.unclean_leader_elections += 1
            else:
                unclean = False
            state_change_log.info(
                "[Controller id=%d epoch=%d] partition %s-%d: leader %d -> %d, leader epoch %d, ISR %s -> %s%s",
                self.broker_id,
                epoch,
                tp.topic,
                tp.partition,
                old_leader,
                new.leader,
                new.leader_epoch,
                [] if old is None else list(old.isr),
                list(new.isr),
                " (unclean election)" if unclean else "",
            )

    def _schedule_reconcile(self, topics: set[str]) -> None:
        """After a write whose outcome is unknown: read those topics' states again once the
        event is over, announce them, and give leaders to what needs one."""
        self._uncertain |= topics
        if not self._reconcile_pending:
            self._reconcile_pending = True
            asyncio.get_running_loop().call_later(RECONCILE_BACKOFF_S, self._fire_reconcile)

    def _fire_reconcile(self) -> None:
        self._reconcile_pending = False
        if self.ctx is None:
            self._uncertain.clear()  # a new controller reads everything anyway
        else:
            self._enqueue(self._reconcile)

    async def _reconcile(self) -> None:
        ctx = self._require()
        topics, self._uncertain = self._uncertain & set(ctx.assignments), set()
        if not topics:
            return
        batch = RequestBatch()
        try:
            for topic in sorted(topics):
                # every partition of the topic is announced: a replica ignores a state it has
                for tp in await self._reread_states(ctx, topic):
                    batch.add_leader_and_isr([r for r in ctx.replicas(tp) if r in ctx.brokers], tp)
                    batch.add_update_metadata(ctx.brokers, [tp])
        except Exception as exc:
            if not _moved(exc):
                self._schedule_reconcile(topics)
            raise
        log.info(
            "controller %d: partition states of %s read again after a write of unknown outcome",
            self.broker_id,
            sorted(topics),
        )
        await self._apply(self._repair, batch)
        self._send(batch)

    def _repair(self, view: ClusterView) -> Decision:
        """What a new controller decides first: offline partitions get a leader, brokers
        not registered leave the ISRs."""
        ctx = self._require()
        absent = {r for state in ctx.states.values() for r in state.isr if r not in ctx.brokers}
        return D.on_broker_failure(view, absent) if absent else D.on_broker_startup(view, ())

    def _send(self, batch: RequestBatch, callback: ResponseCallback | None = None) -> None:
        ctx = self._require()
        batch.deleting = set(ctx.deleting)
        for bid, request, version in batch.build(self.broker_id, ctx.epoch, ctx.brokers, ctx.partitions()):
            if isinstance(request, LeaderAndIsrRequest):
                self.channels.send(bid, request, version, self._leader_and_isr_answered(callback))
            else:
                self.channels.send(bid, request, version, callback)

    # ------------------------------------------------------------------ log dir failures

    def _leader_and_isr_answered(self, callback: ResponseCallback | None) -> ResponseCallback:
        """Reads a LeaderAndIsr answer for replicas in offline dirs (Kafka's
        LeaderAndIsrResponseReceived) besides calling `callback`."""

        def answered(broker_id: int, request: object, response: object) -> None:
            if callback is not None:
                callback(broker_id, request, response)
            if response is None or getattr(response, "error_code", ErrorCode.NONE) != ErrorCode.NONE:
                return
            names = {t.topic_id: t.topic_name for t in getattr(request, "topic_states", ())}
            offline: set[TopicPartition] = set()
            online: set[TopicPartition] = set()
            for t in getattr(response, "topics", ()):
                name = names.get(t.topic_id)
                if name is None:
                    continue
                for p in t.partition_errors:
                    if p.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
                        offline.add(TopicPartition(name, p.partition_index))
                    elif p.error_code == ErrorCode.NONE:
                        online.add(TopicPartition(name, p.partition_index))
            ctx = self.ctx
            if ctx is None or not (offline or online & ctx.offline_replicas.get(broker_id, set())):
                return
            self._enqueue_if_active(
                self._on_replicas_answered, broker_id, getattr(request, "broker_epoch", -1), offline, online
            )

        return answered

    async def _on_log_dir_event(self) -> None:
        """Brokers whose log dirs failed (/log_dir_event_notification): each gets
        LeaderAndIsr for all its replicas; its answers name the offline ones
        (KafkaController.onBrokerLogDirFailure)."""
        ctx = self._require()
        events = await self.store.get_log_dir_events()
        if not events:
            return
        brokers = {b for b in events.values() if b is not None}
        await self.store.delete_log_dir_events(list(events), ctx.epoch_zk_version)
        live = sorted(b for b in brokers if b in ctx.brokers)
        log.info(
            "controller %d: log dir failure on brokers %s: asking them the state of their replicas",
            self.broker_id,
            live,
        )
        batch = RequestBatch()
        for tp, info in ctx.partitions().items():
            batch.add_leader_and_isr([b for b in live if b in info.replicas], tp)
        self._send(batch)

    async def _on_replicas_answered(
        self, broker_id: int, broker_epoch: int, offline: set[TopicPartition], online: set[TopicPartition]
    ) -> None:
        ctx = self._require()
        b = ctx.brokers.get(broker_id)
        if b is None or (broker_epoch >= 0 and b.epoch != broker_epoch):
            return  # an answer of a previous life of that broker
        before = set(ctx.offline_replicas.get(broker_id, set()))
        now = (before - online) | {tp for tp in offline if tp in ctx.states}
        if now:
            ctx.offline_replicas[broker_id] = now
        else:
            ctx.offline_replicas.pop(broker_id, None)
        new = now - before
        if not new:
            return
        state_change_log.info(
            "[Controller id=%d epoch=%d] replicas of broker %d are offline (failed log dir): %s",
            self.broker_id,
            ctx.epoch,
            broker_id,
            ", ".join(map(str, sorted(new))),
        )
        batch = RequestBatch()
        await self._apply(lambda view: D.on_replicas_offline(view, {tp: (broker_id,) for tp in new}), batch)
        batch.add_update_metadata(ctx.brokers, new)  # their offline_replicas changed
        self._send(batch)

    # ------------------------------------------------------------------ brokers

    async def _on_broker_change(self) -> None:
        ctx = self._require()
        old = dict(ctx.brokers)
        await self._read_brokers(ctx)
        bounced = {b for b in ctx.brokers if b in old and old[b].epoch != ctx.brokers[b].epoch}
        dead = (set(old) - set(ctx.brokers)) | bounced
        new = (set(ctx.brokers) - set(old)) | bounced
        if not dead and not new:
            return
        log.info(
            "controller %d: brokers %s (new %s, gone %s)",
            self.broker_id,
            sorted(ctx.brokers),
            sorted(new),
            sorted(dead),
        )
        ctx.shutting_down -= dead
        for b in dead | new:
            ctx.offline_replicas.pop(b, None)  # a new registration: its dirs are read again
        self.channels.set_brokers(ctx.brokers.values())
        batch = RequestBatch()
        if dead:
            # the decision removes the dead (and the bounced) from the live brokers itself
            await self._apply(lambda view: D.on_broker_failure(view, dead), batch)
        batch.add_update_metadata(ctx.brokers, None)
        if new:
            await self._apply(lambda view: D.on_broker_startup(view, new), batch)
            for tp, info in ctx.partitions().items():
                on_new = [r for r in info.replicas if r in new]
                if on_new:
                    batch.add_leader_and_isr(on_new, tp)
            batch.full.update(new)
        self._send(batch)
        if new:
            await self._resume_deletions()
        # a reassignment waiting for a target replica to lead may now finish
        await self.reassignments.finish_complete()
        await self._finalize_features(ctx)

    # ------------------------------------------------------------------ topics

    async def _on_topic_change(self) -> None:
        ctx = self._require()
        names = set(await self.store.get_topic_names())
        added = sorted(names - set(ctx.assignments))
        if not added:
            return
        batch = RequestBatch()
        for topic in added:
            await self._watch_topic(topic)
            await self._read_topic(ctx, topic)
            log.info(
                "controller %d: new topic %s with %d partitions", self.broker_id, topic, len(ctx.assignments[topic])
            )
        new_tps = [tp for tp in self._view().partitions if tp.topic in added and tp not in ctx.states]
        await self._apply(lambda view: D.initial_states(view, new_tps), batch, is_new=True)
        # partitions that already had a state (a controller that died half-way) are told too
        for topic in added:
            for p, replicas in ctx.assignments[topic].items():
                tp = TopicPartition(topic, p)
                if tp in ctx.states:
                    batch.add_leader_and_isr([r for r in replicas if r in ctx.brokers], tp, True)
                    batch.add_update_metadata(ctx.brokers, [tp])
        self._send(batch)

    async def _on_partition_change(self, topic: str) -> None:
        ctx = self._require()
        if topic not in ctx.assignments or topic in ctx.deleting:
            return
        node, version = await self.store.get_topic_assignment(topic)
        if version > ctx.topic_versions.get(topic, -1):
            ctx.topic_versions[topic] = version
        known = ctx.assignments[topic]
        added = {p: tuple(r) for p, r in node.partitions.items() if p not in known}
        if not added:
            return
        known.update(added)
        log.info("controller %d: topic %s grows to %d partitions", self.broker_id, topic, len(known))
        batch = RequestBatch()
        new_tps = [TopicPartition(topic, p) for p in added]
        await self._apply(lambda view: D.initial_states(view, new_tps), batch, is_new=True)
        self._send(batch)

    async def _on_config_change(self, paths: list[str]) -> None:
        ctx = self._require()
        topics = {p.split("/", 1)[1] for p in paths if p.startswith("topics/")}
        changed = False
        for topic in topics:
            if topic in ctx.assignments:
                before = ctx.unclean.get(topic, False)
                await self._read_topic_config(ctx, topic)
                changed |= ctx.unclean[topic] and not before
        if changed:
            batch = RequestBatch()
            await self._apply(lambda view: D.on_broker_startup(view, ()), batch)
            self._send(batch)

    # ------------------------------------------------------------------ deletion

    async def _on_deletion_change(self) -> None:
        ctx = self._require()
        marked = set(await self.store.get_topics_marked_for_deletion())
        for topic in marked - set(ctx.assignments):
            # a marker for a topic that does not exist (any more): clean it up
            await self.store.delete_topic_znodes(topic, ctx.epoch_zk_version)
        ctx.deleting |= marked & set(ctx.assignments)
        await self._resume_deletions()

    async def _resume_deletions(self) -> None:
        ctx = self._require()
        for topic in sorted(ctx.deleting):
            if any(tp.topic == topic for tp in ctx.reassigning):
                # as Kafka: a topic being reassigned is deleted once the reassignment is over
                log.info("controller %d: deletion of %s waits for its reassignment", self.broker_id, topic)
                continue
            replicas = {r for rs in ctx.assignments.get(topic, {}).values() for r in rs}
            if not replicas <= set(ctx.brokers):
                log.info(
                    "controller %d: deletion of %s waits for replicas %s",
                    self.broker_id,
                    topic,
                    sorted(replicas - set(ctx.brokers)),
                )
                continue
            tps = [TopicPartition(topic, p) for p in ctx.assignments[topic]]
            batch = RequestBatch()
            batch.add_update_metadata(ctx.brokers, [tp for tp in tps if tp in ctx.states])
            for tp in tps:
                for r in ctx.replicas(tp):
                    batch.add_stop_replica(r, tp, delete=True)
            pending = {r for r in replicas}
            done = asyncio.get_running_loop().create_future()

            def answered(
                broker_id: int,
                _request: object,
                response: object,
                pending: set[int] = pending,
                done: asyncio.Future[None] = done,
            ) -> None:
                if response is not None and getattr(response, "error_code", 0) == 0:
                    pending.discard(broker_id)
                if not pending and not done.done():
                    done.set_result(None)

            self._send(batch, answered)
            asyncio.get_running_loop().create_task(self._finish_deletion(topic, done))

    async def _finish_deletion(self, topic: str, done: asyncio.Future[None]) -> None:
        try:
            await wait_for(done, self.config["request.timeout.ms"] / 1000)
        except asyncio.TimeoutError:
            log.warning(
                "controller %d: not every replica of %s confirmed its deletion; retrying", self.broker_id, topic
            )
            self._enqueue(self._resume_deletions)
            return
        self._enqueue(self._complete_deletion, topic)

    async def _complete_deletion(self, topic: str) -> None:
        ctx = self._require()
        if topic not in ctx.deleting:
            return
        await self.store.delete_topic_znodes(topic, ctx.epoch_zk_version)
        tps = [TopicPartition(topic, p) for p in ctx.assignments.get(topic, {})]
        batch = RequestBatch()
        batch.add_update_metadata(ctx.brokers, [tp for tp in tps if tp in ctx.states])
        batch.deleting = {topic}
        self._send(batch)  # brokers drop the topic (leader -2) from their caches
        ctx.deleting.discard(topic)
        ctx.assignments.pop(topic, None)
        ctx.topic_ids.pop(topic, None)
        ctx.unclean.pop(topic, None)
        ctx.topic_versions.pop(topic, None)
        for tp in tps:
            ctx.states.pop(tp, None)
            ctx.state_epochs.pop(tp, None)
        self._watched_topics.discard(topic)
        self.store.unwatch_topic(topic)
        log.info("controller %d: deleted topic %s", self.broker_id, topic)

    # ------------------------------------------------------------------ requests from brokers

    async def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: list[AlterIsrChange]
    ) -> tuple[ErrorCode, dict[tuple[str, int], object]]:
        """AlterPartition: [(topic, partition, leader epoch, new ISR, partition epoch,
        leader recovery state)] -> (top error, {(topic, partition): LeaderAndIsr | error})."""
        return await self._enqueue(self._alter_partition, broker_id, broker_epoch, changes)

    async def _alter_partition(
        self, broker_id: int, broker_epoch: int, changes: list[AlterIsrChange]
    ) -> tuple[ErrorCode, dict[tuple[str, int], object]]:
        ctx = self._require()
        b = ctx.brokers.get(broker_id)
        if b is None or b.epoch != broker_epoch:
            # the sender must prove it is the live registration of that broker id (Kafka
            # accepts -1 from old versions; nothing here sends it)
            if b is not None and broker_epoch > b.epoch:
                self._on_stale_broker_epoch(broker_id)
            return ErrorCode.STALE_BROKER_EPOCH, {}
        asked = {TopicPartition(c[0], c[1]): c for c in changes}

        def decide(view: ClusterView) -> Decision:
            states: dict[TopicPartition, LeaderAndIsr] = {}
            failed: dict[TopicPartition, D.Failure] = {}
            for tp, (topic, p, leader_epoch, isr, partition_epoch, recovery) in asked.items():
                res = D.alter_partition(
                    view, topic, p, broker_id, leader_epoch, isr, partition_epoch, leader_recovery_state=recovery
                )
                if isinstance(res, LeaderAndIsr):
                    if res != ctx.states.get(tp):
                        states[tp] = res
                else:
                    failed[tp] = D.Failure(res)
            return Decision(states, failed)

        first = decide(self._view())
        before = {tp: ctx.states.get(tp) for tp in asked}
        batch = RequestBatch()
        try:
            decision = await self._apply(decide, batch, tell_replicas=False)
        except Exception as exc:
            if _moved(exc):
                raise
            # the store did not answer: a write may have been applied or not. The leader
            # must not take this for "not applied" (it would forget an ISR ZooKeeper may
            # hold): REQUEST_TIMED_OUT, on which it keeps the larger ISR and asks again
            log.warning(
                "controller %d: recording the ISR changes of %s failed (%s); their outcome is unknown",
                self.broker_id,
                sorted(map(str, first.states)),
                exc,
            )
            decision = Decision(
                {tp: s for tp, s in ctx.states.items() if tp in asked and s != before[tp]},
                {tp: D.Failure(ErrorCode.REQUEST_TIMED_OUT) for tp in first.states} | dict(first.failed),
            )
            batch.add_update_metadata(ctx.brokers, decision.states)
        self._send(batch)
        # a reassignment completes when its target replicas are all in the ISR
        self.reassignments.isr_changed(decision.states)
        out: dict[tuple[str, int], object] = {}
        for tp, (_t, _p, leader_epoch, isr, _pe, recovery) in asked.items():
            current = ctx.states.get(tp)
            if tp in decision.states:
                out[(tp.topic, tp.partition)] = decision.states[tp]
                log.info("controller %d: ISR of %s is now %s", self.broker_id, tp, list(decision.states[tp].isr))
            elif tp in decision.failed:
                out[(tp.topic, tp.partition)] = decision.failed[tp].error
            elif current is not None and _same_state(
                current, LeaderAndIsr(broker_id, leader_epoch, tuple(isr), 0, recovery)
            ):
                out[(tp.topic, tp.partition)] = current  # it already is as asked
            else:
                out[(tp.topic, tp.partition)] = ErrorCode.INVALID_UPDATE_VERSION  # kept changing: ask again
        return ErrorCode.NONE, out

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[ErrorCode, list[TopicPartition]]:
        """ControlledShutdown -> (error, [remaining partitions])."""
        return await self._enqueue(self._controlled_shutdown, broker_id, broker_epoch)

    async def _controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[ErrorCode, list[TopicPartition]]:
        ctx = self._require()
        b = ctx.brokers.get(broker_id)
        if b is None:
            return ErrorCode.BROKER_NOT_AVAILABLE, []
        if b.epoch != broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH, []
        log.info("controller %d: controlled shutdown of broker %d", self.broker_id, broker_id)
        ctx.shutting_down.add(broker_id)
        batch = RequestBatch()
        decision = await self._apply(lambda view: D.controlled_shutdown(view, broker_id), batch)
        written = decision.states
        # it stops following the partitions it no longer leads or is in the ISR of
        for tp in written:
            if broker_id in ctx.replicas(tp) and written[tp].leader != broker_id:
                batch.add_stop_replica(broker_id, tp, delete=False)
        self._send(batch)
        remaining = sorted(decision.failed)
        return ErrorCode.NONE, remaining

    async def elect_leaders(
        self, election_type: int, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """ElectLeaders -> {tp: (error, message)}; partitions None: every partition."""
        return await self._enqueue(self._elect_leaders, election_type, partitions)

    async def _elect_leaders(
        self, election_type: int, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        if partitions is None:
            partitions = sorted(self._view().partitions)
        tps = partitions
        elect = D.preferred_election if election_type == PREFERRED else D.unclean_election
        batch = RequestBatch()
        decision = await self._apply(lambda view: elect(view, tps), batch)
        written = decision.states
        self._send(batch)
        out: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        for tp in partitions:
            if tp in written:
                out[tp] = (ErrorCode.NONE, None)
            elif tp in decision.failed:
                f = decision.failed[tp]
                out[tp] = (f.error, f.message)
            else:
                out[tp] = (ErrorCode.UNKNOWN_SERVER_ERROR, "the partition state changed during the election")
        return out

    # ------------------------------------------------------------------ preferred leaders

    def _schedule_rebalance(self) -> None:
        if not self.config["auto.leader.rebalance.enable"]:
            return
        interval = self.config["leader.imbalance.check.interval.seconds"]
        self._rebalance = asyncio.get_running_loop().call_later(interval, lambda: self._enqueue(self._auto_rebalance))

    async def _auto_rebalance(self) -> None:
        self._rebalance = None
        if self.ctx is None:
            return
        view = self._view()
        tps = D.preferred_leader_imbalance(view, self.config["leader.imbalance.per.broker.percentage"])
        tps = [tp for tp in tps if tp not in self.ctx.reassigning]  # as Kafka: not while reassigned
        if tps:
            log.info("controller %d: moving %d partitions back to their preferred leader", self.broker_id, len(tps))
            batch = RequestBatch()
            await self._apply(lambda v: D.preferred_election(v, tps), batch)
            self._send(batch)
        self._schedule_rebalance()


def _endpoint(reg: BrokerRegistration, epoch: int, listener_name: str) -> BrokerEndpoint:
    """The controller reaches a broker on the inter-broker listener (its first endpoint
    when it has no listener of that name)."""
    ep = reg.endpoint(listener_name) or reg.endpoints[0]
    return BrokerEndpoint(reg.broker_id, ep.host, ep.port, reg.rack, epoch, tuple(reg.endpoints))


def _with_version(s: LeaderAndIsr, version: int) -> LeaderAndIsr:
    return LeaderAndIsr(s.leader, s.leader_epoch, tuple(s.isr), version, s.leader_recovery_state)


def _same_state(a: LeaderAndIsr, b: LeaderAndIsr) -> bool:
    """The same partition state but for the znode version."""
    return (a.leader, a.leader_epoch, tuple(a.isr), a.leader_recovery_state) == (
        b.leader,
        b.leader_epoch,
        tuple(b.isr),
        b.leader_recovery_state,
    )


def _moved(exc: Exception) -> bool:
    """This controller was replaced (the store's fence, or it resigned): nothing to repair."""
    return isinstance(exc, (ControllerMovedError, ControllerMoved))
