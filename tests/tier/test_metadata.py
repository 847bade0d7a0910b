"""Remote log metadata (broker/tier/metadata.py): Kafka's record format of
__remote_log_metadata, read and written again byte for byte by Kafka 4.3's own
RemoteLogMetadataSerde (tests/jvm TieredChecks); Kafka's partitioner; the state rules and
the view replayed from the records."""

from __future__ import annotations

import json
import random
import uuid

import pytest

from broker.tier.metadata import (
    MetadataError,
    PartitionDelete,
    PartitionDeleteState,
    RemoteLogMetadataCache,
    SegmentMetadata,
    SegmentState,
    SegmentUpdate,
    decode,
    encode,
    metadata_partition,
)
from broker.tier.storage import RemoteLogSegmentId, TopicIdPartition
from broker.uuids import uuid_text
from tests.support.kafka_tools import java_program

from ._support import TIP, segment_id


def started(n: int, start: int, end: int, **kw) -> SegmentMetadata:
    fields = dict(
        broker_id=1,
        max_timestamp_ms=1_700_000_000_000 + end,
        event_timestamp_ms=1_700_000_000_500,
        leader_epochs=((0, start), (3, start + 2)),
        segment_size=4096,
    )
    fields.update(kw)
    return SegmentMetadata(segment_id(n), start, end, **fields)  # type: ignore[arg-type]


def update(n: int, state: SegmentState, custom: bytes | None = None) -> SegmentUpdate:
    return SegmentUpdate(segment_id(n), 1, 1_700_000_001_000, state, custom)


SAMPLES = [
    started(1, 0, 99),
    started(2, 100, 199, custom_metadata=b"\x01\x02", txn_index_empty=True),
    started(3, 200, 299, leader_epochs=((5, 200),)),
    update(1, SegmentState.COPY_SEGMENT_FINISHED),
    update(2, SegmentState.COPY_SEGMENT_FINISHED, b"meta"),
    update(1, SegmentState.DELETE_SEGMENT_STARTED),
    update(1, SegmentState.DELETE_SEGMENT_FINISHED),
    PartitionDelete(TIP, 2, 1_700_000_002_000, PartitionDeleteState.DELETE_PARTITION_MARKED),
    PartitionDelete(TopicIdPartition(uuid.uuid4(), "é-topic", 7), 2, 5, PartitionDeleteState.DELETE_PARTITION_FINISHED),
]


def test_round_trip():
    for rec in SAMPLES:
        assert decode(encode(rec)) == rec


def test_kafkas_serde_reads_the_records_and_writes_the_same_bytes():
    values = [encode(r).hex() for r in SAMPLES]
    run = java_program("TieredChecks", "serde", input="\n".join(values) + "\n")
    facts = [json.loads(line) for line in run.lines]
    assert [f["again"] for f in facts] == values
    texts = [f["text"] for f in facts]
    sid = uuid_text(segment_id(1).id)
    assert f"id={sid}" in texts[0] and "startOffset=0" in texts[0] and "endOffset=99" in texts[0]
    assert "segmentLeaderEpochs={0=0, 3=2}" in texts[0] and "state=COPY_SEGMENT_STARTED" in texts[0]
    assert "segmentSizeInBytes=4096" in texts[0] and "brokerId=1" in texts[0]
    assert "txnIdxEmpty=true" in texts[1] and "txnIdxEmpty=false" in texts[0]
    assert "state=COPY_SEGMENT_FINISHED" in texts[3]
    assert "DELETE_PARTITION_MARKED" in texts[7]


def test_kafkas_partitioner_places_partitions_as_ours():
    rng = random.Random(405)
    tps = [TopicIdPartition(uuid.UUID(int=rng.getrandbits(128)), "t", rng.randrange(0, 5000)) for _ in range(200)]
    lines = "\n".join(f"{uuid_text(tp.topic_id)} {tp.partition}" for tp in tps) + "\n"
    for count in (50, 7):
        run = java_program("TieredChecks", "partition", str(count), input=lines)
        assert [json.loads(line)["partition"] for line in run.lines] == [metadata_partition(tp, count) for tp in tps]


def test_damaged_records_are_refused_with_a_reason():
    with pytest.raises(MetadataError, match="no leader epochs"):
        encode(started(4, 0, 1, leader_epochs=()))
    good = encode(SAMPLES[0])
    for data, why in (
        (b"\x00" + good[1:], "frame version 0"),
        (good[:20], "truncated"),
        (good + b"\x00", "garbage"),
        (good[:1] + b"\x09" + good[2:], "unknown type 9"),
        (good[:2] + b"\x01" + good[3:], "unknown version 1"),
    ):
        with pytest.raises(MetadataError, match=why):
            decode(data)


def test_the_view_follows_kafkas_state_rules():
    cache = RemoteLogMetadataCache()
    cache.replay([encode(started(1, 0, 99)), encode(started(2, 100, 199))])
    assert cache.copied(TIP) == [] and [s.start_offset for s in cache.unfinished(TIP)] == [0, 100]
    cache.apply(update(1, SegmentState.COPY_SEGMENT_FINISHED, b"c"))
    cache.apply(update(1, SegmentState.COPY_SEGMENT_FINISHED))  # a replay changes nothing
    assert [s.end_offset for s in cache.copied(TIP)] == [99] and cache.copied(TIP)[0].custom_metadata == b"c"
    assert cache.highest_copied_offset(TIP) == 99
    assert cache.segment_for(TIP, 50).segment_id == segment_id(1) and cache.segment_for(TIP, 150) is None
    with pytest.raises(MetadataError, match="COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_FINISHED"):
        cache.apply(update(1, SegmentState.DELETE_SEGMENT_FINISHED))
    with pytest.raises(MetadataError, match="unknown -> COPY_SEGMENT_FINISHED"):
        cache.apply(update(9, SegmentState.COPY_SEGMENT_FINISHED))
    # an unfinished copy is deleted without ever being readable
    cache.apply(update(2, SegmentState.DELETE_SEGMENT_STARTED))
    cache.apply(update(2, SegmentState.DELETE_SEGMENT_FINISHED))
    cache.apply(update(1, SegmentState.DELETE_SEGMENT_STARTED))
    assert cache.copied(TIP) == [] and cache.highest_copied_offset(TIP) == -1
    cache.apply(update(1, SegmentState.DELETE_SEGMENT_FINISHED))
    assert cache.segments(TIP) == []
    cache.apply(PartitionDelete(TIP, 1, 0, PartitionDeleteState.DELETE_PARTITION_MARKED))
    assert cache.partition_deleted(TIP) == PartitionDeleteState.DELETE_PARTITION_MARKED
    assert RemoteLogSegmentId(TIP, uuid.UUID(int=1)) == segment_id(1)
