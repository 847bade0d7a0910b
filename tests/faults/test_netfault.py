"""tests/support/netfault.py: it cuts loopback addresses apart, refuses anything else,
and leaves no rule behind (heal, exit, a crash, a kill -9)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from tests.support import netfault
from tests.support.netfault import NetFaults


@pytest.fixture
def net(require_netfault):
    with NetFaults("unit") as n:
        yield n
    assert netfault.rules_of_this_process() == []


def _server(host: str) -> socket.socket:
    s = socket.create_server((host, 0))
    s.settimeout(5)
    return s


def _reaches(src: str, server: socket.socket, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection(server.getsockname(), timeout=timeout, source_address=(src, 0)):
            return True
    except OSError:
        return False


@pytest.mark.parametrize(
    "bad", ["10.0.0.1", "192.0.2.2", "0.0.0.0", "128.0.0.1", "::1", "localhost", "127.0.0.1/8", "127.0.0.0/8", ""]
)
def test_refuses_anything_outside_loopback(net, bad):
    with pytest.raises(ValueError):
        netfault.loopback(bad)
    for a, b in (("127.0.0.2", bad), (bad, "127.0.0.2")):
        with pytest.raises(ValueError):
            net.cut(a, b)
        with pytest.raises(ValueError):
            net.isolate(a, [b])
    with pytest.raises(ValueError):
        net.cut("127.0.0.2", "127.0.0.2")
    assert net.cuts == [] and netfault.rules_of_this_process() == []


def test_cut_drops_between_the_pair_only_and_heal_restores(net):
    a, b, c = "127.0.0.2", "127.0.0.3", "127.0.0.4"
    sb, sa = _server(b), _server(a)
    with sb, sa:
        assert _reaches(a, sb) and _reaches(b, sa)
        net.cut(a, b, both=False)  # a -> b only
        assert len(netfault.rules_of_this_process()) == 1
        assert not _reaches(a, sb)  # SYN dropped: a timeout, no reset
        assert _reaches(c, sb) and _reaches("127.0.0.1", sb)
        net.cut(a, b)  # now both ways
        assert len(netfault.rules_of_this_process()) == 2
        assert not _reaches(b, sa)
        net.heal(a, b)
        assert netfault.rules_of_this_process() == [] and net.cuts == []
        assert _reaches(a, sb) and _reaches(b, sa)


def test_an_established_connection_goes_silent(net):
    a, b = "127.0.0.2", "127.0.0.3"
    with _server(b) as sb, socket.create_connection(sb.getsockname(), timeout=2, source_address=(a, 0)) as c:
        peer, _ = sb.accept()
        with peer:
            peer.settimeout(1)
            c.sendall(b"x")
            assert peer.recv(1) == b"x"
            net.cut(a, b)
            c.sendall(b"y")
            with pytest.raises(socket.timeout):
                peer.recv(1)
            net.heal()
            peer.settimeout(10)
            assert peer.recv(1) == b"y"  # TCP retransmits once healed


def test_rules_go_at_exit_even_after_an_exception(require_netfault):
    script = textwrap.dedent("""
        import sys
        from tests.support.netfault import NetFaults
        n = NetFaults("exiting")
        n.cut("127.0.0.2", "127.0.0.3")
        print("cut", flush=True)
        raise SystemExit(3) if sys.argv[1] == "exit" else RuntimeError("boom")
    """)
    for how in ("exit", "raise"):
        r = subprocess.run([sys.executable, "-c", script, how], capture_output=True, text=True, timeout=60, cwd=_repo())
        assert "cut" in r.stdout and r.returncode != 0, r.stderr
        assert "exiting" not in _rules_text(), how


def test_rules_of_a_killed_process_are_swept_by_the_next(require_netfault):
    script = textwrap.dedent("""
        import time
        from tests.support.netfault import NetFaults
        n = NetFaults("killed")
        n.cut("127.0.0.2", "127.0.0.3")
        print("cut", flush=True)
        time.sleep(60)
    """)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=_repo())
    try:
        assert p.stdout.readline().strip() == "cut"
        assert "killed" in _rules_text()
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    assert netfault.sweep_stale() >= 2  # (both directions) what a process's first NetFaults does
    assert "killed" not in _rules_text()


def _repo() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _rules_text() -> str:
    deadline = time.monotonic() + 5
    out = ""
    while time.monotonic() < deadline:
        r = subprocess.run(["iptables", "-w", "5", "-S", netfault.CHAIN], capture_output=True, text=True, timeout=30)
        out = r.stdout
        if r.returncode == 0:
            break
    return out
