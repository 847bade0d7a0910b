"""Consumer groups: membership (the coordinator), group state, and the groups' storage
in __consumer_offsets (the metadata manager)."""
from broker.group.coordinator import GroupCoordinator
from broker.group.metadata_manager import (
    OFFSETS_TOPIC,
    GroupMetadataManager,
    PartitionWriter,
)

__all__ = ["GroupCoordinator", "GroupMetadataManager", "OFFSETS_TOPIC", "PartitionWriter"]
