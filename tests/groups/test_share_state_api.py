"""KIP-932's share-group state APIs (InitializeShareGroupState, ReadShareGroupState,
WriteShareGroupState v0-1, DeleteShareGroupState, ReadShareGroupStateSummary v0-1) and
FindCoordinator key type 2, sent by kbroker's own protocol client to a real `broker
serve`: the state written is read back (and after the broker is killed -9 and started
again: replayed from __share_group_state), the epochs fence as Kafka 4.4's share
coordinator fences, and bad input gets Kafka's answers."""

from __future__ import annotations

import time
import uuid

import pytest

from broker.client import BrokerConnection, Cluster
from broker.protocol.errors import ErrorCode as E
from broker.protocol.messages.delete_share_group_state import DeleteShareGroupStateRequest as DSGS
from broker.protocol.messages.find_coordinator import FindCoordinatorRequest
from broker.protocol.messages.initialize_share_group_state import InitializeShareGroupStateRequest as ISGS
from broker.protocol.messages.read_share_group_state import ReadShareGroupStateRequest as RSGS
from broker.protocol.messages.read_share_group_state_summary import ReadShareGroupStateSummaryRequest as RSGSS
from broker.protocol.messages.write_share_group_state import WriteShareGroupStateRequest as WSGS
from broker.uuids import uuid_text

pytestmark = pytest.mark.timeout(180)

BROKER_CONFIG = {
    "share.coordinator.state.topic.num.partitions": 3,
    "share.coordinator.state.topic.replication.factor": 1,
}
RETRIABLE = {E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR}


def conn(broker) -> BrokerConnection:
    host, port = broker.bootstrap.split(":")
    return BrokerConnection(host, int(port))


def initialize(k, group, tid, partition, state_epoch, start_offset, timeout=30.0):
    """InitializeShareGroupState, retried while the coordinator is being created or loaded."""
    deadline = time.monotonic() + timeout
    while True:
        r = k.request(
            ISGS(
                group_id=group,
                topics=[
                    ISGS.InitializeStateData(
                        topic_id=tid,
                        partitions=[
                            ISGS.PartitionData(partition=partition, state_epoch=state_epoch, start_offset=start_offset)
                        ],
                    )
                ],
            )
        )
        p = r.results[0].partitions[0]
        if p.error_code not in RETRIABLE or time.monotonic() > deadline:
            return p
        time.sleep(0.1)


