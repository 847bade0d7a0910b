"""Leader selection for one partition: Kafka's PartitionLeaderElectionAlgorithms
(kafka/controller/PartitionStateMachine.scala, 3.x).

Each function takes the partition's replicas (assignment order, the first one being the
preferred leader), its ISR and the replicas that may lead, and returns the new leader or
None. Candidates are always tried in assignment order, never in ISR order, so the same
inputs give the same leader on every controller.

`live` is what Kafka calls online replicas: on a registered broker that is not shutting
down — except in `controlled_shutdown_leader`, where Kafka passes the shutting-down
brokers too and excludes them through `shutting_down`.

Invariant: a leader returned is in `live`, and it is in `isr` unless
`offline_partition_leader` says the election was unclean.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def offline_partition_leader(
    replicas: Sequence[int], isr: Collection[int], live: Collection[int], unclean_enabled: bool
) -> tuple[int | None, bool]:
    """A partition whose leader is gone (or a new one): the first live ISR member; failing
    that, where unclean election is enabled, the first live replica (it may lack records
    the ISR had acknowledged). Returns (leader or None, whether the election was unclean)."""
    for replica in replicas:
        if replica in live and replica in isr:
            return replica, False
    if unclean_enabled:
        for replica in replicas:
            if replica in live:
                return replica, True
    return None, False


def reassign_partition_leader(reassignment: Sequence[int], isr: Collection[int], live: Collection[int]) -> int | None:
    """During a reassignment: the first replica of the target assignment that is live and
    in the ISR."""
    return next((r for r in reassignment if r in live and r in isr), None)


def preferred_replica_leader(replicas: Sequence[int], isr: Collection[int], live: Collection[int]) -> int | None:
    """The preferred (first) replica, if it is live and in the ISR; nobody else."""
    if replicas and replicas[0] in live and replicas[0] in isr:
        return replicas[0]
    return None


def controlled_shutdown_leader(
    replicas: Sequence[int], isr: Collection[int], live: Collection[int], shutting_down: Collection[int]
) -> int | None:
    """The leader is shutting down: the first replica that is live, in the ISR and not
    itself shutting down."""
    return next((r for r in replicas if r in live and r in isr and r not in shutting_down), None)
