"""LogManager: log dirs, meta.properties, checkpoints, clean-shutdown marker, startup
recovery, deletion, placement over several dirs, the retention pass."""

import asyncio
import logging
import os
import re

import pytest

from broker.config import BrokerConfig
from broker.log.checkpoints import OffsetCheckpoint, TopicPartition
from broker.log.manager import (
    CLEAN_SHUTDOWN,
    HIGH_WATERMARK,
    LOG_START,
    META,
    RECOVERY_POINT,
    LogCapacityError,
    LogCreationError,
    LogDirError,
    LogManager,
    validate_topic_name,
)
from broker.native import SEGMENT_ALLOCATE_AHEAD, set_segment_allocate_ahead

from ._support import batch, batch_positions, read_all

SIZE = len(batch(1))


class Env:
    """Builds LogManagers over the same dirs, as successive broker runs would."""

    def __init__(self, tmp_path, n_dirs=1, broker_id=1, topic_overrides=None, broker_props=None):
        self.dirs = [str(tmp_path / f"dir{i}") for i in range(n_dirs)]
        self.broker_id = broker_id
        self.topic_overrides = topic_overrides or {}
        self.broker_props = broker_props or {}
        self.managers = []

    def manager(self, broker_id=None, start=True) -> LogManager:
        bc = BrokerConfig(
            {
                "log.dirs": ",".join(self.dirs),
                "broker.id": self.broker_id if broker_id is None else broker_id,
                **self.broker_props,
            }
        )
        base = {"segment.bytes": 3 * SIZE}

        def config_for(topic):
            return bc.log_config({**base, **self.topic_overrides.get(topic, {})})

        m = LogManager(bc, config_for)
        # an earlier manager left running stands for a crashed process: its log dir
        # locks die with it (a live second process is refused: test_lock_* below)
        for earlier in self.managers:
            earlier.release_locks()
        self.managers.append(m)
        if start:
            m.startup()
        return m

    def close_all(self):
        for m in self.managers:
            for lg in m.logs.values():
                if not lg.closed:
                    lg.close()


@pytest.fixture
def env(tmp_path):
    e = Env(tmp_path)
    yield e
    e.close_all()


def _fill(lg, n):
    for i in range(n):
        lg.append_as_leader(batch(1, ts=1_000 + i), 0)


def _read_text(path):
    with open(path) as f:
        return f.read()


def _crash(m: LogManager):
    """A kill -9: files stay as they are, no flush, no checkpoint, no marker."""
    for lg in m.logs.values():
        lg.close()


# ---------------------------------------------------------------- dirs and meta.properties


def test_startup_on_empty_dirs_writes_meta_properties(tmp_path):
    e = Env(tmp_path, n_dirs=2, broker_id=7)
    m = e.manager()
    ids = set()
    for d in e.dirs:
        assert os.path.isdir(d)
        props = dict(
            line.split("=", 1)
            for line in _read_text(os.path.join(d, META)).splitlines()
            if "=" in line and not line.startswith("#")
        )
        assert props["version"] == "0"
        assert props["broker.id"] == "7"
        ids.add(props["cluster.id"])
    assert len(ids) == 1 and m.cluster_id in ids
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", m.cluster_id)
    assert m.logs == {}
    # the next run keeps the cluster id
    again = e.manager()
    assert again.cluster_id == m.cluster_id
    e.close_all()


def test_a_dir_of_another_broker_is_refused(env):
    env.manager(broker_id=1).shutdown()
    with pytest.raises(LogDirError, match="broker.id 1"):
        env.manager(broker_id=2)


# ---------------------------------------------------------------- clean shutdown


def test_clean_shutdown_writes_checkpoints_in_kafkas_format_and_the_marker(env):
    m = env.manager()
    a = m.get_or_create(TopicPartition("clicks", 0))
    b = m.get_or_create(TopicPartition("clicks", 1))
    c = m.get_or_create(TopicPartition("a.b_c-d", 12))
    _fill(a, 7)
    _fill(b, 4)
    a.update_high_watermark(6)
    b.update_high_watermark(4)
    a.delete_records(2)
    m.shutdown()
    d = env.dirs[0]
    assert os.path.exists(os.path.join(d, CLEAN_SHUTDOWN))
    assert _read_text(os.path.join(d, RECOVERY_POINT)) == "0\n3\na.b_c-d 12 0\nclicks 0 7\nclicks 1 4\n"
    assert _read_text(os.path.join(d, HIGH_WATERMARK)) == "0\n3\na.b_c-d 12 0\nclicks 0 6\nclicks 1 4\n"
    assert _read_text(os.path.join(d, LOG_START)) == "0\n3\na.b_c-d 12 0\nclicks 0 2\nclicks 1 0\n"
    assert not [n for n in os.listdir(d) if n.endswith(".tmp")]
    assert all(lg.closed for lg in (a, b, c))


