"""Partition (leadership, ISR, high watermark) on a real Log, with a recording listener."""

import pytest

from broker.cluster.metadata import PartitionState
from broker.cluster.replica.partition import Partition
from broker.log import OffsetOutOfRange
from broker.log.log import Log
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from tests.unit.log._support import TP, batch, log_config


class Recorder:
    def __init__(self):
        self.events = []

    def high_watermark_moved(self, tp):
        self.events.append(("hw", tp))

    def log_end_moved(self, tp):
        self.events.append(("leo", tp))

    def partition_changed(self, tp):
        self.events.append(("changed", tp))


def make(tmp_path, replicas=(1, 2, 3), leader=1, isr=None):
    lg = Log.load(str(tmp_path / "t-0"), TP, log_config(tmp_path))
    rec = Recorder()
    state = PartitionState(0, list(replicas), leader, 0, list(isr if isr is not None else replicas))
    return Partition(TP, lg, state, 1, rec), rec


def test_alone_in_the_isr_the_high_watermark_follows_every_append(tmp_path):
    part, rec = make(tmp_path, replicas=(1,))
    part.append_as_leader(batch(3), 1)
    assert part.log.high_watermark == 3
    assert rec.events == [("leo", TP), ("hw", TP)]


def test_high_watermark_is_the_smallest_log_end_of_the_isr(tmp_path):
    part, rec = make(tmp_path)
    part.append_as_leader(batch(5), -1)
    assert part.log.high_watermark == 0
    assert rec.events == [("leo", TP)]
    part.update_follower(2, 5)
    assert part.log.high_watermark == 0  # replica 3 has nothing yet
    assert ("hw", TP) not in rec.events
    part.update_follower(3, 3)
    assert part.log.high_watermark == 3
    part.update_follower(3, 5)
    assert part.log.high_watermark == 5
    assert rec.events.count(("hw", TP)) == 2


def test_a_replica_outside_the_isr_does_not_hold_the_high_watermark_back(tmp_path):
    part, _ = make(tmp_path, isr=(1, 2))
    part.append_as_leader(batch(4), -1)
    part.update_follower(2, 4)
    assert part.log.high_watermark == 4


def test_a_retried_idempotent_batch_moves_nothing(tmp_path):
    part, rec = make(tmp_path, replicas=(1,))
    b = batch(2, producer_id=7, producer_epoch=0, base_sequence=0)
    part.append_as_leader(bytearray(b), 1)
    rec.events.clear()
    info = part.append_as_leader(bytearray(b), 1)
    assert info.duplicate
    assert rec.events == []


def test_a_state_change_is_reported(tmp_path):
    part, rec = make(tmp_path)
    part.update_state(PartitionState(0, [1, 2, 3], 2, 1, [1, 2, 3]))
    assert not part.is_leader
    assert rec.events[-1] == ("changed", TP)


# ---------------------------------------------------------------- ISR changes, with a fake clock


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def leader(tmp_path, isr=(1, 2, 3), lag_ms=100):
    lg = Log.load(str(tmp_path / "t-0"), TP, log_config(tmp_path))
    clock = Clock()
    asked = []
    state = PartitionState(0, [1, 2, 3], 1, 5, list(isr), 1, 7)
    part = Partition(TP, lg, state, 1, Recorder(), lambda p, isr: asked.append(list(isr)), clock)
    return part, clock, asked


def test_a_lagging_follower_is_dropped_after_the_lag_time_and_the_controller_decides(tmp_path):
    part, clock, asked = leader(tmp_path)
    part.append_as_leader(batch(10), 1)
    part.update_follower(2, 10)  # 2 caught up, 3 never fetched
    clock.now += 0.05
    part.maybe_shrink_isr(100)
    assert asked == []  # within the lag time: nothing yet
    clock.now += 0.1
    part.maybe_shrink_isr(100)
    assert asked == [[1, 2]]
    assert part.isr == [1, 2, 3]  # the leader asks; the ISR changes on the answer
    assert part.maximal_isr == [1, 2, 3]  # a shrink in flight still counts the replica
    part.maybe_shrink_isr(100)
    assert asked == [[1, 2]]  # one change in flight at a time
    part.isr_change_completed(part.pending_isr, 0, 5, [1, 2], 8)
    assert part.isr == [1, 2] and part.state.partition_epoch == 8
    assert part.log.high_watermark == 10  # no longer held back by replica 3


