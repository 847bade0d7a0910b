"""The fault suite's checker, in the spirit of Jepsen's Kafka queue workload.

A `History` records, from any thread, what the clients did and saw:

    h = History()
    h.send(value, producer="p0", idempotent=True)     # before produce(): values are unique
    h.acked(value, partition, offset)                  # the delivery report said so (offset None:
                                                       # librdkafka's report of a duplicate)
    h.failed(value, error)                             # an error: indeterminate (it may be in)
    h.polled(consumer, partition, offset, value)       # a record a consumer got
    h.reset(consumer)                                  # its positions moved on purpose (assign, seek)
    h.committed(group, partition, offset)              # a group offset commit that succeeded

At the end, after every fault is healed, a fresh consumer reads every partition from the
beginning up to its log end: `check(h, final, log_end, committed)` returns a `Result`:

- lost: an acknowledged value missing from the final read.
- wrong_offset: an acknowledged value found, but not at the offset its ack gave (or
  another value at that offset). An ack without an offset (librdkafka reports a batch
  the broker called a duplicate as delivered, offset unknown) is checked for loss only.
- duplicate: a value at two offsets. Allowed (and counted, not an anomaly) for a
  non-idempotent producer, whose retries may write twice; an anomaly for an idempotent one,
  unless its copies carry different producer epochs (read from the replicas' batches): a
  broker deduplicates within one (producer id, epoch) only, and librdkafka bumps its
  idempotent producer's epoch itself after some errors (KIP-360; librdkafka issue 4953),
  re-sending what may already be written under the new epoch. Those are counted apart
  (`epoch_bump_duplicates`); without the replicas' logs every idempotent duplicate is an
  anomaly.
- unexpected: a value read (polled or in the final read) that was never sent.
- offset_gap / offset_order: the final read of a partition is not dense from its first
  offset (no transactions, no compaction here: every offset holds a record), or an
  offset appears twice or goes backwards.
- nonmonotonic_poll: a consumer saw an offset at or below one it saw before in that
  partition (without a reset() in between). poll_skip: it jumped over offsets that the
  final read shows hold records.
- truncated_read: a consumer saw value v at offset o, and the final read has not (a
  record below the high watermark, hence visible, that later disappeared).
- commit_ahead: a committed group offset beyond the partition's final log end.
- replica_divergence: at the end, with every replica in sync, two replicas' logs of a
  partition differ (not one a prefix of the other): `diverged(...)`, given the bytes of
  each replica's segments (tests/faults/workload.py reads them), says where.

Failed sends are indeterminate (a request timeout may still have been written): the
Result counts those that turned up (`failed_present`), never flags them. Values are
strings, unique per send (the history rejects a value sent twice).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import defaultdict

from broker.native import CorruptRecordError, iter_batches

ANOMALIES = (
    "lost",
    "wrong_offset",
    "duplicate",
    "unexpected",
    "offset_gap",
    "offset_order",
    "nonmonotonic_poll",
    "poll_skip",
    "truncated_read",
    "commit_ahead",
    "replica_divergence",
)
MAX_EXAMPLES = 10


@dataclasses.dataclass
class Send:
    value: str
    producer: str
    idempotent: bool
    status: str = "invoked"  # invoked | ok | failed
    partition: int | None = None
    offset: int | None = None
    error: str | None = None


class History:
    """Thread-safe record of what the clients did (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sends: dict[str, Send] = {}
        #: (consumer, epoch of its positions, partition, offset, value), in order of arrival
        self.polls: list[tuple[str, int, int, int, str]] = []
        self._epochs: dict[str, int] = defaultdict(int)
        self.commits: list[tuple[str, int, int]] = []

    def send(self, value: str, producer: str, idempotent: bool) -> None:
        with self._lock:
            if value in self.sends:
                raise ValueError(f"value {value!r} sent twice: values must be unique")
            self.sends[value] = Send(value, producer, idempotent)

    def acked(self, value: str, partition: int, offset: int | None) -> None:
        with self._lock:
            s = self.sends[value]
            s.status, s.partition, s.offset = "ok", partition, offset

    def failed(self, value: str, error: str) -> None:
        with self._lock:
            s = self.sends[value]
            s.status, s.error = "failed", error

    def polled(self, consumer: str, partition: int, offset: int, value: str) -> None:
        with self._lock:
            self.polls.append((consumer, self._epochs[consumer], partition, offset, value))

    def reset(self, consumer: str) -> None:
        with self._lock:
            self._epochs[consumer] += 1

    def committed(self, group: str, partition: int, offset: int) -> None:
        with self._lock:
            self.commits.append((group, partition, offset))

    # counts, for progress reports
    def counts(self) -> dict[str, int]:
        with self._lock:
            statuses = defaultdict(int)
            for s in self.sends.values():
                statuses[s.status] += 1
            no_offset = sum(1 for s in self.sends.values() if s.status == "ok" and s.offset is None)
            return {
                "sends": len(self.sends),
                "acked": statuses["ok"],
                "failed": statuses["failed"],
                "pending": statuses["invoked"],
                "polls": len(self.polls),
                "commits": len(self.commits),
                "acked_without_offset": no_offset,
            }


@dataclasses.dataclass
class Result:
    counts: dict[str, int]
    anomalies: dict[str, list[str]]
    #: values a non-idempotent producer wrote more than once (allowed): how many
    allowed_duplicates: int = 0
    #: failed (indeterminate) sends found in the final read
    failed_present: int = 0
    #: values an idempotent producer wrote twice, each copy under another producer epoch
    epoch_bump_duplicates: int = 0

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values())

    def anomaly_count(self) -> int:
        return sum(len(v) for v in self.anomalies.values())

    def summary(self) -> str:
        c = self.counts
        head = (
            f"sends {c['sends']} (acked {c['acked']}, failed {c['failed']}, failed but present "
            f"{self.failed_present}), polls {c['polls']}, final records {c['final']}, "
            f"allowed duplicates {self.allowed_duplicates}, anomalies {self.anomaly_count()}"
        )
        if self.epoch_bump_duplicates:
            head += f", idempotent duplicates across producer epochs {self.epoch_bump_duplicates}"
        if c.get("acked_without_offset"):
            head += f", acked without offset {c['acked_without_offset']}"
        if c.get("producer_fatal"):
            head += f", producer fatal errors {c['producer_fatal']}"
        lines = [head]
        for kind, found in self.anomalies.items():
            if found:
                more = f" (+{len(found) - MAX_EXAMPLES} more)" if len(found) > MAX_EXAMPLES else ""
                lines.append(f"  {kind}: {len(found)}: " + "; ".join(found[:MAX_EXAMPLES]) + more)
        return "\n".join(lines)


