"""Tiered storage served by a broker alone (broker/server/tier.py) with the filesystem
storage manager, driven by real clients: librdkafka (confluent-kafka) produces, local
retention leaves only the active segment on the broker's disk, and librdkafka
(read_committed, its default) and the Java client (kafka-console-consumer) read from
offset 0 every record, in order, byte-identical; Kafka's kafka-get-offsets agrees on
earliest, earliest-local and latest-tiered. A damaged remote object answers
KAFKA_STORAGE_ERROR, never other bytes; a restart reads the same; topic deletion removes
every remote object; a compacted topic cannot have remote storage."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition as KTP
from confluent_kafka.admin import AdminClient, NewTopic

from broker.client import BrokerConnection
from broker.protocol.errors import ErrorCode
from tests.support.broker_proc import BrokerProcess
from tests.support.kafka_tools import kafka_tool
from tests.support.ports import free_port

TIERED = {"remote.storage.enable": "true", "segment.bytes": "20000", "local.retention.bytes": "0"}


@pytest.fixture(scope="module")
def nas(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("nas")


@pytest.fixture(scope="module")
def broker(tmp_path_factory, nas):
    config = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "filesystem",
        "rsm.config.dir": str(nas),
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "metrics.listener": f"127.0.0.1:{free_port()}",
    }
    with BrokerProcess(tmp_path_factory.mktemp("tiered") / "data", config=config) as b:
        yield b


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def produce(broker, topic: str, n: int) -> list[tuple[bytes, bytes]]:
    """n records in batches of 100 (a segment of 20 kB holds about 150)."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "enable.idempotence": True})
    sent = []
    for i in range(n):
        key, value = b"k%d" % i, b"value-%d-" % i + bytes([97 + i % 26]) * 100
        p.produce(topic, value, key=key, partition=0)
        sent.append((key, value))
        if i % 100 == 99:
            assert p.flush(30) == 0
    assert p.flush(30) == 0
    return sent


def local_segments(broker, topic: str) -> list[str]:
    return sorted(n for n in os.listdir(broker.data_dir / f"{topic}-0") if n.endswith(".log"))


def wait_tiered(broker, topic: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(local_segments(broker, topic)) > 1:
        assert time.monotonic() < deadline, f"local segments left: {local_segments(broker, topic)}"
        time.sleep(0.2)


def consume(broker, topic: str, n: int) -> list[tuple[bytes, bytes]]:
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"g-{topic}-{time.monotonic()}",
            "enable.auto.commit": False,
        }
    )
    c.assign([KTP(topic, 0, 0)])
    got: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(1)
            if m is None:
                continue
            assert not m.error(), m.error()
            got.append((m.key(), m.value()))
    finally:
        c.close()
    return got


def offsets(broker, topic: str, spec: str) -> dict[int, int]:
    lines = kafka_tool("kafka-get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--time", spec)
    return {int(line.split(":")[1]): int(line.split(":")[2]) for line in lines.lines}


@pytest.fixture(scope="module")
def history(broker, admin):
    admin.create_topics([NewTopic("history", 1, 1, config=TIERED)])["history"].result(30)
    sent = produce(broker, "history", 2000)
    wait_tiered(broker, "history")
    return sent


def test_consumers_read_from_offset_0_what_local_retention_left_only_in_remote_storage(broker, history, nas):
    (active,) = local_segments(broker, "history")
    local_start = int(active.split(".")[0])
    assert local_start > 0
    assert consume(broker, "history", len(history)) == history
    out = kafka_tool(
        "kafka-console-consumer",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        "history",
        "--partition",
        "0",
        "--offset",
        "earliest",
        "--max-messages",
        len(history),
        "--formatter-property",
        "print.key=true",
        timeout=120,
    ).lines
    assert out == [f"{k.decode()}\t{v.decode()}" for k, v in history]
    assert offsets(broker, "history", "earliest") == {0: 0}
    assert offsets(broker, "history", "earliest-local") == {0: local_start}
    assert offsets(broker, "history", "latest-tiered") == {0: local_start - 1}
    # the objects are in Kafka's LocalTieredStorage layout
    (pdir,) = (nas / "kafka-tiered-storage").iterdir()
    assert pdir.name.startswith("history-0-") and any(
        n.name.endswith(".leader_epoch_checkpoint") for n in pdir.iterdir()
    )


