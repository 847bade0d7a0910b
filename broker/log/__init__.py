"""The storage layer: partition logs of segments, their checkpoints, recovery, retention
and compaction. Knows nothing about sockets or the wire protocol (see DESIGN.md)."""
from broker.log.log import Log, LogAppendInfo, FileSlice, OffsetOutOfRange, RecordTooLarge, TopicPartition
from broker.log.manager import LogManager

__all__ = ["FileSlice", "Log", "LogAppendInfo", "LogManager", "OffsetOutOfRange", "RecordTooLarge", "TopicPartition"]
