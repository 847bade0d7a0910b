"""Kafka reads kbroker's disk and kbroker reads Kafka's.

kbroker -> Kafka: a kbroker data directory (several segments a partition, an idempotent
producer's snapshots, a committed offset, a clean shutdown) is checked by Kafka's
DumpLogSegments (`kafka-dump-log --deep-iteration`, `--index-sanity-check`,
`--verify-index-only`, producer snapshots, `--offsets-decoder`) and opened by Kafka's own
storage classes (checkpoint files, partition.metadata, leader epochs, UnifiedLog loading
with and without recovery; tests/jvm/.../DiskChecks.java).

Kafka -> kbroker: a partition directory that an Apache Kafka 4.x broker wrote, copied into
kbroker's data directory while Kafka runs (an active segment with preallocated indexes, as
after a kill -9), is served with identical offsets, timestamps, keys, values and headers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest

from broker.client import Cluster
from tests.groups.helpers import simple_commit
from tests.interop.helpers import read_all
from tests.support.broker_proc import BrokerProcess
from tests.support.kafka_tools import java_program, kafka_tool

pytestmark = pytest.mark.interop

BATCH = re.compile(
    r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) baseSequence: (-?\d+) lastSequence: (-?\d+) "
    r"producerId: (-?\d+) .* compresscodec: (\w+) crc: \d+ isvalid: (\w+)$"
)
RECORD = re.compile(
    r"^\| offset: (\d+) CreateTime: (\d+) keySize: -?\d+ valueSize: -?\d+ sequence: (-?\d+) "
    r"headerKeys: \[(.*)\] key: (.*) payload: (.*)$"
)
SNAPSHOT = re.compile(r"^producerId: (\d+) producerEpoch: (\d+) .* lastSequence: (\d+) lastOffset: (\d+) ")
PER_PARTITION = 750
# recent (Kafka drops producer state older than a day when it loads a log)
BASE_TS = int(time.time()) // 60 * 60_000 - 600_000


def produce_idempotent(
    bootstrap: str,
    topic: str,
    partitions: int,
    per_partition: int,
    value_bytes: int,
    compression: str,
    compressible: bool = False,
) -> dict[int, list[tuple]]:
    """confluent-kafka, idempotent, small batches: partition -> [(key, value, timestamp, header)].
    A value is random hex (compression shrinks it to about half), or with `compressible`
    half random hex and half a run of dots (a batch of several shrinks for sure)."""
    import confluent_kafka as ck

    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "compression.type": compression,
            "linger.ms": 5,
            "batch.num.messages": 20,
        }
    )
    sent: dict[int, list[tuple]] = {q: [] for q in range(partitions)}
    for i in range(partitions * per_partition):
        part = i % partitions
        if compressible:
            value = (os.urandom(value_bytes // 4).hex() + "." * (value_bytes - value_bytes // 4 * 2)).encode()
        else:
            value = os.urandom(value_bytes // 2).hex().encode()
        key, ts, header = f"k{i}".encode(), BASE_TS + i, str(i)
        p.produce(topic, key=key, value=value, partition=part, timestamp=ts, headers=[("h", header.encode())])
        sent[part].append((key, value, ts, header))
        p.poll(0)
    assert p.flush(60) == 0
    return sent


def files(directory, *suffixes) -> str:
    return ",".join(str(f) for f in sorted(directory.iterdir()) if f.suffix in suffixes)


def test_kafka_reads_the_files_kbroker_wrote(tmp_path, topic):
    with BrokerProcess(tmp_path / "data", config={"offsets.topic.num.partitions": 2}) as kb:
        with Cluster(kb.bootstrap) as c:
            c.create_topic(topic, 2, 1, {"segment.bytes": "16384", "index.interval.bytes": "512"})
            topic_id = c.topic(topic, wait_s=10).topic_id
        sent = produce_idempotent(kb.bootstrap, topic, 2, PER_PARTITION, 80, "lz4", compressible=True)
        assert simple_commit(kb.bootstrap, f"{topic}-g", topic, {0: 123}, metadata="m") == {0: 0}
    data = tmp_path / "data"
    parts = [data / f"{topic}-{p}" for p in (0, 1)]
    assert all(len(list(d.glob("*.log"))) >= 3 for d in parts), "several segments a partition"

    # segments (deep iteration) and producer snapshots, one launch for both partitions
    out = kafka_tool(
        "kafka-dump-log",
        "--deep-iteration",
        "--print-data-log",
        "--files",
        ",".join(files(d, ".log", ".snapshot") for d in parts),
    ).stdout
    for p, d in enumerate(parts):
        section = out[out.index(f"Dumping {d}/00000000000000000000.log") :]
        if p == 0:
            section = section[: section.index(f"Dumping {parts[1]}")]
        batches = [BATCH.match(line).groups() for line in section.splitlines() if line.startswith("baseOffset:")]
        records = [RECORD.match(line).groups() for line in section.splitlines() if line.startswith("| offset:")]
        # librdkafka sends a batch uncompressed when compression would not shrink it (a
        # batch of one, say): each batch is lz4 or none, and Kafka decoded lz4 ones
        codecs = [b[6] for b in batches]
        assert {b[7] for b in batches} == {"true"} and set(codecs) <= {"lz4", "none"} and "lz4" in codecs, codecs
        producer_ids = {b[5] for b in batches}
        assert len(producer_ids) == 1 and int(producer_ids.pop()) >= 0
        assert [int(b[3]) for b in batches] == [int(b[0]) for b in batches]  # sequence = offset here
        assert sum(int(b[2]) for b in batches) == PER_PARTITION
        assert [int(r[0]) for r in records] == list(range(PER_PARTITION))
        for (offset, ts, seq, header_keys, key, payload), (k, v, t, _) in zip(records, sent[p]):
            assert (key.encode(), payload.encode(), int(ts), int(seq), header_keys) == (k, v, t, int(offset), "h")
        snapshots = [SNAPSHOT.match(line).groups() for line in section.splitlines() if line.startswith("producerId:")]
        assert snapshots and snapshots[-1][2:] == (str(PER_PARTITION - 1), str(PER_PARTITION - 1))

    indexes = ",".join(files(d, ".index", ".timeindex") for d in parts)
    n_indexes = indexes.count(",") + 1
    sanity = kafka_tool("kafka-dump-log", "--index-sanity-check", "--files", indexes).stdout
    assert sanity.count("passed sanity check.") == n_indexes, sanity
    verify = kafka_tool("kafka-dump-log", "--verify-index-only", "--files", indexes).stdout
    assert [line for line in verify.splitlines() if not line.startswith("Dumping ")] == [], verify

    offsets_logs = ",".join(files(d, ".log") for d in sorted(data.glob("__consumer_offsets-*")))
    decoded = kafka_tool("kafka-dump-log", "--offsets-decoder", "--files", offsets_logs).stdout
    commit = [line for line in decoded.splitlines() if f'"group":"{topic}-g"' in line]
    assert len(commit) == 1 and '"offset":123' in commit[0] and '"metadata":"m"' in commit[0], decoded[-2000:]

    # Kafka's storage classes open a copy (opening may rewrite files)
    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    run = java_program("DiskChecks", copy, topic)
    facts = [json.loads(line) for line in run.lines if line.startswith("{")]
    (data_dir,) = [f for f in facts if f["check"] == "data_dir"]
    assert data_dir["recovery_points"] == data_dir["high_watermarks"] == {"0": PER_PARTITION, "1": PER_PARTITION}
    assert data_dir["log_start_offsets"] == {"0": 0, "1": 0} and data_dir["clean_shutdown"] is True
    assert data_dir["meta"]["version"] == "0" and data_dir["meta"]["broker.id"] == "0"
    for f in [f for f in facts if f["check"] == "partition_files"]:
        assert f["topic_id"] == kafka_uuid_text(topic_id) and f["leader_epochs"] == [[0, 0]]
        assert f["snapshots"], "producer snapshots"
    for f in [f for f in facts if f["check"] == "loaded"]:
        p = f["partition"]
        assert (f["log_start"], f["log_end"], f["latest_epoch"]) == (0, PER_PARTITION, 0)
        assert list(f["producers"].values()) == [PER_PARTITION - 1]
        assert f["records"] == [[o, t, k.decode(), v.decode(), [["h", h]]] for o, (k, v, t, h) in enumerate(sent[p])]
    recovered = [f for f in facts if f["check"] == "recovered"]
    assert [(f["log_start"], f["log_end"]) for f in recovered] == [(0, PER_PARTITION)] * 2


def kafka_uuid_text(u) -> str:
    import base64

    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def test_kbroker_serves_a_partition_apache_kafka_wrote(apache_kafka, tmp_path, topic):
    with Cluster(apache_kafka.bootstrap) as c:
        c.create_topic(topic, 1, 1, {"segment.bytes": "1048576", "index.interval.bytes": "4096"})
        c.topic(topic, wait_s=10)
    sent = produce_idempotent(apache_kafka.bootstrap, topic, 1, 1500, 1400, "zstd")[0]
    written = apache_kafka.log_dir / f"{topic}-0"
    assert len(list(written.glob("*.log"))) >= 2

    with BrokerProcess(tmp_path / "data") as kb:
        with Cluster(kb.bootstrap) as c:
            c.create_topic(topic, 1, 1)
            c.topic(topic, wait_s=10)
    ours = tmp_path / "data" / f"{topic}-0"
    for f in ours.iterdir():
        if f.name != "partition.metadata":  # kbroker's topic id stays
            f.unlink()
    for f in written.iterdir():
        if f.name != "partition.metadata":
            shutil.copy(f, ours / f.name)

    with BrokerProcess(tmp_path / "data") as kb:
        got = read_all(kb.bootstrap, topic, [0])
        assert sorted(o for _, o in got) == list(range(1500))
        for o, (k, v, ts, h) in enumerate(sent):
            r = got[(0, o)]
            assert (r.key, r.value, r.timestamp, r.headers) == (k, v, ts, [("h", h.encode())]), o
        with Cluster(kb.bootstrap) as c:
            assert c.list_offsets(topic, [0], BASE_TS + 700)[0][0] == 700  # Kafka's time index
            assert c.list_offsets(topic, [0], -1)[0][0] == 1500
