"""The metrics listener in-process (broker/metrics/http.py): what it answers to what, and
that each broker's figures are its own when several run in one process (nothing is
attached to a class or a module: each component counts for its own broker)."""

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from broker.client import Cluster, Producer
from broker.config import BrokerConfig
from broker.server.broker import Broker
from tests.support.ports import free_port


async def get(port: int, request: bytes) -> tuple[int, dict, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def test_listener_answers(tmp_path):
    async def scenario():
        port, mport = free_port(), free_port()
        config = BrokerConfig(
            {
                "broker.id": 1,
                "log.dirs": str(tmp_path / "data"),
                "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "metrics.listener": f"127.0.0.1:{mport}",
            }
        )
        broker = Broker(config)
        try:
            await asyncio.wait_for(broker.start(), 60)
            status, headers, body = await get(mport, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert int(headers["Content-Length"]) == len(body)
            # what Prometheus asks for first: OpenMetrics
            status, headers, om = await get(
                mport,
                b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;"
                b"version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n\r\n",
            )
            assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
            assert om.endswith(b"# EOF\n") and b"kafka_server_isr_shrinks_total 0.0" in om
            families = {f.name: f for f in text_string_to_metric_families(body.decode())}
            assert [s.value for s in families["kafka_controller_active_controller_count"].samples] == [1.0]
            status, headers, body = await get(mport, b"HEAD /metrics HTTP/1.1\r\n\r\n")
            assert status == 200 and int(headers["Content-Length"]) > 0 and body == b""
            status, headers, body = await get(mport, b"GET /status.json HTTP/1.1\r\n\r\n")
            assert status == 200 and headers["Content-Type"] == "application/json" and b'"broker_id":1' in body
            status, _, body = await get(mport, b"GET / HTTP/1.1\r\n\r\n")
            assert status == 200 and body.startswith(b"<!doctype html>") and b"kbroker broker 1" in body
            assert (await get(mport, b"GET /nothing HTTP/1.1\r\n\r\n"))[0] == 404
            assert (await get(mport, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"))[0] == 405
            assert (await get(mport, b"nonsense\r\n\r\n"))[0] == 400
        finally:
            await broker.shutdown()

    asyncio.run(scenario())


def test_a_taken_metrics_port_stops_the_broker_before_it_serves(tmp_path):
    async def scenario():
        taken = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        mport = taken.sockets[0].getsockname()[1]
        config = BrokerConfig(
            {
                "broker.id": 1,
                "log.dirs": str(tmp_path / "data"),
                "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
                "metrics.listener": f"127.0.0.1:{mport}",
            }
        )
        broker = Broker(config)
        try:
            await broker.start()
        except OSError as exc:
            assert str(exc) == f"metrics.listener: cannot listen on 127.0.0.1:{mport}: Address already in use"
        else:
            raise AssertionError("the broker started")
        finally:
            await broker.store.close()
            taken.close()

    asyncio.run(scenario())


def _flushes(body: bytes) -> float:
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    return next(
        s.value
        for s in families["kafka_log_flush_time_seconds"].samples
        if s.name == "kafka_log_flush_time_seconds_count"
    )


def test_each_broker_counts_its_own_flushes(tmp_path):
    """Two brokers in one process, an fsync after every record on the first: its flush
    time histogram counts them, the second's stays at 0 (the flush observer was once a
    class attribute of Log: the last broker built got every broker's flushes)."""

    async def scenario():
        brokers, mports = [], []
        for i in (1, 2):
            mports.append(free_port())
            brokers.append(
                Broker(
                    BrokerConfig(
                        {
                            "broker.id": i,
                            "log.dirs": str(tmp_path / f"data-{i}"),
                            "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
                            "metrics.listener": f"127.0.0.1:{mports[-1]}",
                            "log.flush.interval.messages": 1,
                        }
                    )
                )
            )
        try:
            for b in brokers:
                await asyncio.wait_for(b.start(), 60)
            first = brokers[0]

            def produce() -> None:
                bootstrap = f"127.0.0.1:{first.server.port}"
                with Cluster(bootstrap) as c:
                    c.create_topic("flushed", 1, 1)
                with Producer(bootstrap, acks=1, linger_ms=0) as p:
                    for n in range(3):
                        p.send("flushed", b"r%d" % n, partition=0)
                        p.flush()

            await asyncio.get_running_loop().run_in_executor(None, produce)
            counts = []
            for _ in range(100):  # the fsync runs in a worker thread: bounded wait
                counts = [_flushes((await get(m, b"GET /metrics HTTP/1.1\r\n\r\n"))[2]) for m in mports]
                if counts[0] >= 1:
                    break
                await asyncio.sleep(0.05)
            assert counts[0] >= 1 and counts[1] == 0, counts
        finally:
            for b in brokers:
                await b.shutdown()

    asyncio.run(scenario())
