"""The coordinator runtime (Kafka's coordinator-common): what the coordinators that keep
their state in a compacted internal topic share — placement of a key on a partition,
loading a partition when this broker becomes its leader and unloading it when it stops,
writes through the partition writer, timers. The group coordinator (broker/group/) and
the transaction coordinator (broker/txn/) run on it; a share coordinator will be the
third. It sees the cluster through the small interfaces of partition_writer.py, never
the server."""

from broker.coordinator.loader import LOAD_CHUNK, CoordinatorPlayback, LoadSummary
from broker.coordinator.partition_writer import ClusterView, PartitionWrite, PartitionWriter
from broker.coordinator.placement import java_string_hash, partition_for
from broker.coordinator.runtime import CoordinatorContext, CoordinatorRuntime, CoordinatorShard

__all__ = [
    "LOAD_CHUNK",
    "ClusterView",
    "CoordinatorContext",
    "CoordinatorPlayback",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "LoadSummary",
    "PartitionWrite",
    "PartitionWriter",
    "java_string_hash",
    "partition_for",
]
