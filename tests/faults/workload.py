"""The fault suite's load: confluent-kafka producers and a consumer recording everything
into a checker History (tests/faults/checker.py), then a final read.

    w = Workload(cluster.bootstrap, topic, partitions=2, history=h).start()
    w.wait_for_acks(200)              # progress, bounded
    ...                               # faults come and go (tests/faults/nemesis.py)
    w.stop()                          # producers flushed (bounded), consumer stopped
    result = w.check()                # final read by a fresh consumer, then the checker

Producers: one idempotent (acks=all, enable.idempotence) and one plain (acks=all, retries,
up to 5 requests in flight: it may write a record twice, which the checker counts but
allows). Each record's value is unique (`<producer>-<seq>`), sent to the partitions in
turn, recorded before its delivery report can arrive (reports run in the producer's own
thread, in poll()). A failed delivery is indeterminate. Every record is recorded as sent
only once produce() accepted it.

The consumer assigns itself every partition from the beginning (no group membership, so
no rebalance moves its positions) and records each record it gets; every second it
commits its positions for a group (synchronously, recorded once acknowledged).

Every wait is bounded; every thread stops at stop() and is a daemon.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.faults.checker import History, Result, check
from tests.support.cluster import Cluster
from tests.support.deps import require_module

#: cluster settings for the fault schedules: a silent broker's session expires in 6 s, a
#: stuck follower leaves the ISR after 3 s, three replicas, two in sync for an ack, a few
#: internal partitions (quick to start), a broker's requests to another time out in 6 s.
FAULT_CONFIG = {
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 3000,
    "default.replication.factor": 3,
    "offsets.topic.replication.factor": 3,
    "offsets.topic.num.partitions": 3,
    "min.insync.replicas": 2,
    "request.timeout.ms": 6000,
}

PRODUCERS = (("idem", True), ("plain", False))
DELIVERY_TIMEOUT_MS = 30000
FLUSH_S = 45.0
FINAL_READ_S = 60.0


class _Producer:
    def __init__(
        self,
        ck,
        bootstrap: str,
        topic: str,
        partitions: int,
        name: str,
        idempotent: bool,
        history: History,
        rate: float,
    ):
        conf = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": idempotent,
            "linger.ms": 5,
            "message.timeout.ms": DELIVERY_TIMEOUT_MS,
            "request.timeout.ms": 5000,
            "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
            "socket.timeout.ms": 5000,
            "client.id": f"faults-{name}",
        }
        if not idempotent:
            conf.update({"max.in.flight.requests.per.connection": 5, "retries": 1000000})
        conf["error_cb"] = self._error
        #: librdkafka's fatal errors (an idempotent producer that lost its sequence: never
        #: expected from a correct broker; the producer fails every record afterwards)
        self.fatal: list[str] = []
        self.producer = ck.Producer(conf)
        self.ck = ck
        self.topic, self.partitions, self.name, self.idempotent = topic, partitions, name, idempotent
        self.history, self.rate = history, rate
        self.seq = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"producer-{name}", daemon=True)

    def _error(self, err) -> None:
        if err.fatal() and str(err) not in self.fatal:
            self.fatal.append(str(err))

    def _report(self, err, msg) -> None:
        value = msg.value().decode()
        if err is not None:
            self.history.failed(value, str(err))
        else:
            self.history.acked(value, msg.partition(), msg.offset())

    def _run(self) -> None:
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self.stopping.is_set():
            value = f"{self.name}-{self.seq}"
            try:
                self.producer.produce(
                    self.topic, value=value.encode(), partition=self.seq % self.partitions, on_delivery=self._report
                )
            except BufferError:
                self.producer.poll(0.1)
                continue
            except self.ck.KafkaException as exc:
                # a fatal error refuses every later record: counted (the summary names it), and
                # this producer stops, rather than its thread dying unreported
                err = exc.args[0] if exc.args else None
                if err is None or not err.fatal():
                    raise
                self._error(err)
                self.producer.poll(0)
                return
            self.history.send(value, self.name, self.idempotent)
            self.seq += 1
            self.producer.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self.producer.poll(delay)
            else:
                next_at = time.monotonic()

    def stop(self, flush_s: float) -> int:
        """Stops sending and waits for every delivery report; how many never came."""
        self.stopping.set()
        self.thread.join(10)
        left = self.producer.flush(flush_s)
        # librdkafka's client goes when its last reference does (no reconnecting to
        # brokers of a cluster long gone): the callbacks it holds point back here
        self.producer = None
        return left


class _Consumer:
    def __init__(self, ck, bootstrap: str, topic: str, partitions: int, name: str, group: str, history: History):
        self.ck = ck
        self.consumer = ck.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
                "socket.timeout.ms": 5000,
                "client.id": f"faults-{name}",
            }
        )
        self.topic, self.partitions, self.name, self.group = topic, partitions, name, group
        self.history = history
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"consumer-{name}", daemon=True)

    def _run(self) -> None:
        ck = self.ck
        self.consumer.assign([ck.TopicPartition(self.topic, p, ck.OFFSET_BEGINNING) for p in range(self.partitions)])
        self.history.reset(self.name)
        positions: dict[int, int] = {}
        committed: dict[int, int] = {}
        last_commit = time.monotonic()
        try:
            while not self.stopping.is_set():
                for m in self.consumer.consume(500, 0.2):
                    if m.error() is not None:
                        self.errors.append(str(m.error()))
                        continue
                    self.history.polled(self.name, m.partition(), m.offset(), m.value().decode())
                    positions[m.partition()] = m.offset() + 1
                if time.monotonic() - last_commit >= 1.0:
                    last_commit = time.monotonic()
                    todo = {p: o for p, o in positions.items() if committed.get(p) != o}
                    if todo:
                        try:
                            self.consumer.commit(
                                offsets=[ck.TopicPartition(self.topic, p, o) for p, o in todo.items()],
                                asynchronous=False,
                            )
                        except ck.KafkaException as exc:
                            self.errors.append(f"commit: {exc}")
                        else:
                            for p, o in todo.items():
                                self.history.committed(self.group, p, o)
                            committed.update(todo)
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)


class Workload:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int = 2,
        history: History | None = None,
        rate: float = 100.0,
        consume: bool = True,
    ):
        self.ck = require_module("confluent_kafka")
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.history = history or History()
        self.group = f"{topic}-g"
        self.producers = [
            _Producer(self.ck, bootstrap, topic, partitions, name, idem, self.history, rate) for name, idem in PRODUCERS
        ]
        self.consumer = (
            _Consumer(self.ck, bootstrap, topic, partitions, "c1", self.group, self.history) if consume else None
        )
        self.undelivered = 0

    def start(self) -> Workload:
        for p in self.producers:
            p.thread.start()
        if self.consumer is not None:
            self.consumer.thread.start()
        return self

    def acked(self) -> int:
        return self.history.counts()["acked"]

    def wait_for_acks(self, n: int, timeout: float = 60.0) -> None:
        """Until n more records than now are acknowledged."""
        target = self.acked() + n
        deadline = time.monotonic() + timeout
        while self.acked() < target:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"only {self.acked()} of {target} records acknowledged within {timeout} s; {self.history.counts()}"
                )
            time.sleep(0.1)

    def stop(self, flush_s: float = FLUSH_S) -> None:
        for p in self.producers:
            p.stopping.set()
        self.undelivered = sum(p.stop(flush_s) for p in self.producers)
        if self.consumer is not None:
            # let the consumer catch up with what was just acknowledged
            self._wait_consumer_caught_up(15.0)
            self.consumer.stop()

    def _wait_consumer_caught_up(self, timeout: float) -> None:
        acked = {
            (s.partition, s.offset)
            for s in list(self.history.sends.values())
            if s.status == "ok" and s.offset is not None
        }
        ends: dict[int, int] = {}
        for p, o in acked:
            ends[p] = max(ends.get(p, -1), o)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen: dict[int, int] = {}
            for _c, _e, p, o, _v in list(self.history.polls):
                seen[p] = max(seen.get(p, -1), o)
            if all(seen.get(p, -1) >= o for p, o in ends.items()):
                return
            time.sleep(0.2)

    def final_read(self, timeout: float = FINAL_READ_S) -> tuple[dict[int, list[tuple[int, str]]], dict[int, int]]:
        """A fresh consumer reads every partition from the beginning up to its high
        watermark: ({partition: [(offset, value)]}, {partition: high watermark})."""
        ck = self.ck
        c = ck.Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"{self.topic}-final",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
                "enable.partition.eof": True,
            }
        )
        try:
            ends = self._stable_ends(c, timeout / 4)
            c.assign([ck.TopicPartition(self.topic, p, ck.OFFSET_BEGINNING) for p in range(self.partitions)])
            final: dict[int, list[tuple[int, str]]] = {p: [] for p in range(self.partitions)}
            done = {p for p, e in ends.items() if e == 0}
            deadline = time.monotonic() + timeout
            while len(done) < self.partitions:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"final read: {sum(map(len, final.values()))} records of {ends} in {timeout} s"
                    )
                for m in c.consume(1000, 0.5):
                    err = m.error()
                    if err is not None:
                        if err.code() == ck.KafkaError._PARTITION_EOF:
                            if m.offset() >= ends[m.partition()]:
                                done.add(m.partition())
                            continue
                        raise AssertionError(f"final read: {err}")
                    final[m.partition()].append((m.offset(), m.value().decode()))
                    if m.offset() + 1 >= ends[m.partition()]:
                        done.add(m.partition())
            return final, ends
        finally:
            c.close()

    def _stable_ends(self, c, timeout: float) -> dict[int, int]:
        """The high watermarks, once two readings half a second apart agree (a new leader
        learns its followers' positions from their next fetches)."""
        ck = self.ck
        deadline = time.monotonic() + timeout
        last: dict[int, int] | None = None
        while True:
            ends = {
                p: c.get_watermark_offsets(ck.TopicPartition(self.topic, p), timeout=10)[1]
                for p in range(self.partitions)
            }
            if ends == last or time.monotonic() > deadline:
                return ends
            last = ends
            time.sleep(0.5)

    def committed(self) -> dict[tuple[str, int], int]:
        """The group's committed offsets now: {(group, partition): offset}."""
        ck = self.ck
        c = ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "enable.auto.commit": False})
        try:
            tps = c.committed([ck.TopicPartition(self.topic, p) for p in range(self.partitions)], timeout=15)
            return {(self.group, tp.partition): tp.offset for tp in tps if tp.offset >= 0}
        finally:
            c.close()

    def check(self, replica_logs: dict[int, dict[int, bytes]] | None = None) -> Result:
        """The final read, the group's offsets, and the checker's verdict (replica_logs:
        see `replica_logs()`)."""
        final, ends = self.final_read()
        committed = self.committed() if self.consumer is not None else {}
        result = check(self.history, final, ends, committed, replica_logs)
        result.counts["undelivered"] = self.undelivered
        result.counts["producer_fatal"] = sum(len(p.fatal) for p in self.producers)
        if self.consumer is not None:
            result.counts["consumer_errors"] = len(self.consumer.errors)
        return result


