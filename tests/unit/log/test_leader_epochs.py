"""The leader-epoch cache across crashes (issue 16, defect 4) and the high watermark a
log opens with (defect 5): the checkpoint is fsynced as Kafka writes it, an unreadable
one is rebuilt from the batches, recovery after an unclean shutdown rebuilds the epochs
of the recovered segments, and a high watermark nobody checkpointed is 0."""

import os

from broker.log.checkpoints import LeaderEpochCheckpoint, OffsetCheckpoint, TopicPartition
from broker.log.log import LeaderEpochCache
from broker.log.manager import HIGH_WATERMARK

from ._support import batch
from .test_log_manager import Env


def write(lg, epochs_and_counts):
    for epoch, n in epochs_and_counts:
        lg.append_as_leader(batch(n), epoch)


def test_assigning_an_epoch_fsyncs_the_checkpoint_and_its_dir(tmp_path, monkeypatch):
    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    cache = LeaderEpochCache(str(tmp_path / "leader-epoch-checkpoint"))
    cache.assign(3, 0)
    assert str(tmp_path / "leader-epoch-checkpoint.tmp") in synced  # the data, before the rename
    assert str(tmp_path) in synced  # the rename
    assert LeaderEpochCheckpoint(str(tmp_path / "leader-epoch-checkpoint")).read() == [(3, 0)]


def test_an_unreadable_epoch_checkpoint_is_rebuilt_from_the_batches(make_log, tmp_path):
    lg = make_log()
    write(lg, [(0, 3), (0, 2), (2, 4), (5, 1)])
    assert lg.leader_epochs.entries == [(0, 0), (2, 5), (5, 9)]
    lg.close()
    (tmp_path / "t-0" / "leader-epoch-checkpoint").write_text("0\n3\n0 0\n2 five\n")
    lg = make_log(clean_shutdown=True)
    assert lg.leader_epochs.entries == [(0, 0), (2, 5), (5, 9)]
    # and written back, readable again
    assert LeaderEpochCheckpoint(str(tmp_path / "t-0" / "leader-epoch-checkpoint")).read() == [(0, 0), (2, 5), (5, 9)]


def test_recovery_rebuilds_the_epochs_a_lost_checkpoint_write_missed(make_log, tmp_path):
    # the power went before the checkpoint naming epochs 2 and 5 reached the disk (or it
    # did and the log's tail did not): recovery takes the epochs from the batches
    lg = make_log(overrides={"segment.bytes": 400})
    write(lg, [(0, 3), (2, 4), (2, 1), (5, 2), (5, 1), (7, 1)])
    assert len(lg.segments) > 2
    end = lg.log_end_offset
    lg.close()
    LeaderEpochCheckpoint(str(tmp_path / "t-0" / "leader-epoch-checkpoint")).write([(0, 0)])
    lg = make_log(overrides={"segment.bytes": 400}, clean_shutdown=False, recovery_point=0)
    assert lg.log_end_offset == end
    assert lg.leader_epochs.entries == [(0, 0), (2, 3), (5, 8), (7, 11)]


def test_recovery_drops_checkpointed_epochs_whose_records_did_not_survive(make_log, tmp_path):
    lg = make_log()
    write(lg, [(0, 3), (2, 4)])
    lg.close()
    # the checkpoint names epoch 4 at offset 5, but the records at 5 and 6 are epoch 2's
    LeaderEpochCheckpoint(str(tmp_path / "t-0" / "leader-epoch-checkpoint")).write([(0, 0), (2, 3), (4, 5)])
    lg = make_log(clean_shutdown=False, recovery_point=0)
    assert lg.leader_epochs.entries == [(0, 0), (2, 3)]


def test_a_high_watermark_nobody_checkpointed_is_zero(make_log):
    lg = make_log()
    write(lg, [(0, 5)])
    lg.close()
    assert make_log(clean_shutdown=True).high_watermark == 0
    assert make_log(clean_shutdown=False).high_watermark == 0
    assert make_log(clean_shutdown=True, high_watermark=3).high_watermark == 3


def test_the_log_manager_opens_a_partition_missing_from_the_checkpoint_at_zero(tmp_path):
    env = Env(tmp_path)
    m = env.manager()
    tp, other = TopicPartition("a", 0), TopicPartition("b", 0)
    for p in (tp, other):
        lg = m.get_or_create(p)
        lg.append_as_leader(batch(4), 0)
        lg.update_high_watermark(4)
    m.checkpoint()
    m.shutdown()
    # the checkpoint loses partition a (a crash within seconds of its creation)
    path = os.path.join(env.dirs[0], HIGH_WATERMARK)
    OffsetCheckpoint(path).write({other: 4})
    m = env.manager()
    assert m.get(tp).high_watermark == 0 and m.get(other).high_watermark == 4
    m.shutdown()
    # an unreadable checkpoint: every partition starts at 0
    with open(path, "w") as f:
        f.write("garbage\n")
    m = env.manager()
    assert m.get(tp).high_watermark == 0 and m.get(other).high_watermark == 0
    m.shutdown()


def test_epoch_end_offsets_as_kafkas_leader_epoch_cache(tmp_path):
    cache = LeaderEpochCache(str(tmp_path / "leader-epoch-checkpoint"))
    assert cache.end_offset_for(1, 12) == (-1, -1)
    cache.entries = [(1, 0), (3, 4), (5, 8)]
    assert cache.end_offset_for(5, 12) == (5, 12)  # the latest ends at the log end
    assert cache.end_offset_for(4, 12) == (3, 8)  # the largest below, where the next starts
    assert cache.end_offset_for(1, 12) == (1, 4)
    assert cache.end_offset_for(0, 12) == (0, 0)  # older than all: itself, at the first start
    assert cache.end_offset_for(6, 12) == (-1, -1)  # beyond the latest: unknown
    assert cache.end_offset_for(-1, 12) == (-1, -1)