def test_startup_after_a_clean_shutdown_restores_state_and_removes_the_marker(env):
    m = env.manager()
    lg = m.get_or_create(TopicPartition("t", 0))
    _fill(lg, 8)
    lg.update_high_watermark(5)
    lg.delete_records(4)
    m.shutdown()
    m2 = env.manager()
    d = env.dirs[0]
    assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN))
    assert m2.loaded_cleanly[d] is True
    lg2 = m2.get(TopicPartition("t", 0))
    assert (lg2.log_start_offset, lg2.high_watermark, lg2.log_end_offset, lg2.recovery_point) == (4, 5, 8, 8)
    assert read_all(lg2) == [4, 5, 6, 7]
    assert m2.get_or_create(TopicPartition("t", 0)) is lg2


# ---------------------------------------------------------------- unclean stop


def test_unclean_stop_recovers_logs_above_the_recovery_point(env):
    m = env.manager()
    lg = m.get_or_create(TopicPartition("t", 0))
    _fill(lg, 5)  # segments 0 [0-2], 3 [3-4]
    lg.flush()
    m.checkpoint()  # recovery point 5 on disk
    _fill(lg, 4)  # unflushed: 5 in segment 3, 6-8 in segment 6
    active = lg.active.log_path
    positions = batch_positions(active)
    _crash(m)
    with open(active, "r+b") as f:  # a torn write in the last batch
        f.truncate(positions[-1][0] + positions[-1][1] - 3)
    m2 = env.manager()
    assert m2.loaded_cleanly[env.dirs[0]] is False
    lg2 = m2.get(TopicPartition("t", 0))
    assert lg2.log_end_offset == 8
    assert read_all(lg2) == list(range(8))
    assert lg2.recovery_point == 5  # recovered, not yet flushed
    m2.shutdown()
    assert _read_text(os.path.join(env.dirs[0], RECOVERY_POINT)) == "0\n1\nt 0 8\n"


def test_unclean_stop_skips_segments_below_the_recovery_point(env):
    m = env.manager()
    lg = m.get_or_create(TopicPartition("t", 0))
    _fill(lg, 7)  # segments 0, 3, 6
    lg.flush()
    m.checkpoint()
    first = lg.segments[0].log_path
    second = lg.segments[1].log_path
    _crash(m)
    pos, size, _, _ = batch_positions(first)[1]
    _flip(first, pos + size - 5)  # below the recovery point: trusted
    m2 = env.manager()
    assert m2.get(TopicPartition("t", 0)).log_end_offset == 7
    m2.checkpoint()
    _crash(m2)
    # the same damage when the checkpoint says nothing was flushed: found and cut
    OffsetCheckpoint(os.path.join(env.dirs[0], RECOVERY_POINT)).write({TopicPartition("t", 0): 0})
    m3 = env.manager()
    lg3 = m3.get(TopicPartition("t", 0))
    assert lg3.log_end_offset == 1
    assert not os.path.exists(second)


def _flip(path, pos):
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0xFF]))


def test_a_corrupt_checkpoint_is_tolerated_with_full_recovery(env, caplog):
    m = env.manager()
    lg = m.get_or_create(TopicPartition("t", 0))
    _fill(lg, 7)
    lg.flush()
    m.checkpoint()
    first = lg.segments[0].log_path
    _crash(m)
    pos, size, _, _ = batch_positions(first)[2]
    _flip(first, pos + size - 5)
    rp_path = os.path.join(env.dirs[0], RECOVERY_POINT)
    with open(rp_path, "w") as f:
        f.write("0\n1\nt zero 7\n")
    with caplog.at_level(logging.WARNING, logger="broker.log.manager"):
        m2 = env.manager()
    assert any(RECOVERY_POINT in r.getMessage() and "line 3" in r.getMessage() for r in caplog.records)
    lg2 = m2.get(TopicPartition("t", 0))
    assert lg2.log_end_offset == 2  # everything re-validated: damage found
    assert read_all(lg2) == [0, 1]


