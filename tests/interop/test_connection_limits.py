"""Connection limits of a real broker process: the file descriptor limit (the accept loop
backs off instead of spinning), max.connections (new clients wait in the listen backlog),
max.connections.per.ip and its overrides (closed at once), connections.max.idle.ms (a
connection that sends nothing, e.g. a truncated frame, is closed).

Every wait is bounded; the CPU figure is a resource bound with a wide margin (a spinning
accept loop burns a whole core), not a speed measurement.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.protocol.messages.api_versions import ApiVersionsRequest
from tests.interop.helpers import API_VERSIONS, RawConnection, answered, raw_request
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_binary, require_module
from tests.support.long_poll_push import pushed_behind_long_polls
from tests.support.ports import free_port

pytestmark = pytest.mark.interop

ROOT = Path(__file__).resolve().parents[2]


class LimitedBroker(BrokerProcess):
    """A broker process started under `prlimit --nofile=N` (util-linux)."""

    def __init__(self, *args, nofile: int, **kw):
        super().__init__(*args, **kw)
        self.nofile = nofile

    def command(self) -> list[str]:
        return [
            require_binary("prlimit", "util-linux"),
            f"--nofile={self.nofile}:{self.nofile}",
            "--",
            *super().command(),
        ]


def silent_for(rc: RawConnection, seconds: float) -> bool:
    """True if the broker neither answers nor closes within `seconds`."""
    rc.sock.settimeout(seconds)
    try:
        rc.sock.recv(1, socket.MSG_PEEK)  # an answer's first byte, or b"" when closed
    except TimeoutError:
        return True
    except ConnectionResetError:
        pass
    return False


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def connect_from(source: str, port: int) -> RawConnection:
    rc = RawConnection.__new__(RawConnection)
    rc.sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    rc.buf = bytearray()
    return rc


def closed_at_once(rc: RawConnection) -> bool:
    """True when the broker closed the connection without reading a request."""
    try:
        return rc.read_frame(10) is None if rc.send(API_VERSIONS) else True
    finally:
        rc.close()


def test_the_accept_loop_backs_off_at_the_fd_limit_and_serves_when_fds_free_up(tmp_path):
    with LimitedBroker(tmp_path / "data", nofile=96) as b:
        held = []
        try:
            # more clients than descriptors: the rest wait in the listen backlog
            for _ in range(160):
                held.append(socket.create_connection(("127.0.0.1", b.port), timeout=10))
            time.sleep(0.5)
            before, t0 = cpu_seconds(b.pid), time.monotonic()
            time.sleep(3)
            share = (cpu_seconds(b.pid) - before) / (time.monotonic() - t0)
            assert share < 0.3, f"the broker burnt {share:.0%} of a core while at its fd limit"
        finally:
            for s in held:
                s.close()
        # the descriptors are back: a new client is served, soon
        with RawConnection(b.port) as rc:
            assert answered(rc, timeout=15)
        log = b.log_tail(2000)
        failures = [line for line in log.splitlines() if "accept" in line and "Too many open files" in line]
        assert 1 <= len(failures) <= 5, "\n".join(failures[:20])


def test_max_connections_holds_new_clients_in_the_backlog(tmp_path):
    with BrokerProcess(tmp_path / "data", config={"max.connections": 4}) as b:
        time.sleep(0.5)  # wait_ready's probe connection is gone
        first = [RawConnection(b.port) for _ in range(4)]
        try:
            for rc in first:
                assert answered(rc)
            waiting = RawConnection(b.port)  # the kernel completes the handshake
            assert waiting.send(API_VERSIONS)
            assert silent_for(waiting, 1.0), "a connection beyond max.connections was served"
            first.pop().close()
            assert waiting.read_frame(10) is not None, "the waiting client was not served once a slot freed"
            waiting.close()
        finally:
            for rc in first:
                rc.close()


def test_max_connections_per_ip_and_its_overrides(tmp_path):
    config = {"max.connections.per.ip": 2, "max.connections.per.ip.overrides": "127.0.0.2:4,localhost:3"}
    with BrokerProcess(tmp_path / "data", config=config) as b:
        time.sleep(0.5)
        for source, limit in (("127.0.0.1", 3), ("127.0.0.2", 4), ("127.0.0.3", 2)):
            kept = [connect_from(source, b.port) for _ in range(limit)]
            try:
                for rc in kept:
                    assert answered(rc), (source, limit)
                assert closed_at_once(connect_from(source, b.port)), f"{source}: connection {limit + 1} was served"
                kept.pop().close()
                time.sleep(0.2)
                again = connect_from(source, b.port)
                assert answered(again), f"{source}: a freed slot was not given back"
                kept.append(again)
            finally:
                for rc in kept:
                    rc.close()
        assert "max.connections.per.ip" in b.log_tail(200)


def test_idle_connections_are_closed_after_connections_max_idle_ms(tmp_path):
    with BrokerProcess(tmp_path / "data", config={"connections.max.idle.ms": 600}) as b:
        truncated = RawConnection(b.port)
        assert truncated.send(API_VERSIONS[:7])  # part of a frame, then nothing
        silent = RawConnection(b.port)
        busy = RawConnection(b.port)
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:  # a request every 200 ms: never idle
            assert answered(busy)
            time.sleep(0.2)
        for rc in (truncated, silent):
            assert rc.read_frame(10) is None, "an idle connection was not closed"
            rc.close()
        assert answered(busy)
        busy.close()


# ---------------------------------------------------------------------- requests behind a long poll


def test_frames_behind_a_long_poll_are_held_to_the_connections_bound(tmp_path):
    """Item: a READ-only client made the broker hold 20 frames of 20 MiB behind its long
    poll (+360 MiB). queued.max.request.bytes.per.connection (4 MiB by default) stops
    reading the connection instead, until the long poll is answered."""
    with BrokerProcess(tmp_path / "data") as b:
        grew = pushed_behind_long_polls(b, "behind-one", connections=1, frames_each=20)
    assert grew < 64 * 1024 * 1024, f"RSS grew by {grew / 2**20:.0f} MiB behind one long poll"


def test_queued_max_request_bytes_bounds_all_connections_together(tmp_path):
    """queued.max.request.bytes: eight connections, each allowed 1 GiB behind its long
    poll, hold no more than the broker-wide bound (64 MiB) and a frame or so beyond it."""
    config = {"queued.max.request.bytes": 64 * 1024 * 1024, "queued.max.request.bytes.per.connection": 1 << 30}
    with BrokerProcess(tmp_path / "data", config=config) as b:
        grew = pushed_behind_long_polls(b, "behind-eight", connections=8, frames_each=4)
    assert grew < (64 + 2 * 20 + 40) * 1024 * 1024, f"RSS grew by {grew / 2**20:.0f} MiB"


# ---------------------------------------------------------------------- connections that never authenticate

USERS = {"admin": "admin-secret", "alice": "alice-secret"}


def sasl_config(port: int, sasl_port: int, **extra) -> dict:
    """A PLAINTEXT listener (the harness's) and a SASL_PLAINTEXT one with PLAIN users."""
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
        + ";"
    )
    return {
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "num.partitions": 1,
        **extra,
    }


