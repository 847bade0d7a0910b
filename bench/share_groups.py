"""Share-group throughput (KIP-932) on one partition, kbroker beside Apache Kafka (issue 36).

    .venv/bin/python bench/share_groups.py [--records 200000] [--size 100] [--rounds 2]
        [--consumers 1,4,16] [--only kbroker|kafka]

For each broker in turn (alternating, `--rounds` times): a fresh broker process (kbroker's
`broker serve`; Kafka 4.4 in KRaft combined mode with bin/kafka-server-start's JVM flags),
one topic of one partition preloaded with RECORDS records of SIZE bytes
(kafka-producer-perf-test, acks=1), then per case a fresh group reads them all:

- classic: one KafkaConsumer (the baseline a share group is compared with);
- share N: N KafkaShareConsumers of one share group (one JVM, a thread each, implicit
  acknowledgement: every record is acknowledged ACCEPT by the poll after it), the group's
  share.auto.offset.reset=earliest set as a group config first.

Per case: records/s from the first record received to the last (the client's clock), and
the broker's CPU seconds (user+system, /proc) over the whole case divided by the records:
the CPU per delivered — for share groups, delivered and acknowledged — record. The
client JVM runs on the same 2 cores as the broker. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.broker_proc import BrokerProcess  # noqa: E402
from tests.support.kafka_broker import KAFKA_JVM_FLAGS, KafkaBroker  # noqa: E402
from tests.support.kafka_tools import java_program, kafka_tool  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
TIMEOUT = 600
SETTINGS = {"num.partitions": 1, "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 4}


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / CLK


def start(kind: str, root: Path):
    if kind == "kafka":
        b = KafkaBroker(root / "kafka", config=SETTINGS, jvm_flags=KAFKA_JVM_FLAGS)
        b.start(timeout=TIMEOUT)
        return b, b.proc.pid
    b = BrokerProcess(root / "kbroker", config=SETTINGS, log_level="warning")
    b.start(timeout=TIMEOUT)
    return b, b.proc.pid


def preload(bootstrap: str, topic: str, records: int, size: int) -> None:
    kafka_tool(
        "kafka-topics",
        "--bootstrap-server",
        bootstrap,
        "--create",
        "--topic",
        topic,
        "--partitions",
        1,
        "--replication-factor",
        1,
        timeout=TIMEOUT,
    )
    kafka_tool(
        "kafka-producer-perf-test",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--num-records",
        records,
        "--record-size",
        size,
        "--throughput",
        -1,
        "--command-property",
        "acks=1",
        "linger.ms=5",
        "batch.size=65536",
        heap="1g",
        timeout=TIMEOUT,
    )


def run_case(bootstrap: str, pid: int, topic: str, mode: str, consumers: int, records: int, tag: str) -> dict:
    cpu0 = proc_cpu(pid)
    t0 = time.monotonic()
    out = java_program(
        "ShareBench",
        bootstrap,
        topic,
        f"{tag}-{mode}-{consumers}",
        mode,
        consumers,
        records,
        heap="1g",
        timeout=TIMEOUT,
    ).lines
    wall = time.monotonic() - t0
    cpu = proc_cpu(pid) - cpu0
    facts = next(f for f in (json.loads(x) for x in out if x.startswith("{")) if f.get("check") == "bench")
    got = int(facts["records"])
    assert got >= records, facts
    return {
        "mode": mode,
        "consumers": consumers,
        "records_s": records / facts["seconds"] if facts["seconds"] > 0 else float("nan"),
        "broker_cpu_s": cpu,
        "cpu_us_per_record": cpu / records * 1e6,
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--consumers", default="1,4,16")
    ap.add_argument("--only", choices=("kbroker", "kafka"))
    args = ap.parse_args()
    kinds = [args.only] if args.only else ["kbroker", "kafka"]
    cases = [("classic", 1)] + [("share", int(n)) for n in args.consumers.split(",")]
    rows = []
    for rnd in range(args.rounds):
        for kind in kinds if rnd % 2 == 0 else list(reversed(kinds)):
            with tempfile.TemporaryDirectory(prefix=f"share-bench-{kind}-") as d:
                broker, pid = start(kind, Path(d))
                try:
                    topic = "share-bench"
                    preload(broker.bootstrap, topic, args.records, args.size)
                    for mode, n in cases:
                        r = run_case(broker.bootstrap, pid, topic, mode, n, args.records, f"r{rnd}")
                        r.update(broker=kind, round=rnd)
                        rows.append(r)
                        print(json.dumps(r), flush=True)
                finally:
                    broker.stop()
    print()
    print("| broker | case | records/s | broker CPU µs/record |")
    print("|---|---|---|---|")
    for kind in kinds:
        for mode, n in cases:
            mine = [r for r in rows if r["broker"] == kind and r["mode"] == mode and r["consumers"] == n]
            rate = sorted(r["records_s"] for r in mine)[len(mine) // 2]
            cpu = sorted(r["cpu_us_per_record"] for r in mine)[len(mine) // 2]
            label = "classic consumer" if mode == "classic" else f"share, {n} consumer{'s' if n > 1 else ''}"
            print(f"| {kind} | {label} | {rate:,.0f} | {cpu:.1f} |")


if __name__ == "__main__":
    main()