@pytest.mark.parametrize("name", [HIGH_WATERMARK, LOG_START])
def test_other_corrupt_checkpoints_are_tolerated(env, caplog, name):
    m = env.manager()
    _fill(m.get_or_create(TopicPartition("t", 0)), 4)
    m.shutdown()
    with open(os.path.join(env.dirs[0], name), "w") as f:
        f.write("7\n")
    with caplog.at_level(logging.WARNING, logger="broker.log.manager"):
        m2 = env.manager()
    assert any(name in r.getMessage() for r in caplog.records)
    lg = m2.get(TopicPartition("t", 0))
    assert lg.log_end_offset == 4
    assert lg.log_start_offset == 0


# ---------------------------------------------------------------- delete


def test_delete_renames_the_partition_dir_then_removes_it(env, monkeypatch):
    m = env.manager()
    lg = m.get_or_create(TopicPartition("t", 3))
    _fill(lg, 2)
    original_dir = lg.dir
    seen = []
    remove = LogManager._remove_tree

    def spy(path):
        seen.append((path, os.path.isdir(path), os.path.exists(original_dir)))
        remove(path)

    monkeypatch.setattr(LogManager, "_remove_tree", staticmethod(spy))
    m.delete(TopicPartition("t", 3))
    assert len(seen) == 1
    path, existed, original_existed = seen[0]
    assert re.fullmatch(re.escape(original_dir) + r"\.[0-9a-f]{32}-delete", path)
    assert existed and not original_existed  # renamed first, then removed
    assert not os.path.exists(path)
    assert lg.closed
    assert m.get(TopicPartition("t", 3)) is None
    m.delete(TopicPartition("t", 3))  # deleting again: nothing to do
    m.checkpoint()
    assert _read_text(os.path.join(env.dirs[0], RECOVERY_POINT)) == "0\n0\n"


def test_delete_under_an_event_loop_removes_in_a_worker_thread(env):
    m = env.manager()
    lg = m.get_or_create(TopicPartition("t", 0))
    _fill(lg, 2)

    async def main():
        m.delete(TopicPartition("t", 0))
        for _ in range(2_000):
            if not [n for n in os.listdir(env.dirs[0]) if n.startswith("t-0")]:
                return True
            await asyncio.sleep(0.001)
        return False

    assert asyncio.run(main())


def test_startup_removes_leftover_delete_dirs_and_ignores_other_entries(env):
    m = env.manager()
    _fill(m.get_or_create(TopicPartition("t", 0)), 2)
    m.shutdown()
    d = env.dirs[0]
    leftover = os.path.join(d, "t-1.0123456789abcdef0123456789abcdef-delete")
    os.makedirs(leftover)
    with open(os.path.join(leftover, "00000000000000000000.log"), "wb") as f:
        f.write(b"junk")
    os.makedirs(os.path.join(d, "lost+found"))
    os.makedirs(os.path.join(d, "not_a_partition"))
    m2 = env.manager()
    assert not os.path.exists(leftover)
    assert set(m2.logs) == {TopicPartition("t", 0)}


# ---------------------------------------------------------------- several log dirs


def test_new_partitions_spread_over_log_dirs(tmp_path):
    e = Env(tmp_path, n_dirs=2)
    m = e.manager()
    logs = [m.get_or_create(TopicPartition("t", p)) for p in range(6)]
    parents = [os.path.dirname(lg.dir) for lg in logs]
    assert parents.count(e.dirs[0]) == 3 and parents.count(e.dirs[1]) == 3
    for p in range(1, 6):  # the least loaded dir each time
        assert parents[p] != parents[p - 1]
    for lg in logs:
        _fill(lg, lg.tp.partition + 1)
    m.shutdown()
    for d in e.dirs:
        entries = OffsetCheckpoint(os.path.join(d, RECOVERY_POINT)).read()
        mine = {lg.tp for lg in logs if os.path.dirname(lg.dir) == d}
        assert set(entries) == mine
        assert all(entries[tp] == tp.partition + 1 for tp in mine)
    m2 = e.manager()
    assert {tp: lg.log_end_offset for tp, lg in m2.logs.items()} == {TopicPartition("t", p): p + 1 for p in range(6)}
    e.close_all()


