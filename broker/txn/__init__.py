"""The transaction coordinator (Kafka's kafka.coordinator.transaction): transactional ids,
their state in __transaction_state, and the markers that end transactions. It runs on
the coordinator runtime (broker/coordinator/) and sees the cluster through value types
and small interfaces (the runtime's partition writer and cluster view; a marker sender
and producer ids of its own), never the server nor the group coordinator."""
