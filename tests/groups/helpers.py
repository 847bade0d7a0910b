"""Helpers of the consumer-group tests: broker-side views of a group through the
project's own protocol client (DescribeGroups, OffsetFetch, ListOffsets), a confluent
producer, bounded waits, and the member subprocesses (member_proc.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from broker.client import BrokerConnection, Cluster
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
from broker.protocol.messages.describe_groups import DescribeGroupsRequest
from broker.protocol.messages.find_coordinator import FindCoordinatorRequest
from broker.protocol.messages.offset_fetch import OffsetFetchRequest

ROOT = Path(__file__).resolve().parents[2]
MEMBER_PROC = Path(__file__).with_name("member_proc.py")

# Fast groups: a short initial rebalance delay, short session timeouts allowed.
GROUP_CONFIG = {
    "group.initial.rebalance.delay.ms": 100,
    "group.min.session.timeout.ms": 1000,
    "offsets.topic.num.partitions": 3,
    "num.partitions": 1,
}
SESSION_MS = 3000
HEARTBEAT_MS = 500
TIMEOUT_S = 60


def child_env() -> dict:
    """The environment of a child process: this checkout first on PYTHONPATH."""
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=str(ROOT) + (os.pathsep + path if path else ""))


class Timeout(AssertionError):
    pass


def wait_until(predicate, timeout: float, what: str, interval: float = 0.1):
    """Polls predicate() until it returns something truthy (returned); Timeout otherwise."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise Timeout(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def host_port(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


def connect(bootstrap: str) -> BrokerConnection:
    return BrokerConnection(*host_port(bootstrap), timeout=30)


def create_topic(bootstrap: str, topic: str, partitions: int, configs: dict | None = None) -> None:
    with Cluster(bootstrap) as c:
        c.create_topic(topic, partitions, 1, configs)
        c.topic(topic, wait_s=10)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    with Cluster(bootstrap) as c:
        return {p: off for p, (off, _) in c.list_offsets(topic, list(range(partitions)), -1).items()}


def find_coordinator(bootstrap: str, group: str) -> tuple[int, int, str, int]:
    """(error, node, host, port) of FindCoordinator v1 (key type group)."""
    with connect(bootstrap) as conn:
        r = conn.request(FindCoordinatorRequest(key=group, key_type=0), 1)
        return r.error_code, r.node_id, r.host, r.port


def describe(bootstrap: str, group: str) -> dict:
    """{"error", "state", "protocol_type", "protocol", "members": {member_id: {"client_id",
    "assignment": {topic: [partitions]}}}} from DescribeGroups."""
    with connect(bootstrap) as conn:
        g = conn.request(DescribeGroupsRequest(groups=[group])).groups[0]
    members = {}
    for m in g.members:
        assignment = {}
        if m.member_assignment:
            a, _ = ConsumerProtocolAssignment.decode_versioned(bytes(m.member_assignment))
            assignment = {tp.topic: sorted(tp.partitions) for tp in a.assigned_partitions}
        members[m.member_id] = {"client_id": m.client_id, "assignment": assignment}
    return {
        "error": g.error_code,
        "state": g.group_state,
        "protocol_type": g.protocol_type,
        "protocol": g.protocol_data,
        "members": members,
    }


def stable_assignment(bootstrap: str, group: str, topic: str, members: int):
    """{member_id: [partitions]} once the group is Stable with `members` members, else None."""
    d = describe(bootstrap, group)
    if d["state"] != "Stable" or len(d["members"]) != members:
        return None
    return {mid: m["assignment"].get(topic, []) for mid, m in d["members"].items()}


def committed(bootstrap: str, group: str, topics: dict[str, int] | None = None) -> dict[tuple[str, int], int]:
    """(topic, partition) -> committed offset (only partitions with a commit). topics:
    topic -> partition count to ask for, or None for every committed partition."""
    with connect(bootstrap) as conn:
        req_topics = (
            None
            if topics is None
            else [
                OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=list(range(n)))
                for t, n in topics.items()
            ]
        )
        r = conn.request(OffsetFetchRequest(group_id=group, topics=req_topics), 7)
    assert r.error_code == 0, ErrorCode(r.error_code).name
    out = {}
    for t in r.topics:
        for p in t.partitions:
            assert p.error_code == 0, (t.name, p.partition_index, ErrorCode(p.error_code).name)
            if p.committed_offset >= 0:
                out[(t.name, p.partition_index)] = p.committed_offset
    return out


