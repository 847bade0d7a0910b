"""Connection limits of a real broker process: the file descriptor limit (the accept loop
backs off instead of spinning), max.connections (new clients wait in the listen backlog),
max.connections.per.ip and its overrides (closed at once), connections.max.idle.ms (a
connection that sends nothing, e.g. a truncated frame, is closed).

Every wait is bounded; the CPU figure is a resource bound with a wide margin (a spinning
accept loop burns a whole core), not a speed measurement.
"""
from __future__ import annotations

import os
import socket
import time

import pytest

from tests.interop.helpers import API_VERSIONS, RawConnection, answered
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_binary

pytestmark = pytest.mark.interop

class LimitedBroker(BrokerProcess):
    """A broker process started under `prlimit --nofile=N` (util-linux)."""

    def __init__(self, *args, nofile: int, **kw):
        super().__init__(*args, **kw)
        self.nofile = nofile

    def command(self) -> list[str]:
        return [require_binary("prlimit", "util-linux"), f"--nofile={self.nofile}:{self.nofile}", "--",
                *super().command()]


def silent_for(rc: RawConnection, seconds: float) -> bool:
    """True if the broker neither answers nor closes within `seconds`."""
    rc.sock.settimeout(seconds)
    try:
        rc.sock.recv(1, socket.MSG_PEEK)        # an answer's first byte, or b"" when closed
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
        time.sleep(0.5)                 # wait_ready's probe connection is gone
        first = [RawConnection(b.port) for _ in range(4)]
        try:
            for rc in first:
                assert answered(rc)
            waiting = RawConnection(b.port)       # the kernel completes the handshake
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
        assert truncated.send(API_VERSIONS[:7])        # part of a frame, then nothing
        silent = RawConnection(b.port)
        busy = RawConnection(b.port)
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:             # a request every 200 ms: never idle
            assert answered(busy)
            time.sleep(0.2)
        for rc in (truncated, silent):
            assert rc.read_frame(10) is None, "an idle connection was not closed"
            rc.close()
        assert answered(busy)
        busy.close()
