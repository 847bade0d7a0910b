"""Malformed input: only ProtocolDecodeError may escape a decoder, and its message names
the message, version, field and byte offset; huge declared lengths fail before any
allocation."""

from __future__ import annotations

import random
import struct
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from proto_strategies import all_message_versions, message_strategy, random_instance

from broker.protocol import codec
from broker.protocol.api import API_SPECS
from broker.protocol.messages.create_topics import CreateTopicsRequest
from broker.protocol.messages.metadata import MetadataResponse
from broker.protocol.messages.produce import ProduceRequest
from broker.protocol.types import ProtocolDecodeError, UnsupportedRequestError

CASES = all_message_versions()
REQUEST_CASES = [(s.request, v) for _, s in sorted(API_SPECS.items()) for v in range(s.versions[0], s.versions[1] + 1)]


def check_error(exc: ProtocolDecodeError) -> None:
    """The error came from an explicit check and describes where."""
    assert isinstance(exc, ProtocolDecodeError)
    assert exc.field is not None, exc  # not the generic safety net
    assert exc.offset is not None, exc
    assert exc.message_name is not None, exc
    # the version is known except when a request header is too short to hold its api key/version
    assert exc.version is not None or (exc.message_name == "RequestHeader" and exc.offset <= 2), exc
    text = str(exc)
    assert exc.message_name in text and (exc.version is None or f"v{exc.version}" in text)
    assert exc.field in text and f"offset {exc.offset}" in text


def decode_or_error(fn, *args):
    try:
        return fn(*args)
    except UnsupportedRequestError as exc:
        assert exc.header is not None
        return None
    except ProtocolDecodeError as exc:
        check_error(exc)
        return None


# ------------------------------------------------------------------ every decoder, every version


@pytest.mark.parametrize("case", CASES, ids=[f"{c.NAME}-v{v}" for c, v in CASES])
def test_truncations_bitflips_and_noise(case):
    cls, version = case
    rng = random.Random(f"{cls.NAME}/{version}")
    for _ in range(3):
        obj = random_instance(cls, version, rng)
        data = obj.encode(version)
        assert cls.decode(data, version) == obj
        # every truncation of a valid encoding is an error (sampled for long ones)
        cuts = range(len(data)) if len(data) <= 80 else sorted(rng.sample(range(len(data)), 80))
        for n in cuts:
            with pytest.raises(ProtocolDecodeError) as info:
                cls.decode(data[:n], version)
            check_error(info.value)
        # a trailing byte is an error
        with pytest.raises(ProtocolDecodeError) as info:
            cls.decode(data + b"\x00", version)
        check_error(info.value)
        # bit flips and byte smashes: decode or a described error, nothing else
        for _ in range(40):
            b = bytearray(data)
            if not b:
                break
            i = rng.randrange(len(b))
            if rng.random() < 0.5:
                b[i] ^= 1 << rng.randrange(8)
            else:
                b[i] = rng.choice([0x00, 0x7F, 0x80, 0xFF])
            decode_or_error(cls.decode, bytes(b), version)
    for _ in range(20):
        decode_or_error(cls.decode, rng.randbytes(rng.randint(0, 48)), version)


# ------------------------------------------------------------------ hypothesis: whole frames


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_decode_request_random_frames(frame):
    decode_or_error(codec.decode_request, frame)
    decode_or_error(codec.decode_request_header, frame)


def _header(api_key: int, version: int, flexible: bool) -> bytes:
    hdr = struct.pack(">hhih", api_key, version, 1, 2) + b"id"
    return hdr + (b"\x00" if flexible else b"")


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(REQUEST_CASES), st.binary(max_size=96))
def test_decode_request_valid_header_random_body(case, body):
    cls, version = case
    frame = _header(cls.API_KEY, version, cls.is_flexible(version)) + body
    decode_or_error(codec.decode_request, frame)
    decode_or_error(codec.decode_request, bytearray(frame))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_decode_request_mutated_valid_frames(data):
    cls, version = data.draw(st.sampled_from(REQUEST_CASES), label="case")
    req = data.draw(message_strategy(cls, version), label="request")
    frame = bytearray(codec.encode_request(cls.API_KEY, version, 3, "fuzz", req)[4:])
    header, decoded = codec.decode_request(frame, strict=True)  # the encoder wrote one body exactly
    assert decoded == req
    frame = bytearray(frame)  # the decoded records still reference the original frame
    ops = data.draw(
        st.lists(
            st.tuples(st.sampled_from(["flip", "set", "cut", "insert"]), st.integers(0, 10_000), st.integers(0, 255)),
            min_size=1,
            max_size=4,
        ),
        label="mutations",
    )
    for op, where, val in ops:
        if not frame:
            break
        i = where % len(frame)
        if op == "flip":
            frame[i] ^= 1 << (val % 8)
        elif op == "set":
            frame[i] = val
        elif op == "cut":
            del frame[i:]
        else:
            frame[i:i] = bytes([val])
    decode_or_error(codec.decode_request, frame)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([(1, 12), (18, 3), (3, 12), (0, 9), (0, 3), (3, 0)]), st.binary(max_size=64))
