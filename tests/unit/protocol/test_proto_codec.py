"""codec/api: header versions, unsupported requests, response parts, encode errors."""

from __future__ import annotations

import struct

import pytest

from broker.protocol import codec
from broker.protocol.api import API_SPECS, ApiKey, api_spec, request_header_version, response_header_version
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages import OTHER_CLASSES
from broker.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from broker.protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription
from broker.protocol.messages.fetch import FetchRequest, FetchResponse
from broker.protocol.messages.metadata import MetadataRequest, MetadataResponse
from broker.protocol.messages.produce import ProduceRequest, ProduceResponse
from broker.protocol.types import (
    FileRegion,
    ProtocolDecodeError,
    ProtocolEncodeError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)

EXPECTED_KEYS = [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    9,
    10,
    11,
    12,
    13,
    14,
    15,
    16,
    17,
    18,
    19,
    20,
    21,
    22,
    23,
    24,
    25,
    26,
    27,
    28,
    29,
    30,
    31,
    32,
    33,
    35,
    36,
    37,
    42,
    43,
    44,
    45,
    46,
    47,
    48,
    49,
    50,
    51,
    56,
    60,
    61,
    65,
    66,
    68,
    69,
    76,
    77,
    78,
    79,
    83,
    84,
    85,
    86,
    87,
    90,
    91,
    92,
]


def test_api_keys_included():
    assert sorted(int(k) for k in API_SPECS) == EXPECTED_KEYS
    assert ApiKey.PRODUCE == 0 and ApiKey.API_VERSIONS == 18 and ApiKey.LIST_TRANSACTIONS == 66
    assert ApiKey.OFFSET_FOR_LEADER_EPOCH == 23 and ApiKey.INCREMENTAL_ALTER_CONFIGS == 44
    spec = api_spec(ApiKey.PRODUCE)
    assert spec.request is ProduceRequest and spec.response is ProduceResponse
    assert spec.versions == (0, 13) and spec.first_flexible == 9
    assert api_spec(ApiKey.SASL_HANDSHAKE).first_flexible is None
    assert api_spec(99) is None
    assert [c.NAME for c in OTHER_CLASSES] == [
        "RequestHeader",
        "ResponseHeader",
        "ConsumerProtocolSubscription",
        "ConsumerProtocolAssignment",
    ]


def test_header_versions():
    for key, spec in API_SPECS.items():
        for v in range(spec.versions[0], spec.versions[1] + 1):
            flexible = spec.is_flexible(v)
            rh = request_header_version(key, v)
            if key == ApiKey.CONTROLLED_SHUTDOWN and v == 0:
                assert rh == 0
            else:
                assert rh == (2 if flexible else 1)
            assert response_header_version(key, v) == (0 if key == ApiKey.API_VERSIONS else int(flexible))
    assert request_header_version(ApiKey.API_VERSIONS, 3) == 2
    assert response_header_version(ApiKey.API_VERSIONS, 3) == 0
    assert request_header_version(ApiKey.METADATA, 99) == 2  # too new: still readable
    with pytest.raises(KeyError):
        request_header_version(1000, 0)


def test_decode_request_header_alone():
    frame = codec.encode_request(3, 12, 99, "cid", MetadataRequest(topics=None))[4:]
    header, offset = codec.decode_request_header(frame)
    assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == (
        3,
        12,
        99,
        "cid",
    )
    assert MetadataRequest.decode(frame[offset:], 12) == MetadataRequest(topics=None)


def test_unknown_api_key_keeps_header():
    frame = struct.pack(">hhih", 1000, 0, 5, 3) + b"abc" + b"body"
    header, offset = codec.decode_request_header(frame)
    assert header.correlation_id == 5 and header.client_id == "abc" and offset == 13
    with pytest.raises(UnknownApiKeyError) as info:
        codec.decode_request(frame)
    assert info.value.header.correlation_id == 5 and info.value.body_offset == 13
    assert isinstance(info.value, ProtocolDecodeError)


def test_unsupported_api_versions_request_is_answered_with_v0():
    # A client asks for ApiVersions v9 (flexible, request header v2).
    frame = struct.pack(">hhih", 18, 9, 7, 2) + b"cl" + b"\x00" + b"\x03abc\x021\x00"
    with pytest.raises(UnsupportedVersionError) as info:
        codec.decode_request(frame)
    exc = info.value
    assert exc.header.request_api_key == 18 and exc.header.correlation_id == 7
    assert exc.header.client_id == "cl" and exc.body_offset == 13
    # Kafka answers with an ApiVersions v0 body carrying UNSUPPORTED_VERSION.
    resp = ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=int(k), min_version=s.versions[0], max_version=s.versions[1])
            for k, s in sorted(API_SPECS.items())
        ],
    )
    parts = codec.encode_response((exc.header.correlation_id, 18, 0), resp)
    out = b"".join(bytes(p) for p in parts)
    assert struct.unpack(">ii", out[:8]) == (len(out) - 4, 7)
    # the client side: it asked for v9/v3 but reads the v0 body
    header, decoded = codec.decode_response(18, 3, out[4:])
    assert header.correlation_id == 7 and decoded.error_code == 35
    assert decoded.api_keys == resp.api_keys


