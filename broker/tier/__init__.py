"""Tiered storage (KIP-405): rolled segments copied to a remote store and read back.

What is here (issue 39, its foundations; not yet wired into the broker, whose
remote.log.* keys stay accepted without effect, broker/config.py TIERED_STORAGE_NOT_SERVED):

    storage.py    the remote storage manager interface (Kafka's RemoteStorageManager) and
                  the filesystem one (Kafka's LocalTieredStorage layout, rsm.config.dir)
    metadata.py   remote log metadata: Kafka's records of __remote_log_metadata
                  (RemoteLogSegmentMetadataRecord, ...Update, RemotePartitionDelete...), the
                  partitioner, and the in-memory view replayed from them
    copier.py     the leader's copy of rolled segments, the retention of remote segments,
                  and the clean-up of orphans a copy interrupted by a crash left behind

docs/tiered-storage.md says what a user can rely on and what is missing.
"""
