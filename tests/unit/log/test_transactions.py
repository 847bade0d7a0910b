"""Transactions at the log: the last stable offset, markers, the aborted-transaction index
(Kafka's .txnindex) and producer snapshots with open transactions, across clean and
unclean restarts, truncation, retention and followers."""

from __future__ import annotations

import os
import struct
import time

import pytest

from broker.log.producer_state import (
    CoordinatorFenced,
    InvalidProducerEpoch,
    InvalidTxnState,
    OutOfOrderSequence,
    ProducerStateManager,
    read_marker,
    snapshot_name,
)
from broker.log.txn_index import ENTRY_SIZE, AbortedTxn, read_txn_index, txn_index_name
from broker.native import iter_batches

from ._support import batch

NOW = int(time.time() * 1000)
P1, P2 = 7001, 7002


def tbatch(seq: int, n: int = 2, pid: int = P1, epoch: int = 0, transactional: bool = True) -> bytearray:
    return batch(n, ts=NOW, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)


def test_lso_stops_at_an_open_transaction_until_its_marker_is_replicated(make_log):
    lg = make_log()
    lg.append_as_leader(batch(3, ts=NOW), 0)  # 0..2 plain
    lg.append_as_leader(tbatch(0), 0)  # 3..4 txn of P1
    lg.append_as_leader(batch(1, ts=NOW), 0)  # 5 plain
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.high_watermark == 6 and lg.last_stable_offset == 3
    info = lg.append_marker_as_leader(P1, 0, coordinator_epoch=1, commit=True, leader_epoch=0)
    assert info.base_offset == 6 and lg.log_end_offset == 7
    # the marker is not below the high watermark yet: still unstable
    assert lg.last_stable_offset == 3
    lg.update_high_watermark(7)
    assert lg.last_stable_offset == 7
    assert lg.collect_aborted(0, 7) == []
    marker = [b for b in iter_batches(lg.read_bytes(6, 1000, 7))][0]
    assert marker.is_control and marker.is_transactional and marker.producer_id == P1
    assert read_marker(marker) == (True, 1)


def test_an_abort_is_indexed_in_kafkas_format(make_log, tmp_path):
    lg = make_log()
    lg.append_as_leader(tbatch(0, pid=P1), 0)  # 0..1 P1
    lg.append_as_leader(tbatch(0, pid=P2), 0)  # 2..3 P2
    lg.append_as_leader(tbatch(2, pid=P1), 0)  # 4..5 P1
    lg.append_marker_as_leader(P1, 0, 0, commit=False, leader_epoch=0)  # 6: abort P1
    lg.update_high_watermark(lg.log_end_offset)
    # P2 still open at 2: the LSO after P1's abort is P2's first offset
    assert lg.last_stable_offset == 2
    assert lg.collect_aborted(0, 7) == [AbortedTxn(P1, 0, 6, 2)]
    path = tmp_path / "t-0" / txn_index_name(0)
    raw = path.read_bytes()
    assert len(raw) == ENTRY_SIZE == 34
    assert struct.unpack(">hqqqq", raw) == (0, P1, 0, 6, 2)
    lg.append_marker_as_leader(P2, 0, 0, commit=True, leader_epoch=0)  # 7: commit P2
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.last_stable_offset == 8
    # a fetch past the abort's marker does not name it; one before it, or overlapping, does
    assert lg.collect_aborted(7, 8) == []
    assert lg.collect_aborted(5, 8) == [AbortedTxn(P1, 0, 6, 2)]
    assert lg.collect_aborted(0, 0) == []  # its first offset is not below the bound


def test_producer_rules_for_transactions(make_log):
    lg = make_log()
    lg.append_as_leader(tbatch(0, epoch=2), 0)
    # a non-transactional batch while the transaction is open
    with pytest.raises(InvalidTxnState):
        lg.append_as_leader(tbatch(2, epoch=2, transactional=False), 0)
    # a marker of an older producer epoch (the producer was fenced since)
    with pytest.raises(InvalidProducerEpoch):
        lg.append_marker_as_leader(P1, 1, 0, commit=True, leader_epoch=0)
    lg.append_marker_as_leader(P1, 2, 5, commit=True, leader_epoch=0)
    # an older coordinator epoch than the last marker's
    with pytest.raises(CoordinatorFenced):
        lg.append_marker_as_leader(P1, 2, 4, commit=False, leader_epoch=0)
    # after the commit, plain idempotent batches are fine again
    lg.append_as_leader(tbatch(2, epoch=2, transactional=False), 0)
    # a marker that bumps the epoch (transaction.version 2): a new epoch starts at sequence 0
    lg.append_as_leader(tbatch(4, epoch=2), 0)
    lg.append_marker_as_leader(P1, 3, 5, commit=False, leader_epoch=0)
    lg.append_as_leader(tbatch(0, epoch=3), 0)
    assert lg.producer_state.producers[P1].epoch == 3


