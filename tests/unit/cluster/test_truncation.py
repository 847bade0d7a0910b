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


@pytest.mark.parametrize(
    "ours, our_end, hw, theirs, their_end, expected",
    [
        # same history: nothing to cut
        ([(0, 0), (1, 50)], 80, 80, [(0, 0), (1, 50)], 80, 80),
        # we led epoch 1 and wrote 50..79 that nobody copied; the new leader's epoch 2 began at 50
        ([(0, 0), (1, 50)], 80, 50, [(0, 0), (2, 50)], 90, 50),
        # we are behind in the same epoch: keep everything
        ([(0, 0), (1, 50)], 60, 60, [(0, 0), (1, 50)], 90, 60),
        # epoch 1 ended earlier on the leader (it was cut at 70 by the next leader)
        ([(0, 0), (1, 50)], 80, 60, [(0, 0), (1, 50), (3, 70)], 95, 70),
    ],
)
def test_truncation_point_tables(tmp_path, ours, our_end, hw, theirs, their_end, expected):
    our = cache(tmp_path, "ours", ours)
    their = cache(tmp_path, "theirs", theirs)
    for _round in range(len(ours) + 1):  # each round asks about a lower epoch
        asked = our.latest_epoch
        leader_epoch, leader_end = answer(their, asked, their_end)
        offset, done = truncation_point(our, our_end, hw, asked, leader_epoch, leader_end)
        our.truncate_from_end(offset)  # the fetcher truncates the log (and its epochs)
        our_end = min(our_end, offset)
        if done:
            break
    assert done and our_end == expected


def test_a_leader_without_the_epoch_keeps_only_what_is_committed(tmp_path):
    our = cache(tmp_path, "ours", [(5, 0)])
    assert truncation_point(our, 40, 30, 5, -1, -1) == (30, True)


def test_an_answer_naming_an_epoch_we_lack_truncates_to_our_older_epoch_and_asks_again(tmp_path):
    # ours: epochs 0 and 2; the leader answers for epoch 1, which we never had: cut where
    # our epoch 0 ends (40) and ask about epoch 0 next round (Kafka's intermediate truncation)
    our = cache(tmp_path, "ours", [(0, 0), (2, 40)])
    assert truncation_point(our, 60, 20, 2, 1, 45) == (40, False)


def test_an_answer_above_the_epoch_asked_keeps_only_what_is_committed(tmp_path):
    # a confused leader naming an epoch above the one asked would make the rounds loop:
    # keep what is committed and stop
    our = cache(tmp_path, "ours", [(0, 0), (2, 40)])
    assert truncation_point(our, 60, 20, 2, 3, 70) == (20, True)


def test_rounds_end_with_many_epochs_each_unknown_to_the_other(tmp_path):
    # ours the even epochs, the leader's the odd ones (each from offset 10 * epoch):
    # 20 rounds, each about a lower epoch, ending where epoch 0 ends on the leader
    our = cache(tmp_path, "ours", [(0, 0)] + [(e, 10 * e) for e in range(2, 41, 2)])
    their = cache(tmp_path, "theirs", [(0, 0)] + [(e, 10 * e) for e in range(1, 40, 2)] + [(41, 400)])
    end, rounds, done = 410, 0, False
    while not done:
        rounds += 1
        assert rounds <= 21
        asked = our.latest_epoch
        offset, done = truncation_point(our, end, 0, asked, *answer(their, asked, 400))
        our.truncate_from_end(offset)
        end = min(end, offset)
        assert done or our.latest_epoch < asked
    assert end == 10 and rounds == 21