def test_a_follower_that_keeps_up_under_load_is_not_dropped(tmp_path):
    part, clock, asked = leader(tmp_path)
    for _i in range(20):
        part.append_as_leader(batch(1), 1)
        clock.now += 0.03
        # each fetch reaches where the log ended at the previous fetch, never the log end
        end_before = part.log.log_end_offset - 1
        part.update_follower(2, end_before)
        part.update_follower(3, end_before)
    part.maybe_shrink_isr(100)
    assert asked == []


def test_a_caught_up_follower_rejoins_when_it_reaches_the_high_watermark(tmp_path):
    part, clock, asked = leader(tmp_path, isr=(1, 2))
    part.append_as_leader(batch(6), 1)
    part.update_follower(2, 6)
    assert part.log.high_watermark == 6
    part.update_follower(3, 4)
    assert asked == []  # behind the high watermark
    part.update_follower(3, 6)
    assert asked == [[1, 2, 3]]
    assert part.maximal_isr == [1, 2, 3]  # an addition in flight counts at once
    part.append_as_leader(batch(2), 1)
    part.update_follower(2, 8)
    assert part.log.high_watermark == 6  # replica 3 holds it: it is (becoming) in sync
    part.isr_change_completed(part.pending_isr, 0, 5, [1, 2, 3], 8)
    part.update_follower(3, 8)
    assert part.log.high_watermark == 8


def test_a_refused_change_keeps_the_isr_and_waits_before_asking_again(tmp_path):
    part, clock, asked = leader(tmp_path, isr=(1, 2))
    part.append_as_leader(batch(3), 1)
    part.update_follower(2, 3)
    part.update_follower(3, 3)
    part.isr_change_completed(part.pending_isr, ErrorCode.INELIGIBLE_REPLICA)  # nothing was written
    assert part.isr == [1, 2] and part.pending_isr is None
    part.update_follower(3, 3)
    assert len(asked) == 1  # backing off
    clock.now += 2
    part.update_follower(3, 3)
    assert len(asked) == 2


def test_min_insync_replicas_is_checked_against_the_isr(tmp_path):
    lg = Log.load(str(tmp_path / "t-0"), TP, log_config(tmp_path, {"min.insync.replicas": 2}))
    part = Partition(TP, lg, PartitionState(0, [1, 2, 3], 1, 0, [1]), 1)
    with pytest.raises(KafkaProtocolError) as e:
        part.append_as_leader(batch(1), -1)
    assert e.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert part.log.log_end_offset == 0
    part.append_as_leader(batch(1), 1)  # acks=1 does not care
    assert not part.enough_replicas()


def test_a_follower_takes_the_leaders_high_watermark_bounded_by_its_log(tmp_path):
    lg = Log.load(str(tmp_path / "t-0"), TP, log_config(tmp_path))
    part = Partition(TP, lg, PartitionState(0, [1, 2], 2, 3, [1, 2]), 1, Recorder())
    assert not part.is_leader
    src = Log.load(str(tmp_path / "src"), TP, log_config(tmp_path))
    for _ in range(4):
        src.append_as_leader(batch(1), 3)
    part.append_as_follower(src.read_bytes(0, 1 << 20, 4))
    part.update_follower_high_watermark(10)
    assert lg.log_end_offset == 4 and lg.high_watermark == 4
    part.truncate_to(2)
    assert lg.log_end_offset == 2 and lg.high_watermark == 2


# ---------------------------------------------------------------- follower fetches (issue 16, defect 1)


def test_a_fetch_beyond_the_log_end_counts_for_nothing(tmp_path):
    # the reproduction: fetches as the (paused) followers from a huge offset must
    # neither move the high watermark nor bring a replica back into the ISR
    part, clock, asked = leader(tmp_path, isr=(1, 2))
    part.append_as_leader(batch(5), -1)
    assert not part.update_follower(2, 10**9)
    assert not part.update_follower(3, 10**9)
    assert part.log.high_watermark == 0 and asked == []
    assert part.follower_leo == {2: -1, 3: -1}
    part.append_as_leader(batch(1), -1)
    assert part.log.high_watermark == 0  # nothing acknowledges an acks=all produce
    assert part.update_follower(2, 6)
    assert part.log.high_watermark == 6


