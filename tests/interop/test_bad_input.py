"""Bad input never crashes the broker or damages stored data: the client gets the
protocol's error code, or its connection is closed where Kafka closes it; everyone else
carries on. Requests are built with broker.protocol and broker.native and, where a
client would refuse to send them, written to a plain socket.

Every test ends by reading back the messages acknowledged at the start (the "victim"
topic): all still there, byte-identical, at the same offsets.
"""

from __future__ import annotations

import random
import socket
import struct
import time
import uuid

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from broker.client import BrokerConnection, ClientError, Cluster
from broker.native import crc32c
from broker.protocol import codec
from broker.protocol.api import API_SPECS
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.api_versions import ApiVersionsRequest
from broker.protocol.messages.create_topics import CreateTopicsRequest
from broker.protocol.messages.fetch import FetchRequest
from broker.protocol.messages.list_offsets import ListOffsetsRequest
from broker.protocol.messages.metadata import MetadataRequest
from broker.protocol.messages.produce import ProduceRequest
from broker.protocol.types import ProtocolDecodeError
from tests.interop.helpers import (
    RawConnection,
    batch,
    corrupt_crc,
    fetch_once,
    frame,
    offsets,
    raw_header,
    raw_request,
    read_all,
    records_of,
)
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_module

pytestmark = pytest.mark.interop

MAX_REQUEST = 1048576
VICTIM = "victim-data"
SCRATCH = "fuzz-scratch"
PARTITIONS = 3
PROBE_CID = 0x7ABCDEF0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(
        tmp_path_factory.mktemp("bad-input") / "data", config={"socket.request.max.bytes": MAX_REQUEST}
    ) as b:
        yield b


@pytest.fixture(scope="module")
def victim(broker):
    """The acknowledged messages of the victim topic: {(partition, offset): (key, value, headers)}."""
    ck = require_module("confluent_kafka")
    with Cluster(broker.bootstrap) as c:
        c.create_topic(VICTIM, PARTITIONS, 1)
        c.create_topic(SCRATCH, 2, 1)
    rnd = random.Random(2024)
    sent, errors = {}, []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            sent[msg.value()] = (msg.partition(), msg.offset(), msg.key())

    p = ck.Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "enable.idempotence": False,
            "compression.type": "zstd",
        }
    )
    for i in range(2000):
        p.produce(
            VICTIM,
            value=b"victim-%d-" % i + rnd.randbytes(rnd.randrange(100)),
            key=b"k%d" % rnd.randrange(30),
            headers=[("n", b"%d" % i)],
            on_delivery=on_delivery,
        )
        p.poll(0)
    assert p.flush(60) == 0 and not errors and len(sent) == 2000
    want = {(p_, o): (k, v, [("n", v.split(b"-")[1])]) for v, (p_, o, k) in sent.items()}
    assert_intact(broker, want)
    return want


def assert_intact(broker, want) -> None:
    ends = offsets(broker.bootstrap, VICTIM, range(PARTITIONS))
    assert sum(hi - lo for lo, hi in ends.values()) == len(want), ends
    got = read_all(broker.bootstrap, VICTIM, range(PARTITIONS))
    assert {k: (r.key, r.value, [(hk, bytes(hv)) for hk, hv in r.headers]) for k, r in got.items()} == want


def connect(broker) -> BrokerConnection:
    return BrokerConnection("127.0.0.1", broker.port, timeout=10)


def api_versions_probe() -> bytes:
    return raw_request(18, 3, PROBE_CID, ApiVersionsRequest(client_software_name="probe", client_software_version="1"))


def produce_request(parts, acks=-1, topic=SCRATCH) -> ProduceRequest:
    """parts: {partition: record bytes}."""
    P = ProduceRequest
    return P(
        transactional_id=None,
        acks=acks,
        timeout_ms=10000,
        topic_data=[
            P.TopicProduceData(
                name=topic, partition_data=[P.PartitionProduceData(index=i, records=r) for i, r in parts.items()]
            )
        ],
    )


def scratch_end(broker, partition: int) -> int:
    return offsets(broker.bootstrap, SCRATCH, [partition])[partition][1]


# ---------------------------------------------------------------------- random bytes


def _expect_answer_or_close(broker, payload: bytes, framed: bool) -> str:
    """Sends `payload` on a fresh connection. Framed (a correct size prefix): then an
    ApiVersions probe, which the broker must answer unless it closes the connection; a
    response before the probe's must carry the random frame's correlation id. Not framed
    (any bytes, the size prefix included): then end of input; the broker must close,
    after answering whatever whole frames it found."""
    with RawConnection(broker.port) as rc:
        if not framed:
            if rc.send(payload):
                rc.sock.shutdown(socket.SHUT_WR)
            for _ in range(8):
                if rc.read_frame(10.0) is None:
                    return "closed"
            raise AssertionError("more responses than frames sent")
        if not rc.send(payload) or not rc.send(api_versions_probe()):
            return "closed"
        for _ in range(4):
            f = rc.read_frame(10.0)
            if f is None:
                return "closed"
            (cid,) = struct.unpack_from(">i", f)
            if cid == PROBE_CID:
                return "answered"
            # an answer to the random frame: its correlation id, then the probe's
            assert len(payload) >= 12 and cid == struct.unpack_from(">i", payload, 8)[0], (cid, payload[:16])
        raise AssertionError("more responses than requests")


