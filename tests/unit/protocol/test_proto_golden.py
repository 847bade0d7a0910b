"""Golden frames, composed by hand from the protocol specification (byte by byte,
commented), decoded and re-encoded identically."""

from __future__ import annotations

import uuid

from broker.protocol import codec
from broker.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from broker.protocol.messages.controlled_shutdown import ControlledShutdownRequest
from broker.protocol.messages.fetch import FetchResponse
from broker.protocol.messages.metadata import MetadataRequest
from broker.protocol.messages.produce import ProduceRequest


def h(s: str) -> bytes:
    """Hex with spaces/newlines/comments (after '#') ignored."""
    return bytes.fromhex("".join(line.split("#")[0] for line in s.splitlines()).replace(" ", ""))


# ApiVersions v3 request as librdkafka 2.3.0 sends it (frame without its size prefix).
API_VERSIONS_V3_REQUEST = h("""
    0012                      # request_api_key 18 (ApiVersions)
    0003                      # request_api_version 3
    00000001                  # correlation_id 1
    0007 72646b61666b61       # client_id "rdkafka": NON-compact int16 length even in header v2
    00                        # header tagged fields: none
    0b 6c696272646b61666b61   # client_software_name "librdkafka": compact, uvarint len+1 = 11
    06 322e332e30             # client_software_version "2.3.0": uvarint 5+1
    00                        # body tagged fields: none
""")


def test_api_versions_v3_request_as_librdkafka_sends_it():
    header, req = codec.decode_request(API_VERSIONS_V3_REQUEST)
    assert (
        header.request_api_key,
        header.request_api_version,
        header.correlation_id,
        header.client_id,
        header.unknown_tagged_fields,
    ) == (18, 3, 1, "rdkafka", [])
    assert req == ApiVersionsRequest(client_software_name="librdkafka", client_software_version="2.3.0")
    framed = codec.encode_request(18, 3, 1, "rdkafka", req)
    assert framed == len(API_VERSIONS_V3_REQUEST).to_bytes(4, "big") + API_VERSIONS_V3_REQUEST


METADATA_V12_REQUEST = h("""
    0003 000c 00000005        # Metadata v12, correlation_id 5
    0003 616263               # client_id "abc"
    00                        # header tagged fields
    02                        # topics: compact nullable array, 1 element
      00000000000000000000000000000000   # topic_id: zero uuid
      04 666f6f               # name "foo" (compact nullable string)
      00                      # topic tagged fields
    01                        # allow_auto_topic_creation true
    00                        # include_topic_authorized_operations false
    00                        # tagged fields
""")

METADATA_V12_ALL_TOPICS = h("""
    0003 000c 00000006 ffff 00   # Metadata v12, correlation 6, client_id null, no tags
    00                           # topics: null (all topics)
    00 00 00                     # allow_auto false, include_topic_auth false, no tags
""")


def test_metadata_v12_request():
    header, req = codec.decode_request(METADATA_V12_REQUEST)
    assert header.correlation_id == 5 and header.client_id == "abc"
    assert req == MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name="foo")],
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    assert codec.encode_request(3, 12, 5, "abc", req)[4:] == METADATA_V12_REQUEST

    header, req = codec.decode_request(METADATA_V12_ALL_TOPICS)
    assert header.client_id is None
    assert req.topics is None and req.allow_auto_topic_creation is False
    assert codec.encode_request(3, 12, 6, None, req)[4:] == METADATA_V12_ALL_TOPICS


# ApiVersions v3 response: header v0 (never flexible for ApiVersions) + a known tagged
# field (FinalizedFeaturesEpoch, tag 1) and an unknown one (tag 9).
API_VERSIONS_V3_RESPONSE = h("""
    00000001                  # correlation_id 1 (response header v0: no tagged fields)
    0000                      # error_code 0
    02                        # api_keys: compact array of 1
      0012 0000 0004          # api_key 18, min 0, max 4
      00                      # element tagged fields
    00000000                  # throttle_time_ms 0
    02                        # 2 tagged fields
      01 08 000000000000002a  # tag 1 FinalizedFeaturesEpoch = 42, size 8
      09 02 beef              # tag 9 (unknown), size 2
""")


def test_api_versions_v3_response_with_tagged_fields():
    header, resp = codec.decode_response(18, 3, API_VERSIONS_V3_RESPONSE)
    assert header.correlation_id == 1
    assert resp == ApiVersionsResponse(
        error_code=0,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)],
        throttle_time_ms=0,
        finalized_features_epoch=42,
        unknown_tagged_fields=[(9, b"\xbe\xef")],
    )
    parts = codec.encode_response((1, 18, 3), resp)
    assert (
        b"".join(bytes(p) for p in parts) == len(API_VERSIONS_V3_RESPONSE).to_bytes(4, "big") + API_VERSIONS_V3_RESPONSE
    )


