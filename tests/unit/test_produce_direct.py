"""The Produce direct path (broker/server/handlers/produce.py `direct`: decode in C,
ReplicaManager.append_now, encode in C with broker._native.produce) against the general
path, on real Partitions over real Logs:

- the same answers, byte for byte, and the same log files, over a seeded random sequence
  of requests (versions 3-12, acks 0/1/-1, idempotent producers and their retries and
  gaps, corrupt and oversized batches, several topics and partitions);
- what it must leave to the general path, untouched: for each condition of the module
  docstring it answers nothing and appends nothing, and hands on the request it decoded
  (what the general decoder reads) or none;
- its header decoder and answer encoder against the generated codec, and the header
  decoder over random bytes (no crash); the transactional bit of a batch as RecordBatch
  reads it;
- the server's part: which connections' Produces go the direct way, and the api key read
  from the frame by the protocol layer, not by the server.
"""

import os
import random
import struct
from types import SimpleNamespace

import pytest

from broker._native import produce as native
from broker.cluster.metadata import PartitionState
from broker.cluster.replica.delayed_produce import PartitionResult
from broker.cluster.replica.manager import ReplicaManager
from broker.cluster.replica.partition import Partition
from broker.log import TopicPartition
from broker.log.log import Log
from broker.native import BatchBuilder, RecordBatch
from broker.protocol import codec
from broker.protocol.messages.produce import ProduceRequest, ProduceResponse
from broker.server.handlers import DIRECT_PATHS, produce
from tests.unit.log._support import log_config

BROKER = 1


class KnownTopics:
    def partition_state(self, topic, partition):
        return object()


class Side:
    """One broker's partitions: t-0..t-2 led here with an ISR of this broker alone, w-0
    led here with a follower in the ISR, s-0 with a small max.message.bytes, f-0 with a
    flush policy, m-0 with min.insync.replicas 2, and x-0 followed (led by broker 2)."""

    LAYOUT = {
        ("t", 0): ([1], 1, {}),
        ("t", 1): ([1], 1, {}),
        ("t", 2): ([1], 1, {}),
        ("w", 0): ([1, 2], 1, {}),
        ("s", 0): ([1], 1, {"max.message.bytes": 300}),
        ("f", 0): ([1], 1, {"flush.messages": 1000}),
        ("m", 0): ([1], 1, {"min.insync.replicas": 2}),
        ("x", 0): ([1, 2], 2, {}),
    }

    def __init__(self, root):
        self.root = root
        self.replicas = ReplicaManager(BROKER, None, KnownTopics())
        for (topic, index), (isr, leader, overrides) in self.LAYOUT.items():
            tp = TopicPartition(topic, index)
            lg = Log.load(str(root / f"{topic}-{index}"), tp, log_config(root, overrides))
            self.replicas.partitions[tp] = Partition(
                tp, lg, PartitionState(index, [1, 2], leader, 3, list(isr)), BROKER, self.replicas.purgatory
            )
        self.services = SimpleNamespace(replicas=self.replicas)
        self.version_caps = {}
        self.client_id = None  # the client id of the last request taken

    def log(self, topic, index=0) -> Log:
        return self.replicas.partitions[TopicPartition(topic, index)].log

    def general(self, frame):
        """What Server.dispatch answers without the direct path (None: no answer)."""
        header, request = codec.decode_request(frame)
        ctx = SimpleNamespace(
            services=SimpleNamespace(replicas=self.replicas),
            has_right=lambda *a, **k: True,
            connection=SimpleNamespace(close=lambda: None),
            header=header,
            api_version=header.request_api_version,
            received=0.0,
        )
        response = produce.handle(ctx, request)
        assert not hasattr(response, "__await__"), "a request of this test waited"
        return None if response is None else bytes(b"".join(codec.encode_response(header, response)))

    def direct(self, frame):
        return produce.direct(self.services, frame, self.version_caps)

    def dispatch(self, frame):
        """(taken by the direct path, the answer)."""
        taken = self.direct(frame)
        if not isinstance(taken, tuple):
            if taken is not None:  # what the general path would decode, and then handles
                assert taken == codec.decode_request(frame)[1]
            return False, self.general(frame)
        parts, self.client_id, errors = taken
        answer = bytes(b"".join(parts))
        if errors is not None:  # what the metrics count: the answer's error codes
            assert bytes(b"".join(codec.encode_response(codec.decode_request(frame)[0], errors))) == answer
            assert any(r.error_code for t in errors.responses for r in t.partition_responses)
        return True, answer

    def files(self):
        out = {}
        for d in sorted(os.listdir(self.root)):
            if os.path.isdir(self.root / d):
                for f in sorted(os.listdir(self.root / d)):
                    out[(d, f)] = (self.root / d / f).read_bytes()
        return out


