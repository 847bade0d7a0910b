"""A share consumer speaking ShareFetch/ShareAcknowledge directly with kbroker's own
client (no group membership: the broker checks none for these requests), for the
delivery tests."""

from __future__ import annotations

import uuid

from broker.client.connection import BrokerConnection
from broker.native import iter_batches
from broker.protocol.messages.share_acknowledge import ShareAcknowledgeRequest
from broker.protocol.messages.share_fetch import ShareFetchRequest
from broker.share.partition import ACCEPT

Q = ShareFetchRequest


class Member:
    """One share consumer speaking ShareFetch/ShareAcknowledge on its own connection."""

    def __init__(self, conn: BrokerConnection, group: str, topic_id: uuid.UUID, name: str | None = None):
        self.conn = conn
        self.group = group
        self.member = name or str(uuid.uuid4())
        self.topic_id = topic_id
        self.epoch = 0

    def fetch(self, acks=(), max_records=500, max_wait_ms=0, mode=0, epoch=None, version=2, renew=False):
        """(top error, partition data or None)"""
        req = Q(
            group_id=self.group,
            member_id=self.member,
            share_session_epoch=self.epoch if epoch is None else epoch,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=1 << 20,
            max_records=max_records,
            batch_size=max_records,
            share_acquire_mode=mode,
            is_renew_ack=renew,
            topics=[
                Q.FetchTopic(
                    topic_id=self.topic_id,
                    partitions=[
                        Q.FetchPartition(
                            partition_index=0,
                            acknowledgement_batches=[
                                Q.AcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=[t])
                                for f, la, t in acks
                            ],
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
        )
        resp = self.conn.request(req, version=version, timeout=20)
        self.last = resp
        if resp.error_code == 0 and epoch is None:
            self.epoch = 1 if self.epoch == 0 else self.epoch + 1
        d = resp.responses[0].partitions[0] if resp.responses else None
        return resp.error_code, d

    def acknowledge(self, acks, epoch=None):
        A = ShareAcknowledgeRequest
        req = A(
            group_id=self.group,
            member_id=self.member,
            share_session_epoch=self.epoch if epoch is None else epoch,
            topics=[
                A.AcknowledgeTopic(
                    topic_id=self.topic_id,
                    partitions=[
                        A.AcknowledgePartition(
                            partition_index=0,
                            acknowledgement_batches=[
                                A.AcknowledgementBatch(first_offset=f, last_offset=la, acknowledge_types=[t])
                                for f, la, t in acks
                            ],
                        )
                    ],
                )
            ],
        )
        resp = self.conn.request(req, version=2, timeout=20)
        if resp.error_code == 0 and epoch is None:
            self.epoch += 1
        d = resp.responses[0].partitions[0] if resp.responses else None
        return resp.error_code, d


def records(d) -> list[tuple[int, bytes, int]]:
    """(offset, value, delivery count) of the records the answer acquired for the member:
    the batches sent, kept to the AcquiredRecords runs, as a share consumer reads them."""
    if d is None or not d.acquired_records:
        return []
    runs = [(a.first_offset, a.last_offset, a.delivery_count) for a in d.acquired_records]
    out = []
    for batch in iter_batches(bytes(d.records)):
        if batch.is_control:  # a transaction's marker: a share consumer acknowledges it as a gap
            continue
        for rec in batch:
            for f, la, n in runs:
                if f <= rec.offset <= la:
                    out.append((rec.offset, rec.value, n))
    return out


def runs(got) -> list[tuple[int, int, int]]:
    """Offsets as (first, last, type ACCEPT) runs."""
    out: list[list[int]] = []
    for off, _v, _n in got:
        if out and out[-1][1] + 1 == off:
            out[-1][1] = off
        else:
            out.append([off, off])
    return [(f, la, ACCEPT) for f, la in out]
