"""Helpers of the tiered storage tests (not a test module)."""

from __future__ import annotations

import uuid
from pathlib import Path

from broker.config import BrokerConfig
from broker.log.checkpoints import TopicPartition
from broker.log.log import Log
from broker.native import BatchBuilder
from broker.tier.storage import RemoteLogSegmentId, TopicIdPartition

TOPIC_ID = uuid.UUID("6c3f7b56-8a2e-4c1e-9b0a-3f5d2e1c0b9a")
TIP = TopicIdPartition(TOPIC_ID, "tiered", 0)


def segment_id(n: int = 1) -> RemoteLogSegmentId:
    return RemoteLogSegmentId(TIP, uuid.UUID(int=n))


def make_log(directory: Path, segment_bytes: int = 4096, **overrides: str) -> Log:
    cfg = BrokerConfig({"log.dir": str(directory.parent)}).log_config(
        {"segment.bytes": segment_bytes, "retention.ms": -1, **overrides}
    )
    return Log.load(str(directory), TopicPartition(TIP.topic, TIP.partition), cfg, topic_id=TOPIC_ID)


def batch(i: int, n: int = 5, size: int = 100) -> bytearray:
    b = BatchBuilder()
    for j in range(n):
        b.append(1_000_000 + i * n + j, b"k%d" % (i * n + j), bytes([65 + (i + j) % 26]) * size)
    return bytearray(b.build())


def fill(lg: Log, batches: int, epoch: int = 0) -> None:
    for i in range(batches):
        lg.append_as_leader(batch(i), epoch)
    lg.high_watermark = lg.log_end_offset


def tiered_log(directory: Path, segment_bytes: int = 4096, **overrides: str) -> Log:
    """A log of a topic with remote storage (loaded as the broker will load it once
    remote.log.storage.system.enable is served)."""
    cfg = BrokerConfig({"log.dir": str(directory.parent)}).log_config(
        {
            "segment.bytes": segment_bytes,
            "retention.ms": -1,
            "remote.storage.enable": True,
            "local.retention.bytes": 0,
            **overrides,
        }
    )
    return Log.load(
        str(directory),
        TopicPartition(TIP.topic, TIP.partition),
        cfg,
        topic_id=TOPIC_ID,
        remote_log_enabled=True,
        log_start_offset=0,
        high_watermark=2**62,
    )


def all_bytes(lg: Log) -> bytes:
    """Every batch of the local log, from its local start to its high watermark."""
    out = bytearray()
    offset = lg.local_log_start_offset
    while offset < lg.high_watermark:
        data = lg.read_bytes(offset, 1 << 20)
        if not data:
            break
        out += data
        from broker.native import iter_batches

        offset = [b.last_offset for b in iter_batches(data)][-1] + 1
    return bytes(out)
