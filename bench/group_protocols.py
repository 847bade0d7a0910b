"""How long a 10-member consumer group takes to absorb one member joining and one leaving,
under KIP-848 (`group.protocol=consumer`) against the classic protocol, on kbroker and on
Apache Kafka, in one run, alternating:

    .venv/bin/python bench/group_protocols.py [--rounds 2] [--cycles 2]
        [--heartbeats default,short] [--short-ms 500]
        [--protocols consumer,cooperative,eager] [--brokers kafka,kbroker] [--rate 1000]
        [--seed N] [--no-pin] [--json out.json]
    .venv/bin/python bench/group_protocols.py --report out.json   # the tables again

Members are confluent-kafka consumers (librdkafka >= 2.12), each its own process; the
classic protocol is librdkafka's with `partition.assignment.strategy` `range` ("eager")
or `cooperative-sticky` ("cooperative"); KIP-848's assignment is the broker's default
server-side assignor (`uniform` on both brokers). A producer process writes --rate
records/s round-robin over a 12-partition topic the whole time.

Per broker start (Kafka, then kbroker, then Kafka ... --rounds of each, never together),
for each protocol, a fresh group of 10 members is formed, then --cycles times, each change
2 s and a random part (seeded) of one heartbeat interval after the group settled (members'
heartbeats run in step after a rebalance: a fixed pause would meet them at the same phase
every time):

- join: an 11th member (its process started and its consumer created beforehand)
  subscribes; t0 is its subscribe() call;
- leave: the group's oldest member close()s; t0 is that call.

"Stable again, records flowing" is the first moment at which all of these hold, and
still hold a second later (no callback fires in between):

1. from the members' own rebalance callbacks, every one of the 12 partitions is owned by
   exactly one of the group's members, every member owns one and the counts differ by at
   most one (what both assignors give on one topic);
2. every partition's owner has consumed, since it was given that partition, a record
   the broker appended at or after t0 (the topic has message.timestamp.type
   LogAppendTime, so the producer's own queueing does not count; strictly: at or after
   the moment t0 was announced to the members, a few ms before it);
3. the broker's describe (DescribeGroups for classic groups, ConsumerGroupDescribe for
   KIP-848 ones; polled every 20 ms from t0) shows the group Stable with those members
   and exactly that assignment.

The time is that moment less t0: the latest of (1)'s last callback, (2)'s first such
record per partition and (3)'s first agreeing answer ("total"); "assigned" leaves (2)
out. Every member's clock is this machine's. --json keeps each change's parts: the
last callback, the describe, the partition whose first new record came last.

Heartbeats: "default" is each side's default: KIP-848 members heartbeat at the broker's
group.consumer.heartbeat.interval.ms (5 s on both, session 45 s), classic members at
librdkafka's heartbeat.interval.ms 3 s (session 45 s); "short" sets --short-ms on both
brokers (both need group.consumer.min.heartbeat.interval.ms down to it) and as the
classic members' heartbeat.interval.ms. group.initial.rebalance.delay.ms is 0 on both
(it only delays a classic group's first rebalance, which is not measured).

With --pinned (the default), the broker runs on core 0 from its launch (a JVM then sizes
its GC and JIT threads for one core), this script, the members and the producer on core
1, as bench/kafka_vs_kbroker.py --pinned does. Kafka gets bin/kafka-server-start.sh's JVM
flags. The load average is printed before and after each broker's turn. Every wait is
bounded; members and producer exit when this script's pipes to them close, brokers when
it exits.
"""

from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.broker_proc import BrokerProcess  # noqa: E402
from tests.support.kafka_broker import KAFKA_JVM_FLAGS, KafkaBroker  # noqa: E402

