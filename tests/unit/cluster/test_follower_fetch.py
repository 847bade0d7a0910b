"""Follower fetches through the fetch handler (broker/server/handlers/fetch.py) and
ReplicaManager.fetch_records, from a real leader Partition and Log, through a fake request
context: a follower's position moves only after a successful read (issue 16, defect 1)."""

from types import SimpleNamespace

import pytest

from broker.cluster.metadata import PartitionState
from broker.cluster.replica.manager import ReplicaManager
from broker.cluster.replica.partition import Partition
from broker.cluster.replica.throttle import ReplicationQuotas
from broker.log.log import Log
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.fetch import FetchRequest as F
from broker.server.handlers import fetch
from tests.unit.log._support import TP, batch, log_config


class KnownTopics:
    def partition_state(self, topic, partition):
        return object()


def replicas_of(part, quotas=None):
    """Broker 1's ReplicaManager holding `part` (no log manager, metrics off)."""
    replicas = ReplicaManager(1, None, KnownTopics(), quotas=quotas or ReplicationQuotas(1))
    replicas.partitions[part.tp] = part
    return replicas


@pytest.fixture
def leader(tmp_path):
    """Broker 1 leads t-0 at epoch 5 (replicas 1, 2, 3, all in sync); 4 records, none committed."""
    lg = Log.load(str(tmp_path / "t-0"), TP, log_config(tmp_path))
    part = Partition(TP, lg, PartitionState(0, [1, 2, 3], 1, 5, [1, 2, 3], 1, 7), 1)
    part.append_as_leader(batch(4), -1)
    return part


