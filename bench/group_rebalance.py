"""Consumer-group rebalance latency with real confluent-kafka members (each its own process)
against a real broker on loopback.

    .venv/bin/python bench/group_rebalance.py [--repeat 3] [--session-ms 3000]
        [--heartbeat-ms 500] [--initial-delay-ms 100] [--max-poll-ms 30000]

Starts `broker serve` on a free port (data in a temp dir) and measures, per repetition,
on a fresh group over a 6-partition topic:

- cold join: one member subscribes to a new group -> it owns every partition (includes
  group.initial.rebalance.delay.ms, the coordinator's wait for more members);
- join of a third member into a Stable group of two -> all three own their new
  partitions (the two old members learn of the rebalance from their next heartbeat);
- kill -9 of one of three members -> the two survivors own all six partitions (the
  coordinator notices after session.timeout.ms; the survivors rejoin at their next
  heartbeat).

Two views of each: "client" = the latest on_assign timestamp of the members concerned
(what the application sees), "broker" = the first DescribeGroups (polled every 10 ms) that
shows the group Stable with the expected members and assignment. The members' rebalance
timeout is max.poll.interval.ms (librdkafka), only an upper bound here. Client and broker
share the machine's cores. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.support.broker_proc import BrokerProcess  # noqa: E402

PARTITIONS = 6
WAIT_S = 60

MEMBER = r"""
import os, signal, sys, time
import confluent_kafka as ck
bootstrap, group, topic, session_ms, heartbeat_ms, max_poll_ms, client_id = sys.argv[1:8]
def say(*words):
    sys.stdout.write(" ".join(str(w) for w in words) + "\n"); sys.stdout.flush()
c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                 "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": int(heartbeat_ms),
                 "max.poll.interval.ms": int(max_poll_ms), "enable.auto.commit": False,
                 "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
def assigned(consumer, parts):
    say("ASSIGN", repr(time.time()), ",".join(str(p.partition) for p in parts) or "-")
say("SUBSCRIBE", repr(time.time()))
c.subscribe([topic], on_assign=assigned)
deadline = time.monotonic() + 600
while not stop and time.monotonic() < deadline:
    c.poll(0.05)
