"""Scale curves of one broker on loopback, written as CSV + PNG under bench/results/.

    .venv/bin/python bench/scale/run.py [--quick] [--only NAME ...] [--out bench/results]

Curves (each starts its own broker on a free port, data in a temp dir, removed after):
  partitions   produce and consume msg/s vs partition count (1, 10, 100, 1000)
  connections  aggregate produce msg/s vs concurrent producer processes (1 .. 32)
  latency      produce latency percentiles vs offered load (10K .. 1M msg/s)
  durable      produce with log.flush.interval.messages=1 (group commit), acks=all
  storage      restart time after a clean stop and after kill -9, and broker RSS, vs
               stored size (1, 5, 10 GB); then consume from offset 0 vs from the tail of
               the 10 GB log (the O(1) claim)
  limits       10,000 partitions, then 100,000 segments (10,000 x 10), under a
               20,000-descriptor limit (RLIMIT_NOFILE), and 6,000 one-record partitions
               restarted after kill -9 (bench/many_partitions.py; issue 11)
All runs use the project's perf tool (100-byte records, native batches); client and
broker share this machine's cores. Every phase is bounded in time.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

from broker.client import Cluster  # noqa: E402
from broker.perf.consume import ConsumeOptions, run_consume  # noqa: E402
from broker.perf.local import LocalBroker  # noqa: E402
from broker.perf.produce import ProduceOptions, run_produce  # noqa: E402

GB = 1 << 30
SIZE = 100


def log(msg: str) -> None:
    print(msg, flush=True)


def write_csv(path: str, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    log(f"wrote {path}")


def plot(
    path: str, title: str, xlabel: str, ylabel: str, series: dict[str, tuple[list, list]], logx=False, logy=False
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", label=name)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if len(series) > 1:
        ax.legend()
    fig.text(0.01, 0.01, "kbroker, 2 shared cores, client and broker on one machine", fontsize=7, alpha=0.6)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    log(f"wrote {path}")


def produce(b, topic, n, **kw):
    kw.setdefault("batch_size", 262144)
    return run_produce(ProduceOptions(b.bootstrap, topic, n, SIZE, progress=False, **kw))


def consume(b, topic, n, **kw):
    return run_consume(ConsumeOptions(b.bootstrap, topic, n, SIZE, progress=False, **kw))


# ---------------------------------------------------------------------- curves


def curve_partitions(out: str, quick: bool) -> None:
    n = 200_000 if quick else 2_000_000
    rows = []
    for parts in (1, 10, 100, 1000):
        with LocalBroker() as b:
            # per-partition batches of 16 KiB (Kafka's default batch.size), ~1 MiB requests
            p = produce(b, "scale", n, partitions=parts, acks=1, batch_size=16384)
            c = consume(b, "scale", n)
            rows.append(
                {
                    "partitions": parts,
                    "produce_msgs_per_s": p["records_per_sec"],
                    "consume_msgs_per_s": c["records_per_sec"],
                    "produce_p99_ms": p["p99_ms"],
                }
            )
            log(f"partitions={parts}: produce {p['records_per_sec']:,.0f} msg/s, consume {c['records_per_sec']:,.0f}")
    write_csv(os.path.join(out, "scale_partitions.csv"), rows)
    plot(
        os.path.join(out, "scale_partitions.png"),
        f"Throughput vs partitions ({n:,} x 100 B, acks=1)",
        "partitions",
        "messages/s",
        {
            "produce": ([r["partitions"] for r in rows], [r["produce_msgs_per_s"] for r in rows]),
            "consume": ([r["partitions"] for r in rows], [r["consume_msgs_per_s"] for r in rows]),
        },
        logx=True,
    )


def curve_connections(out: str, quick: bool) -> None:
    n = 400_000 if quick else 3_200_000
    rows = []
    with LocalBroker() as b:
        with Cluster(b.bootstrap) as c:
            c.create_topic("conns", 8, 1)
        for conns in (1, 2, 4, 8, 16, 32):
            each = n // conns
            procs = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "broker.cli.main",
                        "perf",
                        "produce",
                        "-b",
                        b.bootstrap,
                        "-t",
                        "conns",
                        "--num-records",
                        str(each),
                        "--batch-size",
                        "65536",
                        "--acks",
                        "1",
                        "--json",
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
                for _ in range(conns)
            ]
            results = []
            for p in procs:
                stdout, _ = p.communicate(timeout=600)
                results.append(json.loads(stdout.decode().strip().splitlines()[-1]))
            total = sum(r["records"] for r in results)
            elapsed = max(r["elapsed_s"] for r in results)
            p99 = max(r["p99_ms"] for r in results)
            rows.append({"connections": conns, "produce_msgs_per_s": round(total / elapsed, 1), "worst_p99_ms": p99})
            log(f"connections={conns}: {total / elapsed:,.0f} msg/s aggregate, worst p99 {p99} ms")
    write_csv(os.path.join(out, "scale_connections.csv"), rows)
    plot(
        os.path.join(out, "scale_connections.png"),
        "Aggregate produce throughput vs producer connections",
        "concurrent producer processes",
        "messages/s",
        {"produce": ([r["connections"] for r in rows], [r["produce_msgs_per_s"] for r in rows])},
        logx=True,
    )


def curve_latency(out: str, quick: bool) -> None:
    rows = []
    rates = (10_000, 50_000, 100_000, 200_000, 500_000, 1_000_000)
    with LocalBroker() as b:
        for rate in rates:
            n = int(rate * (2 if quick else 5))
            r = produce(b, f"lat-{rate}", n, partitions=1, acks=1, throughput=rate, linger_ms=1, batch_size=262144)
            rows.append(
                {
                    "offered_msgs_per_s": rate,
                    "achieved_msgs_per_s": r["records_per_sec"],
                    "p50_ms": r["p50_ms"],
                    "p95_ms": r["p95_ms"],
                    "p99_ms": r["p99_ms"],
                    "p999_ms": r["p999_ms"],
                    "max_ms": r["max_ms"],
                }
            )
            log(
                f"offered {rate:,}: achieved {r['records_per_sec']:,.0f}, p50 {r['p50_ms']} p99 {r['p99_ms']} "
                f"p99.9 {r['p999_ms']} ms"
            )
    write_csv(os.path.join(out, "scale_latency.csv"), rows)
    xs = [r["offered_msgs_per_s"] for r in rows]
    plot(
        os.path.join(out, "scale_latency.png"),
        "Produce latency vs offered load (acks=1, 1 partition, linger.ms=1)",
        "offered load (messages/s)",
        "latency (ms)",
        {k: (xs, [r[f"{k}_ms"] for r in rows]) for k in ("p50", "p99", "p999")},
        logx=True,
        logy=True,
    )


def curve_durable(out: str, quick: bool) -> None:
    n = 200_000 if quick else 1_000_000
    rows = []
    for flush in (None, 1):
        cfg = {} if flush is None else {"log.flush.interval.messages": flush}
        with LocalBroker(config=cfg) as b:
            r = produce(b, "durable", n, partitions=3, acks=-1, batch_size=262144, max_inflight=8)
            rows.append(
                {
                    "mode": "page cache" if flush is None else "fsync every message (group commit)",
                    "produce_msgs_per_s": r["records_per_sec"],
                    "p50_ms": r["p50_ms"],
                    "p99_ms": r["p99_ms"],
                }
            )
            log(f"durable={flush}: {r['records_per_sec']:,.0f} msg/s, p99 {r['p99_ms']} ms")
    write_csv(os.path.join(out, "durable.csv"), rows)


def curve_storage(out: str, quick: bool) -> None:
    sizes = (0.25, 0.5, 1.0) if quick else (1, 5, 10)
    tmp = tempfile.mkdtemp(prefix="kbroker-scale-")
    data = os.path.join(tmp, "data")
    rows = []
    pos_rows = []
    try:
        b = LocalBroker(data_dir=data)
        b.start()
        port = b.port
        written = 0
        for size in sizes:
            target = int(size * GB) // (SIZE + 10)
            if target > written:
                produce(b, "big", target - written, partitions=1, acks=1, batch_size=1 << 20, timeout_s=1800)
                written = target
            b.stop()
            b = LocalBroker(data_dir=data, port=port)
            clean = b.start()
            rss = b.rss_mb()
            # kill -9 with a dirty active segment, then restart (recovery of the unflushed tail)
            produce(b, "big", 200_000, partitions=1, acks=1, batch_size=1 << 20)
            written += 200_000
            b.kill()
            b = LocalBroker(data_dir=data, port=port)
            dirty = b.start()
            rss_after = b.rss_mb()
            stored = sum(
                os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(data) for f in fs if f.endswith(".log")
            )
            rows.append(
                {
                    "stored_gb": round(stored / GB, 2),
                    "clean_restart_s": round(clean, 3),
                    "kill9_restart_s": round(dirty, 3),
                    "rss_mb_after_restart": round(max(rss, rss_after), 1),
                }
            )
            log(
                f"stored {stored / GB:.2f} GB: clean restart {clean:.2f} s, after kill -9 {dirty:.2f} s, "
                f"RSS {max(rss, rss_after):.0f} MB"
            )
        # consume 2M records from offset 0 and from the tail of the biggest log
        m = 200_000 if quick else 2_000_000
        with Cluster(b.bootstrap) as c:
            end = c.list_offsets("big", [0], -1)[0][0]
        tail_start = end - m
        # alternate head and tail reads and keep each one's best: the first read of a
        # connection and the machine's noise should not decide the comparison
        heads, tails = [], []
        for _ in range(3):
            heads.append(consume(b, "big", m))
            tails.append(consume(b, "big", m, start=tail_start))
        head = max(heads, key=lambda r: r["records_per_sec"])
        tail = max(tails, key=lambda r: r["records_per_sec"])
        pos_rows.append(
            {"position": "offset 0", "consume_msgs_per_s": head["records_per_sec"], "mb_per_s": head["mb_per_sec"]}
        )
        pos_rows.append(
            {
                "position": f"tail (offset {tail_start:,})",
                "consume_msgs_per_s": tail["records_per_sec"],
                "mb_per_s": tail["mb_per_sec"],
            }
        )
        log(f"consume from 0: {head['records_per_sec']:,.0f} msg/s; from the tail: {tail['records_per_sec']:,.0f}")
        b.stop()
        b.cleanup()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_csv(os.path.join(out, "scale_storage.csv"), rows)
    write_csv(os.path.join(out, "scale_position.csv"), pos_rows)
    xs = [r["stored_gb"] for r in rows]
    plot(
        os.path.join(out, "scale_restart.png"),
        "Restart time vs stored size",
        "stored GB",
        "seconds to serve",
        {
            "after clean stop": (xs, [r["clean_restart_s"] for r in rows]),
            "after kill -9": (xs, [r["kill9_restart_s"] for r in rows]),
        },
    )
    plot(
        os.path.join(out, "scale_rss.png"),
        "Broker RSS after restart vs stored size",
        "stored GB",
        "RSS (MB)",
        {"RSS": (xs, [r["rss_mb_after_restart"] for r in rows])},
    )


def curve_limits(out: str, quick: bool) -> None:
    sys.path.insert(0, os.path.dirname(HERE))
    from many_partitions import run as run_many

    cases = (
        ((1000, 1, 2000), (1000, 10, 2000), (600, 1, None))
        if quick
        else ((10_000, 1, 20_000), (10_000, 10, 20_000), (6_000, 1, None))
    )
    rows = []
    for partitions, segments, nofile in cases:
        r = run_many(partitions, segments, nofile, timeout=1800)
        rows.append(r)
        log(
            f"{partitions} partitions x {segments} segments, RLIMIT_NOFILE {nofile}: create {r['create']} in "
            f"{r['create_s']} s; {r.get('fds_after_writes')} fds; restart {r.get('restart_clean_s')} s clean, "
            f"{r.get('restart_kill9_s')} s after kill -9"
        )
    keys = list(dict.fromkeys(k for r in rows for k in r))
    write_csv(os.path.join(out, "scale_limits.csv"), [{k: r.get(k, "") for k in keys} for r in rows])


CURVES = {
    "partitions": curve_partitions,
    "connections": curve_connections,
    "latency": curve_latency,
    "durable": curve_durable,
    "storage": curve_storage,
    "limits": curve_limits,
}


def replot(out: str) -> None:
    """Redraws every PNG from the CSVs already in `out` (no measurement)."""

    def rows(name):
        with open(os.path.join(out, name)) as f:
            return [
                {k: float(v) if v.replace(".", "", 1).isdigit() else v for k, v in r.items()} for r in csv.DictReader(f)
            ]

    r = rows("scale_partitions.csv")
    plot(
        os.path.join(out, "scale_partitions.png"),
        "Throughput vs partitions (acks=1, 16 KiB batches)",
        "partitions",
        "messages/s",
        {
            "produce": ([x["partitions"] for x in r], [x["produce_msgs_per_s"] for x in r]),
            "consume": ([x["partitions"] for x in r], [x["consume_msgs_per_s"] for x in r]),
        },
        logx=True,
    )
    r = rows("scale_connections.csv")
    plot(
        os.path.join(out, "scale_connections.png"),
        "Aggregate produce throughput vs producer connections",
        "concurrent producer processes",
        "messages/s",
        {"produce": ([x["connections"] for x in r], [x["produce_msgs_per_s"] for x in r])},
        logx=True,
    )
    r = rows("scale_latency.csv")
    xs = [x["offered_msgs_per_s"] for x in r]
    plot(
        os.path.join(out, "scale_latency.png"),
        "Produce latency vs offered load (acks=1, 1 partition, linger.ms=1)",
        "offered load (messages/s)",
        "latency (ms)",
        {k: (xs, [x[f"{k}_ms"] for x in r]) for k in ("p50", "p99", "p999")},
        logx=True,
        logy=True,
    )
    r = rows("scale_storage.csv")
    xs = [x["stored_gb"] for x in r]
    plot(
        os.path.join(out, "scale_restart.png"),
        "Restart time vs stored size",
        "stored GB",
        "seconds to serve",
        {
            "after clean stop": (xs, [x["clean_restart_s"] for x in r]),
            "after kill -9": (xs, [x["kill9_restart_s"] for x in r]),
        },
    )
    plot(
        os.path.join(out, "scale_rss.png"),
        "Broker RSS after restart vs stored size",
        "stored GB",
        "RSS (MB)",
        {"RSS": (xs, [x["rss_mb_after_restart"] for x in r])},
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--only", nargs="*", choices=list(CURVES), help="run only these curves")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--replot", action="store_true", help="only redraw the PNGs from the CSVs in --out")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.replot:
        replot(args.out)
        return 0
    log(f"{os.cpu_count()} cores, shared by the clients and the broker")
    for name in args.only or list(CURVES):
        t0 = time.monotonic()
        log(f"== {name}")
        CURVES[name](args.out, args.quick)
        log(f"== {name} took {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
