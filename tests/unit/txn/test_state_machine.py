"""The transaction coordinator's state machine (Kafka's TransactionMetadata and
TransactionState): every valid transition and the refused ones, the two-step
prepare/complete, epoch fencing and exhaustion, and __transaction_state's records in
Kafka's schema."""

from __future__ import annotations

import itertools
import struct

import pytest

from broker.txn import records as R
from broker.txn.metadata import (
    MAX_EPOCH,
    VALID_PREVIOUS,
    IllegalTransition,
    TransactionMetadata,
    TxnState,
)

S = TxnState
NOW = 1_700_000_000_000


def md(state=S.EMPTY, epoch=0, partitions=()) -> TransactionMetadata:
    m = TransactionMetadata("t1", 1000, producer_epoch=epoch, state=state, partitions=set(partitions), start_ms=NOW)
    return m


def test_state_ids_and_names_are_kafkas():
    assert [(s.value, s.kafka_name) for s in S] == [
        (0, "Empty"),
        (1, "Ongoing"),
        (2, "PrepareCommit"),
        (3, "PrepareAbort"),
        (4, "CompleteCommit"),
        (5, "CompleteAbort"),
        (6, "Dead"),
        (7, "PrepareEpochFence"),
    ]
    assert S.from_kafka_name("Ongoing") is S.ONGOING and S.from_kafka_name("Nope") is None


@pytest.mark.parametrize("src,dst", list(itertools.product(S, S)))
def test_every_transition_is_allowed_exactly_when_kafka_allows_it(src, dst):
    m = md(src)
    if src in VALID_PREVIOUS[dst]:
        t = m.transit(dst, now_ms=NOW)
        assert m.pending is dst
        m.complete_transition(t)
        assert m.state is dst and m.pending is None
    else:
        with pytest.raises(IllegalTransition):
            m.transit(dst, now_ms=NOW)
        assert m.pending is None and m.state is src


def test_a_full_commit_cycle():
    m = md(S.EMPTY, epoch=-1)
    m.complete_transition(m.prepare_increment_epoch(60000, NOW))
    assert (m.state, m.producer_epoch) == (S.EMPTY, 0)
    t = m.prepare_add_partitions({("a", 0)}, NOW + 1)
    # nothing changes before the write completes, and no second transition can start
    assert m.state is S.EMPTY and not m.partitions
    with pytest.raises(IllegalTransition, match="pending"):
        m.prepare_add_partitions({("b", 0)}, NOW + 1)
    m.complete_transition(t)
    assert m.state is S.ONGOING and m.partitions == {("a", 0)} and m.start_ms == NOW + 1
    m.complete_transition(m.prepare_add_partitions({("b", 1)}, NOW + 2))
    assert m.partitions == {("a", 0), ("b", 1)} and m.start_ms == NOW + 1
    m.complete_transition(m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW + 3))
    m.complete_transition(m.prepare_complete(NOW + 4))
    assert m.state is S.COMPLETE_COMMIT and not m.partitions
    # a new transaction starts afresh
    m.complete_transition(m.prepare_add_partitions({("c", 0)}, NOW + 5))
    assert m.partitions == {("c", 0)} and m.start_ms == NOW + 5


def test_a_failed_write_changes_nothing():
    m = md(S.ONGOING, partitions=[("a", 0)])
    t = m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW)
    m.abort_transition(t)
    assert m.state is S.ONGOING and m.pending is None


def test_fencing_bumps_the_epoch_once_and_aborts():
    m = md(S.ONGOING, epoch=4, partitions=[("a", 0)])
    m.apply_fence(m.prepare_fence_epoch(NOW))
    assert (m.state, m.producer_epoch) == (S.PREPARE_EPOCH_FENCE, 5)
    t = m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW)
    assert t.producer_epoch == 5
    m.abort_transition(t)  # the abort's write failed: no second bump
    m.complete_transition(m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW))
    assert (m.state, m.producer_epoch) == (S.PREPARE_ABORT, 5)
    m.complete_transition(m.prepare_complete(NOW))
    assert m.state is S.COMPLETE_ABORT


def test_an_exhausted_epoch_takes_a_new_producer_id():
    m = md(S.COMPLETE_COMMIT, epoch=MAX_EPOCH - 1)
    with pytest.raises(IllegalTransition, match="exhausted"):
        m.prepare_increment_epoch(1000, NOW)
    m.complete_transition(m.prepare_increment_epoch(1000, NOW, new_producer_id=2000))
    assert (m.producer_id, m.producer_epoch, m.previous_producer_id) == (2000, 0, 1000)


def test_dead_only_from_a_finished_transaction():
    for st in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT):
        with pytest.raises(IllegalTransition):
            md(st).prepare_dead(NOW)
    m = md(S.COMPLETE_ABORT)
    m.complete_transition(m.prepare_dead(NOW))
    assert m.state is S.DEAD


def test_partition_for_is_kafkas():
    # Java: "hello".hashCode() == 99162322; "polygenelubricants".hashCode() is
    # Integer.MIN_VALUE, which Kafka's Utils.abs maps to 0
    assert R.partition_for("hello", 50) == 99162322 % 50 == 22
    assert R.partition_for("polygenelubricants", 50) == 0
    assert R.partition_for("", 50) == 0


