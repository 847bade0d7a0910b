"""ReplicaManager.fetch_records and its wait (broker/cluster/replica/delayed_fetch.py) on
real Partitions and Logs: a fetch that can answer does so at once, without a coroutine or
a task; one that cannot waits in the purgatory — registered in the same step as its read —
until an append (followers), a move of the high watermark (consumers) or a change of
leadership gives it its answer, or its wait is over. The wait is generic over what it
reads (a share fetch's long poll is the same wait). And the fetch handler: a fetch with a
partition refused waits for nothing."""

import asyncio
import functools
import uuid
from types import SimpleNamespace

import pytest

import broker.cluster.replica.manager as manager_module
from broker.cluster.metadata import PartitionState
from broker.cluster.replica.delayed_fetch import DelayedFetch, FetchParams, FetchPartition
from broker.cluster.replica.manager import ReplicaManager
from broker.cluster.replica.partition import Partition
from broker.cluster.replica.purgatory import HIGH_WATERMARK
from broker.log import TopicPartition
from broker.log.log import Log
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.fetch import FetchRequest as F
from broker.server.handlers import fetch
from tests.unit.log._support import batch, log_config

E = ErrorCode
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
TOPIC_ID = uuid.UUID(int=7)


class Metadata:
    """Topic `t` (id TOPIC_ID) has partitions 0-1 in the cluster."""

    def __init__(self):
        self.ids = {TOPIC_ID: "t"}

    def partition_state(self, topic, partition):
        return object() if topic == "t" and 0 <= partition < 2 else None

    def topic_name(self, topic_id):
        return self.ids.get(topic_id)


def host(replicas, tmp_path, tp, replica_ids=(1,), leader=1):
    lg = Log.load(str(tmp_path / str(tp)), tp, log_config(tmp_path))
    state = PartitionState(tp.partition, list(replica_ids), leader, 0, list(replica_ids))
    replicas.partitions[tp] = Partition(tp, lg, state, 1, replicas.purgatory, lambda p, new_isr: None)
    return replicas.partitions[tp]


