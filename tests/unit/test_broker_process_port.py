"""The test harness's BrokerProcess: a port it picked that another process takes before
the broker binds it (free ports and the ephemeral ports of outgoing connections come from
the same range) is not a failed test: the first start is retried on another port; and
free_port never hands out a port twice."""
from __future__ import annotations

import socket
from types import SimpleNamespace

from broker.client import BrokerConnection
from tests.support.broker_proc import BrokerProcess


def test_a_port_taken_before_the_first_start_is_retried_on_another(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        b = BrokerProcess(tmp_path / "data")
        b.port = port                       # as if taken right after free_port() chose it
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

    class Socket:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def bind(self, addr):
            self.port = next(handed)

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(ports, "socket", SimpleNamespace(socket=Socket))
    monkeypatch.setattr(ports, "_given", set(), raising=False)
    assert [ports.free_port() for _ in range(3)] == [41001, 41002, 41003]
