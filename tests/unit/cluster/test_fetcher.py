"""The replica fetcher's loop (ReplicaFetcher) against a leader played by a fake channel
over a real Log: the follower is a real Partition on a real Log, so truncation, appends and
leader epochs are the real ones; only the network is replaced (its answers are built from
the leader's log the way the leader's handlers build them)."""

from __future__ import annotations

import asyncio
import functools
import uuid
from types import SimpleNamespace

import pytest

from broker.cluster.metadata import BrokerInfo, PartitionState
from broker.cluster.replica.fetcher import FetcherConfig, ReplicaFetcherManager
from broker.cluster.replica.manager import ReplicaManager
from broker.cluster.replica.partition import Partition
from broker.cluster.replica.throttle import ReplicationQuota
from broker.config import BrokerConfig
from broker.log.log import Log
from broker.log.manager import LogManager
from broker.protocol import codec
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import FrameReader
from broker.protocol.messages.api_versions import ApiVersionsResponse
from broker.server.handlers import supported_versions
from tests.unit.log._support import TP, batch, log_config

TOPIC_ID = uuid.uuid4()
LEADER = BrokerInfo(2, "127.0.0.1", 1)  # never connected to: the channel is replaced


class Recorder:
    def high_watermark_moved(self, tp):
        pass

    def log_end_moved(self, tp):
        pass

    def partition_changed(self, tp):
        pass


class FakeLeader:
    """Answers a fetcher's requests from `log` as the leader's handlers would. `hold`
    (an Event), when set, holds Fetch answers until it is set; `fetch_answer`, when
    set, is a function(request) -> the answer's partition data, replacing the log's."""

    def __init__(self, log: Log):
        self.log = log
        self.connected = True
        self.hold: asyncio.Event | None = None
        self.fetch_answer = None
        self.requests: list = []

    def version_for(self, api_key):
        return 12

    def reset(self, reason):
        pass

    async def close(self):
        pass

    async def request(self, req, version=None, timeout=None):
        await asyncio.sleep(0)  # a network round trip yields, as the real channel
        self.requests.append(req)
        key = req.API_KEY
        if key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            parts = []
            for t in req.topics:
                for p in t.partitions:
                    epoch, end = self.log.leader_epochs.end_offset_for(p.leader_epoch, self.log.log_end_offset)
                    parts.append(
                        SimpleNamespace(partition=p.partition, error_code=0, leader_epoch=epoch, end_offset=end)
                    )
            return SimpleNamespace(topics=[SimpleNamespace(topic=TP.topic, partitions=parts)])
        if key == ApiKey.FETCH:
            if self.hold is not None:
                await self.hold.wait()
            p = req.topics[0].partitions[0]
            if self.fetch_answer is not None:
                d = self.fetch_answer(req)
            else:
                lg = self.log
                d = SimpleNamespace(
                    partition_index=TP.partition,
                    error_code=0,
                    high_watermark=lg.log_end_offset,
                    log_start_offset=lg.log_start_offset,
                    diverging_epoch=SimpleNamespace(epoch=-1, end_offset=-1),
                    records=lg.read_bytes(p.fetch_offset, 1 << 20, lg.log_end_offset)
                    if p.fetch_offset < lg.log_end_offset
                    else b"",
                )
            return SimpleNamespace(
                error_code=0, responses=[SimpleNamespace(topic=TP.topic, topic_id=None, partitions=[d])]
            )
        raise AssertionError(f"unexpected request {req!r}")


def load(tmp_path, name):
    return Log.load(str(tmp_path / name / "t-0"), TP, log_config(tmp_path), topic_id=TOPIC_ID)


def write(lg: Log, epochs_and_counts, value_size=40):
    """One batch per (epoch, records) appended as leader (epoch -1: no epoch)."""
    for epoch, n in epochs_and_counts:
        lg.append_as_leader(batch(n, value_size=value_size), epoch)


