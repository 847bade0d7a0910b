"""placeholder"""
FAULT_CONFIG = {
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 3000,
    "default.replication.factor": 3,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 3,
    "min.insync.replicas": 2,
    "request.timeout.ms": 6000,
}
