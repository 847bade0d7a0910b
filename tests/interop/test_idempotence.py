"""Idempotent producers against real clients, with answers lost on purpose.

A proxy between the client and the broker cuts the connection instead of delivering some
Produce answers: the batch was written, the client never heard, and it sends the batch
again. With idempotence (confluent-kafka, aiokafka, kafka-python — the last enables it
by default) the broker recognises the retry (producer id, epoch, sequence) and every
message is in the log exactly once; without it the same faults leave
duplicates — the control that shows the faults bite. The dedup state also survives a
kill -9 of the broker (its .snapshot files plus a replay of the log's tail).
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from broker.client import BrokerConnection, Cluster
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.init_producer_id import InitProducerIdRequest
from broker.protocol.messages.produce import ProduceRequest
from tests.interop.helpers import offsets, read_all
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_module
from tests.support.fault_proxy import FaultProxy
from tests.support.ports import free_port

pytestmark = pytest.mark.interop

PRODUCE = 0
PARTITIONS = 3
MESSAGES = 20_000
LOST_ANSWERS = 4


@pytest.fixture
def cluster(tmp_path):
    """(broker, proxy): the broker advertises the proxy, so every client connection
    (bootstrap and the ones metadata points at) goes through it."""
    proxy_port = free_port()
    with BrokerProcess(tmp_path / "data", config={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"}) as b:
        with FaultProxy(b.port, port=proxy_port) as proxy:
            yield b, proxy


def produce_through_faults(proxy, topic: str, idempotent: bool) -> dict[bytes, tuple[int, int]]:
    ck = require_module("confluent_kafka")
    bootstrap = f"127.0.0.1:{proxy.port}"
    with Cluster(bootstrap) as c:
        c.create_topic(topic, PARTITIONS, 1)
    delivered, errors = {}, []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered[msg.value()] = (msg.partition(), msg.offset())

    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": idempotent,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 500,
            "retry.backoff.ms": 50,
            "max.in.flight.requests.per.connection": 5,
        }
    )
    # warm up (metadata, producer id), then lose answers in the middle of the run
    for i in range(MESSAGES):
        if i == 1000:
            assert p.flush(30) == 0
            proxy.drop_answers(PRODUCE, LOST_ANSWERS)
        p.produce(topic, value=b"m-%06d" % i, key=b"k%d" % (i % 17), on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(120) == 0
    assert not errors, errors[:3]
    assert len(delivered) == MESSAGES
    assert proxy.dropped.get(PRODUCE) == LOST_ANSWERS  # the faults happened
    return delivered


def stored_values(bootstrap: str, topic: str) -> Counter:
    got = read_all(bootstrap, topic, range(PARTITIONS))
    ends = offsets(bootstrap, topic, range(PARTITIONS))
    assert len(got) == sum(hi - lo for lo, hi in ends.values())  # offsets dense, nothing skipped
    return Counter(r.value for r in got.values())


def test_confluent_idempotent_producer_writes_each_message_once_despite_lost_answers(cluster):
    broker, proxy = cluster
    delivered = produce_through_faults(proxy, "idem", idempotent=True)
    counts = stored_values(f"127.0.0.1:{proxy.port}", "idem")
    assert set(counts) == set(delivered)
    assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1][:5]
    # and every delivery report names the one offset the message is stored at
    got = read_all(f"127.0.0.1:{proxy.port}", "idem", range(PARTITIONS))
    assert {r.value: (r.partition, r.offset) for r in got.values()} == delivered


def test_without_idempotence_the_same_faults_duplicate(cluster):
    broker, proxy = cluster
    produce_through_faults(proxy, "plain", idempotent=False)
    counts = stored_values(f"127.0.0.1:{proxy.port}", "plain")
    assert len(counts) == MESSAGES
    assert sum(n - 1 for n in counts.values()) > 0  # the retries were written again


def _batch(pid: int, epoch: int, seq: int, values) -> bytearray:
    from broker.native import BatchBuilder

    b = BatchBuilder("lz4", producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    ts = int(time.time() * 1000)
    for v in values:
        b.append(ts, b"key", v)
    return bytearray(b.build())


def _produce(conn, topic, records, acks=-1):
    P = ProduceRequest
    r = conn.request(
        P(
            transactional_id=None,
            acks=acks,
            timeout_ms=10000,
            topic_data=[
                P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=0, records=records)])
            ],
        )
    )
    part = r.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def test_dedup_state_survives_kill_9(tmp_path):
    with BrokerProcess(tmp_path / "data") as broker:
        with Cluster(broker.bootstrap) as c:
            c.create_topic("idem-raw", 1, 1)
        with BrokerConnection("127.0.0.1", broker.port, timeout=10) as conn:
            ans = conn.request(
                InitProducerIdRequest(
                    transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
                )
            )
            assert ans.error_code == 0 and ans.producer_id >= 0 and ans.producer_epoch == 0
            pid = ans.producer_id
            for seq in range(0, 30, 3):
                assert _produce(conn, "idem-raw", _batch(pid, 0, seq, [b"a", b"b", b"c"])) == (0, seq)
            # a retry of the last batch: the first write's offset, nothing appended
            assert _produce(conn, "idem-raw", _batch(pid, 0, 27, [b"a", b"b", b"c"])) == (0, 27)
            # the same retry with acks=1 is answered the same way
            assert _produce(conn, "idem-raw", _batch(pid, 0, 24, [b"a", b"b", b"c"]), acks=1) == (0, 24)
            # a gap; a new epoch (a client's epoch bump) restarts at 0 and fences the old one
            err, _ = _produce(conn, "idem-raw", _batch(pid, 0, 31, [b"x"]))
            assert err == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            assert _produce(conn, "idem-raw", _batch(pid, 1, 0, [b"x"])) == (0, 30)
            err, _ = _produce(conn, "idem-raw", _batch(pid, 0, 30, [b"y"]))
            assert err == ErrorCode.INVALID_PRODUCER_EPOCH
            # a second InitProducerId is a new producer (Kafka: no transactional id, new id)
            again = conn.request(
                InitProducerIdRequest(
                    transactional_id=None, transaction_timeout_ms=60000, producer_id=pid, producer_epoch=1
                )
            )
            assert again.producer_id not in (-1, pid) and again.producer_epoch == 0
        assert offsets(broker.bootstrap, "idem-raw", [0])[0] == (0, 31)
        broker.kill()
        broker.start()
        with BrokerConnection("127.0.0.1", broker.port, timeout=10) as conn:
            assert _produce(conn, "idem-raw", _batch(pid, 1, 0, [b"x"])) == (0, 30)
            err, _ = _produce(conn, "idem-raw", _batch(pid, 0, 30, [b"y"]))
            assert err == ErrorCode.INVALID_PRODUCER_EPOCH
            err, _ = _produce(conn, "idem-raw", _batch(pid, 1, 2, [b"y"]))
            assert err == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            assert _produce(conn, "idem-raw", _batch(pid, 1, 1, [b"y"])) == (0, 31)
        broker.restart()  # clean: from the shutdown snapshot
        with BrokerConnection("127.0.0.1", broker.port, timeout=10) as conn:
            assert _produce(conn, "idem-raw", _batch(pid, 1, 1, [b"y"])) == (0, 31)
        assert offsets(broker.bootstrap, "idem-raw", [0])[0] == (0, 32)
        snaps = sorted(p.name for p in (broker.data_dir / "idem-raw-0").glob("*.snapshot"))
        assert snaps and snaps[-1] == "00000000000000000032.snapshot"


def test_aiokafka_idempotent_producer_writes_each_message_once_despite_lost_answers(cluster):
    import asyncio

    aiokafka = require_module("aiokafka")
    broker, proxy = cluster
    bootstrap = f"127.0.0.1:{proxy.port}"
    with Cluster(bootstrap) as c:
        c.create_topic("idem-aio", PARTITIONS, 1)
    n = 3000

    async def run() -> dict:
        p = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            enable_idempotence=True,
            linger_ms=5,
            retry_backoff_ms=50,
            request_timeout_ms=10000,
        )
        await p.start()
        try:
            futs = []
            for i in range(n):
                if i == 300:
                    await asyncio.gather(*futs)
                    proxy.drop_answers(PRODUCE, 2)
                futs.append(await p.send("idem-aio", value=b"a-%05d" % i, key=b"k%d" % (i % 7)))
            metas = await asyncio.wait_for(asyncio.gather(*futs), 120)
        finally:
            await p.stop()
        return {b"a-%05d" % i: (m.partition, m.offset) for i, m in enumerate(metas)}

    delivered = asyncio.run(run())
    assert proxy.dropped.get(PRODUCE) == 2
    counts = stored_values(bootstrap, "idem-aio")
    assert set(counts) == set(delivered) and max(counts.values()) == 1


def test_kafka_python_idempotent_producer_writes_each_message_once_despite_lost_answers(cluster):
    kafka = require_module("kafka")
    broker, proxy = cluster
    bootstrap = f"127.0.0.1:{proxy.port}"
    with Cluster(bootstrap) as c:
        c.create_topic("idem-kp", PARTITIONS, 1)
    n = 3000
    # kafka-python enables idempotence by default (acks=all)
    p = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5, retry_backoff_ms=50, request_timeout_ms=10000
    )
    try:
        futs = []
        for i in range(n):
            if i == 300:
                p.flush(30)
                proxy.drop_answers(PRODUCE, 2)
            futs.append(p.send("idem-kp", value=b"p-%05d" % i, key=b"k%d" % (i % 7)))
        p.flush(120)
        metas = [f.get(timeout=60) for f in futs]
    finally:
        p.close(10)
    delivered = {b"p-%05d" % i: (m.partition, m.offset) for i, m in enumerate(metas)}
    assert proxy.dropped.get(PRODUCE) == 2
    counts = stored_values(bootstrap, "idem-kp")
    assert set(counts) == set(delivered) and max(counts.values()) == 1
