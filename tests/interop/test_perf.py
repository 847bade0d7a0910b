"""`broker perf` against a real broker: the records it claims to have sent are in the
log, the JSON line has the documented fields, consume reads them back, e2e measures a
latency, --discard needs no broker. (Speed is for bench/, not asserted here.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from broker.client import Cluster
from broker.perf.stats import Stats

pytestmark = pytest.mark.interop

FIELDS = {
    "records_per_sec",
    "mb_per_sec",
    "avg_ms",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "p999_ms",
    "max_ms",
    "records",
    "bytes",
    "elapsed_s",
    "command",
}


def perf(*args, timeout=120):
    out = subprocess.run(
        [sys.executable, "-m", "broker.cli.main", "perf", *args, "--json"],
        capture_output=True,
        timeout=timeout,
        check=True,
    ).stdout.decode()
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    return json.loads(lines[0])


def test_produce_then_consume(broker):
    r = perf(
        "produce",
        "-b",
        broker.bootstrap,
        "-t",
        "perf-a",
        "--num-records",
        "200000",
        "--record-size",
        "100",
        "--partitions",
        "3",
        "--acks",
        "all",
        "--batch-size",
        "65536",
    )
    assert FIELDS <= set(r) and r["records"] == 200_000 and r["bytes"] == 20_000_000
    assert r["records_per_sec"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"]
    with Cluster(broker.bootstrap) as c:
        ends = c.list_offsets("perf-a", [0, 1, 2], -1)
    assert sum(off for off, _ in ends.values()) == 200_000
    c = perf("consume", "-b", broker.bootstrap, "-t", "perf-a", "--num-records", "200000")
    assert c["records"] == 200_000 and c["command"] == "consume"
    a = perf("consume", "-b", broker.bootstrap, "-t", "perf-a", "--num-records", "200000", "--decode", "arrow")
    assert a["records"] == 200_000


def test_throttled_compressed_produce_and_e2e(broker):
    r = perf(
        "produce",
        "-b",
        broker.bootstrap,
        "-t",
        "perf-b",
        "--num-records",
        "20000",
        "--throughput",
        "20000",
        "--compression",
        "zstd",
        "--linger-ms",
        "5",
        "--partitions",
        "1",
    )
    assert r["records"] == 20_000 and r["elapsed_s"] >= 0.8  # held to the requested rate
    with Cluster(broker.bootstrap) as c:
        assert c.list_offsets("perf-b", [0], -1)[0][0] == 20_000
    e = perf(
        "e2e",
        "-b",
        broker.bootstrap,
        "-t",
        "perf-c",
        "--num-records",
        "50000",
        "--throughput",
        "50000",
        "--partitions",
        "2",
    )
    assert e["records"] == 50_000 and e["p50_ms"] > 0 and e["p99_ms"] < 10_000


def test_text_summaries_say_what_was_measured(broker):
    """The last line names what the command did: sent (produce), consumed (consume), sent
    and consumed (e2e), with the latency it measured."""

    def text(*args):
        out = subprocess.run(
            [sys.executable, "-m", "broker.cli.main", "perf", *args, "-b", broker.bootstrap],
            capture_output=True,
            timeout=120,
            check=True,
        ).stdout.decode()
        return out.strip().splitlines()[-1]

    line = text("produce", "-t", "perf-text", "--num-records", "2000", "--partitions", "1")
    assert line.startswith("2000 records sent, ") and "ms avg latency" in line
    line = text("consume", "-t", "perf-text", "--num-records", "2000")
    assert line.startswith("2000 records consumed, ") and "ms avg fetch latency" in line and "sent" not in line
    line = text("e2e", "-t", "perf-text-e2e", "--num-records", "2000", "--partitions", "1")
    assert line.startswith("2000 records sent and consumed, ") and "ms avg end-to-end latency" in line


def test_discard_needs_no_broker():
    r = perf(
        "produce", "--discard", "-t", "x", "--num-records", "500000", "--batch-size", "1048576", "-b", "127.0.0.1:1"
    )
    assert r["records"] == 500_000 and r["bytes"] == 50_000_000


def test_bad_arguments_fail_with_one_line():
    p = subprocess.run(
        [sys.executable, "-m", "broker.cli.main", "perf", "produce", "-t", "x", "--num-records", "0"],
        capture_output=True,
        timeout=60,
    )
    assert p.returncode == 2 and len(p.stderr.decode().strip().splitlines()) == 1


def test_percentiles_weight_records_not_batches():
    s = Stats(100, progress=False)
    s.record(990, 99_000, 1.0)
    s.record(10, 1_000, 50.0)
    out = s.summary(1.0)
    assert out["p50_ms"] == 1.0 and out["p99_ms"] == 1.0 and out["p999_ms"] == 50.0
    assert out["avg_ms"] == pytest.approx((990 * 1.0 + 10 * 50.0) / 1000)
