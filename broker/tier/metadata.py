"""Remote log metadata (KIP-405) as Kafka's TopicBasedRemoteLogMetadataManager keeps it.

Each state change of a remote segment is one record in the internal topic
__remote_log_metadata (50 partitions by default; a partition's records go to
`metadata_partition(tp)`, Kafka's RemoteLogMetadataTopicPartitioner), with a null key and
as value Kafka's RemoteLogMetadataSerde framing: unsigned varints frame version (1), api
key, version (0), then the record in the flexible encoding of its JSON schema
(storage/src/main/resources/message/ in Kafka):

    0 RemoteLogSegmentMetadataRecord        a copy starts: the segment's offsets, epochs, size
    1 RemoteLogSegmentMetadataUpdateRecord  a segment's next state
    2 RemotePartitionDeleteMetadataRecord   a partition's remote data being deleted

Segment states (RemoteLogSegmentState ids): COPY_SEGMENT_STARTED 0 -> COPY_SEGMENT_FINISHED 1
-> DELETE_SEGMENT_STARTED 2 -> DELETE_SEGMENT_FINISHED 3; a copy that never finished goes
from STARTED to DELETE_SEGMENT_STARTED (its orphans are deleted). Only FINISHED segments are
readable. RemoteLogMetadataCache is the view replayed from the records, in their order.
"""

from __future__ import annotations

import enum
import logging
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from broker.native import murmur2
from broker.tier.storage import RemoteLogSegmentId, TopicIdPartition

log = logging.getLogger(__name__)

TOPIC = "__remote_log_metadata"
DEFAULT_PARTITIONS = 50
FRAME_VERSION = 1