def test_a_partition_in_two_dirs_is_refused(tmp_path):
    e = Env(tmp_path, n_dirs=2)
    m = e.manager()
    m.shutdown()
    for d in e.dirs:
        os.makedirs(os.path.join(d, "t-0"))
    with pytest.raises(LogDirError, match="t-0"):
        e.manager()
    e.close_all()


# ---------------------------------------------------------------- retention pass


def test_cleanup_logs_runs_retention_on_every_log(tmp_path):
    e = Env(tmp_path, topic_overrides={"old": {"retention.ms": 1_000}, "big": {"retention.bytes": 3 * SIZE}})
    m = e.manager()
    old = m.get_or_create(TopicPartition("old", 0))
    big = m.get_or_create(TopicPartition("big", 0))
    keep = m.get_or_create(TopicPartition("keep", 0))
    for lg in (old, big, keep):
        _fill(lg, 10)  # segments 0, 3, 6, 9 (timestamps ~1_000)
        lg.update_high_watermark(lg.log_end_offset)
    old_files = [s.log_path for s in old.segments[:-1]]
    deleted = m.cleanup_logs(now_ms=10_000)
    assert deleted == 3 + 2
    assert [s.base_offset for s in old.segments] == [9]
    assert [s.base_offset for s in big.segments] == [6, 9]
    assert [s.base_offset for s in keep.segments] == [0, 3, 6, 9]
    for path in old_files:  # no event loop: deleted at once
        assert not os.path.exists(path)
    assert (old.log_start_offset, big.log_start_offset, keep.log_start_offset) == (9, 6, 0)
    assert m.cleanup_logs(now_ms=10_000) == 0
    m.shutdown()
    assert OffsetCheckpoint(os.path.join(e.dirs[0], LOG_START)).read() == {
        TopicPartition("old", 0): 9,
        TopicPartition("big", 0): 6,
        TopicPartition("keep", 0): 0,
    }
    e.close_all()


def test_update_config_reaches_existing_logs(tmp_path):
    e = Env(tmp_path)
    m = e.manager()
    lg = m.get_or_create(TopicPartition("t", 0))
    assert lg.config.retention_ms == 7 * 24 * 3600 * 1000
    e.topic_overrides["t"] = {"retention.ms": 5}
    m.update_config("t")
    assert lg.config.retention_ms == 5
    e.close_all()


def test_flush_dirty_under_an_event_loop(tmp_path):
    e = Env(tmp_path, topic_overrides={"f": {"flush.messages": 2}})
    m = e.manager()
    f = m.get_or_create(TopicPartition("f", 0))
    other = m.get_or_create(TopicPartition("other", 0))
    _fill(f, 3)
    _fill(other, 3)

    async def main():
        m.flush_dirty()
        await asyncio.wait_for(f.schedule_flush(), 30)

    asyncio.run(main())
    assert f.recovery_point == 3
    assert other.recovery_point == 0  # default policy: no flush by count
    e.close_all()


# ---------------------------------------------------------------- topic names


@pytest.mark.parametrize(
    "name, ok",
    [
        ("clicks", True),
        ("a.b_c-D9", True),
        ("x" * 249, True),
        ("", False),
        (".", False),
        ("..", False),
        ("x" * 250, False),
        ("bad name", False),
        ("é", False),
        ("a/b", False),
    ],
)
def test_topic_name_rules(env, name, ok):
    assert (validate_topic_name(name) is None) == ok
    m = env.manager()
    if ok:
        assert m.get_or_create(TopicPartition(name, 0)).tp.topic == name
    else:
        with pytest.raises(ValueError):
            m.get_or_create(TopicPartition(name, 0))


def test_log_dirs_of_different_clusters_are_refused(tmp_path):
    e = Env(tmp_path, n_dirs=2)
    e.manager().shutdown()
    meta1 = os.path.join(e.dirs[1], META)
    text = _read_text(meta1)
    with open(meta1, "w") as f:
        f.write(re.sub(r"cluster.id=.*", "cluster.id=AAAAAAAAAAAAAAAAAAAAAA", text))
    with pytest.raises(LogDirError, match="cluster.id"):
        e.manager()


