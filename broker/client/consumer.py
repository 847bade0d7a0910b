"""A fetching consumer over explicitly assigned partitions (groups come with the group
coordinator). Positions start at an offset, "earliest" or "latest"; fetches are
long-polled; OFFSET_OUT_OF_RANGE resets by auto_offset_reset ("earliest", "latest" or
"none" to raise).

    c = Consumer("127.0.0.1:9092")
    c.assign("clicks", offsets="earliest")
    for rec in c.poll(1.0): print(rec.partition, rec.offset, rec.value)

fetch_raw() returns the undecoded record batch bytes per partition (the Spark source
decodes them to Arrow natively).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from broker.client.cluster import Cluster
from broker.client.connection import ClientError
from broker.native import iter_batches
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.fetch import FetchRequest
from broker.protocol.retriable import RETRIABLE

EARLIEST, LATEST = -2, -1


@dataclass
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list


class Consumer:
    def __init__(
        self,
        bootstrap: str | Cluster,
        *,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 52428800,
        partition_max_bytes: int = 1048576,
        isolation_level: int = 0,
        auto_offset_reset: str = "latest",
        client_id: str = "kbroker-consumer",
        security=None,
    ):
        self.cluster = (
            bootstrap if isinstance(bootstrap, Cluster) else Cluster(bootstrap, client_id=client_id, security=security)
        )
        self._own_cluster = not isinstance(bootstrap, Cluster)
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.isolation_level = isolation_level
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError("auto_offset_reset must be earliest, latest or none")
        self.auto_offset_reset = auto_offset_reset
        self.positions: dict[tuple[str, int], int] = {}
        self.high_watermarks: dict[tuple[str, int], int] = {}
        self.log_start_offsets: dict[tuple[str, int], int] = {}

    # ------------------------------------------------------------------ assignment

    def assign(
        self, topic: str, partitions: list[int] | None = None, offsets: int | str | dict[int, int] = "latest"
    ) -> None:
        meta = self.cluster.topics.get(topic) or self.cluster.topic(topic, wait_s=5.0)
        if partitions is None:
            partitions = sorted(meta.partitions)
        for p in partitions:
            if p not in meta.partitions:
                raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{p}")
        if isinstance(offsets, dict):
            for p in partitions:
                self.positions[(topic, p)] = offsets[p]
            return
        if isinstance(offsets, int) and offsets >= 0:
            for p in partitions:
                self.positions[(topic, p)] = offsets
            return
        if isinstance(offsets, str):
            if offsets not in ("earliest", "latest"):
                raise ValueError(f"offsets must be 'earliest', 'latest', an offset or a dict, not {offsets!r}")
            ts = EARLIEST if offsets == "earliest" else LATEST
        else:
            ts = offsets
        for p, (off, _) in self.cluster.list_offsets(topic, partitions, ts, self.isolation_level).items():
            self.positions[(topic, p)] = off

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self.positions[(topic, partition)] = offset

    def _reset(self, tp: tuple[str, int]) -> None:
        if self.auto_offset_reset == "none":
            raise KafkaProtocolError(ErrorCode.OFFSET_OUT_OF_RANGE, f"{tp[0]}-{tp[1]} offset {self.positions[tp]}")
        ts = EARLIEST if self.auto_offset_reset == "earliest" else LATEST
        self.positions[tp] = self.cluster.list_offsets(tp[0], [tp[1]], ts, self.isolation_level)[tp[1]][0]

    # ------------------------------------------------------------------ fetching

    def fetch_raw(self, max_wait_ms: int | None = None) -> dict[tuple[str, int], memoryview]:
        """One Fetch per leader for every assigned partition: {tp: record batch bytes}.
        Positions are not advanced (the caller decodes and calls seek)."""
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in self.positions:
            meta = self.cluster.topics.get(tp[0]) or self.cluster.topic(tp[0], wait_s=5.0)
            by_leader.setdefault(meta.partitions[tp[1]].leader, []).append(tp)
        out = {}
        wait = self.max_wait_ms if max_wait_ms is None else max_wait_ms
        refresh = False
        for leader, tps in by_leader.items():
            topics: dict[str, list] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(
                    FetchRequest.FetchPartition(
                        partition=p, fetch_offset=self.positions[(t, p)], partition_max_bytes=self.partition_max_bytes
                    )
                )
            try:
                conn = self.cluster.connection(leader)
                version = conn.version_for(FetchRequest.API_KEY)
                req = FetchRequest(
                    replica_id=-1,
                    max_wait_ms=wait,
                    min_bytes=self.min_bytes,
                    max_bytes=self.max_bytes,
                    isolation_level=self.isolation_level,
                    session_id=0,
                    session_epoch=-1,
                    topics=[
                        FetchRequest.FetchTopic(topic=t, topic_id=self.cluster.topics[t].topic_id, partitions=ps)
                        for t, ps in topics.items()
                    ],
                    forgotten_topics_data=[],
                )
                resp = conn.request(req, version, timeout=wait / 1000 + self.cluster.timeout)
            except ClientError:
                self.cluster.drop_connection(leader)
                refresh = True
                continue
            ids = {m.topic_id: m.name for m in self.cluster.topics.values()}
            for t in resp.responses:
                name = t.topic if version < 13 else ids.get(t.topic_id, t.topic)
                for p in t.partitions:
                    tp = (name, p.partition_index)
                    if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                        self._reset(tp)
                        continue
                    if p.error_code in RETRIABLE:
                        refresh = True
                        continue
                    if p.error_code:
                        raise KafkaProtocolError(p.error_code, f"fetch {tp[0]}-{tp[1]}")
                    self.high_watermarks[tp] = p.high_watermark
                    self.log_start_offsets[tp] = p.log_start_offset
                    if p.records is not None and len(p.records):
                        out[tp] = p.records
        if refresh:
            self.cluster.refresh(list({t for t, _ in self.positions}))
        return out

    def poll(self, timeout_s: float = 1.0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the current positions (advancing them), waiting up to timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            raw = self.fetch_raw(min(self.max_wait_ms, int(remaining * 1000)))
            records: list[ConsumerRecord] = []
            for tp, data in raw.items():
                pos = self.positions[tp]
                for batch in iter_batches(data, validate=True):
                    if batch.next_offset <= pos:
                        continue
                    if not batch.is_control:
                        ttype = batch.timestamp_type
                        for r in batch.records():
                            if r.offset >= pos:
                                records.append(
                                    ConsumerRecord(
                                        tp[0], tp[1], r.offset, r.timestamp, ttype, r.key, r.value, r.headers
                                    )
                                )
                    pos = batch.next_offset
                    if max_records is not None and len(records) >= max_records:
                        break
                self.positions[tp] = pos
                if max_records is not None and len(records) >= max_records:
                    break
            if records or time.monotonic() >= deadline:
                return records

    def close(self) -> None:
        if self._own_cluster:
            self.cluster.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
