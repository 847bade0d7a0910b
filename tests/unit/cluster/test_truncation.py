"""Where a follower truncates when it starts following (KIP-101/279), on real leader
epoch caches: tables of histories a former leader and a new leader can have."""
import pytest

from broker.cluster.replica.fetcher import truncation_point
from broker.log.log import LeaderEpochCache


def cache(tmp_path, name, entries):
    c = LeaderEpochCache(str(tmp_path / name))
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


def answer(leader, asked_epoch, leader_end):
    """The leader's OffsetForLeaderEpoch answer (its handler calls the same method)."""
    return leader.end_offset_for(asked_epoch, leader_end)


@pytest.mark.parametrize("ours, our_end, hw, theirs, their_end, expected", [
    # same history: nothing to cut
    ([(0, 0), (1, 50)], 80, 80, [(0, 0), (1, 50)], 80, 80),
    # we led epoch 1 and wrote 50..79 that nobody copied; the new leader's epoch 2 began at 50
    ([(0, 0), (1, 50)], 80, 50, [(0, 0), (2, 50)], 90, 50),
    # we are behind in the same epoch: keep everything
    ([(0, 0), (1, 50)], 60, 60, [(0, 0), (1, 50)], 90, 60),
    # epoch 1 ended earlier on the leader (it was cut at 70 by the next leader)
    ([(0, 0), (1, 50)], 80, 60, [(0, 0), (1, 50), (3, 70)], 95, 70),
])
def test_truncation_point_tables(tmp_path, ours, our_end, hw, theirs, their_end, expected):
    our = cache(tmp_path, "ours", ours)
    their = cache(tmp_path, "theirs", theirs)
    leader_epoch, leader_end = answer(their, our.latest_epoch, their_end)
    offset, again = truncation_point(our, our_end, hw, leader_epoch, leader_end)
    while again is not None:
        leader_epoch, leader_end = answer(their, again, their_end)
        offset, again = truncation_point(our, our_end, hw, leader_epoch, leader_end)
    assert offset == expected


def test_a_leader_without_the_epoch_keeps_only_what_is_committed(tmp_path):
    our = cache(tmp_path, "ours", [(5, 0)])
    assert truncation_point(our, 40, 30, -1, -1) == (30, None)


def test_an_answer_naming_an_epoch_we_lack_asks_again_with_ours(tmp_path):
    # ours: epochs 0 and 2; the leader answers for epoch 1, which we never had
    our = cache(tmp_path, "ours", [(0, 0), (2, 40)])
    offset, again = truncation_point(our, 60, 20, 1, 45)
    assert again == 0 and offset == 40
