"""An application that logs through broker.applog.KafkaLogHandler configured with
dictConfig, as a user's would, and the checks of what reached the topic.

    python -m tests.support.log_app BOOTSTRAP TOPIC N [text|json]

logs N lines round-robin over four loggers (app.a ... app.d), each line with an `extra`
field `seq` counting that logger's lines, then ends without closing anything:
logging.shutdown() at interpreter exit delivers what is still queued. The queue holds all
N lines, so none may be dropped however far the sender falls behind.
"""

from __future__ import annotations

import json
import logging
import logging.config
import sys
import time

LOGGERS = ("app.a", "app.b", "app.c", "app.d")


def main(bootstrap: str, topic: str, n: int, layout: str = "json") -> None:
    logging.config.dictConfig(
        {
            "version": 1,
            "handlers": {
                "kafka": {
                    "class": "broker.applog.KafkaLogHandler",
                    "bootstrap_servers": bootstrap,
                    "topic": topic,
                    "layout": layout,
                    "queue_size": n,
                    "close_timeout": 120,
                }
            },
            "root": {"level": "INFO", "handlers": ["kafka"]},
        }
    )
    loggers = [logging.getLogger(name) for name in LOGGERS]
    for i in range(n):
        loggers[i % 4].info("line %d of %d", i, n, extra={"seq": i // 4})


def read_topic(bootstrap: str, topic: str, count: int, timeout: float = 120.0) -> list:
    """Every record of the topic, once `count` are there (or what came within `timeout` s)."""
    from broker.client import Consumer

    out: list = []
    deadline = time.monotonic() + timeout
    with Consumer(bootstrap) as c:
        c.assign(topic, None, "earliest")
        while len(out) < count and time.monotonic() < deadline:
            out.extend(c.poll(1.0))
        out.extend(c.poll(0.2))  # and nothing more than expected
    return out


def check_delivered(records: list, n: int, pid: int) -> None:
    """All n lines of one run of main() with layout json, each logger's in order, keyed by
    logger name, with the host and process headers."""
    import socket

    assert len(records) == n, f"{len(records)} records, {n} logged"
    seqs: dict[str, list[int]] = {name: [] for name in LOGGERS}
    partitions: dict[str, set[int]] = {name: set() for name in LOGGERS}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        d = json.loads(r.value)
        assert r.key == d["logger"].encode()
        seqs[d["logger"]].append(d["seq"])
        partitions[d["logger"]].add(r.partition)
        assert d["level"] == "INFO" and d["message"].startswith("line ")
        assert dict(r.headers) == {"host": socket.gethostname().encode(), "process": str(pid).encode()}
    for name in LOGGERS:
        assert len(partitions[name]) == 1, f"{name}'s records are in partitions {partitions[name]}"
        want = list(range(n // 4 + (1 if LOGGERS.index(name) < n % 4 else 0)))
        assert seqs[name] == want, f"{name}: lines out of order or missing"


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:5])
