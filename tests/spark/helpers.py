"""Producing known records with the project's own producer (an independent path from the
data source's native encoder) and reading them back as plain tuples."""

from __future__ import annotations

import time

from broker.client import Cluster, Producer

# an hour ago: recent enough that time-based retention (retention.ms, 7 days) keeps them
BASE_TS = (int(time.time()) - 3600) * 1000


def record(i: int, value_size: int = 40):
    """Record i: key, value, headers, timestamp (ms). Every 10th record has no headers,
    every 7th a null key, every 13th a header with a null value."""
    key = None if i % 7 == 0 else b"k%07d" % i
    value = (b"v%07d-" % i) + bytes([97 + i % 26]) * value_size
    if i % 10 == 0:
        headers = []
    else:
        headers = [("seq", str(i).encode()), ("kind", b"even" if i % 2 == 0 else b"odd")]
        if i % 13 == 0:
            headers.append(("empty", None))
    return key, value, headers, BASE_TS + i


def create_topic(bootstrap: str, topic: str, partitions: int, configs: dict | None = None) -> None:
    with Cluster(bootstrap) as c:
        c.create_topic(topic, partitions, 1, configs)
        c.topic(topic, wait_s=10.0)


def produce(
    bootstrap: str,
    topic: str,
    start: int,
    count: int,
    partitions: int,
    value_size: int = 40,
    batch_size: int = 64 * 1024,
) -> dict:
    """Records start..start+count-1, record i to partition i % partitions. Returns
    {i: (partition, offset)} from the broker's acknowledgements."""
    placed = {}
    with Producer(bootstrap, acks=-1, linger_ms=1000, batch_size=batch_size) as p:
        order: dict[int, list[int]] = {}
        for i in range(start, start + count):
            key, value, headers, ts = record(i, value_size)
            part = i % partitions
            p.send(topic, value, key=key, headers=headers, partition=part, timestamp=ts)
            order.setdefault(part, []).append(i)
        p.flush()
        # batches of a partition are acknowledged in order: offsets follow the send order
        bases = {}
        for _t, part, base in p.results:
            bases.setdefault(part, []).append(base)
    with Cluster(bootstrap) as c:
        ends = {part: off for part, (off, _) in c.list_offsets(topic, sorted(order), -1).items()}
    for part, idx in order.items():
        first = ends[part] - len(idx)
        assert min(bases[part]) == first, (part, bases[part], first)
        for k, i in enumerate(idx):
            placed[i] = (part, first + k)
    return placed


def expected_rows(placed: dict, topic: str, with_headers: bool = True):
    rows = []
    for i, (part, off) in placed.items():
        key, value, headers, ts = record(i)
        row = (key, value, topic, part, off, ts, 0)
        if with_headers:
            row += (tuple((k, v) for k, v in headers),)
        rows.append(row)
    return sorted(rows, key=lambda r: (r[3], r[4]))


def rows_of(table, with_headers: bool = True):
    """A pyarrow Table of the source's rows -> sorted tuples (timestamps in ms)."""
    cols = table.to_pydict()
    out = []
    for j in range(table.num_rows):
        ts = cols["timestamp"][j]
        row = (
            cols["key"][j],
            cols["value"][j],
            cols["topic"][j],
            cols["partition"][j],
            cols["offset"][j],
            int(ts.timestamp() * 1000) if hasattr(ts, "timestamp") else ts,
            cols["timestampType"][j],
        )
        if with_headers:
            row += (tuple((h["key"], h["value"]) for h in cols["headers"][j]),)
        out.append(row)
    return sorted(out, key=lambda r: (r[3], r[4]))


def wait_for(what: str, cond, timeout: float = 30.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(interval)


def read_topic(bootstrap: str, topic: str, timeout: float = 30.0):
    """Every record of the topic through the project's consumer (not the data source):
    [(partition, offset, key, value, headers)]."""
    from broker.client import Consumer

    out = []
    with Cluster(bootstrap) as c:
        meta = c.topic(topic, wait_s=10.0)
        parts = sorted(meta.partitions)
        ends = {p: off for p, (off, _) in c.list_offsets(topic, parts, -1).items()}
    with Consumer(bootstrap, max_wait_ms=200) as consumer:
        consumer.assign(topic, parts, "earliest")
        deadline = time.monotonic() + timeout
        while any(consumer.positions[(topic, p)] < ends[p] for p in parts):
            assert time.monotonic() < deadline, "topic not read within the timeout"
            for r in consumer.poll(0.5):
                out.append((r.partition, r.offset, r.key, r.value, [tuple(h) for h in r.headers]))
    return out