def _held(payload: bytes) -> bool:
    """True for a frame that decodes to a valid request the broker may rightly hold for
    a while (a Fetch with a long max wait, a JoinGroup waiting for the rebalance): not
    what this test is about."""
    if len(payload) < 4:
        return False
    try:
        header, req = codec.decode_request(memoryview(payload)[4:])
    except (ProtocolDecodeError, ValueError):
        return False
    if isinstance(req, FetchRequest):
        return req.max_wait_ms > 1000
    return header.request_api_key in (11, 14)  # JoinGroup, SyncGroup


def _supported(broker) -> list[tuple[int, int, int]]:
    with connect(broker) as conn:
        return sorted((k, lo, hi) for k, (lo, hi) in conn.versions.items())


def _header_for(api_key: int, version: int, cid: int) -> bytes:
    spec = API_SPECS[api_key]
    h = raw_header(api_key, version, cid)
    return h + b"\x00" if spec.is_flexible(version) else h


def _mutated_valid_request(rnd: random.Random, supported) -> bytes:
    """A real request with a few bytes changed, or cut short (size prefix fixed up)."""
    choice = rnd.randrange(3)
    if choice == 0:
        data = bytearray(
            raw_request(
                0,
                rnd.randrange(3, 10),
                rnd.randrange(1 << 20),
                produce_request({rnd.randrange(2): batch([b"fuzz-%d" % rnd.randrange(99)])}),
            )
        )
    elif choice == 1:
        data = bytearray(
            raw_request(
                3,
                rnd.randrange(1, 13),
                rnd.randrange(1 << 20),
                MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=SCRATCH)]),
            )
        )
    else:
        data = bytearray(api_versions_probe())
    body = data[4:]
    if rnd.random() < 0.5:
        for _ in range(rnd.randrange(1, 4)):
            body[rnd.randrange(len(body))] ^= 1 << rnd.randrange(8)
    else:
        del body[rnd.randrange(len(body)) :]
    return frame(bytes(body))


def _random_payload(rnd: random.Random, supported) -> tuple[bytes, bool]:
    """(payload, framed)"""
    kind = rnd.randrange(4)
    if kind == 0:  # any bytes at all (the size prefix included)
        return rnd.randbytes(rnd.randrange(1, 300)), False
    if kind == 1:  # a well-framed random body
        return frame(rnd.randbytes(rnd.randrange(0, 300))), True
    if kind == 2:  # a real header of a supported API and version, random body
        key, lo, hi = rnd.choice(supported)
        return frame(
            _header_for(key, rnd.randint(lo, hi), rnd.randrange(1 << 30)) + rnd.randbytes(rnd.randrange(0, 200))
        ), True
    return _mutated_valid_request(rnd, supported), True


def test_random_bytes_seeded(broker, victim):
    supported = _supported(broker)
    rnd = random.Random(20240607)
    outcomes = {"answered": 0, "closed": 0}
    for _ in range(150):
        payload, framed = _random_payload(rnd, supported)
        if _held(payload):
            continue
        outcomes[_expect_answer_or_close(broker, payload, framed)] += 1
    assert outcomes["closed"] > 0 and outcomes["answered"] > 0, outcomes
    _normal_clients_work(broker)
    assert_intact(broker, victim)


@st.composite
def fuzz_frames(draw, supported):
    """(payload, framed)"""
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return draw(st.binary(min_size=1, max_size=300)), False
    if kind == 1:
        return frame(draw(st.binary(max_size=300))), True
    key, lo, hi = draw(st.sampled_from(supported))
    return frame(
        _header_for(key, draw(st.integers(lo, hi)), draw(st.integers(0, 1 << 30))) + draw(st.binary(max_size=200))
    ), True