def frame_of(request, version, correlation_id=7, client_id="c"):
    """A request frame as the frame reader hands it over: no size prefix, writable."""
    return bytearray(codec.encode_request(0, version, correlation_id, client_id, request)[4:])


def produce_request(topics, acks=1, transactional_id=None):
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=name,
                partition_data=[ProduceRequest.PartitionProduceData(index=i, records=records) for i, records in parts],
            )
            for name, parts in topics
        ],
    )


def batch(n=2, value=b"v" * 20, **kw):
    b = BatchBuilder(**kw)
    for i in range(n):
        b.append(1000 + i, b"k%d" % i, value)
    return bytearray(b.build())


def test_the_direct_path_answers_and_appends_as_the_general_path_does(tmp_path):
    """A seeded random sequence of requests through both paths, each on its own broker:
    every answer and every log file byte for byte the same."""
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    direct, general = Side(tmp_path / "direct"), Side(tmp_path / "general")
    sequences = {}  # (producer id, topic, partition) -> next sequence
    taken = 0
    for n in range(300):
        version = rng.randint(3, 12)
        acks = rng.choice((1, 1, -1, -1, 0))
        topics = []
        for name, indexes in rng.sample([("t", [0, 1, 2]), ("s", [0]), ("f", [0]), ("w", [0])], rng.choice((1, 1, 2))):
            if name == "w" and acks == -1:
                continue  # it would wait for the follower: not a case here
            parts = []
            for index in rng.sample(indexes, rng.randint(1, len(indexes))):
                kind = rng.random()
                if kind < 0.4:
                    records = batch(rng.randint(1, 5), b"v" * rng.choice((10, 200)))
                elif kind < 0.75:  # idempotent: in order, a retry of the last, or a gap
                    pid = rng.choice((11, 12))
                    seq = sequences.get((pid, name, index), 0)
                    roll = rng.random()
                    if roll < 0.15 and seq:
                        seq -= 2  # the last batch again (2 records a batch)
                    elif roll < 0.2:
                        seq += 5  # OUT_OF_ORDER_SEQUENCE_NUMBER
                    records = batch(2, producer_id=pid, producer_epoch=0, base_sequence=seq)
                    if roll >= 0.2 or not seq:
                        sequences[(pid, name, index)] = seq + 2
                elif kind < 0.85:  # a corrupt CRC
                    records = batch()
                    records[-1] ^= 0xFF
                else:  # two batches in one partition's records
                    records = batch(1) + batch(3)
                parts.append((index, records))
            topics.append((name, parts))
        if not topics:
            continue
        request = produce_request(topics, acks)
        a = frame_of(request, version, correlation_id=n)
        b = bytearray(a)
        took, answer = direct.dispatch(a)
        taken += took
        assert answer == general.general(b), f"request {n} (v{version}, acks={acks}, taken={took}), seed {seed}"
    assert direct.files() == general.files(), f"seed {seed}"
    for topic, index in Side.LAYOUT:
        d, g = direct.log(topic, index), general.log(topic, index)
        assert (d.log_end_offset, d.high_watermark) == (g.log_end_offset, g.high_watermark)
    assert taken > 100, f"only {taken} of 300 requests took the direct path (seed {seed})"


def test_what_it_takes_it_answers_with_the_general_paths_bytes(tmp_path):
    """One request that succeeds, one with an error on one partition: both taken."""
    d, g = Side(tmp_path / "d"), Side(tmp_path / "g")
    bad = batch()
    bad[-1] ^= 0xFF
    for version in (3, 8, 9, 12):
        for parts in ([(0, batch()), (1, batch(3))], [(0, batch()), (2, bad)]):
            frame = frame_of(produce_request([("t", parts)], acks=-1), version)
            took, answer = d.dispatch(bytearray(frame))
            assert took
            assert answer == g.general(bytearray(frame))
    assert d.client_id == "c"
    assert d.log("t", 0).high_watermark == d.log("t", 0).log_end_offset == 16  # 4 versions x 2 x 2