def replica_logs(cluster: Cluster, topic: str, partitions: int, timeout: float = 20.0) -> dict[int, dict[int, bytes]]:
    """Each replica's log of each partition (partition -> broker -> its segments' bytes,
    concatenated), once every replica holds the same bytes or after `timeout` seconds (the
    checker then tells a follower still a fetch behind from a divergent one). Call it once
    the producers stopped and every ISR is full."""
    deadline = time.monotonic() + timeout
    while True:
        logs = {
            p: {i: _segments(partition_dir(cluster.broker(i), f"{topic}-{p}")) for i in cluster.replicas_of(topic, p)}
            for p in range(partitions)
        }
        if all(len(set(by_broker.values())) <= 1 for by_broker in logs.values()) or time.monotonic() > deadline:
            return logs
        time.sleep(0.5)


def partition_dir(broker, name: str) -> Path:
    """Where a broker keeps partition `name`: in one of its log.dirs when it has several."""
    dirs = [Path(d) for d in str(broker.config.get("log.dirs", "")).split(",") if d] or [broker.data_dir]
    return next((d / name for d in dirs if (d / name).is_dir()), dirs[0] / name)


def _segments(directory: Path) -> bytes:
    return b"".join(f.read_bytes() for f in sorted(directory.glob("*.log")))
