"""Schema validation on produce (docs/schema-registry.md "Validation on produce"): a
topic with confluent.value/key.schema.validation refuses a batch holding a record that is
not framed (magic byte 0, a 4-byte schema id) or whose id is not registered under its
subject, with INVALID_RECORD and each bad record's index (KIP-467's record_errors, v8+),
as the wire, Apache Kafka's Java producer and librdkafka (confluent-kafka) see it."""

from __future__ import annotations

import json
import struct
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from broker.client import BrokerConnection, Cluster
from broker.native import BatchBuilder
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.produce import ProduceRequest
from tests.registry.conftest import Registry, registry_broker
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import missing, require_binary
from tests.support.kafka_tools import java_program, kafka_tool

ORDER = '{"type":"record","name":"Order","namespace":"com.acme","fields":[{"name":"id","type":"long"}]}'
CLICK = '{"type":"record","name":"Click","namespace":"com.acme","fields":[{"name":"page","type":"string"}]}'
VALIDATE_VALUES = {"confluent.value.schema.validation": "true"}


def framed(schema_id: int, payload: bytes = b"\x02") -> bytes:
    return b"\x00" + struct.pack(">i", schema_id) + payload


def batch(values, keys=None, codec="none", **kwargs) -> bytes:
    b = BatchBuilder(codec, **kwargs)
    for i, v in enumerate(values):
        b.append(int(time.time() * 1000), None if keys is None else keys[i], v)
    return b.build()


def produce(broker: BrokerProcess, topic: str, records: bytes, version: int = 12):
    req = ProduceRequest(
        acks=-1,
        timeout_ms=10000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)]
            )
        ],
    )
    with BrokerConnection("127.0.0.1", broker.port) as conn:
        return conn.request(req, version).responses[0].partition_responses[0]


def record_errors(r) -> list[tuple[int, str]]:
    return [(e.batch_index, e.batch_index_error_message) for e in r.record_errors]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with registry_broker(tmp_path_factory, name="validation") as b:
        yield b


@pytest.fixture(scope="module")
def registry(broker) -> Registry:
    return Registry(f"http://127.0.0.1:{broker.registry_port}")


@pytest.fixture(scope="module")
def cluster(broker):
    with Cluster(broker.bootstrap) as c:
        yield c


_topics = iter(range(10_000))


def new_topic(cluster: Cluster, configs: dict[str, str] | None = None) -> str:
    name = f"validated-{next(_topics)}"
    cluster.create_topic(name, 1, 1, configs)
    cluster.topic(name, wait_s=10)
    return name


@pytest.fixture(scope="module")
def orders(cluster, registry):
    """A topic validating its values, an id registered under its subject and one that is not."""
    topic = new_topic(cluster, VALIDATE_VALUES)
    status, body = registry.register(f"{topic}-value", ORDER)
    assert status == 200, body
    status, other = registry.register("elsewhere-value", CLICK)
    assert status == 200, other
    return topic, body["id"], other["id"]


def test_wrong_id_unframed_valid_and_tombstone_on_the_wire(broker, orders):
    """One batch: a valid record, an id registered under another subject, an unframed
    value, a tombstone — refused whole, the two bad records named by index; then the
    valid record and the tombstone alone are taken."""
    topic, good, wrong = orders
    r = produce(broker, topic, batch([framed(good), framed(wrong), b"plain", None]))
    assert r.error_code == ErrorCode.INVALID_RECORD
    errors = record_errors(r)
    assert [i for i, _ in errors] == [1, 2]
    assert f"schema id {wrong} is not registered under subject {topic}-value" in errors[0][1]
    assert "not framed" in errors[1][1]
    assert r.error_message and "record 1" in r.error_message
    ok = produce(broker, topic, batch([framed(good), None]))
    assert (ok.error_code, ok.base_offset) == (0, 0)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_checked(broker, orders, codec):
    topic, good, _ = orders
    r = produce(broker, topic, batch([framed(good)] * 20 + [b"\x00\x00"], codec=codec))
    assert r.error_code == ErrorCode.INVALID_RECORD and [i for i, _ in record_errors(r)] == [20]
    assert produce(broker, topic, batch([framed(good)] * 20, codec=codec)).error_code == 0


