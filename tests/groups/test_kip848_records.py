"""KIP-848 consumer groups' and KIP-932 share groups' records in __consumer_offsets are Kafka's: Apache Kafka's own
kafka-dump-log --offsets-decoder (its group coordinator's record serde) reads what
broker/group/group_records.py writes for a group whose members joined, reconciled and
left, field by field, without an error."""

from __future__ import annotations

import json
import uuid

import pytest

from broker.group import group_records as GR
from broker.group.consumer_group import ConsumerGroup, HeartbeatRequest, TopicsView
from broker.native import BatchBuilder, assign_offsets
from tests.support.kafka_tools import kafka_tool

pytestmark = pytest.mark.interop

TOPIC_ID = uuid.UUID("5c8e0b4e-1b8f-4d43-9d0e-3f8f2a6c1d7e")


def _group_log() -> tuple[ConsumerGroup, list]:
    topics = TopicsView({"orders": (TOPIC_ID, 4)})
    g = ConsumerGroup("kip848-dump")
    log: list = []
    a = g.heartbeat(
        HeartbeatRequest(
            "kip848-dump",
            "member-a",
            0,
            rack_id="r1",
            rebalance_timeout_ms=30000,
            subscribed_topic_names=["orders"],
            server_assignor="range",
            owned={},
            client_id="client-a",
            client_host="/127.0.0.1",
        ),
        topics,
        ["uniform", "range"],
    )
    log += GR.records_after(g, a)
    b = g.heartbeat(
        HeartbeatRequest(
            "kip848-dump", "member-b", 0, rebalance_timeout_ms=30000, subscribed_topic_regex="ord.*", owned={}
        ),
        topics,
        ["uniform", "range"],
    )
    log += GR.records_after(g, b)
    # a gives up half (pending revocation), then reports it has
    r = g.heartbeat(HeartbeatRequest("kip848-dump", "member-a", 1, owned=a.assignment), topics, ["uniform", "range"])
    log += GR.records_after(g, r)
    r = g.heartbeat(HeartbeatRequest("kip848-dump", "member-a", 1, owned=r.assignment), topics, ["uniform", "range"])
    log += GR.records_after(g, r)
    log += GR.records_after(g, g.heartbeat(HeartbeatRequest("kip848-dump", "member-b", -1), topics, ["uniform"]))
    return g, log


def test_kafka_dump_log_decodes_kbrokers_kip848_records(tmp_path):
    g, log = _group_log()
    b = BatchBuilder()
    for key, value in log:
        b.append(1_700_000_000_000, key, value)
    batch = bytearray(b.build())
    assign_offsets(batch, 0)
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(bytes(batch))
    out = kafka_tool("kafka-dump-log", "--offsets-decoder", "--print-data-log", "--files", str(segment)).stdout
    assert "Exception" not in out and "unknown" not in out.lower(), out
    decoded = []
    for line in out.splitlines():
        if " key: " not in line:
            continue
        key = json.loads(line.split(" key: ", 1)[1].split(" payload: ", 1)[0])
        payload = line.split(" payload: ", 1)[1]
        decoded.append((key, None if payload.strip() in ("", "<DELETE>", "null") else json.loads(payload)))
    assert len(decoded) == len(log)
    by: dict[int, list] = {}
    for k, v in decoded:
        by.setdefault(int(k["type"]), []).append((k["data"], v))
        assert v is None or v["version"] == "0"
    assert set(by) == {3, 5, 6, 7, 8}
    member = next(v for k, v in by[5] if k["memberId"] == "member-a")
    assert member["data"]["rackId"] == "r1" and member["data"]["subscribedTopicNames"] == ["orders"]
    assert member["data"]["serverAssignor"] == "range" and member["data"]["rebalanceTimeoutMs"] == 30000
    assert next(v for k, v in by[5] if k["memberId"] == "member-b")["data"]["subscribedTopicRegex"] == "ord.*"
    assert by[5][-1][1] is None  # member-b left: its metadata's tombstone
    assert by[3][-1][1]["data"]["epoch"] == g.group_epoch
    current = [v["data"] for k, v in by[8] if k["memberId"] == "member-a" and v is not None]
    assert [c["state"] for c in current] == [0, 1, 0]  # stable, unrevoked, stable
    assert current[1]["partitionsPendingRevocation"][0]["partitions"] == [2, 3]
    assert uuid.UUID(bytes=_uuid_bytes(current[-1]["assignedPartitions"][0]["topicId"])) == TOPIC_ID


def _uuid_bytes(kafka_uuid: str) -> bytes:
    """Kafka prints a Uuid in URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64decode(kafka_uuid + "==")


def test_kafka_dump_log_decodes_kbrokers_share_group_records(tmp_path):
    """The share-group records (types 10-14) of members joining, heartbeating and leaving,
    as Kafka's own decoder reads them."""
    from broker.group.share_group import ShareGroup, ShareHeartbeat

    topics = TopicsView({"orders": (TOPIC_ID, 2)})
    g = ShareGroup("share-dump")
    log: list = []
    for req in (
        ShareHeartbeat("share-dump", "member-a", 0, rack_id="r1", subscribed_topic_names=["orders"], client_id="ca"),
        ShareHeartbeat("share-dump", "member-b", 0, subscribed_topic_names=["orders"], client_host="/127.0.0.1"),
        ShareHeartbeat("share-dump", "member-c", 0, subscribed_topic_names=["orders"]),
        ShareHeartbeat("share-dump", "member-a", 1),
        ShareHeartbeat("share-dump", "member-b", -1),
    ):
        log += GR.share_records_after(g, g.heartbeat(req, topics, 200))
    log += GR.share_group_tombstones(g)
    b = BatchBuilder()
    for key, value in log:
        b.append(1_700_000_000_000, key, value)
    batch = bytearray(b.build())
    assign_offsets(batch, 0)
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(bytes(batch))
    out = kafka_tool("kafka-dump-log", "--offsets-decoder", "--print-data-log", "--files", str(segment)).stdout
    assert "Exception" not in out and "unknown" not in out.lower(), out
    by: dict[int, list] = {}
    for line in out.splitlines():
        if " key: " not in line:
            continue
        key = json.loads(line.split(" key: ", 1)[1].split(" payload: ", 1)[0])
        payload = line.split(" payload: ", 1)[1]
        value = None if payload.strip() in ("", "<DELETE>", "null") else json.loads(payload)
        by.setdefault(int(key["type"]), []).append((key["data"], value))
        assert value is None or value["version"] == "0"
    assert sum(len(v) for v in by.values()) == len(log)
    assert set(by) == {10, 11, 12, 13, 14}
    member = next(v for k, v in by[10] if k["memberId"] == "member-a")["data"]
    assert member["rackId"] == "r1" and member["clientId"] == "ca" and member["subscribedTopicNames"] == ["orders"]
    epochs = [v["data"]["epoch"] for _, v in by[11] if v is not None]
    assert epochs == [1, 2, 3, 4]
    # three members on two partitions: member-a's current assignment at epoch 3
    current = [v["data"] for k, v in by[14] if k["memberId"] == "member-a" and v is not None]
    assert current[-1]["memberEpoch"] == 3 and current[-1]["previousMemberEpoch"] == 1
    assert uuid.UUID(bytes=_uuid_bytes(current[-1]["assignedPartitions"][0]["topicId"])) == TOPIC_ID
    assert by[11][-1][1] is None and by[12][-1][1] is None  # the group's tombstones last