def test_random_bytes_hypothesis(broker, victim):
    supported = _supported(broker)

    @settings(
        max_examples=60,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(case=fuzz_frames(supported))
    def check(case):
        payload, framed = case
        assume(not _held(payload))
        _expect_answer_or_close(broker, payload, framed)

    check()
    _normal_clients_work(broker)
    assert_intact(broker, victim)


def _normal_clients_work(broker) -> None:
    """A real client (confluent-kafka) produces and reads back on the scratch topic."""
    ck = require_module("confluent_kafka")
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": False})
    delivered = []
    p.produce(
        SCRATCH, value=b"still-alive", partition=1, on_delivery=lambda err, msg: delivered.append((err, msg.offset()))
    )
    assert p.flush(30) == 0
    assert delivered and delivered[0][0] is None, delivered
    got = read_all(broker.bootstrap, SCRATCH, [1])
    assert got[(1, delivered[0][1])].value == b"still-alive"


# ---------------------------------------------------------------------- framing


def test_frame_larger_than_socket_request_max_bytes_is_closed(broker, victim):
    with RawConnection(broker.port) as rc:
        rc.send(struct.pack(">i", MAX_REQUEST + 1) + b"\x00\x12\x00\x00" + b"x" * 1000)
        assert rc.closed_by_broker()
    with RawConnection(broker.port) as rc:
        rc.send(struct.pack(">i", 0x7FFFFFFF))
        assert rc.closed_by_broker()
    # a request just under the limit is served
    data = batch([bytes(MAX_REQUEST - 300)])
    req = produce_request({1: data})
    assert MAX_REQUEST - 400 < len(raw_request(0, 9, 1, req)) - 4 <= MAX_REQUEST
    end = scratch_end(broker, 1)
    with connect(broker) as conn:
        r = conn.request(req, 9).responses[0].partition_responses[0]
    assert r.error_code == 0 and r.base_offset == end
    assert_intact(broker, victim)


def test_negative_and_zero_frame_sizes_are_closed(broker, victim):
    for size in (-1, -(2**31), 0):
        with RawConnection(broker.port) as rc:
            rc.send(struct.pack(">i", size) + b"\x00" * 16)
            assert rc.closed_by_broker(), size
    assert_intact(broker, victim)


def test_frames_split_in_single_bytes_are_served(broker, victim):
    """Not bad input, but hostile timing: a request arriving one byte at a time."""
    with RawConnection(broker.port) as rc:
        for b in api_versions_probe():
            rc.send(bytes([b]))
        f = rc.read_frame()
        assert f is not None and struct.unpack_from(">i", f)[0] == PROBE_CID


# ---------------------------------------------------------------------- api keys and versions


@pytest.mark.parametrize("api_key", [1000, 32767, -1, -32768])
def test_unknown_api_key_is_closed(broker, victim, api_key):
    with RawConnection(broker.port) as rc:
        rc.send(frame(raw_header(api_key, 0, 5) + b"\x00" * 8))
        assert rc.closed_by_broker()


def test_api_versions_of_an_unsupported_version_answers_v0_error_35(broker, victim):
    with connect(broker) as conn:
        ours = sorted((k, lo, hi) for k, (lo, hi) in conn.versions.items())
    for version in (5, 99, 32767):
        with RawConnection(broker.port) as rc:
            rc.send(frame(raw_header(18, version, 77) + b"\x00\x00\x00"))
            f = rc.read_frame()
            assert f is not None, f"ApiVersions v{version}: connection closed instead of error 35"
            _, resp = codec.decode_response(18, 0, f)
            assert struct.unpack_from(">i", f)[0] == 77
            assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
            # KIP-511: ApiVersions' own range only, the rest once the client asks in it
            assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == [v for v in ours if v[0] == 18]
            # the connection stays usable: the client retries with a version we speak
            rc.send(api_versions_probe())
            f = rc.read_frame()
            assert f is not None and struct.unpack_from(">i", f)[0] == PROBE_CID
            _, resp = codec.decode_response(18, 3, f)
            assert resp.error_code == 0


@pytest.mark.parametrize("api_key,version", [(3, 99), (0, 12), (1, 99), (19, 99), (0, -1), (2, 32767)])
def test_api_at_a_version_the_broker_cannot_read_is_closed(broker, victim, api_key, version):
    """Above the advertised range (a client must not send it) or unknown to the protocol
    definitions: nothing to answer in, so the connection is closed, as Kafka does."""
    end = scratch_end(broker, 0)
    with RawConnection(broker.port) as rc:
        rc.send(frame(_header_for(api_key, version, 9) + b"\x00" * 16))
        assert rc.closed_by_broker()
    assert scratch_end(broker, 0) == end


def _old_version_requests():
    """Versions below the broker's range that the protocol still defines (a client that
    skips ApiVersions, e.g. one configured for an old broker, sends them)."""
    F, L = FetchRequest, ListOffsetsRequest
    fetch = F(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        topics=[
            F.FetchTopic(
                topic=SCRATCH,
                partitions=[
                    F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=65536),
                    F.FetchPartition(partition=1, fetch_offset=0, partition_max_bytes=65536),
                ],
            )
        ],
    )
    list_offsets = L(
        replica_id=-1,
        topics=[
            L.ListOffsetsTopic(
                name=SCRATCH, partitions=[L.ListOffsetsPartition(partition_index=1, timestamp=-1, max_num_offsets=1)]
            )
        ],
    )
    cases = [
        (0, v, produce_request({0: batch([b"old version"]), 1: batch([b"old version"])}, acks=1)) for v in range(3)
    ]
    cases += [(1, v, fetch) for v in range(4)]
    cases.append((2, 0, list_offsets))
    return cases


@pytest.mark.parametrize(
    "api_key,version,req", _old_version_requests(), ids=lambda x: x if isinstance(x, int) else type(x).__name__
)
def test_a_version_below_the_supported_range_gets_unsupported_version(broker, victim, api_key, version, req):
    """Kafka answers a request it can read but no longer serves with UNSUPPORTED_VERSION
    in every error code of the response of that version; the connection stays usable."""
    ends = {p: scratch_end(broker, p) for p in (0, 1)}
    with RawConnection(broker.port) as rc:
        rc.send(raw_request(api_key, version, 31, req))
        f = rc.read_frame()
        assert f is not None, f"api {api_key} v{version}: connection closed instead of UNSUPPORTED_VERSION"
        header, resp = codec.decode_response(api_key, version, f)
        assert header.correlation_id == 31
        if api_key == 0:
            got = [
                (t.name, p.index, p.error_code, p.base_offset) for t in resp.responses for p in t.partition_responses
            ]
            assert got == [
                (SCRATCH, 0, ErrorCode.UNSUPPORTED_VERSION, -1),
                (SCRATCH, 1, ErrorCode.UNSUPPORTED_VERSION, -1),
            ]
        elif api_key == 1:
            got = [
                (t.topic, p.partition_index, p.error_code, p.high_watermark, p.records)
                for t in resp.responses
                for p in t.partitions
            ]
            assert got == [(SCRATCH, i, ErrorCode.UNSUPPORTED_VERSION, -1, b"") for i in (0, 1)]
        else:
            got = [
                (t.name, p.partition_index, p.error_code, p.old_style_offsets)
                for t in resp.topics
                for p in t.partitions
            ]
            assert got == [(SCRATCH, 1, ErrorCode.UNSUPPORTED_VERSION, [])]
        rc.send(api_versions_probe())
        f = rc.read_frame()
        assert f is not None and struct.unpack_from(">i", f)[0] == PROBE_CID
    assert {p: scratch_end(broker, p) for p in (0, 1)} == ends, "an old-version Produce was appended"


