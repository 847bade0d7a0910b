"""Transactions on kbroker's 3-broker cluster beside Apache Kafka 4.x KRaft (issue 17's
measurements), the clusters of kafka_peers.py run in turn, alternating round by round:

  overhead    transactional against idempotent produce (acks=all), transactions of 100,
              1,000 and 10,000 records: msg/s of each, each run --seconds long (whole
              transactions), and the overhead = 1 - transactional / idempotent msg/s
  commits     commits per second of one producer, one record per transaction
  fetch       read_committed against read_uncommitted consumption of the same topic
              (--aborted records in 10,000-record transactions, one in five aborted): msg/s

One load generator for both systems: confluent-kafka (librdkafka) in this process, 100-byte
records, fresh topics of 3 partitions (RF=3, min.insync.replicas=2) per round, warmed up
first. Within a round the two sides of each pair run back to back, in alternating order.

    .venv/bin/python bench/cluster/txn_peers.py                      # 3 rounds
    .venv/bin/python bench/cluster/txn_peers.py --rounds 1 --systems kbroker
    .venv/bin/python bench/cluster/txn_peers.py --json bench/results/txn_peers.json
    .venv/bin/python bench/cluster/txn_peers.py --table-from bench/results/txn_peers.json

Invariants as kafka_peers.py: one cluster at a time, every wait bounded, every process
stopped at the end, each figure with the 1-minute load average sampled before it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from kafka_peers import (  # noqa: E402
    BENCH_MARKER,
    LABELS,
    TOPIC_CONFIGS,
    KbrokerCluster,
    KraftCluster,
    ZooKeeperServer,
    kraft_version,
    load1,
    median,
    wait_for_ci,
)

SYSTEMS = ("kbroker", "kraft")
VALUE = b"x" * 100
SIZES = (100, 1000, 10000)


def _ck():
    import confluent_kafka

    return confluent_kafka


def _producer(bootstrap: str, txn_id: str | None):
    conf = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 131072,
        "queue.buffering.max.messages": 1000000,
    }
    if txn_id:
        conf["transactional.id"] = txn_id
    p = _ck().Producer(conf)
    if txn_id:
        p.init_transactions(60)
    return p


def produce_run(
    bootstrap: str, topic: str, n: int | None, txn_size: int | None, tag: str, seconds: float | None = None
) -> dict:
    """n records, or as many as --seconds allow (whole transactions; idempotent: chunks of
    10,000 records); committed every txn_size records when transactional. msg/s."""
    p = _producer(bootstrap, f"bench-{tag}" if txn_size else None)
    row = {"txn_size": txn_size, "load1": load1()}
    t0 = time.monotonic()
    i = 0
    while (n is None or i < n) and (seconds is None or time.monotonic() - t0 < seconds):
        k = txn_size or 10_000
        if n is not None:
            k = min(k, n - i)
        if txn_size:
            p.begin_transaction()
        for j in range(k):
            while True:
                try:
                    p.produce(topic, VALUE, partition=(i + j) % 3)
                    break
                except BufferError:
                    p.poll(0.01)
            if j % 10000 == 0:
                p.poll(0)
        if txn_size:
            p.commit_transaction(60)
        i += k
    assert p.flush(60) == 0
    row["records"] = i
    row["seconds"] = time.monotonic() - t0
    row["msg_s"] = i / row["seconds"]
    return row


def commits_run(bootstrap: str, topic: str, seconds: float, tag: str) -> dict:
    p = _producer(bootstrap, f"bench-commits-{tag}")
    row = {"load1": load1()}
    n = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        p.begin_transaction()
        p.produce(topic, VALUE, partition=n % 3)
        p.commit_transaction(60)
        n += 1
    row["seconds"] = time.monotonic() - t0
    row["commits_s"] = n / row["seconds"]
    return row


def abort_some(bootstrap: str, topic: str, n: int, tag: str) -> None:
    """Transactions of 10,000 records, every fifth aborted: what read_committed must skip."""
    p = _producer(bootstrap, f"bench-aborts-{tag}")
    for t in range(n // 10_000):
        p.begin_transaction()
        for j in range(10_000):
            while True:
                try:
                    p.produce(topic, VALUE, partition=j % 3)
                    break
                except BufferError:
                    p.poll(0.01)
        if t % 5 == 4:
            p.flush(60)
            p.abort_transaction(60)
        else:
            p.commit_transaction(60)


def fetch_run(bootstrap: str, topic: str, isolation: str, tag: str) -> dict:
    ck = _ck()
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{tag}-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
            "queued.max.messages.kbytes": 65536,
        }
    )
    row = {"isolation": isolation, "load1": load1()}
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(3)])
    n, eof = 0, set()
    t0 = time.monotonic()
    deadline = t0 + 600
    while len(eof) < 3 and time.monotonic() < deadline:
        for m in c.consume(10000, 0.5):
            if m.error() is not None:
                if m.error().code() == ck.KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                continue
            n += 1
    row["seconds"] = time.monotonic() - t0
    row["records"] = n
    row["msg_s"] = n / row["seconds"]
    c.close()
    return row


def measure(c, args, rnd: int, system: str) -> dict:
    t0 = time.monotonic()
    c.prepare()
    c.start()
    print(f"  started in {time.monotonic() - t0:.1f} s (load {load1()})", flush=True)
    topic, fetched = f"txn-bench-r{rnd}", f"txn-fetch-r{rnd}"
    c.create_topic(topic, 3, 3, TOPIC_CONFIGS)
    c.create_topic(fetched, 3, 3, TOPIC_CONFIGS)
    bootstrap = c.bootstrap
    produce_run(bootstrap, topic, args.warmup, None, f"{system}-{rnd}-warm")
    produce_run(bootstrap, topic, 2000, 100, f"{system}-{rnd}-warm-txn")
    out: dict = {"overhead": [], "commits": None, "fetch": []}
    for k, size in enumerate(SIZES):
        pair = [None, size] if (k + rnd) % 2 == 0 else [size, None]
        rows = {}
        for s in pair:
            rows[s] = produce_run(bootstrap, topic, None, s, f"{system}-{rnd}-{size}-{s}", args.seconds)
        overhead = 1 - rows[size]["msg_s"] / rows[None]["msg_s"]
        out["overhead"].append(
            {"size": size, "idempotent": rows[None], "transactional": rows[size], "overhead": overhead}
        )
        print(
            f"  txn {size:>6}: idempotent {rows[None]['msg_s']:>9,.0f} msg/s, transactional "
            f"{rows[size]['msg_s']:>9,.0f} msg/s, overhead {overhead:+.1%}",
            flush=True,
        )
    out["commits"] = commits_run(bootstrap, topic, args.commit_seconds, f"{system}-{rnd}")
    print(f"  commits/s of one producer: {out['commits']['commits_s']:,.0f}", flush=True)
    abort_some(bootstrap, fetched, args.aborted, f"{system}-{rnd}")
    order = ["read_uncommitted", "read_committed"] if rnd % 2 == 0 else ["read_committed", "read_uncommitted"]
    for iso in order:
        out["fetch"].append(fetch_run(bootstrap, fetched, iso, f"{system}-{rnd}"))
    f = {r["isolation"]: r for r in out["fetch"]}
    print(
        f"  fetch: read_uncommitted {f['read_uncommitted']['msg_s']:,.0f} msg/s "
        f"({f['read_uncommitted']['records']:,}), read_committed {f['read_committed']['msg_s']:,.0f} msg/s "
        f"({f['read_committed']['records']:,})",
        flush=True,
    )
    return out


def summary(results: dict) -> str:
    systems = [s for s in results["systems"] if results.get(s)]
    labels = results["labels"]
    lines = [
        "| figure (median over rounds) | " + " | ".join(labels[s] for s in systems) + " |",
        "|---|" + "---|" * len(systems),
    ]

    def cell(vals, fmt):
        if not vals:
            return "–"
        return f"**{fmt(median(vals))}** ({', '.join(fmt(v) for v in vals)})"

    for i, size in enumerate(SIZES):
        for what, key in (("idempotent", "idempotent"), ("transactional", "transactional")):
            lines.append(
                f"| {what} produce, {size:,}-record transactions' workload, msg/s | "
                + " | ".join(
                    cell([r["overhead"][i][key]["msg_s"] for r in results[s]], lambda v: f"{v:,.0f}") for s in systems
                )
                + " |"
            )
        lines.append(
            f"| overhead (1 - transactional / idempotent), {size:,} records per transaction | "
            + " | ".join(
                cell([r["overhead"][i]["overhead"] * 100 for r in results[s]], lambda v: f"{v:+.1f}%") for s in systems
            )
            + " |"
        )
    lines.append(
        "| commits/s, one producer, 1 record per transaction | "
        + " | ".join(cell([r["commits"]["commits_s"] for r in results[s]], lambda v: f"{v:,.0f}") for s in systems)
        + " |"
    )
    logged = results["args"]["aborted"]
    for iso in ("read_uncommitted", "read_committed"):
        lines.append(
            f"| consume {iso}, records delivered/s | "
            + " | ".join(
                cell(
                    [next(x for x in r["fetch"] if x["isolation"] == iso)["msg_s"] for r in results[s]],
                    lambda v: f"{v:,.0f}",
                )
                for s in systems
            )
            + " |"
        )
    for iso in ("read_uncommitted", "read_committed"):
        lines.append(
            f"| consume {iso}, the topic's {logged:,} records read to its end, records/s | "
            + " | ".join(
                cell(
                    [logged / next(x for x in r["fetch"] if x["isolation"] == iso)["seconds"] for r in results[s]],
                    lambda v: f"{v:,.0f}",
                )
                for s in systems
            )
            + " |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=10.0, help="length of each produce run (default 10 s)")
    p.add_argument("--warmup", type=int, default=100_000)
    p.add_argument(
        "--aborted",
        type=int,
        default=600_000,
        help="records of the fetched topic, in 10k-record transactions, 1 in 5 aborted (default 600k)",
    )
    p.add_argument("--commit-seconds", type=float, default=10.0)
    p.add_argument("--session-ms", type=int, default=6000)
    p.add_argument(
        "--no-ci-wait",
        action="store_true",
        help="start at once even while the test suite's marker file exists (a loaded machine)",
    )
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--table-from", metavar="PATH")
    args = p.parse_args(argv)
    if args.table_from:
        with open(args.table_from) as f:
            print(summary(json.load(f)))
        return 0
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    labels = {s: LABELS[s].format(v=kraft_version()) for s in SYSTEMS}
    root = Path(tempfile.mkdtemp(prefix="kbroker-txn-peers-"))

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    if not args.no_ci_wait:
        wait_for_ci()
    Path(BENCH_MARKER).touch()
    zookeeper = ZooKeeperServer(root / "zookeeper", own_session=True)
    results: dict = {
        "systems": args.systems,
        "labels": labels,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cores": os.cpu_count(),
        "args": vars(args),
        **{s: [] for s in args.systems},
        "failures": [],
    }
    try:
        zookeeper.start()
        for rnd in range(args.rounds):
            for system in args.systems:
                print(f"== round {rnd + 1}/{args.rounds}: {labels[system]} (load {load1()})", flush=True)
                d = root / f"{system}-r{rnd}"
                c = (
                    KbrokerCluster(d, args.session_ms, zookeeper, f"kbroker-txn-r{rnd}")
                    if system == "kbroker"
                    else KraftCluster(d, args.session_ms)
                )
                try:
                    results[system].append(measure(c, args, rnd, system))
                except Exception as exc:
                    results["failures"].append({"system": system, "round": rnd, "error": repr(exc)[:2000]})
                    print(f"  !! failed: {exc!r}"[:2000], flush=True)
                finally:
                    c.close()
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump(results, f, indent=1, default=str)
                shutil.rmtree(d, ignore_errors=True)
        print(summary(results), flush=True)
    finally:
        zookeeper.stop()
        Path(BENCH_MARKER).unlink(missing_ok=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1, default=str)
        shutil.rmtree(root, ignore_errors=True)
    return 1 if results["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
