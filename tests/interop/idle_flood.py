"""Opens connections to a listener and never sends a byte on them — what a client that
never authenticates does — reopening each one the broker closes, until TOTAL have been
opened; then holds them for HOLD_SECONDS, or until its standard input closes. Run as its
own process by
test_connection_limits (a process's descriptors are bounded: two of these make 20,000).

    python -m tests.interop.idle_flood PORT TOTAL HOLD_SECONDS MAX_SECONDS

Prints "started" once the first connection is open, "opened" once TOTAL were, then one
line of JSON:
{"opened": N, "closed_by_broker": M, "failed": F} and exits 0; exits 1 if MAX_SECONDS
pass first.
"""

from __future__ import annotations

import errno
import json
import select
import socket
import sys
import time


def main(port: int, total: int, hold_s: float, max_s: float) -> int:
    deadline = time.monotonic() + max_s
    poller = select.epoll()
    open_: dict[int, socket.socket] = {}
    opened = closed = failed = 0
    started = False

    def reap(timeout: float) -> None:
        nonlocal closed
        for fd, _ in poller.poll(timeout):
            s = open_.pop(fd, None)
            if s is not None:
                poller.unregister(fd)
                s.close()
                closed += 1

    while opened < total:
        if time.monotonic() > deadline:
            return 1
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex(("127.0.0.1", port))
        if err not in (0, errno.EINPROGRESS):
            s.close()
            failed += 1
            reap(0.01)
            continue
        opened += 1
        open_[s.fileno()] = s
        # readable or hung up: the broker closed it (a client that never sends gets nothing else)
        poller.register(s.fileno(), select.EPOLLIN | select.EPOLLRDHUP)
        if not started:
            print("started", flush=True)
            started = True
        if opened % 64 == 0:
            reap(0)
    print("opened", flush=True)
    poller.register(sys.stdin.fileno(), select.EPOLLIN | select.EPOLLRDHUP)  # closed: stop holding
    end = min(time.monotonic() + hold_s, deadline)
    while time.monotonic() < end:
        if any(fd == sys.stdin.fileno() for fd, _ in poller.poll(0)):
            break
        reap(0.1)
    print(json.dumps({"opened": opened, "closed_by_broker": closed, "failed": failed}), flush=True)
    for s in open_.values():
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])))
