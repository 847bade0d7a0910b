"""Consumer groups: the coordinator, group state and the __consumer_offsets store."""
from broker.group.coordinator import OFFSETS_TOPIC, GroupCoordinator

__all__ = ["GroupCoordinator", "OFFSETS_TOPIC"]
