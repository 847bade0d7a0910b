"""Spark decode of a 10-field Avro record: the kbroker source's native decoder against Spark's
own from_avro (spark-avro, the JVM) on the same registry-framed bytes, in one run.

    .venv/bin/python bench/spark_avro.py [--messages 1000000] [--rounds 5] [--cores 1]

Starts `broker serve` with its schema registry on free ports; registers a 10-field record
schema (long, int, string x2, double, float, boolean, enum, timestamp-millis, nullable
string) and produces --messages records framed as Confluent's serializers frame them (a 0
byte, the id, the Avro datum; the data made once by fastavro, produced by confluent-kafka)
into one partition per core. A local Spark session of --cores cores (local[N], UI off, the
spark-avro jar of `make testdeps`: tests/jvm/target/spark-libs) then alternates, after a
warm-up of each, --rounds times:

    kbroker:    format("kbroker") valueFormat=avro ... select("value.*") -> noop
    from_avro:  format("kbroker") raw ... select(from_avro(substring(value, 6), schema).*) -> noop
    raw:        format("kbroker") raw ... select(value) -> noop   (the fetch alone)

from_avro cannot read Confluent's framing, so its side strips the 5-byte header with
SQL's substring and is given the writer schema by hand. Both sides fetch the same bytes
through the same source; the noop sink materialises every column. Reports records/s
per core (median and best of the rounds), and each side's time above the raw read (the
decode itself). The whole run is bounded (--timeout-s).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import signal
import statistics
import struct
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.support.broker_proc import BrokerProcess  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

SCHEMA = {
    "type": "record",
    "name": "Click",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "int"},
        {"name": "page", "type": "string"},
        {"name": "referrer", "type": "string"},
        {"name": "score", "type": "double"},
        {"name": "ratio", "type": "float"},
        {"name": "mobile", "type": "boolean"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["VIEW", "CLICK", "BUY"]}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def produce(bootstrap: str, registry_url: str, topic: str, n: int, partitions: int) -> int:
    import fastavro
    from confluent_kafka import Producer

    from broker.client import Cluster
    from broker.spark.formats import RegistryClient

    with Cluster(bootstrap) as c:
        c.create_topic(topic, partitions, 1)
        c.topic(topic, wait_s=10.0)
    sid = RegistryClient(registry_url).register(f"{topic}-value", json.dumps(SCHEMA))
    parsed = fastavro.parse_schema(SCHEMA)
    rng = random.Random(7)
    header = b"\x00" + struct.pack(">I", sid)
    # 1000 distinct records, repeated: the decode work per record is the same
    pool = []
    for i in range(1000):
        buf = io.BytesIO()
        fastavro.schemaless_writer(
            buf,
            parsed,
            {
                "id": rng.randrange(2**40),
                "user": rng.randrange(10**6),
                "page": "/p/" + "x" * rng.randrange(5, 30),
                "referrer": "https://example.com/" + "r" * rng.randrange(0, 20),
                "score": rng.random() * 100,
                "ratio": rng.random(),
                "mobile": i % 2 == 0,
                "kind": ["VIEW", "CLICK", "BUY"][i % 3],
                "at": 1_700_000_000_000 + i,
                "note": None if i % 4 else f"note {i}",
            },
        )
        pool.append(header + buf.getvalue())
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20, "compression.type": "none"})
    for i in range(n):
        while True:
            try:
                p.produce(topic, pool[i % 1000], partition=i % partitions)
                break
            except BufferError:
                p.poll(0.1)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return sid


def _proc_stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds incl. waited-for children) from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[1]), sum(int(x) for x in fields[11:15]) / tick


def cpu_split(jvm_pid: int) -> tuple[float, float]:
    """(the JVM's CPU seconds, its descendants' = the Python workers')."""
    stats = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _proc_stat(int(d))
            if st:
                stats[int(d)] = st
    jvm = stats.get(jvm_pid, (0, 0.0))[1]
    below, frontier = 0.0, {jvm_pid}
    while frontier:
        nxt = {pid for pid, (ppid, _) in stats.items() if ppid in frontier}
        below += sum(stats[pid][1] for pid in nxt)
        frontier = nxt
    return jvm, below


def timed(fn, jvm_pid: int, cpu: dict, name: str) -> float:
    j0, p0 = cpu_split(jvm_pid)
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    j1, p1 = cpu_split(jvm_pid)
    cpu.setdefault(name, []).append((j1 - j0, p1 - p0))
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--timeout-s", type=int, default=1800)
    args = ap.parse_args()
    signal.signal(signal.SIGALRM, lambda *_: sys.exit("bench/spark_avro.py: --timeout-s reached"))
    signal.alarm(args.timeout_s)

    from tests.support.kafka_tools import SPARK_LIBS

    avro_jar = sorted(SPARK_LIBS.glob("spark-avro_*.jar"))
    if not avro_jar:
        sys.exit("bench/spark_avro.py: no spark-avro jar in tests/jvm/target/spark-libs (run make testdeps)")
    tmp = tempfile.mkdtemp(prefix="kbroker-spark-avro-bench-")
    port = free_port()
    try:
        cfg = {"schema.registry.listener": f"127.0.0.1:{port}", "num.partitions": args.cores}
        with BrokerProcess(os.path.join(tmp, "data"), config=cfg) as broker:
            url = f"http://127.0.0.1:{port}"
            topic = "clicks"
            t0 = time.perf_counter()
            produce(broker.bootstrap, url, topic, args.messages, args.cores)
            print(f"produced {args.messages:,} framed 10-field records in {time.perf_counter() - t0:.1f} s", flush=True)

            from pyspark.sql import SparkSession
            from pyspark.sql.avro.functions import from_avro
            from pyspark.sql.functions import expr

            from broker.spark import KBrokerDataSource

            spark = (
                SparkSession.builder.master(f"local[{args.cores}]")
                .appName("kbroker-spark-avro-bench")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.driver.memory", "2g")
                .config("spark.sql.session.timeZone", "UTC")
                .config("spark.jars", ",".join(str(j) for j in avro_jar))
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(KBrokerDataSource)

            def source(**options):
                r = (
                    spark.read.format("kbroker")
                    .option("kbroker.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", topic)
                )
                for k, v in options.items():
                    r = r.option(k, v)
                return r.load()

            schema_json = json.dumps(SCHEMA)

            def kbroker():
                df = source(valueFormat="avro", **{"schema.registry.url": url}).select("value.*")
                df.write.format("noop").mode("overwrite").save()

            def spark_from_avro():
                df = (
                    source()
                    .select(from_avro(expr("substring(value, 6, length(value) - 5)"), schema_json).alias("v"))
                    .select("v.*")
                )
                df.write.format("noop").mode("overwrite").save()

            def raw():
                source().select("value").write.format("noop").mode("overwrite").save()

            # the two decoders agree on the rows (a sample)
            a = source(valueFormat="avro", **{"schema.registry.url": url}).select("value.*").limit(2000).collect()
            b = (
                source()
                .select(from_avro(expr("substring(value, 6, length(value) - 5)"), schema_json).alias("v"))
                .select("v.*")
                .limit(2000)
                .collect()
            )
            assert [r.asDict() for r in a] == [r.asDict() for r in b], "the two decoders disagree"
            print("the kbroker decoder and from_avro agree on a 2,000-row sample", flush=True)

            sides = {"kbroker": kbroker, "from_avro": spark_from_avro, "raw": raw}
            for fn in sides.values():
                fn()  # warm-up
            times: dict[str, list[float]] = {k: [] for k in sides}
            cpu: dict[str, list[tuple[float, float]]] = {}
            jvm_pid = spark.sparkContext._gateway.proc.pid
            for r in range(args.rounds):
                for name, fn in sides.items():
                    times[name].append(timed(fn, jvm_pid, cpu, name))
                print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), flush=True)

            n, cores = args.messages, args.cores
            print()
            print(
                "| side | median | best | records/s per core (median) | (best) | CPU s: JVM / Python workers (median) |"
            )
            print("|---|---|---|---|---|---|")
            for name, ts in times.items():
                med, best = statistics.median(ts), min(ts)
                jc = statistics.median(c[0] for c in cpu[name])
                pc = statistics.median(c[1] for c in cpu[name])
                print(
                    f"| {name} | {med:.2f} s | {best:.2f} s | {n / med / cores:,.0f} | {n / best / cores:,.0f} "
                    f"| {jc:.2f} / {pc:.2f} |"
                )
            med = {k: statistics.median(v) for k, v in times.items()}
            print(
                f"\nkbroker / from_avro rate: {med['from_avro'] / med['kbroker']:.2f}x (medians of the whole read); "
                f"decode alone (time above the raw read): kbroker {med['kbroker'] - med['raw']:.2f} s, "
                f"from_avro {med['from_avro'] - med['raw']:.2f} s"
            )
            spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