def test_api_versions_response_falls_back_to_v0_when_it_does_not_parse():
    resp = ApiVersionsResponse(error_code=0, api_keys=[ApiVersionsResponse.ApiVersion(api_key=0, max_version=9)])
    out = b"".join(bytes(p) for p in codec.encode_response((1, 18, 0), resp))
    header, decoded = codec.decode_response(18, 3, out[4:])
    assert decoded == resp


def test_request_trailing_bytes_ignored_unless_strict():
    """Kafka's broker reads what the schema says and ignores the rest; strict=True (for
    tests of the encoders) refuses bytes after the body."""
    req = ApiVersionsRequest(client_software_name="c", client_software_version="1")
    frame = codec.encode_request(18, 3, 1, "c", req)[4:] + b"\x00\xff\x01"
    header, decoded = codec.decode_request(frame)
    assert header.correlation_id == 1 and decoded == req
    with pytest.raises(ProtocolDecodeError, match="3 trailing bytes") as info:
        codec.decode_request(frame, strict=True)
    assert info.value.message_name == "ApiVersionsRequest" and info.value.version == 3


def test_metadata_v12_all_topics_as_librdkafka_2_16_sends_it():
    """librdkafka leaves its 4-byte array-count placeholder where the 1-byte compact count
    belongs: the first byte reads as a null array (all topics), the next ones as the two
    booleans and the tagged fields, and the real booleans and tags are left over."""
    frame = struct.pack(">hhih", 3, 12, 4, 7) + b"rdkafka" + b"\x00" + b"\x00\x00\x00\x00" + b"\x01\x00" + b"\x00"
    header, req = codec.decode_request(frame)
    assert header.correlation_id == 4 and req.topics is None
    assert req.allow_auto_topic_creation is False and req.include_topic_authorized_operations is False
    with pytest.raises(ProtocolDecodeError, match="3 trailing bytes"):
        codec.decode_request(frame, strict=True)


def test_encode_response_parts_with_file_regions_and_large_buffers():
    big = bytearray(b"R" * 10_000)
    resp = FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="t",
                partitions=[
                    FetchResponse.PartitionData(partition_index=0, records=FileRegion(fd=9, offset=100, length=5000)),
                    FetchResponse.PartitionData(partition_index=1, records=b"small"),
                    FetchResponse.PartitionData(partition_index=2, records=memoryview(big)),
                    FetchResponse.PartitionData(partition_index=3, records=None),
                ],
            )
        ]
    )
    parts = codec.encode_response((42, 1, 12), resp)
    regions = [p for p in parts if isinstance(p, FileRegion)]
    assert regions == [FileRegion(9, 100, 5000)]
    assert any(isinstance(p, memoryview) and p.obj is big for p in parts)  # spliced, not copied
    total = sum(p.length if isinstance(p, FileRegion) else len(p) for p in parts)
    assert struct.unpack(">i", bytes(parts[0][:4]))[0] == total - 4
    # substituting the file contents gives a frame that decodes to the same response
    wire = b"".join(b"F" * 5000 if isinstance(p, FileRegion) else bytes(p) for p in parts)
    header, decoded = codec.decode_response(1, 12, wire[4:])
    assert header.correlation_id == 42
    parts_ = decoded.responses[0].partitions
    assert parts_[0].records == b"F" * 5000 and parts_[1].records == b"small"
    assert parts_[2].records == big and parts_[3].records is None


def test_encode_response_single_part_when_nothing_is_spliced():
    parts = codec.encode_response((3, 0, 9), ProduceResponse())
    assert len(parts) == 1
    assert bytes(parts[0]) == struct.pack(">ii", 11, 3) + b"\x00" + b"\x01" + b"\x00\x00\x00\x00" + b"\x00"


def test_encode_response_from_a_decoded_header():
    frame = codec.encode_request(0, 9, 77, "c", ProduceRequest())[4:]
    header, _ = codec.decode_request(frame)
    parts = codec.encode_response(header, ProduceResponse())
    out = b"".join(bytes(p) for p in parts)
    assert codec.response_correlation_id(out[4:]) == 77


