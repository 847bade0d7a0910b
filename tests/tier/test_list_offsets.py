"""ListOffsets' tiered storage specs on a broker (Log.offset_for_timestamp): earliest-local
(-4, KIP-405, v8: the first offset on the broker's disk, which is the log start offset
while no segment is tiered) and latest-tiered (-5, KIP-1005, v9: -1 without remote
storage), as Kafka 4.3's kafka-get-offsets asks for them; read_committed does not hide earliest-local
behind the last stable offset (Kafka's Partition.fetchOffsetForTimestamp)."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.client import BrokerConnection
from broker.log.log import EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP
from broker.protocol.messages.list_offsets import ListOffsetsRequest
from tests.support.broker_proc import BrokerProcess
from tests.support.kafka_tools import kafka_tool

from ._support import fill, make_log


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("tier-offsets") / "data") as b:
        yield b


def offsets(broker, topic: str, spec: str) -> dict[int, int]:
    lines = kafka_tool("kafka-get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--time", spec)
    return {int(line.split(":")[1]): int(line.split(":")[2]) for line in lines.lines}


def test_earliest_local_is_the_log_start_without_tiering(broker, tmp_path):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("offsets-empty", 1, 1), NewTopic("offsets-full", 1, 1)])["offsets-full"].result(30)
    # an empty log: its (local) log start, 0 (not -1: there is no record to find)
    assert offsets(broker, "offsets-empty", "earliest-local") == {0: 0}
    # one batch of 10 records, deleted up to the middle of it
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 100})
    for i in range(10):
        p.produce("offsets-full", b"%d" % i, partition=0)
    assert p.flush(30) == 0
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [{"topic": "offsets-full", "partition": 0, "offset": 4}]}))
    kafka_tool("kafka-delete-records", "--bootstrap-server", broker.bootstrap, "--offset-json-file", spec)
    assert offsets(broker, "offsets-full", "earliest") == {0: 4}
    assert offsets(broker, "offsets-full", "earliest-local") == {0: 4}
    assert offsets(broker, "offsets-full", "-4") == {0: 4}
    # latest-tiered (ListOffsets v9): nothing is in remote storage, so -1 (the tool prints
    # no line for it); earliest-pending-upload (-6) is v11's: refused below it, as Kafka 4.3
    assert offsets(broker, "offsets-full", "latest-tiered") == {}
    assert raw(broker, "offsets-full", -5, 9) == (0, -1)
    assert raw(broker, "offsets-full", -6, 10) == (35, -1)  # UNSUPPORTED_VERSION


def raw(broker, topic: str, timestamp: int, version: int, isolation: int = 0) -> tuple[int, int]:
    req = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation,
        topics=[
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp)]
            )
        ],
    )
    with BrokerConnection("127.0.0.1", broker.port) as conn:
        part = conn.request(req, version).topics[0].partitions[0]
    return part.error_code, part.offset


def test_read_committed_earliest_local_is_not_hidden_by_the_last_stable_offset(broker):
    """An empty log's last stable offset is 0: earliest-local still answers 0, as Kafka's
    (latest would answer the LSO; timestamps at or beyond it find nothing)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("offsets-rc", 1, 1)])["offsets-rc"].result(30)
    assert raw(broker, "offsets-rc", EARLIEST_LOCAL_TIMESTAMP, 8, isolation=1) == (0, 0)


def test_the_log_answers_the_tiered_specs(tmp_path):
    lg = make_log(tmp_path / "logs" / "tiered-0")
    try:
        fill(lg, 50)
        lg.delete_records(7)
        assert lg.offset_for_timestamp(EARLIEST_LOCAL_TIMESTAMP) == (7, -1)
        assert lg.offset_for_timestamp(LATEST_TIERED_TIMESTAMP) == (-1, -1)  # no remote storage
        lg.remote_log_enabled, lg.highest_copied_offset = True, 29
        assert lg.offset_for_timestamp(LATEST_TIERED_TIMESTAMP) == (29, -1)
    finally:
        lg.close()