def sasl_client(port: int, user: str, **extra) -> dict:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
        "socket.timeout.ms": 20000,
        **extra,
    }


def test_a_connection_that_does_not_authenticate_in_time_is_closed(tmp_path):
    """connections.max.unauthenticated.ms: silent, stopped after its SASL handshake, or
    trickling a frame's bytes — closed once the time is up; an authenticated connection
    and a plaintext one stay."""
    from broker.client.connection import BrokerConnection
    from broker.protocol.messages.sasl_handshake import SaslHandshakeRequest
    from broker.security.listener import ClientSecurity

    port, sasl_port = free_port(), free_port()
    with BrokerProcess(
        tmp_path / "data",
        port=port,
        config=sasl_config(port, sasl_port, **{"connections.max.unauthenticated.ms": 1000}),
    ) as b:
        silent = RawConnection(sasl_port)
        handshook = RawConnection(sasl_port)
        assert handshook.send(raw_request(17, 1, 1, SaslHandshakeRequest(mechanism="PLAIN")))
        assert handshook.read_frame(5) is not None
        trickling = RawConnection(sasl_port)
        plaintext = RawConnection(b.port)
        security = ClientSecurity("SASL_PLAINTEXT", None, "PLAIN", "alice", USERS["alice"])
        with BrokerConnection("127.0.0.1", sasl_port, security=security) as authenticated:
            t0 = time.monotonic()
            for i in range(len(API_VERSIONS) - 1):  # a byte every 100 ms, never the last
                if not trickling.send(API_VERSIONS[i : i + 1]):
                    break
                time.sleep(0.1)
                if time.monotonic() - t0 > 2.5:
                    break
            for rc in (silent, handshook, trickling):
                assert rc.closed_by_broker(5), "a connection that never authenticated stayed open"
                rc.close()
            assert time.monotonic() - t0 < 8
            authenticated.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert answered(plaintext)
        plaintext.close()
        assert "authentication not completed within connections.max.unauthenticated.ms" in b.log_tail(200)


