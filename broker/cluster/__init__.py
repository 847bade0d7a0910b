"""Cluster coordination: the metadata store (embedded file store for one broker; ZooKeeper
for several), the controller's decisions and the replica manager."""
