"""The records of __consumer_offsets, in Kafka's on-disk schema (so Kafka's own tools can
read them). All strings are int16-length-prefixed UTF-8 (-1 = null), bytes int32-length.

Key (record key), by its leading int16 version:

    version 0/1  OffsetCommitKey    group string | topic string | partition int32
    version 2    GroupMetadataKey   group string

OffsetCommitValue (we write v3; v0-v3 are read):

    v0  offset int64 | metadata string | commit_timestamp int64
    v1  offset int64 | metadata string | commit_timestamp int64 | expire_timestamp int64
    v2  offset int64 | metadata string | commit_timestamp int64
    v3  offset int64 | leader_epoch int32 | metadata string | commit_timestamp int64

GroupMetadataValue (we write v3; v0-v3 are read):

    protocol_type string | generation int32 | protocol string? | leader string? |
    [v2+ current_state_timestamp int64] | members int32 count, each:
        member_id string | [v3+ group_instance_id string?] | client_id string |
        client_host string | [v1+ rebalance_timeout int32] | session_timeout int32 |
        subscription bytes | assignment bytes

A null value is a tombstone: the offset (or the whole group) is gone.
Decoding failures raise ValueError naming the field and byte offset.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from broker.coordinator.placement import java_string_hash, partition_for

__all__ = [
    "GroupKey",
    "GroupMetadata",
    "MemberMetadata",
    "OffsetAndMetadata",
    "OffsetKey",
    "decode_group_value",
    "decode_key",
    "decode_offset_value",
    "group_key",
    "group_value",
    "java_string_hash",
    "offset_key",
    "offset_value",
    "partition_for",
]

#: an OffsetCommitKey: ("offset", group, topic, partition)
OffsetKey = tuple[str, str, str, int]
#: a GroupMetadataKey: ("group", group)
GroupKey = tuple[str, str]

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")


@dataclass
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass
class GroupMetadata:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: list[MemberMetadata] = field(default_factory=list)


# ---------------------------------------------------------------------- writing


def _str(s: str | None) -> bytes:
    if s is None:
        return _H.pack(-1)
    b = s.encode("utf-8")
    return _H.pack(len(b)) + b


def _bytes(b: bytes | None) -> bytes:
    if b is None:
        return _I.pack(-1)
    return _I.pack(len(b)) + bytes(b)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _H.pack(OFFSET_KEY_VERSION) + _str(group) + _str(topic) + _I.pack(partition)


def group_key(group: str) -> bytes:
    return _H.pack(GROUP_KEY_VERSION) + _str(group)


def offset_value(o: OffsetAndMetadata) -> bytes:
    return (
        _H.pack(OFFSET_VALUE_VERSION)
        + _Q.pack(o.offset)
        + _I.pack(o.leader_epoch)
        + _str(o.metadata or "")
        + _Q.pack(o.commit_timestamp)
    )


def group_value(g: GroupMetadata) -> bytes:
    parts = [
        _H.pack(GROUP_VALUE_VERSION),
        _str(g.protocol_type),
        _I.pack(g.generation),
        _str(g.protocol),
        _str(g.leader),
        _Q.pack(g.current_state_timestamp),
        _I.pack(len(g.members)),
    ]
    for m in g.members:
        parts += [
            _str(m.member_id),
            _str(m.group_instance_id),
            _str(m.client_id),
            _str(m.client_host),
            _I.pack(m.rebalance_timeout),
            _I.pack(m.session_timeout),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


# ---------------------------------------------------------------------- reading


class _Reader:
    __slots__ = ("buf", "pos", "what")

    def __init__(self, buf: bytes, what: str) -> None:
        self.buf = buf
        self.pos = 0
        self.what = what

    def _need(self, n: int, name: str) -> None:
        if self.pos + n > len(self.buf):
            raise ValueError(f"{self.what}: {name} truncated at byte {self.pos}")

    def i16(self, name: str) -> int:
        self._need(2, name)
        v: int = _H.unpack_from(self.buf, self.pos)[0]
        self.pos += 2
        return v

    def i32(self, name: str) -> int:
        self._need(4, name)
        v: int = _I.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def i64(self, name: str) -> int:
        self._need(8, name)
        v: int = _Q.unpack_from(self.buf, self.pos)[0]
        self.pos += 8
        return v

    def string(self, name: str) -> str:
        s = self.nullable_string(name)
        if s is None:
            raise ValueError(f"{self.what}: {name} is null at byte {self.pos - 2}")
        return s

    def nullable_string(self, name: str) -> str | None:
        n = self.i16(name)
        if n < 0:
            return None
        self._need(n, name)
        try:
            s = bytes(self.buf[self.pos : self.pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{self.what}: {name} is not UTF-8 at byte {self.pos}") from None
        self.pos += n
        return s

    def bytes_(self, name: str) -> bytes:
        n = self.i32(name)
        if n < 0:
            return b""
        self._need(n, name)
        b = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return b


def decode_key(key: bytes) -> OffsetKey | GroupKey:
    """("offset", group, topic, partition) or ("group", group) — plain tuples, told apart
    by their length (a load decodes one per record); ValueError otherwise."""
    r = _Reader(key, "__consumer_offsets key")
    version = r.i16("version")
    if version in (0, 1):
        return ("offset", r.string("group"), r.string("topic"), r.i32("partition"))
    if version == 2:
        return ("group", r.string("group"))
    raise ValueError(f"__consumer_offsets key: unknown version {version}")


def decode_offset_value(value: bytes) -> OffsetAndMetadata:
    r = _Reader(value, "OffsetCommitValue")
    version = r.i16("version")
    if version < 0 or version > 4:
        raise ValueError(f"OffsetCommitValue: unknown version {version}")
    offset = r.i64("offset")
    epoch = r.i32("leader_epoch") if version >= 3 else -1
    metadata = r.string("metadata")
    commit_ts = r.i64("commit_timestamp")
    expire_ts = r.i64("expire_timestamp") if version == 1 else -1
    return OffsetAndMetadata(offset, epoch, metadata, commit_ts, expire_ts)


def decode_group_value(value: bytes) -> GroupMetadata:
    r = _Reader(value, "GroupMetadataValue")
    version = r.i16("version")
    if version < 0 or version > 4:
        raise ValueError(f"GroupMetadataValue: unknown version {version}")
    protocol_type = r.string("protocol_type")
    generation = r.i32("generation")
    protocol = r.nullable_string("protocol")
    leader = r.nullable_string("leader")
    state_ts = r.i64("current_state_timestamp") if version >= 2 else -1
    n = r.i32("members")
    if n < 0 or n > len(value):
        raise ValueError(f"GroupMetadataValue: bad member count {n}")
    members = []
    for _ in range(n):
        member_id = r.string("member_id")
        instance = r.nullable_string("group_instance_id") if version >= 3 else None
        client_id = r.string("client_id")
        client_host = r.string("client_host")
        rebalance_timeout = r.i32("rebalance_timeout") if version >= 1 else -1
        session_timeout = r.i32("session_timeout")
        subscription = r.bytes_("subscription")
        assignment = r.bytes_("assignment")
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(
            MemberMetadata(
                member_id,
                instance,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    return GroupMetadata(protocol_type, generation, protocol, leader, state_ts, members)
