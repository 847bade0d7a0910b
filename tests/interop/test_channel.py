"""The inter-broker channel (broker/cluster/channel.py) against a real broker process."""

import asyncio
import socket

import pytest

from broker.cluster.channel import BrokerChannel, ChannelError
from broker.protocol.framing import FrameReader
from broker.protocol.messages.api_versions import ApiVersionsRequest
from broker.protocol.messages.metadata import MetadataRequest
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_module
from tests.support.ports import free_port


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request):
    """run(coro): on asyncio's loop, then on uvloop's (what `broker serve` picks by
    default): uvloop's transports and BufferedProtocol calls are not asyncio's."""
    factory = asyncio.new_event_loop
    if request.param == "uvloop":
        require_module("uvloop")
        import uvloop

        factory = uvloop.new_event_loop

    def _run(coro, timeout=60):
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(asyncio.wait_for(coro, timeout))

    return _run


def test_requests_are_pipelined_and_answered_in_order(run, broker):
    host, port = broker.bootstrap.split(":")

    async def main():
        ch = BrokerChannel(host, int(port))
        try:
            resps = await asyncio.gather(
                *(ch.request(MetadataRequest(topics=[])) for _ in range(20)), ch.request(ApiVersionsRequest())
            )
            assert all(r.brokers and r.brokers[0].port == int(port) for r in resps[:20])
            assert resps[20].error_code == 0 and resps[20].api_keys
            assert ch.version_for(3) >= 9  # negotiated: the broker serves Metadata 0-12
        finally:
            await ch.close()

    run(main())


def test_connection_refused_is_a_channel_error_and_a_later_start_is_reached(run, tmp_path):
    port = free_port()

    async def refused():
        ch = BrokerChannel("127.0.0.1", port, connect_timeout=2)
        with pytest.raises(ChannelError, match="cannot connect"):
            await ch.request(MetadataRequest(topics=[]))
        return ch

    ch = run(refused())
    with BrokerProcess(tmp_path / "data", port=port):

        async def reached():
            resp = await ch.request(MetadataRequest(topics=[]))
            assert resp.brokers[0].port == port
            await ch.close()

        run(reached())


def test_a_killed_peer_fails_requests_in_flight_and_the_channel_reconnects(run, tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    try:

        async def main():
            ch = BrokerChannel("127.0.0.1", b.port, request_timeout=10)
            await ch.request(MetadataRequest(topics=[]))
            b.kill()
            with pytest.raises(ChannelError):
                await ch.request(MetadataRequest(topics=[]))
            assert not ch.connected
            await asyncio.get_running_loop().run_in_executor(None, b.start)
            resp = await ch.request(MetadataRequest(topics=[]))
            assert resp.brokers[0].port == b.port
            await ch.close()

        run(main())
    finally:
        b.kill()


def test_a_peer_that_never_answers_times_out(run):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    try:

        async def main():
            ch = BrokerChannel("127.0.0.1", srv.getsockname()[1], connect_timeout=0.5)
            with pytest.raises(ChannelError, match="no answer"):
                await ch.request(MetadataRequest(topics=[]))
            assert not ch.connected
            await ch.close()
            with pytest.raises(ChannelError, match="closed"):
                await ch.request(MetadataRequest(topics=[]))

        run(main())
    finally:
        srv.close()


def test_a_large_answer_is_received_in_place(run, broker):
    """A Fetch answer of megabytes (what a follower gets) goes from the socket straight
    into its frame's own buffer: all but its first bytes are received in place, never
    copied out of a read buffer, and the records decode whole."""
    import os

    from broker.client import Cluster, Producer
    from broker.native import iter_batches
    from broker.protocol.messages.fetch import FetchRequest

    topic = f"channel-big-{os.urandom(4).hex()}"
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic, 1, 1)
        value = os.urandom(1000)
        with Producer(broker.bootstrap, acks=1, batch_size=1 << 20) as p:
            for _i in range(4000):
                p.send(topic, value, partition=0)
        topic_id = c.topic(topic).topic_id
    host, port = broker.bootstrap.split(":")

    async def main():
        ch = BrokerChannel(host, int(port))
        try:
            await ch.request(MetadataRequest(topics=[]))
            direct, fed = [0], [0]

            class Counting(FrameReader):
                def direct_received(self, n):
                    direct[0] += n
                    super().direct_received(n)

                def feed(self, data):
                    fed[0] += len(data)
                    super().feed(data)

            ch._protocol.frames = Counting(ch.max_frame_size)  # idle between answers
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
                        topic=topic,
                        topic_id=topic_id,
                        partitions=[
                            FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=32 << 20)
                        ],
                    )
                ],
            )
            resp = await ch.request(req)
            data = resp.responses[0].partitions[0].records
            assert len(data) > 4_000_000
            assert sum(b.record_count for b in iter_batches(data, validate=True)) == 4000
            assert direct[0] >= len(data) - 256 * 1024 and fed[0] < 300 * 1024, (direct, fed, len(data))
            # and the channel goes on: small answers after the large one
            assert (await ch.request(MetadataRequest(topics=[]))).brokers
        finally:
            await ch.close()

    run(main())
