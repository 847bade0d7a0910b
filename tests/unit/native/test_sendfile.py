"""sendfile(2): a file range to a non-blocking socket with a small send buffer, drained by
a reader thread; partial sends, end of file and bad descriptors."""

import errno
import os
import random
import select
import socket
import threading

import pytest

from broker.native import sendfile

FILE_SIZE = 6 * 1024 * 1024 + 123


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sendfile") / "data"
    path.write_bytes(random.Random(42).randbytes(FILE_SIZE))
    return path


def socket_pair(kind):
    if kind == "unix":
        a, b = socket.socketpair()
    else:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        a = socket.create_connection(server.getsockname())
        b, _ = server.accept()
        server.close()
        # tiny TCP buffers crawl (zero-window probes back off exponentially): keep them
        # small next to the file, which is all it takes to make the sends partial
        a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536 if kind == "tcp" else 16384)
    if kind == "unix":
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    a.setblocking(False)
    return a, b


class Drain(threading.Thread):
    """Reads until `expected` bytes arrived or the peer closed."""

    def __init__(self, sock, expected):
        super().__init__(daemon=True)
        self.sock = sock
        self.expected = expected
        self.received = bytearray()
        self.error = None

    def run(self):
        try:
            while len(self.received) < self.expected:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                self.received += chunk
        except OSError as exc:  # pragma: no cover - reported below
            self.error = exc


def send_range(sock, fd, offset, count, start_reader):
    """Calls sendfile until the range is sent, waiting for writability in between.
    Returns the list of return values."""
    returns = []
    sent = 0
    while sent < count:
        n = sendfile(sock.fileno(), fd, offset + sent, count - sent)
        assert 0 <= n <= count - sent
        returns.append(n)
        sent += n
        start_reader()
        if sent < count:
            _, writable, _ = select.select([], [sock], [], 30)
            assert writable, "the socket never became writable again"
    return returns


@pytest.mark.parametrize("kind", ["unix", "tcp"])
@pytest.mark.parametrize("offset,count", [(0, FILE_SIZE), (777, 3 * 1024 * 1024 + 5), (FILE_SIZE - 1, 1)])
def test_sendfile_sends_the_range_with_partial_returns(data_file, kind, offset, count):
    a, b = socket_pair(kind)
    drain = Drain(b, count)
    started = []

    def start_reader():
        # the reader starts only after the first call: that call must hit a full buffer
        if not started:
            started.append(True)
            drain.start()

    try:
        with open(data_file, "rb") as f:
            returns = send_range(a, f.fileno(), offset, count, start_reader)
            assert f.tell() == 0  # the file position is not used
        drain.join(60)
        assert not drain.is_alive() and drain.error is None
        expected = data_file.read_bytes()[offset : offset + count]
        assert len(drain.received) == count
        assert bytes(drain.received) == expected
        assert sum(returns) == count
        if count > 1024 * 1024:
            assert returns[0] < count  # a partial send was observed
            assert len(returns) > 1
    finally:
        a.close()
        b.close()


def test_eof_when_the_range_passes_the_end_of_file(data_file):
    a, b = socket_pair("unix")
    try:
        with open(data_file, "rb") as f:
            drain = Drain(b, 10)
            drain.start()
            with pytest.raises(EOFError):
                # the last 10 bytes go out, then the file ends before the range does
                while True:
                    sendfile(a.fileno(), f.fileno(), FILE_SIZE - 10, 100)
            drain.join(10)
            assert bytes(drain.received[:10]) == data_file.read_bytes()[-10:]
            with pytest.raises(EOFError):
                sendfile(a.fileno(), f.fileno(), FILE_SIZE + 5, 10)
            assert sendfile(a.fileno(), f.fileno(), FILE_SIZE + 5, 0) == 0
    finally:
        a.close()
        b.close()


def test_errors(data_file, tmp_path):
    a, b = socket_pair("unix")
    try:
        with open(data_file, "rb") as f:
            with pytest.raises(OSError) as exc:
                sendfile(-1, f.fileno(), 0, 10)
            assert exc.value.errno == errno.EBADF
            closed = os.dup(f.fileno())
            os.close(closed)
            with pytest.raises(OSError) as exc:
                sendfile(a.fileno(), closed, 0, 10)
            assert exc.value.errno == errno.EBADF
            with pytest.raises(ValueError):
                sendfile(a.fileno(), f.fileno(), -1, 10)
            with pytest.raises(ValueError):
                sendfile(a.fileno(), f.fileno(), 0, -1)
            # a descriptor sendfile(2) cannot read from (a socket) is an OSError too
            with pytest.raises(OSError):
                sendfile(a.fileno(), b.fileno(), 0, 10)
        # a closed peer: EPIPE / ECONNRESET, not a crash (SIGPIPE is ignored by Python)
        b.close()
        with open(data_file, "rb") as f:
            with pytest.raises(OSError):
                sendfile(a.fileno(), f.fileno(), 0, 100_000)
    finally:
        a.close()
        b.close()