def test_a_new_dir_joins_the_cluster_of_the_existing_ones(tmp_path):
    one = Env(tmp_path, n_dirs=1)
    m = one.manager()
    cid = m.cluster_id
    m.shutdown()
    # a second, empty dir is added; the existing one is listed last
    e = Env(tmp_path, n_dirs=1)
    e.dirs = [str(tmp_path / "added"), one.dirs[0]]
    m2 = e.manager()
    assert m2.cluster_id == cid
    assert f"cluster.id={cid}" in _read_text(os.path.join(e.dirs[0], META))
    e.close_all()


def test_background_tasks_run_retention_and_flushes(tmp_path):
    e = Env(
        tmp_path,
        topic_overrides={"old": {"retention.ms": 1_000}, "f": {"flush.ms": 0}},
        broker_props={"log.retention.check.interval.ms": 10, "log.flush.scheduler.interval.ms": 10},
    )
    m = e.manager()
    old = m.get_or_create(TopicPartition("old", 0))
    f = m.get_or_create(TopicPartition("f", 0))
    _fill(old, 7)  # record timestamps ~1_000: long expired
    old.update_high_watermark(7)
    _fill(f, 2)
    first = old.segments[0].log_path

    async def main():
        m.start_background()
        assert len(m._tasks) == 3
        for _ in range(3_000):
            if old.log_start_offset == 6 and f.recovery_point == 2 and not os.path.exists(first):
                break
            await asyncio.sleep(0.005)
        await m.stop_background()

    asyncio.run(main())
    assert old.log_start_offset == 6
    assert [s.base_offset for s in old.segments] == [6]
    assert not os.path.exists(first)
    assert f.recovery_point == 2
    assert m._tasks == []
    e.close_all()


def test_lock_refuses_a_second_live_manager_on_the_same_dir(env):
    first = env.manager()
    from broker.config import BrokerConfig

    second = LogManager(BrokerConfig({"log.dirs": ",".join(env.dirs), "broker.id": env.broker_id}), lambda topic: None)
    with pytest.raises(LogDirError, match="in use by another broker process"):
        second.startup()
    first.shutdown()
    second.startup()  # released by the clean shutdown
    second.shutdown()


# ---------------------------------------------------------------- open files and creation


@pytest.fixture
def nofile(monkeypatch):
    """Sets the open-file limit the manager sees; undoes the segment limit it sets."""
    from broker.log import manager as manager_mod
    from broker.native import set_open_segment_limit

    def set_(limit):
        monkeypatch.setattr(manager_mod, "open_file_limit", lambda: limit)

    yield set_
    set_open_segment_limit(-1)


def _partition_dirs(d):
    return sorted(n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n)))


def test_create_logs_is_all_or_none(env):
    """The 6th of 10 new logs cannot be created: the 5 made before it go too, and the
    error says which one failed (before, CreateTopics left half a topic on disk)."""
    m = env.manager()
    m.get_or_create(TopicPartition("old", 0))
    with open(os.path.join(env.dirs[0], "t-5"), "w"):
        pass  # a file where the dir must go
    tps = [TopicPartition("t", p) for p in range(10)]
    with pytest.raises(LogCreationError, match="t-5.*none of the 10 new logs were kept"):
        m.create_logs(tps)
    assert sorted(m.logs) == [TopicPartition("old", 0)]
    assert _partition_dirs(env.dirs[0]) == ["old-0"]
    os.unlink(os.path.join(env.dirs[0], "t-5"))
    logs = m.create_logs(tps + [TopicPartition("old", 0)])
    assert [lg.tp for lg in logs] == tps + [TopicPartition("old", 0)]
    assert len(_partition_dirs(env.dirs[0])) == 11
    with pytest.raises(ValueError):
        m.create_logs([TopicPartition("ok", 0), TopicPartition("bad name", 0)])
    assert len(m.logs) == 11


