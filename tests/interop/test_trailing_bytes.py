"""Bytes after a request's body are ignored, as Apache Kafka ignores them: the broker
parses what the schema of the request's version says and answers normally.

Real clients send such requests. librdkafka reserves 4 bytes for an array count and, for
flexible versions, shrinks them to the uvarint it finally writes; where it never writes
the count (Metadata v9+ asking for all topics, OffsetFetch v7 asking for all partitions
in librdkafka 2.0.2) the 4 bytes stay, the first one reads as "null array" and the rest
shift into the following fields, leaving bytes after the body. librdkafka 2.0.2 also
ends ListGroups v4 with two empty tagged-field sections. Covered here: every API the
broker serves at every version it advertises, with bytes appended; confluent-kafka's
AdminClient.list_topics() and a regex subscription (what the installed librdkafka
sends); OffsetFetch v7 and ListGroups v4 byte for byte as librdkafka 2.0.2 sends them.
"""

from __future__ import annotations

import struct
import time

import pytest

from broker.client import BrokerConnection, Cluster
from broker.protocol import codec
from broker.protocol.api import API_SPECS
from broker.protocol.messages.fetch import FetchRequest
from broker.protocol.messages.list_offsets import ListOffsetsRequest
from broker.protocol.messages.metadata import MetadataRequest
from broker.protocol.messages.offset_fetch import OffsetFetchRequest
from broker.protocol.messages.produce import ProduceRequest
from broker.server.handlers import HANDLERS
from tests.interop.helpers import RawConnection, batch, frame
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_module

pytestmark = pytest.mark.interop

TOPIC = "trailing"
GROUP = "trailing-group"
EXTRA = b"\x00\x01\xfe\xff\x00\x00\x00\x00"
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(
        tmp_path_factory.mktemp("trailing") / "data",
        config={
            "group.initial.rebalance.delay.ms": 100,
            "group.min.session.timeout.ms": 1000,
            "offsets.topic.num.partitions": 1,
        },
    ) as b:
        with Cluster(b.bootstrap) as c:
            c.create_topic(TOPIC, 2, 1)
        yield b


def _request(api_key: int, version: int):
    """A small well-formed request of the api: defaults, with a topic where it needs one
    to say something, and nothing that makes the broker wait (max_wait 0, no join)."""
    cls = API_SPECS[api_key].request
    if api_key == 0:
        P = ProduceRequest
        return P(
            acks=1,
            timeout_ms=5000,
            topic_data=[
                P.TopicProduceData(
                    name=TOPIC,
                    partition_data=[P.PartitionProduceData(index=0, records=batch([b"trailing-%d" % version]))],
                )
            ],
        )
    if api_key == 1:
        F = FetchRequest
        return F(
            max_wait_ms=0,
            min_bytes=0,
            topics=[
                F.FetchTopic(
                    topic=TOPIC, partitions=[F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 16)]
                )
            ],
        )
    if api_key == 2:
        L = ListOffsetsRequest
        return L(
            replica_id=-1,
            topics=[
                L.ListOffsetsTopic(name=TOPIC, partitions=[L.ListOffsetsPartition(partition_index=1, timestamp=-1)])
            ],
        )
    if api_key == 3:
        return MetadataRequest(topics=None if version >= 1 else [], allow_auto_topic_creation=False)
    if api_key == 9:
        O = OffsetFetchRequest
        if version >= 8:
            return O(groups=[O.OffsetFetchRequestGroup(group_id=GROUP, topics=None)])
        return O(
            group_id=GROUP,
            topics=None if version >= 2 else [O.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0, 1])],
        )
    if api_key == 22:
        return cls(transactional_id=None, transaction_timeout_ms=60000)
    return cls()


# Responses that legitimately differ between two identical requests.
_NOT_REPEATABLE = {0, 22}  # Produce (the offset moves on), InitProducerId (a fresh id)

CASES = [(key, v) for key, m in sorted(HANDLERS.items()) for v in range(m.MIN_VERSION, m.MAX_VERSION + 1)]


def _answer(broker, data: bytes, api_key: int, version: int, cid: int):
    with RawConnection(broker.port) as rc:
        assert rc.send(data)
        f = rc.read_frame(30.0)
    name = HANDLERS[api_key].__name__.rsplit(".", 1)[-1]
    assert f is not None, f"{name} v{version}: connection closed instead of an answer"
    header, resp = codec.decode_response(api_key, version, f)
    assert header.correlation_id == cid
    if hasattr(resp, "throttle_time_ms"):
        resp.throttle_time_ms = 0
    return resp


