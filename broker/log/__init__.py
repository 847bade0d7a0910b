"""The storage layer: partition logs of segments, their checkpoints, recovery, retention
and compaction. Knows nothing about sockets or the wire protocol (see DESIGN.md)."""

from broker.log.checkpoints import TopicPartition
from broker.log.log import (
    FileSlice,
    Log,
    LogAppendInfo,
    LogStorageError,
    OffsetOutOfRange,
    RecordTooLarge,
)
from broker.log.manager import LogManager

__all__ = [
    "FileSlice",
    "Log",
    "LogAppendInfo",
    "LogManager",
    "LogStorageError",
    "OffsetOutOfRange",
    "RecordTooLarge",
    "TopicPartition",
]
