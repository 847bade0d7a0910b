"""The registry's HTTP/1.1 as clients use it, on a raw socket: persistent connections,
pipelined requests answered in order, chunked bodies, `Expect: 100-continue` (curl's for
a body over 1 KiB), HTTP/1.0 closing after its answer."""

from __future__ import annotations

import json
import socket

import pytest

pytestmark = pytest.mark.interop

REC = '{"type":"record","name":"H","fields":[{"name":"a","type":"int"}]}'


def read_answers(s: socket.socket, n: int) -> list[tuple[int, bytes]]:
    buf, out = b"", []
    while len(out) < n:
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            assert chunk, (buf, out)
            buf += chunk
        head, buf = buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        if status == 100:
            continue
        length = int(
            next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        )
        while len(buf) < length:
            buf += s.recv(65536)
        out.append((status, buf[:length]))
        buf = buf[length:]
    return out


def test_pipelined_requests_are_answered_in_order(broker, subject):
    body = json.dumps({"schema": REC}).encode()
    reqs = (
        b"GET /schemas/types HTTP/1.1\r\nHost: x\r\n\r\n"
        + f"POST /subjects/{subject}/versions HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
        + f"GET /subjects/{subject}/versions HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        + b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", broker.registry_port), timeout=30) as s:
        s.sendall(reqs)
        answers = read_answers(s, 4)
    assert [a[0] for a in answers] == [200, 200, 200, 404]
    assert json.loads(answers[2][1]) == [1]


def test_a_chunked_body_and_expect_continue(broker, subject):
    body = json.dumps({"schema": REC}).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i : i + 7]), body[i : i + 7]) for i in range(0, len(body), 7))
    with socket.create_connection(("127.0.0.1", broker.registry_port), timeout=30) as s:
        s.sendall(
            f"POST /subjects/{subject}/versions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n".encode()
            + chunked
            + b"0\r\n\r\n"
        )
        ((status, out),) = read_answers(s, 1)
        assert status == 200 and json.loads(out)["version"] == 1
        s.sendall(
            f"POST /subjects/{subject} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Expect: 100-continue\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        )
        assert s.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(body)
        ((status, out),) = read_answers(s, 1)
        assert status == 200 and json.loads(out)["version"] == 1


def test_http_1_0_closes_after_its_answer(broker):
    with socket.create_connection(("127.0.0.1", broker.registry_port), timeout=30) as s:
        s.sendall(b"GET /subjects HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200") and b"Connection: close" in data