PARTITIONS = 12
MEMBERS = 10
BROKER_CORE, CLIENT_CORE = 0, 1
WAIT_S = 120.0  # one change must settle within this
SETTLE_S = 1.0  # and stay settled this long
DESCRIBE_EVERY_S = 0.02
QUIET_S = 2.0  # between changes
LEAD_S = 0.3  # t0 is announced this far ahead, so that every member knows it before
KIP848_DEFAULT_HB_MS = 5000
CLASSIC_DEFAULT_HB_MS = 3000  # librdkafka's heartbeat.interval.ms
SESSION_MS = 45000  # both protocols' default session
COMMON = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 4,
    "num.partitions": 1,
    "auto.create.topics.enable": "false",
}

MEMBER = r"""
import math, os, sys, threading, time
import confluent_kafka as ck
bootstrap, group, topic, protocol, hb_ms, session_ms, name, subscribe_now = sys.argv[1:9]
out_lock = threading.Lock()
def say(*words):
    with out_lock:
        sys.stdout.write(" ".join(str(w) for w in words) + "\n"); sys.stdout.flush()
conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
        "auto.offset.reset": "latest", "enable.auto.commit": True}
if protocol == "consumer":
    conf["group.protocol"] = "consumer"
else:
    conf.update({"group.protocol": "classic", "heartbeat.interval.ms": int(hb_ms),
                 "session.timeout.ms": int(session_ms),
                 "partition.assignment.strategy": "range" if protocol == "eager" else "cooperative-sticky"})
if os.environ.get("GROUP_BENCH_DEBUG"):
    conf["debug"] = os.environ["GROUP_BENCH_DEBUG"]
c = ck.Consumer(conf)
cmd = {"mark_ms": None, "subscribe_at": None, "close_at": None, "eof": False}
def commands():
    for line in sys.stdin:
        w = line.split()
        if w[0] == "MARK":
            cmd["mark_ms"] = math.ceil(float(w[1]) * 1000)
        elif w[0] == "SUBSCRIBE_AT":
            cmd["subscribe_at"] = float(w[1])
        elif w[0] == "CLOSE_AT":
            cmd["close_at"] = float(w[1])
    cmd["eof"] = True
threading.Thread(target=commands, daemon=True).start()
owned = set()
seen = set()  # partitions with a record stamped at or after the mark, since assigned
def own(parts, add):
    global owned
    ps = {p.partition for p in parts}
    if protocol == "eager":
        owned = set(ps) if add else set()
    else:
        owned = owned | ps if add else owned - ps
    if add:
        seen.difference_update(ps)
    say("OWN", repr(time.time()), ",".join(map(str, sorted(owned))) or "-")
def subscribe():
    say("SUBSCRIBED", repr(time.time()))
    c.subscribe([topic], on_assign=lambda _c, ps: own(ps, True), on_revoke=lambda _c, ps: own(ps, False),
                on_lost=lambda _c, ps: own(ps, False))
say("READY", repr(time.time()))
subscribed = False
if subscribe_now == "1":
    subscribe(); subscribed = True
mark = None
deadline = time.monotonic() + 3600
while not cmd["eof"] and time.monotonic() < deadline:
    now = time.time()
    if not subscribed:
        at = cmd["subscribe_at"]
        if at is None or now < at:
            time.sleep(0.001 if at is not None and at - now < 0.01 else 0.005); continue
        subscribe(); subscribed = True
    at = cmd["close_at"]
    if at is not None:
        if now >= at:
            say("CLOSING", repr(time.time()))
            c.close()
            say("CLOSED", repr(time.time()))
            sys.exit(0)
        timeout = min(0.05, max(0.0, at - now))
    else:
        timeout = 0.05
    if cmd["mark_ms"] != mark:
        mark = cmd["mark_ms"]; seen.clear()
    for msg in c.consume(500, timeout):
        if msg.error() or mark is None:
            continue
        p = msg.partition()
        if p not in seen and msg.timestamp()[1] >= mark and p in owned:
            seen.add(p)
            say("SEEN", repr(time.time()), p, msg.timestamp()[1])
c.close()
"""

