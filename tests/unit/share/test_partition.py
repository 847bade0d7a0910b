"""SharePartition: the in-flight window of a share group on one partition, in ranges,
checked case by case and against a per-offset model under random operations."""

from __future__ import annotations

import os
import random

import pytest

from broker.protocol.errors import ErrorCode
from broker.share.partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    REJECT,
    RELEASE,
    RENEW,
    AcknowledgeError,
    SharePartition,
)


def _sp(**kw: int) -> SharePartition:
    return SharePartition(0, lock_ms=kw.pop("lock_ms", 1000), **kw)


def test_acquire_new_batches_then_accept_moves_the_start():
    sp = _sp()
    assert sp.acquire("a", [(0, 4), (5, 9)], now=0) == [(0, 9, 1)]
    assert (sp.start, sp.end, sp.acquired) == (0, 10, 10)
    sp.acknowledge("a", [(0, 3, [ACCEPT])], now=1)
    assert sp.start == 4
    assert sp.ranges() == [(4, 9, ACQUIRED, 1, "a")]
    sp.acknowledge("a", [(4, 9, [ACCEPT])], now=1)
    assert (sp.start, sp.end, sp.ranges()) == (10, 10, [])


def test_two_members_share_a_partition_and_cannot_acknowledge_each_others():
    sp = _sp()
    assert sp.acquire("a", [(0, 4)], now=0) == [(0, 4, 1)]
    assert sp.next_fetch_offset() == 5
    assert sp.acquire("b", [(5, 9)], now=0) == [(5, 9, 1)]
    with pytest.raises(AcknowledgeError) as e:
        sp.acknowledge("a", [(3, 6, [ACCEPT])], now=1)
    assert e.value.code == ErrorCode.INVALID_RECORD_STATE
    # all or nothing: 3..4 still acquired by a
    assert sp.ranges()[0] == (0, 4, ACQUIRED, 1, "a")


def test_acknowledging_twice_or_never_fetched():
    sp = _sp()
    sp.acquire("a", [(0, 9)], now=0)
    sp.acknowledge("a", [(2, 2, [ACCEPT])], now=1)
    # already acknowledged: INVALID_RECORD_STATE; past what was delivered: INVALID_REQUEST
    for bad, code in [
        ((2, 2), ErrorCode.INVALID_RECORD_STATE),
        ((10, 12), ErrorCode.INVALID_REQUEST),
        ((9, 10), ErrorCode.INVALID_REQUEST),
    ]:
        with pytest.raises(AcknowledgeError) as e:
            sp.acknowledge("a", [(bad[0], bad[1], [ACCEPT])], now=1)
        assert e.value.code == code, bad
    sp.acknowledge("a", [(0, 1, [ACCEPT])], now=1)
    assert sp.start == 3
    with pytest.raises(AcknowledgeError) as e:  # wholly below the start: done long ago
        sp.acknowledge("a", [(0, 1, [ACCEPT])], now=1)
    assert e.value.code == ErrorCode.INVALID_RECORD_STATE
    # a run reaching into the window: what is below the start is skipped
    sp.acknowledge("a", [(1, 4, [ACCEPT])], now=1)
    assert sp.start == 5


def test_malformed_acknowledgements_are_invalid_request():
    sp = _sp()
    sp.acquire("a", [(0, 9)], now=0)
    for batch in [(5, 4, [ACCEPT]), (0, 3, [ACCEPT, ACCEPT]), (0, 0, [7])]:
        with pytest.raises(AcknowledgeError) as e:
            sp.acknowledge("a", [batch], now=1)
        assert e.value.code == ErrorCode.INVALID_REQUEST


def test_per_offset_types_release_redelivers_with_count_two():
    sp = _sp()
    sp.acquire("a", [(0, 5)], now=0)
    sp.acknowledge("a", [(0, 5, [ACCEPT, RELEASE, ACCEPT, REJECT, GAP, RELEASE])], now=1)
    assert sp.start == 1
    assert sp.ranges() == [
        (1, 1, AVAILABLE, 1, ""),
        (2, 2, ACKNOWLEDGED, 1, ""),
        (3, 4, ARCHIVED, 1, ""),
        (5, 5, AVAILABLE, 1, ""),
    ]
    assert sp.next_fetch_offset() == 1
    # the re-fetch reads from 1: both released records again, delivery count 2
    assert sp.acquire("b", [(0, 5)], now=2) == [(1, 1, 2), (5, 5, 2)]


