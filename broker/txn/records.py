"""__transaction_state's records in Kafka's schema (TransactionLogKey / TransactionLogValue),
so Kafka's DumpLogSegments --transaction-log-decoder reads kbroker's log.

    key    int16 version (0), string transactional id
    value  int16 version, then
           v0: int64 producer id, int16 epoch, int32 timeout ms, int8 state,
               nullable [] {string topic, []int32 partitions} (null when Empty),
               int64 last update ms, int64 start ms
           v1 (flexible: compact strings and arrays, tagged fields): the same, with the
               tagged fields 0 previous producer id, 1 next producer id, 2 client
               transaction version (written when not their defaults -1, -1, 0)
           a null value (tombstone): the id expired

v1 is written for clients on transaction.version 2 (KIP-890 part 2: the next producer id
must survive a failover); v0 otherwise. Both are read.
"""

from __future__ import annotations

import struct
from typing import Any

from broker.coordinator.placement import partition_for as _partition_for
from broker.txn.metadata import NO_EPOCH, NO_PRODUCER_ID, TxnState, TxnTransit

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_V0_HEAD = struct.Struct(">qhib")
_TAIL = struct.Struct(">qq")


def partition_for(transactional_id: str, partitions: int) -> int:
    """Kafka's TransactionStateManager.partitionFor: Utils.abs(String.hashCode) % partitions."""
    return _partition_for(transactional_id, partitions)


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return _I16.pack(0) + _I16.pack(len(raw)) + raw