def read(k, group, tid, partition, leader_epoch, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        r = k.request(
            RSGS(
                group_id=group,
                topics=[
                    RSGS.ReadStateData(
                        topic_id=tid, partitions=[RSGS.PartitionData(partition=partition, leader_epoch=leader_epoch)]
                    )
                ],
            )
        )
        p = r.results[0].partitions[0]
        if p.error_code not in RETRIABLE or time.monotonic() > deadline:
            return p
        time.sleep(0.1)


def write(k, group, tid, partition, state_epoch, leader_epoch, start_offset, batches, dcc=-1, version=None):
    r = k.request(
        WSGS(
            group_id=group,
            topics=[
                WSGS.WriteStateData(
                    topic_id=tid,
                    partitions=[
                        WSGS.PartitionData(
                            partition=partition,
                            state_epoch=state_epoch,
                            leader_epoch=leader_epoch,
                            start_offset=start_offset,
                            delivery_complete_count=dcc,
                            state_batches=[
                                WSGS.StateBatch(first_offset=f, last_offset=last, delivery_state=s, delivery_count=c)
                                for f, last, s, c in batches
                            ],
                        )
                    ],
                )
            ],
        ),
        version=version,
    )
    return r.results[0].partitions[0]


def summary(k, group, tid, partition, version=None):
    r = k.request(
        RSGSS(
            group_id=group,
            topics=[
                RSGSS.ReadStateSummaryData(
                    topic_id=tid, partitions=[RSGSS.PartitionData(partition=partition, leader_epoch=0)]
                )
            ],
        ),
        version=version,
    )
    return r.results[0].partitions[0]


def batches(p) -> list[tuple[int, int, int, int]]:
    return [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches]


@pytest.fixture(scope="module")
def topic(broker):
    with Cluster(broker.bootstrap) as c:
        c.create_topic("share-state-t", 2, 1)
        return c.topic("share-state-t", wait_s=10).topic_id


def test_find_coordinator_answers_the_share_coordinator_of_a_key(broker, topic):
    key = f"g1:{uuid_text(topic)}:0"
    with conn(broker) as k:
        deadline = time.monotonic() + 30
        while True:
            r = k.request(FindCoordinatorRequest(key_type=2, coordinator_keys=[key]), version=6)
            c = r.coordinators[0]
            if c.error_code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert (c.key, c.error_code, c.node_id, c.port) == (key, 0, 0, int(broker.bootstrap.split(":")[1]))
        bad = k.request(
            FindCoordinatorRequest(key_type=2, coordinator_keys=["g1", f"g1:{uuid_text(topic)}:x", key]), version=6
        )
        assert [c.error_code for c in bad.coordinators] == [E.INVALID_REQUEST, E.INVALID_REQUEST, 0]
        old = k.request(FindCoordinatorRequest(key_type=2, coordinator_keys=[key]), version=4)
        assert old.coordinators[0].error_code == E.INVALID_REQUEST  # the share key type is v6's


def test_state_is_initialized_written_read_and_summarized(broker, topic):
    with conn(broker) as k:
        # never initialized: Kafka's INVALID_REQUEST for a read, start offset -1 in a summary
        p = read(k, "g2", topic, 0, 0)
        assert (p.error_code, p.error_message) == (
            E.INVALID_REQUEST,
            "Read operation on uninitialized share partition not allowed.",
        )
        assert summary(k, "g2", topic, 0).start_offset == -1
        assert write(k, "g2", topic, 0, 0, 0, 0, []).error_code == E.INVALID_REQUEST
        assert initialize(k, "g2", topic, 0, 0, 100).error_code == 0
        p = read(k, "g2", topic, 0, 1)
        assert (p.error_code, p.state_epoch, p.start_offset, batches(p)) == (0, 0, 100, [])
        assert write(k, "g2", topic, 0, 0, 1, 100, [(100, 109, 0, 1)], version=0).error_code == 0
        assert write(k, "g2", topic, 0, 0, 1, 100, [(100, 104, 2, 1), (105, 105, 4, 1)], dcc=6).error_code == 0
        assert write(k, "g2", topic, 0, 0, 1, 106, [(106, 107, 0, 2)], dcc=0).error_code == 0
        p = read(k, "g2", topic, 0, 1)
        assert (p.start_offset, batches(p)) == (106, [(106, 107, 0, 2), (108, 109, 0, 1)])
        s = summary(k, "g2", topic, 0)
        assert (s.error_code, s.start_offset, s.leader_epoch, s.state_epoch, s.delivery_complete_count) == (
            0,
            106,
            1,
            0,
            0,
        )
        assert summary(k, "g2", topic, 0, version=0).start_offset == 106
        # deleted: never initialized again
        r = k.request(
            DSGS(
                group_id="g2",
                topics=[DSGS.DeleteStateData(topic_id=topic, partitions=[DSGS.PartitionData(partition=0)])],
            )
        )
        assert r.results[0].partitions[0].error_code == 0
        assert read(k, "g2", topic, 0, 1).error_code == E.INVALID_REQUEST
        assert summary(k, "g2", topic, 0).start_offset == -1


def test_state_and_leader_epochs_fence(broker, topic):
    with conn(broker) as k:
        assert initialize(k, "g3", topic, 1, 2, 0).error_code == 0
        assert read(k, "g3", topic, 1, 5).error_code == 0
        assert read(k, "g3", topic, 1, 4).error_code == E.FENCED_LEADER_EPOCH
        assert write(k, "g3", topic, 1, 2, 4, 0, [(0, 0, 2, 1)]).error_code == E.FENCED_LEADER_EPOCH
        assert write(k, "g3", topic, 1, 1, 5, 0, [(0, 0, 2, 1)]).error_code == E.FENCED_STATE_EPOCH
        assert initialize(k, "g3", topic, 1, 1, 0).error_code == E.FENCED_STATE_EPOCH
        assert write(k, "g3", topic, 1, 2, 5, 0, [(0, 0, 2, 1)]).error_code == 0
        # an offset reset: a new state epoch, the old one fenced from then on
        assert initialize(k, "g3", topic, 1, 3, 40).error_code == 0
        assert write(k, "g3", topic, 1, 2, 5, 0, [(0, 0, 2, 1)]).error_code == E.FENCED_STATE_EPOCH
        p = read(k, "g3", topic, 1, 5)
        assert (p.state_epoch, p.start_offset, batches(p)) == (3, 40, [])


def test_bad_input_gets_kafkas_answers(broker, topic):
    with conn(broker) as k:
        zero, unknown = uuid.UUID(int=0), uuid.uuid4()
        assert initialize(k, "g4", zero, 0, 0, 0).error_code == E.INVALID_REQUEST
        assert initialize(k, "g4", topic, -1, 0, 0).error_code == E.INVALID_REQUEST
        assert initialize(k, "g4", topic, 0, -1, 0).error_code == E.INVALID_REQUEST
        assert initialize(k, "g4", unknown, 0, 0, 0).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        assert initialize(k, "g4", topic, 2, 0, 0).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        assert read(k, "g4", topic, 0, -1).error_code == E.INVALID_REQUEST
        assert summary(k, "g4", unknown, 0).error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        # an empty group id is answered with no results, as Kafka's share coordinator answers it
        r = k.request(
            ISGS(
                group_id="",
                topics=[
                    ISGS.InitializeStateData(
                        topic_id=topic, partitions=[ISGS.PartitionData(partition=0, state_epoch=0, start_offset=0)]
                    )
                ],
            )
        )
        assert r.results == []


def test_state_survives_the_broker_killed_and_started_again(broker, topic):
    written = [(2 * i, 2 * i + 1, 2 if i % 2 else 4, 1) for i in range(12)]
    with conn(broker) as k:
        assert initialize(k, "g5", topic, 0, 0, 0).error_code == 0
        for b in written:  # twelve update records over Initialize's snapshot
            assert write(k, "g5", topic, 0, 0, 0, 0, [b]).error_code == 0
        assert batches(read(k, "g5", topic, 0, 0)) == written
    broker.kill()
    broker.start()
    with conn(broker) as k:
        after = read(k, "g5", topic, 0, 0)
        assert (after.error_code, after.start_offset, batches(after)) == (0, 0, written)