def diverged(logs: dict[int, bytes]) -> str | None:
    """None when every replica's log (broker -> its segments' bytes, concatenated) is a
    prefix of the longest one (a follower may be a fetch behind); else where they part."""
    if not logs:
        return None
    longest_id, longest = max(logs.items(), key=lambda kv: len(kv[1]))
    for broker, data in sorted(logs.items()):
        if longest[: len(data)] != data:
            at = next(i for i, (a, b) in enumerate(zip(data, longest)) if a != b)
            return (
                f"broker {broker}'s log ({len(data)} bytes) differs from broker {longest_id}'s "
                f"({len(longest)} bytes) at byte {at}"
            )
    return None


def check(
    history: History,
    final: dict[int, list[tuple[int, str]]],
    log_end: dict[int, int] | None = None,
    committed: dict[tuple[str, int], int] | None = None,
    replica_logs: dict[int, dict[int, bytes]] | None = None,
) -> Result:
    """Checks the history against the final read (partition -> [(offset, value)] in the
    order read, from the beginning), the partitions' log end offsets then (default: one
    past the last offset read) and the group offsets committed then ((group, partition)
    -> offset; default: the last commit the history recorded for each) and, if given, the
    replicas' logs (partition -> broker -> bytes; see `diverged`)."""
    anomalies: dict[str, list[str]] = {k: [] for k in ANOMALIES}
    sends = history.sends

    # the final read: dense, ordered; where each value is
    at: dict[tuple[int, int], str] = {}
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p, records in sorted(final.items()):
        prev = None
        for offset, value in records:
            if prev is not None:
                if offset <= prev:
                    anomalies["offset_order"].append(f"p{p}: offset {offset} after {prev}")
                elif offset != prev + 1:
                    anomalies["offset_gap"].append(f"p{p}: offsets {prev + 1}..{offset - 1} missing")
            prev = offset if prev is None else max(prev, offset)
            at[(p, offset)] = value
            where[value].append((p, offset))
    ends = dict(log_end) if log_end is not None else {}
    for p, records in final.items():
        ends.setdefault(p, records[-1][0] + 1 if records else 0)

    failed_present = allowed_dups = bump_dups = 0
    unexpected: set[str] = set()
    epochs = producer_epochs(replica_logs)
    for value, places in where.items():
        s = sends.get(value)
        if s is None:
            anomalies["unexpected"].append(f"{value!r} at {places[0]} never sent")
            unexpected.add(value)
            continue
        if s.status == "failed":
            failed_present += 1
        if len(places) > 1:
            if s.idempotent:
                copies = [epochs.get(place) for place in places]
                if None not in copies and len(set(copies)) == len(copies):
                    bump_dups += 1
                else:
                    anomalies["duplicate"].append(
                        f"{value!r} ({s.producer}, idempotent) at {places}, producer epochs {copies}"
                    )
            else:
                allowed_dups += 1

    for s in sends.values():
        if s.status != "ok":
            continue
        places = where.get(s.value)
        if not places:
            anomalies["lost"].append(f"{s.value!r} ({s.producer}) acked at p{s.partition}@{s.offset}")
        elif s.offset is not None and (s.partition, s.offset) not in places:
            there = at.get((s.partition, s.offset))  # type: ignore[arg-type]
            anomalies["wrong_offset"].append(
                f"{s.value!r} acked at p{s.partition}@{s.offset}, found at {places}; there: {there!r}"
            )

    last: dict[tuple[str, int, int], int] = {}
    for consumer, epoch, p, offset, value in history.polls:
        if value not in sends and value not in unexpected:
            anomalies["unexpected"].append(f"{value!r} polled by {consumer} at p{p}@{offset} never sent")
            unexpected.add(value)
        key = (consumer, epoch, p)
        prev = last.get(key)
        if prev is not None:
            if offset <= prev:
                anomalies["nonmonotonic_poll"].append(f"{consumer} p{p}: offset {offset} after {prev}")
            elif offset > prev + 1:
                skipped = [o for o in range(prev + 1, offset) if (p, o) in at]
                if skipped:
                    anomalies["poll_skip"].append(
                        f"{consumer} p{p}: {prev} -> {offset} skipped {len(skipped)} records (first {skipped[0]})"
                    )
        last[key] = offset if prev is None else max(prev, offset)
        final_value = at.get((p, offset))
        if final_value != value:
            anomalies["truncated_read"].append(
                f"{consumer} read {value!r} at p{p}@{offset}; final read there: {final_value!r} (log end {ends.get(p)})"
            )

    if committed is None:
        committed = {}
        for group, p, offset in history.commits:
            committed[(group, p)] = offset
    for (group, p), offset in sorted(committed.items()):
        if offset > ends.get(p, 0):
            anomalies["commit_ahead"].append(f"group {group} p{p}: committed {offset} > log end {ends.get(p, 0)}")

    for p, logs in sorted((replica_logs or {}).items()):
        if (where_ := diverged(logs)) is not None:
            anomalies["replica_divergence"].append(f"p{p}: {where_}")

    counts = history.counts()
    counts["final"] = sum(len(r) for r in final.values())
    return Result(
        counts,
        anomalies,
        allowed_duplicates=allowed_dups,
        failed_present=failed_present,
        epoch_bump_duplicates=bump_dups,
    )


def producer_epochs(replica_logs: dict[int, dict[int, bytes]] | None) -> dict[tuple[int, int], int]:
    """(partition, offset) -> the producer epoch of its batch, from one replica's log of
    each partition (records of no producer id left out). A log that does not parse as
    record batches gives nothing: its duplicates stay anomalies."""
    out: dict[tuple[int, int], int] = {}
    for p, logs in (replica_logs or {}).items():
        if not logs:
            continue
        data = max(logs.values(), key=len)
        try:
            for b in iter_batches(memoryview(data)):
                if b.producer_id >= 0:
                    for offset in range(b.base_offset, b.next_offset):
                        out[(p, offset)] = b.producer_epoch
        except (ValueError, CorruptRecordError):
            continue
    return out