# Fetch v12 response: response header v1; a partition with a tagged *struct*
# (CurrentLeader, tag 1: the struct carries its own empty tagged-field section) and an
# unknown tag; records as a compact nullable byte string.
FETCH_V12_RESPONSE = h("""
    0000002a 00               # correlation_id 42, header tagged fields (v1)
    00000000                  # throttle_time_ms
    0000                      # error_code
    0000007b                  # session_id 123
    02                        # responses: 1 topic
      04 666f6f               # topic "foo"
      02                      # partitions: 1
        00000000              # partition_index 0
        0000                  # error_code 0
        0000000000000064      # high_watermark 100
        0000000000000064      # last_stable_offset 100
        0000000000000000      # log_start_offset 0
        00                    # aborted_transactions: null
        ffffffff              # preferred_read_replica -1
        04 616263             # records: 3 bytes "abc"
        02                    # partition tagged fields: 2
          01 09 00000003 00000007 00   # tag 1 current_leader (leader 3, epoch 7) + its tags
          05 02 beef                   # tag 5 unknown
      00                      # topic tagged fields
    00                        # tagged fields
""")


def test_fetch_v12_response_with_tagged_struct():
    header, resp = codec.decode_response(1, 12, FETCH_V12_RESPONSE)
    assert header.correlation_id == 42
    part = resp.responses[0].partitions[0]
    assert isinstance(part.records, memoryview) and part.records == b"abc"
    assert part.current_leader == FetchResponse.LeaderIdAndEpoch(leader_id=3, leader_epoch=7)
    assert part.diverging_epoch == FetchResponse.EpochEndOffset()  # absent: default
    assert part.unknown_tagged_fields == [(5, b"\xbe\xef")]
    assert part.aborted_transactions is None
    expected = FetchResponse(
        session_id=123,
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="foo",
                partitions=[
                    FetchResponse.PartitionData(
                        partition_index=0,
                        high_watermark=100,
                        last_stable_offset=100,
                        log_start_offset=0,
                        current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=3, leader_epoch=7),
                        aborted_transactions=None,
                        records=b"abc",
                        unknown_tagged_fields=[(5, b"\xbe\xef")],
                    )
                ],
            )
        ],
    )
    assert resp == expected
    out = b"".join(bytes(p) for p in codec.encode_response((42, 1, 12), expected))
    assert out == len(FETCH_V12_RESPONSE).to_bytes(4, "big") + FETCH_V12_RESPONSE


PRODUCE_V3_REQUEST = h("""
    0000 0003 00000007        # Produce v3, correlation_id 7 (request header v1)
    0002 6964                 # client_id "id"
    ffff                      # transactional_id: null (int16 -1)
    ffff                      # acks -1
    00007530                  # timeout_ms 30000
    00000001                  # topic_data: int32 count 1
      0001 74                 # name "t"
      00000001                # partition_data: 1
        00000002              # index 2
        00000004 deadbeef     # records: int32 length 4
""")


def test_produce_v3_request_records_are_zero_copy():
    frame = bytearray(PRODUCE_V3_REQUEST)
    header, req = codec.decode_request(frame)
    assert header.client_id == "id"
    records = req.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records == b"\xde\xad\xbe\xef"
    records[0] = 0x00  # patch in place: the frame changes, no copy was made
    assert frame[-4] == 0x00
    assert req == ProduceRequest(
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t", partition_data=[ProduceRequest.PartitionProduceData(index=2, records=b"\x00\xad\xbe\xef")]
            )
        ],
    )
    assert codec.encode_request(0, 3, 7, "id", req)[4:] == bytes(frame)


CONTROLLED_SHUTDOWN_V0_REQUEST = h("""
    0007 0000 00000009        # ControlledShutdown v0, correlation_id 9: request header v0, no client_id
    00000003                  # broker_id 3
""")


def test_controlled_shutdown_v0_uses_header_v0():
    header, req = codec.decode_request(CONTROLLED_SHUTDOWN_V0_REQUEST)
    assert header.correlation_id == 9 and header.client_id == ""  # absent in v0: spec default
    assert req == ControlledShutdownRequest(broker_id=3)
    assert codec.encode_request(7, 0, 9, None, req)[4:] == CONTROLLED_SHUTDOWN_V0_REQUEST
