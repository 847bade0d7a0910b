"""The transaction coordinator while a transaction's markers are slow (issue 34, item 1):
EndTxn is answered once PrepareCommit / PrepareAbort is written, and the markers follow;
every request of the producer that arrives before they are all written (the coordinator
holds it at most CONCURRENT_WAIT_S, 1 s) is answered CONCURRENT_TRANSACTIONS, which every
client retries — never PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING or INVALID_TXN_STATE,
which are fatal for it (Kafka's KAFKA-18464). Once the markers are written, the same
requests succeed.

The marker sender here answers each WriteTxnMarkers after MARKER_DELAY_S (2 s); the
coordinator runs on a real log of __transaction_state (conftest.py)."""

from __future__ import annotations

import asyncio

from broker.protocol.errors import ErrorCode as E
from broker.txn.coordinator import CONCURRENT_WAIT_S
from broker.txn.metadata import MAX_EPOCH, TxnState

S = TxnState
MARKER_DELAY_S = 2.0
assert MARKER_DELAY_S > CONCURRENT_WAIT_S + 0.5  # the requests below are answered before the markers
T = [("out", 0)]


def _slow(env):
    """The coordinator's environment with markers that take MARKER_DELAY_S: a partition
    whose follower is stuck holds the marker's acks=-1 write that long."""
    make, _writer, markers, clock, _cfg = env
    markers.delay_s = MARKER_DELAY_S
    return make, markers, clock


def run(coro):
    return asyncio.run(coro)


