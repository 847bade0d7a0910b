"""A TCP proxy between Kafka clients and one broker that loses answers on purpose.

    with FaultProxy(broker_port) as proxy:        # listens on proxy.port
        proxy.drop_answers(api_key=0, count=3)    # the next 3 Produce answers never arrive:
                                                  # the connection is cut instead
The broker must advertise the proxy's address (advertised.listeners), or clients would
reconnect to the broker directly after reading the metadata. Frames are parsed (size,
api key, correlation id) only to know which answer belongs to which request; the bytes
pass through unchanged. Threads, bounded: everything stops at close().
"""

from __future__ import annotations

import socket
import struct
import threading

from tests.support.ports import free_port


class FaultProxy:
    def __init__(self, upstream_port: int, port: int | None = None):
        self.upstream_port = upstream_port
        self.port = port or free_port()
        self._lock = threading.Lock()
        self._drops: dict[int, int] = {}  # api key -> answers still to lose
        self.dropped: dict[int, int] = {}  # api key -> answers lost so far
        self.requests: dict[int, int] = {}  # api key -> requests seen
        self._sockets: list[socket.socket] = []
        self._closed = False
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)
        self._thread.start()

    def drop_answers(self, api_key: int, count: int) -> None:
        with self._lock:
            self._drops[api_key] = self._drops.get(api_key, 0) + count

    def retarget(self, upstream_port: int) -> None:
        """New connections go to another port (a restarted broker)."""
        self.upstream_port = upstream_port

    # ------------------------------------------------------------------ plumbing

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.settimeout(None)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
            pending: dict[int, int] = {}  # correlation id -> api key
            threading.Thread(target=self._pump, args=(client, upstream, pending, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, pending, False), daemon=True).start()

    @staticmethod
    def _read_exact(s: socket.socket, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def _pump(self, src: socket.socket, dst: socket.socket, pending: dict, requests: bool) -> None:
        try:
            while not self._closed:
                head = self._read_exact(src, 4)
                if head is None:
                    break
                (size,) = struct.unpack(">i", head)
                body = self._read_exact(src, size) if size > 0 else b""
                if body is None:
                    break
                if requests:
                    api_key, _version, corr = struct.unpack_from(">hhi", body)
                    pending[corr] = api_key
                    with self._lock:
                        self.requests[api_key] = self.requests.get(api_key, 0) + 1
                else:
                    (corr,) = struct.unpack_from(">i", body)
                    api_key = pending.pop(corr, None)
                    with self._lock:
                        lose = api_key is not None and self._drops.get(api_key, 0) > 0
                        if lose:
                            self._drops[api_key] -= 1
                            self.dropped[api_key] = self.dropped.get(api_key, 0) + 1
                    if lose:
                        break  # the answer is lost with the connection
                dst.sendall(head + body)
        except (OSError, struct.error):
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                try:
                    s.close()
                except OSError:
                    pass
        self._thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