def test_an_old_acks_0_produce_closes_the_connection(broker, victim):
    """acks=0 has no response to carry the error: the connection is closed (Kafka's way of
    telling an acks=0 producer), and nothing is appended."""
    end = scratch_end(broker, 0)
    with RawConnection(broker.port) as rc:
        rc.send(raw_request(0, 2, 32, produce_request({0: batch([b"old acks 0"])}, acks=0)))
        assert rc.closed_by_broker()
    assert scratch_end(broker, 0) == end


def test_kafka_python_configured_for_an_old_broker_gets_an_error(broker, victim):
    """A real client that skips ApiVersions (api_version pinned to 0.10.0) produces with
    Produce v2: it gets UnsupportedVersionError, not an endless reconnect loop."""
    require_module("kafka")
    from kafka import KafkaProducer
    from kafka.errors import UnsupportedVersionError

    end = scratch_end(broker, 0)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        api_version=(0, 10, 0),
        retries=0,
        request_timeout_ms=10000,
        max_block_ms=10000,
    )
    try:
        future = producer.send(SCRATCH, b"from 0.10", partition=0)
        with pytest.raises(UnsupportedVersionError):
            future.get(timeout=30)
    finally:
        producer.close(timeout=10)
    assert scratch_end(broker, 0) == end


# ---------------------------------------------------------------------- produce


def test_crc_corrupt_batch_refused_good_partition_in_same_request_appended(broker, victim):
    good = batch([b"good-1", b"good-2"])
    bad = corrupt_crc(batch([b"bad-1", b"bad-2"]))
    end0, end1 = scratch_end(broker, 0), scratch_end(broker, 1)
    with connect(broker) as conn:
        resp = conn.request(produce_request({0: bad, 1: good}))
    parts = {p.index: p for p in resp.responses[0].partition_responses}
    assert parts[0].error_code == ErrorCode.CORRUPT_MESSAGE
    assert parts[1].error_code == 0 and parts[1].base_offset == end1
    assert scratch_end(broker, 0) == end0
    got = read_all(broker.bootstrap, SCRATCH, [1])
    assert [got[(1, end1)].value, got[(1, end1 + 1)].value] == [b"good-1", b"good-2"]
    assert_intact(broker, victim)


@pytest.mark.parametrize("damage", ["truncated", "length-too-big", "magic-1", "empty", "garbage-after"])
def test_malformed_batches_are_refused(broker, victim, damage):
    data = batch([b"m-1", b"m-2", b"m-3"])
    if damage == "truncated":
        data = data[:-7]
    elif damage == "length-too-big":
        struct.pack_into(">i", data, 8, struct.unpack_from(">i", data, 8)[0] + 100)
    elif damage == "magic-1":
        data[16] = 1
    elif damage == "empty":
        data = bytearray()
    else:
        data += b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    end = scratch_end(broker, 0)
    with connect(broker) as conn:
        resp = conn.request(produce_request({0: data}))
    code = resp.responses[0].partition_responses[0].error_code
    assert code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD), ErrorCode(code).name
    assert scratch_end(broker, 0) == end
    assert_intact(broker, victim)


def test_batch_larger_than_max_message_bytes(broker, victim, topic_name):
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1, {"max.message.bytes": "1000"})
    small, big = batch([b"s" * 500]), batch([b"b" * 2000])
    assert len(small) <= 1000 < len(big)
    with connect(broker) as conn:
        resp = conn.request(produce_request({0: big}, topic=topic_name))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.MESSAGE_TOO_LARGE
        resp = conn.request(produce_request({0: small}, topic=topic_name))
        assert resp.responses[0].partition_responses[0].error_code == 0
    assert offsets(broker.bootstrap, topic_name, [0]) == {0: (0, 1)}
    # a whole Produce request above socket.request.max.bytes is not read at all: closed
    end = scratch_end(broker, 0)
    with connect(broker) as conn:
        with pytest.raises(ClientError):
            conn.request(produce_request({0: batch([bytes(MAX_REQUEST)])}))
    assert scratch_end(broker, 0) == end
    assert_intact(broker, victim)


def test_produce_to_unknown_topic_or_partition(broker, victim):
    with connect(broker) as conn:
        resp = conn.request(produce_request({0: batch([b"x"])}, topic="no-such-topic"))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        resp = conn.request(produce_request({PARTITIONS + 5: batch([b"x"])}, topic=VICTIM))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # produce does not create topics
        meta = conn.request(
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name="no-such-topic")], allow_auto_topic_creation=False
            )
        )
        assert meta.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert_intact(broker, victim)


@pytest.mark.parametrize("compression", [None, "gzip", "zstd"])
def test_records_without_keys_are_refused_by_a_compacted_topic(broker, victim, compression):
    topic = f"compacted-{compression}"
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic, 2, 1, configs={"cleanup.policy": "compact"})
    with connect(broker) as conn:
        resp = conn.request(
            produce_request(
                {
                    0: batch([b"a", b"b", b"c"], keys=[b"k1", None, b"k3"], compression=compression),
                    1: batch([b"a", b"b"], keys=[b"k1", b""], compression=compression),
                },
                topic=topic,
            )
        )
    parts = {p.index: p for p in resp.responses[0].partition_responses}
    assert parts[0].error_code == ErrorCode.INVALID_RECORD
    assert "record 1 " in parts[0].error_message and "no key" in parts[0].error_message
    assert parts[1].error_code == 0  # an empty key is a key
    ends = offsets(broker.bootstrap, topic, [0, 1])
    assert ends[0] == (0, 0) and ends[1] == (0, 2)  # nothing of the refused batch landed
    assert_intact(broker, victim)