def produce(
    bootstrap: str, topic: str, count: int, partitions: int, prefix: str = "m", start: int = 0
) -> dict[bytes, tuple[int, int]]:
    """Produces `count` messages round-robin over the partitions (value b"<prefix>-<i>");
    returns value -> (partition, offset) from the delivery reports."""
    import confluent_kafka as ck

    delivered: dict[bytes, tuple[int, int]] = {}
    errors = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered[msg.value()] = (msg.partition(), msg.offset())

    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": -1,
            "enable.idempotence": False,
            "batch.num.messages": 2000,
        }
    )
    for i in range(start, start + count):
        while True:
            try:
                p.produce(topic, value=f"{prefix}-{i}".encode(), partition=i % partitions, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(TIMEOUT_S) == 0, "messages left undelivered"
    assert not errors, errors[:3]
    assert len(delivered) == count
    return delivered


# ---------------------------------------------------------------------- member subprocesses


class Member:
    """A confluent-kafka group member in its own process (member_proc.py); its record of
    assignments, messages and commits is read back from `out`."""

    def __init__(
        self,
        workdir: Path,
        name: str,
        bootstrap: str,
        group: str,
        topic: str,
        *,
        session_timeout_ms: int = SESSION_MS,
        batch: int = 500,
        sleep_s: float = 0.0,
        max_seconds: float = 120,
        pause: bool = False,
        assignor: str | None = None,
        protocol: str = "classic",
    ):
        self.name = name
        self.out = workdir / f"{name}.out"
        self.stop_file = workdir / f"{name}.stop"
        self.pause_file = workdir / f"{name}.pause" if pause else None
        cmd = [
            sys.executable,
            str(MEMBER_PROC),
            "--bootstrap",
            bootstrap,
            "--group",
            group,
            "--topic",
            topic,
            "--out",
            str(self.out),
            "--stop",
            str(self.stop_file),
            "--client-id",
            name,
            "--session-timeout-ms",
            str(session_timeout_ms),
            "--heartbeat-ms",
            str(HEARTBEAT_MS),
            "--batch",
            str(batch),
            "--sleep",
            str(sleep_s),
            "--max-seconds",
            str(max_seconds),
        ]
        if self.pause_file is not None:
            cmd += ["--pause", str(self.pause_file)]
        if assignor is not None:
            cmd += ["--assignor", assignor]
        if protocol != "classic":
            cmd += ["--protocol", protocol]
        self.log_path = workdir / f"{name}.log"
        self.log = open(self.log_path, "wb")
        env = child_env()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)

    def lines(self) -> list[list[str]]:
        try:
            text = self.out.read_text()
        except FileNotFoundError:
            return []
        # a line cut by kill -9 has no newline yet: ignore it
        return [ln.split() for ln in text.split("\n")[:-1] if ln]

    def parse(self) -> dict:
        """{"assignments": [[p...]...], "revoked": [[p...]...], "messages": [(p, o, value)],
        "commits": {p: offset}, "failed": [(p, first, last)] (commits that failed),
        "errors": [...], "paused": bool, "done": bool}"""
        out = {
            "assignments": [],
            "revoked": [],
            "failed": [],
            "messages": [],
            "commits": {},
            "errors": [],
            "paused": False,
            "done": False,
        }
        for f in self.lines():
            kind = f[0]
            if kind == "A":
                out["assignments"].append(sorted(int(x) for x in f[1].split(",")) if len(f) > 1 else [])
            elif kind == "R":
                out["revoked"].append(sorted(int(x) for x in f[1].split(",")) if len(f) > 1 else [])
            elif kind == "M":
                out["messages"].append((int(f[1]), int(f[2]), f[3]))
            elif kind == "C":
                out["commits"][int(f[1])] = int(f[2])
            elif kind == "F":
                out["failed"].append((int(f[1]), int(f[2]), int(f[3])))
            elif kind == "E":
                out["errors"].append(" ".join(f[1:]))
            elif kind == "PAUSED":
                out["paused"] = True
            elif kind == "DONE":
                out["done"] = True
        return out

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        self.stop_file.touch()

    def pause(self) -> None:
        assert self.pause_file is not None
        self.pause_file.touch()

    def kill9(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def wait(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


def simple_commit(
    bootstrap: str,
    group: str,
    topic: str,
    offsets: dict[int, int],
    metadata: str = "",
    generation: int = -1,
    member_id: str = "",
    version: int | None = None,
) -> dict[int, int]:
    """OffsetCommit outside group management (generation -1, no member id) unless told
    otherwise; returns partition -> error code."""
    from broker.protocol.messages.offset_commit import OffsetCommitRequest as O

    req = O(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        topics=[
            O.OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    O.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_metadata=metadata)
                    for p, o in sorted(offsets.items())
                ],
            )
        ],
    )
    assert find_coordinator(bootstrap, group)[0] == 0  # as clients do (creates __consumer_offsets)
    with connect(bootstrap) as conn:
        r = conn.request(req, version)
    return {p.partition_index: p.error_code for t in r.topics for p in t.partitions}


def java_string_hash(s: str) -> int:
    """java.lang.String.hashCode (UTF-16 code units), signed 32-bit; checked against
    known Java values in the tests."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str, partitions: int) -> int:
    """Kafka: Utils.abs(group.hashCode) % partitions (Utils.abs(MIN_VALUE) == 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