@pytest.mark.parametrize(
    "api_key,version", CASES, ids=[f"{HANDLERS[k].__name__.rsplit('.', 1)[-1]}-v{v}" for k, v in CASES]
)
def test_every_api_and_version_answers_a_request_with_bytes_after_its_body(broker, api_key, version):
    with BrokerConnection("127.0.0.1", broker.port) as conn:
        assert conn.versions[api_key] == (HANDLERS[api_key].MIN_VERSION, HANDLERS[api_key].MAX_VERSION)
    req = _request(api_key, version)
    plain = codec.encode_request(api_key, version, 11, "trailing", req)
    with_extra = frame(plain[4:] + EXTRA)
    got = _answer(broker, with_extra, api_key, version, 11)
    if api_key in _NOT_REPEATABLE:
        if api_key == 0:
            p = got.responses[0].partition_responses[0]
            assert (p.index, p.error_code) == (0, 0) and p.base_offset >= 0
        else:
            assert got.error_code == 0 and got.producer_id >= 0
        return
    assert got == _answer(broker, plain, api_key, version, 11)


# ---------------------------------------------------------------------- confluent-kafka today


def test_confluent_admin_list_topics_without_a_topic(broker):
    """librdkafka asks for all topics with Metadata v12 carrying 3 bytes after the body."""
    ck = require_module("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    md = admin.list_topics(timeout=30)
    assert TOPIC in md.topics and len(md.topics[TOPIC].partitions) == 2
    assert md.topics[TOPIC].error is None
    assert ck.version()[0] >= "2"


def test_confluent_consumer_subscribed_to_a_regex(broker):
    """A pattern subscription is matched against all-topics Metadata: the consumer gets
    the matching topics' partitions and their messages, and nothing else."""
    ck = require_module("confluent_kafka")
    with Cluster(broker.bootstrap) as c:
        for name in ("orders-eu", "orders-us", "invoices"):
            c.create_topic(name, 1, 1)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for name in ("orders-eu", "orders-us", "invoices"):
        for i in range(5):
            p.produce(name, value=f"{name}-{i}".encode())
    assert p.flush(TIMEOUT_S) == 0
    c = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "enable.auto.commit": False,
        }
    )
    try:
        assigned = []
        c.subscribe(["^orders.*"], on_assign=lambda _c, parts: assigned.extend((t.topic, t.partition) for t in parts))
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 10:
            assert time.monotonic() < deadline, f"regex consumer got {got} (assigned {assigned})"
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(m.value().decode())
        assert sorted(assigned) == [("orders-eu", 0), ("orders-us", 0)]
        assert sorted(got) == sorted(f"orders-{r}-{i}" for r in ("eu", "us") for i in range(5))
        c.commit(asynchronous=False)
    finally:
        c.close()


# ---------------------------------------------------------------------- librdkafka 2.0.2's shapes


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact_str(s: str) -> bytes:
    return _uvarint(len(s) + 1) + s.encode()


def _header_v2(api_key: int, version: int, cid: int, client_id: bytes = b"rdkafka") -> bytes:
    return struct.pack(">hhih", api_key, version, cid, len(client_id)) + client_id + b"\x00"


def offset_fetch_v7_all_partitions(cid: int, group: str) -> bytes:
    """librdkafka 2.0.2's OffsetFetch v7 for all partitions: the topics count is the
    4-byte placeholder it never finalizes, then RequireStable, then the request's empty
    tagged fields. Parsed as the schema says: topics null, require_stable false, no tags;
    3 bytes remain."""
    return frame(
        _header_v2(9, 7, cid)
        + _compact_str(group)
        + b"\x00\x00\x00\x00"  # Topics: placeholder (0x00 = null array)
        + b"\x01"  # RequireStable (read_committed)
        + b"\x00"
    )  # tagged fields


def list_groups_v4(cid: int) -> bytes:
    """librdkafka 2.0.2's ListGroups v4 with no state filter: the empty StatesFilter, the
    tags it writes itself, and the tags its request finalizer writes again: 1 byte remains."""
    return frame(_header_v2(16, 4, cid) + b"\x01" + b"\x00" + b"\x00")


def test_listing_groups_and_their_offsets_as_librdkafka_2_0_2_asks(broker):
    ck = require_module("confluent_kafka")
    with Cluster(broker.bootstrap) as c:
        c.create_topic("listed", 2, 1)
    group = "listed-group"
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(
            offsets=[ck.TopicPartition("listed", 0, 7), ck.TopicPartition("listed", 1, 3)], asynchronous=False
        )
    finally:
        consumer.close()
    with RawConnection(broker.port) as rc:
        assert rc.send(list_groups_v4(21))
        f = rc.read_frame()
        assert f is not None, "ListGroups v4 with a byte after its body: connection closed"
        header, resp = codec.decode_response(16, 4, f)
        assert header.correlation_id == 21 and resp.error_code == 0
        assert group in {g.group_id for g in resp.groups}
        assert rc.send(offset_fetch_v7_all_partitions(22, group))
        f = rc.read_frame()
        assert f is not None, "OffsetFetch v7 with bytes after its body: connection closed"
        header, resp = codec.decode_response(9, 7, f)
        assert header.correlation_id == 22 and resp.error_code == 0
        got = {
            (t.name, p.partition_index): (p.committed_offset, p.error_code) for t in resp.topics for p in t.partitions
        }
        assert got == {("listed", 0): (7, 0), ("listed", 1): (3, 0)}