def test_lock_expiry_releases_and_the_delivery_limit_archives():
    sp = _sp(delivery_limit=2, lock_ms=100)
    sp.acquire("a", [(0, 2)], now=0)
    assert sp.expire(50) == 100
    assert sp.expire(100) is None
    assert sp.ranges() == [(0, 2, AVAILABLE, 1, "")]
    assert sp.acquire("b", [(0, 2)], now=200) == [(0, 2, 2)]
    sp.acknowledge("b", [(1, 1, [ACCEPT])], now=210)
    sp.expire(300)  # 0 and 2 delivered twice: archived, not delivered again
    assert (sp.start, sp.end, sp.ranges()) == (3, 3, [])


def test_renew_extends_the_lock():
    sp = _sp(lock_ms=100)
    sp.acquire("a", [(0, 2)], now=0)
    sp.acknowledge("a", [(0, 2, [RENEW])], now=90)
    assert sp.expire(150) == 190
    assert sp.ranges() == [(0, 2, ACQUIRED, 1, "a")]
    sp.acknowledge("a", [(0, 2, [ACCEPT])], now=160)
    assert sp.start == 3


def test_the_in_flight_cap_stops_new_records_at_a_batch_boundary():
    sp = _sp(max_locks=10)
    assert sp.acquire("a", [(0, 5), (6, 11), (12, 15)], now=0) == [(0, 11, 1)]
    assert not sp.can_acquire()
    assert sp.acquire("b", [(12, 15)], now=0) == []
    sp.acknowledge("a", [(0, 5, [ACCEPT])], now=1)
    assert sp.can_acquire()
    assert sp.acquire("b", [(12, 15)], now=0) == [(12, 15, 1)]


def test_max_records_and_a_member_leaving():
    sp = _sp()
    assert sp.acquire("a", [(0, 2), (3, 5), (6, 8)], now=0, max_records=4) == [(0, 5, 1)]
    assert sp.release_member("a") == 6
    assert sp.acquire("b", [(0, 2), (3, 5)], now=1, max_records=2) == [(0, 1, 2)]
    assert sp.ranges()[0] == (0, 1, ACQUIRED, 2, "b")


def test_persisted_form_and_load():
    sp = _sp()
    sp.acquire("a", [(0, 9)], now=0)
    sp.acknowledge("a", [(0, 9, [ACCEPT, ACCEPT, RELEASE, ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT, ACCEPT])], 1)
    batches = sp.state_batches()
    assert batches == [(2, 2, AVAILABLE, 1), (3, 9, ACKNOWLEDGED, 1)]
    other = _sp()
    other.load(sp.start, batches)
    assert (other.start, other.end) == (2, 10)
    assert other.acquire("b", [(0, 9)], now=5) == [(2, 2, 2)]
    # a gap between batches read back is available, never delivered
    third = _sp()
    third.load(5, [(8, 9, ARCHIVED, 3)])
    assert third.ranges() == [(5, 7, AVAILABLE, 0, ""), (8, 9, ARCHIVED, 3, "")]


def test_a_hole_in_the_log_and_the_start_moving_with_it():
    sp = _sp()
    sp.acquire("a", [(0, 4)], now=0)
    # the log's records 5..19 were deleted: the next batch read starts at 20
    assert sp.acquire("a", [(20, 24)], now=0) == [(20, 24, 1)]
    assert sp.ranges()[1] == (5, 19, ARCHIVED, 0, "")
    sp.move_start(22)
    assert (sp.start, sp.acquired) == (22, 3)
    sp.acknowledge("a", [(22, 24, [ACCEPT])], now=1)
    assert (sp.start, sp.end) == (25, 25)


# ---------------------------------------------------------------------- against a model


