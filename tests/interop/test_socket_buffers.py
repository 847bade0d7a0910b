"""socket.send.buffer.bytes and socket.receive.buffer.bytes on a real broker process: the
buffers of the connection it accepted, as `ss -m` (iproute2) shows them from outside.

Linux doubles what SO_SNDBUF/SO_RCVBUF are given (the bookkeeping overhead), so a key of N
shows as 2N; -1 leaves the buffer to the kernel's autotuning (a size nobody set, which
grows with the connection's traffic).
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.interop.helpers import RawConnection, answered
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_binary
from tests.support.ports import free_port

pytestmark = pytest.mark.interop


def accepted_buffers(port: int) -> tuple[int, int]:
    """(receive, send) buffer of the one connection the broker accepted on `port`."""
    out = subprocess.run(
        [require_binary("ss", "iproute2"), "-tmnH", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    found = re.findall(r"skmem:\(r\d+,rb(\d+),t\d+,tb(\d+),", out)
    assert len(found) == 1, out
    rb, tb = found[0]
    return int(rb), int(tb)


def buffers_of(tmp_path, config: dict, log: list | None = None, port: int | None = None) -> tuple[int, int]:
    with BrokerProcess(tmp_path / "data", config=config, port=port) as b:
        rc = RawConnection(b.port)
        try:
            assert answered(rc)
            return accepted_buffers(b.port)
        finally:
            rc.close()
            if log is not None:
                log.append(b.log_tail(400))


def test_kafkas_send_buffer_by_default_and_the_kernels_receive_buffer(tmp_path):
    rb, tb = buffers_of(tmp_path, {})
    assert tb == 2 * 102400  # socket.send.buffer.bytes: Kafka's 102400
    with open("/proc/sys/net/ipv4/tcp_rmem") as f:
        initial_rb = int(f.read().split()[1])
    assert rb >= initial_rb  # -1: autotuned from tcp_rmem's initial size up


def test_both_keys_set_the_accepted_connections_buffers(tmp_path):
    rb, tb = buffers_of(tmp_path, {"socket.send.buffer.bytes": 50000, "socket.receive.buffer.bytes": 70000})
    assert (rb, tb) == (2 * 70000, 2 * 50000)


def test_minus_one_leaves_the_send_buffer_to_the_kernel(tmp_path):
    _, tb = buffers_of(tmp_path, {"socket.send.buffer.bytes": -1})
    assert tb != 2 * 102400


def test_a_buffer_above_the_kernels_cap_is_said_in_one_line(tmp_path):
    with open("/proc/sys/net/core/wmem_max") as f:
        wmem_max = int(f.read())
    log: list[str] = []
    _, tb = buffers_of(tmp_path, {"socket.send.buffer.bytes": wmem_max + 4096}, log)
    assert tb == 2 * wmem_max
    warned = [line for line in log[0].splitlines() if "socket.send.buffer.bytes" in line]
    assert len(warned) == 1 and "net.core.wmem_max" in warned[0] and str(wmem_max) in warned[0], log[0]


def test_a_receive_buffer_above_the_cap_is_said_once_for_all_listeners(tmp_path):
    """The receive buffer is set on each listening socket: two listeners, one warning."""
    with open("/proc/sys/net/core/rmem_max") as f:
        rmem_max = int(f.read())
    port, other = free_port(), free_port()
    config = {
        "socket.receive.buffer.bytes": rmem_max + 4096,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},OTHER://127.0.0.1:{other}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
    }
    log: list[str] = []
    rb, _ = buffers_of(tmp_path, config, log, port)
    assert rb == 2 * rmem_max
    warned = [line for line in log[0].splitlines() if "socket.receive.buffer.bytes" in line]
    assert len(warned) == 1 and "net.core.rmem_max" in warned[0] and str(rmem_max) in warned[0], log[0]