def test_a_damaged_remote_object_answers_kafka_storage_error(broker, admin, nas):
    admin.create_topics([NewTopic("damaged", 1, 1, config=TIERED)])["damaged"].result(30)
    produce(broker, "damaged", 600)
    wait_tiered(broker, "damaged")
    pdir = next(p for p in (nas / "kafka-tiered-storage").iterdir() if p.name.startswith("damaged-0-"))
    first = next(p for p in pdir.iterdir() if p.name.startswith("00000000000000000000-") and p.suffix == ".log")
    data = bytearray(first.read_bytes())
    data[200] ^= 0x55
    first.write_bytes(bytes(data))
    part = fetch_v12(broker, "damaged", 0)
    assert part.error_code == ErrorCode.KAFKA_STORAGE_ERROR and not part.records
    assert metric(scrape(broker), "kafka_server_remote_fetch_errors_total") >= 1
    # the rest of the log is served still
    assert len(consume_from(broker, "damaged", 300, 10)) == 10


def fetch_v12(broker, topic: str, offset: int, isolation: int = 0):
    """One Fetch (v12: by topic name) of partition 0 from `offset`."""
    from broker.protocol.messages.fetch import FetchRequest as F

    req = F(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=[],
        topics=[
            F.FetchTopic(
                topic=topic,
                partitions=[F.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)],
            )
        ],
    )
    with BrokerConnection("127.0.0.1", broker.port) as conn:
        return conn.request(req, 12).responses[0].partitions[0]