def follower(tmp_path, lg: Log, leader_epoch: int):
    part = Partition(TP, lg, PartitionState(0, [1, 2], LEADER.broker_id, leader_epoch, [1, 2]), 1, Recorder())
    assert not part.is_leader
    return part


def start(part, leader_log, leader_epoch, **cfg):
    mgr = ReplicaFetcherManager(FetcherConfig(1, backoff_s=0.05, **cfg), {TP: part}.get)
    mgr.add(TP, LEADER, leader_epoch)
    f = next(iter(mgr.fetchers.values()))
    f.channel = fake = FakeLeader(leader_log)  # before the fetcher's task first runs
    return mgr, f, fake


def run(fn):
    """Runs an async test in its own event loop (the suite has no asyncio plugin)."""

    @functools.wraps(fn)
    def test(tmp_path):
        asyncio.run(asyncio.wait_for(fn(tmp_path), 20))

    return test


async def until(cond, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def content(lg: Log) -> bytes:
    return bytes(lg.read_bytes(0, 1 << 24, lg.log_end_offset))


@run
async def test_truncation_asks_round_after_round_until_the_logs_agree(tmp_path):
    # the follower led the even epochs, the leader the odd ones, each 10 records from
    # offset 10 * epoch on: only epoch 0's first 10 records are common. Every answer
    # names an epoch the follower lacks: 20 rounds, more than the 8 the fetcher used to
    # allow before truncating at a fallback that kept a divergent tail.
    leader_log, ours = load(tmp_path, "leader"), load(tmp_path, "follower")
    # (the leader's batches hold 10 records: any offset the follower could stop at is a
    # batch boundary of the leader's, so an early stop is not caught by a refused append)
    write(leader_log, [(0, 10)] + [(e, 10) for e in range(1, 40, 2) for _ in range(2)])
    write(ours, [(0, 20)] + [(e, 20) for e in range(2, 41, 2)], value_size=41)
    assert leader_log.leader_epochs.entries[1] == (1, 10) and ours.leader_epochs.entries[1] == (2, 20)
    leader_log.leader_epochs.assign(41, leader_log.log_end_offset)  # it leads at 41, as makeLeader does
    part = follower(tmp_path, ours, 41)
    mgr, f, fake = start(part, leader_log, 41)
    try:
        await until(lambda: ours.log_end_offset == leader_log.log_end_offset and not f.partitions[TP].truncating)
    finally:
        await mgr.shutdown()
    assert ours.leader_epochs.entries == leader_log.leader_epochs.entries[:-1]  # 41 has no records yet
    # offsets 10..19 were the follower's own records of epoch 0: gone, the leader's now
    assert content(ours)[-200:] == content(leader_log)[-200:]
    assert ours.read_bytes(10, 1 << 20, 11) == leader_log.read_bytes(10, 1 << 20, 11)
    asked = [r for r in fake.requests if r.API_KEY == ApiKey.OFFSET_FOR_LEADER_EPOCH]
    assert len(asked) > 8


@run
async def test_a_follower_without_leader_epochs_truncates_to_its_high_watermark(tmp_path):
    # records 0..3 are committed on both; the follower's 4..9 (written without an epoch)
    # are its own, the leader's 4..11 differ: the follower must keep only 0..3
    leader_log, ours = load(tmp_path, "leader"), load(tmp_path, "follower")
    write(leader_log, [(-1, 4)])
    ours.append_as_follower(leader_log.read_bytes(0, 1 << 20, 4))
    write(leader_log, [(-1, 8)])
    write(ours, [(-1, 6)], value_size=41)
    ours.update_high_watermark(4)
    assert ours.leader_epochs.latest_epoch == -1 and ours.log_end_offset == 10
    part = follower(tmp_path, ours, 3)
    mgr, f, fake = start(part, leader_log, 3)
    try:
        await until(lambda: ours.log_end_offset >= leader_log.log_end_offset)
    finally:
        await mgr.shutdown()
    assert content(ours) == content(leader_log)


@run
async def test_an_answer_to_a_fetch_made_before_the_state_changed_is_dropped(tmp_path):
    # a fetch goes out at offset 10 under leader epoch 3; while it waits, the controller
    # moves leadership away and back (the partition is added again at epoch 5) and the
    # follower truncates to 6. The answer — records 10..13 of the old epoch — must not be
    # appended (a gap, and records the next truncation would not know to remove).
    leader_log, ours, old = load(tmp_path, "leader"), load(tmp_path, "follower"), load(tmp_path, "old")
    write(leader_log, [(3, 1)] * 10)
    ours.append_as_follower(leader_log.read_bytes(0, 1 << 20, 10))
    write(old, [(3, 10), (3, 4)])
    stale = old.read_bytes(10, 1 << 20, 14)
    part = follower(tmp_path, ours, 3)
    mgr, f, fake = start(part, leader_log, 3)
    f._task.cancel()  # driven by hand below
    f.partitions[TP].truncating = False
    fake.hold = asyncio.Event()
    fake.fetch_answer = lambda req: SimpleNamespace(
        partition_index=0,
        error_code=0,
        high_watermark=14,
        log_start_offset=0,
        diverging_epoch=SimpleNamespace(epoch=-1, end_offset=-1),
        records=stale,
    )
    try:
        fetch = asyncio.ensure_future(f._fetch([TP]))
        await until(lambda: fake.requests)
        assert fake.requests[0].topics[0].partitions[0].fetch_offset == 10
        mgr.add(TP, LEADER, 5)
        part.truncate_to(6)
        fake.hold.set()
        await asyncio.wait_for(fetch, 5)
        assert ours.log_end_offset == 6, "a stale answer was appended"
        # the same answer with only the state replaced (no truncation) is dropped too
        fake.hold = asyncio.Event()
        f.partitions[TP].truncating = False
        ours.append_as_follower(leader_log.read_bytes(6, 1 << 20, 10))
        fetch = asyncio.ensure_future(f._fetch([TP]))
        await until(lambda: len(fake.requests) == 2)
        mgr.add(TP, LEADER, 7)
        fake.hold.set()
        await asyncio.wait_for(fetch, 5)
        assert ours.log_end_offset == 10, "a stale answer was appended"
    finally:
        await mgr.shutdown()


@run
async def test_a_diverging_epoch_in_a_fetch_answer_truncates_and_appends_nothing(tmp_path):
    # KIP-320: the follower's epoch 4 (offsets 12..21) is unknown to the leader, whose
    # epoch 3 ends at 12: the follower truncates to 12 and takes nothing from this answer
    leader_log, ours = load(tmp_path, "leader"), load(tmp_path, "follower")
    write(leader_log, [(3, 12), (5, 8)])
    ours.append_as_follower(leader_log.read_bytes(0, 1 << 20, 12))
    write(ours, [(4, 10)], value_size=41)
    part = follower(tmp_path, ours, 5)
    mgr, f, fake = start(part, leader_log, 5)
    f._task.cancel()
    f.partitions[TP].truncating = False
    fake.fetch_answer = lambda req: SimpleNamespace(
        partition_index=0,
        error_code=0,
        high_watermark=20,
        log_start_offset=0,
        diverging_epoch=SimpleNamespace(epoch=3, end_offset=12),
        records=leader_log.read_bytes(12, 1 << 20, 20),
    )
    try:
        await asyncio.wait_for(f._fetch([TP]), 5)
        assert fake.requests[0].topics[0].partitions[0].last_fetched_epoch == 4
        assert ours.log_end_offset == 12 and ours.leader_epochs.entries == [(3, 0)]
        assert ours.high_watermark <= 12
    finally:
        await mgr.shutdown()


# ---------------------------------------------------------------------- stalled connections


class SilentLeader:
    """A TCP server on loopback that answers ApiVersions (so a channel connects) and
    never anything else: a leader whose answers are lost on the way (a network cut)."""

    def __init__(self):
        self.connections = 0
        self.fetches = 0
        self.server = None
        self.port = 0

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _serve(self, reader, writer):
        self.connections += 1
        frames = FrameReader(1 << 24)
        try:
            while data := await reader.read(1 << 16):
                frames.feed(data)
                while (frame := frames.next_frame()) is not None:
                    header, _ = codec.decode_request(frame)
                    if header.request_api_key == ApiKey.API_VERSIONS:
                        resp = ApiVersionsResponse(
                            error_code=0,
                            api_keys=[
                                ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                                for k, lo, hi in supported_versions()
                            ],
                        )
                        for part in codec.encode_response(header, resp):
                            writer.write(part)
                    elif header.request_api_key == ApiKey.FETCH:
                        self.fetches += 1
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


def stalling_config(stall_margin_s):
    cfg = FetcherConfig(1, max_wait_ms=100, backoff_s=30.0)
    cfg.stall_margin_s = stall_margin_s
    return cfg


@run
async def test_a_fetch_unanswered_past_max_wait_plus_the_margin_reconnects_at_once(tmp_path):
    ours = load(tmp_path, "follower")
    async with SilentLeader() as leader:
        part = follower(tmp_path, ours, 0)
        mgr = ReplicaFetcherManager(stalling_config(0.5), {TP: part}.get)
        mgr.add(TP, BrokerInfo(2, "127.0.0.1", leader.port), 0)
        try:
            await until(lambda: leader.fetches == 1)
            # 0.1 s max wait + 0.5 s margin, then a new connection without the 30 s backoff
            await until(lambda: leader.connections >= 2 and leader.fetches >= 2, timeout=5)
        finally:
            await mgr.shutdown()


class _Metadata:
    def __init__(self, tmp_path):
        self.config = log_config(tmp_path)

    def log_config(self, topic):
        return self.config


@run
async def test_a_leader_and_isr_naming_the_leader_resets_a_stalled_fetch_connection(tmp_path):
    # the margin is long: only the LeaderAndIsr (a resend after the follower registered
    # again, nothing new in it) can make the follower reconnect within the test
    cfg = BrokerConfig({"log.dir": str(tmp_path / "data"), "broker.id": 1})
    logs = LogManager(cfg, _Metadata(tmp_path).log_config)
    logs.startup()
    async with SilentLeader() as leader:
        replicas = ReplicaManager(1, logs, _Metadata(tmp_path), fetcher_config=stalling_config(30.0))
        state = PartitionState(0, [1, 2], 2, 4, [1, 2])
        live = {2: BrokerInfo(2, "127.0.0.1", leader.port)}
        tid = uuid.uuid4()
        try:
            assert replicas.become_leader_or_follower([(TP.topic, tid, state)], live) == {TP: 0}
            await until(lambda: leader.fetches == 1)
            await asyncio.sleep(0.1 + 1.0 + 0.2)  # past the long poll: stalled
            assert leader.connections == 1
            replicas.become_leader_or_follower([(TP.topic, tid, state)], live)
            await until(lambda: leader.connections >= 2 and leader.fetches >= 2, timeout=2)
            # a fetch still inside its long poll is left alone
            replicas.become_leader_or_follower([(TP.topic, tid, state)], live)
            await asyncio.sleep(0.3)
            assert leader.connections == 2
        finally:
            await replicas.shutdown()
            logs.shutdown()


def throttled_start(tmp_path, bound):
    """A follower of t-0 (caught up to nothing yet) whose fetcher is driven by hand, t-0
    on its follower throttle (follower.replication.throttled.replicas=0:1) at `bound` B/s;
    the leader has 8 batches of 10 records of ~1 KB and answers as much as each request's
    partition_max_bytes allows (one batch at least)."""
    leader_log, ours = load(tmp_path, "leader"), load(tmp_path, "follower")
    write(leader_log, [(3, 10)] * 8, value_size=1000)
    quota = ReplicationQuota("FollowerReplication", broker_id=1)
    quota.set_throttled(TP.topic, "0:1,0:3")
    quota.set_bound(bound)
    part = follower(tmp_path, ours, 3)
    mgr = ReplicaFetcherManager(FetcherConfig(1, backoff_s=0.05), {TP: part}.get, quota)
    mgr.add(TP, LEADER, 3)
    f = next(iter(mgr.fetchers.values()))
    f.channel = fake = FakeLeader(leader_log)
    f._task.cancel()
    f.partitions[TP].truncating = False

    def answer(req):
        p = req.topics[0].partitions[0]
        with_one = leader_log.read(p.fetch_offset, p.partition_max_bytes, leader_log.log_end_offset)
        records = with_one.read() if with_one is not None else b""
        if with_one is not None:
            with_one.close()
        return SimpleNamespace(
            partition_index=0,
            error_code=0,
            high_watermark=leader_log.log_end_offset,
            log_start_offset=0,
            diverging_epoch=SimpleNamespace(epoch=-1, end_offset=-1),
            records=records,
        )

    fake.fetch_answer = answer
    return mgr, f, fake, quota, ours, leader_log


@run
async def test_the_follower_throttle_leaves_an_out_of_sync_partition_out_while_exceeded(tmp_path):
    mgr, f, fake, quota, ours, leader_log = throttled_start(tmp_path, bound=1000.0)
    try:
        # not exceeded yet: fetched, at most one window's bytes (1000 B: one whole batch)
        assert await f._fetch([TP])
        assert fake.requests[-1].topics[0].partitions[0].partition_max_bytes == 1000
        assert ours.log_end_offset == 10
        assert quota.throttled_bytes == len(leader_log.read_bytes(0, 1, 10)) and quota.exceeded()
        # exceeded: left out, no request at all
        assert not await f._fetch([TP])
        assert len(fake.requests) == 1 and ours.log_end_offset == 10
        # a partition in sync (the leader's high watermark reached) is never left out
        f.partitions[TP].lag = 0
        assert await f._fetch([TP]) and len(fake.requests) == 2
        assert fake.requests[-1].topics[0].partitions[0].partition_max_bytes == f.cfg.partition_max_bytes
        # the bound lifted (a dynamic config change): everything comes, and is recorded
        f.partitions[TP].lag = None
        quota.set_bound(None)
        assert await f._fetch([TP])
        assert ours.log_end_offset == leader_log.log_end_offset
        assert quota.throttled_bytes == len(leader_log.read_bytes(0, 1 << 20, leader_log.log_end_offset))
        assert f.partitions[TP].lag == 0
    finally:
        await mgr.shutdown()


@run
async def test_a_fetcher_whose_partitions_are_all_held_waits_then_fetches_at_the_rate(tmp_path):
    # 8 batches of ~10.4 KB at 20 KB/s, each answer 20 KB (one window's worth: a batch and
    # a partial one, which counts as Kafka's does): about 7 s, the first 2 answers at once
    mgr, f, fake, quota, ours, leader_log = throttled_start(tmp_path, bound=20_000.0)
    f._task = asyncio.get_running_loop().create_task(f._run())
    t0 = asyncio.get_running_loop().time()
    try:
        await until(lambda: ours.log_end_offset == leader_log.log_end_offset, timeout=15)
        took = asyncio.get_running_loop().time() - t0
    finally:
        await mgr.shutdown()
    recorded = quota.throttled_bytes
    assert (recorded - 2 * 20_000) / 20_000 * 0.8 < took < recorded / 20_000 * 1.2, (took, recorded)
    # no request while held (the fetcher paused between looks, THROTTLED_RECHECK_S): one per batch
    fetched = [r for r in fake.requests if r.topics[0].partitions[0].fetch_offset < leader_log.log_end_offset]
    assert len(fetched) == 8


def _answers_error_first(fake, code: int, times: int):
    """The fake leader answers the first `times` fetches with `code`, then normally."""
    errors = [0]

    def answer(req):
        lg = fake.log
        p = req.topics[0].partitions[0]
        if errors[0] < times:
            errors[0] += 1
            return SimpleNamespace(
                partition_index=0,
                error_code=code,
                high_watermark=-1,
                log_start_offset=-1,
                diverging_epoch=SimpleNamespace(epoch=-1, end_offset=-1),
                records=None,
            )
        return SimpleNamespace(
            partition_index=0,
            error_code=0,
            high_watermark=lg.log_end_offset,
            log_start_offset=lg.log_start_offset,
            diverging_epoch=SimpleNamespace(epoch=-1, end_offset=-1),
            records=lg.read_bytes(p.fetch_offset, 1 << 20, lg.log_end_offset)
            if p.fetch_offset < lg.log_end_offset
            else b"",
        )

    fake.fetch_answer = answer
    return errors


@pytest.mark.parametrize("code", [ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER])
def test_a_leader_behind_our_epoch_is_retried_soon_not_after_the_whole_backoff(tmp_path, code):
    """The controller's LeaderAndIsr reaches the follower before the leader (a reassignment,
    a leader moved): the leader answers UNKNOWN_LEADER_EPOCH (or, not yet leading,
    NOT_LEADER_OR_FOLLOWER) for a moment. The follower retries after 50, 100, 200 ms, not
    after replica.fetch.backoff.ms (30 s here), so acks=all producers are not held."""

    async def body():
        leader_log, ours = load(tmp_path, "leader"), load(tmp_path, "follower")
        write(leader_log, [(3, 5)] * 4)
        part = follower(tmp_path, ours, 3)
        mgr = ReplicaFetcherManager(FetcherConfig(1, backoff_s=30.0), {TP: part}.get)
        fake = FakeLeader(leader_log)
        errors = _answers_error_first(fake, code, 3)
        mgr.add(TP, LEADER, 3)
        f = next(iter(mgr.fetchers.values()))
        f.channel = fake
        t0 = asyncio.get_running_loop().time()
        try:
            await until(lambda: ours.log_end_offset == 20, timeout=5)
            took = asyncio.get_running_loop().time() - t0
            assert errors[0] == 3 and took < 2.0, took
            assert f.partitions[TP].quick_retries == 0  # reset by the answer that worked
        finally:
            await mgr.shutdown()

    asyncio.run(asyncio.wait_for(body(), 20))


def test_a_fenced_epoch_waits_the_whole_backoff(tmp_path):
    """FENCED_LEADER_EPOCH: we are the one behind; the controller's update will add the
    partition again (a fresh state, no delay), so until then the full backoff applies."""

    async def body():
        leader_log, ours = load(tmp_path, "leader"), load(tmp_path, "follower")
        write(leader_log, [(3, 5)])
        part = follower(tmp_path, ours, 3)
        mgr = ReplicaFetcherManager(FetcherConfig(1, backoff_s=30.0), {TP: part}.get)
        fake = FakeLeader(leader_log)
        errors = _answers_error_first(fake, ErrorCode.FENCED_LEADER_EPOCH, 1)
        mgr.add(TP, LEADER, 3)
        f = next(iter(mgr.fetchers.values()))
        f.channel = fake
        try:
            await until(lambda: errors[0] == 1)
            await asyncio.sleep(0.5)
            assert ours.log_end_offset == 0 and errors[0] == 1
            mgr.add(TP, LEADER, 4)  # the controller's update: at once
            await until(lambda: ours.log_end_offset == 5, timeout=5)
        finally:
            await mgr.shutdown()

    asyncio.run(asyncio.wait_for(body(), 20))