def test_confluent_producer_sees_invalid_record_on_a_compacted_topic(broker, victim):
    ck = require_module("confluent_kafka")
    with Cluster(broker.bootstrap) as c:
        c.create_topic("compacted-confluent", 2, 1, configs={"cleanup.policy": "compact"})
    results = {}
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False, "message.send.max.retries": 0})
    p.produce(
        "compacted-confluent",
        value=b"no key",
        partition=0,
        on_delivery=lambda err, msg: results.__setitem__("unkeyed", err),
    )
    p.produce(
        "compacted-confluent",
        value=b"keyed",
        key=b"k",
        partition=1,
        on_delivery=lambda err, msg: results.__setitem__("keyed", err),
    )
    assert p.flush(30) == 0
    assert results["keyed"] is None
    assert results["unkeyed"] is not None and results["unkeyed"].code() == ck.KafkaError.INVALID_RECORD
    assert offsets(broker.bootstrap, "compacted-confluent", [0, 1]) == {0: (0, 0), 1: (0, 1)}


def test_invalid_required_acks(broker, victim):
    end = scratch_end(broker, 0)
    with connect(broker) as conn:
        resp = conn.request(produce_request({0: batch([b"acks 2"])}, acks=2))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert scratch_end(broker, 0) == end


def test_acks_0_produces_received_before_the_client_closes_are_all_appended(broker, victim):
    """An acks=0 producer that writes its requests and closes at once (librdkafka's flush
    then close does this) loses nothing the broker received: the requests read before the
    end of the stream are handled, as Kafka's, not dropped with the connection. Many
    small pipelined requests, so that some are still queued when the close is read."""
    n = 3000
    end = scratch_end(broker, 1)
    frames = b"".join(raw_request(0, 9, i, produce_request({1: batch([b"a0-%d" % i])}, acks=0)) for i in range(n))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(frames)
    deadline = time.monotonic() + 30
    while (got := scratch_end(broker, 1) - end) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    assert got == n, f"{n - got} of {n} acks=0 records lost at the client's close"
    values = [r.value for (p, o), r in sorted(read_all(broker.bootstrap, SCRATCH, [1]).items()) if o >= end]
    assert values == [b"a0-%d" % i for i in range(n)]
    assert_intact(broker, victim)


def test_acks_0_with_a_corrupt_batch_closes_the_connection(broker, victim):
    end = scratch_end(broker, 0)
    with connect(broker) as conn:
        # a good acks=0 produce: no response, the connection stays open
        conn.send(produce_request({0: batch([b"fire-and-forget"])}, acks=0), expect_response=False)
        assert conn.request(MetadataRequest(topics=[])).topics == []
        conn.send(produce_request({0: corrupt_crc(batch([b"corrupt"]))}, acks=0), expect_response=False)
        with pytest.raises(ClientError):
            conn.request(MetadataRequest(topics=[]))
    assert scratch_end(broker, 0) == end + 1
    got = read_all(broker.bootstrap, SCRATCH, [0])
    assert got[(0, end)].value == b"fire-and-forget"
    assert_intact(broker, victim)


# ---------------------------------------------------------------------- topic names

BAD_NAMES = ["bad name!", "", ".", "..", "a" * 250, "slash/name", "ünïcode", "tab\tname"]


