"""Tiered storage (KIP-405): rolled segments copied to a remote store and read back.

What is here (the broker runs it in broker/server/tier.py, on a broker alone so far):

    storage.py    the remote storage manager interface (Kafka's RemoteStorageManager) and
                  the filesystem one (Kafka's LocalTieredStorage layout, rsm.config.dir)
    metadata.py   remote log metadata: Kafka's records of __remote_log_metadata
                  (RemoteLogSegmentMetadataRecord, ...Update, RemotePartitionDelete...), the
                  partitioner, and the in-memory view replayed from them
    copier.py     the leader's copy of rolled segments, the retention of remote segments,
                  and the clean-up of orphans a copy interrupted by a crash left behind

    reader.py     reads of offsets held in remote storage only, through a chunk cache

docs/tiered-storage.md says what a user can rely on and what is missing.
"""