class SegmentState(enum.IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class PartitionDeleteState(enum.IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


_NEXT = {
    None: {SegmentState.COPY_SEGMENT_STARTED},
    SegmentState.COPY_SEGMENT_STARTED: {SegmentState.COPY_SEGMENT_FINISHED, SegmentState.DELETE_SEGMENT_STARTED},
    SegmentState.COPY_SEGMENT_FINISHED: {SegmentState.DELETE_SEGMENT_STARTED},
    SegmentState.DELETE_SEGMENT_STARTED: {SegmentState.DELETE_SEGMENT_FINISHED},
    SegmentState.DELETE_SEGMENT_FINISHED: set(),
}


class MetadataError(ValueError):
    """A record that cannot be decoded, or a state change Kafka's rules do not allow."""


@dataclass(frozen=True)
class SegmentMetadata:
    """Kafka's RemoteLogSegmentMetadata (and the record of its first state)."""

    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int  # inclusive
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    leader_epochs: tuple[tuple[int, int], ...]  # (epoch, its first offset in the segment), ascending
    segment_size: int
    state: SegmentState = SegmentState.COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None
    txn_index_empty: bool = False

    @property
    def tp(self) -> TopicIdPartition:
        return self.segment_id.tp


@dataclass(frozen=True)
class SegmentUpdate:
    """Kafka's RemoteLogSegmentMetadataUpdate."""

    segment_id: RemoteLogSegmentId
    broker_id: int
    event_timestamp_ms: int
    state: SegmentState
    custom_metadata: bytes | None = None


@dataclass(frozen=True)
class PartitionDelete:
    """Kafka's RemotePartitionDeleteMetadata."""

    tp: TopicIdPartition
    broker_id: int
    event_timestamp_ms: int
    state: PartitionDeleteState


Record = SegmentMetadata | SegmentUpdate | PartitionDelete


# ---------------------------------------------------------------------- encoding


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact_bytes(b: bytes | None) -> bytes:
    return b"\x00" if b is None else _uvarint(len(b) + 1) + b


def _tp(tp: TopicIdPartition) -> bytes:
    return _compact_bytes(tp.topic.encode()) + tp.topic_id.bytes + struct.pack(">i", tp.partition) + b"\x00"


def _segment_id(sid: RemoteLogSegmentId) -> bytes:
    return _tp(sid.tp) + sid.id.bytes + b"\x00"


def encode(record: Record) -> bytes:
    """The __remote_log_metadata value of `record` (Kafka's RemoteLogMetadataSerde.serialize)."""
    if isinstance(record, SegmentMetadata):
        if not record.leader_epochs:
            # Kafka's RemoteLogSegmentMetadata refuses it: its readers would fail on the record
            raise MetadataError(f"remote segment {record.segment_id.id} has no leader epochs")
        out = bytearray(_uvarint(FRAME_VERSION) + _uvarint(0) + _uvarint(0))
        out += _segment_id(record.segment_id)
        out += struct.pack(
            ">qqiqq",
            record.start_offset,
            record.end_offset,
            record.broker_id,
            record.max_timestamp_ms,
            record.event_timestamp_ms,
        )
        out += _uvarint(len(record.leader_epochs) + 1)
        for epoch, offset in record.leader_epochs:
            out += struct.pack(">iq", epoch, offset) + b"\x00"
        out += struct.pack(">i", record.segment_size)
        out += _compact_bytes(record.custom_metadata)
        out += struct.pack(">b", int(record.state))
        # tagged fields: TxnIndexEmpty (tag 0, a bool) when not its default false
        out += b"\x01\x00\x01\x01" if record.txn_index_empty else b"\x00"
        return bytes(out)
    if isinstance(record, SegmentUpdate):
        out = bytearray(_uvarint(FRAME_VERSION) + _uvarint(1) + _uvarint(0))
        out += _segment_id(record.segment_id)
        out += struct.pack(">iq", record.broker_id, record.event_timestamp_ms)
        out += _compact_bytes(record.custom_metadata)
        out += struct.pack(">b", int(record.state)) + b"\x00"
        return bytes(out)
    out = bytearray(_uvarint(FRAME_VERSION) + _uvarint(2) + _uvarint(0))
    out += _tp(record.tp)
    out += struct.pack(">iqb", record.broker_id, record.event_timestamp_ms, int(record.state)) + b"\x00"
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes):
        self.data = memoryview(data)
        self.pos = 0

    def need(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise MetadataError(f"remote log metadata record truncated at byte {self.pos}")
        v = self.data[self.pos : self.pos + n]
        self.pos += n
        return v

    def uvarint(self) -> int:
        shift = n = 0
        while True:
            b = self.need(1)[0]
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7
            if shift > 28:
                raise MetadataError("remote log metadata record: varint too long")

    def unpack(self, fmt: struct.Struct) -> tuple[Any, ...]:
        return fmt.unpack(self.need(fmt.size))

    def compact_bytes(self) -> bytes | None:
        n = self.uvarint()
        return None if n == 0 else bytes(self.need(n - 1))

    def tags(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = bytes(self.need(self.uvarint()))
        return out

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self.need(16)))

    def tp(self) -> TopicIdPartition:
        name = self.compact_bytes()
        if name is None:
            raise MetadataError("remote log metadata record: null topic name")
        topic_id = self.uuid()
        (partition,) = self.unpack(_I32)
        self.tags()
        return TopicIdPartition(topic_id, name.decode(), partition)

    def segment_id(self) -> RemoteLogSegmentId:
        tp = self.tp()
        sid = self.uuid()
        self.tags()
        return RemoteLogSegmentId(tp, sid)


_I32 = struct.Struct(">i")
_SEGMENT_HEAD = struct.Struct(">qqiqq")
_EPOCH = struct.Struct(">iq")
_UPDATE_HEAD = struct.Struct(">iq")
_DELETE = struct.Struct(">iqb")
_I8 = struct.Struct(">b")


def decode(data: bytes) -> Record:
    """A __remote_log_metadata value (Kafka's RemoteLogMetadataSerde.deserialize);
    MetadataError naming what is wrong."""
    r = _Reader(data)
    frame = r.uvarint()
    if frame != FRAME_VERSION:
        raise MetadataError(f"remote log metadata record: frame version {frame}, where {FRAME_VERSION} was expected")
    api_key, version = r.uvarint(), r.uvarint()
    if version != 0:
        raise MetadataError(f"remote log metadata record type {api_key}: unknown version {version}")
    try:
        rec: Record
        if api_key == 0:
            sid = r.segment_id()
            start, end, broker, max_ts, event_ts = r.unpack(_SEGMENT_HEAD)
            count = r.uvarint() - 1
            if count <= 0:
                raise MetadataError("remote log metadata record: a segment without leader epochs")
            epochs = []
            for _ in range(count):
                epochs.append(r.unpack(_EPOCH))
                r.tags()
            (size,) = r.unpack(_I32)
            custom = r.compact_bytes()
            (state,) = r.unpack(_I8)
            tags = r.tags()
            rec = SegmentMetadata(
                sid,
                start,
                end,
                broker,
                max_ts,
                event_ts,
                tuple(epochs),
                size,
                SegmentState(state),
                custom,
                tags.get(0, b"\x00") != b"\x00",
            )
        elif api_key == 1:
            sid = r.segment_id()
            broker, event_ts = r.unpack(_UPDATE_HEAD)
            custom = r.compact_bytes()
            (state,) = r.unpack(_I8)
            r.tags()
            rec = SegmentUpdate(sid, broker, event_ts, SegmentState(state), custom)
        elif api_key == 2:
            tp = r.tp()
            broker, event_ts, state = r.unpack(_DELETE)
            r.tags()
            rec = PartitionDelete(tp, broker, event_ts, PartitionDeleteState(state))
        else:
            raise MetadataError(f"remote log metadata record: unknown type {api_key}")
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, MetadataError):
            raise
        raise MetadataError(f"remote log metadata record type {api_key}: {exc}") from None
    if r.pos != len(r.data):
        raise MetadataError(f"remote log metadata record type {api_key}: {len(r.data) - r.pos} bytes of garbage")
    return rec