def test_create_topics_with_invalid_names(broker, victim):
    C = CreateTopicsRequest
    with connect(broker) as conn:
        for name in BAD_NAMES:
            resp = conn.request(
                C(
                    topics=[
                        C.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])
                    ],
                    timeout_ms=5000,
                    validate_only=False,
                )
            )
            r = resp.topics[0]
            assert r.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION, (name, r.error_code)
        # the longest legal name is fine
        ok = "b" * 249
        resp = conn.request(
            C(
                topics=[C.CreatableTopic(name=ok, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
                timeout_ms=5000,
                validate_only=False,
            )
        )
        assert resp.topics[0].error_code == 0
    with Cluster(broker.bootstrap) as c:
        names = set(c.refresh())
    assert ok in names and not names & set(BAD_NAMES)
    assert not any((broker.data_dir / f"{n}-0").exists() for n in BAD_NAMES if n not in ("", ".", ".."))
    assert_intact(broker, victim)


def test_metadata_for_invalid_topic_names(broker, victim):
    M = MetadataRequest
    with connect(broker) as conn:
        resp = conn.request(
            M(
                topics=[M.MetadataRequestTopic(name=n) for n in BAD_NAMES] + [M.MetadataRequestTopic(name=VICTIM)],
                allow_auto_topic_creation=True,
            )
        )
    by_name = {t.name: t for t in resp.topics}
    for n in BAD_NAMES:
        assert by_name[n].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION, n
    assert by_name[VICTIM].error_code == 0 and len(by_name[VICTIM].partitions) == PARTITIONS
    with Cluster(broker.bootstrap) as c:
        assert not set(c.refresh()) & set(BAD_NAMES)
    assert_intact(broker, victim)


@pytest.mark.parametrize("version", [10, 11, 12])
@pytest.mark.parametrize("name", [None, "some-name"])
def test_metadata_by_topic_id(broker, victim, version, name):
    """Versions 10 and 11 carry topic ids but cannot look topics up by them (Kafka:
    INVALID_REQUEST, with or without a name beside the id), and their answers have no null
    names; v12 answers UNKNOWN_TOPIC_ID. Found by bench/fuzz/run.py: the answer could not
    be encoded and the connection closed."""
    M = MetadataRequest
    with RawConnection(broker.port) as rc:
        rc.send(
            raw_request(
                3,
                version,
                5,
                M(topics=[M.MetadataRequestTopic(topic_id=uuid.uuid4(), name=name)], allow_auto_topic_creation=False),
            )
        )
        f = rc.read_frame()
        assert f is not None, "the connection was closed instead of answered"
        _, resp = codec.decode_response(3, version, f)
        want = ErrorCode.INVALID_REQUEST if version < 12 else ErrorCode.UNKNOWN_TOPIC_ID
        assert [t.error_code for t in resp.topics] == [want]
    assert_intact(broker, victim)


# ---------------------------------------------------------------------- batch headers


def _with_crc(data: bytearray) -> bytearray:
    """Recomputes the CRC-32C after a header edit (the batch is otherwise well-formed)."""
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return data


# byte offsets in the RecordBatch v2 header (DESIGN.md)
_ATTRIBUTES, _LAST_OFFSET_DELTA, _PRODUCER_ID, _BASE_SEQUENCE, _RECORD_COUNT = 21, 23, 43, 53, 57

BAD_HEADERS = {
    # Kafka's LogValidator.validateBatch refuses these with INVALID_RECORD (the native
    # assign_offsets producer checks); the text says what would go wrong if accepted
    "last-offset-delta-above-count": (
        lambda d: struct.pack_into(">i", d, _LAST_OFFSET_DELTA, 99),
        "recordCount != lastOffsetDelta + 1 is accepted: the batch takes offsets "
        "0..99 for 3 records, leaving a gap (offsets no longer dense)",
    ),
    "count-above-last-offset-delta": (
        lambda d: struct.pack_into(">i", d, _RECORD_COUNT, 10),
        "recordCount 10 with lastOffsetDelta 2 (3 records) is accepted",
    ),
    "zero-count": (lambda d: struct.pack_into(">i", d, _RECORD_COUNT, 0), "recordCount 0 is accepted"),
    "control-batch-from-client": (
        lambda d: struct.pack_into(">h", d, _ATTRIBUTES, 0x20),
        "a control batch (attributes bit 5) from a client is accepted; Kafka: "
        "'Clients are not allowed to write control records'",
    ),
    "producer-id-without-sequence": (
        lambda d: (struct.pack_into(">q", d, _PRODUCER_ID, 5), struct.pack_into(">i", d, _BASE_SEQUENCE, -1)),
        "producerId >= 0 with baseSequence -1 is accepted",
    ),
    "unknown-codec": (
        lambda d: struct.pack_into(">h", d, _ATTRIBUTES, 7),
        "compression codec 7 (attributes bits 0-2) is accepted and stored; every consumer of "
        "the partition then fails on it",
    ),
}


@pytest.mark.parametrize("damage", list(BAD_HEADERS))
def test_inconsistent_batch_headers_are_refused(broker, victim, topic_name, damage):
    """A batch whose CRC is right but whose header lies (a buggy or hostile producer):
    refused, nothing appended, the partition stays readable for everyone."""
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
    data = batch([b"h-1", b"h-2", b"h-3"])
    BAD_HEADERS[damage][0](data)
    with connect(broker) as conn:
        r = conn.request(produce_request({0: _with_crc(data)}, topic=topic_name)).responses[0]
        code = r.partition_responses[0].error_code
        # a good batch afterwards lands at offset 0 and is readable
        ok = conn.request(produce_request({0: batch([b"fine"])}, topic=topic_name)).responses[0]
    assert code == ErrorCode.INVALID_RECORD, f"{BAD_HEADERS[damage][1]} (got {code})"
    assert ok.partition_responses[0].error_code == 0 and ok.partition_responses[0].base_offset == 0
    got = read_all(broker.bootstrap, topic_name, [0], deadline_s=10)
    assert [(o, r.value) for (_, o), r in sorted(got.items())] == [(0, b"fine")]
    assert_intact(broker, victim)


def test_one_corrupt_batch_refuses_the_whole_partition_append(broker, victim, topic_name):
    """Two batches for one partition, the second CRC-corrupt: neither is appended (Kafka
    validates a partition's records as a whole before appending)."""
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
    data = batch([b"first-ok"]) + corrupt_crc(batch([b"second-bad"]))
    with connect(broker) as conn:
        r = conn.request(produce_request({0: data}, topic=topic_name)).responses[0].partition_responses[0]
    assert r.error_code == ErrorCode.CORRUPT_MESSAGE
    assert offsets(broker.bootstrap, topic_name, [0]) == {0: (0, 0)}
    assert_intact(broker, victim)


# ---------------------------------------------------------------------- other requests


def test_bad_fetch_parameters_get_error_codes(broker, victim):
    with Cluster(broker.bootstrap) as c:
        topic_id = c.topic(VICTIM).topic_id
    hi = offsets(broker.bootstrap, VICTIM, [0])[0][1]
    with connect(broker) as conn:
        for off in (-1, -100, hi + 1, 2**62):
            d = fetch_once(conn, VICTIM, topic_id, 0, off)
            assert d.error_code == ErrorCode.OFFSET_OUT_OF_RANGE, off
            assert not d.records
        d = fetch_once(conn, VICTIM, topic_id, PARTITIONS + 1, 0)
        assert d.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        d = fetch_once(conn, "no-such-topic", uuid.uuid4(), 0, 0)
        assert d.error_code in (ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        # zero or negative byte limits still return the first batch whole (KIP-74)
        for limit in (0, -1):
            d = fetch_once(conn, VICTIM, topic_id, 0, 0, max_bytes=limit)
            assert d.error_code == 0 and records_of(d.records)[0][0] == 0
        # a negative max wait is no wait
        d = fetch_once(conn, VICTIM, topic_id, 0, hi, max_wait_ms=-5, timeout=5)
        assert d.error_code == 0 and not d.records
    assert_intact(broker, victim)


def test_bad_create_topics_parameters(broker, victim, topic_name):
    C = CreateTopicsRequest
    cases = [
        (dict(num_partitions=0, replication_factor=1), ErrorCode.INVALID_PARTITIONS),
        (dict(num_partitions=-5, replication_factor=1), ErrorCode.INVALID_PARTITIONS),
        (dict(num_partitions=1, replication_factor=0), ErrorCode.INVALID_REPLICATION_FACTOR),
        (dict(num_partitions=1, replication_factor=3), ErrorCode.INVALID_REPLICATION_FACTOR),
        (
            dict(
                num_partitions=1,
                replication_factor=1,
                configs=[C.CreatableTopicConfig(name="no.such.config", value="1")],
            ),
            ErrorCode.INVALID_CONFIG,
        ),
        (
            dict(
                num_partitions=1,
                replication_factor=1,
                configs=[C.CreatableTopicConfig(name="retention.ms", value="soon")],
            ),
            ErrorCode.INVALID_CONFIG,
        ),
        (
            dict(
                num_partitions=1,
                replication_factor=1,
                configs=[C.CreatableTopicConfig(name="segment.bytes", value="1")],
            ),
            ErrorCode.INVALID_CONFIG,
        ),
        (
            dict(
                num_partitions=1,
                replication_factor=1,
                configs=[C.CreatableTopicConfig(name="cleanup.policy", value="shred")],
            ),
            ErrorCode.INVALID_CONFIG,
        ),
        (
            dict(
                num_partitions=-1,
                replication_factor=-1,
                assignments=[C.CreatableReplicaAssignment(partition_index=0, broker_ids=[7])],
            ),
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ),
        (
            dict(
                num_partitions=3,
                replication_factor=-1,
                assignments=[C.CreatableReplicaAssignment(partition_index=0, broker_ids=[0])],
            ),
            ErrorCode.INVALID_REQUEST,
        ),
    ]
    with connect(broker) as conn:
        for kw, want in cases:
            kw.setdefault("assignments", [])
            kw.setdefault("configs", [])
            r = conn.request(
                C(topics=[C.CreatableTopic(name=topic_name, **kw)], timeout_ms=5000, validate_only=False)
            ).topics[0]
            assert r.error_code == want, (kw, ErrorCode(r.error_code).name, want.name)
        # the same topic twice in one request: one INVALID_REQUEST result, nothing created (as Kafka)
        t = C.CreatableTopic(name=topic_name, num_partitions=1, replication_factor=1, assignments=[], configs=[])
        r = conn.request(C(topics=[t, t], timeout_ms=5000, validate_only=False))
        assert [x.error_code for x in r.topics] == [ErrorCode.INVALID_REQUEST]
        r = conn.request(C(topics=[t], timeout_ms=5000, validate_only=False))
        assert [x.error_code for x in r.topics] == [0]
    with Cluster(broker.bootstrap) as c:
        assert len(c.topic(topic_name).partitions) == 1
    assert_intact(broker, victim)


def test_absurd_partition_counts_are_refused_before_anything_is_assigned(broker, victim, topic_name):
    """Found by bench/fuzz/run.py: 2**31 - 1 partitions had the broker build an assignment
    until it ran out of memory, its event loop stalled for tens of seconds (65,536: seconds)."""
    from broker.protocol.messages.create_partitions import CreatePartitionsRequest as CP

    C = CreateTopicsRequest
    with connect(broker) as conn:
        for n in (2**31 - 1, 65_536, 10_001):
            r = conn.request(
                C(
                    topics=[
                        C.CreatableTopic(
                            name=topic_name, num_partitions=n, replication_factor=1, assignments=[], configs=[]
                        )
                    ],
                    timeout_ms=5000,
                    validate_only=False,
                ),
                timeout=10,
            ).topics[0]
            assert r.error_code == ErrorCode.POLICY_VIOLATION, ErrorCode(r.error_code).name
        # many topics whose counts add up beyond the bound: the ones beyond it are refused
        topics = [
            C.CreatableTopic(
                name=f"{topic_name}-{i}", num_partitions=6_000, replication_factor=1, assignments=[], configs=[]
            )
            for i in range(2)
        ]
        r = conn.request(C(topics=topics, timeout_ms=5000, validate_only=True), timeout=30)
        assert [x.error_code for x in r.topics] == [0, ErrorCode.POLICY_VIOLATION]
        r = conn.request(
            C(
                topics=[
                    C.CreatableTopic(
                        name=topic_name, num_partitions=1, replication_factor=1, assignments=[], configs=[]
                    )
                ],
                timeout_ms=5000,
                validate_only=False,
            )
        ).topics[0]
        assert r.error_code == 0
        for n in (2**31 - 1, 10_001):
            r = conn.request(
                CP(
                    topics=[CP.CreatePartitionsTopic(name=topic_name, count=n, assignments=None)],
                    timeout_ms=5000,
                    validate_only=False,
                ),
                timeout=10,
            ).results[0]
            assert r.error_code == ErrorCode.POLICY_VIOLATION
    with Cluster(broker.bootstrap) as c:
        assert len(c.topic(topic_name).partitions) == 1
    assert_intact(broker, victim)


def test_pipelined_requests_are_answered_in_order(broker, victim):
    frames = b"".join(
        raw_request(3, 12, cid, MetadataRequest(topics=[]))
        if cid % 2
        else raw_request(18, 3, cid, ApiVersionsRequest(client_software_name="p", client_software_version="1"))
        for cid in range(1, 201)
    )
    with RawConnection(broker.port) as rc:
        rc.send(frames)
        cids = []
        for _ in range(200):
            f = rc.read_frame()
            assert f is not None
            cids.append(struct.unpack_from(">i", f)[0])
    assert cids == list(range(1, 201))


def test_slow_and_vanishing_clients_do_not_block_others(broker, victim):
    F = FetchRequest
    with Cluster(broker.bootstrap) as c:
        topic_id = c.topic(VICTIM).topic_id
    hi = offsets(broker.bootstrap, VICTIM, [0])[0][1]
    slow = [RawConnection(broker.port) for _ in range(5)]
    try:
        for i, rc in enumerate(slow):
            data = raw_request(3, 12, 1, MetadataRequest(topics=None))
            rc.send(data[: i + 3])  # part of a frame, then nothing
        # a long poll whose client goes away before the answer
        gone = RawConnection(broker.port)
        gone.send(
            raw_request(
                1,
                12,
                1,
                F(
                    replica_id=-1,
                    max_wait_ms=3000,
                    min_bytes=1,
                    max_bytes=1 << 20,
                    isolation_level=0,
                    session_id=0,
                    session_epoch=-1,
                    forgotten_topics_data=[],
                    topics=[
                        F.FetchTopic(
                            topic=VICTIM,
                            topic_id=topic_id,
                            partitions=[F.FetchPartition(partition=0, fetch_offset=hi, partition_max_bytes=1000)],
                        )
                    ],
                ),
            )
        )
        gone.close()
        assert_intact(broker, victim)
        _normal_clients_work(broker)
        # the slow ones finish their requests at last and are answered
        for i, rc in enumerate(slow):
            data = raw_request(3, 12, 1, MetadataRequest(topics=None))
            rc.send(data[i + 3 :])
            f = rc.read_frame()
            assert f is not None and struct.unpack_from(">i", f)[0] == 1
    finally:
        for rc in slow:
            rc.close()


def test_clients_leaving_with_a_request_just_dispatched_leave_no_unawaited_work(broker, victim):
    """A client that sends requests and goes away at once: its connection may close in the
    loop turn that dispatched its long poll. Found by bench/fuzz/run.py: the request's
    coroutines were dropped unawaited ('coroutine ... was never awaited')."""
    F = FetchRequest
    hi = offsets(broker.bootstrap, VICTIM, [0])[0][1]
    cheap = raw_request(18, 3, 1, ApiVersionsRequest(client_software_name="x", client_software_version="1"))
    poll = raw_request(
        1,
        12,
        2,
        F(
            replica_id=-1,
            max_wait_ms=5000,
            min_bytes=1 << 20,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            forgotten_topics_data=[],
            topics=[
                F.FetchTopic(
                    topic=VICTIM,
                    partitions=[F.FetchPartition(partition=0, fetch_offset=hi, partition_max_bytes=1 << 20)],
                )
            ],
        ),
    )
    before = broker.log_path.stat().st_size
    for i in range(400):  # the moment of leaving varies around the long poll's dispatch
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
            s.sendall(cheap * (20 + i % 60) + poll)
            time.sleep((i % 20) / 4000)
            s.shutdown(socket.SHUT_WR)
            time.sleep(0.01)
    _normal_clients_work(broker)
    with open(broker.log_path, "rb") as f:
        f.seek(before)
        log = f.read().decode(errors="replace")
    assert "never awaited" not in log and "Exception ignored" not in log, log[-3000:]
    assert_intact(broker, victim)


def test_a_flood_of_bad_requests_is_a_log_line_per_interval_not_per_request(tmp_path):
    # a broken or hostile client must not fill the broker's disk with its log: requests
    # that close their connection are logged at most once per interval, with a count
    with BrokerProcess(tmp_path / "data") as b:
        for i in range(200):
            with RawConnection(b.port) as rc:
                kind = i % 3
                if kind == 0:  # an API nobody has
                    rc.send(frame(raw_header(999, 0, i) + b"\x00" * 8))
                elif kind == 1:  # a frame larger than allowed
                    rc.send(struct.pack(">i", 1 << 30))
                else:  # a version far past Metadata's
                    rc.send(frame(raw_header(3, 99, i) + b"\x00" * 8))
                assert rc.closed_by_broker()
        with BrokerConnection("127.0.0.1", b.port) as conn:  # everyone else is still served
            assert conn.request(MetadataRequest(topics=[])).brokers
        closing = [line for line in b.log_path.read_text().splitlines() if "closing" in line]
    assert 1 <= len(closing) <= 3, closing
