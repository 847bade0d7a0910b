"""The test harness's BrokerProcess: a port it picked that another process takes before
the broker binds it (free ports and the ephemeral ports of outgoing connections come from
the same range) is not a failed test: the first start is retried on another port;
free_port never hands out a port twice; and a port it picked is not what another
process's bind to port 0 gets meanwhile (parallel test workers)."""

from __future__ import annotations

import socket

from broker.client import BrokerConnection
from tests.support.broker_proc import BrokerProcess


def test_a_port_taken_before_the_first_start_is_retried_on_another(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        b = BrokerProcess(tmp_path / "data")
        b.port = port  # as if taken right after free_port() chose it
        try:
            b.start()
            assert b.port != port
            assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in b.log_path.read_text()
            with BrokerConnection("127.0.0.1", b.port, timeout=5):
                pass
        finally:
            b.stop()


def test_a_port_the_test_chose_is_not_changed(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        b = BrokerProcess(tmp_path / "data", port=port)
        try:
            try:
                b.start()
            except RuntimeError as exc:
                assert "Address already in use" in str(exc)
            else:
                raise AssertionError("started on a taken port")
            assert b.port == port
        finally:
            b.kill()


def test_free_port_never_hands_out_a_port_twice(monkeypatch):
    # the kernel may give a just-closed port to the next bind: two brokers of one cluster
    # once got the same port so (the second could not listen, and its readiness check
    # reached the first, which answers as a broker does)
    from tests.support import ports

    handed = iter([41001, 41001, 41002, 41001, 41003])
    monkeypatch.setattr(ports, "reserved_port", lambda: next(handed))
    monkeypatch.setattr(ports, "_given", set(), raising=False)
    assert [ports.free_port() for _ in range(3)] == [41001, 41002, 41003]


def test_a_picked_port_is_not_what_another_process_picks_but_a_server_binds_it():
    # parallel test workers each pick ports, then start the servers that bind them: a
    # port one picked must not be what the other's plain bind to port 0 gets meanwhile
    # (a plain bind-and-close leaves it free: about 9 of these 5,000 binds would land on
    # the 50 ports, in an ephemeral range of 28,232)
    import subprocess
    import sys

    from broker.perf.local import free_port

    picked = {free_port() for _ in range(50)}
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            """if True:
        import socket
        for _ in range(5000):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                print(s.getsockname()[1])
        """,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    got = {int(line) for line in other.stdout.split()}
    assert len(got) > 1000 and not picked & got
    port = min(picked)
    with socket.create_server(("127.0.0.1", port)) as server:  # SO_REUSEADDR, as every server here
        assert server.getsockname()[1] == port