def test_older_versions_get_the_error_code_only(broker, orders):
    """Produce v7 has no record_errors: INVALID_RECORD alone (and its message from v8)."""
    topic, _, wrong = orders
    r = produce(broker, topic, batch([framed(wrong)]), version=7)
    assert r.error_code == ErrorCode.INVALID_RECORD
    assert r.record_errors == []


def test_an_idempotent_batch_is_refused_whole_and_the_producer_goes_on(broker, orders):
    topic, good, wrong = orders
    before = produce(broker, topic, batch([framed(good)])).base_offset
    idem = batch([framed(good), framed(wrong)], producer_id=4242, producer_epoch=0, base_sequence=0)
    r = produce(broker, topic, idem)
    assert r.error_code == ErrorCode.INVALID_RECORD and [i for i, _ in record_errors(r)] == [1]
    after = produce(broker, topic, batch([framed(good)]))
    assert after.base_offset == before + 1  # nothing of the refused batch was written


def test_a_fresh_registration_is_valid_at_once(broker, registry, orders):
    """Read-your-writes: a version registered through this broker validates the next produce."""
    topic, _, _ = orders
    evolved = ORDER.replace('"type":"long"}]', '"type":"long"},{"name":"note","type":"string","default":""}]')
    status, body = registry.register(f"{topic}-value", evolved)
    assert status == 200, body
    assert produce(broker, topic, batch([framed(body["id"])])).error_code == 0


def test_a_deleted_version_is_no_longer_valid(broker, registry, cluster):
    topic = new_topic(cluster, VALIDATE_VALUES)
    status, body = registry.register(f"{topic}-value", CLICK.replace("Click", "Gone"))
    assert status == 200, body
    assert produce(broker, topic, batch([framed(body["id"])])).error_code == 0
    status, _ = registry.call("DELETE", f"/subjects/{topic}-value/versions/1")
    assert status == 200
    assert produce(broker, topic, batch([framed(body["id"])])).error_code == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize(
    "strategy,subject",
    [
        ("io.confluent.kafka.serializers.subject.RecordNameStrategy", "com.acme.{name}"),
        ("TopicRecordNameStrategy", "{topic}-com.acme.{name}"),
    ],
)
def test_record_name_strategies_on_keys(broker, registry, cluster, strategy, subject):
    """Keys validated under the record's full name: an id registered under the subject of
    its own record name passes; one registered under another name's subject does not."""
    topic = new_topic(
        cluster, {"confluent.key.schema.validation": "true", "confluent.key.subject.name.strategy": strategy}
    )
    name = f"Key{next(_topics)}"
    schema = json.dumps({"type": "record", "name": name, "namespace": "com.acme", "fields": []})
    status, body = registry.register(subject.format(topic=topic, name=name), schema)
    assert status == 200, body
    status, mislabelled = registry.register(subject.format(topic=topic, name="Other"), schema.replace(name, name + "X"))
    assert status == 200, mislabelled
    assert produce(broker, topic, batch([b"any value"], keys=[framed(body["id"])])).error_code == 0
    r = produce(broker, topic, batch([None, None], keys=[None, framed(mislabelled["id"])]))
    assert r.error_code == ErrorCode.INVALID_RECORD and [i for i, _ in record_errors(r)] == [1]
    assert "key's schema id" in record_errors(r)[0][1]


def test_a_topic_without_validation_takes_anything(broker, cluster):
    topic = new_topic(cluster)
    assert produce(broker, topic, batch([b"plain", b""])).error_code == 0


