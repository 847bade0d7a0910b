"""The transaction coordinator over a real log of __transaction_state (one partition,
this broker its leader; conftest.py): InitProducerId, AddPartitionsToTxn, EndTxn, the markers, fencing,
timeouts, expiry, and a new leader completing what its predecessor left in flight."""

from __future__ import annotations

import asyncio

from broker.protocol.errors import ErrorCode as E
from broker.txn.metadata import TxnState

S = TxnState


async def _settle():
    for _ in range(20):
        await asyncio.sleep(0)


def run(coro):
    return asyncio.run(coro)


def test_commit_cycle_writes_markers_then_completes(env):
    make, writer, markers, _clock, _cfg = env

    async def go():
        c = make()
        err, pid, epoch = await c.init_producer_id("t1", 10000)
        assert (err, epoch) == (0, 0) and pid > 0
        assert await c.add_partitions("t1", pid, epoch, [("out", 0), ("out", 1)]) == 0
        assert c.txns["t1"].state is S.ONGOING
        assert c.verify_partitions("t1", pid, epoch, [("out", 0), ("other", 0)]) == {
            ("out", 0): 0,
            ("other", 0): E.INVALID_TXN_STATE,
        }
        # partitions being added meanwhile change nothing of those already in
        md = c.txns["t1"]
        t = md.prepare_add_partitions({("more", 0)}, 1)
        assert c.verify_partitions("t1", pid, epoch, [("out", 0)]) == {("out", 0): 0}
        md.abort_transition(t)
        assert (await c.end_txn("t1", pid, epoch, True))[0] == 0
        await _settle()
        assert c.txns["t1"].state is S.COMPLETE_COMMIT
        sent = sorted((b, m.partitions, m.commit, m.coordinator_epoch) for b, m in markers.sent)
        assert sent == [(1, (("out", 0),), True, 3), (2, (("out", 1),), True, 3)]
        assert {m.transaction_version for _b, m in markers.sent} == {0}  # a transaction.version 1 client
        # a retried commit is fine, an abort of it is not
        assert (await c.end_txn("t1", pid, epoch, True))[0] == 0
        assert (await c.end_txn("t1", pid, epoch, False))[0] == E.INVALID_TXN_STATE
        await c.shutdown()

    run(go())


def test_bad_input_gets_protocol_errors(env):
    make, _writer, _markers, _clock, _cfg = env

    async def go():
        c = make()
        assert (await c.init_producer_id("t1", 60001))[0] == E.INVALID_TRANSACTION_TIMEOUT
        assert (await c.init_producer_id("t1", 0))[0] == E.INVALID_TRANSACTION_TIMEOUT
        assert (await c.end_txn("nobody", 1, 0, True))[0] == E.INVALID_PRODUCER_ID_MAPPING
        _, pid, epoch = await c.init_producer_id("t1", 10000)
        assert (await c.end_txn("t1", pid, epoch, True))[0] == E.INVALID_TXN_STATE  # nothing open
        assert await c.add_partitions("t1", pid + 1, epoch, [("out", 0)]) == E.INVALID_PRODUCER_ID_MAPPING
        assert await c.add_partitions("t1", pid, epoch + 1, [("out", 0)]) == E.PRODUCER_FENCED
        assert (await c.init_producer_id("", 10000))[0] == E.INVALID_REQUEST
        await c.shutdown()

    run(go())


def test_a_second_producer_fences_the_first_and_aborts_its_transaction(env):
    make, _writer, markers, _clock, _cfg = env

    async def go():
        c = make()
        _, pid, e0 = await c.init_producer_id("t1", 10000)
        assert await c.add_partitions("t1", pid, e0, [("out", 0)]) == 0
        # the zombie's successor: its open transaction is aborted first, it retries
        assert (await c.init_producer_id("t1", 10000))[0] == E.CONCURRENT_TRANSACTIONS
        await _settle()
        assert c.txns["t1"].state is S.COMPLETE_ABORT
        abort = [m for _b, m in markers.sent if not m.commit]
        assert abort and abort[0].producer_epoch == e0 + 1
        err, pid2, e2 = await c.init_producer_id("t1", 10000)
        assert (err, pid2, e2) == (0, pid, e0 + 2)
        # the old producer is fenced everywhere
        assert await c.add_partitions("t1", pid, e0, [("out", 0)]) == E.PRODUCER_FENCED
        assert (await c.end_txn("t1", pid, e0, True))[0] == E.PRODUCER_FENCED
        await c.shutdown()

    run(go())


