"""Partition reassignment (KIP-455) as pure decisions: Kafka's ReplicaAssignment and the
steps of KafkaController.onPartitionReassignment in ZooKeeper mode (3.x).

A partition being reassigned has, in its topic znode, three lists:

    RS  replicas           target ++ original, without duplicates (the target first, so
                           its first replica is the preferred leader)
    AR  adding_replicas    target - original: the replicas that must catch up
    RR  removing_replicas  original - target: the replicas that go once they have

and `original = RS - AR`, `target = RS - RR`. A new target while one is in progress
starts from the original replicas again (Kafka's reassignTo); a cancel (no target)
goes back to the original ones, which, being in the ISR already, completes at once and
removes the replicas that were being added.

The steps, each decided here and carried out by the controller (controller.py):

    start     the topic znode gets RS/AR/RR; every replica of RS gets LeaderAndIsr with
              the leader epoch bumped (`bump`); the new replicas create their logs and
              follow the leader, which counts RS as its replicas
    wait      until every target replica is in the ISR (`is_complete`: the leader's
              AlterPartition expansions are what move it)
    finish    a leader from the target if the current one is not in it or not online,
              else the same leader, with the epoch bumped; RR leaves the ISR (`finish`);
              RR gets StopReplica(delete); the topic znode gets RS = target, AR = RR = []

Nothing here writes or sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from broker.cluster.controller.decisions import ClusterView, Failure, LeaderAndIsr
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode


def _distinct(replicas: Iterable[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(replicas))


@dataclass(frozen=True)
class ReplicaAssignment:
    """Kafka's ReplicaAssignment: a partition's replicas and, during a reassignment,
    the replicas being added and removed (both empty otherwise)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    @property
    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    def reassign_to(self, target: Iterable[int]) -> ReplicaAssignment:
        target = tuple(target)
        original = self.original
        return ReplicaAssignment(
            _distinct(target + original),
            tuple(r for r in target if r not in original),
            tuple(r for r in original if r not in target),
        )


_NO_PARTITION = Failure(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")


def plan(
    view: ClusterView,
    tp: TopicPartition,
    current: ReplicaAssignment | None,
    target: Iterable[int] | None,
    deleting: bool = False,
) -> ReplicaAssignment | Failure:
    """An AlterPartitionReassignments entry (KafkaController.processApiPartitionReassignment
    with validateReassignment and maybeBuildReassignment): the partition's new assignment,
    or why not, checked in Kafka's order:

    INVALID_REPLICA_ASSIGNMENT   an empty target, duplicates, a negative id, or a replica
                                 to add that is not a live broker
    NO_REASSIGNMENT_IN_PROGRESS  a cancel (no target) of a partition not being reassigned
                                 (or of no partition at all)
    UNKNOWN_TOPIC_OR_PARTITION   no such partition, or its topic is being deleted

    `current` is the partition's assignment (None: no such partition)."""
    if target is not None:
        wanted = tuple(target)
        if not wanted:
            return Failure(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Empty replica list specified in partition reassignment."
            )
        if len(set(wanted)) != len(wanted):
            return Failure(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Duplicate replica ids in partition reassignment replica list: {list(wanted)}",
            )
        if any(r < 0 for r in wanted):
            return Failure(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Invalid broker id in replica list: {list(wanted)}")
        adding = (current or ReplicaAssignment(())).reassign_to(wanted).adding
        if not set(adding) <= view.live_brokers:
            return Failure(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Replica assignment has brokers that are not alive. Replica list: {list(adding)}, "
                f"live broker list: {sorted(view.live_brokers)}",
            )
    if target is None:
        if current is None or not current.being_reassigned:
            return Failure(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
        new = current.reassign_to(current.original)
    elif current is None:
        return _NO_PARTITION
    else:
        new = current.reassign_to(tuple(target))
    if deleting:
        return _NO_PARTITION
    return new


def unneeded(current: ReplicaAssignment, new: ReplicaAssignment) -> tuple[int, ...]:
    """Replicas of a reassignment replaced by a new one that the new one does not have
    (Kafka's updateCurrentReassignment): they are stopped and deleted at once."""
    return tuple(r for r in current.replicas if r not in new.replicas)


def is_complete(state: LeaderAndIsr | None, assignment: ReplicaAssignment) -> bool:
    """Every target replica is in the ISR (KafkaController.isReassignmentComplete); a
    partition not being reassigned is complete."""
    if not assignment.being_reassigned:
        return True
    return state is not None and set(assignment.target) <= set(state.isr)


def bump(view: ClusterView, tp: TopicPartition, assignment: ReplicaAssignment | None = None) -> LeaderAndIsr | None:
    """The start of a reassignment (and a resumed one not yet complete): the same leader
    and ISR with the leader epoch bumped, so that every replica of the new RS hears of it
    (KafkaController.updateLeaderEpochAndSendRequest). Replicas no longer in the
    assignment's RS (a reassignment replaced by another, `unneeded`) leave the ISR, as
    Kafka's OfflineReplica transition takes them out; should one of them lead, the first
    replica of RS online and in the ISR takes over (if none can, it keeps leading and
    stays in the ISR). None for a partition without a state."""
    pv = view.partitions.get(tp)
    if pv is None or pv.state is None:
        return None
    state = pv.state
    keep = set(state.isr) if assignment is None else set(assignment.replicas)
    leader = state.leader
    if assignment is not None and leader not in keep:
        candidates = [r for r in assignment.replicas if view.is_online(r) and r in state.isr]
        if candidates:
            leader = candidates[0]
    return state.changed(leader, tuple(r for r in state.isr if r in keep or r == leader))


def finish(view: ClusterView, tp: TopicPartition, assignment: ReplicaAssignment) -> LeaderAndIsr | Failure:
    """The completion (B3-B4 of onPartitionReassignment in one state): the leader stays if
    it is a target replica and online, else the first target replica that is online and
    in the ISR leads (Kafka's ReassignPartitionLeaderElectionStrategy); the removed
    replicas leave the ISR; the leader epoch is bumped. A Failure when no target replica
    can lead: the reassignment waits (Kafka would keep the old leader and then take it out
    of the ISR, leaving the partition without one)."""
    pv = view.partitions.get(tp)
    if pv is None or pv.state is None:
        return _NO_PARTITION
    state = pv.state
    target = assignment.target
    leader = state.leader
    if leader not in target or not view.is_online(leader) or leader not in state.isr:
        candidates = [r for r in target if view.is_online(r) and r in state.isr]
        if not candidates:
            return Failure(
                ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                f"No target replica of {tp} ({list(target)}) is online and in the ISR {list(state.isr)}.",
            )
        leader = candidates[0]
    # the removed replicas leave the ISR (and any other replica outside the target: one a
    # replaced reassignment was adding, `unneeded`)
    return state.changed(leader, tuple(r for r in state.isr if r in target))


def in_progress(assignments: Mapping[TopicPartition, ReplicaAssignment]) -> dict[TopicPartition, ReplicaAssignment]:
    """The partitions of `assignments` being reassigned (what a new controller resumes)."""
    return {tp: a for tp, a in assignments.items() if a.being_reassigned}
