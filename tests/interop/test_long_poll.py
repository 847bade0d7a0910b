"""Fetch long polling (max_wait_ms / min_bytes) seen from a client socket: an empty
partition holds the Fetch for max_wait_ms, and never longer than the broker's
fetch.wait.max.ms; new data answers it early; min_bytes above
what is there waits the whole max_wait_ms, then returns what there is. The waits are the
behaviour under test, so the time bounds here are generous on purpose."""

from __future__ import annotations

import threading
import time

import pytest

from broker.client import BrokerConnection, Cluster, Producer
from tests.interop.helpers import fetch_once, records_of
from tests.support.broker_proc import BrokerProcess

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # fetch.wait.max.ms: the longest wait granted (the tests here ask for less but one)
    with BrokerProcess(tmp_path_factory.mktemp("long-poll") / "data", config={"fetch.wait.max.ms": 2000}) as b:
        yield b


@pytest.fixture
def topic(broker, topic_name):
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
        return topic_name, c.topic(topic_name).topic_id


def timed_fetch(broker, topic, offset, **kw):
    name, topic_id = topic
    with BrokerConnection("127.0.0.1", broker.port) as conn:
        t0 = time.monotonic()
        d = fetch_once(conn, name, topic_id, 0, offset, **kw)
        return d, time.monotonic() - t0


def test_empty_partition_waits_max_wait(broker, topic):
    d, elapsed = timed_fetch(broker, topic, 0, max_wait_ms=500, min_bytes=1)
    assert d.error_code == 0
    assert not d.records
    assert d.high_watermark == 0
    assert 0.4 <= elapsed < 3.0, elapsed


def test_a_wait_longer_than_fetch_wait_max_ms_ends_at_it(broker, topic):
    """A client asking for a 10-minute long poll is answered after the broker's
    fetch.wait.max.ms (2 s here), with what there is."""
    d, elapsed = timed_fetch(broker, topic, 0, max_wait_ms=600_000, min_bytes=1 << 30)
    assert d.error_code == 0 and not d.records
    assert 1.9 <= elapsed < 10.0, elapsed


def test_new_data_answers_a_waiting_fetch_early(broker, topic):
    name, _ = topic
    errors = []

    def produce_later():
        try:
            time.sleep(0.3)
            with Producer(broker.bootstrap, acks=1) as p:
                p.send(name, b"wake up", key=b"k", partition=0)
        except Exception as exc:  # reported by the main thread
            errors.append(exc)

    t = threading.Thread(target=produce_later)
    t.start()
    try:
        d, elapsed = timed_fetch(broker, topic, 0, max_wait_ms=5000, min_bytes=1)
    finally:
        t.join(30)
    assert not errors, errors
    assert d.error_code == 0
    assert records_of(d.records) == [(0, b"k", b"wake up")]
    assert d.high_watermark == 1
    assert 0.2 <= elapsed < 2.5, elapsed


def test_min_bytes_above_available_waits_then_returns_what_there_is(broker, topic):
    name, _ = topic
    with Producer(broker.bootstrap, acks=-1) as p:
        for i in range(3):
            p.send(name, b"small-%d" % i, partition=0)
    d, elapsed = timed_fetch(broker, topic, 0, max_wait_ms=800, min_bytes=100_000)
    assert d.error_code == 0
    assert [v for _, _, v in records_of(d.records)] == [b"small-0", b"small-1", b"small-2"]
    assert 0.65 <= elapsed < 4.0, elapsed
    # min_bytes already met: no wait at all beyond the round trip
    d, elapsed = timed_fetch(broker, topic, 0, max_wait_ms=5000, min_bytes=1)
    assert len(records_of(d.records)) == 3
    assert elapsed < 2.5, elapsed


def test_fetch_at_log_end_waits_and_earlier_data_is_not_resent(broker, topic):
    """Waiting at the log end (a caught-up consumer): the answer carries only the new
    record, not the ones before the fetch offset."""
    name, _ = topic
    with Producer(broker.bootstrap, acks=-1) as p:
        p.send(name, b"old", partition=0)
    d, elapsed = timed_fetch(broker, topic, 1, max_wait_ms=400, min_bytes=1)
    assert not d.records and d.high_watermark == 1
    assert 0.3 <= elapsed < 3.0, elapsed

    def produce_later():
        time.sleep(0.3)
        with Producer(broker.bootstrap, acks=1) as p:
            p.send(name, b"new", partition=0)

    t = threading.Thread(target=produce_later)
    t.start()
    try:
        d, elapsed = timed_fetch(broker, topic, 1, max_wait_ms=5000, min_bytes=1)
    finally:
        t.join(30)
    assert [(o, v) for o, _, v in records_of(d.records)] == [(1, b"new")]
    assert elapsed < 2.5, elapsed