@pytest.mark.parametrize(
    "case",
    [
        "transactional id",
        "acks 0",
        "acks 2",
        "internal topic",
        "unknown partition",
        "a follower",
        "transactional records without an id",
        "no records",
        "a flush policy",
        "acks=-1 with a follower in the ISR",
        "acks=-1 below min.insync.replicas",
        "acks=-1 with the high watermark below the log end",
        "a version above the cap",
        "header tagged fields",
        "a malformed body",
    ],
)
def test_what_it_leaves_to_the_general_path_untouched(tmp_path, case):
    side = Side(tmp_path)
    topic, acks, txn, version, records = "t", 1, None, 9, batch()
    if case == "transactional id":
        txn = "tx"
    elif case == "acks 0":
        acks = 0
    elif case == "acks 2":
        acks = 2
    elif case == "internal topic":
        topic = "__consumer_offsets"
    elif case == "unknown partition":
        topic = "nope"
    elif case == "a follower":
        topic = "x"
    elif case == "transactional records without an id":
        records = batch(producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
    elif case == "no records":
        records = bytearray()
    elif case == "a flush policy":
        topic = "f"
    elif case == "acks=-1 with a follower in the ISR":
        topic, acks = "w", -1
    elif case == "acks=-1 below min.insync.replicas":
        topic, acks = "m", -1
    elif case == "acks=-1 with the high watermark below the log end":
        acks = -1
        side.log("t").append_as_leader(batch(), 3)  # not through the Partition: no high watermark
    elif case == "a version above the cap":
        side.version_caps = {0: 11}
        version = 12
    frame = frame_of(produce_request([(topic, [(0, records)])], acks, txn), version)
    if case == "header tagged fields":  # header v2's tag section: one tag (0) of one byte
        cid_end = 10 + struct.unpack_from(">h", frame, 8)[0]
        frame[cid_end : cid_end + 1] = b"\x01\x00\x01\x00"
    elif case == "a malformed body":
        del frame[-3:]
    ends = {tp: p.log.log_end_offset for tp, p in side.replicas.partitions.items()}
    decoded = side.direct(frame)
    assert not isinstance(decoded, tuple)
    if case in ("a version above the cap", "header tagged fields", "a malformed body"):
        assert decoded is None  # not decoded: the general path decodes it
    else:  # the general path goes on with what was decoded
        assert decoded == codec.decode_request(bytes(frame))[1]
    assert {tp: p.log.log_end_offset for tp, p in side.replicas.partitions.items()} == ends


# ---------------------------------------------------------------------- the C pieces


@pytest.mark.parametrize("version", range(3, 13))
def test_encode_appended_writes_what_the_generated_encoder_writes(version):
    rng = random.Random(version)
    for _ in range(20):
        topics = [
            (
                rng.choice(("t", "tópico", "x" * 300)),
                [
                    (
                        rng.randint(0, 1 << 31 - 1),
                        rng.randint(0, 1 << 62),
                        rng.choice((-1, 1_700_000_000_000)),
                        rng.randint(0, 1 << 40),
                    )
                    for _ in range(rng.randint(0, 4))
                ],
            )
            for _ in range(rng.randint(0, 3))
        ]
        response = ProduceResponse(
            throttle_time_ms=0,
            responses=[
                ProduceResponse.TopicProduceResponse(
                    name=name,
                    partition_responses=[
                        ProduceResponse.PartitionProduceResponse(
                            index=i, error_code=0, base_offset=b, log_append_time_ms=t, log_start_offset=s
                        )
                        for i, b, t, s in parts
                    ],
                )
                for name, parts in topics
            ],
        )
        corr = rng.randint(-(1 << 31), (1 << 31) - 1)
        expected = bytes(b"".join(codec.encode_response((corr, 0, version), response)))
        request = produce_request([(name, [(i, None) for i, *_ in parts]) for name, parts in topics])
        results = [
            PartitionResult(base_offset=b, log_append_time=t, log_start_offset=s)
            for _, parts in topics
            for _, b, t, s in parts
        ]
        assert bytes(native.encode_appended(corr, version, request.topic_data, results)[0]) == expected


def test_encode_appended_refuses_a_version_it_does_not_write_and_results_that_do_not_match():
    with pytest.raises(ValueError, match="v2"):
        native.encode_appended(1, 2, [], [])
    topics = produce_request([("t", [(0, None), (1, None)])]).topic_data
    one = [PartitionResult(base_offset=0)]
    with pytest.raises(ValueError, match="1 results for more partitions"):
        native.encode_appended(1, 9, topics, one)
    with pytest.raises(ValueError, match="3 results for 2 partitions"):
        native.encode_appended(1, 9, topics, one * 3)


def test_the_native_codec_covers_the_versions_the_generator_wrote():
    """broker._native.produce's versions are _native/include/kb_messages.h's, which
    tools/gen_protocol.py writes from Kafka's definitions (test_proto_generated.py holds
    the header current)."""
    assert native.VERSIONS == (3, 12)
    assert produce.MIN_VERSION >= native.VERSIONS[0] and produce.MAX_VERSION <= native.VERSIONS[1]


def test_the_transactional_bit_is_the_batchs_as_record_batch_reads_it():
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    plain, txn = batch(), batch(producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)
    assert not native.first_batch_transactional(plain) and native.first_batch_transactional(txn)
    assert native.first_batch_transactional(memoryview(txn + plain)) and not native.first_batch_transactional(
        plain + txn
    )
    for records in (b"", bytearray(22), txn[:22]):  # too short to say
        assert not native.first_batch_transactional(records)
    assert native.first_batch_transactional(txn[:23])
    for _ in range(200):
        txn = rng.random() < 0.5
        records = batch(
            rng.randint(1, 3),
            compression=rng.choice((None, "gzip", "lz4")),
            producer_id=rng.randint(0, 9),
            producer_epoch=0,
            base_sequence=0,
            is_transactional=txn,
        ) + rng.randbytes(rng.randint(0, 70))
        assert native.first_batch_transactional(records) == RecordBatch(records).is_transactional == txn, f"seed {seed}"


@pytest.mark.parametrize("version", range(3, 13))
@pytest.mark.parametrize("client_id", [None, "", "producer-1", "ünï"])
def test_decode_header_reads_what_the_generated_decoder_reads(version, client_id):
    frame = frame_of(produce_request([("t", [(0, batch())])]), version, correlation_id=-5, client_id=client_id)
    header, pos = codec.decode_request_header(frame)
    assert native.decode_header(frame) == (version, -5, client_id, pos)
    assert native.decode_header(memoryview(frame)) == (version, -5, client_id, pos)


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00\x00\x00\x09\x00\x00\x00\x01",  # short
        b"\x00\x01\x00\x09\x00\x00\x00\x01\xff\xff\x00",  # another api key (Fetch)
        b"\x00\x00\x00\x02\x00\x00\x00\x01\xff\xff",  # Produce v2
        b"\x00\x00\x00\x0d\x00\x00\x00\x01\xff\xff\x00",  # Produce v13
        b"\x00\x00\x00\x09\x00\x00\x00\x01\xff\xfe\x00",  # a client id length of -2
        b"\x00\x00\x00\x09\x00\x00\x00\x01\x00\x05ab",  # a client id past the end
        b"\x00\x00\x00\x09\x00\x00\x00\x01\x00\x01\xff\x00",  # a client id that is no UTF-8
        b"\x00\x00\x00\x09\x00\x00\x00\x01\x00\x01a",  # v9 without its tag section
        b"\x00\x00\x00\x09\x00\x00\x00\x01\x00\x01a\x01\x00\x00",  # v9 with a tagged field
    ],
)
def test_decode_header_leaves_the_rest_to_the_generic_decoder(frame):
    assert native.decode_header(bytearray(frame)) is None