def test_configs_are_checked_described_and_altered(broker, cluster, orders):
    with pytest.raises(KafkaProtocolError) as info:
        new_topic(cluster, {"confluent.value.subject.name.strategy": "com.example.MyStrategy"})
    assert info.value.code == ErrorCode.INVALID_CONFIG and "subject name strategy" in str(info.value)
    topic = new_topic(cluster)
    cluster.alter_topic_configs(topic, {"confluent.value.schema.validation": "true"})
    described = {c.name: c.value for c in cluster.describe_configs(2, topic)}
    assert described["confluent.value.schema.validation"] == "true"
    assert described["confluent.value.subject.name.strategy"] == (
        "io.confluent.kafka.serializers.subject.TopicNameStrategy"
    )
    deadline = time.monotonic() + 10
    while produce(broker, topic, batch([b"plain"])).error_code != ErrorCode.INVALID_RECORD:
        assert time.monotonic() < deadline, "validation never applied"
        time.sleep(0.1)
    cluster.alter_topic_configs(topic, delete=["confluent.value.schema.validation"])
    deadline = time.monotonic() + 10
    while produce(broker, topic, batch([b"plain"])).error_code != 0:
        assert time.monotonic() < deadline, "validation never lifted"
        time.sleep(0.1)


def test_without_a_registry_the_configs_are_refused(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("no-registry") / "data") as b, Cluster(b.bootstrap) as c:
        with pytest.raises(KafkaProtocolError) as info:
            c.create_topic("wants-validation", 1, 1, VALIDATE_VALUES)
        assert info.value.code == ErrorCode.INVALID_CONFIG and "no schema registry" in str(info.value)
        c.create_topic("plain", 1, 1)
        with pytest.raises(KafkaProtocolError) as info:
            c.alter_topic_configs("plain", {"confluent.key.schema.validation": "true"})
        assert info.value.code == ErrorCode.INVALID_CONFIG


def test_the_java_producer_reports_each_record(broker, orders):
    topic, good, wrong = orders
    run = java_program("ValidationChecks", broker.bootstrap, topic, good, wrong, timeout=120)
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    sent = [s for s in lines if s["check"] == "sent"]
    single = [s for s in sent if s["batch"] == "single"]
    assert [s["error"] for s in single] == ["InvalidRecordException", "InvalidRecordException", "none"]
    assert f"schema id {wrong}" in single[0]["message"] and "not framed" in single[1]["message"]
    together = [s for s in sent if s["batch"] == "together"]
    # the batch is refused whole: the bad record with its own reason, the others as part of it
    assert [s["error"] for s in together] == ["KafkaException", "InvalidRecordException", "KafkaException"]
    assert "not framed" in together[1]["message"]
    assert "invalid records" in together[0]["message"]


def test_librdkafka_reports_invalid_record(broker, orders):
    topic, good, wrong = orders
    reports: list = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "enable.idempotence": True})
    for value in (framed(wrong), b"not framed", framed(good)):
        p.produce(topic, value, partition=0, on_delivery=lambda err, msg: reports.append((err, msg)))
        assert p.flush(30) == 0
    codes = [err.code() if err else None for err, _ in reports]
    assert codes == [KafkaError.INVALID_RECORD, KafkaError.INVALID_RECORD, None]
    assert reports[2][1].offset() >= 0


@pytest.mark.parametrize(
    "schema_type,schema,name",
    [
        ("PROTOBUF", 'syntax = "proto3";\npackage acme.v1;\nmessage Shipment { string id = 1; }\n', "acme.v1.Shipment"),
        ("JSON", '{"title":"acme.Refund","type":"object","properties":{"id":{"type":"string"}}}', "acme.Refund"),
    ],
)
def test_record_names_of_protobuf_and_json_schemas(broker, registry, cluster, schema_type, schema, name):
    """RecordNameStrategy on values: Protobuf's first message's full name, JSON Schema's title."""
    topic = new_topic(cluster, {**VALIDATE_VALUES, "confluent.value.subject.name.strategy": "RecordNameStrategy"})
    status, body = registry.register(name, schema, schema_type)
    assert status == 200, body
    status, elsewhere = registry.register(f"{name}.Not", schema.replace("id", "other_id"), schema_type)
    assert status == 200, elsewhere
    assert produce(broker, topic, batch([framed(body["id"])])).error_code == 0
    assert produce(broker, topic, batch([framed(elsewhere["id"])])).error_code == ErrorCode.INVALID_RECORD


