"""A client that pipelines COUNT Metadata requests on one connection as fast as the
socket takes them, reading every answer; run as its own process by test_fairness (so
its work competes with the broker for CPU, not with the measuring client for the GIL).

    python -m tests.interop.flood_client PORT COUNT MAX_SECONDS

Prints "started" once connected, then "answered N in S s" and exits 0 when all COUNT
answers came, 1 on a timeout or a closed connection.
"""

from __future__ import annotations

import socket
import sys
import threading
import time

from broker.protocol.messages.metadata import MetadataRequest
from tests.interop.helpers import raw_request


def main(port: int, count: int, max_seconds: float) -> int:
    frame = raw_request(3, 12, 1, MetadataRequest(topics=[]), client_id="flood")
    sock = socket.create_connection(("127.0.0.1", port), timeout=max_seconds)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print("started", flush=True)
    t0 = time.monotonic()
    sender = threading.Thread(target=sock.sendall, args=(frame * count,), daemon=True)
    sender.start()
    answered, buf = 0, bytearray()
    deadline = t0 + max_seconds
    while answered < count:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            data = sock.recv(1 << 20)
        except (TimeoutError, ConnectionError):
            data = b""
        if not data:
            print(f"answered {answered} of {count}", flush=True)
            return 1
        buf += data
        pos = 0
        while len(buf) - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big")
            if len(buf) - pos - 4 < size:
                break
            pos += 4 + size
            answered += 1
        del buf[:pos]
    print(f"answered {answered} in {time.monotonic() - t0:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
