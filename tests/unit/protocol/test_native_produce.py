"""Produce v3-12 in C (broker._native.produce, through broker.protocol.codec) against the
generated codec: the same requests decoded, the same response bytes, the same verdict on
malformed frames (a described ProtocolDecodeError, never a crash), and what the native
side hands back to the generated one (tagged fields, record errors, a current leader,
node endpoints) decoded and encoded as before. Random cases print their seed."""

from __future__ import annotations

import os
import random
import time

import pytest

from broker._native import produce as native_produce
from broker.protocol import codec
from broker.protocol.messages.produce import ProduceRequest, ProduceResponse
from broker.protocol.types import ProtocolDecodeError
from tests.unit.protocol.proto_strategies import random_instance
from tests.unit.protocol.test_proto_fuzz import check_error

VERSIONS = range(3, 13)
SEED = int(os.environ.get("NATIVE_PRODUCE_SEED", time.time_ns() % 1_000_000))
R = ProduceResponse


def _rng(version: int, what: str) -> random.Random:
    print(f"seed {SEED} (NATIVE_PRODUCE_SEED), {what} v{version}")
    return random.Random(f"{SEED}/{what}/{version}")


def _no_tags(req: ProduceRequest) -> bool:
    return not req.unknown_tagged_fields and all(
        not t.unknown_tagged_fields and all(not p.unknown_tagged_fields for p in t.partition_data)
        for t in req.topic_data
    )


def _strip_tags(req: ProduceRequest) -> None:
    req.unknown_tagged_fields = []
    for t in req.topic_data:
        t.unknown_tagged_fields = []
        for p in t.partition_data:
            p.unknown_tagged_fields = []


def _frame(req: ProduceRequest, version: int) -> tuple[bytearray, int]:
    frame = bytearray(codec.encode_request(0, version, 7, "native-test", req)[4:])
    _, offset = codec.decode_request_header(frame)
    return frame, offset


def _decode_both(frame, offset: int, version: int):
    """(generated, native) results: a request, or the ProtocolDecodeError raised."""
    out = []
    for fn in (lambda: codec.decode_request(frame)[1], lambda: codec.decode_request_body(frame, 0, version, offset)):
        try:
            out.append(fn())
        except ProtocolDecodeError as exc:
            out.append(exc)
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_random_requests_decode_as_the_generated_decoder_does(version):
    rng = _rng(version, "decode")
    native_taken = 0
    for _ in range(300):
        req = random_instance(ProduceRequest, version, rng)
        if rng.random() < 0.5:
            _strip_tags(req)  # what clients send: no tagged fields
        frame, offset = _frame(req, version)
        generated, native = _decode_both(frame, offset, version)
        assert native == generated == req
        direct = native_produce.decode_request(memoryview(frame), offset, version)
        if _no_tags(req):
            assert direct == req  # decoded in C, not handed back
            native_taken += 1
            for t in direct.topic_data:
                for p in t.partition_data:  # records are views of the frame, writable
                    assert p.records is None or (isinstance(p.records, memoryview) and not p.records.readonly)
        else:
            assert direct is None  # tagged fields: the generated decoder keeps them
    assert native_taken > 100


def test_a_large_produce_is_decoded_in_place():
    records = bytes(range(256)) * 512
    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=f"t{i}",
                partition_data=[ProduceRequest.PartitionProduceData(index=j, records=records) for j in range(3)],
            )
            for i in range(2)
        ],
    )
    for version in VERSIONS:
        frame, offset = _frame(req, version)
        got = codec.decode_request_body(frame, 0, version, offset)
        assert got == req
        view = got.topic_data[1].partition_data[2].records
        view[0] = 0xAB  # the frame's own bytes, not a copy
        assert frame.find(b"\xab" + records[1:64]) > 0


@pytest.mark.parametrize("version", VERSIONS)
def test_malformed_frames_get_the_same_verdict(version):
    rng = _rng(version, "fuzz")
    for _ in range(40):
        req = random_instance(ProduceRequest, version, rng)
        frame, offset = _frame(req, version)
        mutants = [frame[:n] for n in sorted(rng.sample(range(offset, len(frame)), min(30, len(frame) - offset)))]
        for _ in range(60):
            b = bytearray(frame)
            for _ in range(rng.randint(1, 3)):
                i = rng.randrange(offset, len(b)) if len(b) > offset else offset
                if i >= len(b):
                    break
                op = rng.random()
                if op < 0.4:
                    b[i] ^= 1 << rng.randrange(8)
                elif op < 0.8:
                    b[i] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFF])
                else:
                    del b[i : i + rng.randint(1, 4)]
            mutants.append(b)
        mutants += [bytearray(frame[:offset]) + rng.randbytes(rng.randint(0, 40)) for _ in range(10)]
        for m in mutants:
            generated, native = _decode_both(m, offset, version)
            if isinstance(generated, ProtocolDecodeError):
                assert isinstance(native, ProtocolDecodeError), (bytes(m), native)
                check_error(native)
            else:
                assert native == generated, bytes(m)


