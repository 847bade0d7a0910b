"""The checker on synthetic histories: a clean one passes, each anomaly is found alone."""

from __future__ import annotations

import pytest

from broker.native import BatchBuilder
from tests.faults.checker import History, check
from tests.support.deps import require_module


def clean() -> tuple[History, dict[int, list[tuple[int, str]]]]:
    """Two producers, two partitions, a consumer that read everything, a commit."""
    h = History()
    final: dict[int, list[tuple[int, str]]] = {0: [], 1: []}
    for i in range(10):
        p, producer = i % 2, "idem" if i < 6 else "plain"
        v = f"v{i}"
        h.send(v, producer, idempotent=producer == "idem")
        offset = len(final[p])
        h.acked(v, p, offset)
        final[p].append((offset, v))
    for p, records in final.items():
        for offset, v in records:
            h.polled("c1", p, offset, v)
    h.committed("g", 0, 5)
    return h, final


def kinds(result) -> set[str]:
    return {k for k, v in result.anomalies.items() if v}


def test_a_clean_history_passes():
    h, final = clean()
    r = check(h, final)
    assert r.ok and kinds(r) == set(), r.summary()
    assert r.counts["acked"] == 10 and r.counts["final"] == 10 and r.counts["polls"] == 10
    assert "anomalies 0" in r.summary()


def test_values_are_unique():
    h = History()
    h.send("a", "p", True)
    with pytest.raises(ValueError):
        h.send("a", "p", True)


def test_lost_acknowledged_record():
    h, final = clean()
    final[1] = final[1][:-1]  # the last record of p1 (acked) is gone
    r = check(h, final, log_end={0: 5, 1: 4})
    assert kinds(r) == {"lost", "truncated_read"}, r.summary()  # the consumer had read it, too
    assert "v9" in r.anomalies["lost"][0]


def test_lost_without_a_reader():
    h, final = clean()
    h.polls.clear()
    final[1] = final[1][:-1]
    assert kinds(check(h, final)) == {"lost"}


def test_a_failed_send_may_be_there_or_not():
    h, final = clean()
    h.send("f1", "idem", True)
    h.failed("f1", "timed out")
    h.send("f2", "idem", True)
    h.failed("f2", "timed out")
    final[0].append((5, "f1"))  # one of them was written after all
    r = check(h, final)
    assert r.ok and r.failed_present == 1, r.summary()


def test_an_unacknowledged_send_may_be_missing():
    h, final = clean()
    h.send("pending", "idem", True)
    assert check(h, final).ok


def test_acked_at_another_offset():
    h, final = clean()
    final[0][1], final[0][2] = (1, final[0][2][1]), (2, final[0][1][1])  # two records swapped
    h.polls.clear()
    r = check(h, final)
    assert kinds(r) == {"wrong_offset"} and len(r.anomalies["wrong_offset"]) == 2, r.summary()


def test_duplicates_of_an_idempotent_producer_are_anomalies():
    h, final = clean()
    final[0].append((5, "v0"))  # v0: idempotent producer
    r = check(h, final)
    assert kinds(r) == {"duplicate"}, r.summary()


def test_duplicates_of_a_plain_producer_are_counted_not_flagged():
    h, final = clean()
    final[0].append((5, "v8"))  # v8: non-idempotent producer
    r = check(h, final)
    assert r.ok and r.allowed_duplicates == 1, r.summary()


def test_value_never_sent_in_the_log():
    h, final = clean()
    final[1].append((5, "ghost"))
    assert kinds(check(h, final)) == {"unexpected"}


def test_value_never_sent_polled():
    h, final = clean()
    h.polled("c2", 0, 99, "ghost")
    r = check(h, final)
    assert "unexpected" in kinds(r)
    assert kinds(r) == {"unexpected", "truncated_read"}  # nothing at p0@99 at the end either


def test_gap_in_the_final_read():
    h, final = clean()
    final[0] = [(o + (o >= 3), v) for o, v in final[0]]  # offsets 0,1,2,4,5
    h.polls.clear()
    for s in h.sends.values():
        if s.partition == 0 and s.offset >= 3:
            s.offset += 1
    r = check(h, final)
    assert kinds(r) == {"offset_gap"}, r.summary()


def test_offsets_out_of_order_in_the_final_read():
    h, final = clean()
    final[1] = [final[1][0], final[1][2], final[1][1], *final[1][3:]]
    h.polls.clear()
    assert "offset_order" in kinds(check(h, final))


def test_a_consumer_going_backwards():
    h, final = clean()
    h.polled("c1", 0, 2, final[0][2][1])  # again, without a reset
    r = check(h, final)
    assert kinds(r) == {"nonmonotonic_poll"}, r.summary()


def test_a_reset_allows_reading_again():
    h, final = clean()
    h.reset("c1")
    h.polled("c1", 0, 0, final[0][0][1])
    assert check(h, final).ok