def run_flood(port: int, total: int, hold_s: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.interop.idle_flood", str(port), str(total), str(hold_s), "120"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    return proc


def test_twenty_thousand_unauthenticated_connections_leave_room_for_clients(tmp_path):
    """Item: 19,900 idle unauthenticated connections used the broker's descriptors up.
    Now at most max.connections.unauthenticated (half of the 4096 descriptors here) are
    open, a new one closing the oldest: through 20,000 of them, an authenticated
    librdkafka producer still produces and an admin still creates topics."""
    ck = require_module("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    port, sasl_port = free_port(), free_port()
    with LimitedBroker(tmp_path / "data", port=port, config=sasl_config(port, sasl_port), nofile=4096) as b:
        # the floods hold their connections until told to stop (at most 90 s): the clients
        # below must get in while every one of them is open
        floods = [run_flood(sasl_port, 10_000, 90.0) for _ in range(2)]
        try:
            for proc in floods:  # the flood is in: every connection opened
                assert proc.stdout is not None and proc.stdout.readline().strip() == "opened"
            producer = ck.Producer(sasl_client(sasl_port, "alice", **{"message.timeout.ms": 30000}))
            errors: list = []
            for i in range(200):
                producer.produce("flooded", b"v%d" % i, on_delivery=lambda e, m: errors.append(e) if e else None)
            assert producer.flush(30) == 0 and errors == []
            admin = AdminClient(sasl_client(sasl_port, "admin"))
            created = admin.create_topics(
                [NewTopic(f"made-in-the-flood-{i}", 3, 1) for i in range(3)], operation_timeout=20
            )
            for future in created.values():
                future.result(30)
            assert b.open_fds() <= 4096
            assert all(proc.poll() is None for proc in floods), "a flood ended before the clients were done"
            reports = []
            for proc in floods:
                out, _ = proc.communicate(input="", timeout=120)
                assert proc.returncode == 0, out
                reports.append(json.loads(out.strip().splitlines()[-1]))
        finally:
            for proc in floods:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        assert sum(r["opened"] for r in reports) == 20_000
        # the broker closed the oldest as new ones came (how many depends on how fast it
        # accepted: the others were the 2048 it holds, those in its listen backlog and
        # those whose SYN the kernel dropped from a full backlog, still being retried)
        assert sum(r["closed_by_broker"] for r in reports) > 2048, reports
        with RawConnection(b.port) as rc:
            assert answered(rc)
        assert "max.connections.unauthenticated (2048) reached" in b.log_tail(2000)


def test_a_request_that_runs_out_of_descriptors_is_answered_not_dropped(tmp_path):
    """Item: an admin's CreateTopics on an open connection hit EMFILE and the connection
    was closed. At the descriptor limit it is answered UNKNOWN_SERVER_ERROR with the
    reason, the connection stays, and the same request succeeds once descriptors free."""
    from broker.client.connection import BrokerConnection
    from broker.protocol.errors import ErrorCode
    from broker.protocol.messages.create_topics import CreateTopicsRequest as C

    with LimitedBroker(tmp_path / "data", nofile=128) as b:
        with BrokerConnection("127.0.0.1", b.port) as admin:
            held = []
            try:
                while b.open_fds() < 128 and len(held) < 400:  # the broker's descriptors, all taken
                    held.append(socket.create_connection(("127.0.0.1", b.port), timeout=10))
                    if len(held) % 16 == 0:
                        time.sleep(0.05)
                time.sleep(0.5)
                request = C(
                    topics=[C.CreatableTopic(name="at-the-limit", num_partitions=4, replication_factor=1)],
                    timeout_ms=10000,
                )
                answer = admin.request(request, timeout=20)
                assert [(t.name, t.error_code, t.error_message) for t in answer.topics] == [
                    ("at-the-limit", ErrorCode.UNKNOWN_SERVER_ERROR, "Too many open files")
                ]
            finally:
                for s in held:
                    s.close()
            time.sleep(1.0)
            answer = admin.request(request, timeout=20)  # the same connection, still open
            assert [(t.name, t.error_code) for t in answer.topics] == [("at-the-limit", 0)]
        assert "answered UNKNOWN_SERVER_ERROR" in b.log_tail(500)