def test_a_transaction_of_valid_records_commits_and_a_bad_one_aborts(broker, orders):
    """Transactional batches are checked like any other (the general produce path); the
    commit's markers are not records to validate. (After the refusal librdkafka goes on
    with the next sequence number without bumping the epoch, a sequence gap Kafka's
    producer state checks refuse too, as we read them: its next transaction would have to
    be aborted again; not the broker's to change.)"""
    topic, good, _ = orders
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"validated-{topic}"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, framed(good), partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    errors = []
    p.produce(topic, b"not framed", partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(30)
    assert [e.code() for e in errors] == [KafkaError.INVALID_RECORD]
    p.abort_transaction(30)  # what librdkafka asks for after INVALID_RECORD in a transaction


def test_kafka_configs_sets_them_and_kafka_topics_does_not(broker, cluster):
    """Apache Kafka's kafka-configs alters Confluent's keys; Apache Kafka's kafka-topics
    refuses them before asking the broker (it checks topic config names against its own
    list, which Confluent's kafka-topics extends)."""
    topic = new_topic(cluster)
    refused = kafka_tool(
        "kafka-topics",
        "--bootstrap-server",
        broker.bootstrap,
        "--create",
        "--topic",
        f"{topic}-by-kafka-topics",
        "--config",
        "confluent.value.schema.validation=true",
        timeout=120,
        check=False,
    )
    assert refused.returncode != 0 and "Unknown topic config name" in refused.stdout + refused.stderr
    kafka_tool(
        "kafka-configs",
        "--bootstrap-server",
        broker.bootstrap,
        "--alter",
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--add-config",
        "confluent.value.schema.validation=true",
        timeout=120,
    )
    deadline = time.monotonic() + 10
    while produce(broker, topic, batch([b"plain"])).error_code != ErrorCode.INVALID_RECORD:
        assert time.monotonic() < deadline, "kafka-configs' change never applied"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def kgen(tmp_path_factory) -> Path:
    """bench/native/kgen (bench/schema_validation.py's generator), built into a temporary dir."""
    if not Path("/usr/include/librdkafka/rdkafka.h").exists():
        missing(
            "librdkafka-dev (librdkafka's headers, for bench/native/kgen)",
            "apt-get install -y librdkafka-dev, or run 'make test' as root",
        )
    require_binary("cc", "gcc")
    out = tmp_path_factory.mktemp("kgen")
    repo = Path(__file__).resolve().parents[2]
    make = [
        "make",
        "-s",
        "-C",
        str(repo),
        "bench-tools",
        f"KGEN={out / 'kgen'}",
        f"INGEST={out / 'ingest'}",
        f"ALLOC_AHEAD={out / 'alloc_ahead'}",
    ]
    p = subprocess.run(make, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return out / "kgen"


def test_the_benchmarks_generator_frames_its_values(broker, orders, kgen):
    """kgen --schema-id (bench/schema_validation.py): librdkafka's batches of framed values
    are taken whole; the same load unframed is refused, every record reported."""
    topic, good, _ = orders

    def run(*extra):
        argv = [str(kgen), "produce", "-b", broker.bootstrap, "-t", topic, "-s", 100, "--count", 2000, *extra]
        p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120)
        return p.returncode, json.loads(p.stdout.strip().splitlines()[-1])

    rc, framed_run = run("--acks", "all", "--idempotence", "--schema-id", good)
    assert rc == 0 and framed_run["delivery_errors"] == 0 and framed_run["messages"] == 2000, framed_run
    rc, plain_run = run("--acks", "1")
    assert rc != 0 and plain_run["delivery_errors"] == 2000, plain_run
    assert "INVALID_RECORD" in plain_run["first_error"] or "validate record" in plain_run["first_error"], plain_run
    too_short = subprocess.run(
        [str(kgen), "produce", "-b", "x:1", "-t", "t", "-s", "4", "--count", "1", "--schema-id", "1"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert too_short.returncode == 2 and "at least 5" in too_short.stderr