def test_a_consumer_skipping_records():
    h, final = clean()
    h.polls = [x for x in h.polls if not (x[2] == 1 and x[3] == 2)]  # c1 never got p1@2
    r = check(h, final)
    assert kinds(r) == {"poll_skip"}, r.summary()


def test_a_read_that_was_later_truncated():
    h, final = clean()
    h.send("x", "idem", True)
    h.polled("c1", 0, 5, "x")  # seen at p0@5 (unacked), gone at the end
    r = check(h, final)
    assert kinds(r) == {"truncated_read"}, r.summary()


def test_a_read_replaced_by_other_data():
    h, final = clean()
    h.send("x", "plain", False)
    h.send("y", "plain", False)
    h.polled("c1", 0, 5, "x")
    final[0].append((5, "y"))  # the consumer's x at p0@5 became y
    r = check(h, final)
    assert kinds(r) == {"truncated_read"}, r.summary()


def test_committed_offset_beyond_the_log():
    h, final = clean()
    h.committed("g", 1, 6)  # p1 ends at 5
    r = check(h, final)
    assert kinds(r) == {"commit_ahead"}, r.summary()
    assert check(h, final, committed={("g", 1): 5}).ok


def test_committed_offsets_are_checked_against_the_given_log_end():
    h, final = clean()
    assert kinds(check(h, final, log_end={0: 4, 1: 5})) >= {"commit_ahead"}


def test_replicas_that_diverged():
    h, final = clean()
    same = {1: b"abcdef", 2: b"abcdef", 3: b"abcd"}  # 3 is a fetch behind: fine
    assert check(h, final, replica_logs={0: same}).ok
    r = check(h, final, replica_logs={0: same, 1: {1: b"abcdef", 2: b"abcxef", 3: b"ab"}})
    assert kinds(r) == {"replica_divergence"}, r.summary()
    assert "broker 2" in r.anomalies["replica_divergence"][0] and "byte 3" in r.anomalies["replica_divergence"][0]


def test_an_ack_without_offset_is_checked_for_loss_only():
    h, final = clean()
    h.send("dup", "idem", True)
    h.acked("dup", 0, None)
    assert kinds(check(h, final)) == {"lost"}
    final[0].append((5, "dup"))
    r = check(h, final)
    assert r.ok and r.counts["acked_without_offset"] == 1, r.summary()


def _log(*batches: tuple[int, int, int, str]) -> bytes:
    """Batches of one record each: (offset, producer id, producer epoch, value)."""
    out = bytearray()
    for offset, pid, epoch, value in batches:
        b = BatchBuilder(base_offset=offset, producer_id=pid, producer_epoch=epoch, base_sequence=0 if pid >= 0 else -1)
        b.append(1000, None, value.encode())
        out += b.build()
    return bytes(out)


def test_an_idempotent_duplicate_across_producer_epochs_is_counted_not_flagged():
    h, final = clean()
    final[0].append((5, "v0"))  # v0 (idempotent, offset 0) written again at 5
    assert kinds(check(h, final)) == {"duplicate"}  # epochs unknown: an anomaly
    p0 = [(o, 7, 0, v) for o, v in final[0][:5]]
    bumped = _log(*p0, (5, 7, 1, "v0"))  # the copy under epoch 1: a client's epoch bump
    r = check(h, final, replica_logs={0: {1: bumped, 2: bumped}})
    assert r.ok and r.epoch_bump_duplicates == 1, r.summary()
    same = _log(*p0, (5, 7, 0, "v0"))  # the same epoch: the broker should have known
    r = check(h, final, replica_logs={0: {1: same, 2: same}})
    assert kinds(r) == {"duplicate"} and r.epoch_bump_duplicates == 0, r.summary()


def test_a_producer_whose_send_raises_a_fatal_error_stops_and_counts_it():
    # librdkafka raises a fatal idempotence error from produce() itself: the producer's thread
    # used to die of it unreported (a warning at the end of pytest's output, nothing in the
    # summary); now it stops sending and the summary names the error
    from tests.faults.workload import _Producer

    ck = require_module("confluent_kafka")

    class Refusing:
        def __init__(self, conf):
            self.calls = 0

        def produce(self, *a, **kw):
            self.calls += 1
            if self.calls > 3:
                raise ck.KafkaException(
                    ck.KafkaError(ck.KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "desynchronized", fatal=True)
                )

        def poll(self, timeout=0):
            return 0

    fake = type("ck", (), {"Producer": Refusing, "KafkaException": ck.KafkaException})
    h = History()
    p = _Producer(fake, "unused:9092", "t", 2, "idem", True, h, rate=1000.0)
    p.thread.start()
    p.thread.join(5)
    assert not p.thread.is_alive()
    assert len(p.fatal) == 1 and "desynchronized" in p.fatal[0]
    assert p.seq == 3  # the three records sent before it, none after
