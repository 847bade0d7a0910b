"""Produce with schema validation on against off (issue 37: goal <= 5% apart), pinned as
bench/kafka_vs_kbroker.py --pinned pins: one kbroker (with its schema registry) on core 0,
the load generator bench/native/kgen (librdkafka; `make bench-tools`) on core 1.

    .venv/bin/python bench/schema_validation.py [--rounds 5] [--seconds 10] [--sizes 100,1024]
        [--partitions 10] [--acks all] [--linger-ms 5] [--batch-size 131072] [--json out.json]

One broker for the whole run. A schema is registered under the subject of the "on"
topics, and every record kgen writes, on and off alike, is framed with its id
(kgen --schema-id: magic byte 0, the id, random bytes; the size counts the frame). Per
round and record size, two topics of --partitions partitions are produced to for
--seconds each, one with confluent.value.schema.validation=true and one without, in
alternating order (off then on in even rounds, on then off in odd ones), each dropped
after its run. Before measuring, an unframed record is refused on an "on" topic (the
check is live) and taken on an "off" one. Output: per run a JSON line; then per size the
medians of msgs/s, MB/s and the broker's CPU seconds per GB for both modes, on/off - 1,
and which side saturated its core (generator-bound / broker-bound, as
kafka_vs_kbroker.py says it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.kafka_vs_kbroker import (  # noqa: E402
    BROKER_CORE,
    PINNED_SETTINGS,
    KBroker,
    assert_pinned,
    bound,
    check_pinning,
    drop_topic,
    ensure_kgen,
    generator,
    pin,
)
from broker.client import BrokerConnection, Cluster  # noqa: E402
from broker.native import BatchBuilder  # noqa: E402
from broker.protocol.messages.produce import ProduceRequest  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

SCHEMA = '{"type":"record","name":"Payment","fields":[{"name":"cents","type":"long"}]}'
VALIDATE = {"confluent.value.schema.validation": "true"}


def register(url: str, subject: str) -> int:
    req = urllib.request.Request(
        f"{url}/subjects/{subject}/versions",
        data=json.dumps({"schema": SCHEMA}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return int(json.loads(resp.read())["id"])


def unframed_error(broker: KBroker, topic: str) -> int:
    """The error code a one-record Produce of an unframed value gets on partition 0."""
    b = BatchBuilder()
    b.append(int(time.time() * 1000), None, b"not framed")
    req = ProduceRequest(
        acks=1,
        timeout_ms=10000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b.build())]
            )
        ],
    )
    host, port = broker.bootstrap.rsplit(":", 1)
    with BrokerConnection(host, int(port)) as conn:
        return int(conn.request(req).responses[0].partition_responses[0].error_code)


def produce_argv(broker, topic: str, size: int, args, schema_id: int, seconds: float) -> list:
    return [
        "produce",
        "-b",
        broker.bootstrap,
        "-t",
        topic,
        "-s",
        size,
        "--acks",
        args.acks,
        *(["--idempotence"] if args.acks == "all" else []),
        "--linger-ms",
        args.linger_ms,
        "--batch-size",
        args.batch_size,
        "--seconds",
        seconds,
        "--schema-id",
        schema_id,
    ]


def run(args) -> list[dict]:
    check_pinning()
    ensure_kgen()
    registry_port = free_port()
    KBroker.settings = {**PINNED_SETTINGS, "schema.registry.listener": f"127.0.0.1:{registry_port}"}
    root = Path(args.dir or f"/tmp/bench-schema-validation-{os.getpid()}")
    broker = KBroker(root, fsync=False)
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {BROKER_CORE})  # the broker inherits it (kafka_vs_kbroker --pin-at launch)
    try:
        broker.start()
    finally:
        os.sched_setaffinity(0, mine)
    rows = []
    timeout = 3 * args.seconds + 120
    try:
        pin(broker.pid, BROKER_CORE)
        url = f"http://127.0.0.1:{registry_port}"
        with Cluster(broker.bootstrap) as cluster:

            def topic(name: str, on: bool) -> str:
                cluster.create_topic(name, args.partitions, 1, VALIDATE if on else None)
                cluster.topic(name, wait_s=30)
                return name

            # the check is live on "on" topics, absent on "off" ones
            schema_id = register(url, "bench-check-on-value")
            assert unframed_error(broker, topic("bench-check-on", True)) == 87, "validation is not on"
            assert unframed_error(broker, topic("bench-check-off", False)) == 0
            drop_topic(broker, "bench-check-on")
            drop_topic(broker, "bench-check-off")
            # warm-up: both modes, each size
            for size in args.sizes:
                for on in (False, True):
                    name = topic(f"bench-warm-{size}-{'on' if on else 'off'}", on)
                    if on:
                        register(url, f"{name}-value")
                    generator(broker.pid, produce_argv(broker, name, size, args, schema_id, args.seconds / 2), timeout)
                    drop_topic(broker, name)
            for round_no in range(args.rounds):
                for size in args.sizes:
                    order = (False, True) if round_no % 2 == 0 else (True, False)
                    for on in order:
                        mode = "on" if on else "off"
                        name = topic(f"bench-{size}-{mode}-{round_no}", on)
                        if on:
                            assert register(url, f"{name}-value") == schema_id  # the same schema, one id
                        r = generator(
                            broker.pid, produce_argv(broker, name, size, args, schema_id, args.seconds), timeout
                        )
                        assert_pinned(broker.pid, BROKER_CORE)
                        drop_topic(broker, name)
                        row = {
                            "round": round_no,
                            "size": size,
                            "validation": mode,
                            "msgs": r["msgs_per_s"],
                            "mb_s": r["mb_per_s"],
                            "generator_cpu": r["generator_cpu"],
                            "broker_cpu": r["broker_cpu"],
                            "cpu_s_per_gb": r["broker_cpu_s"] / (r["bytes"] / 1e9) if r["bytes"] else float("nan"),
                            "delivery_errors": r["delivery_errors"],
                        }
                        assert row["delivery_errors"] == 0, row
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    finally:
        broker.stop()
    return rows


def table(rows: list[dict], args) -> str:
    lines = [
        f"Produce, {args.partitions} partitions, acks={args.acks}"
        f"{' idempotent' if args.acks == 'all' else ''}, {args.seconds:g} s runs, medians of {args.rounds} "
        "alternating rounds (kbroker on core 0, kgen on core 1):",
        "",
        "| record size | validation | msgs/s | MB/s | broker CPU s/GB | cores | on/off - 1 (msgs/s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in args.sizes:
        med = {}
        for mode in ("off", "on"):
            rs = [r for r in rows if r["size"] == size and r["validation"] == mode]
            med[mode] = {
                k: statistics.median(r[k] for r in rs)
                for k in ("msgs", "mb_s", "cpu_s_per_gb", "generator_cpu", "broker_cpu")
            }
        for mode in ("off", "on"):
            m = med[mode]
            delta = "" if mode == "off" else f"{m['msgs'] / med['off']['msgs'] - 1:+.1%}"
            lines.append(
                f"| {size} B | {mode} | {m['msgs']:,.0f} | {m['mb_s']:.1f} | {m['cpu_s_per_gb']:.2f} "
                f"| generator {m['generator_cpu']:.0%} / broker {m['broker_cpu']:.0%}: "
                f"{bound(m['generator_cpu'], m['broker_cpu'])} | {delta} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--acks", default="all", choices=("1", "all"))
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=131072)
    ap.add_argument("--dir", help="the broker's data dir's parent (default: a new dir in /tmp)")
    ap.add_argument("--json", help="write every run's row here")
    args = ap.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    rows = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(table(rows, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