def test_create_logs_refuses_what_the_open_file_limit_cannot_fit(env, nofile):
    """One descriptor per log, plus a reserve: 200 fits 120 logs."""
    nofile(200)
    m = env.manager()
    with pytest.raises(LogCapacityError, match="121 partitions need about 201 open files.*is 200"):
        m.create_logs([TopicPartition("t", p) for p in range(121)])
    assert m.logs == {} and _partition_dirs(env.dirs[0]) == []
    m.create_logs([TopicPartition("t", p) for p in range(100)])
    with pytest.raises(LogCapacityError, match="30 new partitions do not fit beside the 100"):
        m.create_logs([TopicPartition("u", p) for p in range(30)])
    m.create_logs([TopicPartition("u", p) for p in range(20)])
    with pytest.raises(LogCapacityError):
        m.get_or_create(TopicPartition("v", 0))
    assert len(m.logs) == 120


def test_startup_refuses_log_dirs_the_open_file_limit_cannot_fit(env, nofile):
    nofile(400)
    m = env.manager()
    m.create_logs([TopicPartition("t", p) for p in range(130)])
    m.shutdown()
    nofile(200)
    with pytest.raises(LogCapacityError) as exc:
        env.manager()
    msg = str(exc.value)
    assert "\n" not in msg and env.dirs[0] in msg
    assert msg.endswith(
        "130 partitions need about 210 open files (one per partition, plus 80 for connections "
        "and files in use), but the open-file limit (ulimit -n, RLIMIT_NOFILE) is 200: raise it "
        "to at least 210"
    )
    nofile(210)
    assert len(env.manager().logs) == 130


def test_inactive_segments_open_within_the_limit_left_by_the_logs(env, nofile):
    from broker.native import open_inactive_segments, open_segment_limit

    nofile(400)  # reserve 64: 336 - logs for old segments
    m = env.manager()
    for p in range(20):
        _fill(m.get_or_create(TopicPartition("t", p)), 9)  # 3 segments each
    assert open_segment_limit() == 400 - 64 - 20
    m.shutdown()
    before = open_inactive_segments()
    m2 = env.manager()
    assert open_inactive_segments() == before  # loaded, then released
    assert all(lg.active.active and not any(s.active for s in lg.segments[:-1]) for lg in m2.logs.values())
    for lg in m2.logs.values():
        assert read_all(lg) == list(range(9))
    assert open_inactive_segments() - before == 40  # read: reopened, within the limit


CHILD_NOFILE = 256
CHILD_LOGS = 150  # the limit leaves 256 - 64 - 150 = 42 inactive segments open
CHILD_ROUNDS = 3


def rolls_and_flushes_within_the_limit(root: str) -> None:
    """Runs in a child process whose open-file limit is CHILD_NOFILE: CHILD_LOGS logs of
    one batch a segment, each appended to CHILD_ROUNDS times over, every log in turn as
    one produce to every partition does (each append after the first rolls: the fsync of
    the finished segment runs on the log-io threads beside the next round), then read
    from its start; again after a restart. Prints a JSON report for the parent."""
    import json
    from pathlib import Path

    from broker.native import open_inactive_segments, open_segment_limit

    errors = []
    logging.basicConfig(level=logging.ERROR, handlers=[_ListHandler(errors)])
    e = Env(Path(root), topic_overrides={"t": {"segment.bytes": SIZE}})
    report = {}

    async def rounds():
        baseline = len(os.listdir("/proc/self/fd"))
        m = e.manager()
        logs = m.create_logs([TopicPartition("t", p) for p in range(CHILD_LOGS)])
        for r in range(CHILD_ROUNDS):
            for lg in logs:
                lg.append_as_leader(batch(1, ts=1_000 + r), 0)
                lg.update_high_watermark(lg.log_end_offset)
            await asyncio.sleep(0)
        deadline = asyncio.get_running_loop().time() + 60
        while any(lg.recovery_point < lg.log_end_offset - 1 and not lg.flush_failed for lg in logs):
            assert asyncio.get_running_loop().time() < deadline, "the flushes of the rolls never ended"
            await asyncio.sleep(0.01)
        report["flush_failed"] = sum(lg.flush_failed for lg in logs)
        report["read"] = all(read_all(lg) == list(range(CHILD_ROUNDS)) for lg in logs)
        report["fds"] = len(os.listdir("/proc/self/fd")) - baseline
        report["inactive"], report["limit"] = open_inactive_segments(), open_segment_limit()
        m.shutdown()

    asyncio.run(rounds())
    m2 = e.manager()
    report["read_after_restart"] = all(read_all(lg) == list(range(CHILD_ROUNDS)) for lg in m2.logs.values())
    report["errors"] = errors
    print(json.dumps(report))