@pytest.mark.parametrize("clean", [True, False])
def test_open_transactions_and_the_index_survive_a_restart(make_log, tmp_path, clean):
    d = tmp_path / "t-0"
    lg = make_log(directory=d, overrides={"segment.bytes": 400})
    lg.append_as_leader(tbatch(0, pid=P1), 0)  # 0..1 P1, open
    lg.append_as_leader(tbatch(0, pid=P2), 0)  # 2..3 P2
    lg.append_marker_as_leader(P2, 0, 0, commit=False, leader_epoch=0)  # 4: abort P2
    for _ in range(6):  # rolls segments
        lg.append_as_leader(batch(2, ts=NOW, value_size=60), 0)
    assert len(lg.segments) > 1
    hw = lg.log_end_offset
    lg.update_high_watermark(hw)
    assert lg.last_stable_offset == 0
    before = lg.collect_aborted(0, hw)
    assert before == [AbortedTxn(P2, 2, 4, 0)]
    if clean:
        lg.producer_state.take_snapshot(lg.log_end_offset)
    lg.close()
    if not clean:
        # a crash lost every snapshot and the index: both are rebuilt from the log
        for name in os.listdir(d):
            if name.endswith((".snapshot", ".txnindex")):
                os.unlink(d / name)
    lg2 = make_log(
        directory=d, overrides={"segment.bytes": 400}, high_watermark=hw, clean_shutdown=clean, recovery_point=0
    )
    assert lg2.last_stable_offset == 0
    assert lg2.collect_aborted(0, hw) == before
    assert lg2.producer_state.has_open_transaction(P1)
    lg2.append_marker_as_leader(P1, 0, 0, commit=True, leader_epoch=0)
    lg2.update_high_watermark(lg2.log_end_offset)
    assert lg2.last_stable_offset == lg2.log_end_offset


def test_snapshot_entries_carry_the_open_transaction(make_log, tmp_path):
    lg = make_log()
    lg.append_as_leader(batch(1, ts=NOW), 0)
    lg.append_as_leader(tbatch(0), 0)  # 1..2
    lg.append_marker_as_leader(P2, 4, 9, commit=False, leader_epoch=0)  # a marker without data
    path = lg.producer_state.take_snapshot(lg.log_end_offset)
    entries = {e[0]: e for e in ProducerStateManager.read_snapshot(path)}
    pid, epoch, last_seq, last_offset, _delta, _ts, coord, txn_first = entries[P1]
    assert (epoch, last_seq, last_offset, txn_first) == (0, 1, 2, 1)
    assert entries[P2][1] == 4 and entries[P2][6] == 9 and entries[P2][7] == -1 and entries[P2][2] == -1
    assert os.path.basename(path) == snapshot_name(4)
    # an aborted transaction without data is indexed at the marker itself
    assert lg.collect_aborted(0, 10) == [AbortedTxn(P2, 3, 3, 1)]


def test_truncation_drops_the_entries_past_the_new_end(make_log, tmp_path):
    lg = make_log()
    lg.append_as_leader(tbatch(0), 0)  # 0..1
    lg.append_marker_as_leader(P1, 0, 0, commit=False, leader_epoch=0)  # 2
    lg.append_as_leader(tbatch(0, pid=P2), 0)  # 3..4
    lg.append_marker_as_leader(P2, 0, 0, commit=False, leader_epoch=0)  # 5
    assert len(lg.collect_aborted(0, 6)) == 2
    lg.truncate_to(5)
    assert lg.collect_aborted(0, 6) == [AbortedTxn(P1, 0, 2, 3)]
    assert read_txn_index(str(tmp_path / "t-0" / txn_index_name(0))) == [AbortedTxn(P1, 0, 2, 3)]
    # P2's transaction (from 3) is open again: its marker was cut
    assert lg.producer_state.has_open_transaction(P2)
    lg.truncate_fully_and_start_at(10)
    assert lg.collect_aborted(0, 20) == [] and not lg.producer_state.ongoing
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".txnindex")]


def test_a_follower_builds_the_same_index(make_log, tmp_path):
    leader = make_log(directory=tmp_path / "l")
    leader.append_as_leader(tbatch(0), 0)
    leader.append_marker_as_leader(P1, 0, 3, commit=False, leader_epoch=0)
    leader.append_as_leader(tbatch(0, pid=P2), 0)
    follower = make_log(directory=tmp_path / "f")
    follower.append_as_follower(leader.read_bytes(0, 1 << 20, leader.log_end_offset))
    assert follower.collect_aborted(0, 10) == leader.collect_aborted(0, 10) == [AbortedTxn(P1, 0, 2, 3)]
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.last_stable_offset == 3
    assert follower.producer_state.producers[P1].coordinator_epoch == 3