c.close()
say("CLOSED", repr(time.time()))
"""


class Member:
    def __init__(self, args, bootstrap, group, topic, client_id):
        self.client_id = client_id
        self.events: list[tuple[str, float, str]] = []
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                MEMBER,
                bootstrap,
                group,
                topic,
                str(args.session_ms),
                str(args.heartbeat_ms),
                str(args.max_poll_ms),
                client_id,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self):
        for line in self.proc.stdout:
            parts = line.split()
            if len(parts) >= 2:
                self.events.append((parts[0], float(parts[1]), parts[2] if len(parts) > 2 else ""))

    def subscribed_at(self) -> float | None:
        return next((t for k, t, _ in self.events if k == "SUBSCRIBE"), None)

    def assignment_after(self, t0: float) -> tuple[float, set[int]] | None:
        """The latest assignment made after t0: (when, partitions)."""
        got = [(t, p) for k, t, p in self.events if k == "ASSIGN" and t >= t0]
        if not got:
            return None
        t, parts = got[-1]
        return t, set() if parts == "-" else {int(x) for x in parts.split(",")}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill9(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def reap(self):
        try:
            self.proc.wait(15)
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


def broker_stable(conn, group: str, members: int):
    """time.time() when DescribeGroups shows `members` members, Stable, owning every partition."""
    from broker.protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
    from broker.protocol.messages.describe_groups import DescribeGroupsRequest

    g = conn.request(DescribeGroupsRequest(groups=[group])).groups[0]
    now = time.time()
    if g.group_state != "Stable" or len(g.members) != members:
        return None
    owned = []
    for m in g.members:
        if not m.member_assignment:
            return None
        a, _ = ConsumerProtocolAssignment.decode_versioned(bytes(m.member_assignment))
        owned += [p for tp in a.assigned_partitions for p in tp.partitions]
    return now if sorted(owned) == list(range(PARTITIONS)) else None


def clients_own_all(members: list[Member], t0: float):
    """Latest assign time once every member was assigned after t0 and together they own
    every partition exactly once."""
    got = [m.assignment_after(t0) for m in members]
    if any(g is None for g in got):
        return None
    parts = [p for _, ps in got for p in ps]
    if sorted(parts) != list(range(PARTITIONS)):
        return None
    return max(t for t, _ in got)


def one_round(args, b, conn, topic, round_no):
    group = f"bench-{round_no}-{time.time_ns()}"
    out = {}
    members = []
    try:
        # cold join
        a = Member(args, b.bootstrap, group, topic, "m0")
        members.append(a)
        t0 = wait_for(a.subscribed_at, "subscribe")
        out["cold join: client"] = wait_for(lambda: clients_own_all([a], t0), "cold join") - t0
        out["cold join: broker"] = wait_for(lambda: broker_stable(conn, group, 1), "stable group of 1") - t0
        # second member (not measured), then a third one joining a Stable group of two
        m1 = Member(args, b.bootstrap, group, topic, "m1")
        members.append(m1)
        wait_for(lambda: broker_stable(conn, group, 2), "stable group of 2")
        time.sleep(1.0)
        m2 = Member(args, b.bootstrap, group, topic, "m2")
        members.append(m2)
        t0 = wait_for(m2.subscribed_at, "subscribe")
        out["3rd member join: client"] = wait_for(lambda: clients_own_all(members, t0), "join of a third") - t0
        out["3rd member join: broker"] = wait_for(lambda: broker_stable(conn, group, 3), "stable group of 3") - t0
        time.sleep(1.0)
        # kill -9 one of the three
        t0 = time.time()
        m1.kill9()
        survivors = [a, m2]
        out["kill -9 -> survivors own all: client"] = (
            wait_for(lambda: clients_own_all(survivors, t0), "survivors' assignment") - t0
        )
        out["kill -9 -> survivors own all: broker"] = (
            wait_for(lambda: broker_stable(conn, group, 2), "stable group of 2 survivors") - t0
        )
    finally:
        for m in members:
            m.stop()
        for m in members:
            m.reap()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--session-ms", type=int, default=3000, help="members' session.timeout.ms")
    ap.add_argument("--heartbeat-ms", type=int, default=500, help="members' heartbeat.interval.ms")
    ap.add_argument(
        "--max-poll-ms", type=int, default=30000, help="members' max.poll.interval.ms (= their rebalance timeout)"
    )
    ap.add_argument("--initial-delay-ms", type=int, default=100, help="broker's group.initial.rebalance.delay.ms")
    args = ap.parse_args()
    import confluent_kafka

    from broker.client import BrokerConnection, Cluster

    data = tempfile.mkdtemp(prefix="kbroker-rebalance-")
    config = {
        "group.initial.rebalance.delay.ms": args.initial_delay_ms,
        "group.min.session.timeout.ms": min(1000, args.session_ms),
        "offsets.topic.num.partitions": 1,
    }
    print(
        f"confluent-kafka {confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]}), "
        f"{os.cpu_count()} cores shared by broker and members"
    )
    print(
        f"broker: group.initial.rebalance.delay.ms={args.initial_delay_ms}; members: "
        f"session.timeout.ms={args.session_ms} heartbeat.interval.ms={args.heartbeat_ms} "
        f"max.poll.interval.ms={args.max_poll_ms}; topic of {PARTITIONS} partitions; eager range assignor"
    )
    results: dict[str, list[float]] = {}
    try:
        with BrokerProcess(os.path.join(data, "data"), config=config) as b:
            topic = "rebalance-bench"
            with Cluster(b.bootstrap) as c:
                c.create_topic(topic, PARTITIONS, 1)
                c.topic(topic, wait_s=10)
            host, port = b.bootstrap.rsplit(":", 1)
            with BrokerConnection(host, int(port)) as conn:
                for i in range(args.repeat):
                    for k, v in one_round(args, b, conn, topic, i).items():
                        results.setdefault(k, []).append(v)
                    print(f"round {i + 1}/{args.repeat} done", file=sys.stderr)
    finally:
        import shutil

        shutil.rmtree(data, ignore_errors=True)
    width = max(len(k) for k in results)
    print(f"{'measure':<{width}}  median     min     max   (seconds, {args.repeat} rounds)")
    for k, vs in results.items():
        print(f"{k:<{width}}  {statistics.median(vs):6.3f}  {min(vs):6.3f}  {max(vs):6.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
