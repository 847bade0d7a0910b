"""Replica assignment for new topics and new partitions, as Kafka's ZooKeeper-mode
controller side does it (AdminUtils.assignReplicasToBrokers, and
AdminZkClient.createNewPartitionsAssignment for CreatePartitions).

Pure functions: brokers in (id -> rack, or None where `broker.rack` is unset), a map
partition -> replicas out (first replica = preferred leader). Errors are
KafkaProtocolError with Kafka's error code and message.

Round-robin (no broker has a rack), over the brokers sorted by id:
- the first replica of partition p is broker (p + start_index) mod n, so each broker is
  preferred leader of num_partitions / n partitions (give or take one);
- replica j > 0 sits 1 + (shift + j - 1) mod (n - 1) places after the first, where
  `shift` grows by one each time p reaches a multiple of n: the followers of one
  broker's partitions spread over all the other brokers instead of always the next one;
- start_index and the initial shift are random (two draws, Kafka's order) unless
  fixed_start_index >= 0 fixes both.

Rack-aware (every broker has a rack): the same walk over the brokers ordered so racks
alternate (`rack_alternated_broker_list`); a follower is skipped while its rack already
holds a replica of the partition and some rack holds none. So with racks >= replication
factor the replicas of a partition sit on distinct racks; with fewer racks every rack
gets one.

Some brokers with a rack and some without: Kafka refuses the automatic assignment
(AdminOperationException, which its CreateTopics/CreatePartitions answer as
UNKNOWN_SERVER_ERROR); so do we, with Kafka's message.

Invariants of every result: replication_factor distinct replicas per partition, all
from `brokers`; partitions numbered start_partition_id, start_partition_id + 1, ...
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

from broker.protocol.errors import ErrorCode, KafkaProtocolError

Brokers = Mapping[int, str | None]  # broker id -> rack (None: no broker.rack)

_RANDOM = random.Random()


def assign_replicas(
    brokers: Brokers,
    num_partitions: int,
    replication_factor: int,
    *,
    start_partition_id: int = 0,
    fixed_start_index: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Kafka's AdminUtils.assignReplicasToBrokers for `num_partitions` partitions."""
    if num_partitions <= 0:
        raise KafkaProtocolError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise KafkaProtocolError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise KafkaProtocolError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.",
        )
    with_rack = {b: rack for b, rack in brokers.items() if rack is not None}
    if not with_rack:
        ordered = sorted(brokers)
        racks: Mapping[int, str] = {}
    elif len(with_rack) < len(brokers):
        raise KafkaProtocolError(
            ErrorCode.UNKNOWN_SERVER_ERROR, "Not all brokers have rack information for replica rack aware assignment."
        )
    else:
        ordered = rack_alternated_broker_list(with_rack)
        racks = with_rack
    n = len(ordered)
    if fixed_start_index >= 0:
        start_index = shift = fixed_start_index
    else:
        rng = rng if rng is not None else _RANDOM
        start_index = rng.randrange(n)
        shift = rng.randrange(n)
    num_racks = len(set(racks.values()))
    out: dict[int, list[int]] = {}
    first_id = max(0, start_partition_id)
    for partition in range(first_id, first_id + num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        if racks:
            out[partition] = _rack_aware_replicas(ordered, racks, num_racks, first, shift, replication_factor)
        else:
            out[partition] = [ordered[first]] + [
                ordered[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)
            ]
    return out


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    """Where the (j+1)-th follower of a partition led from index `first` goes."""
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_aware_replicas(
    ordered: Sequence[int], racks: Mapping[int, str], num_racks: int, first: int, shift: int, replication_factor: int
) -> list[int]:
    """Walks the rack-alternated list past `first`, skipping a broker whose rack already
    holds a replica while another rack holds none, and brokers already chosen (some
    broker is always left: replication_factor <= len(ordered))."""
    leader = ordered[first]
    replicas = [leader]
    used_racks = {racks[leader]}
    k = 0
    while len(replicas) < replication_factor:
        broker = ordered[_replica_index(first, shift * num_racks, k, len(ordered))]
        k += 1
        rack = racks[broker]
        if (rack not in used_racks or len(used_racks) == num_racks) and broker not in replicas:
            replicas.append(broker)
            used_racks.add(rack)
    return replicas


def rack_alternated_broker_list(racks: Mapping[int, str]) -> list[int]:
    """Brokers taken one per rack in turn (racks by name, brokers of a rack by id).

    {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    -> [0, 3, 1, 5, 4, 2]
    """
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [column[i] for i in range(max(map(len, columns), default=0)) for column in columns if i < len(column)]


def assign_new_partitions(
    existing: Mapping[int, Sequence[int]],
    brokers: Brokers,
    total_count: int,
    assignments: Sequence[Sequence[int]] | None = None,
) -> dict[int, list[int]]:
    """The replicas of the partitions CreatePartitions adds to a topic (Kafka's
    ZkAdminManager.createPartitions + AdminZkClient.createNewPartitionsAssignment).

    `existing`: the topic's current assignment; `total_count`: the partition count asked
    for; `assignments`: the client's explicit replicas for the new partitions, in order,
    or None to assign them. Automatic assignment continues the topic's round-robin: the
    start index is that of the first broker (by id) not below partition 0's first
    replica, the replication factor is partition 0's, partition ids go on from
    len(existing). No randomness (Kafka fixes the start index here).
    Returns only the new partitions.
    """
    if not existing:
        raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic does not exist.")
    current = len(existing)
    if total_count < current:
        raise KafkaProtocolError(
            ErrorCode.INVALID_PARTITIONS,
            f"Topic currently has {current} partitions, which is higher than the requested {total_count}.",
        )
    if total_count == current:
        raise KafkaProtocolError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
    partition0 = existing.get(0)
    if not partition0:
        raise KafkaProtocolError(
            ErrorCode.UNKNOWN_SERVER_ERROR,
            f"Unexpected existing replica assignment, partition id 0 is missing: {dict(existing)}",
        )
    increment = total_count - current
    if assignments is not None:
        unknown = {b for replicas in assignments for b in replicas} - set(brokers)
        if unknown:
            raise KafkaProtocolError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Unknown broker(s) in replica assignment: {_ids(sorted(unknown))}.",
            )
        if len(assignments) != increment:
            raise KafkaProtocolError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Increasing the number of partitions by {increment} but {len(assignments)} assignments provided.",
            )
        new = {current + i: list(replicas) for i, replicas in enumerate(assignments)}
        _check_each_partition(new)
        bad = {p: len(r) for p, r in new.items() if len(r) != len(partition0)}
        if bad:
            raise KafkaProtocolError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Inconsistent replication factor between partitions, partition 0 has "
                f"{len(partition0)} while partitions [{_ids(bad)}] have replication "
                f"factors [{_ids(bad.values())}], respectively.",
            )
        return new
    ordered = sorted(brokers)
    start_index = next((i for i, b in enumerate(ordered) if b >= partition0[0]), 0)
    return assign_replicas(
        brokers, increment, len(partition0), start_partition_id=current, fixed_start_index=start_index
    )


