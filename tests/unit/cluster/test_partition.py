"""Partition (leadership, ISR, high watermark) on a real Log, with a recording listener."""
from broker.cluster.metadata import PartitionState
from broker.cluster.replica.partition import Partition
from broker.log.log import Log
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
    assert part.log.high_watermark == 0            # replica 3 has nothing yet
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