def test_retention_drops_the_index_of_deleted_segments(make_log, tmp_path):
    lg = make_log(overrides={"segment.bytes": 300, "retention.bytes": 1})
    lg.append_as_leader(tbatch(0), 0)
    lg.append_marker_as_leader(P1, 0, 0, commit=False, leader_epoch=0)
    for _ in range(8):
        lg.append_as_leader(batch(2, ts=NOW, value_size=60), 0)
    lg.update_high_watermark(lg.log_end_offset)
    assert lg.collect_aborted(0, lg.log_end_offset)
    gone = lg.delete_old_segments()
    assert gone and gone[0].base_offset == 0
    assert lg.collect_aborted(0, lg.log_end_offset) == []
    assert not (tmp_path / "t-0" / txn_index_name(0)).exists()


def test_expiry_keeps_producers_with_open_transactions(make_log):
    lg = make_log()
    lg.append_as_leader(tbatch(0, pid=P1), 0)
    lg.append_as_leader(tbatch(0, pid=P2, transactional=False), 0)
    assert lg.producer_state.remove_expired(NOW + 10 * 86_400_000) == 1
    assert set(lg.producer_state.producers) == {P1}


def test_a_verification_guard_is_shared_and_voided_by_a_marker(make_log):
    lg = make_log()
    ps = lg.producer_state
    g1 = ps.start_verification(P1)
    g2 = ps.start_verification(P1)  # a second request in flight meanwhile
    assert g1 is g2 and ps.verified(P1, g1)
    lg.append_marker_as_leader(P1, 0, 0, commit=False, leader_epoch=0)
    assert not ps.verified(P1, g1)  # the transaction ended while verifying
    g3 = ps.start_verification(P1)
    lg.append_as_leader(tbatch(0), 0)  # the transaction opens: the guard is spent
    assert g3 is not g1 and ps.verified(P1, g3) and P1 not in ps.verifying


def test_a_transaction_version_2_marker_starts_its_epoch_at_sequence_0(make_log):
    """KIP-890 part 2: the marker carries the bumped epoch; the producer's next transaction
    runs at it from sequence 0 (Kafka's checkSequence: only a producer with no epoch may
    start anywhere)."""
    lg = make_log()
    lg.append_as_leader(tbatch(0, epoch=4), 0)
    lg.append_as_leader(tbatch(2, epoch=4), 0)
    lg.append_marker_as_leader(P1, 5, coordinator_epoch=1, commit=True, leader_epoch=0)
    with pytest.raises(OutOfOrderSequence, match="must be 0"):
        lg.append_as_leader(tbatch(4, epoch=5), 0)
    lg.append_as_leader(tbatch(0, epoch=5), 0)
    lg.append_as_leader(tbatch(2, epoch=5), 0)
    # a marker at the same epoch (transaction.version 1) changes nothing of the sequences
    lg.append_marker_as_leader(P1, 5, coordinator_epoch=1, commit=True, leader_epoch=0)
    lg.append_as_leader(tbatch(4, epoch=5), 0)


def test_a_transaction_version_2_marker_must_be_above_the_epoch_of_an_open_transaction(make_log):
    """WriteTxnMarkers v2 (KIP-1228): the coordinator bumped the epoch at the end, so a
    transaction.version 2 marker at the producer's own epoch is a late one; it would end
    the transaction that epoch has opened since, and is refused. Without a transaction
    open it is a retry of the marker that completed one, and is written again."""
    lg = make_log()
    lg.append_as_leader(tbatch(0, epoch=4), 0)
    lg.append_marker_as_leader(P1, 5, 1, commit=True, leader_epoch=0, transaction_version=2)
    assert not lg.producer_state.has_open_transaction(P1)
    # the retry of that marker, nothing open: accepted (and closes nothing)
    end = lg.log_end_offset
    lg.append_marker_as_leader(P1, 5, 1, commit=True, leader_epoch=0, transaction_version=2)
    assert lg.log_end_offset == end + 1
    # the next transaction opens at epoch 5; the same late marker must not end it
    lg.append_as_leader(tbatch(0, epoch=5), 0)
    with pytest.raises(InvalidProducerEpoch, match="not above its epoch 5"):
        lg.append_marker_as_leader(P1, 5, 1, commit=False, leader_epoch=0, transaction_version=2)
    assert lg.producer_state.has_open_transaction(P1, 5)
    # transaction.version 1's rule takes a marker at the producer's epoch
    lg.append_marker_as_leader(P1, 5, 1, commit=False, leader_epoch=0)
    assert not lg.producer_state.has_open_transaction(P1)
    # and with either version an older epoch is fenced
    for tv in (0, 2):
        with pytest.raises(InvalidProducerEpoch, match="older than"):
            lg.append_marker_as_leader(P1, 4, 1, commit=True, leader_epoch=0, transaction_version=tv)
