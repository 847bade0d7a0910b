"""Replicas this broker hosts: the partition map (ReplicaManager), each partition's
leadership, ISR and high watermark (Partition), and the follower fetchers."""