def follower_fetch(part, replica_id, offset, version=12, last_fetched_epoch=-1, leader_epoch=5, quotas=None):
    ctx = SimpleNamespace(
        services=SimpleNamespace(replicas=replicas_of(part, quotas), config={"fetch.wait.max.ms": 30000}),
        has_right=lambda *a, **k: True,
        api_version=version,
        received=0.0,
        connection=SimpleNamespace(closed=False),
    )
    req = F(
        replica_id=replica_id,
        replica_state=F.ReplicaState(replica_id=replica_id, replica_epoch=-1),
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic=TP.topic,
                partitions=[
                    F.FetchPartition(
                        partition=0,
                        current_leader_epoch=leader_epoch,
                        fetch_offset=offset,
                        last_fetched_epoch=last_fetched_epoch,
                        log_start_offset=0,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    d = fetch.handle(ctx, req).responses[0].partitions[0]
    if hasattr(d.records, "close"):
        d.records.close()
    return d


def test_fetches_from_beyond_the_log_end_are_out_of_range_and_move_nothing(leader):
    for replica_id in (2, 3):
        d = follower_fetch(leader, replica_id, 10**9, version=11)
        assert d.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert leader.log.high_watermark == 0 and leader.follower_leo == {2: -1, 3: -1}
    leader.append_as_leader(batch(1), -1)
    assert leader.log.high_watermark == 0  # an acks=all produce is not acknowledged


def test_a_successful_follower_read_moves_the_high_watermark(leader):
    d = follower_fetch(leader, 2, 4)
    assert d.error_code == 0 and d.high_watermark == 0
    d = follower_fetch(leader, 3, 2)
    assert d.error_code == 0 and d.records
    assert leader.log.high_watermark == 2 and leader.follower_leo == {2: 4, 3: 2}


def test_a_diverging_last_fetched_epoch_gets_where_it_ends_and_no_records(leader):
    d = follower_fetch(leader, 2, 10**9, last_fetched_epoch=5)
    assert d.error_code == 0 and not d.records
    assert (d.diverging_epoch.epoch, d.diverging_epoch.end_offset) == (5, 4)
    d = follower_fetch(leader, 3, 3, last_fetched_epoch=6)  # newer than any epoch here
    assert d.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert leader.follower_leo == {2: -1, 3: -1} and leader.log.high_watermark == 0
    d = follower_fetch(leader, 2, 4, last_fetched_epoch=5)  # a prefix: read on
    assert d.error_code == 0 and d.diverging_epoch.epoch == -1
    assert leader.follower_leo[2] == 4


def test_a_broker_that_is_not_a_replica_is_refused(leader):
    assert follower_fetch(leader, 7, 4).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert follower_fetch(leader, 7, 4, leader_epoch=-1).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert follower_fetch(leader, 1, 4).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH  # itself
    assert leader.follower_leo == {2: -1, 3: -1}


@pytest.fixture
def lagging(tmp_path):
    """Broker 1 leads t-0 (replicas 1, 2, 3; ISR 1, 2: broker 3 is out of sync), 3 batches
    of 10 records."""
    lg = Log.load(str(tmp_path / "t-0"), TP, log_config(tmp_path))
    part = Partition(TP, lg, PartitionState(0, [1, 2, 3], 1, 5, [1, 2], 1, 7), 1)
    for _ in range(3):
        part.append_as_leader(batch(10, value_size=1000), -1)
    return part


def throttled(replicas="0:1", bound=1000.0):
    quotas = ReplicationQuotas(1)
    quotas.topic_configs_changed(TP.topic, {"leader.replication.throttled.replicas": replicas})
    quotas.set_rates(bound, None)
    return quotas


def test_a_throttled_partition_answers_an_out_of_sync_follower_nothing_while_exceeded(lagging):
    quotas = throttled()
    quotas.leader.record(10**6)  # far above 1000 B/s
    d = follower_fetch(lagging, 3, 0, quotas=quotas)
    assert d.error_code == 0 and not d.records and d.high_watermark == 0
    assert lagging.follower_leo[3] == 0  # the fetch still counts as its position
    assert quotas.leader.throttled_bytes == 10**6  # nothing sent, nothing recorded
    # an in-sync follower is never held (Kafka: no ISR thrashing); its bytes are recorded
    d = follower_fetch(lagging, 2, 0, quotas=quotas)
    assert d.records and quotas.leader.throttled_bytes == 10**6 + d.records.length
    # an offset outside the log is still refused while held
    assert follower_fetch(lagging, 3, 10**6, quotas=quotas).error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_below_its_rate_a_throttled_partition_sends_one_windows_bytes_and_records_them(lagging):
    quotas = throttled(bound=1000.0)
    d = follower_fetch(lagging, 3, 0, quotas=quotas)
    # one window of 1000 B/s: the first batch only (always whole, as for any fetch)
    one_batch = d.records.length
    assert 10_000 < one_batch < 20_000
    assert quotas.leader.throttled_bytes == one_batch and quotas.leader.exceeded()
    assert not follower_fetch(lagging, 3, 10, quotas=quotas).records  # now held
    big = throttled(bound=10**9)
    d = follower_fetch(lagging, 3, 0, quotas=big)
    assert d.records.length == 3 * one_batch and big.leader.throttled_bytes == 3 * one_batch


def test_unthrottled_partitions_and_other_brokers_lists_are_not_held(lagging):
    for quotas in (throttled("0:2"), throttled("1:1")):
        quotas.leader.record(10**6)
        d = follower_fetch(lagging, 3, 0, quotas=quotas)
        assert d.records and d.records.length > 20_000
        assert quotas.leader.throttled_bytes == 10**6  # not a throttled partition here: not recorded
    quotas = throttled("0:1", bound=None)  # listed, without a rate: recorded, never held
    quotas.leader.record(10**6)
    d = follower_fetch(lagging, 3, 0, quotas=quotas)
    assert d.records.length > 20_000 and quotas.leader.throttled_bytes == 10**6 + d.records.length
    quotas = throttled("*")
    quotas.leader.record(10**6)
    assert not follower_fetch(lagging, 3, 0, quotas=quotas).records
