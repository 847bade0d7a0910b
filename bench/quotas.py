"""Quota accuracy (issue 20): how close a saturating producer is held to its
producer_byte_rate.

    nice -n 19 .venv/bin/python bench/quotas.py [--quotas 1,5,20] [--seconds 20] [--runs 1]
                                              [--partitions 4] [--batch-size 16384]

One `broker serve` (embedded store, default settings). For each quota Q (MB/s, 1 MB =
2^20 bytes): `producer_byte_rate` = Q on the client id of a fresh Kafka Java producer
(kafka-producer-perf-test from the pinned jars: 1 KiB records, acks=1, linger.ms=10,
batch.size --batch-size: 16 KiB by default, as the client's; as fast as it can), to a
fresh topic of --partitions partitions; the records the broker
appended are counted (ListOffsets every 0.1 s) from the first one to --seconds later,
then the producer is stopped. Prints
per quota the achieved rate, its ratio to the quota, each 5 s's rate (Kafka's sampled
rate lets a new client send 10 windows' worth at once, and forgets a sample 11 windows
old: the windows show those bursts), and the throttle time the broker answered
(kafka_server_quota_throttle_time_seconds_total from its metrics listener). An unthrottled
run of the same producer first says what the producer reaches without a quota.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from broker.client import Cluster  # noqa: E402
from broker.protocol.messages.alter_client_quotas import AlterClientQuotasRequest as A  # noqa: E402
from tests.support.broker_proc import BrokerProcess  # noqa: E402
from tests.support.kafka_tools import StartedTool, require_kafka_libs, tool_command  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

MB = 1 << 20
RECORD = 1024


def set_quota(bootstrap: str, client_id: str, rate: float | None) -> None:
    op = A.OpData(key="producer_byte_rate", value=rate or 0.0, remove=rate is None)
    with Cluster(bootstrap) as c:
        r = c.any_connection().request(
            A(
                entries=[A.EntryData(entity=[A.EntityData(entity_type="client-id", entity_name=client_id)], ops=[op])],
                validate_only=False,
            )
        )
    assert r.entries[0].error_code == 0, r.entries[0].error_message


def appended_over(
    bootstrap: str, topic: str, partitions: int, seconds: float, tool: StartedTool
) -> list[tuple[float, int]]:
    """(time since the first record was appended, records in the topic), sampled every
    0.1 s from the first record to `seconds` later: the broker's own count of what it
    acknowledged (acks=1), not the producer's report."""
    parts = list(range(partitions))
    with Cluster(bootstrap) as c:

        def count() -> int:
            return sum(o for o, _ in c.list_offsets(topic, parts, -1).values())

        deadline = time.monotonic() + 120
        while count() == 0:
            if tool.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the producer wrote nothing: {tool.stderr()[-2000:]}")
            time.sleep(0.02)
        t0 = time.monotonic()
        samples = [(0.0, count())]
        while samples[-1][0] < seconds:
            time.sleep(min(0.1, max(t0 + seconds - time.monotonic(), 0.0)))
            samples.append((time.monotonic() - t0, count()))
        return samples


def producer(bootstrap: str, topic: str, client_id: str, out_dir: Path, batch_size: int) -> StartedTool:
    cmd = tool_command(
        "kafka-producer-perf-test",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--num-records",
        str(10**9),
        "--record-size",
        str(RECORD),
        "--throughput",
        "-1",
        "--command-property",
        f"client.id={client_id}",
        "acks=1",
        "linger.ms=10",
        f"batch.size={batch_size}",
        quick=False,
    )
    return StartedTool(cmd, out_dir, client_id)


def throttle_seconds(metrics_port: int, client_id: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as f:
        for line in f.read().decode().splitlines():
            if line.startswith("kafka_server_quota_throttle_time_seconds_total{") and f'"{client_id}"' in line:
                return float(line.split()[-1])
    return 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quotas", default="1,5,20", help="MB/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument(
        "--batch-size", type=int, default=16384, help="the producer's batch.size (the Java client's default)"
    )
    args = ap.parse_args()
    require_kafka_libs()
    quotas = [float(q) for q in args.quotas.split(",")]
    metrics = free_port()
    with (
        tempfile.TemporaryDirectory() as tmp,
        BrokerProcess(Path(tmp) / "data", config={"metrics.listener": f"127.0.0.1:{metrics}"}) as b,
    ):
        print(f"broker {b.bootstrap}; {args.seconds:.0f} s per run; 1 MB = 2^20 bytes", flush=True)
        runs = [(None, i) for i in range(1)] + [(q, i) for q in quotas for i in range(args.runs)]
        for n, (q, i) in enumerate(runs):
            client = f"bench-{'free' if q is None else f'q{q:g}'}-{i}"
            topic = f"quotas-{n}"
            with Cluster(b.bootstrap) as c:
                c.create_topic(topic, args.partitions, 1)
                c.topic(topic, wait_s=10)
            if q is not None:
                set_quota(b.bootstrap, client, q * MB)
            tool = producer(b.bootstrap, topic, client, Path(tmp) / "out", args.batch_size)
            try:
                samples = appended_over(b.bootstrap, topic, args.partitions, args.seconds, tool)
            finally:
                tool.stop()
            secs = samples[-1][0]
            records = samples[-1][1] - samples[0][1]
            rate = records * RECORD / secs / MB
            marks = [next(x for x in samples if x[0] >= t) for t in range(0, int(args.seconds) + 1, 5)]
            per_window = " ".join(
                f"{(b2[1] - a[1]) * RECORD / (b2[0] - a[0]) / MB:.2f}" for a, b2 in zip(marks, marks[1:])
            )
            if q is None:
                print(f"no quota: {rate:.2f} MB/s over {secs:.1f} s (windows: {per_window})", flush=True)
            else:
                print(
                    f"quota {q:g} MB/s: achieved {rate:.3f} MB/s over {secs:.1f} s, ratio {rate / q:.3f}; "
                    f"windows {per_window}; throttle answered {throttle_seconds(metrics, client):.1f} s",
                    flush=True,
                )
                set_quota(b.bootstrap, client, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