class Model:
    """Per-offset state: offset -> [state, count, member, deadline]."""

    def __init__(self, lock_ms: int, limit: int, max_locks: int) -> None:
        self.lock_ms, self.limit, self.max_locks = lock_ms, limit, max_locks
        self.start = self.end = 0
        self.o: dict[int, list] = {}

    def advance(self) -> None:
        while self.start < self.end and self.o[self.start][0] in (ACKNOWLEDGED, ARCHIVED):
            del self.o[self.start]
            self.start += 1

    def acquire(self, member, batches, now, max_records, whole):
        out = []
        lo, hi = max(batches[0][0], self.start), batches[-1][1]
        left = max_records
        for off in range(lo, min(hi, self.end - 1) + 1):
            if left <= 0:
                break
            s = self.o[off]
            if s[0] == AVAILABLE:
                s[:] = [ACQUIRED, s[1] + 1, member, now + self.lock_ms]
                out.append((off, s[1]))
                left -= 1
        if hi >= self.end and left > 0 and self.end - self.start < self.max_locks:
            last = self.end - 1
            started = False
            for base, blast in batches:
                if blast <= last:
                    continue
                if left <= 0 or last - self.start + 1 >= self.max_locks:
                    break
                if not started:
                    started = True
                    for off in range(last + 1, max(base, last + 1)):
                        self.o[off] = [ARCHIVED, 0, "", 0]
                    last = max(base, last + 1) - 1
                top = blast if whole else min(blast, last + left)
                for off in range(last + 1, top + 1):
                    self.o[off] = [ACQUIRED, 1, member, now + self.lock_ms]
                    out.append((off, 1))
                left -= top - last
                last = top
            self.end = last + 1
        self.advance()
        return out

    def acknowledge(self, member, first, last, t, now):
        if last >= self.end:
            return ErrorCode.INVALID_REQUEST
        if last < self.start:
            return ErrorCode.INVALID_RECORD_STATE
        first = max(first, self.start)
        for off in range(first, last + 1):
            s = self.o.get(off)
            if s is None or s[0] != ACQUIRED or s[2] != member:
                return ErrorCode.INVALID_RECORD_STATE
        for off in range(first, last + 1):
            s = self.o[off]
            if t == RENEW:
                s[3] = now + self.lock_ms
            elif t == ACCEPT:
                s[:] = [ACKNOWLEDGED, s[1], "", 0]
            elif t == RELEASE:
                s[:] = [ARCHIVED if s[1] >= self.limit else AVAILABLE, s[1], "", 0]
            else:
                s[:] = [ARCHIVED, s[1], "", 0]
        self.advance()
        return 0

    def expire(self, now):
        for s in self.o.values():
            if s[0] == ACQUIRED and s[3] <= now:
                s[:] = [ARCHIVED if s[1] >= self.limit else AVAILABLE, s[1], "", 0]
        self.advance()

    def release_member(self, member):
        for s in self.o.values():
            if s[0] == ACQUIRED and s[2] == member:
                s[:] = [ARCHIVED if s[1] >= self.limit else AVAILABLE, s[1], "", 0]
        self.advance()


def _expand(runs):
    return [(off, n) for first, last, n in runs for off in range(first, last + 1)]


def _flat(sp: SharePartition):
    out = {}
    for first, last, state, count, member in sp.ranges():
        for off in range(first, last + 1):
            out[off] = (state, count, member)
    return out


@pytest.mark.parametrize("run", range(4))
def test_random_operations_against_a_per_offset_model(run):
    seed = int(os.environ.get("SHARE_FUZZ_SEED", random.randrange(1 << 30))) + run
    print(f"seed {seed} (SHARE_FUZZ_SEED={seed - run} runs it again)")
    rnd = random.Random(seed)
    lock_ms, limit, max_locks = rnd.choice([50, 200]), rnd.randint(1, 4), rnd.choice([5, 40, 1000])
    sp = SharePartition(0, lock_ms=lock_ms, delivery_limit=limit, max_locks=max_locks)
    m = Model(lock_ms, limit, max_locks)
    log_end = 0
    now = 0
    members = ["a", "b", "c"]
    for step in range(1500):
        now += rnd.randint(0, 30)
        op = rnd.random()
        if op < 0.15:
            log_end += rnd.randint(1, 8)  # a batch appended
        elif op < 0.45:
            # a fetch: batches from the next fetch offset, as the log would hand them out
            off = sp.next_fetch_offset()
            assert off == min([o for o, s in m.o.items() if s[0] == AVAILABLE], default=m.end), seed
            batches = []
            b = max(off - rnd.randint(0, 2), sp.start)
            while b < log_end and len(batches) < 4:
                e = min(b + rnd.randint(0, 5), log_end - 1)
                batches.append((b, e))
                b = e + 1
            if batches:
                who, mr, whole = rnd.choice(members), rnd.choice([1, 3, 100]), rnd.random() < 0.7
                got = sp.acquire(who, batches, now, mr, whole_batches=whole)
                assert _expand(got) == m.acquire(who, batches, now, mr, whole), (seed, step)
        elif op < 0.8:
            who = rnd.choice(members)
            first = rnd.randint(max(m.start - 2, 0), m.end + 1)
            last = first + rnd.randint(0, 6)
            t = rnd.choice([ACCEPT, ACCEPT, RELEASE, REJECT, RENEW, GAP])
            try:
                sp.acknowledge(who, [(first, last, [t])], now)
                code = 0
            except AcknowledgeError as e:
                code = e.code
            assert code == m.acknowledge(who, first, last, t, now), (seed, step)
        elif op < 0.95:
            sp.expire(now)
            m.expire(now)
        else:
            who = rnd.choice(members)
            sp.release_member(who)
            m.release_member(who)
        assert (sp.start, sp.end) == (m.start, m.end), (seed, step)
        assert _flat(sp) == {o: tuple(s[:3]) for o, s in m.o.items()}, (seed, step)
        assert sp.acquired == sum(1 for s in m.o.values() if s[0] == ACQUIRED), (seed, step)
        rs = sp.ranges()
        for a, b in zip(rs, rs[1:]):
            assert a[1] + 1 == b[0], (seed, step)