def test_decode_response_random_bodies(case, body):
    api_key, version = case
    decode_or_error(codec.decode_response, api_key, version, b"\x00\x00\x00\x01" + body)


# ------------------------------------------------------------------ huge declared lengths


def _fails_fast(fn, *args) -> ProtocolDecodeError:
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        fn(*args)
    except ProtocolDecodeError as exc:
        err = exc
    else:  # pragma: no cover
        raise AssertionError("decoded")
    finally:
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert elapsed < 0.5
    assert peak < 256 * 1024, peak
    check_error(err)
    return err


HUGE_FRAMES = {
    # Produce v3: topic_data declares 2**31-1 topics in a 20-byte body
    "array count": _header(0, 3, False) + b"\xff\xff" + b"\x00\x01" + b"\x00\x00\x75\x30" + b"\x7f\xff\xff\xff",
    # Produce v3: one topic whose name declares 32767 bytes
    "string length": _header(0, 3, False) + b"\xff\xff\x00\x01\x00\x00\x75\x30\x00\x00\x00\x01\x7f\xff",
    # Produce v3: records declare 2**31-1 bytes
    "records length": _header(0, 3, False)
    + b"\xff\xff\x00\x01\x00\x00\x75\x30\x00\x00\x00\x01"
    + b"\x00\x01t"
    + b"\x00\x00\x00\x01"
    + b"\x00\x00\x00\x00"
    + b"\x7f\xff\xff\xff",
    # Produce v9: compact records length 2**32-1 (5-byte uvarint)
    "compact records length": _header(0, 9, True)
    + b"\x00\xff\xff\x00\x00\x75\x30\x02\x02t\x02"
    + b"\x00\x00\x00\x00"
    + b"\xff\xff\xff\xff\x0f",
    # Produce v9: compact array count 2**32-2
    "compact array count": _header(0, 9, True) + b"\x00\xff\xff\x00\x00\x75\x30\xff\xff\xff\xff\x0f",
    # Produce v9: varint longer than 5 bytes
    "overlong varint": _header(0, 9, True) + b"\x00\xff\xff\x00\x00\x75\x30\x80\x80\x80\x80\x80\x80\x01",
    # ApiVersions v3: 2**32-1 tagged fields
    "tagged field count": _header(18, 3, True) + b"\x01\x01" + b"\xff\xff\xff\xff\x0f",
    # ApiVersions v3: one tagged field declaring 2**31 bytes
    "tagged field size": _header(18, 3, True) + b"\x01\x01" + b"\x01\x05\x80\x80\x80\x80\x08",
    # header v2: tagged-field count 2**32-1
    "header tagged count": struct.pack(">hhih", 18, 3, 1, -1) + b"\xff\xff\xff\xff\x0f",
}


@pytest.mark.parametrize("name", sorted(HUGE_FRAMES))
def test_huge_declared_lengths_fail_fast(name):
    _fails_fast(codec.decode_request, HUGE_FRAMES[name])


def test_huge_primitive_array_fails_fast():
    # CreateTopics v0, one topic, one assignment whose broker_ids declares 2**31-1 int32s
    body = (
        b"\x00\x00\x00\x01"
        + b"\x00\x01t"
        + b"\xff\xff\xff\xff"
        + b"\xff\xff"
        + b"\x00\x00\x00\x01"
        + b"\x00\x00\x00\x00"
        + b"\x7f\xff\xff\xff"
    )
    err = _fails_fast(CreateTopicsRequest.decode, body, 0)
    assert err.field == "CreatableReplicaAssignment.broker_ids"


def test_error_message_names_message_version_field_offset():
    body = ProduceRequest(topic_data=[ProduceRequest.TopicProduceData(name="abc")]).encode(3)
    with pytest.raises(ProtocolDecodeError) as info:
        ProduceRequest.decode(body[:-3], 3)
    e = info.value
    assert (e.message_name, e.version, e.field) == ("ProduceRequest", 3, "TopicProduceData.partition_data")
    assert str(e) == (
        "ProduceRequest v3: field TopicProduceData.partition_data at byte offset "
        f"{len(body) - 4}: need 4 bytes, 1 remain"
    )


def test_invalid_utf8_and_null_in_non_nullable_field():
    good = ProduceRequest(topic_data=[ProduceRequest.TopicProduceData(name="ab")]).encode(3)
    bad = bytearray(good)
    i = bad.index(b"ab")
    bad[i] = 0xFF
    with pytest.raises(ProtocolDecodeError, match="invalid UTF-8") as info:
        ProduceRequest.decode(bytes(bad), 3)
    assert info.value.field == "TopicProduceData.name" and info.value.offset == i
    bad = bytearray(good)
    bad[i - 2 : i] = b"\xff\xff"  # name length -1: null in a non-nullable string
    with pytest.raises(ProtocolDecodeError, match="non-nullable"):
        ProduceRequest.decode(bytes(bad), 3)


def test_non_byte_memoryview_input():
    body = MetadataResponse(controller_id=7).encode(1)
    assert len(body) % 4 == 0
    words = memoryview(bytearray(body)).cast("I")
    assert MetadataResponse.decode(words, 1) == MetadataResponse(controller_id=7)