async def _completed(c, txn_id: str, state: TxnState, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while c.txns[txn_id].state is not state or c.txns[txn_id].pending is not None:
        assert loop.time() < deadline, f"{txn_id}: still {c.txns[txn_id].state.kafka_name}"
        await asyncio.sleep(0.02)


async def _during(c, txn_id: str, ending: TxnState, **requests):
    """Sends the requests together while `txn_id`'s markers are out; each must be answered
    while they still are (the answer names the state it saw). {name: answer}"""
    names = list(requests)
    answers = await asyncio.gather(*requests.values())
    md = c.txns[txn_id]
    assert md.state is ending, f"the markers were written before the answers: {md.state.kafka_name}"
    return dict(zip(names, answers))


def test_tv2_an_empty_abort_right_after_a_commit_waits_for_its_markers_instead_of_being_fenced(env):
    make, markers, _clock = _slow(env)

    async def go():
        c = make()
        _, pid, e0 = await c.init_producer_id("t1", 10000)
        assert await c.add_partitions("t1", pid, e0, T, client_version=2) == 0
        # the commit is answered at once with the bumped epoch; its marker takes 2 s
        assert await c.end_txn("t1", pid, e0, True, client_version=2) == (0, pid, e0 + 1)
        e1 = e0 + 1
        got = await _during(
            c,
            "t1",
            S.PREPARE_COMMIT,
            # franz-go ends a transaction none of whose produces succeeded with an abort
            empty_abort=c.end_txn("t1", pid, e1, False, client_version=2),
            add=c.add_partitions("t1", pid, e1, T, client_version=2),
            implicit_add=c.add_or_verify("t1", pid, e1, T, add=True),
            add_offsets=c.add_offsets("t1", pid, e1, "g", 1),
            init=c.init_producer_id("t1", 10000, pid, e1),
        )
        assert got == {
            "empty_abort": (E.CONCURRENT_TRANSACTIONS, -1, -1),
            "add": E.CONCURRENT_TRANSACTIONS,
            "implicit_add": {T[0]: E.CONCURRENT_TRANSACTIONS},
            "add_offsets": E.CONCURRENT_TRANSACTIONS,
            "init": (E.CONCURRENT_TRANSACTIONS, -1, -1),
        }
        # nothing was written meanwhile: the commit completes at the epoch it answered
        await _completed(c, "t1", S.COMPLETE_COMMIT)
        md = c.txns["t1"]
        assert (md.producer_id, md.producer_epoch) == (pid, e1)
        assert [(m.producer_epoch, m.commit) for _b, m in markers.sent] == [(e1, True)]
        # the client's retry of the abort now succeeds and bumps the epoch again
        assert await c.end_txn("t1", pid, e1, False, client_version=2) == (0, pid, e1 + 1)
        await _completed(c, "t1", S.COMPLETE_ABORT)
        assert await c.add_partitions("t1", pid, e1 + 1, T, client_version=2) == 0
        await c.shutdown()

    run(go())


def test_tv2_a_transaction_after_the_commit_starts_once_the_markers_are_written(env):
    make, markers, _clock = _slow(env)

    async def go():
        c = make()
        _, pid, e0 = await c.init_producer_id("t1", 10000)
        assert await c.add_partitions("t1", pid, e0, T, client_version=2) == 0
        assert (await c.end_txn("t1", pid, e0, True, client_version=2))[0] == 0
        e1 = e0 + 1
        # a commit retried (its answer lost) and the next transaction's implicit add, both
        # during the marker phase, then both after it
        got = await _during(
            c,
            "t1",
            S.PREPARE_COMMIT,
            retry=c.end_txn("t1", pid, e0, True, client_version=2),
            implicit_add=c.add_or_verify("t1", pid, e1, [("out", 1)], add=True),
        )
        assert got == {
            "retry": (E.CONCURRENT_TRANSACTIONS, -1, -1),
            "implicit_add": {("out", 1): E.CONCURRENT_TRANSACTIONS},
        }
        await _completed(c, "t1", S.COMPLETE_COMMIT)
        assert await c.end_txn("t1", pid, e0, True, client_version=2) == (0, pid, e1)
        assert await c.add_or_verify("t1", pid, e1, [("out", 1)], add=True) == {("out", 1): 0}
        assert c.txns["t1"].partitions == {("out", 1)}
        # a late abort of the committed epoch is no retry of anything now: fenced
        assert (await c.end_txn("t1", pid, e0, False, client_version=2))[0] == E.PRODUCER_FENCED
        await c.shutdown()

    run(go())


def test_tv2_the_next_producer_id_of_an_exhausted_epoch_is_told_to_retry_while_the_markers_are_out(env):
    make, markers, _clock = _slow(env)

    async def go():
        c = make()
        _, pid, _ = await c.init_producer_id("t1", 10000)
        c.txns["t1"].producer_epoch = MAX_EPOCH - 1
        assert await c.add_partitions("t1", pid, MAX_EPOCH - 1, T, client_version=2) == 0
        err, new_pid, new_epoch = await c.end_txn("t1", pid, MAX_EPOCH - 1, True, client_version=2)
        assert err == 0 and new_pid != pid and new_epoch == 0
        # the client goes on with the new id before the coordinator has made it the id's
        got = await _during(
            c,
            "t1",
            S.PREPARE_COMMIT,
            empty_abort=c.end_txn("t1", new_pid, 0, False, client_version=2),
            add=c.add_partitions("t1", new_pid, 0, T, client_version=2),
            implicit_add=c.add_or_verify("t1", new_pid, 0, T, add=True),
            init=c.init_producer_id("t1", 10000, new_pid, 0),
        )
        assert got == {
            "empty_abort": (E.CONCURRENT_TRANSACTIONS, -1, -1),
            "add": E.CONCURRENT_TRANSACTIONS,
            "implicit_add": {T[0]: E.CONCURRENT_TRANSACTIONS},
            "init": (E.CONCURRENT_TRANSACTIONS, -1, -1),
        }
        await _completed(c, "t1", S.COMPLETE_COMMIT)
        assert (c.txns["t1"].producer_id, c.txns["t1"].producer_epoch) == (new_pid, 0)
        assert [(m.producer_id, m.producer_epoch) for _b, m in markers.sent] == [(pid, MAX_EPOCH)]
        assert await c.end_txn("t1", new_pid, 0, False, client_version=2) == (0, new_pid, 1)
        await c.shutdown()

    run(go())


def test_tv1_requests_during_the_marker_phase_are_retriable(env):
    make, markers, _clock = _slow(env)

    async def go():
        c = make()
        _, pid, e0 = await c.init_producer_id("t1", 10000)
        assert await c.add_partitions("t1", pid, e0, T) == 0
        assert (await c.end_txn("t1", pid, e0, True))[0] == 0
        got = await _during(
            c,
            "t1",
            S.PREPARE_COMMIT,
            abort=c.end_txn("t1", pid, e0, False),
            commit=c.end_txn("t1", pid, e0, True),
            add=c.add_partitions("t1", pid, e0, [("out", 1)]),
            init=c.init_producer_id("t1", 10000, pid, e0),
        )
        assert {k: v if isinstance(v, int) else v[0] for k, v in got.items()} == {
            "abort": E.CONCURRENT_TRANSACTIONS,
            "commit": E.CONCURRENT_TRANSACTIONS,
            "add": E.CONCURRENT_TRANSACTIONS,
            "init": E.CONCURRENT_TRANSACTIONS,
        }
        # the produce path's verification of a late batch (KIP-890 part 1): retriable too
        assert c.verify_partitions("t1", pid, e0, T) == {T[0]: E.CONCURRENT_TRANSACTIONS}
        await _completed(c, "t1", S.COMPLETE_COMMIT)
        # afterwards as Kafka answers: the commit again is fine, an abort of it is not
        assert (await c.end_txn("t1", pid, e0, True))[0] == 0
        assert (await c.end_txn("t1", pid, e0, False))[0] == E.INVALID_TXN_STATE
        assert c.verify_partitions("t1", pid, e0, T) == {T[0]: E.INVALID_TXN_STATE}
        assert await c.add_partitions("t1", pid, e0, [("out", 1)]) == 0
        await c.shutdown()

    run(go())


def test_tv2_a_commit_racing_the_coordinators_own_abort_is_fenced(env):
    """KAFKA-20785: the coordinator aborts a transaction past its timeout; the producer's
    commit, sent meanwhile at the epoch it had, is told to retry while the abort's markers
    are out and is then PRODUCER_FENCED (which a client handles) — not INVALID_TXN_STATE
    (fatal), also where the abort could bump the epoch only once (the epoch ran out) and
    the commit's epoch looks like a retry's."""
    make, markers, clock = _slow(env)

    async def timed_out(c, txn_id, epoch):
        _, pid, e = await c.init_producer_id(txn_id, 10000)
        if epoch is not None:
            c.txns[txn_id].producer_epoch = e = epoch
        assert await c.add_partitions(txn_id, pid, e, T, client_version=2) == 0
        return pid, e

    async def commit_after_the_abort(c, txn_id, pid, e):
        during = await _during(c, txn_id, S.PREPARE_ABORT, commit=c.end_txn(txn_id, pid, e, True, client_version=2))
        await _completed(c, txn_id, S.COMPLETE_ABORT)
        return during["commit"][0], (await c.end_txn(txn_id, pid, e, True, client_version=2))[0]

    async def own_abort_then_commit(c):
        # the client's own abort, then a commit of its epoch (no client does that): fenced alike
        _, pid, e = await c.init_producer_id("t3", 10000)
        assert await c.add_partitions("t3", pid, e, T, client_version=2) == 0
        assert await c.end_txn("t3", pid, e, False, client_version=2) == (0, pid, e + 1)
        await _completed(c, "t3", S.COMPLETE_ABORT)
        assert await c.end_txn("t3", pid, e, False, client_version=2) == (0, pid, e + 1)  # a retry
        return (await c.end_txn("t3", pid, e, True, client_version=2))[0]

    async def go():
        c = make()
        t1 = await timed_out(c, "t1", None)
        t2 = await timed_out(c, "t2", MAX_EPOCH - 1)
        clock[0] += 20000
        assert c.abort_timed_out() == 2
        await asyncio.sleep(0.1)
        assert c.txns["t1"].state is c.txns["t2"].state is S.PREPARE_ABORT
        got = await asyncio.gather(
            commit_after_the_abort(c, "t1", *t1), commit_after_the_abort(c, "t2", *t2), own_abort_then_commit(c)
        )
        assert got == [(E.CONCURRENT_TRANSACTIONS, E.PRODUCER_FENCED)] * 2 + [E.PRODUCER_FENCED]
        assert c.txns["t2"].producer_epoch == MAX_EPOCH  # one bump only: the epoch ran out
        await c.shutdown()

    run(go())