def test_kip360_bump_from_the_producers_own_epoch(env):
    make, *_ = env

    async def go():
        c = make()
        _, pid, e0 = await c.init_producer_id("t1", 10000)
        err, pid1, e1 = await c.init_producer_id("t1", 10000, pid, e0)
        assert (err, pid1, e1) == (0, pid, e0 + 1)
        # a retry of that bump (its answer lost) gets the same epoch
        assert await c.init_producer_id("t1", 10000, pid, e0) == (0, pid, e0 + 1)
        # an epoch nobody had is fenced
        assert (await c.init_producer_id("t1", 10000, pid, e0 + 7))[0] == E.PRODUCER_FENCED
        await c.shutdown()

    run(go())


def test_a_timed_out_transaction_is_aborted_with_a_bumped_epoch(env):
    make, _writer, markers, clock, _cfg = env

    async def go():
        c = make()
        _, pid, e0 = await c.init_producer_id("t1", 5000)
        assert await c.add_partitions("t1", pid, e0, [("out", 0)]) == 0
        clock[0] += 4000
        assert c.abort_timed_out() == 0
        clock[0] += 2000
        assert c.abort_timed_out() == 1
        await _settle()
        md = c.txns["t1"]
        assert md.state is S.COMPLETE_ABORT and md.producer_epoch == e0 + 1
        assert [m.commit for _b, m in markers.sent] == [False]
        assert (await c.end_txn("t1", pid, e0, True))[0] == E.PRODUCER_FENCED
        await c.shutdown()

    run(go())


def test_a_new_leader_completes_what_was_prepared(env):
    make, writer, markers, _clock, _cfg = env

    async def go():
        c = make()
        _, pid, e0 = await c.init_producer_id("t1", 10000)
        assert await c.add_partitions("t1", pid, e0, [("out", 0)]) == 0
        markers.answer = E.NOT_LEADER_OR_FOLLOWER  # the markers cannot be written yet
        assert (await c.end_txn("t1", pid, e0, True))[0] == 0
        await _settle()
        assert c.txns["t1"].state is S.PREPARE_COMMIT
        await c.shutdown()  # the old leader dies
        markers.sent.clear()
        markers.answer = 0
        writer.epoch = 4
        c2 = make()  # loads PrepareCommit and finishes it
        assert c2.txns["t1"].state is S.PREPARE_COMMIT
        await asyncio.sleep(0.05)
        assert c2.txns["t1"].state is S.COMPLETE_COMMIT
        assert [(m.commit, m.coordinator_epoch) for _b, m in markers.sent] == [(True, 4)]
        await c2.shutdown()

    run(go())


def test_a_failed_write_is_answered_and_changes_nothing(env):
    make, writer, *_ = env

    async def go():
        c = make()
        _, pid, e0 = await c.init_producer_id("t1", 10000)
        writer.fail = E.NOT_ENOUGH_REPLICAS
        assert await c.add_partitions("t1", pid, e0, [("out", 0)]) == E.COORDINATOR_NOT_AVAILABLE
        writer.fail = E.NOT_LEADER_OR_FOLLOWER
        assert await c.add_partitions("t1", pid, e0, [("out", 0)]) == E.NOT_COORDINATOR
        assert c.txns["t1"].state is S.EMPTY and c.txns["t1"].pending is None
        writer.leader = False
        assert c.check_coordinator("t1") == E.NOT_COORDINATOR
        await c.shutdown()

    run(go())