@pytest.mark.parametrize("client_version", [0, 2])
def test_records_round_trip_in_kafkas_schema(client_version):
    m = md(S.ONGOING, epoch=3, partitions=[("a", 0), ("a", 2), ("b", 1)])
    m.client_version = client_version
    m.next_producer_id = 77 if client_version else -1
    t = m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)
    value = R.encode_value(t)
    back = R.decode_value(value)
    assert (
        back.producer_id,
        back.producer_epoch,
        back.state,
        back.partitions,
        back.start_ms,
        back.last_update_ms,
        back.timeout_ms,
    ) == (1000, 3, S.PREPARE_COMMIT, t.partitions, NOW, NOW, 60000)
    assert back.client_version == client_version and back.next_producer_id == m.next_producer_id
    assert R.decode_key(R.encode_key("t1")) == "t1"
    assert R.encode_key("t1") == struct.pack(">hh", 0, 2) + b"t1"
    if client_version == 0:
        # v0 byte for byte: version, pid, epoch, timeout, state, [topic, [partitions]], update, start
        expect = struct.pack(">hqhib", 0, 1000, 3, 60000, 2) + struct.pack(">i", 2)
        expect += struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 2)
        expect += struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 1)
        expect += struct.pack(">qq", NOW, NOW)
        assert value == expect


def test_an_empty_state_has_null_partitions():
    m = md(S.COMPLETE_ABORT)
    value = R.encode_value(m.prepare_increment_epoch(5000, NOW))
    assert struct.unpack_from(">i", value, 2 + 8 + 2 + 4 + 1)[0] == -1
    with pytest.raises(ValueError):
        R.decode_value(b"\x00\x09")


@pytest.mark.parametrize("client_version", [0, 2])
def test_value_fields_are_kafkas_json_converters(client_version):
    """What `broker dump-log --transaction-log-decoder` prints (checked against Kafka's own
    tool in tests/txn/test_kafka_tools.py): Kafka's field names and order, partitions as
    written, tagged fields only when not their defaults, null partitions when Empty."""
    m = md(S.ONGOING, epoch=3, partitions=[("a", 0), ("a", 2), ("b", 1)])
    m.client_version = client_version
    m.next_producer_id = 77 if client_version else -1
    version, fields = R.value_fields(R.encode_value(m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)))
    assert version == (1 if client_version else 0)
    expect = {
        "producerId": 1000,
        **({"nextProducerId": 77} if client_version else {}),
        "producerEpoch": 3,
        "transactionTimeoutMs": 60000,
        "transactionStatus": 2,
        "transactionPartitions": [{"topic": "a", "partitionIds": [0, 2]}, {"topic": "b", "partitionIds": [1]}],
        "transactionLastUpdateTimestampMs": NOW,
        "transactionStartTimestampMs": NOW,
        **({"clientTransactionVersion": 2} if client_version else {}),
    }
    assert list(fields.items()) == list(expect.items())
    empty = R.value_fields(R.encode_value(md(S.COMPLETE_ABORT).prepare_increment_epoch(5000, NOW)))[1]
    assert empty["transactionPartitions"] is None and empty["transactionStatus"] == 0
    with pytest.raises(ValueError):
        R.value_fields(b"\x00\x09")


def test_tv2_end_bumps_the_epoch_and_remembers_the_one_it_ends():
    m = md(S.ONGOING, epoch=7, partitions=[("a", 0)])
    t = m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW, client_version=2)
    assert (t.producer_epoch, t.last_producer_epoch, t.client_version, t.partitions) == (8, 7, 2, frozenset({("a", 0)}))
    m.complete_transition(t)
    m.complete_transition(m.prepare_complete(NOW + 1))
    assert (m.state, m.producer_epoch, m.last_producer_epoch, m.partitions) == (S.COMPLETE_COMMIT, 8, 7, set())
    # version 1 keeps the epoch
    v1 = md(S.ONGOING, epoch=7, partitions=[("a", 0)])
    assert v1.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW).producer_epoch == 7


def test_tv2_abort_with_no_partition_added_from_a_finished_transaction():
    for src in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        m = md(src, epoch=3)
        t = m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW + 5, client_version=2, no_partitions=True)
        assert (t.state, t.producer_epoch, t.partitions, t.start_ms) == (S.PREPARE_ABORT, 4, frozenset(), NOW + 5)
        m.complete_transition(t)
        m.complete_transition(m.prepare_complete(NOW + 6))
        assert (m.state, m.producer_epoch) == (S.COMPLETE_ABORT, 4)
    with pytest.raises(IllegalTransition):
        md(S.EMPTY).transit(S.PREPARE_COMMIT, now_ms=NOW)


def test_tv2_overflow_completes_with_the_next_producer_id_and_remembers_the_previous():
    m = md(S.ONGOING, epoch=MAX_EPOCH - 1, partitions=[("a", 0)])
    t = m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW, client_version=2, next_producer_id=2000)
    assert (t.producer_id, t.producer_epoch, t.next_producer_id) == (1000, MAX_EPOCH, 2000)
    m.complete_transition(t)
    done = m.prepare_complete(NOW + 1)
    assert (
        done.producer_id,
        done.producer_epoch,
        done.previous_producer_id,
        done.next_producer_id,
        done.last_producer_epoch,
    ) == (2000, 0, 1000, -1, MAX_EPOCH - 1)
    # the record keeps the previous id (a tagged field of the v1 value) for a new coordinator
    back = R.decode_value(R.encode_value(done))
    assert (back.producer_id, back.previous_producer_id, back.client_version) == (2000, 1000, 2)
    m.complete_transition(done)
    assert (m.producer_id, m.previous_producer_id, m.producer_epoch) == (2000, 1000, 0)
    # an epoch at Short.MaxValue cannot grow
    with pytest.raises(IllegalTransition):
        md(S.ONGOING, epoch=MAX_EPOCH).prepare_abort_or_commit(S.PREPARE_COMMIT, NOW, client_version=2)