def validate_manual_assignment(assignment: Mapping[int, Sequence[int]], brokers: Brokers) -> None:
    """CreateTopics with explicit replicas: raises INVALID_REPLICA_ASSIGNMENT unless every
    partition names distinct registered brokers, all partitions have as many replicas,
    and the partitions are 0..n-1.

    Kafka's ZooKeeper path (AdminZkClient.validateTopicCreate) checks the last three; the
    empty-list and unknown-broker checks come from its KRaft controller
    (ReplicationControlManager.validateManualPartitionAssignment): a replica on a broker
    that does not exist could never be created.
    """
    unknown = {b for replicas in assignment.values() for b in replicas} - set(brokers)
    if unknown:
        raise KafkaProtocolError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker(s) in replica assignment: {_ids(sorted(unknown))}."
        )
    _check_each_partition(assignment)
    if len({len(replicas) for replicas in assignment.values()}) > 1:
        raise KafkaProtocolError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All partitions should have the same number of replicas"
        )
    if sorted(assignment) != list(range(len(assignment))):
        raise KafkaProtocolError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence"
        )


def _check_each_partition(assignment: Mapping[int, Sequence[int]]) -> None:
    for partition in sorted(assignment):
        replicas = assignment[partition]
        if not replicas:
            raise KafkaProtocolError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Cannot have replication factor of 0 for partition id {partition}.",
            )
        if len(set(replicas)) != len(replicas):
            raise KafkaProtocolError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Duplicate brokers not allowed in replica assignment: {_ids(replicas)} for partition id {partition}.",
            )


def _ids(ids: Iterable[int]) -> str:
    return ", ".join(map(str, ids))
