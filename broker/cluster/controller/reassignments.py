"""The controller's partition reassignments (KIP-455, Kafka's KafkaController in ZooKeeper
mode: onPartitionReassignment and what calls it), carried out on the controller's event
queue with the pure decisions of reassignment_decisions.py.

    alter      AlterPartitionReassignments: each partition's new target (None: cancel)
               is checked (reassignment_decisions.plan), the topic nodes get RS/AR/RR, then each
               partition advances:
    advance    not complete: LeaderAndIsr with the leader epoch bumped to every replica
               of RS (the new ones create their logs and follow); replicas a replaced
               reassignment was adding leave the ISR and get StopReplica(delete);
               complete (the whole target in the ISR, at once for a cancel): finish
    finish     the assignment is the target in memory, then the partition state gets a
               leader from the target and an ISR without the removed replicas (one
               conditional write, leader epoch bumped), LeaderAndIsr goes to the target,
               StopReplica(delete) to the removed replicas, the topic node gets RS =
               target with AR/RR cleared, UpdateMetadata to every broker
    triggers   an ISR change recorded through AlterPartition (isr_changed), a broker
               joining or leaving (finish_complete), and a new controller, which
               resumes every reassignment its topic nodes show (resume)

What the controller knows lives in its context: `assignments` holds each partition's RS,
`reassigning` the ReplicaAssignment of those being reassigned, `topic_versions` the zk
version of each topic node (every write of one is conditional on it and fenced by the
controller epoch; a conflict reads the node again and writes again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from broker.cluster.controller import reassignment_decisions as R
from broker.cluster.controller.channel_manager import RequestBatch
from broker.cluster.controller.decisions import ClusterView, Decision, Failure, LeaderAndIsr
from broker.cluster.controller.reassignment_decisions import ReplicaAssignment
from broker.cluster.store.errors import BadVersion
from broker.cluster.store.znodes import TopicAssignment
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.cluster.controller.controller import Controller, ControllerContext

log = logging.getLogger(__name__)

TOPIC_WRITE_ROUNDS = 5
RETRY_S = 1.0  # a finish whose topic node write failed is tried again this much later

#: AlterPartitionReassignments' answer per partition: None (accepted) or why not
AlterResult = Failure | None


class Reassignments:
    def __init__(self, controller: Controller):
        self.c = controller
        self._retry: asyncio.TimerHandle | None = None
        self._unrecorded: set[str] = set()  # topics whose node must still record finished reassignments

    # ------------------------------------------------------------------ requests

    async def alter(self, wanted: Mapping[TopicPartition, Iterable[int] | None]) -> dict[TopicPartition, AlterResult]:
        """AlterPartitionReassignments: {partition: target replicas, or None to cancel}."""
        return await self.c._enqueue(self._alter, {tp: None if t is None else tuple(t) for tp, t in wanted.items()})

    async def listing(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, ReplicaAssignment]:
        """ListPartitionReassignments: the partitions being reassigned (of `partitions`,
        or all)."""
        return await self.c._enqueue(self._list, None if partitions is None else list(partitions))

    async def _list(self, partitions: list[TopicPartition] | None) -> dict[TopicPartition, ReplicaAssignment]:
        ctx = self.c._require()
        if partitions is None:
            return dict(sorted(ctx.reassigning.items()))
        return {tp: ctx.reassigning[tp] for tp in partitions if tp in ctx.reassigning}

    async def _alter(self, wanted: dict[TopicPartition, tuple[int, ...] | None]) -> dict[TopicPartition, AlterResult]:
        ctx = self.c._require()
        view = self.c._view()
        results: dict[TopicPartition, AlterResult] = {}
        plans: dict[TopicPartition, tuple[ReplicaAssignment, ReplicaAssignment]] = {}
        for tp, target in sorted(wanted.items()):
            current = self._current(ctx, tp)
            planned = R.plan(view, tp, current, target, deleting=tp.topic in ctx.deleting)
            if isinstance(planned, Failure):
                results[tp] = planned
                continue
            assert current is not None
            plans[tp] = (current, planned)
            results[tp] = None
            log.info(
                "controller %d: reassignment of %s: %s -> %s (adding %s, removing %s)",
                self.c.broker_id,
                tp,
                list(current.replicas),
                list(planned.target),
                list(planned.adding),
                list(planned.removing),
            )
        for topic in sorted({tp.topic for tp in plans}):
            await self._write_topic(
                ctx, topic, {tp.partition: new for tp, (_old, new) in plans.items() if tp.topic == topic}
            )
        await self._advance(plans)
        return results

    # ------------------------------------------------------------------ triggers

    def read(self, ctx: ControllerContext, topic: str, node: TopicAssignment) -> None:
        """A topic node read (failover, a new topic): the reassignments it shows."""
        for p, replicas in node.partitions.items():
            tp = TopicPartition(topic, p)
            ra = ReplicaAssignment(
                tuple(replicas), tuple(node.adding_replicas.get(p, ())), tuple(node.removing_replicas.get(p, ()))
            )
            if ra.being_reassigned:
                ctx.reassigning[tp] = ra
            else:
                ctx.reassigning.pop(tp, None)

    async def resume(self) -> None:
        """A new controller (KafkaController.maybeResumeReassignments): each reassignment
        found in the topic nodes goes on where it was, its replicas told again with a new
        leader epoch, or finished if its target is in the ISR already."""
        ctx = self.c._require()
        self._unrecorded.clear()  # what the topic nodes hold was just read
        if ctx.reassigning:
            log.info(
                "controller %d: resuming the reassignments of %s", self.c.broker_id, sorted(map(str, ctx.reassigning))
            )
            await self._advance({tp: (ra, ra) for tp, ra in ctx.reassigning.items()})

    def isr_changed(self, states: Mapping[TopicPartition, LeaderAndIsr]) -> None:
        """After an AlterPartition was recorded: the reassignments it may complete are
        looked at in an event of their own (the leader hears its answer first)."""
        ctx = self.c.ctx
        if ctx is None:
            return
        done = [tp for tp, s in states.items() if tp in ctx.reassigning and R.is_complete(s, ctx.reassigning[tp])]
        if done:
            self.c._enqueue_if_active(self._finish_event, done)

    async def finish_complete(self) -> None:
        """Finishes every reassignment whose target is in the ISR (after broker changes,
        or a failed finish)."""
        ctx = self.c._require()
        done = [tp for tp, ra in ctx.reassigning.items() if R.is_complete(ctx.states.get(tp), ra)]
        if done:
            await self._finish_event(done)

    async def _finish_event(self, tps: list[TopicPartition]) -> None:
        ctx = self.c._require()
        now = {
            tp: ctx.reassigning[tp]
            for tp in tps
            if tp in ctx.reassigning and R.is_complete(ctx.states.get(tp), ctx.reassigning[tp])
        }
        if now:
            await self._finish(now)

    # ------------------------------------------------------------------ steps

    def _current(self, ctx: ControllerContext, tp: TopicPartition) -> ReplicaAssignment | None:
        replicas = ctx.assignments.get(tp.topic, {}).get(tp.partition)
        if replicas is None:
            return None
        return ctx.reassigning.get(tp) or ReplicaAssignment(tuple(replicas))

    async def _advance(self, plans: Mapping[TopicPartition, tuple[ReplicaAssignment, ReplicaAssignment]]) -> None:
        """onPartitionReassignment for each partition whose topic node holds its new
        assignment: (old, new)."""
        ctx = self.c._require()
        complete = {tp: new for tp, (_old, new) in plans.items() if R.is_complete(ctx.states.get(tp), new)}
        started = {tp: new for tp, (_old, new) in plans.items() if tp not in complete}
        if started:
            batch = RequestBatch()

            def decide(view: ClusterView) -> Decision:
                states = {}
                for tp, new in started.items():
                    s = R.bump(view, tp, new)
                    if s is not None:
                        states[tp] = s
                return Decision(states)

            decision = await self.c._apply(decide, batch)
            for tp, (old, new) in plans.items():
                if tp not in started:
                    continue
                state = decision.states.get(tp) or ctx.states.get(tp)
                for r in R.unneeded(old, new):
                    # a replica the replaced reassignment was adding: out of the ISR (the
                    # bump did it) and deleted, unless it still leads (nobody else could)
                    if state is None or state.leader != r:
                        batch.add_stop_replica(r, tp, delete=True)
            self.c._send(batch)
        # complete ones (a cancel, a target already in the ISR); a replaced reassignment's
        # extra replicas are outside the target: finish drops them too
        if complete:
            extra = {tp: R.unneeded(plans[tp][0], new) for tp, new in complete.items()}
            await self._finish(complete, extra)

    async def _finish(
        self,
        done: Mapping[TopicPartition, ReplicaAssignment],
        extra: Mapping[TopicPartition, tuple[int, ...]] | None = None,
    ) -> None:
        """B1-B8 of onPartitionReassignment for partitions whose target is in the ISR."""
        ctx = self.c._require()
        view = self.c._view()
        ready = {tp: ra for tp, ra in done.items() if isinstance(R.finish(view, tp, ra), LeaderAndIsr)}
        for tp in sorted(set(done) - set(ready)):
            log.warning(
                "controller %d: reassignment of %s waits: %s", self.c.broker_id, tp, R.finish(view, tp, done[tp])
            )
        if not ready:
            return
        old_rs = {tp: ctx.assignments[tp.topic][tp.partition] for tp in ready}
        saved = {tp: ctx.reassigning.get(tp) for tp in ready}

        def restore(tps: Iterable[TopicPartition]) -> None:
            for tp in tps:
                ctx.assignments[tp.topic][tp.partition] = old_rs[tp]
                was = saved[tp]
                if was is not None:
                    ctx.reassigning[tp] = was

        # B2: RS = target, AR = RR = [] in memory: LeaderAndIsr goes to the target only
        for tp, ra in ready.items():
            ctx.assignments[tp.topic][tp.partition] = ra.target
            ctx.reassigning.pop(tp, None)

        def decide(v: ClusterView) -> Decision:
            states = {}
            for tp, ra in ready.items():
                pv = v.partitions.get(tp)
                if pv is not None and R.is_complete(pv.state, ra):
                    s = R.finish(v, tp, ra)
                    if isinstance(s, LeaderAndIsr):
                        states[tp] = s
            return Decision(states)

        batch = RequestBatch()
        try:
            decision = await self.c._apply(decide, batch)  # B3-B4: leader from the target, RR out of the ISR
        except Exception as exc:
            if ctx is self.c.ctx:
                restore(ready)  # what was written is found again by the next try
                if not _moved(exc):
                    self._schedule_retry()
            raise
        finished = {tp: ra for tp, ra in ready.items() if tp in decision.states}
        restore(set(ready) - set(finished))  # its state changed under it: not finished
        for tp, ra in finished.items():  # B5: the removed replicas are deleted
            gone = (set(old_rs[tp]) - set(ra.target)) | set((extra or {}).get(tp, ()))
            for r in sorted(gone):
                if r in ctx.brokers:
                    batch.add_stop_replica(r, tp, delete=True)
        self.c._send(batch)
        if not finished:
            return
        for topic in sorted({tp.topic for tp in finished}):  # B6: the topic node
            self._unrecorded.add(topic)
        await self._record()
        batch = RequestBatch()
        batch.add_update_metadata(ctx.brokers, finished)  # B8
        self.c._send(batch)
        for tp, ra in finished.items():
            log.info("controller %d: reassignment of %s done: replicas %s", self.c.broker_id, tp, list(ra.target))
        if ctx.deleting & {tp.topic for tp in finished}:
            await self.c._resume_deletions()

    async def _record(self) -> None:
        """Writes the topic nodes of finished reassignments (what the context holds);
        one that fails is tried again shortly (a new controller would finish them again)."""
        ctx = self.c._require()
        for topic in sorted(self._unrecorded):
            if topic not in ctx.assignments:
                self._unrecorded.discard(topic)
                continue
            try:
                await self._write_topic(ctx, topic, {})
            except Exception as exc:
                if _moved(exc):
                    raise
                log.warning(
                    "controller %d: recording the reassignments of %s failed (%s); trying again",
                    self.c.broker_id,
                    topic,
                    exc,
                )
                self._schedule_retry()
                return
            self._unrecorded.discard(topic)

    def _schedule_retry(self) -> None:
        if self._retry is None:

            def fire() -> None:
                self._retry = None
                self.c._enqueue_if_active(self._retry_event)

            self._retry = asyncio.get_running_loop().call_later(RETRY_S, fire)

    async def _retry_event(self) -> None:
        await self._record()
        await self.finish_complete()

    # ------------------------------------------------------------------ the topic node

    async def _write_topic(self, ctx: ControllerContext, topic: str, changes: Mapping[int, ReplicaAssignment]) -> None:
        """Writes the topic node with `changes` (partition -> assignment) over what the
        context knows, conditional on the node's version and fenced by the controller
        epoch; a conflict (partitions added meanwhile) reads the node again and writes
        again. The context holds the result."""
        others: dict[int, tuple[int, ...]] = {}  # partitions added meanwhile, not known here yet
        for _ in range(TOPIC_WRITE_ROUNDS):
            parts = {**others, **ctx.assignments[topic]}
            current = {tp.partition: ra for tp, ra in ctx.reassigning.items() if tp.topic == topic}
            for p, ra in changes.items():
                parts[p] = ra.replicas
                current[p] = ra
            node = TopicAssignment(
                ctx.topic_ids.get(topic),
                parts,
                {p: ra.adding for p, ra in current.items() if ra.being_reassigned and ra.adding},
                {p: ra.removing for p, ra in current.items() if ra.being_reassigned and ra.removing},
            )
            try:
                version = await self.c.store.set_topic_reassignment(
                    topic, node, ctx.topic_versions.get(topic, 0), ctx.epoch_zk_version
                )
            except BadVersion:
                fresh, fresh_version = await self.c.store.get_topic_assignment(topic)
                log.info(
                    "controller %d: the node of topic %s changed (now version %d); writing again",
                    self.c.broker_id,
                    topic,
                    fresh_version,
                )
                ctx.topic_versions[topic] = fresh_version
                # they are kept as written; the topic's watch adds them to the context
                others = {p: tuple(r) for p, r in fresh.partitions.items() if p not in ctx.assignments[topic]}
                continue
            ctx.topic_versions[topic] = version
            for p, ra in changes.items():
                tp = TopicPartition(topic, p)
                ctx.assignments[topic][p] = ra.replicas
                if ra.being_reassigned:
                    ctx.reassigning[tp] = ra
                else:
                    ctx.reassigning.pop(tp, None)
            return
        raise BadVersion(f"the node of topic {topic} kept changing")


def answer(results: Mapping[TopicPartition, AlterResult]) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
    """(error code, message) per partition, as AlterPartitionReassignments answers."""
    return {tp: (ErrorCode.NONE, None) if r is None else (r.error, r.message) for tp, r in results.items()}


def _moved(exc: BaseException) -> bool:
    from broker.cluster.controller.controller import ControllerMovedError
    from broker.cluster.store.errors import ControllerMoved

    return isinstance(exc, (ControllerMovedError, ControllerMoved))