def test_decode_header_never_crashes_on_random_bytes():
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    for _ in range(20000):
        frame = bytearray(b"\x00\x00" + bytes([0, rng.randint(0, 14)]) + rng.randbytes(rng.randint(0, 24)))
        got = native.decode_header(frame)
        assert got is None or (3 <= got[0] <= 12 and got[3] <= len(frame)), f"seed {seed}"


# ---------------------------------------------------------------------- the server's conditions


@pytest.mark.parametrize(
    "change, takes",
    [
        ({}, True),
        ({"authenticator": object()}, False),
        ({"request_log_api": 0}, False),
        ({"request_log_api": 1}, True),
        ({"authorizer": object()}, False),
        ({"quotas": SimpleNamespace(enabled=True)}, False),
        ({"quotas": SimpleNamespace(enabled=False)}, True),
    ],
)
def test_the_server_sends_a_produce_the_direct_way_only_without_the_checks_it_skips(change, takes):
    from broker.server.server import Server

    server = SimpleNamespace(
        request_log_api=change.get("request_log_api", -1),
        services=SimpleNamespace(authorizer=change.get("authorizer")),
        quotas=change.get("quotas"),
    )
    conn = SimpleNamespace(authenticator=change.get("authenticator"))
    assert Server.takes_direct(server, conn, produce.API_KEY) is takes


def test_the_direct_path_is_found_by_the_api_key_the_protocol_layer_reads():
    frame = frame_of(produce_request([("t", [(0, batch())])]), 9)
    assert codec.request_api_key(frame) == 0 and DIRECT_PATHS[codec.request_api_key(frame)] is produce
    fetch = bytearray(b"\x00\x01\x00\x0c\x00\x00\x00\x01\xff\xff")
    assert codec.request_api_key(fetch) == 1 and 1 not in DIRECT_PATHS
    assert codec.request_api_key(bytearray(b"\x00")) == -1