def _java_long_hash(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return (v ^ (v >> 32)) & 0xFFFFFFFF


def metadata_partition(tp: TopicIdPartition, partitions: int = DEFAULT_PARTITIONS) -> int:
    """Kafka's RemoteLogMetadataTopicPartitioner: murmur2 of the big-endian bytes of
    Objects.hash(topic id's least significant bits, most significant bits, partition),
    made positive, modulo the metadata topic's partition count."""
    msb, lsb = struct.unpack(">qq", tp.topic_id.bytes)
    h = 1
    for part in (_java_long_hash(lsb), _java_long_hash(msb), tp.partition & 0xFFFFFFFF):
        h = (31 * h + part) & 0xFFFFFFFF
    return int(murmur2(struct.pack(">I", h)) & 0x7FFFFFFF) % partitions


# ---------------------------------------------------------------------- the view


@dataclass
class _PartitionView:
    segments: dict[uuid.UUID, SegmentMetadata] = field(default_factory=dict)
    deleted: PartitionDeleteState | None = None


class RemoteLogMetadataCache:
    """The remote segments of each partition and their states, from the records in
    their order (Kafka's RemoteLogMetadataCache). A record breaking the state rules is
    refused with MetadataError and changes nothing; replaying a record twice is harmless."""

    def __init__(self) -> None:
        self._partitions: dict[TopicIdPartition, _PartitionView] = {}

    def apply(self, record: Record) -> None:
        if isinstance(record, PartitionDelete):
            view = self._partitions.setdefault(record.tp, _PartitionView())
            view.deleted = record.state
            if record.state == PartitionDeleteState.DELETE_PARTITION_FINISHED:
                view.segments.clear()
            return
        view = self._partitions.setdefault(record.segment_id.tp, _PartitionView())
        sid = record.segment_id.id
        current = view.segments.get(sid)
        before = None if current is None else current.state
        if before == record.state:
            return  # a replay
        if record.state not in _NEXT[before]:
            raise MetadataError(
                f"remote segment {sid} of {record.segment_id.tp}: "
                f"{before.name if before is not None else 'unknown'} -> {record.state.name} is not a valid transition"
            )
        if isinstance(record, SegmentMetadata):
            view.segments[sid] = record
        elif current is not None:
            if record.state == SegmentState.DELETE_SEGMENT_FINISHED:
                del view.segments[sid]
            else:
                view.segments[sid] = replace(
                    current,
                    state=record.state,
                    custom_metadata=record.custom_metadata
                    if record.custom_metadata is not None
                    else current.custom_metadata,
                )

    def replay(self, values: Iterable[bytes]) -> None:
        for v in values:
            self.apply(decode(v))

    def replay_records(self, records: Iterable[Record]) -> int:
        """Applies decoded records in order, skipping (with a warning) those the state
        rules refuse, as a new reader of the topic must; returns how many were skipped."""
        skipped = 0
        for rec in records:
            try:
                self.apply(rec)
            except MetadataError as exc:
                skipped += 1
                log.warning("remote log metadata: %s; record skipped", exc)
        return skipped

    def segments(self, tp: TopicIdPartition, state: SegmentState | None = None) -> list[SegmentMetadata]:
        """The partition's segments (in a given state), by start offset."""
        view = self._partitions.get(tp)
        if view is None:
            return []
        out = [s for s in view.segments.values() if state is None or s.state == state]
        return sorted(out, key=lambda s: (s.start_offset, s.end_offset))

    def copied(self, tp: TopicIdPartition) -> list[SegmentMetadata]:
        """The readable segments (COPY_SEGMENT_FINISHED), by start offset."""
        return self.segments(tp, SegmentState.COPY_SEGMENT_FINISHED)

    def highest_copied_offset(self, tp: TopicIdPartition) -> int:
        """The last offset of the readable remote log; -1 when nothing is copied."""
        return max((s.end_offset for s in self.copied(tp)), default=-1)

    def segment_for(self, tp: TopicIdPartition, offset: int) -> SegmentMetadata | None:
        """The readable segment holding `offset`."""
        for s in self.copied(tp):
            if s.start_offset <= offset <= s.end_offset:
                return s
        return None

    def unfinished(self, tp: TopicIdPartition) -> list[SegmentMetadata]:
        """Segments whose copy or deletion started and never finished (a crash): their
        objects are orphans to delete."""
        return [
            s
            for s in self.segments(tp)
            if s.state in (SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_STARTED)
        ]

    def partition_deleted(self, tp: TopicIdPartition) -> PartitionDeleteState | None:
        view = self._partitions.get(tp)
        return None if view is None else view.deleted

    def partitions(self) -> list[TopicIdPartition]:
        return list(self._partitions)
