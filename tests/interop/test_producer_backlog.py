"""The producer against a leader that stops answering for a while (SIGSTOP, a real broker):
as Kafka's accumulator, a partition's open batch keeps growing up to batch_size while an
earlier batch of it waits to be sent, instead of one small batch per linger_ms. (One batch
per linger_ms drains at one batch per request: behind a 20 s stall a producer at 1000
records/s had built a backlog that aged past delivery.timeout.ms and failed.) Every record
arrives, in order, once the broker answers again."""

from __future__ import annotations

import time

from broker.client import Cluster, Consumer, Producer

PAUSE_S = 2.0
VALUE = b"v" * 100


def test_a_stalled_leader_grows_the_open_batch_instead_of_queueing_one_per_linger(broker, topic_name):
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
        c.topic(topic_name, wait_s=10.0)
    tp = (topic_name, 0)
    with Producer(broker.bootstrap, linger_ms=5) as p:
        p.send(topic_name, b"first", partition=0)
        p.flush()  # metadata and connection in place
        broker.pause()
        try:
            sent, t0 = 1, time.monotonic()
            while time.monotonic() - t0 < PAUSE_S:
                p.send(topic_name, b"%06d" % sent + VALUE, partition=0)
                sent += 1
                p.poll()
                time.sleep(0.001)
            queued = len(p._sender.queues.get(tp, ()))
            open_records = len(p._builders[tp]) if tp in p._builders else 0
        finally:
            broker.resume()
        p.flush()
    per_batch = p.batch_size // (len(VALUE) + 6 + 21)  # records of a full batch, at least
    print(
        f"\n{sent} records in {PAUSE_S:g} s of a stalled leader: {queued} batch(es) waiting, "
        f"{open_records} record(s) in the open one"
    )
    # at most one batch in flight and one waiting that were closed by linger_ms; the others full
    assert queued <= (sent - 1) // per_batch + 2, (queued, sent)
    assert sent >= 100, sent  # one batch per linger_ms would have queued ~sent/5
    with Consumer(broker.bootstrap, max_wait_ms=100) as consumer:
        consumer.assign(topic_name, [0], "earliest")
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < sent and time.monotonic() < deadline:
            got += [r.value for r in consumer.poll(0.5)]
    assert got[0] == b"first" and got[1:] == [b"%06d" % i + VALUE for i in range(1, sent)]
