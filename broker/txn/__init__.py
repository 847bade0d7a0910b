"""The transaction coordinator (Kafka's kafka.coordinator.transaction): transactional ids,
their state in __transaction_state, and the markers that end transactions. It sees the
cluster through value types and the small interfaces coordinator.py defines (a partition
writer, the metadata cache, a marker sender, producer ids), never the server."""
