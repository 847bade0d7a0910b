"""Writes the disk refuses: an append fails as LogStorageError and leaves the log as it
was, readable; the log dir says so once, and once more when writes work again; a failed
fsync fails every durable wait until a restart, which recovers the dir. Any other I/O
error (EIO, the dir gone) is a failed dir: it goes offline, its logs close and leave the
manager, new logs go elsewhere (Kafka's LogDirFailureChannel).

The append failures are real: RLIMIT_FSIZE makes the kernel refuse writes past a size
(EFBIG), as a full disk refuses them (ENOSPC)."""

import asyncio
import contextlib
import errno
import logging
import os
import resource
import signal

import pytest

from broker.log import LogStorageError, TopicPartition, log as log_mod
from broker.log.manager import CLEAN_SHUTDOWN

from ._support import batch, read_all
from .test_log_manager import Env


@contextlib.contextmanager
def file_size_limit(limit: int):
    """Writes past `limit` bytes fail with EFBIG in this process (SIGXFSZ ignored)."""
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, old_handler)


def storage_records(caplog):
    failing = [r for r in caplog.records if "answered with KAFKA_STORAGE_ERROR" in r.getMessage()]
    again = [r for r in caplog.records if "writes work again" in r.getMessage()]
    return failing, again


def test_a_refused_append_leaves_the_log_as_it_was(make_log, caplog):
    caplog.set_level(logging.INFO, logger="broker.log")
    lg = make_log()
    for i in range(3):
        lg.append_as_leader(batch(1, ts=1_000 + i), 0)
    lg.update_high_watermark(lg.log_end_offset)
    size, end = lg.active.size, lg.log_end_offset
    with file_size_limit(size + 100):
        for _ in range(4):
            with pytest.raises(LogStorageError, match="t-0: appending failed: .*File too large"):
                lg.append_as_leader(batch(5, value_size=2000), 0)
    assert (lg.active.size, lg.log_end_offset) == (size, end)
    assert os.path.getsize(lg.active.log_path) == size  # no partial batch behind
    assert read_all(lg) == [0, 1, 2]
    failing, again = storage_records(caplog)
    assert len(failing) == 1 and again == []
    assert lg.append_as_leader(batch(5, value_size=2000), 0).base_offset == end
    lg.update_high_watermark(lg.log_end_offset)
    assert read_all(lg) == list(range(end + 5))
    failing, again = storage_records(caplog)
    assert len(failing) == 1 and len(again) == 1


@contextlib.contextmanager
def spare_descriptors(n: int):
    """Only `n` more files can be open at once in this process (EMFILE beyond)."""
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    used = max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1
    resource.setrlimit(resource.RLIMIT_NOFILE, (used + n, old[1]))
    fillers = []
    try:
        with pytest.raises(OSError):  # take every free number below the limit
            while True:
                fillers.append(os.open(os.devnull, os.O_RDONLY))
        for _ in range(n):
            os.close(fillers.pop())
        yield
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, old)


def test_a_refused_roll_keeps_the_log_appendable(make_log):
    lg = make_log({"segment.bytes": 3 * len(batch(1))})
    for i in range(3):
        lg.append_as_leader(batch(1, ts=1_000 + i), 0)
    # the new segment's index cannot be opened beside its .log: the old one stays active
    with spare_descriptors(1):
        with pytest.raises(LogStorageError, match="Too many open files"):
            lg.append_as_leader(batch(1), 0)
    assert os.path.exists(os.path.join(lg.dir, "00000000000000000003.snapshot"))  # got that far
    assert len(lg.segments) == 1 and lg.active.active
    assert not lg.active.offset_index.is_full
    # the roll works, the write after it does not: the new segment stays, empty
    with file_size_limit(100):
        with pytest.raises(LogStorageError, match="File too large"):
            lg.append_as_leader(batch(1), 0)
    assert len(lg.segments) == 2 and lg.active.size == 0 and lg.log_end_offset == 3
    assert lg.append_as_leader(batch(1), 0).base_offset == 3
    lg.update_high_watermark(lg.log_end_offset)
    assert read_all(lg) == [0, 1, 2, 3]