def test_idle_ids_expire_and_stay_gone_after_a_reload(env):
    make, _writer, _markers, clock, cfg = env

    async def go():
        c = make()
        await c.init_producer_id("t1", 10000)
        _, pid2, e2 = await c.init_producer_id("t2", 10000)
        await c.add_partitions("t2", pid2, e2, [("out", 0)])
        clock[0] += cfg["transactional.id.expiration.ms"]
        assert c.remove_expired() == 1  # t2's transaction is open
        await _settle()
        assert set(c.txns) == {"t2"}
        listed, unknown = c.list_transactions(["Ongoing", "Bogus"], [])
        assert listed == [("t2", pid2, "Ongoing")] and unknown == ["Bogus"]
        assert c.describe("t1")[0] == E.TRANSACTIONAL_ID_NOT_FOUND
        await c.shutdown()
        c2 = make()
        assert set(c2.txns) == {"t2"}
        await c2.shutdown()

    run(go())


# ---------------------------------------------------------------------- transaction.version 2 (KIP-890 part 2)


def _tv2_begin(c, pid, epoch, parts=(("out", 0),)):
    return c.add_partitions("t1", pid, epoch, list(parts), client_version=2)


def test_tv2_every_end_bumps_the_epoch_and_the_markers_carry_it(env):
    make, _writer, markers, _clock, _cfg = env

    async def go():
        c = make()
        _, pid, epoch = await c.init_producer_id("t1", 10000)
        assert epoch == 0
        assert await _tv2_begin(c, pid, 0) == 0
        assert c.txns["t1"].client_version == 2
        assert await c.end_txn("t1", pid, 0, True, client_version=2) == (0, pid, 1)
        await _settle()
        assert [(m.producer_id, m.producer_epoch, m.commit, m.transaction_version) for _, m in markers.sent] == [
            (pid, 1, True, 2)
        ]
        md = c.txns["t1"]
        assert (md.state, md.producer_epoch, md.last_producer_epoch) == (S.COMPLETE_COMMIT, 1, 0)
        # the next transaction goes on at the bumped epoch; an abort bumps too
        assert await _tv2_begin(c, pid, 1) == 0
        assert await c.end_txn("t1", pid, 1, False, client_version=2) == (0, pid, 2)
        await _settle()
        assert [(m.producer_epoch, m.commit) for _, m in markers.sent] == [(1, True), (2, False)]
        assert c.txns["t1"].state is S.COMPLETE_ABORT
        # the old epoch is fenced for a new transaction, and reloading keeps the state
        assert await _tv2_begin(c, pid, 1) == E.PRODUCER_FENCED
        c2 = make()
        md2 = c2.txns["t1"]
        assert (md2.producer_id, md2.producer_epoch, md2.state, md2.client_version) == (pid, 2, S.COMPLETE_ABORT, 2)

    run(go())


def test_tv2_a_retried_end_gets_the_same_answer(env):
    make, _writer, markers, _clock, _cfg = env

    async def go():
        c = make()
        _, pid, _ = await c.init_producer_id("t1", 10000)
        assert await _tv2_begin(c, pid, 0) == 0
        assert await c.end_txn("t1", pid, 0, True, client_version=2) == (0, pid, 1)
        await _settle()
        n = len(markers.sent)
        # the answer was lost: the same request again is answered alike, and nothing is written
        assert await c.end_txn("t1", pid, 0, True, client_version=2) == (0, pid, 1)
        assert len(markers.sent) == n and c.txns["t1"].producer_epoch == 1
        # a retry that asks for the other outcome is refused; an older epoch is fenced
        assert (await c.end_txn("t1", pid, 0, False, client_version=2))[0] == E.INVALID_TXN_STATE
        assert await _tv2_begin(c, pid, 1) == 0
        assert await c.end_txn("t1", pid, 1, False, client_version=2) == (0, pid, 2)
        await _settle()
        assert (await c.end_txn("t1", pid, 0, True, client_version=2))[0] == E.PRODUCER_FENCED
        assert await c.end_txn("t1", pid, 1, False, client_version=2) == (0, pid, 2)
        # a commit at the current epoch with nothing open is no transaction; an abort bumps
        assert (await c.end_txn("t1", pid, 2, True, client_version=2))[0] == E.INVALID_TXN_STATE
        assert await c.end_txn("t1", pid, 2, False, client_version=2) == (0, pid, 3)
        await _settle()
        assert c.txns["t1"].state is S.COMPLETE_ABORT

    run(go())


