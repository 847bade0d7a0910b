"""Many partitions on one broker: file descriptors, topic creation and restart time.

    .venv/bin/python bench/many_partitions.py [--partitions 10000] [--segments 1]
                                             [--nofile 20000] [--json]

Starts a broker on loopback with the given open-file limit (RLIMIT_NOFILE, soft and
hard), creates one topic with --partitions partitions (one CreateTopics), writes
--segments records of 100 bytes to every partition (segment.bytes=14 when --segments > 1,
so each record after the first rolls a new segment), then measures:

    create      seconds for CreateTopics, and its answer (an error name, or "ok")
    on disk     partition directories and .log files found in the data dir
    fds         file descriptors the broker holds after the writes
    restart     seconds until ApiVersions answers after a clean stop (SIGTERM), then
                after kill -9 (followed by one more record per partition, so recovery
                has unflushed data to validate), with the fds held after each

Every phase is bounded in time; the broker and its data dir are removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from broker.client import Cluster  # noqa: E402
from broker.client.producer import Producer  # noqa: E402
from broker.perf.local import LocalBroker  # noqa: E402
from broker.protocol.errors import KafkaProtocolError  # noqa: E402

TOPIC = "many"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def write_round(bootstrap: str, partitions: int) -> None:
    """One 100-byte record to every partition (one batch each, requests of 2,000)."""
    with Producer(bootstrap, acks=1, linger_ms=60_000, batch_size=1 << 20, timeout_ms=120_000) as p:
        for first in range(0, partitions, 2000):
            for i in range(first, min(first + 2000, partitions)):
                p.send(TOPIC, b"x" * 100, partition=i)
            p.flush()


def on_disk(data_dir: str) -> tuple[int, int]:
    dirs = logs = 0
    for name in os.listdir(data_dir):
        path = os.path.join(data_dir, name)
        if os.path.isdir(path) and name.startswith(TOPIC + "-"):
            dirs += 1
            logs += sum(1 for f in os.listdir(path) if f.endswith(".log"))
    return dirs, logs


def run(partitions: int, segments: int, nofile: int | None, timeout: float) -> dict:
    config = {"num.partitions": 1, "log.segment.bytes": 14 if segments > 1 else 1 << 30}
    b = LocalBroker(config=config, nofile=nofile)
    out: dict = {"partitions": partitions, "segments_per_partition": segments, "nofile": nofile}
    try:
        b.start(timeout)
        out["fds_idle"] = b.open_fds()
        t0 = time.perf_counter()
        try:
            with Cluster(b.bootstrap, timeout=timeout) as c:
                c.create_topic(TOPIC, partitions, 1)
            out["create"] = "ok"
        except KafkaProtocolError as exc:
            out["create"] = exc.code.name
        except Exception as exc:  # a disconnect instead of an answer
            out["create"] = f"{type(exc).__name__}: {exc}"
        out["create_s"] = round(time.perf_counter() - t0, 3)
        out["broker_alive_after_create"] = b.proc.poll() is None
        if out["create"] != "ok" or not out["broker_alive_after_create"]:
            out["dirs_on_disk"], out["segments_on_disk"] = on_disk(b.data_dir)
            b.kill()
            try:
                b.start(timeout)
                out["restart_after_failed_create"] = "ok"
            except RuntimeError as exc:
                with open(b.log_path, errors="replace") as f:
                    tail = [line for line in f.read().splitlines() if line.strip()][-1:]
                out["restart_after_failed_create"] = f"failed: {exc.__class__.__name__}; {' '.join(tail)[:200]}"
            return out
        t0 = time.perf_counter()
        for _ in range(segments):
            write_round(b.bootstrap, partitions)
        out["write_s"] = round(time.perf_counter() - t0, 3)
        out["dirs_on_disk"], out["segments_on_disk"] = on_disk(b.data_dir)
        out["fds_after_writes"] = b.open_fds()
        b.stop(timeout)
        out["restart_clean_s"] = round(b.start(timeout), 3)
        out["fds_after_clean_restart"] = b.open_fds()
        write_round(b.bootstrap, partitions)
        b.kill()
        out["restart_kill9_s"] = round(b.start(timeout), 3)
        out["fds_after_kill9_restart"] = b.open_fds()
        out["rss_mb"] = round(b.rss_mb(), 1)
        b.stop(timeout)
        return out
    finally:
        b.cleanup()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--segments", type=int, default=1, help="records (= segments) per partition")
    ap.add_argument("--nofile", type=int, default=None, help="the broker's RLIMIT_NOFILE (default: inherited)")
    ap.add_argument("--timeout", type=float, default=900.0, help="bound of each phase, seconds")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = ap.parse_args()
    res = run(args.partitions, args.segments, args.nofile, args.timeout)
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:32} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