def test_a_failed_fsync_fails_durable_waits_until_a_restart(tmp_path, monkeypatch, caplog):
    env = Env(tmp_path, topic_overrides={"t": {"flush.messages": 1}})
    m = env.manager()
    lg = m.get_or_create(TopicPartition("t", 0))

    def failing_flush(segments):
        # ENOSPC (a thin-provisioned or network volume refusing the write-back): a full
        # disk is not a failed dir; EIO is (test_an_io_error_takes_the_dir_offline)
        raise OSError(errno.ENOSPC, "No space left on device")

    async def scenario():
        lg.append_as_leader(batch(1), 0)
        await lg.schedule_flush()
        assert lg.recovery_point == 1
        lg.append_as_leader(batch(1), 0)
        monkeypatch.setattr(log_mod, "_flush_segments", failing_flush)
        with pytest.raises(LogStorageError, match="fsync failed: No space left on device"):
            await lg.schedule_flush()
        monkeypatch.undo()
        lg.append_as_leader(batch(1), 0)  # appends go on, not durably
        for _ in range(3):  # no fsync is trusted after a failed one
            with pytest.raises(LogStorageError):
                await lg.schedule_flush()
        assert lg.recovery_point == 1 and lg.flush_failed
        m.flush_dirty()  # the flush timer leaves it alone
        await asyncio.sleep(0)

    asyncio.run(scenario())
    m.shutdown()
    assert not os.path.exists(os.path.join(env.dirs[0], CLEAN_SHUTDOWN))
    assert any("not marked as cleanly shut down" in r.getMessage() for r in caplog.records)
    assert len(storage_records(caplog)[0]) == 1
    m2 = env.manager()
    assert m2.loaded_cleanly[env.dirs[0]] is False  # recovered at the next start
    assert m2.get(TopicPartition("t", 0)).log_end_offset == 3
    m2.shutdown()


def test_an_io_error_takes_the_dir_offline_and_the_other_dir_goes_on(tmp_path, caplog):
    env = Env(tmp_path, n_dirs=2)
    m = env.manager()
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    la, lb = m.get_or_create(a), m.get_or_create(b)
    assert os.path.dirname(la.dir) != os.path.dirname(lb.dir)
    failed_dir = os.path.dirname(la.dir)
    heard = []
    m.on_dir_offline(lambda d, tps: heard.append((d, tps)))

    async def scenario():
        la.append_as_leader(batch(1), 0)
        la.segments[-1] = _Failing(la.active)
        with pytest.raises(LogStorageError, match="Input/output error"):
            la.append_as_leader(batch(1), 0)
        await asyncio.sleep(0)  # the dir goes offline on the loop
        assert heard == [(failed_dir, [a])]
        assert m.get(a) is None and la.closed and m.offline_dirs == {failed_dir: [a]}
        assert lb.append_as_leader(batch(1), 0).base_offset == 0  # the other dir goes on
        assert os.path.dirname(m.get_or_create(TopicPartition("u", 0)).dir) != failed_dir  # new logs elsewhere
        m.checkpoint()

    asyncio.run(scenario())
    assert len([r for r in caplog.records if "is taken offline" in r.getMessage()]) == 1
    m.shutdown()
    assert not os.path.exists(os.path.join(failed_dir, CLEAN_SHUTDOWN))
    assert os.path.exists(os.path.join(os.path.dirname(lb.dir), CLEAN_SHUTDOWN))
    m2 = env.manager()  # repaired: loaded again at the next start
    assert m2.get(a) is not None and m2.get(a).log_end_offset == 1 and not m2.offline_dirs
    m2.shutdown()


def test_a_dir_unusable_at_start_stays_offline_and_the_others_load(tmp_path):
    env = Env(tmp_path, n_dirs=2)
    m = env.manager()
    m.get_or_create(TopicPartition("t", 0))
    m.get_or_create(TopicPartition("t", 1))
    m.shutdown()
    broken = env.dirs[1]
    os.rename(broken, broken + ".moved")
    with open(broken, "w"):  # a file where the dir was: ENOTDIR/EEXIST, not a full disk
        pass
    m2 = env.manager()
    assert list(m2.offline_dirs) == [broken] and m2.online_dirs == [env.dirs[0]]
    assert len(m2.logs) == 1
    m2.shutdown()


class _Failing:
    """A segment whose appends fail with EIO (everything else is the real one's)."""

    def __init__(self, seg):
        self._seg = seg

    def append(self, mv):
        raise OSError(errno.EIO, "Input/output error")

    def __getattr__(self, name):
        return getattr(self._seg, name)
