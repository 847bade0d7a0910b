"""Loading a coordinator's partition (Kafka's CoordinatorLoader): replays what the
partition holds, from its log start to its log end, into a CoordinatorPlayback.

The read is in chunks of LOAD_CHUNK bytes of whole batches. A batch of records hands
each keyed record to `replay` (a record without a key is nobody's: skipped), with the
batch's producer when the batch is transactional (-1 otherwise: a write of the
coordinator itself); a transaction marker (a control batch of a producer) goes to
`replay_marker`. A record `replay` cannot read (ValueError) is logged and skipped —
one bad record must not keep a coordinator from loading the rest.

Synchronous, on the event loop: nothing else runs while a partition loads, so nothing
sees it half loaded.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

from broker.coordinator.partition_writer import PartitionWriter
from broker.log import TopicPartition
from broker.log.producer_state import read_marker
from broker.native import iter_batches

log = logging.getLogger(__name__)

LOAD_CHUNK = 8 * 1024 * 1024
NO_PRODUCER_ID = -1


class CoordinatorPlayback(Protocol):
    """What records are replayed into (Kafka's CoordinatorPlayback)."""

    def replay(self, offset: int, producer_id: int, producer_epoch: int, key: bytes, value: bytes | None) -> None:
        """One keyed record; `producer_id` the transaction's producer for a record of a
        transactional batch, else -1. ValueError: the record is unreadable (skipped)."""
        ...

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """The marker that ends producer_id's transaction (commit or abort)."""
        ...


@dataclass(frozen=True)
class LoadSummary:
    """What a load read (Kafka's LoadSummary)."""

    records: int
    bytes: int
    seconds: float


def load(
    writer: PartitionWriter, tp: TopicPartition, playback: CoordinatorPlayback, chunk: int = LOAD_CHUNK
) -> LoadSummary:
    """Replays `tp` into `playback`, up to the log end as it is when the load starts."""
    t0 = time.monotonic()
    offset, end = writer.loadable_range(tp)
    records = size = 0
    while offset < end:
        data = writer.read(tp, offset, chunk, end)
        if not data:
            break
        size += len(data)
        advanced = False
        for batch in iter_batches(data):
            if batch.next_offset <= offset:
                continue  # the chunk began inside an earlier batch
            advanced = True
            offset = batch.next_offset
            if batch.is_control:
                if batch.producer_id >= 0:
                    try:
                        commit, _coordinator_epoch = read_marker(batch)
                    except ValueError:
                        continue  # a control batch that is no marker
                    playback.replay_marker(batch.producer_id, batch.producer_epoch, commit)
                continue
            pid = batch.producer_id if batch.is_transactional else NO_PRODUCER_ID
            epoch = batch.producer_epoch if batch.is_transactional else -1
            for rec in batch.records():
                records += 1
                if rec.key is None:
                    continue
                try:
                    playback.replay(rec.offset, pid, epoch, rec.key, rec.value)
                except ValueError as exc:  # UnicodeDecodeError too
                    log.warning("%s offset %d: skipping an unreadable record (%s)", tp, rec.offset, exc)
        if not advanced:
            break
    return LoadSummary(records, size, time.monotonic() - t0)