def decode_key(data: bytes) -> str:
    if len(data) < 4:
        raise ValueError("transaction log key shorter than 4 bytes")
    version, n = struct.unpack_from(">hh", data, 0)
    if version != 0:
        raise ValueError(f"unknown transaction log key version {version}")
    if n < 0 or 4 + n > len(data):
        raise ValueError("transaction log key: bad string length")
    return data[4 : 4 + n].decode()


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _grouped(partitions: frozenset[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    by: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by.setdefault(topic, []).append(p)
    return list(by.items())


def encode_value(t: TxnTransit) -> bytes:
    """The value of a transition's record (Kafka's TransactionLog.valueToBytes)."""
    if t.state == TxnState.EMPTY and t.partitions:
        raise ValueError("an Empty transaction has no partitions")
    groups = None if t.state == TxnState.EMPTY else _grouped(t.partitions)
    flexible = t.client_version >= 2
    out = bytearray(_I16.pack(1 if flexible else 0))
    out += _V0_HEAD.pack(t.producer_id, t.producer_epoch, t.timeout_ms, int(t.state))
    if not flexible:
        if groups is None:
            out += _I32.pack(-1)
        else:
            out += _I32.pack(len(groups))
            for topic, parts in groups:
                raw = topic.encode()
                out += _I16.pack(len(raw)) + raw + _I32.pack(len(parts))
                out += b"".join(_I32.pack(p) for p in parts)
        out += _TAIL.pack(t.last_update_ms, t.start_ms)
        return bytes(out)
    if groups is None:
        out += _uvarint(0)
    else:
        out += _uvarint(len(groups) + 1)
        for topic, parts in groups:
            raw = topic.encode()
            out += _uvarint(len(raw) + 1) + raw + _uvarint(len(parts) + 1)
            out += b"".join(_I32.pack(p) for p in parts)
            out += _uvarint(0)  # the struct's tagged fields
    out += _TAIL.pack(t.last_update_ms, t.start_ms)
    tagged = []
    if t.previous_producer_id != NO_PRODUCER_ID:
        tagged.append((0, _I64.pack(t.previous_producer_id)))
    if t.next_producer_id != NO_PRODUCER_ID:
        tagged.append((1, _I64.pack(t.next_producer_id)))
    if t.client_version != 0:
        tagged.append((2, _I16.pack(t.client_version)))
    out += _uvarint(len(tagged))
    for tag, data in tagged:
        out += _uvarint(tag) + _uvarint(len(data)) + data
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.d = data
        self.p = 0

    def take(self, s: struct.Struct) -> tuple[Any, ...]:
        if self.p + s.size > len(self.d):
            raise ValueError(f"transaction log value truncated at byte {self.p}")
        v = s.unpack_from(self.d, self.p)
        self.p += s.size
        return v

    def uvarint(self) -> int:
        shift = n = 0
        while True:
            if self.p >= len(self.d) or shift > 28:
                raise ValueError(f"bad varint at byte {self.p}")
            b = self.d[self.p]
            self.p += 1
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7

    def raw(self, n: int) -> bytes:
        if n < 0 or self.p + n > len(self.d):
            raise ValueError(f"transaction log value: {n} bytes at byte {self.p} overrun it")
        v = self.d[self.p : self.p + n]
        self.p += n
        return v


def decode_value(data: bytes) -> TxnTransit:
    """A record's value as the state it stores; ValueError for an unreadable one."""
    r = _Reader(data)
    (version,) = r.take(_I16)
    if version not in (0, 1):
        raise ValueError(f"unknown transaction log value version {version}")
    pid, epoch, timeout, status = r.take(_V0_HEAD)
    try:
        state = TxnState(status)
    except ValueError:
        raise ValueError(f"unknown transaction state {status}") from None
    partitions: set[tuple[str, int]] = set()
    prev = nxt = NO_PRODUCER_ID
    client_version = 0
    if version == 0:
        (count,) = r.take(_I32)
        for _ in range(max(count, 0)):
            (n,) = r.take(_I16)
            topic = r.raw(n).decode()
            (k,) = r.take(_I32)
            for _ in range(max(k, 0)):
                partitions.add((topic, r.take(_I32)[0]))
        last_update, start = r.take(_TAIL)
    else:
        count = r.uvarint() - 1
        for _ in range(max(count, 0)):
            topic = r.raw(r.uvarint() - 1).decode()
            k = r.uvarint() - 1
            for _ in range(max(k, 0)):
                partitions.add((topic, r.take(_I32)[0]))
            for _ in range(r.uvarint()):  # the struct's tagged fields (none known)
                r.uvarint()
                r.raw(r.uvarint())
        last_update, start = r.take(_TAIL)
        for _ in range(r.uvarint()):
            tag = r.uvarint()
            size = r.uvarint()
            field = r.raw(size)
            if tag == 0 and size == 8:
                prev = _I64.unpack(field)[0]
            elif tag == 1 and size == 8:
                nxt = _I64.unpack(field)[0]
            elif tag == 2 and size == 2:
                client_version = _I16.unpack(field)[0]
    if state == TxnState.EMPTY:
        partitions = set()
    return TxnTransit(
        producer_id=pid,
        previous_producer_id=prev,
        next_producer_id=nxt,
        producer_epoch=epoch,
        last_producer_epoch=NO_EPOCH,
        timeout_ms=timeout,
        state=state,
        partitions=frozenset(partitions),
        start_ms=start,
        last_update_ms=last_update,
        client_version=client_version,
    )


def value_fields(data: bytes) -> tuple[int, dict[str, Any]]:
    """(version, fields) of a record's value in the order and with the names of Kafka's
    TransactionLogValueJsonConverter (what DumpLogSegments --transaction-log-decoder
    prints): the partitions as written (null stays null), the tagged fields only when not
    their defaults. ValueError for an unreadable value."""
    r = _Reader(data)
    (version,) = r.take(_I16)
    if version not in (0, 1):
        raise ValueError(f"unknown transaction log value version {version}")
    pid, epoch, timeout, status = r.take(_V0_HEAD)
    partitions: list[dict[str, Any]] | None = []
    tagged: dict[str, Any] = {}
    if version == 0:
        (count,) = r.take(_I32)
        if count < 0:
            partitions = None
        for _ in range(max(count, 0)):
            (n,) = r.take(_I16)
            topic = r.raw(n).decode()
            (k,) = r.take(_I32)
            ids = [r.take(_I32)[0] for _ in range(max(k, 0))]
            partitions.append({"topic": topic, "partitionIds": ids})  # type: ignore[union-attr]
    else:
        count = r.uvarint() - 1
        if count < 0:
            partitions = None
        for _ in range(max(count, 0)):
            topic = r.raw(r.uvarint() - 1).decode()
            k = r.uvarint() - 1
            ids = [r.take(_I32)[0] for _ in range(max(k, 0))]
            for _ in range(r.uvarint()):
                r.uvarint()
                r.raw(r.uvarint())
            partitions.append({"topic": topic, "partitionIds": ids})  # type: ignore[union-attr]
    last_update, start = r.take(_TAIL)
    if version >= 1:
        for _ in range(r.uvarint()):
            tag = r.uvarint()
            size = r.uvarint()
            field = r.raw(size)
            if tag == 0 and size == 8:
                tagged["previousProducerId"] = _I64.unpack(field)[0]
            elif tag == 1 and size == 8:
                tagged["nextProducerId"] = _I64.unpack(field)[0]
            elif tag == 2 and size == 2:
                tagged["clientTransactionVersion"] = _I16.unpack(field)[0]
    out: dict[str, Any] = {"producerId": pid}
    for name, default in (("previousProducerId", NO_PRODUCER_ID), ("nextProducerId", NO_PRODUCER_ID)):
        if tagged.get(name, default) != default:
            out[name] = tagged[name]
    out.update(
        {
            "producerEpoch": epoch,
            "transactionTimeoutMs": timeout,
            "transactionStatus": status,
            "transactionPartitions": partitions,
            "transactionLastUpdateTimestampMs": last_update,
            "transactionStartTimestampMs": start,
        }
    )
    if tagged.get("clientTransactionVersion", 0) != 0:
        out["clientTransactionVersion"] = tagged["clientTransactionVersion"]
    return version, out