def test_tv2_an_exhausted_epoch_ends_with_a_new_producer_id(env):
    make, _writer, markers, _clock, _cfg = env

    async def go():
        c = make()
        _, pid, _ = await c.init_producer_id("t1", 10000)
        md = c.txns["t1"]
        md.producer_epoch = 32766  # Short.MaxValue - 1: the last a client may use
        assert await _tv2_begin(c, pid, 32766) == 0
        err, new_pid, new_epoch = await c.end_txn("t1", pid, 32766, True, client_version=2)
        assert err == 0 and new_pid != pid and new_epoch == 0
        await _settle()
        # the markers are written by the old id at Short.MaxValue; then the new id is the producer
        assert [(m.producer_id, m.producer_epoch) for _, m in markers.sent] == [(pid, 32767)]
        assert (md.producer_id, md.producer_epoch, md.previous_producer_id, md.state) == (
            new_pid,
            0,
            pid,
            S.COMPLETE_COMMIT,
        )
        # the retry of the end that rotated the id gets the same answer
        assert await c.end_txn("t1", pid, 32766, True, client_version=2) == (0, new_pid, 0)
        assert await _tv2_begin(c, new_pid, 0) == 0
        # a reload knows the previous id (the record's tagged field) and the new one
        c2 = make()
        md2 = c2.txns["t1"]
        assert (md2.producer_id, md2.previous_producer_id, md2.state) == (new_pid, pid, S.ONGOING)

    run(go())


def test_tv2_adding_with_the_next_producer_id_waits_for_the_completion(env):
    make, _writer, markers, _clock, _cfg = env

    async def go():
        c = make()
        _, pid, _ = await c.init_producer_id("t1", 10000)
        c.txns["t1"].producer_epoch = 32766
        assert await _tv2_begin(c, pid, 32766) == 0
        _, new_pid, _ = await c.end_txn("t1", pid, 32766, True, client_version=2)
        # at once, before the markers are out: the new id waits instead of being unknown
        assert await _tv2_begin(c, new_pid, 0) == 0
        assert c.txns["t1"].producer_id == new_pid

    run(go())


def test_tv2_a_fence_bumps_twice_so_the_fenced_end_is_no_retry(env):
    make, _writer, markers, clock, _cfg = env

    async def go():
        c = make()
        _, pid, _ = await c.init_producer_id("t1", 10000)
        assert await _tv2_begin(c, pid, 0) == 0
        clock[0] += 20000
        assert c.abort_timed_out() == 1
        await _settle()
        md = c.txns["t1"]
        assert (md.state, md.producer_epoch) == (S.COMPLETE_ABORT, 2)
        assert [(m.producer_epoch, m.commit) for _, m in markers.sent] == [(2, False)]
        assert (await c.end_txn("t1", pid, 0, False, client_version=2))[0] == E.PRODUCER_FENCED

    run(go())


def test_tv1_end_keeps_the_epoch(env):
    make, _writer, markers, _clock, _cfg = env

    async def go():
        c = make()
        _, pid, _ = await c.init_producer_id("t1", 10000)
        assert await c.add_partitions("t1", pid, 0, [("out", 0)]) == 0
        assert (await c.end_txn("t1", pid, 0, True))[0] == 0
        await _settle()
        assert [(m.producer_epoch, m.commit) for _, m in markers.sent] == [(0, True)]
        md = c.txns["t1"]
        assert (md.producer_epoch, md.client_version, md.state) == (0, 0, S.COMPLETE_COMMIT)
        assert (await c.end_txn("t1", pid, 0, True))[0] == 0
        assert (await c.end_txn("t1", pid, 0, False))[0] == E.INVALID_TXN_STATE

    run(go())