PRODUCER = r"""
import sys, threading, time
import confluent_kafka as ck
bootstrap, topic, rate, parts = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1})
eof = []
threading.Thread(target=lambda: (sys.stdin.read(), eof.append(1)), daemon=True).start()
value = b"x" * 100
i, t_next, tick = 0, time.monotonic(), 0.01
per_tick = max(1, rate // 100)
deadline = time.monotonic() + 7200
while not eof and time.monotonic() < deadline:
    for _ in range(per_tick):
        p.produce(topic, value, partition=i % parts); i += 1
    p.poll(0)
    t_next += tick
    time.sleep(max(0.0, t_next - time.monotonic()))
p.flush(10)
"""

_children: list[subprocess.Popen] = []


def _cleanup() -> None:
    for p in _children:
        if p.poll() is None:
            p.kill()
    for p in _children:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass


def spawn(code: str, *argv, stderr_to: Path | None = None) -> subprocess.Popen:
    err = open(stderr_to, "ab") if stderr_to else subprocess.DEVNULL
    p = subprocess.Popen(
        [sys.executable, "-c", code, *map(str, argv)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        start_new_session=True,
    )
    _children.append(p)
    return p


class Member:
    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str, hb_ms: int, name: str, now: bool):
        self.name = name
        self.lock = threading.Lock()
        self.events: list[tuple[str, float, str]] = []
        debug = os.environ.get("GROUP_BENCH_DEBUG_DIR")  # with GROUP_BENCH_DEBUG=cgrp,fetch...
        self.proc = spawn(
            MEMBER,
            bootstrap,
            group,
            topic,
            protocol,
            hb_ms,
            SESSION_MS,
            name,
            "1" if now else "0",
            stderr_to=Path(debug) / f"{group}-{name}.log" if debug else None,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            w = line.split()
            if len(w) >= 2:
                with self.lock:
                    self.events.append((w[0], float(w[1]), " ".join(w[2:])))

    def snapshot(self) -> list[tuple[str, float, str]]:
        with self.lock:
            return list(self.events)

    def first(self, kind: str) -> float | None:
        return next((t for k, t, _ in self.snapshot() if k == kind), None)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()  # it closes its consumer and exits
            except BrokenPipeError:
                pass

    def reap(self, timeout: float = 30) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def wait_for(predicate, what: str, timeout: float = WAIT_S, interval: float = 0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"no {what} within {timeout} s")


def parts_of(text: str) -> frozenset[int]:
    return frozenset() if text in ("", "-") else frozenset(int(x) for x in text.split(","))


def clients_settled(members: list[Member], t0: float, mark: float):
    """(time, {name: partitions}) once (1) and (2) of the docstring hold from the
    callbacks and SEEN lines so far, else None."""
    owned: dict[str, frozenset[int]] = {}
    mark_ms = math.ceil(mark * 1000)
    last_own = t0
    ready = []
    for m in members:
        ev = m.snapshot()
        state: frozenset[int] = frozenset()
        since: dict[int, float] = {}  # partition -> when this member was last given it
        seen: dict[int, float] = {}  # partition -> first SEEN after that
        stamped: dict[int, float] = {}  # partition -> that record's CreateTime
        any_own = False
        for kind, t, arg in ev:
            if kind == "OWN":
                new = parts_of(arg)
                for p in new - state:
                    since[p] = t
                    seen.pop(p, None)
                state, any_own = new, True
                if t >= t0:
                    last_own = max(last_own, t)
            elif kind == "SEEN":
                p_text, ts = arg.split()
                p = int(p_text)
                if int(ts) < mark_ms:  # a line about an earlier mark
                    continue
                if p not in seen and t >= since.get(p, 0.0):
                    seen[p] = t
                    stamped[p] = int(ts) / 1000
        if not any_own or not state:
            return None
        owned[m.name] = state
        for p in state:
            if p not in seen:
                return None
            ready.append((seen[p], since.get(p, t0), p, m.name, stamped[p]))
    every = [p for ps in owned.values() for p in ps]
    if sorted(every) != list(range(PARTITIONS)):
        return None
    sizes = [len(ps) for ps in owned.values()]
    if max(sizes) - min(sizes) > 1:
        return None
    slowest = max(ready)
    lag = statistics.median(r[0] - r[4] for r in ready)  # append to consumption, all partitions
    return max(last_own, slowest[0]), owned, last_own, slowest, lag


class Describer:
    """Polls the broker's view of the group (a thread) from start() until stop()."""

    def __init__(self, bootstrap: str, group: str, protocol: str) -> None:
        self.bootstrap, self.group, self.protocol = bootstrap, group, protocol
        self.views: list[tuple[float, str, dict[str, frozenset[int]]]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Describer:
        self._t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._t.join(10)

    def _run(self) -> None:
        from broker.client import BrokerConnection

        host, port = self.bootstrap.rsplit(":", 1)
        try:
            with BrokerConnection(host, int(port), timeout=10) as conn:
                while not self._stop.is_set():
                    view = self._describe(conn)
                    self.views.append((time.time(), *view))
                    self._stop.wait(DESCRIBE_EVERY_S)
        except BaseException as exc:  # reported by the waiter
            self.error = exc

    def _describe(self, conn) -> tuple[str, dict[str, frozenset[int]]]:
        if self.protocol == "consumer":
            from broker.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest

            g = conn.request(
                ConsumerGroupDescribeRequest(group_ids=[self.group], include_authorized_operations=False)
            ).groups[0]
            if g.error_code:
                return f"error {g.error_code}", {}
            return g.group_state, {
                m.client_id: frozenset(p for tp in m.assignment.topic_partitions for p in tp.partitions)
                for m in g.members
            }
        from broker.protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
        from broker.protocol.messages.describe_groups import DescribeGroupsRequest

        g = conn.request(DescribeGroupsRequest(groups=[self.group])).groups[0]
        if g.error_code:
            return f"error {g.error_code}", {}
        out = {}
        for m in g.members:
            parts: frozenset[int] = frozenset()
            if m.member_assignment:
                a, _ = ConsumerProtocolAssignment.decode_versioned(bytes(m.member_assignment))
                parts = frozenset(p for tp in a.assigned_partitions for p in tp.partitions)
            out[m.client_id] = parts
        return g.group_state, out

    def agrees(self, owned: dict[str, frozenset[int]], t0: float) -> float | None:
        """The first answer since t0 showing the group Stable with exactly `owned`."""
        if self.error is not None:
            raise RuntimeError(f"describe failed: {self.error!r}")
        for t, state, view in list(self.views):
            if t >= t0 and state == "Stable" and view == owned:
                return t
        return None


def settle(bootstrap: str, group: str, protocol: str, members: list[Member], t0: float, mark: float) -> dict:
    """Waits until the group of `members` is stable again with records flowing (the
    docstring's 1-3) and has stayed so for SETTLE_S; returns the times from t0."""
    d = Describer(bootstrap, group, protocol).start()
    try:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            got = clients_settled(members, t0, mark)
            if got is not None:
                t_clients, owned, last_own, slowest, lag = got
                t_broker = d.agrees(owned, t0)
                if t_broker is not None:
                    t_end = max(t_clients, t_broker)
                    if time.time() >= t_end + SETTLE_S:
                        later = [t for m in members for k, t, _ in m.snapshot() if k == "OWN" and t > t_clients]
                        if not later:
                            return {
                                "total": t_end - t0,
                                # the assignment alone: the last callback, the broker agreeing
                                "assigned": max(last_own, t_broker) - t0,
                                "clients": t_clients - t0,
                                "describe": t_broker - t0,
                                "last_callback": last_own - t0,
                                # the partition whose first new record came last: when its
                                # owner was given it, when that record came
                                "slowest": (slowest[3], slowest[2], slowest[1] - t0, slowest[0] - t0),
                                # that record: from its CreateTime to its consumption
                                "slowest_lag": slowest[0] - slowest[4],
                                "median_lag": lag,
                            }
            time.sleep(0.02)
        last = d.views[-1] if d.views else None
        raise TimeoutError(
            f"group {group} not settled within {WAIT_S} s; clients: {clients_settled(members, t0, mark)}, "
            f"broker's last view: {last}; members' last events: "
            + "; ".join(f"{m.name}: {m.snapshot()[-3:]}" for m in members)
        )
    finally:
        d.stop()


def group_run(
    bootstrap: str, topic: str, protocol: str, hb_ms: int, cycles: int, tag: str, rng: random.Random
) -> list[dict]:
    """One group of MEMBERS, then `cycles` joins and leaves. Each change comes QUIET_S and
    a random part of a heartbeat interval after the group settled: the classic members'
    heartbeats are in step (each rebalance restarts them all at once), so a fixed pause
    would meet them at the same phase every time."""
    group = f"g-{protocol}-{tag}-{time.time_ns()}"
    members: list[Member] = []
    everyone: list[Member] = []
    rows = []
    try:
        t0 = time.time()
        for i in range(MEMBERS):
            m = Member(bootstrap, group, topic, protocol, hb_ms, f"m{i}", now=True)
            members.append(m)
            everyone.append(m)
        for m in members:
            m.send(f"MARK {t0!r}")
        formed = settle(bootstrap, group, protocol, members, t0, t0)
        print(f"  {protocol}: group of {MEMBERS} formed in {formed['total']:.2f} s", file=sys.stderr, flush=True)
        for c in range(cycles):
            time.sleep(QUIET_S + rng.uniform(0, hb_ms / 1000))
            # join: the 11th member's consumer exists before t0; t0 is its subscribe()
            joiner = Member(bootstrap, group, topic, protocol, hb_ms, f"j{c}", now=False)
            everyone.append(joiner)
            wait_for(partial(joiner.first, "READY"), f"member {joiner.name} ready", 60)
            at = time.time() + LEAD_S
            for m in [*members, joiner]:
                m.send(f"MARK {at!r}")
            joiner.send(f"SUBSCRIBE_AT {at!r}")
            members.append(joiner)
            t0 = wait_for(partial(joiner.first, "SUBSCRIBED"), "subscribe", 30)
            r = settle(bootstrap, group, protocol, members, t0, at)
            rows.append({"change": "join", **r})
            print(f"  {protocol} join: {r}", file=sys.stderr, flush=True)
            time.sleep(QUIET_S + rng.uniform(0, hb_ms / 1000))
            # leave: the oldest member's close(); t0 is that call
            leaver = members.pop(0)
            at = time.time() + LEAD_S
            for m in [*members, leaver]:
                m.send(f"MARK {at!r}")
            leaver.send(f"CLOSE_AT {at!r}")
            t0 = wait_for(partial(leaver.first, "CLOSING"), "close", 30)
            r = settle(bootstrap, group, protocol, members, t0, at)
            closed = leaver.first("CLOSED")
            rows.append({"change": "leave", **r, "close_call": (closed - t0) if closed else None})
            print(f"  {protocol} leave: {r}", file=sys.stderr, flush=True)
            leaver.reap()
    finally:
        for m in everyone:
            m.stop()
        for m in everyone:
            m.reap()
    return rows


def kafka_version() -> str:
    """The version of the jars `make testdeps` fetched (tests/jvm/pom.xml's pin)."""
    from tests.support.kafka_tools import KAFKA_LIBS

    for jar in sorted(KAFKA_LIBS.glob("kafka-clients-*.jar")):
        return jar.name[len("kafka-clients-") : -len(".jar")]
    return "(jars missing: make testdeps)"


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def make_broker(kind: str, root: Path, hb_ms: int | None):
    cfg = dict(COMMON)
    if hb_ms is not None:
        cfg["group.consumer.heartbeat.interval.ms"] = hb_ms
        # both brokers refuse a default below its bound (Kafka's 5 s minimum)
        cfg["group.consumer.min.heartbeat.interval.ms"] = min(hb_ms, KIP848_DEFAULT_HB_MS)
    if kind == "kafka":
        return KafkaBroker(root / "kafka", config=cfg, jvm_flags=KAFKA_JVM_FLAGS)
    return BrokerProcess(root / "kbroker" / "data", config=cfg, log_level="warning", event_loop="auto")


def create_topic(bootstrap: str, topic: str) -> None:
    from broker.client import Cluster

    with Cluster(bootstrap) as c:
        # a record's timestamp is when the broker appended it: "a record written after the
        # change" does not count the producer's own queueing
        c.create_topic(topic, PARTITIONS, 1, configs={"message.timestamp.type": "LogAppendTime"})
        c.topic(topic, wait_s=30)


def broker_turn(kind: str, args, root: Path, setting: str, round_no: int) -> list[dict]:
    hb = None if setting == "default" else args.short_ms
    shutil.rmtree(root, ignore_errors=True)
    b = make_broker(kind, root, hb)
    load_before = loadavg()
    mine = os.sched_getaffinity(0)
    if args.pinned:
        os.sched_setaffinity(0, {BROKER_CORE})  # the broker inherits it from this thread
    try:
        b.start(timeout=180)
    finally:
        if args.pinned:
            os.sched_setaffinity(0, {CLIENT_CORE})  # this script and everything it starts
    rows = []
    producer = None
    try:
        topic = "absorb"
        create_topic(b.bootstrap, topic)
        producer = spawn(PRODUCER, b.bootstrap, topic, args.rate, PARTITIONS)
        time.sleep(2.0)
        for protocol in args.protocols:
            classic_hb = args.short_ms if hb is not None else CLASSIC_DEFAULT_HB_MS
            member_hb = classic_hb if protocol != "consumer" else (hb or KIP848_DEFAULT_HB_MS)
            for r in group_run(b.bootstrap, topic, protocol, member_hb, args.cycles, f"{kind}{round_no}", args.rng):
                rows.append(
                    {
                        "broker": kind,
                        "heartbeats": setting,
                        "hb_ms": member_hb,
                        "protocol": protocol,
                        "round": round_no,
                        **r,
                    }
                )
    finally:
        if producer is not None and producer.poll() is None:
            assert producer.stdin is not None
            producer.stdin.close()
            try:
                producer.wait(20)
            except subprocess.TimeoutExpired:
                producer.kill()
        try:
            b.stop()
        except RuntimeError:
            b.kill()
        os.sched_setaffinity(0, mine)
    load_after = loadavg()
    for row in rows:
        row["load_before"], row["load_after"] = load_before, load_after
    print(f"{kind} ({setting} heartbeats, round {round_no + 1}): load {load_before} -> {load_after}", flush=True)
    return rows


def report(rows: list[dict], args) -> str:
    out = []
    for setting in args.heartbeats:
        sel = [r for r in rows if r["heartbeats"] == setting]
        if not sel:
            continue
        if setting == "default":
            what = (
                f"defaults: KIP-848 heartbeat {KIP848_DEFAULT_HB_MS} ms (the broker's), classic "
                f"heartbeat.interval.ms {CLASSIC_DEFAULT_HB_MS} ms (librdkafka's)"
            )
        else:
            what = f"short: every heartbeat {args.short_ms} ms, on both brokers and the classic members"
        n = len({r["round"] for r in sel})
        out.append(
            f"### Heartbeats {what}; seconds from the change to stable with records flowing, median "
            f"(min-max) over {n} round(s) x {args.cycles} cycle(s) / median of the assignment alone\n"
        )
        out.append("| change | protocol | kbroker | Apache Kafka | kbroker / Kafka |")
        out.append("|---|---|---|---|---|")
        for change in ("join", "leave"):
            for protocol in args.protocols:
                cells, med = [], {}
                for kind in ("kbroker", "kafka"):
                    mine = [
                        r for r in sel if r["broker"] == kind and r["protocol"] == protocol and r["change"] == change
                    ]
                    if mine:
                        vs = [r["total"] for r in mine]
                        med[kind] = statistics.median(vs)
                        assigned = statistics.median(r["assigned"] for r in mine)
                        cells.append(f"{med[kind]:.2f} ({min(vs):.2f}-{max(vs):.2f}) / {assigned:.2f}")
                    else:
                        cells.append("-")
                ratio = f"{med['kbroker'] / med['kafka']:.2f}x" if len(med) == 2 and med["kafka"] else "-"
                out.append(f"| {change} | {protocol} | {cells[0]} | {cells[1]} | {ratio} |")
        out.append("")
    return "\n".join(out)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="broker starts of each (alternating Kafka, kbroker)")
    ap.add_argument("--cycles", type=int, default=2, help="join+leave cycles per group")
    ap.add_argument("--heartbeats", default="default,short", help="default,short (see the docstring)")
    ap.add_argument("--short-ms", type=int, default=500, help="the short heartbeat interval")
    ap.add_argument("--protocols", default="consumer,cooperative,eager")
    ap.add_argument("--brokers", default="kafka,kbroker")
    ap.add_argument("--rate", type=int, default=1000, help="records/s the producer writes")
    ap.add_argument("--no-pin", dest="pinned", action="store_false", help="no taskset pinning")
    ap.add_argument("--seed", type=int, help="of the random pauses before each change")
    ap.add_argument("--json", help="every measurement to this file")
    ap.add_argument("--report", metavar="JSON", help="print the tables of an earlier run's --json, run nothing")
    args = ap.parse_args(argv)
    args.heartbeats = [x for x in args.heartbeats.split(",") if x]
    args.protocols = [x for x in args.protocols.split(",") if x]
    args.brokers = [x for x in args.brokers.split(",") if x]
    bad = set(args.heartbeats) - {"default", "short"} or set(args.protocols) - {"consumer", "cooperative", "eager"}
    if bad or set(args.brokers) - {"kafka", "kbroker"}:
        ap.error(f"unknown choice in {args.heartbeats} / {args.protocols} / {args.brokers}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        args.cycles = max(
            sum(
                1
                for r in saved
                if r["round"] == 0
                and r["broker"] == b
                and r["protocol"] == p
                and r["heartbeats"] == h
                and r["change"] == "join"
            )
            for b in args.brokers
            for p in args.protocols
            for h in args.heartbeats
        )
        print(report(saved, args))
        return 0
    import confluent_kafka

    if confluent_kafka.libversion()[1] < 0x020C0000:
        sys.exit(f"KIP-848 members need librdkafka >= 2.12, not {confluent_kafka.libversion()[0]}")
    if args.pinned and not {BROKER_CORE, CLIENT_CORE} <= os.sched_getaffinity(0):
        sys.exit(f"pinning needs cores {BROKER_CORE} and {CLIENT_CORE}")
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    args.rng = random.Random(seed)
    print(f"seed {seed} (--seed to repeat the pauses before each change)", flush=True)
    atexit.register(_cleanup)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    print(
        f"confluent-kafka {confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]}), "
        f"Apache Kafka {kafka_version()}, {MEMBERS} members (+1 joining) on {PARTITIONS} partitions, "
        f"producer {args.rate} records/s, "
        + (f"broker on core {BROKER_CORE}, clients on core {CLIENT_CORE}" if args.pinned else "unpinned")
        + f"; load {loadavg()}",
        flush=True,
    )
    root = Path(tempfile.mkdtemp(prefix="group-protocols-"))
    rows: list[dict] = []
    try:
        for r in range(args.rounds):
            for setting in args.heartbeats:
                for kind in args.brokers:
                    rows += broker_turn(kind, args, root, setting, r)
                    if args.json:
                        Path(args.json).write_text(json.dumps(rows, indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load at the end {loadavg()}")
    print(report(rows, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
