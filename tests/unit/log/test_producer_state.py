"""Idempotent producers at the log: duplicates of the last five batches are answered with
their first offsets and not written again, sequence gaps and fenced epochs are refused,
and the state survives clean and unclean restarts (Kafka's .snapshot files)."""

from __future__ import annotations

import os
import struct
import time

import pytest

from broker.log.producer_state import (
    INT32_MAX,
    CorruptSnapshot,
    InvalidProducerEpoch,
    OutOfOrderSequence,
    ProducerStateManager,
    last_sequence,
    snapshot_name,
)
from broker.native import crc32c

from ._support import batch, read_all

PID = 4000
NOW = int(time.time() * 1000)


def pbatch(seq: int, n: int = 2, pid: int = PID, epoch: int = 0, ts: int = NOW) -> bytearray:
    # timestamps of now: producers idle longer than producer.id.expiration.ms (a day)
    # by their batches' timestamps are forgotten when a log loads
    return batch(n, ts=ts, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_retries_of_the_last_five_batches_are_not_written_again(make_log):
    lg = make_log()
    firsts = [lg.append_as_leader(pbatch(seq), 0) for seq in range(0, 14, 2)]  # 7 batches
    assert [i.base_offset for i in firsts] == list(range(0, 14, 2))
    end = lg.log_end_offset
    for k in range(2, 7):  # the last five: duplicates
        again = lg.append_as_leader(pbatch(2 * k), 0)
        assert again.duplicate and (again.base_offset, again.last_offset) == (2 * k, 2 * k + 1)
    assert lg.log_end_offset == end
    # older than the five remembered: no longer recognised, and out of sequence
    with pytest.raises(OutOfOrderSequence, match="sequence 0 after 13"):
        lg.append_as_leader(pbatch(0), 0)
    assert lg.log_end_offset == end and read_all(lg) == list(range(end))


def test_sequence_gaps_and_fenced_epochs(make_log):
    lg = make_log()
    lg.append_as_leader(pbatch(0, epoch=3), 0)
    with pytest.raises(OutOfOrderSequence, match="expected 2"):
        lg.append_as_leader(pbatch(5, epoch=3), 0)
    with pytest.raises(InvalidProducerEpoch, match="older"):
        lg.append_as_leader(pbatch(2, epoch=2), 0)
    with pytest.raises(OutOfOrderSequence, match="must start at sequence 0"):
        lg.append_as_leader(pbatch(2, epoch=4), 0)
    assert lg.log_end_offset == 2
    # a new epoch from 0 is accepted (a client-side epoch bump); then the old one is fenced
    assert lg.append_as_leader(pbatch(0, epoch=4), 0).base_offset == 2
    with pytest.raises(InvalidProducerEpoch):
        lg.append_as_leader(pbatch(2, epoch=3), 0)
    # a producer never seen may start at any sequence (its state may have expired)
    assert lg.append_as_leader(pbatch(77, pid=PID + 1), 0).base_offset == 4
    # producers are independent, and batches without a producer id are not tracked
    assert lg.append_as_leader(batch(3), 0).base_offset == 6
    assert lg.append_as_leader(pbatch(2, epoch=4), 0).base_offset == 9
    assert sorted(lg.producer_state.producers) == [PID, PID + 1]


def test_several_batches_of_one_producer_in_one_request(make_log):
    lg = make_log()
    info = lg.append_as_leader(pbatch(0) + pbatch(2) + pbatch(4), 0)
    assert (info.base_offset, info.last_offset) == (0, 5)
    # a gap inside the request refuses all of it
    with pytest.raises(OutOfOrderSequence):
        lg.append_as_leader(pbatch(6) + pbatch(9), 0)
    assert lg.log_end_offset == 6
    # a retried request: its first batch is a duplicate, nothing is written
    again = lg.append_as_leader(pbatch(2) + pbatch(4), 0)
    assert again.duplicate and again.base_offset == 2 and lg.log_end_offset == 6


def test_sequences_wrap_at_int32_max(make_log):
    lg = make_log()
    assert last_sequence(INT32_MAX - 1, 3) == 1
    lg.append_as_leader(pbatch(INT32_MAX - 1, n=2, pid=9), 0)
    assert lg.append_as_leader(pbatch(0, n=2, pid=9), 0).base_offset == 2
    lg.append_as_leader(pbatch(2, n=1, pid=9), 0)
    assert lg.append_as_leader(pbatch(0, n=2, pid=9), 0).duplicate


@pytest.mark.parametrize("clean", [True, False])
def test_state_survives_a_restart(make_log, tmp_path, clean):
    d = tmp_path / "t-0"
    lg = make_log(directory=d, overrides={"segment.bytes": 600})
    for seq in range(0, 40, 2):  # several rolls: snapshots at each
        lg.append_as_leader(pbatch(seq, pid=PID), 0)
    lg.append_as_leader(pbatch(0, pid=PID + 1, epoch=2), 0)
    assert len(lg.segments) > 3
    snaps = lg.producer_state.snapshot_offsets()
    assert 1 <= len(snaps) <= 2 and all(s in [seg.base_offset for seg in lg.segments] for s in snaps)
    end = lg.log_end_offset
    if clean:
        lg.flush()
        lg.producer_state.take_snapshot(end)
    lg.close()
    lg2 = make_log(directory=d, overrides={"segment.bytes": 600}, clean_shutdown=clean)
    assert lg2.log_end_offset == end
    # the last batch of each producer is remembered: its retry is a duplicate
    assert lg2.append_as_leader(pbatch(38, pid=PID), 0).duplicate
    assert lg2.append_as_leader(pbatch(0, pid=PID + 1, epoch=2), 0).duplicate
    with pytest.raises(OutOfOrderSequence):
        lg2.append_as_leader(pbatch(41, pid=PID), 0)
    with pytest.raises(InvalidProducerEpoch):
        lg2.append_as_leader(pbatch(2, pid=PID + 1, epoch=1), 0)
    assert lg2.append_as_leader(pbatch(40, pid=PID), 0).base_offset == end


def test_unclean_restart_replays_after_the_snapshot(make_log, tmp_path):
    # batches after the last snapshot (no roll since) are rebuilt from the log itself
    d = tmp_path / "t-0"
    lg = make_log(directory=d)
    for seq in range(0, 10, 2):
        lg.append_as_leader(pbatch(seq), 0)
    assert lg.producer_state.snapshot_offsets() == []
    lg.close()
    lg2 = make_log(directory=d, clean_shutdown=False)
    assert lg2.producer_state.producers[PID].last_seq == 9
    assert lg2.append_as_leader(pbatch(8), 0).duplicate
    assert lg2.append_as_leader(pbatch(10), 0).base_offset == 10


def test_truncation_forgets_the_cut_batches(make_log):
    lg = make_log()
    for seq in range(0, 8, 2):
        lg.append_as_leader(pbatch(seq), 0)
    lg.truncate_to(4)
    assert lg.producer_state.producers[PID].last_seq == 3
    assert lg.append_as_leader(pbatch(4), 0).base_offset == 4


def test_expiry(make_log):
    lg = make_log(broker={"producer_id_expiration_ms": 1000})
    lg.append_as_leader(pbatch(0, ts=5_000), 0)
    assert lg.producer_state.remove_expired(5_500) == 0
    assert lg.producer_state.remove_expired(6_001) == 1  # the batch's max timestamp is 5001
    # forgotten: any sequence is accepted again
    assert lg.append_as_leader(pbatch(50, ts=7_000), 0).base_offset == 2


def test_snapshot_file_is_kafkas_format(tmp_path):
    m = ProducerStateManager(str(tmp_path), "t-0")
    m._apply(PID, 3, 10, 4, 100, 123456)
    path = m.take_snapshot(105)
    assert os.path.basename(path) == snapshot_name(105) == "00000000000000000105.snapshot"
    data = open(path, "rb").read()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 1) and crc == crc32c(data[6:])
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (PID, 3, 14, 104, 4, 123456, -1, -1)
    assert ProducerStateManager.read_snapshot(path) == [(PID, 3, 14, 104, 4, 123456, -1, -1)]


@pytest.mark.parametrize(
    "damage, where",
    [
        (lambda d: d[:4], "byte 0"),
        (lambda d: b"\x00\x07" + d[2:], "version 7 at byte 0"),
        (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "at byte 2"),
        (lambda d: d + b"\x00", "at byte 2"),
    ],
)
def test_corrupt_snapshots_are_named_and_skipped(make_log, tmp_path, damage, where):
    d = tmp_path / "t-0"
    lg = make_log(directory=d)
    lg.append_as_leader(pbatch(0), 0)
    path = lg.producer_state.take_snapshot(lg.log_end_offset)
    lg.close()
    raw = open(path, "rb").read()
    open(path, "wb").write(damage(raw))
    with pytest.raises(CorruptSnapshot, match=where):
        ProducerStateManager.read_snapshot(path)
    # the log still opens: the bad snapshot is deleted and the state rebuilt from the log
    lg2 = make_log(directory=d, clean_shutdown=True)
    assert not os.path.exists(path)
    assert lg2.append_as_leader(pbatch(0), 0).duplicate