def in_loop(test):
    """Runs an async test in a fresh event loop (asyncio.run)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        asyncio.run(test(*args, **kwargs))

    return run


@pytest.fixture
def replicas():
    return ReplicaManager(1, None, Metadata())


def consumer(max_wait_ms=5000, min_bytes=1, received=None, committed=False, replica_id=-1):
    now = asyncio.get_running_loop().time() if received is None else received
    return FetchParams(replica_id, 1 << 20, min_bytes, max_wait_ms, now, committed)


def at(tp, offset=0, **kw):
    return FetchPartition(tp.topic, tp.partition, offset, 1 << 20, **kw)


def records_of(read):
    return [r.records.length if r.records is not None else 0 for r in read.partitions]


@pytest.fixture
def no_delayed_fetch(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("a DelayedFetch for a fetch that can answer")

    monkeypatch.setattr(manager_module, "DelayedFetch", forbidden)


def test_a_fetch_with_data_is_answered_at_once_without_a_coroutine_or_a_task(replicas, tmp_path, no_delayed_fetch):
    # no event loop runs here: creating a task, or asking the loop's time, would raise
    part = host(replicas, tmp_path, T0)
    part.append_as_leader(batch(3), 1)
    result = replicas.fetch_records(consumer(received=0.0), [at(T0)])
    assert not result.pending and records_of(result.read) == [result.read.bytes]
    r = result.read.partitions[0]
    assert (r.error, r.high_watermark, r.log_start_offset) == (0, 3, 0) and result.read.bytes > 0
    result.read.release()
    # nothing to read, but no wait asked: answered at once too
    result = replicas.fetch_records(consumer(max_wait_ms=0, received=0.0), [at(T0, 3)])
    assert not result.pending and result.read.bytes == 0 and len(replicas.purgatory) == 0


@in_loop
async def test_a_consumer_waits_for_the_high_watermark_registered_before_it_suspends(replicas, tmp_path):
    part = host(replicas, tmp_path, T0, replica_ids=(1, 2))  # broker 2 follows: appends do not commit
    result = replicas.fetch_records(consumer(), [at(T0)])
    assert result.pending and len(replicas.purgatory) == 1  # watching already
    task = asyncio.get_running_loop().create_task(result.wait())
    part.append_as_leader(batch(2), 1)  # the log end moves, not the high watermark
    await asyncio.sleep(0.05)
    assert not task.done()
    part.update_follower(2, 2)  # the follower has it: committed
    read = await asyncio.wait_for(task, 5)
    assert read.bytes > 0 and read.partitions[0].high_watermark == 2 and not read.errors
    assert len(replicas.purgatory) == 0
    read.release()


@in_loop
async def test_a_follower_waits_for_the_log_end(replicas, tmp_path):
    part = host(replicas, tmp_path, T0, replica_ids=(1, 2))
    result = replicas.fetch_records(consumer(replica_id=2), [at(T0, current_leader_epoch=0)])
    assert result.pending
    task = asyncio.get_running_loop().create_task(result.wait())
    await asyncio.sleep(0.01)
    part.append_as_leader(batch(2), 1)  # the log end moves: a follower reads on
    read = await asyncio.wait_for(task, 5)
    assert read.bytes > 0 and part.follower_leo[2] == 0  # its position: where it fetched from
    read.release()


@in_loop
async def test_a_change_of_leadership_answers_a_waiting_fetch_with_its_error(replicas, tmp_path):
    part = host(replicas, tmp_path, T0, replica_ids=(1, 2))
    result = replicas.fetch_records(consumer(), [at(T0)])
    task = asyncio.get_running_loop().create_task(result.wait())
    await asyncio.sleep(0.01)
    part.update_state(PartitionState(0, [1, 2], 2, 1, [1, 2]))  # broker 2 leads now
    read = await asyncio.wait_for(task, 5)
    assert read.errors and read.partitions[0].error == E.NOT_LEADER_OR_FOLLOWER
    assert read.partitions[0].high_watermark == -1


@in_loop
async def test_a_topic_deleted_while_a_v13_fetch_waits_is_an_unknown_topic_id(replicas, tmp_path):
    host(replicas, tmp_path, T0)
    result = replicas.fetch_records(consumer(), [at(T0, topic_id=TOPIC_ID)])
    assert result.pending
    task = asyncio.get_running_loop().create_task(result.wait())
    await asyncio.sleep(0.01)
    replicas.metadata.ids.clear()
    replicas.stop_replicas([(T0, -1, False)])
    read = await asyncio.wait_for(task, 5)
    assert read.partitions[0].error == E.UNKNOWN_TOPIC_ID


@in_loop
async def test_the_wait_ends_at_its_deadline_with_what_it_reads_then(replicas, tmp_path):
    part = host(replicas, tmp_path, T0)
    part.append_as_leader(batch(1), 1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = replicas.fetch_records(consumer(max_wait_ms=200, min_bytes=1 << 20), [at(T0)])
    assert result.pending
    read = await asyncio.wait_for(result.wait(), 5)
    assert loop.time() - started >= 0.19 and 0 < read.bytes < 1 << 20
    read.release()


@in_loop
async def test_a_fetch_of_a_client_gone_or_with_nothing_to_watch_waits_for_nothing(replicas, tmp_path):
    host(replicas, tmp_path, T0)
    result = replicas.fetch_records(consumer(), [at(T0)], gone=lambda: True)
    assert not result.pending
    result = replicas.fetch_records(consumer(), [at(TopicPartition("t", 1))])  # not hosted here: an error
    assert not result.pending and result.read.partitions[0].error == E.NOT_LEADER_OR_FOLLOWER
    result = replicas.fetch_records(consumer(), [])
    assert not result.pending and len(replicas.purgatory) == 0


@in_loop
async def test_the_wait_reads_again_after_each_wake_and_lets_go_of_what_is_not_the_answer(replicas, tmp_path):
    """A share fetch's long poll is the same wait over another read: a DelayedFetch of any
    read with bytes, errors, watches and release."""
    purgatory = replicas.purgatory
    released = []

    class Read:
        def __init__(self, size):
            self.bytes, self.errors, self.watches = size, False, [(T1, HIGH_WATERMARK)]

        def release(self):
            released.append(self.bytes)

    sizes = iter([10, 20, 120])
    delayed = DelayedFetch(
        purgatory, lambda: Read(next(sizes)), 100, asyncio.get_running_loop().time() + 5, [(T1, HIGH_WATERMARK)]
    )
    task = asyncio.get_running_loop().create_task(delayed.complete())
    for _ in range(3):
        await asyncio.sleep(0.01)
        purgatory.high_watermark_moved(T1)
    read = await asyncio.wait_for(task, 5)
    assert read.bytes == 120 and released == [10, 20] and len(purgatory) == 0


def fetch_ctx(replicas, allowed=lambda op, rt, name: True):
    return SimpleNamespace(
        services=SimpleNamespace(
            replicas=replicas,
            config={"fetch.wait.max.ms": 30000},
            quotas=SimpleNamespace(fetch=SimpleNamespace(enabled=False)),
            metadata=replicas.metadata,
        ),
        has_right=lambda right, name: allowed(right.operation, right.resource_type, name),
        api_version=12,
        received=asyncio.get_running_loop().time(),
        connection=SimpleNamespace(closed=False, follower=False, quota_sensors=(None, None, None)),
        errors=None,
        throttle_ms=0,
    )


def fetch_request(*topics, max_wait_ms=10_000, min_bytes=1):
    return F(
        replica_id=-1,
        replica_state=F.ReplicaState(replica_id=-1, replica_epoch=-1),
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic=topic,
                partitions=[
                    F.FetchPartition(
                        partition=p,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=0,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
            for topic, p in topics
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


@in_loop
async def test_the_handler_long_polls_through_the_replica_manager_and_a_refused_partition_waits_for_nothing(
    replicas, tmp_path
):
    part = host(replicas, tmp_path, T0)
    answer = fetch.handle(fetch_ctx(replicas), fetch_request(("t", 0)))
    assert hasattr(answer, "__await__")  # nothing to read yet: it waits
    task = asyncio.get_running_loop().create_task(answer)
    await asyncio.sleep(0.01)
    part.append_as_leader(batch(2), 1)
    response = await asyncio.wait_for(task, 5)
    d = response.responses[0].partitions[0]
    assert d.error_code == 0 and d.records.length > 0 and d.high_watermark == 2
    d.records.close()
    # the same fetch with a topic the ACLs refuse: answered at once, the other partition read
    ctx = fetch_ctx(replicas, allowed=lambda op, rt, name: name != "secret")
    response = fetch.handle(ctx, fetch_request(("t", 0), ("secret", 0), min_bytes=1 << 20))
    assert not hasattr(response, "__await__") and ctx.errors
    got = [(t.topic, d.error_code) for t in response.responses for d in t.partitions]
    assert got == [("t", 0), ("secret", E.TOPIC_AUTHORIZATION_FAILED)]
    assert response.responses[0].partitions[0].records.length > 0
    response.responses[0].partitions[0].records.close()