def consume_from(broker, topic: str, offset: int, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{time.monotonic()}"})
    c.assign([KTP(topic, 0, offset)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    return got


def test_a_compacted_topic_cannot_have_remote_storage(admin):
    fs = admin.create_topics(
        [NewTopic("compacted", 1, 1, config={"remote.storage.enable": "true", "cleanup.policy": "compact"})]
    )
    with pytest.raises(KafkaException) as info:
        fs["compacted"].result(30)
    err = info.value.args[0]
    assert (
        err.code() == KafkaError.INVALID_CONFIG
        and err.str() == "Remote log storage is unsupported for the compacted topics"
    )


def test_topic_deletion_removes_every_remote_object(broker, admin, nas):
    admin.create_topics([NewTopic("doomed", 1, 1, config=TIERED)])["doomed"].result(30)
    produce(broker, "doomed", 600)
    wait_tiered(broker, "doomed")
    root = nas / "kafka-tiered-storage"
    assert any(p.name.startswith("doomed-0-") for p in root.iterdir())
    admin.delete_topics(["doomed"])["doomed"].result(30)
    deadline = time.monotonic() + 30
    while any(p.name.startswith("doomed-0-") for p in root.iterdir()):
        assert time.monotonic() < deadline, "the remote objects of a deleted topic stayed"
        time.sleep(0.2)


def test_after_a_kill_9_and_a_restart_offset_0_reads_the_same(broker, history):
    """The log start offset below the local segments and the remote metadata survive an
    unclean stop: the metadata is replayed from __remote_log_metadata."""
    broker.kill()
    broker.start()
    assert consume(broker, "history", len(history)) == history
    assert offsets(broker, "history", "earliest") == {0: 0}


def test_turning_remote_storage_off_with_delete_on_disable_deletes_the_remote_data(broker, admin, nas):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin.create_topics([NewTopic("retired", 1, 1, config=TIERED)])["retired"].result(30)
    produce(broker, "retired", 600)
    wait_tiered(broker, "retired")
    root = nas / "kafka-tiered-storage"
    assert any(p.name.startswith("retired-0-") and any(p.iterdir()) for p in root.iterdir())

    def alter(*entries: tuple[str, str]) -> None:
        res = ConfigResource(
            "topic",
            "retired",
            incremental_configs=[ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in entries],
        )
        admin.incremental_alter_configs([res])[res].result(30)

    with pytest.raises(KafkaException) as info:  # Kafka's refusal: the remote data would be orphaned
        alter(("remote.storage.enable", "false"))
    assert info.value.args[0].str().startswith("It is invalid to disable remote storage without deleting remote data.")
    alter(("remote.storage.enable", "false"), ("remote.log.delete.on.disable", "true"))
    deadline = time.monotonic() + 30
    while any(p.name.startswith("retired-0-") for p in root.iterdir()):
        assert time.monotonic() < deadline, "the remote data stayed"
        time.sleep(0.2)
    (active,) = local_segments(broker, "retired")
    assert offsets(broker, "retired", "earliest") == {0: int(active.split(".")[0])}


def test_read_committed_skips_aborted_transactions_read_from_remote_storage(broker, admin):
    """A read_committed Fetch of remote segments names the aborted transactions its
    records overlap (from the remote transaction indexes); librdkafka's read_committed
    consumer gets the committed records only."""
    from broker.native import iter_batches

    admin.create_topics([NewTopic("txns", 1, 1, config=TIERED)])["txns"].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tier-txn", "linger.ms": 5})
    p.init_transactions(30)
    committed, aborted_firsts = [], []
    for round_ in range(12):
        p.begin_transaction()
        for i in range(40):
            value = b"r%d-%d-" % (round_, i) + b"z" * 100
            p.produce("txns", value, partition=0)
            if round_ % 3 != 1:
                committed.append(value)
        assert p.flush(30) == 0  # sent before the abort (librdkafka purges what it has not sent)
        if round_ % 3 == 1:
            p.abort_transaction(30)
            aborted_firsts.append(round_ * 41)  # 40 records and a marker per round
        else:
            p.commit_transaction(30)
    # plain records after them: the segments holding the transactions roll and are copied
    committed += [v for _k, v in produce(broker, "txns", 400)]
    wait_tiered(broker, "txns")
    (active,) = local_segments(broker, "txns")
    assert int(active.split(".")[0]) > aborted_firsts[-1] + 40  # every transaction is in remote storage
    offset, named = 0, set()
    while offset < int(active.split(".")[0]):
        part = fetch_v12(broker, "txns", offset, isolation=1)
        assert part.error_code == 0, part.error_code
        batches = list(iter_batches(part.records))
        upper = batches[-1].last_offset + 1
        expected = {f for f in aborted_firsts if offset <= f + 40 and f < upper}
        got = {a.first_offset for a in part.aborted_transactions or []}
        assert expected <= got, (offset, upper, expected, got)
        named |= got
        offset = upper
    assert named == set(aborted_firsts)

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-txns", "isolation.level": "read_committed"})
    c.assign([KTP("txns", 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and len(got) < len(committed):
            m = c.poll(1)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    assert got == committed


def test_a_copy_left_unfinished_by_a_crash_is_deleted_at_the_next_start(broker, admin, history, nas):
    """What a kill -9 between COPY_SEGMENT_STARTED and FINISHED leaves (the record in
    __remote_log_metadata, some objects and a temp file in the store) is deleted when the
    broker starts again: DELETE_SEGMENT_STARTED and FINISHED follow, the objects go, the
    log reads the same. (The kill itself at random points: test_crash.py.)"""
    import uuid

    from broker.tier import metadata as md
    from broker.tier.storage import RemoteLogSegmentId, TopicIdPartition
    from broker.uuids import parse_uuid, uuid_text

    (pdir,) = [p for p in (nas / "kafka-tiered-storage").iterdir() if p.name.startswith("history-0-")]
    topic_id = parse_uuid(pdir.name[len("history-0-") :])
    tip = TopicIdPartition(topic_id, "history", 0)
    orphan = RemoteLogSegmentId(tip, uuid.uuid4())
    started = md.SegmentMetadata(orphan, 100, 199, 0, 0, int(time.time() * 1000), ((0, 100),), 1234)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(md.TOPIC, md.encode(started), partition=md.metadata_partition(tip))
    assert p.flush(30) == 0
    prefix = f"{100:020d}-{uuid_text(orphan.id)}"
    for suffix in (".index", ".timeindex", ".log.tmp-" + "0" * 32):
        (pdir / (prefix + suffix)).write_bytes(b"left by a crash")
    broker.kill()
    broker.start()
    deadline = time.monotonic() + 30
    while any(n.name.startswith(prefix) for n in pdir.iterdir()):
        assert time.monotonic() < deadline, "the orphan's objects stayed"
        time.sleep(0.2)
    assert consume(broker, "history", len(history)) == history


def scrape(broker) -> str:
    import urllib.request

    return urllib.request.urlopen(f"http://{broker.config['metrics.listener']}/metrics", timeout=10).read().decode()


def metric(text: str, name: str, labels: str = "") -> float:
    import re

    m = re.search(rf"^{name}{re.escape(labels)} ([0-9.e+]+)$", text, re.M)
    assert m, f"{name}{labels} not in the metrics"
    return float(m.group(1))


def test_the_metrics_say_what_was_copied_and_read(broker, admin, nas):
    admin.create_topics([NewTopic("metered", 1, 1, config=TIERED)])["metered"].result(30)
    sent = produce(broker, "metered", 600)
    wait_tiered(broker, "metered")
    assert consume(broker, "metered", len(sent)) == sent
    text = scrape(broker)
    labels = '{partition="0",topic="metered"}'
    (pdir,) = [p for p in (nas / "kafka-tiered-storage").iterdir() if p.name.startswith("metered-0-")]
    stored = [f.stat().st_size for f in pdir.iterdir() if f.suffix == ".log"]
    assert metric(text, "kafka_server_remote_log_size_bytes", labels) == sum(stored) > 0
    assert metric(text, "kafka_server_remote_copy_lag_segments", labels) == 0
    assert metric(text, "kafka_server_remote_copy_lag_bytes", labels) == 0
    assert metric(text, "kafka_server_remote_copy_segments_total") >= len(stored)
    assert metric(text, "kafka_server_remote_copy_bytes_total") >= sum(stored)
    assert metric(text, "kafka_server_remote_fetch_bytes_total") >= sum(stored)


def test_offsets_by_timestamp_are_found_in_remote_storage(broker, admin):
    """ListOffsets by time (kafka-get-offsets --time MS) finds the first record at or
    after the time in the remote segments as in the local one."""
    admin.create_topics([NewTopic("timed", 1, 1, config=TIERED)])["timed"].result(30)
    base = int(time.time() * 1000) - 3_600_000  # within the topic's 7 days of retention
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(1000):
        p.produce("timed", b"v" * 100, partition=0, timestamp=base + 10 * i)
        if i % 100 == 99:
            assert p.flush(30) == 0
    wait_tiered(broker, "timed")
    # segments rolled before the first pass took the log still had their producer snapshots
    assert "with an empty one" not in broker.log_tail(5000)
    (active,) = local_segments(broker, "timed")
    local_start = int(active.split(".")[0])
    assert 400 < local_start < 1000
    for target, expected in (
        (base - 5, 0),  # older than everything: the first record
        (base + 55, 6),  # in the first remote segment
        (base + 10 * 350 + 1, 351),  # in a later remote segment, between two records
        (base + 10 * (local_start + 3), local_start + 3),  # in the local segment
    ):
        assert offsets(broker, "timed", str(target)) == {0: expected}, target
