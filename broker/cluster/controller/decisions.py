"""The controller's decisions as pure functions of a snapshot: Kafka's KafkaController,
PartitionStateMachine, ReplicaStateMachine and Election in ZooKeeper mode (3.x).

A decision reads a ClusterView and returns a Decision: the new LeaderAndIsr of each
partition it changes, and the partitions it could not give a leader, each with an error
code and why. It writes nothing. The caller writes each new state to
/brokers/topics/<t>/partitions/<p>/state on condition that the znode is still at the
version the view had (new.partition_epoch - 1; a created znode starts at version 0),
then sends LeaderAndIsr / UpdateMetadata; a failed conditional write means the view was
stale: read again and decide again (controller._apply calls the same decision again on
the view read again). Several changes Kafka makes to one partition in one
event (an election, then one ISR shrink per dead replica) are one state here, one write.

Vocabulary (Kafka's ControllerContext):
- live broker: registered (ClusterView.live_brokers), whether shutting down or not;
- online replica: on a live broker that is not shutting down, and not in a failed log dir
  of its broker (ClusterView.offline, Kafka's replicasOnOfflineDirs); only those may be
  elected or added to an ISR;
- offline partition: it has a state, and its leader is -1, not a live broker, or an
  offline replica (its log dir failed). A leader that is shutting down still leads until
  it is moved (controlled_shutdown) or dies.

Invariants of every state a decision returns (tests/unit/cluster holds them as tables and
as hypothesis properties):
- the leader is an online replica, or -1 when nobody can lead;
- the ISR is a non-empty subset of the replicas, without duplicates, holding the leader;
  the last ISR member is never removed: when it dies the partition keeps it
  (leader -1, ISR [it]) so that it, and only it, can come back cleanly;
- leader_epoch and partition_epoch are the old ones plus one; AlterPartition alone keeps
  the leader epoch (in ZooKeeper mode an ISR change asked by the leader does not bump it);
- a leader outside the old ISR (unclean election) only where the topic enables unclean
  election or ElectLeaders asks for it; its ISR is [leader] and it is RECOVERING.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from broker.cluster.controller.election import (
    controlled_shutdown_leader,
    offline_partition_leader,
    preferred_replica_leader,
)
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode, KafkaProtocolError

NO_LEADER = -1
RECOVERED = 0  # LeaderRecoveryState
RECOVERING = 1  # elected uncleanly, not yet recovered: the ISR stays [leader]


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's state znode. partition_epoch is the znode's version (Kafka's zkVersion)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    leader_recovery_state: int = RECOVERED

    def changed(self, leader: int, isr: Iterable[int], leader_recovery_state: int | None = None) -> LeaderAndIsr:
        """This state after one controller change: leader epoch + 1, znode version + 1."""
        recovery = self.leader_recovery_state if leader_recovery_state is None else leader_recovery_state
        return LeaderAndIsr(leader, self.leader_epoch + 1, tuple(isr), self.partition_epoch + 1, recovery)


@dataclass(frozen=True)
class PartitionView:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    state: LeaderAndIsr | None  # None: created, never given a leader (no replica was online)


@dataclass(frozen=True)
class ClusterView:
    live_brokers: frozenset[int]
    racks: Mapping[int, str | None]
    shutting_down: frozenset[int]
    partitions: Mapping[TopicPartition, PartitionView]
    unclean_enabled: Callable[[str], bool]  # topic -> its unclean.leader.election.enable
    #: replicas in failed log dirs of live brokers, by partition (Kafka's replicasOnOfflineDirs)
    offline: Mapping[TopicPartition, frozenset[int]] = field(default_factory=dict)

    def is_online(self, broker: int) -> bool:
        return broker in self.live_brokers and broker not in self.shutting_down

    def replica_online(self, tp: TopicPartition, broker: int) -> bool:
        return self.is_online(broker) and not (self.offline and broker in self.offline.get(tp, ()))

    def online_replicas(self, view: PartitionView) -> tuple[int, ...]:
        if self.offline:
            gone = self.offline.get(TopicPartition(view.topic, view.partition), ())
            return tuple(r for r in view.replicas if self.is_online(r) and r not in gone)
        return tuple(r for r in view.replicas if self.is_online(r))

    def live_racks(self) -> dict[int, str | None]:
        """The brokers new replicas go to, with their racks: assign_replicas' input (Kafka
        assigns over the brokers it knows alive, shutting down or not)."""
        return {b: self.racks.get(b) for b in self.live_brokers}


@dataclass(frozen=True)
class Failure:
    error: ErrorCode
    message: str | None = None


@dataclass(frozen=True)
class Decision:
    """New states to write, and the partitions that did not get the leader asked for.

    A partition may be in both: when its last ISR member dies the ISR is kept but the
    leader becomes -1 (a state to write) and no leader could be elected (a failure).
    """

    states: Mapping[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    failed: Mapping[TopicPartition, Failure] = field(default_factory=dict)


_UNKNOWN = Failure(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")


# ---------------------------------------------------------------- new and offline partitions


def initial_states(view: ClusterView, partitions: Iterable[TopicPartition]) -> Decision:
    """New partitions (PartitionStateMachine.initializeLeaderAndIsrForPartitions): leader =
    first online replica, ISR = the online replicas, epochs 0. A partition with no online
    replica stays without a state (failed); one that has a state already is left alone."""
    states: dict[TopicPartition, LeaderAndIsr] = {}
    failed: dict[TopicPartition, Failure] = {}
    for tp in map(_tp, partitions):
        pv = view.partitions.get(tp)
        if pv is None:
            failed[tp] = _UNKNOWN
        elif pv.state is None:
            _put(tp, _initial_state(view, tp, pv), states, failed)
    return Decision(states, failed)


def on_broker_failure(view: ClusterView, dead: Iterable[int]) -> Decision:
    """Brokers gone (KafkaController.onBrokerFailure -> onReplicasBecomeOffline).

    1. Every offline partition (now including those the dead led) and every partition
       without a state gets a leader if it can: the first online ISR member, the ISR
       shrinking to its online members; or, where the topic enables it, the first online
       replica, with ISR [it], RECOVERING.
    2. Partitions whose ISR still holds a dead broker (it followed, or it led and nobody
       could replace it) drop it from the ISR (the OfflineReplica transition) — but never
       the last member: a dead leader with no other ISR member leaves leader -1 and an ISR
       of one, itself. When several members die together Kafka keeps whichever its loop
       over the dead visits last; we keep the old leader (its log holds everything the
       others had), else the first of the ISR.

    `view` may list the dead brokers as live or not; they are removed here, from the
    shutting-down set too.
    """
    dead = frozenset(dead)
    view = replace(view, live_brokers=view.live_brokers - dead, shutting_down=view.shutting_down - dead)
    states, failed = _elect_offline_partitions(view)
    for tp in map(_tp, sorted(view.partitions)):
        state = view.partitions[tp].state
        if tp not in states and state is not None and not dead.isdisjoint(state.isr):
            shrunk = _without(state, dead)
            if shrunk is not None:
                states[tp] = shrunk
    return Decision(states, failed)


def on_replicas_offline(view: ClusterView, replicas: Mapping[TopicPartition, Iterable[int]]) -> Decision:
    """Replicas whose log dir failed on their (live) broker, which answered LeaderAndIsr
    for them with KAFKA_STORAGE_ERROR (KafkaController.onReplicasBecomeOffline, after
    onBrokerLogDirFailure). As on_broker_failure, per replica: every offline partition
    (now including those led by an offline replica) gets a leader among the online ISR
    members, the ISR shrinking to its online members; partitions whose ISR still holds an
    offline replica drop it (never the last member: with nobody to elect the partition
    keeps leader -1 and that ISR of one). `view.offline` may or may not list them."""
    gone = {_tp(tp): frozenset(rs) for tp, rs in replicas.items()}
    merged = dict(view.offline)
    for tp, rs in gone.items():
        merged[tp] = merged.get(tp, frozenset()) | rs
    view = replace(view, offline=merged)
    states, failed = _elect_offline_partitions(view)
    for tp, rs in sorted(gone.items()):
        pv = view.partitions.get(tp)
        state = pv.state if pv is not None else None
        if tp not in states and state is not None and not rs.isdisjoint(state.isr):
            shrunk = _without(state, rs)
            if shrunk is not None:
                states[tp] = shrunk
    return Decision(states, failed)


def on_broker_startup(view: ClusterView, new: Iterable[int]) -> Decision:
    """Brokers (re)registered (KafkaController.onBrokerStartup): every offline partition and
    every partition without a state gets a leader if it now can — a returning last ISR
    member leads again cleanly; an out-of-sync replica only where unclean election is
    enabled. The caller still sends the new brokers LeaderAndIsr for all their replicas
    (they become followers) and UpdateMetadata to everyone."""
    new = frozenset(new)
    view = replace(view, live_brokers=view.live_brokers | new, shutting_down=view.shutting_down - new)
    states, failed = _elect_offline_partitions(view)
    return Decision(states, failed)


def _elect_offline_partitions(
    view: ClusterView,
) -> tuple[dict[TopicPartition, LeaderAndIsr], dict[TopicPartition, Failure]]:
    """PartitionStateMachine.triggerOnlinePartitionStateChange: new and offline partitions."""
    states: dict[TopicPartition, LeaderAndIsr] = {}
    failed: dict[TopicPartition, Failure] = {}
    for tp in map(_tp, sorted(view.partitions)):
        pv = view.partitions[tp]
        if pv.state is None:
            _put(tp, _initial_state(view, tp, pv), states, failed)
        elif (
            pv.state.leader == NO_LEADER
            or pv.state.leader not in view.live_brokers
            or (view.offline and pv.state.leader in view.offline.get(tp, ()))
        ):
            _put(tp, _elect_offline(view, tp, pv, view.unclean_enabled(pv.topic)), states, failed)
    return states, failed


def _initial_state(view: ClusterView, tp: TopicPartition, pv: PartitionView) -> LeaderAndIsr | Failure:
    online = view.online_replicas(pv)
    if not online:
        return Failure(
            ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, f"No replica of {tp} is online (replicas {list(pv.replicas)})."
        )
    return LeaderAndIsr(online[0], 0, online, 0)


def _elect_offline(
    view: ClusterView, tp: TopicPartition, pv: PartitionView, unclean_enabled: bool
) -> LeaderAndIsr | Failure:
    """Election.leaderForOffline."""
    state = pv.state
    assert state is not None
    online = view.online_replicas(pv)
    leader, unclean = offline_partition_leader(pv.replicas, state.isr, online, unclean_enabled)
    if leader is None:
        if not online:
            why = f"No replica of {tp} is online (replicas {list(pv.replicas)})."
        else:
            why = f"No member of the ISR {list(state.isr)} of {tp} is online, and unclean leader election is disabled."
        return Failure(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, why)
    if unclean:
        return state.changed(leader, (leader,), RECOVERING)
    return state.changed(leader, (r for r in state.isr if r in online))


def _without(state: LeaderAndIsr, gone: frozenset[int]) -> LeaderAndIsr | None:
    """ReplicaStateMachine's OfflineReplica ISR shrink for all of `gone`, or None when it
    changes nothing (Kafka would still write, bumping the epoch; nothing needs it)."""
    isr = tuple(r for r in state.isr if r not in gone)
    if not isr:
        isr = (state.leader if state.leader in state.isr else state.isr[0],)
    leader = NO_LEADER if state.leader in gone else state.leader
    if leader == state.leader and isr == state.isr:
        return None
    return state.changed(leader, isr)


# ---------------------------------------------------------------- controlled shutdown


def controlled_shutdown(view: ClusterView, broker_id: int) -> Decision:
    """ControlledShutdown from `broker_id` (KafkaController.doControlledShutdown), which
    joins the shutting-down brokers. Only partitions with more than one replica and a
    state are acted on:
    - those it leads move to the first replica that is live, in the ISR and not shutting
      down; the ISR loses every shutting-down broker. Those with no such replica stay
      led by it: `failed` lists them, the caller answers them as remaining_partitions and
      the broker asks again later;
    - those it follows drop it from their ISR (never the last member).
    Raises BROKER_NOT_AVAILABLE for a broker that is not registered. Checking the
    request's broker epoch is the caller's (the view has none).
    """
    if broker_id not in view.live_brokers:
        raise KafkaProtocolError(ErrorCode.BROKER_NOT_AVAILABLE, f"Broker id {broker_id} does not exist.")
    shutting_down = view.shutting_down | {broker_id}
    states: dict[TopicPartition, LeaderAndIsr] = {}
    failed: dict[TopicPartition, Failure] = {}
    for tp in map(_tp, sorted(view.partitions)):
        pv = view.partitions[tp]
        state = pv.state
        if broker_id not in pv.replicas or len(pv.replicas) < 2 or state is None:
            continue
        if state.leader == broker_id:
            live = view.live_brokers - view.offline.get(tp, frozenset()) if view.offline else view.live_brokers
            leader = controlled_shutdown_leader(pv.replicas, state.isr, live, shutting_down)
            if leader is None:
                failed[tp] = Failure(
                    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                    f"No other online member in the ISR {list(state.isr)} of {tp}.",
                )
            else:
                states[tp] = state.changed(leader, (r for r in state.isr if r not in shutting_down))
        elif broker_id in state.isr:
            shrunk = _without(state, frozenset((broker_id,)))
            if shrunk is not None:
                states[tp] = shrunk
    return Decision(states, failed)


# ---------------------------------------------------------------- AlterPartition


def alter_partition(
    view: ClusterView,
    topic: str,
    partition: int,
    broker_id: int,
    leader_epoch: int,
    new_isr: Iterable[int],
    partition_epoch: int,
    *,
    leader_recovery_state: int = RECOVERED,
    version: int = 3,
) -> LeaderAndIsr | ErrorCode:
    """A leader asks to change its ISR (KafkaController.processAlterPartition, ZooKeeper
    mode). Returns the state to write (leader epoch kept, znode version + 1), the current
    state unchanged when it already is what is asked (answer it, write nothing), or the
    error code for this partition, checked in Kafka's order:

    UNKNOWN_TOPIC_OR_PARTITION  no such partition, or it has no state
    NOT_CONTROLLER              the request has a newer leader or partition epoch than the
                                view: this controller is behind, let the leader find the new one
    FENCED_LEADER_EPOCH         an older leader epoch
    INVALID_REQUEST             the sender is not the leader (*)
    (the state as asked)        idempotent retry: same leader, epoch, ISR and recovery
                                state, whatever the partition epoch
    INVALID_UPDATE_VERSION      an older partition epoch (an ISR change raced another)
    INVALID_REQUEST             an ISR with duplicates, a non-replica, or without the
                                leader (*); RECOVERING with more than the leader; going
                                back from RECOVERED to RECOVERING
    INELIGIBLE_REPLICA          an ISR member that is not online (not registered or
                                shutting down); OPERATION_NOT_ATTEMPTED for versions 0-1

    (*) Kafka's ZooKeeper controller does not check these (it would write the sender as
    leader); its KRaft controller does, with these codes (ReplicationControlManager
    .validateAlterPartitionData), and a leader running Kafka's Partition code stops
    retrying on INVALID_REQUEST. NOT_CONTROLLER for an inactive controller and
    STALE_BROKER_EPOCH are the caller's.
    """
    pv = view.partitions.get(TopicPartition(topic, partition))
    if pv is None or pv.state is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    current = pv.state
    isr = tuple(new_isr)
    if partition_epoch > current.partition_epoch or leader_epoch > current.leader_epoch:
        return ErrorCode.NOT_CONTROLLER
    if leader_epoch < current.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if broker_id != current.leader:
        return ErrorCode.INVALID_REQUEST
    if isr == current.isr and leader_recovery_state == current.leader_recovery_state:
        return current
    if partition_epoch < current.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION
    if len(set(isr)) != len(isr) or not set(isr) <= set(pv.replicas) or broker_id not in isr:
        return ErrorCode.INVALID_REQUEST
    if leader_recovery_state == RECOVERING and len(isr) > 1:
        return ErrorCode.INVALID_REQUEST
    if current.leader_recovery_state == RECOVERED and leader_recovery_state == RECOVERING:
        return ErrorCode.INVALID_REQUEST
    if not all(view.replica_online(TopicPartition(topic, partition), r) for r in isr):
        return ErrorCode.INELIGIBLE_REPLICA if version > 1 else ErrorCode.OPERATION_NOT_ATTEMPTED
    return LeaderAndIsr(broker_id, leader_epoch, isr, current.partition_epoch + 1, leader_recovery_state)


# ---------------------------------------------------------------- preferred leaders and ElectLeaders


def preferred_leader_imbalance(view: ClusterView, percentage: float) -> list[TopicPartition]:
    """The partitions the automatic rebalance moves back to their preferred replica
    (KafkaController.checkAndTriggerAutoLeaderRebalance): for each broker, among the
    partitions whose first replica it is, the share not led by it; where that share is
    above `percentage` (leader.imbalance.per.broker.percentage) / 100, those of them whose
    preferred replica is online and in the ISR (so never a broker shutting down).
    Give the result to preferred_election."""
    by_preferred: dict[int, list[TopicPartition]] = {}
    for tp in map(_tp, sorted(view.partitions)):
        by_preferred.setdefault(view.partitions[tp].replicas[0], []).append(tp)
    out: list[TopicPartition] = []
    for broker, tps in sorted(by_preferred.items()):
        elsewhere = [tp for tp in tps if (state := view.partitions[tp].state) is not None and state.leader != broker]
        if len(elsewhere) / len(tps) > percentage / 100:
            out.extend(tp for tp in elsewhere if _preferred_leader(view, view.partitions[tp]) is not None)
    return sorted(out)


def preferred_election(view: ClusterView, partitions: Iterable[TopicPartition]) -> Decision:
    """ElectLeaders PREFERRED (and the automatic rebalance): the preferred replica leads,
    ISR unchanged. Failures as Kafka answers them: UNKNOWN_TOPIC_OR_PARTITION,
    ELECTION_NOT_NEEDED (it already leads), PREFERRED_LEADER_NOT_AVAILABLE (it is not
    online or not in the ISR)."""
    states: dict[TopicPartition, LeaderAndIsr] = {}
    failed: dict[TopicPartition, Failure] = {}
    for tp in map(_tp, partitions):
        pv = view.partitions.get(tp)
        if pv is None:
            failed[tp] = _UNKNOWN
        elif pv.state is None:
            failed[tp] = Failure(
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, f"{tp} has had no online replica since it was created."
            )
        elif pv.state.leader == pv.replicas[0]:
            failed[tp] = Failure(ErrorCode.ELECTION_NOT_NEEDED)
        elif (leader := _preferred_leader(view, pv)) is None:
            failed[tp] = Failure(
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                f"The preferred replica of {tp} is not online or not in the ISR {list(pv.state.isr)}.",
            )
        else:
            states[tp] = pv.state.changed(leader, pv.state.isr)
    return Decision(states, failed)


def _preferred_leader(view: ClusterView, pv: PartitionView) -> int | None:
    assert pv.state is not None
    return preferred_replica_leader(pv.replicas, pv.state.isr, view.online_replicas(pv))


def unclean_election(view: ClusterView, partitions: Iterable[TopicPartition]) -> Decision:
    """ElectLeaders UNCLEAN: a partition whose leader is -1, not live or shutting down gets
    the first online ISR member, or else the first online replica whatever the topic's
    config says. Failures as Kafka answers them: UNKNOWN_TOPIC_OR_PARTITION,
    ELECTION_NOT_NEEDED (its leader is online), ELIGIBLE_LEADERS_NOT_AVAILABLE (no replica
    is online)."""
    states: dict[TopicPartition, LeaderAndIsr] = {}
    failed: dict[TopicPartition, Failure] = {}
    for tp in map(_tp, partitions):
        pv = view.partitions.get(tp)
        if pv is None:
            failed[tp] = _UNKNOWN
        elif pv.state is None:
            failed[tp] = Failure(
                ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, f"{tp} has had no online replica since it was created."
            )
        elif view.replica_online(tp, pv.state.leader):
            failed[tp] = Failure(ErrorCode.ELECTION_NOT_NEEDED)
        else:
            _put(tp, _elect_offline(view, tp, pv, unclean_enabled=True), states, failed)
    return Decision(states, failed)


# ---------------------------------------------------------------- helpers


def _tp(tp: TopicPartition | tuple[str, int]) -> TopicPartition:
    return tp if isinstance(tp, TopicPartition) else TopicPartition(*tp)


def _put(
    tp: TopicPartition,
    outcome: LeaderAndIsr | Failure,
    states: dict[TopicPartition, LeaderAndIsr],
    failed: dict[TopicPartition, Failure],
) -> None:
    if isinstance(outcome, Failure):
        failed[tp] = outcome
    else:
        states[tp] = outcome
