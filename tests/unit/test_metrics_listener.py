"""The metrics listener in-process (broker/metrics/http.py): what it answers to what, and
register_collector, the place other parts of the broker (transactions, authentication)
add their metrics."""
import asyncio

from prometheus_client.core import CounterMetricFamily
from prometheus_client.parser import text_string_to_metric_families

import broker.metrics as metrics
from broker.config import BrokerConfig
from broker.server.broker import Broker
from tests.support.ports import free_port


class TransactionsCollector:
    def __init__(self, broker):
        self.broker = broker

    def collect(self):
        yield CounterMetricFamily("kafka_coordinator_transaction_commits", "test: a collector registered from "
                                  "outside broker/metrics", value=self.broker.broker_id + 41)


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


def test_listener_answers_and_registered_collectors_join(tmp_path):
    async def scenario():
        port, mport = free_port(), free_port()
        config = BrokerConfig({"broker.id": 1, "log.dirs": str(tmp_path / "data"),
                               "listeners": f"PLAINTEXT://127.0.0.1:{port}", "metrics.listener": f"127.0.0.1:{mport}"})
        metrics.register_collector(TransactionsCollector)
        metrics.register_collector(TransactionsCollector)          # once only
        broker = Broker(config)
        try:
            await asyncio.wait_for(broker.start(), 60)
            status, headers, body = await get(mport, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert int(headers["Content-Length"]) == len(body)
            # what Prometheus asks for first: OpenMetrics
            status, headers, om = await get(mport, b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text;"
                                                   b"version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n\r\n")
            assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
            assert om.endswith(b"# EOF\n") and b"kafka_coordinator_transaction_commits_total 42.0" in om
            families = {f.name: f for f in text_string_to_metric_families(body.decode())}
            assert [s.value for s in families["kafka_coordinator_transaction_commits"].samples] == [42.0]
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
            metrics._FACTORIES.remove(TransactionsCollector)
            await broker.shutdown()

    asyncio.run(scenario())


def test_a_taken_metrics_port_stops_the_broker_before_it_serves(tmp_path):
    async def scenario():
        taken = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        mport = taken.sockets[0].getsockname()[1]
        config = BrokerConfig({"broker.id": 1, "log.dirs": str(tmp_path / "data"),
                               "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
                               "metrics.listener": f"127.0.0.1:{mport}"})
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
