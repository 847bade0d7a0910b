"""Transaction markers: writing them as a partition leader (the WriteTxnMarkers handler)
and sending them to the leaders (the transaction coordinator's MarkerSender, Kafka's
TransactionMarkerChannelManager's network half).

`write_markers` appends each marker's control batch (marker_batch: Kafka's
EndTransactionMarker) to each of its partitions through ReplicaManager.append_records
with acks=-1 and origin MARKER, waits for the ISR, and for a partition of
__consumer_offsets tells the group coordinator to make the transaction's offset commits
visible (commit) or drop them (abort), as Kafka's KafkaApis.handleWriteTxnMarkersRequest
does.

`MarkerChannels` is the coordinator's MarkerSender (and the produce path's way to ask a
coordinator on another broker to verify a partition, AddPartitionsToTxn verify_only):
markers for partitions this broker
leads are written here without a socket; the others go to their leader in one
WriteTxnMarkers request per broker (a BrokerChannel per broker, reconnected as needed).
A failure of a request answers nothing, and the coordinator retries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from broker.cluster.channel import BrokerChannel
from broker.cluster.replica.manager import AppendOrigin
from broker.log import TopicPartition
from broker.log.log import marker_batch
from broker.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from broker.protocol.messages.write_txn_markers import WriteTxnMarkersRequest
from broker.txn.coordinator import OFFSETS_TOPIC, Marker

if TYPE_CHECKING:
    from broker.server.services import BrokerServices

log = logging.getLogger(__name__)

MARKER_TIMEOUT_MS = 10000

#: (producer id, topic, partition) -> error code
MarkerResults = dict[tuple[int, str, int], int]


async def write_markers(
    services: BrokerServices, markers: Iterable[Marker], timeout_ms: int = MARKER_TIMEOUT_MS
) -> MarkerResults:
    # one append per transaction version (the leader checks a marker's epoch by it): all
    # markers of a request usually share one
    by_version: dict[int, tuple[list[tuple[TopicPartition, bytearray]], list[Marker]]] = {}
    now = int(time.time() * 1000)
    for m in markers:
        entries, owners = by_version.setdefault(m.transaction_version, ([], []))
        for topic, p in m.partitions:
            entries.append(
                (
                    TopicPartition(topic, p),
                    marker_batch(m.producer_id, m.producer_epoch, m.coordinator_epoch, m.commit, now),
                )
            )
            owners.append(m)
    out: MarkerResults = {}
    for tv, (entries, owners) in by_version.items():
        result = services.replicas.append_records(entries, -1, timeout_ms, AppendOrigin.MARKER, transaction_version=tv)
        parts = await result.wait() if result.pending else result.partitions
        for (tp, _records), m, r in zip(entries, owners, parts):
            out[(m.producer_id, tp.topic, tp.partition)] = r.error
            if not r.error and tp.topic == OFFSETS_TOPIC:
                services.coordinator.complete_txn_offsets(tp.partition, m.producer_id, m.commit)
    return out


class MarkerChannels:
    """The transaction coordinator's MarkerSender on this broker."""

    def __init__(self, services: BrokerServices) -> None:
        self.services = services
        self.channels: dict[int, BrokerChannel] = {}
        self._closing: list[BrokerChannel] = []

    async def send(self, broker_id: int, markers: list[Marker]) -> MarkerResults:
        services = self.services
        if broker_id == services.broker_id:
            return await write_markers(services, markers)
        ch = self._channel(broker_id)
        if ch is None:
            return {}
        R = WriteTxnMarkersRequest
        req = R(
            markers=[
                R.WritableTxnMarker(
                    producer_id=m.producer_id,
                    producer_epoch=m.producer_epoch,
                    transaction_result=m.commit,
                    coordinator_epoch=m.coordinator_epoch,
                    transaction_version=m.transaction_version,
                    topics=[
                        R.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in _by_topic(m.partitions)
                    ],
                )
                for m in markers
            ]
        )
        resp = await ch.request(req)
        out: MarkerResults = {}
        for mr in resp.markers:
            for t in mr.topics:
                for pr in t.partitions:
                    out[(mr.producer_id, t.name, pr.partition_index)] = pr.error_code
        return out

    async def verify(
        self, broker_id: int, txn_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        return await self._add_partitions(broker_id, txn_id, pid, epoch, partitions, verify_only=True)

    async def add(
        self, broker_id: int, txn_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        return await self._add_partitions(broker_id, txn_id, pid, epoch, partitions, verify_only=False)

    async def _add_partitions(
        self, broker_id: int, txn_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]], verify_only: bool
    ) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn v4 verify_only (KIP-890 part 1), or v5 adding them for a
        transaction.version 2 producer (Kafka's AddPartitionsToTxnManager)."""
        ch = self._channel(broker_id)
        if ch is None:
            return {}
        A = AddPartitionsToTxnRequest
        req = A(
            transactions=[
                A.AddPartitionsToTxnTransaction(
                    transactional_id=txn_id,
                    producer_id=pid,
                    producer_epoch=epoch,
                    verify_only=verify_only,
                    topics=[A.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in _by_topic(partitions)],
                )
            ]
        )
        resp = await ch.request(req, version=4 if verify_only else 5)
        out = {}
        for r in resp.results_by_transaction:
            for t in r.topic_results:
                for pr in t.results_by_partition:
                    out[(t.name, pr.partition_index)] = pr.partition_error_code
        if resp.error_code:
            return {tp: resp.error_code for tp in partitions}
        return out

    def _channel(self, broker_id: int) -> BrokerChannel | None:
        services = self.services
        info = services.metadata.brokers().get(broker_id)
        if info is None:
            return None
        ch = self.channels.get(broker_id)
        if ch is None or (ch.host, ch.port) != (info.host, info.port):
            if ch is not None:
                self._closing.append(ch)
            ch = self.channels[broker_id] = BrokerChannel(
                info.host,
                info.port,
                client_id=f"broker-{services.broker_id}-txn",
                request_timeout=MARKER_TIMEOUT_MS / 1000 + 5,
            )
        return ch

    async def close(self) -> None:
        for ch in self._closing:
            await ch.close()
        for ch in self.channels.values():
            await ch.close()
        self.channels.clear()


def _by_topic(partitions: Iterable[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    by: dict[str, list[int]] = {}
    for t, p in partitions:
        by.setdefault(t, []).append(p)
    return list(by.items())