def test_a_fetch_below_the_log_start_counts_for_nothing(tmp_path):
    part, _, _ = leader(tmp_path)
    part.append_as_leader(batch(5), -1)
    part.update_follower(2, 5)
    part.update_follower(3, 5)
    part.log.advance_log_start_offset(4)
    assert not part.update_follower(2, 2)
    assert part.follower_leo[2] == 5


def test_only_a_replica_may_fetch_as_a_follower(tmp_path):
    part, _, _ = leader(tmp_path)
    part.check_follower(2, 5)
    part.check_follower(3)
    for replica_id, epoch, code in (
        (4, 5, ErrorCode.UNKNOWN_LEADER_EPOCH),
        (4, -1, ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (1, 5, ErrorCode.UNKNOWN_LEADER_EPOCH),
    ):  # 1: this broker itself
        with pytest.raises(KafkaProtocolError) as e:
            part.check_follower(replica_id, epoch)
        assert e.value.code == code
        assert not part.update_follower(replica_id, 0)


def epochs_leader(tmp_path):
    """A leader at epoch 5 whose log holds epoch 1 at [0, 4), epoch 3 at [4, 8)."""
    lg = Log.load(str(tmp_path / "t-0"), TP, log_config(tmp_path))
    lg.leader_epochs.assign(1, 0)
    lg.append_as_leader(batch(4), 1)
    lg.leader_epochs.assign(3, 4)
    lg.append_as_leader(batch(4), 3)
    part = Partition(TP, lg, PartitionState(0, [1, 2, 3], 1, 5, [1, 2, 3], 1, 7), 1, Recorder())
    assert lg.leader_epochs.entries == [(1, 0), (3, 4), (5, 8)]
    return part


@pytest.mark.parametrize(
    "fetch_offset, last_fetched_epoch, expected",
    [
        (6, 3, None),  # a prefix of this log: read on
        (8, 3, None),
        (8, 5, None),
        (3, -1, None),  # no epoch named (before v12, or nothing fetched yet)
        (5, 1, (1, 4)),  # epoch 1 ends here at 4: the follower has more of it
        (6, 2, (1, 4)),  # epoch 2 never was here: the largest below it ends at 4
        (9, 5, (5, 8)),  # the current epoch ends at the log end
        (10**9, 5, (5, 8)),
        (3, 0, (0, 0)),  # older than every epoch here: it ends where the first starts
    ],
)
def test_a_diverging_last_fetched_epoch_is_answered_with_where_it_ends_here(
    tmp_path, fetch_offset, last_fetched_epoch, expected
):
    part = epochs_leader(tmp_path)
    assert part.diverging_epoch(fetch_offset, last_fetched_epoch) == expected


def test_an_epoch_unknown_here_or_an_offset_below_the_log_start_is_out_of_range(tmp_path):
    part = epochs_leader(tmp_path)
    with pytest.raises(OffsetOutOfRange):
        part.diverging_epoch(8, 6)  # newer than any epoch of this leader
    part.update_follower(2, 8)
    part.update_follower(3, 8)
    part.log.advance_log_start_offset(6)
    with pytest.raises(OffsetOutOfRange):
        part.diverging_epoch(5, 3)


# ---------------------------------------------------------------- ambiguous ISR answers (issue 16, defect 2)


def expanding(tmp_path):
    """A leader with ISR [1, 2] that asked to add 3, its log at 6 on every replica."""
    part, clock, asked = leader(tmp_path, isr=(1, 2))
    part.append_as_leader(batch(6), -1)
    part.update_follower(2, 6)
    part.update_follower(3, 6)
    assert asked == [[1, 2, 3]]
    return part, clock, asked


@pytest.mark.parametrize(
    "error",
    [
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.STALE_BROKER_EPOCH,
        ErrorCode.UNKNOWN_SERVER_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
    ],
)
def test_an_ambiguous_answer_keeps_the_expansion_pending_and_asks_again(tmp_path, error):
    # the controller may have written ISR [1, 2, 3] (its ZooKeeper multi-op retried after a
    # connection loss): replica 3 must keep holding the high watermark back
    part, clock, asked = expanding(tmp_path)
    pending = part.pending_isr
    part.isr_change_completed(pending, error)
    assert part.pending_isr is pending and part.maximal_isr == [1, 2, 3]
    part.append_as_leader(batch(4), -1)
    part.update_follower(2, 10)
    assert part.log.high_watermark == 6  # replica 3 does not have 6..9
    part.maybe_shrink_isr(100_000)
    assert len(asked) == 1  # backing off
    clock.now += 1.5
    part.update_follower(2, 10)
    assert asked == [[1, 2, 3], [1, 2, 3]]  # the same change asked again
    part.update_follower(2, 10)
    assert len(asked) == 2  # once
    part.isr_change_completed(pending, 0, 5, [1, 2, 3], 8)
    assert part.isr == [1, 2, 3] and part.pending_isr is None and part.state.partition_epoch == 8
    part.update_follower(3, 10)
    assert part.log.high_watermark == 10


def test_an_answer_about_another_state_keeps_the_change_pending(tmp_path):
    part, clock, asked = expanding(tmp_path)
    part.isr_change_completed(part.pending_isr, 0, 6, [1, 2, 3], 9)  # a newer leader epoch
    assert part.pending_isr == [1, 2, 3] and part.isr == [1, 2]
    assert part.maximal_isr == [1, 2, 3]


def test_the_shrink_timer_asks_again_too(tmp_path):
    part, clock, asked = expanding(tmp_path)
    part.isr_change_completed(part.pending_isr, ErrorCode.REQUEST_TIMED_OUT)
    clock.now += 1.5
    part.maybe_shrink_isr(100_000)
    assert asked == [[1, 2, 3], [1, 2, 3]]


def test_a_newer_partition_epoch_from_the_controller_settles_a_pending_change(tmp_path):
    part, clock, asked = expanding(tmp_path)
    part.isr_change_completed(part.pending_isr, ErrorCode.INVALID_UPDATE_VERSION)
    part.update_state(PartitionState(0, [1, 2, 3], 1, 5, [1, 2], 1, 7))  # the same state again
    assert part.pending_isr == [1, 2, 3]
    part.update_state(PartitionState(0, [1, 2, 3], 1, 5, [1, 2, 3], 1, 8))  # what ZooKeeper holds
    assert part.pending_isr is None and part.isr == [1, 2, 3]
    clock.now += 5
    part.update_follower(3, 6)
    assert len(asked) == 1  # nothing left to ask


@pytest.mark.parametrize("error", [ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED])
def test_an_answer_proving_nothing_was_written_drops_the_change(tmp_path, error):
    part, clock, asked = expanding(tmp_path)
    part.isr_change_completed(part.pending_isr, error)
    assert part.pending_isr is None and part.maximal_isr == [1, 2]
    part.append_as_leader(batch(4), -1)
    part.update_follower(2, 10)
    assert part.log.high_watermark == 10


def test_enough_replicas_counts_a_shrink_in_flight(tmp_path):
    lg = Log.load(str(tmp_path / "t-0"), TP, log_config(tmp_path, {"min.insync.replicas": 3}))
    clock = Clock()
    part = Partition(
        TP, lg, PartitionState(0, [1, 2, 3], 1, 5, [1, 2, 3], 1, 7), 1, Recorder(), lambda p, isr: None, clock
    )
    part.append_as_leader(batch(1), -1)
    part.update_follower(2, 1)
    clock.now += 1
    part.maybe_shrink_isr(100)
    assert part.pending_isr == [1, 2]
    assert part.enough_replicas()  # the high watermark still counts replica 3
    part.isr_change_completed(part.pending_isr, 0, 5, [1, 2], 8)
    assert not part.enough_replicas()


def test_check_enough_replicas_reach_offset_decides_a_waiting_acks_all_append(tmp_path):
    lg = Log.load(str(tmp_path / "t-0"), TP, log_config(tmp_path, {"min.insync.replicas": 2}))
    part = Partition(TP, lg, PartitionState(0, [1, 2, 3], 1, 5, [1, 2, 3], 1, 7), 1, Recorder(), lambda p, isr: None)
    part.append_as_leader(batch(3), -1)  # epoch 5, offsets 0..2
    assert part.check_enough_replicas_reach_offset(3, 5) == (False, ErrorCode.NONE)
    part.update_follower(2, 3)
    part.update_follower(3, 2)
    assert part.check_enough_replicas_reach_offset(3, 5) == (False, ErrorCode.NONE)  # 3 lacks offset 2
    assert part.check_enough_replicas_reach_offset(2, 5) == (True, ErrorCode.NONE)
    # a new epoch alone (an ISR shrink) keeps it waiting, then the remaining ISR commits it
    part.update_state(PartitionState(0, [1, 2, 3], 1, 6, [1, 2], 1, 8))
    assert part.check_enough_replicas_reach_offset(3, 5) == (False, ErrorCode.NONE)
    part.update_follower(2, 3)
    assert part.log.high_watermark == 3
    assert part.check_enough_replicas_reach_offset(3, 5) == (True, ErrorCode.NONE)
    # the high watermark covers it, but over fewer replicas than min.insync.replicas
    part.update_state(PartitionState(0, [1, 2, 3], 1, 7, [1], 1, 9))
    assert part.check_enough_replicas_reach_offset(3, 5) == (True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    # no longer leading
    part.update_state(PartitionState(0, [1, 2, 3], 2, 8, [1, 2], 1, 10))
    assert part.check_enough_replicas_reach_offset(3, 5) == (True, ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_check_enough_replicas_reach_offset_refuses_a_batch_lost_while_following(tmp_path):
    part, _, _ = leader(tmp_path, isr=(1, 2))
    part.append_as_leader(batch(1), -1)  # epoch 5, offset 0
    part.append_as_leader(batch(2), -1)  # epoch 5, offsets 1..2
    part.update_state(PartitionState(0, [1, 2, 3], 2, 6, [1, 2], 1, 8))  # following 2
    part.truncate_to(1)
    part.update_state(PartitionState(0, [1, 2, 3], 1, 7, [1, 2], 1, 9))  # leading again
    part.append_as_leader(batch(4), -1)  # other records at 1..4
    part.update_follower(2, 5)
    assert part.log.high_watermark == 5
    assert part.check_enough_replicas_reach_offset(3, 5) == (True, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert part.check_enough_replicas_reach_offset(1, 5) == (True, ErrorCode.NONE)  # what survived


def test_holds_tells_whether_a_batch_survived_a_change_of_leadership(tmp_path):
    part, _, _ = leader(tmp_path, isr=(1,))
    part.append_as_leader(batch(1), -1)  # epoch 5, offset 0
    part.append_as_leader(batch(3), -1)  # epoch 5, offsets 1..3
    assert part.holds(5, 4)
    part.update_state(PartitionState(0, [1, 2, 3], 1, 6, [1], 1, 8))  # a new epoch, still leading
    assert part.holds(5, 4) and not part.holds(4, 1)
    part.update_state(PartitionState(0, [1, 2, 3], 2, 7, [2], 1, 9))  # following 2
    part.truncate_to(1)
    part.update_state(PartitionState(0, [1, 2, 3], 1, 8, [1], 1, 10))  # leading again
    part.append_as_leader(batch(5), -1)
    assert part.log.high_watermark == 6
    assert not part.holds(5, 4) and part.holds(5, 1)


def test_a_former_leader_that_appended_nothing_in_its_epoch_does_not_diverge_after_truncating(tmp_path):
    # A led epoch 7 without appending (its cache ends with (7, 4)), B leads 8 and never
    # saw epoch 7: A's truncation to its own log end must drop (7, 4), else every fetch
    # naming epoch 7 diverges at B (Kafka's UnifiedLog.truncateTo does the same)
    src = Log.load(str(tmp_path / "src"), TP, log_config(tmp_path))
    src.leader_epochs.assign(1, 0)
    src.append_as_leader(batch(4), 1)
    data = src.read_bytes(0, 1 << 20, 4)
    b_log = Log.load(str(tmp_path / "b"), TP, log_config(tmp_path))
    b_log.append_as_follower(data)
    b = Partition(TP, b_log, PartitionState(0, [1, 2], 2, 8, [1, 2], 1, 9), 2, Recorder())
    a_log = Log.load(str(tmp_path / "a"), TP, log_config(tmp_path))
    a_log.append_as_follower(data)
    a = Partition(TP, a_log, PartitionState(0, [1, 2], 1, 7, [1, 2], 1, 8), 1, Recorder())
    a.update_state(PartitionState(0, [1, 2], 2, 8, [1, 2], 1, 9))
    assert a_log.leader_epochs.entries == [(1, 0), (7, 4)] and b_log.leader_epochs.entries == [(1, 0), (8, 4)]
    assert b.diverging_epoch(4, a_log.leader_epochs.latest_epoch) == (1, 4)
    # OffsetForLeaderEpoch(7) at B: epoch 1 ends at 4; A truncates to min(4, its end of 1) = 4
    a.truncate_to(4)
    assert a_log.leader_epochs.entries == [(1, 0)]
    assert b.diverging_epoch(4, a_log.leader_epochs.latest_epoch) is None


# ---------------------------------------------------------------- a full disk at a leadership change


def test_a_replica_becomes_leader_whole_when_its_epoch_checkpoint_cannot_be_written(tmp_path, monkeypatch):
    # found by the long fault run: a full disk made the epoch checkpoint's write raise in
    # the middle of becoming leader, the LeaderAndIsr was answered KAFKA_STORAGE_ERROR, the
    # group coordinator never loaded its partition and offset fetches timed out for good
    import errno

    from broker.log.checkpoints import LeaderEpochCheckpoint
    from broker.log.log import LogStorageError

    real = LeaderEpochCheckpoint.write
    full = [True]

    def write(self, entries, fsync=True):
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, entries, fsync=fsync)

    part, _ = make(tmp_path, leader=2)
    part.log.append_as_follower(batch(3, partition_leader_epoch=0))
    monkeypatch.setattr(LeaderEpochCheckpoint, "write", write)
    part.update_state(PartitionState(0, [1, 2, 3], 1, 1, [1, 2, 3]))  # now it leads, epoch 1
    assert part.is_leader and set(part.followers) == {2, 3} and part.leader_epoch_start_offset == 3
    assert part.log.leader_epochs.entries[-1] == (1, 3) and part.log.dir_health.error is not None
    # no record of epoch 1 reaches the disk before epoch 1 does
    with pytest.raises(LogStorageError):
        part.append_as_leader(batch(2), 1)
    assert part.log.log_end_offset == 3
    full[0] = False  # space again: the next append stores the epoch first
    part.append_as_leader(batch(2), 1)
    assert part.log.log_end_offset == 5 and part.log.dir_health.error is None
    assert LeaderEpochCheckpoint(str(tmp_path / "t-0" / "leader-epoch-checkpoint")).read() == [(0, 0), (1, 3)]


def test_a_reassignment_s_replica_set_is_the_leaders(tmp_path):
    """During a reassignment the leader's replicas are RS (target ++ original): a new
    replica's fetches count, it does not hold the high watermark back until it joins the
    ISR, and joins it once caught up; once the removed replica is gone from the replica
    set its fetches prove nothing."""
    part, clock, asked = leader(tmp_path)
    part.append_as_leader(batch(6), 1)
    part.update_follower(2, 6)
    part.update_follower(3, 6)
    assert part.log.high_watermark == 6
    # the controller starts moving 3 to 4: RS = [1, 2, 4, 3], a new leader epoch
    part.update_state(PartitionState(0, [1, 2, 4, 3], 1, 6, [1, 2, 3], 1, 8))
    part.check_follower(4)  # the new replica may fetch
    part.append_as_leader(batch(2), 1)
    part.update_follower(2, 8)
    part.update_follower(3, 8)
    part.update_follower(4, 0)
    assert part.log.high_watermark == 8  # 4 is not in the ISR: not waited for
    assert asked == []
    part.update_follower(4, 8)
    assert asked == [[1, 2, 3, 4]]  # caught up: the leader asks to add it
    part.isr_change_completed(part.pending_isr, 0, 6, [1, 2, 3, 4], 9)
    # the reassignment finishes: replicas [1, 2, 4], 3 out of the ISR, a new leader epoch
    part.update_state(PartitionState(0, [1, 2, 4], 1, 7, [1, 2, 4], 1, 10))
    assert set(part.followers) == {2, 4}
    with pytest.raises(KafkaProtocolError):
        part.check_follower(3)
    assert not part.update_follower(3, 8)