class _ListHandler(logging.Handler):
    def __init__(self, out: list):
        super().__init__()
        self.out = out

    def emit(self, record):
        self.out.append(record.getMessage())


def test_rolls_and_flushes_of_many_logs_stay_within_a_low_open_file_limit(tmp_path):
    """A real RLIMIT_NOFILE: before, each fsync of a finished segment that the open set
    had released reopened it for good from its worker thread (only the event loop's
    next use trimmed the set): 150 rolls at once went past the limit, fsyncs failed with
    EMFILE ("cannot open index: Too many open files") and so would have accepts."""
    import json
    import resource
    import subprocess
    import sys
    from pathlib import Path

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (CHILD_NOFILE, CHILD_NOFILE))

    code = (
        "import sys; from tests.unit.log.test_log_manager import rolls_and_flushes_within_the_limit as f; "
        "f(sys.argv[1])"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["errors"] == [] and report["flush_failed"] == 0
    assert report["read"] and report["read_after_restart"]
    assert report["limit"] == CHILD_NOFILE - 64 - CHILD_LOGS and report["inactive"] <= report["limit"]
    assert report["fds"] <= CHILD_NOFILE - 64 + 1  # logs, open set, the dir's lock


@pytest.mark.parametrize("threads", [1, 3])
def test_recovery_threads_load_every_log(tmp_path, threads):
    env = Env(tmp_path, broker_props={"num.recovery.threads.per.data.dir": threads})
    try:
        m = env.manager()
        for p in range(12):
            _fill(m.get_or_create(TopicPartition("t", p)), p % 5 + 1)
        _crash(m)
        m2 = env.manager()
        assert m2.loaded_cleanly[env.dirs[0]] is False
        assert sorted(m2.logs) == [TopicPartition("t", p) for p in range(12)]
        for p in range(12):
            assert read_all(m2.get(TopicPartition("t", p))) == list(range(p % 5 + 1))
    finally:
        env.close_all()


# ---------------------------------------------------------------- damaged meta.properties / partition.metadata


@pytest.mark.parametrize(
    "content, why",
    [
        (b"", "empty"),
        (b"\0" * 64, "no version"),  # a crash left zeros where the text was
        (b"\xff\xfe\x00garbage\n", "not UTF-8 text"),
        (b"version=0\nbroker.id=1\n", "no cluster.id"),
        (b"broker.id=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n", "no version"),
        (b"version=7\nbroker.id=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n", "version 7"),
        (b"version=0\nbroker.id=one\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n", "broker.id"),
        (b"version=0\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n", "no broker.id"),
        (b"version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n", "no node.id"),
        (b"version=0\nbroker.id=1\ncluster.id=\n", "no cluster.id"),
    ],
)
def test_a_damaged_meta_properties_is_refused_naming_the_file(env, content, why):
    env.manager().shutdown()
    path = os.path.join(env.dirs[0], META)
    with open(path, "wb") as f:
        f.write(content)
    for attempt in (lambda m: m.read_cluster_id(), lambda m: m.startup()):
        with pytest.raises(LogDirError) as exc:
            attempt(env.manager(start=False))
        text = str(exc.value)
        assert "\n" not in text and path in text and why in text and "refusing to start" in text
    with open(path, "rb") as f:
        assert f.read() == content, "a damaged meta.properties was rewritten"


def test_meta_properties_as_a_directory_is_refused(env):
    os.makedirs(os.path.join(env.dirs[0], META))
    with pytest.raises(LogDirError, match=re.escape(os.path.join(env.dirs[0], META))):
        env.manager()


def test_kafkas_version_1_meta_properties_is_read(env):
    os.makedirs(env.dirs[0])
    with open(os.path.join(env.dirs[0], META), "w") as f:
        f.write("#\nversion=1\nnode.id=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\ndirectory.id=BBBBBBBBBBBBBBBBBBBBBB\n")
    assert env.manager().cluster_id == "AAAAAAAAAAAAAAAAAAAAAA"
    with pytest.raises(LogDirError, match="node.id 1"):
        env.manager(broker_id=2)


def _partition_metadata(m, tp):
    return os.path.join(m.logs[tp].dir, "partition.metadata")


@pytest.mark.parametrize(
    "content, why",
    [
        (b"", "empty"),
        (b"\0" * 40, "no version"),
        (b"version: 0\n", "no topic_id"),
        (b"version: 0\ntopic_id: not-base64!\n", "topic_id"),
        (b"version: 0\ntopic_id: AAAA\n", "topic_id"),  # base64, but not 16 bytes
        (b"version: 3\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n", "version 3"),
        (b"\xff\xfeversion", "not UTF-8 text"),
    ],
)
def test_a_damaged_partition_metadata_is_refused_naming_the_file(env, content, why):
    import uuid

    m = env.manager()
    tp = TopicPartition("t", 0)
    _fill(m.get_or_create(tp, uuid.uuid4()), 3)
    m.shutdown()
    path = _partition_metadata(m, tp)
    with open(path, "wb") as f:
        f.write(content)
    with pytest.raises(LogDirError) as exc:
        env.manager()
    text = str(exc.value)
    assert "\n" not in text and path in text and why in text and "refusing to start" in text
    with open(path, "rb") as f:
        assert f.read() == content


def test_a_damaged_partition_metadata_is_rebuilt_from_the_topic_ids_of_the_store(env, caplog):
    import uuid

    tid = uuid.uuid4()
    m = env.manager()
    tp = TopicPartition("t", 0)
    _fill(m.get_or_create(tp, tid), 3)
    m.shutdown()
    path = _partition_metadata(m, tp)
    with open(path, "wb") as f:
        f.write(b"\0" * 40)
    m2 = env.manager(start=False)
    with caplog.at_level(logging.WARNING, logger="broker.log"):
        m2.startup(topic_ids={"t": tid, "other": uuid.uuid4()})
    assert m2.logs[tp].topic_id == tid and m2.logs[tp].log_end_offset == 3
    assert [r.getMessage() for r in caplog.records if path in r.getMessage() and "rebuilt" in r.getMessage()]
    m2.shutdown()
    assert env.manager().logs[tp].topic_id == tid


def test_a_missing_partition_metadata_is_written_when_the_topic_id_arrives(env):
    import uuid

    tid = uuid.uuid4()
    m = env.manager()
    tp = TopicPartition("t", 0)
    m.get_or_create(tp, tid)
    m.shutdown()
    path = _partition_metadata(m, tp)
    os.unlink(path)
    m2 = env.manager()
    assert m2.logs[tp].topic_id is None
    assert m2.get_or_create(tp, tid).topic_id == tid  # the controller's word (LeaderAndIsr)
    assert "topic_id: " in _read_text(path)
    m2.shutdown()
    assert env.manager().logs[tp].topic_id == tid


def test_the_shutdown_state_logged_at_load_is_accurate(env, caplog):
    def loaded_line():
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("loaded ")]
        assert len(lines) == 1, caplog.text
        caplog.clear()
        return lines[0]

    with caplog.at_level(logging.INFO, logger="broker.log"):
        m = env.manager()
        assert loaded_line().endswith("(new log dir)")
        m.get_or_create(TopicPartition("t", 0))
        m.shutdown()
        m = env.manager()
        assert loaded_line().endswith("(clean shutdown)")
        _crash(m)
        env.manager()
        assert loaded_line().endswith("(unclean shutdown)")


# ---------------------------------------------------------------- blocks allocated ahead


@pytest.mark.parametrize("ahead", [0, 1 << 20])
def test_the_active_segment_has_its_blocks_allocated_ahead_as_configured(tmp_path, ahead):
    """log.segment.allocate.ahead.bytes reaches the segments (docs/native.md): the active
    segment's .log holds that much more than its data, and its size stays the data's."""
    e = Env(tmp_path, broker_props={"log.segment.allocate.ahead.bytes": ahead})
    try:
        lg = e.manager().get_or_create(TopicPartition("t", 0))
        _fill(lg, 1)
        path = lg.active.log_path
        assert os.path.getsize(path) == SIZE
        blocks = os.stat(path).st_blocks * 512
        assert (blocks >= ahead) if ahead else (blocks < 65536)
    finally:
        e.close_all()
        set_segment_allocate_ahead(SEGMENT_ALLOCATE_AHEAD)
