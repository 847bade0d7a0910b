"""Free TCP ports on loopback."""

import socket

from broker.perf.local import free_port as reserved_port

#: every port free_port has handed out in this process
_given: set[int] = set()


def free_port() -> int:
    """A port free now, never one handed out before in this process: the kernel can give
    the same port to two binds in a row once the first is closed, and two brokers of one
    cluster got the same port so (the second could not listen, and its readiness check
    reached the first)."""
    while True:
        port = reserved_port()
        if port not in _given:
            _given.add(port)
            return port


def wait_port(host: str, port: int, timeout: float) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False
