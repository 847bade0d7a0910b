"""The core scenarios once more with the broker on uvloop (as asyncpg runs its suite
twice): uvloop has no sock_sendfile, so this proves the connection layer's own
reader/writer callbacks and the native sendfile path work on it too."""

from __future__ import annotations

import time

import pytest

from broker.client import BrokerConnection, Cluster
from broker.protocol.messages.fetch import FetchRequest
from tests.interop import clients as C
from tests.interop.conftest import require_client
from tests.interop.test_clients import make_messages, verify
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_module

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def uv_broker(tmp_path_factory):
    require_module("uvloop")
    with BrokerProcess(tmp_path_factory.mktemp("uvbroker") / "data", event_loop="uvloop") as b:
        assert "event loop: uvloop" in b.log_tail()
        yield b


@pytest.mark.parametrize("client", C.CLIENTS)
def test_round_trip_on_uvloop(uv_broker, client):
    require_client(client)
    topic = f"uv-{client}"
    with Cluster(uv_broker.bootstrap) as c:
        c.create_topic(topic, 3, 1)
    messages = make_messages(3000, 11, same_headers=client == "kcat")
    C.PRODUCE[client](uv_broker.bootstrap, topic, messages, -1, "zstd")
    verify(messages, C.consume(client, uv_broker.bootstrap, topic, len(messages), [0, 1, 2]))


def test_big_fetch_and_long_poll_on_uvloop(uv_broker):
    """A multi-MiB fetch goes out through sendfile with partial sends; an empty fetch
    waits for max_wait_ms."""
    from broker.client import Producer

    with Producer(uv_broker.bootstrap, acks=1, batch_size=1 << 20) as p:
        for _i in range(40_000):
            p.send("uv-big", b"x" * 200, partition=0)
    with Cluster(uv_broker.bootstrap) as c:
        meta = c.topic("uv-big")
    with BrokerConnection("127.0.0.1", uv_broker.port) as conn:
        req = FetchRequest(
            replica_id=-1,
            max_wait_ms=500,
            min_bytes=1,
            max_bytes=64 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            forgotten_topics_data=[],
            topics=[
                FetchRequest.FetchTopic(
                    topic="uv-big",
                    topic_id=meta.topic_id,
                    partitions=[FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=32 << 20)],
                )
            ],
        )
        resp = conn.request(req)
        data = resp.responses[0].partitions[0].records
        assert len(data) > 8 << 20
        from broker.native import iter_batches

        assert sum(b.record_count for b in iter_batches(data, validate=True)) == 40_000
        req.topics[0].partitions[0].fetch_offset = 40_000
        t0 = time.monotonic()
        resp = conn.request(req)
        assert 0.4 <= time.monotonic() - t0 < 3
        assert not resp.responses[0].partitions[0].records
