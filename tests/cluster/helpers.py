"""What the cluster fault tests share: a producer that keeps sending in a thread and
records exactly what was acknowledged, a full read-back of a topic, and the checks
Kafka's replication system tests make (every acknowledged record present exactly once,
per-partition order kept). Every wait is bounded."""

from __future__ import annotations

import threading
import time

from tests.interop.helpers import confluent_read_all
from tests.support.deps import require_module

DEADLINE_S = 90.0


class ProducerThread:
    """confluent-kafka producing `value = b"<partition>:<seq>"` to each partition in turn,
    until stop(); `acked[p]` lists the sequence numbers acknowledged, in order of
    acknowledgement, `errors` every delivery error."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        acks: str = "all",
        idempotent: bool = True,
        rate: float = 2000.0,
        extra: dict | None = None,
    ):
        ck = require_module("confluent_kafka")
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        conf = {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "enable.idempotence": idempotent,
            "linger.ms": 5,
            "message.timeout.ms": 120000,
            "request.timeout.ms": 10000,
            "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
        }
        conf.update(extra or {})
        self.producer = ck.Producer(conf)
        self.acked: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.sent: dict[int, int] = {p: 0 for p in range(partitions)}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def start(self) -> ProducerThread:
        self._thread.start()
        return self

    def _report(self, err, msg) -> None:
        if err is not None:
            with self._lock:
                self.errors.append(str(err))
            return
        p, seq = msg.value().decode().split(":")
        with self._lock:
            self.acked[int(p)].append(int(seq))

    def _run(self) -> None:
        interval = 1.0 / self.rate if self.rate > 0 else 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            for p in range(self.partitions):
                seq = self.sent[p]
                try:
                    self.producer.produce(
                        self.topic, value=f"{p}:{seq}".encode(), partition=p, on_delivery=self._report
                    )
                except BufferError:
                    self.producer.poll(0.05)
                    continue
                self.sent[p] = seq + 1
            self.producer.poll(0)
            next_at += interval * self.partitions
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def acked_count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.acked.values())

    def wait_for_more(self, n: int, timeout: float = 30.0) -> None:
        """Until n more records than now are acknowledged (the producer makes progress)."""
        target = self.acked_count() + n
        deadline = time.monotonic() + timeout
        while self.acked_count() < target:
            assert time.monotonic() < deadline, (
                f"the producer got only {self.acked_count()} of {target} acks in {timeout} s; errors {self.errors[-5:]}"
            )
            time.sleep(0.05)

    def stop(self, flush_s: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(10)
        left = self.producer.flush(flush_s)
        assert left == 0, f"{left} records still unacknowledged after {flush_s} s"


def read_values(bootstrap: str, topic: str, partitions: int) -> dict[int, list[int]]:
    """Every record of the topic: partition -> [sequence numbers in offset order]."""
    out: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for p, _offset, _key, value, _h in confluent_read_all(bootstrap, topic, range(partitions), DEADLINE_S):
        vp, seq = value.decode().split(":")
        assert int(vp) == p, f"record {value!r} found in partition {p}"
        out[p].append(int(seq))
    return out


def check_no_loss_no_duplicates(
    acked: dict[int, list[int]], stored: dict[int, list[int]], idempotent: bool = True
) -> None:
    """Kafka's replication-test verdict: every acknowledged record is stored; with an
    idempotent producer none is stored twice; each partition keeps the producer's order."""
    for p, seqs in acked.items():
        have = stored[p]
        missing = sorted(set(seqs) - set(have))
        assert not missing, f"partition {p}: {len(missing)} acknowledged records lost, e.g. {missing[:10]}"
        if idempotent:
            dups = len(have) - len(set(have))
            assert dups == 0, f"partition {p}: {dups} records stored twice"
        # the producer sends in sequence order: stored order must follow it
        first_seen = []
        seen = set()
        for s in have:
            if s not in seen:
                seen.add(s)
                first_seen.append(s)
        assert first_seen == sorted(first_seen), f"partition {p}: order broken"
