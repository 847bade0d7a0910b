"""Consumer groups: membership (the coordinator), group state, and the groups' storage
in __consumer_offsets (the metadata manager, on the coordinator runtime of
broker/coordinator/)."""

from broker.coordinator import PartitionWriter
from broker.group.coordinator import GroupCoordinator
from broker.group.metadata_manager import OFFSETS_TOPIC, GroupMetadataManager

__all__ = ["GroupCoordinator", "GroupMetadataManager", "OFFSETS_TOPIC", "PartitionWriter"]