def test_encode_errors():
    with pytest.raises(ProtocolEncodeError, match="expected a ProduceResponse"):
        codec.encode_response((1, 0, 9), FetchResponse())
    with pytest.raises(ProtocolEncodeError, match="unknown api key"):
        codec.encode_response((1, 999, 0), FetchResponse())
    bad = ProduceRequest(topic_data=[ProduceRequest.TopicProduceData(name=None)])
    with pytest.raises(ProtocolEncodeError, match=r"topic_data\[0\]\.name: None in a non-nullable"):
        bad.encode(3)
    with pytest.raises(ProtocolEncodeError, match=r"acks: 40000 out of range for int16"):
        ProduceRequest(acks=40000).encode(3)
    with pytest.raises(ProtocolEncodeError, match="unsupported version 14"):
        ProduceRequest().encode(14)
    region = ProduceRequest(
        topic_data=[
            ProduceRequest.TopicProduceData(
                partition_data=[ProduceRequest.PartitionProduceData(records=FileRegion(1, 0, 10))]
            )
        ]
    )
    with pytest.raises(ProtocolEncodeError, match="file region"):
        region.encode(9)
    with pytest.raises(ProtocolEncodeError, match="records value must be"):
        ProduceRequest(
            topic_data=[
                ProduceRequest.TopicProduceData(partition_data=[ProduceRequest.PartitionProduceData(records="text")])
            ]
        ).encode(9)


def test_fields_absent_in_a_version_are_silently_not_written():
    req = FetchRequest(
        cluster_id="c",
        replica_state=FetchRequest.ReplicaState(replica_id=5),
        rack_id="r",
        topics=[FetchRequest.FetchTopic(topic="t", topic_id=FetchRequest.FetchTopic().topic_id)],
    )
    assert req.encode(4) == FetchRequest(topics=[FetchRequest.FetchTopic(topic="t")]).encode(4)
    decoded = FetchRequest.decode(req.encode(4), 4)
    assert decoded.cluster_id is None and decoded.rack_id == "" and decoded.topics[0].topic == "t"


def test_tagged_fields_written_only_when_not_default():
    assert MetadataResponse().encode(12) == MetadataResponse(unknown_tagged_fields=[]).encode(12)
    base = FetchRequest().encode(12)
    with_cluster = FetchRequest(cluster_id="abc").encode(12)
    assert len(with_cluster) == len(base) + 6  # tag, size, compact string "abc"
    assert FetchRequest.decode(with_cluster, 12).cluster_id == "abc"


def test_unknown_tags_preserved_and_interleaved_in_tag_order():
    resp = ApiVersionsResponse(
        finalized_features_epoch=5, zk_migration_ready=True, unknown_tagged_fields=[(9, b"x"), (200, b"")]
    )
    data = resp.encode(3)
    assert ApiVersionsResponse.decode(data, 3) == resp
    tail = data[-20:]
    assert tail == bytes([4, 1, 8]) + (5).to_bytes(8, "big") + bytes([3, 1, 1, 9, 1]) + b"x" + bytes([0xC8, 0x01, 0])


def test_consumer_protocol_versioned_encoding():
    sub = ConsumerProtocolSubscription(
        topics=["a", "b"],
        user_data=b"u",
        owned_partitions=[ConsumerProtocolSubscription.TopicPartition(topic="a", partitions=[0, 1])],
        generation_id=3,
        rack_id="r1",
    )
    data = sub.encode_versioned(3)
    assert data[:2] == b"\x00\x03"
    assert ConsumerProtocolSubscription.decode_versioned(data) == (sub, 3)
    # a newer version (more fields appended) is read as the newest known one
    newer = b"\x00\x07" + data[2:] + b"extra-field"
    assert ConsumerProtocolSubscription.decode_versioned(newer) == (sub, 3)
    with pytest.raises(ProtocolDecodeError):
        ConsumerProtocolSubscription.decode_versioned(b"\xff\xff")
    v0 = ConsumerProtocolSubscription.decode_versioned(sub.encode_versioned(0))[0]
    assert v0.topics == ["a", "b"] and v0.owned_partitions == [] and v0.generation_id == -1


def test_error_codes():
    assert ErrorCode.NONE == 0 and ErrorCode.OFFSET_OUT_OF_RANGE == 1
    assert ErrorCode.UNKNOWN_SERVER_ERROR == -1 and ErrorCode.UNSUPPORTED_VERSION == 35
    e = KafkaProtocolError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
    assert e.code is ErrorCode.NOT_LEADER_OR_FOLLOWER and e.name == "NOT_LEADER_OR_FOLLOWER"
    assert "moved" in str(e)
    assert KafkaProtocolError(3).code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert KafkaProtocolError(9999).code == 9999 and KafkaProtocolError(9999).name is None


def test_generated_classes_basics():
    p = ProduceRequest.PartitionProduceData(index=1)
    assert p.records is None and p.unknown_tagged_fields == []
    assert repr(p) == "ProduceRequest.PartitionProduceData(index=1, records=None)"
    assert p == ProduceRequest.PartitionProduceData(index=1) and p != ProduceRequest.PartitionProduceData()
    assert not hasattr(p, "__dict__")
    with pytest.raises(TypeError):
        ProduceRequest(1)  # keyword-only
    with pytest.raises(TypeError):
        hash(p)
    # mutable defaults are not shared
    a, b = ProduceRequest(), ProduceRequest()
    a.topic_data.append(1)
    assert b.topic_data == []
    assert FetchResponse.PartitionData().current_leader == FetchResponse.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