def _plain_response(rng, version: int) -> ProduceResponse:
    """A response the native encoder writes itself: what the broker answers."""
    topics = []
    for _ in range(rng.randint(0, 3)):
        parts = [
            R.PartitionProduceResponse(
                index=rng.randint(0, 2**31 - 1),
                error_code=rng.choice([0, 0, 0, 6, 7, 87]),
                base_offset=rng.choice([-1, 0, rng.randint(0, 2**62)]),
                log_append_time_ms=rng.choice([-1, 1_700_000_000_000]),
                log_start_offset=rng.choice([-1, 0, 12345]),
                error_message=rng.choice([None, None, "", "no records", "d\u00e9j\u00e0 " * rng.randint(1, 30)]),
            )
            for _ in range(rng.randint(0, 4))
        ]
        topics.append(
            R.TopicProduceResponse(
                name=rng.choice(["t", "topic-\u4e2d", "x" * rng.randint(0, 200)]), partition_responses=parts
            )
        )
    return R(responses=topics, throttle_time_ms=rng.choice([0, 0, 15, 2**31 - 1]))


def _generated_bytes(correlation_id: int, version: int, response) -> bytes:
    out = bytearray(8)
    out[4:8] = correlation_id.to_bytes(4, "big", signed=True)
    if version >= 9:
        out.append(0)
    from broker.protocol import _runtime

    _runtime.encode_body(response, version, out, None)
    out[0:4] = (len(out) - 4).to_bytes(4, "big")
    return bytes(out)


@pytest.mark.parametrize("version", VERSIONS)
def test_responses_encode_byte_for_byte(version):
    rng = _rng(version, "encode")
    for _ in range(300):
        resp = _plain_response(rng, version)
        corr = rng.choice([0, -1, 2**31 - 1, rng.randint(-(2**31), 2**31 - 1)])
        native = native_produce.encode_response(corr, version, resp)
        assert native is not None
        assert b"".join(bytes(p) for p in native) == _generated_bytes(corr, version, resp)
        header = (corr, 0, version)
        assert b"".join(bytes(p) for p in codec.encode_response(header, resp)) == _generated_bytes(corr, version, resp)
        if version >= 8:  # every field drawn exists in the version: it reads back
            assert codec.decode_response(0, version, b"".join(bytes(p) for p in native)[4:])[1] == resp


@pytest.mark.parametrize("version", VERSIONS)
def test_what_only_the_generated_encoder_writes_is_handed_back(version):
    rng = _rng(version, "handback")
    handed = 0
    for _ in range(300):
        resp = random_instance(ProduceResponse, version, rng)
        native = native_produce.encode_response(5, version, resp)
        if native is None:
            handed += 1
        else:
            assert b"".join(bytes(p) for p in native) == _generated_bytes(5, version, resp)
        assert b"".join(bytes(p) for p in codec.encode_response((5, 0, version), resp)) == _generated_bytes(
            5, version, resp
        )
    if version >= 8:
        assert handed > 0  # random responses carry record errors, leaders, tags


def test_a_bad_field_fails_as_it_does_in_the_generated_encoder():
    resp = R(
        responses=[R.TopicProduceResponse(name="t", partition_responses=[R.PartitionProduceResponse(index=2**40)])]
    )
    with pytest.raises(OverflowError):
        native_produce.encode_response(1, 7, resp)
    with pytest.raises(Exception) as generated:
        _generated_bytes(1, 7, resp)
    with pytest.raises(Exception) as err:
        codec.encode_response((1, 0, 7), resp)
    assert type(err.value) is type(generated.value) and str(err.value) == str(generated.value)


def test_decode_request_body_reads_every_request_as_decode_request_does():
    from broker.protocol.api import API_SPECS

    rng = random.Random(SEED)
    for key, spec in sorted(API_SPECS.items()):
        for version in range(spec.versions[0], spec.versions[1] + 1):
            req = random_instance(spec.request, version, rng)
            frame = bytearray(codec.encode_request(int(key), version, 9, "body", req)[4:])
            header, offset = codec.decode_request_header(frame)
            assert codec.decode_request_body(frame, int(key), version, offset) == codec.decode_request(frame)[1] == req
    with pytest.raises(ProtocolDecodeError):
        codec.decode_request_body(bytearray(b"\x00" * 12), 0, 99, 10)  # a version outside the range
