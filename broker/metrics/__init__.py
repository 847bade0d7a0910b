"""The broker's metrics and status page, on the HTTP listener `metrics.listener=HOST:PORT`.

    GET /metrics       Prometheus text format (prometheus_client renders it)
    GET /              the status page: server-rendered HTML, a small inline script
                       redraws its charts live (nothing loaded from anywhere else)
    GET /status.json   the same figures for scripts

With `metrics.listener.web.config.file`, a web configuration file of Prometheus'
exporters, the listener speaks TLS and asks every request for basic authentication
(broker/metrics/webconfig.py).

Off unless metrics.listener is set: then the hot path keeps no figures at all (each
hook is one `is None` test). On, requests are counted and timed per request, appends
and fetches per partition of a request, never per record; the rest (partitions, ISR,
logs, controller, groups, ZooKeeper) is read when scraped. docs/observability.md lists
the metrics and their Kafka counterparts.

Other parts of the broker add their own metrics with `register_collector(factory)`:
`factory(broker)` returns a prometheus_client collector (an object with collect()),
registered on each broker's registry when its metrics start. This is where the
transaction coordinator's and authentication's metrics join (Kafka's
TransactionCoordinator and SASL/authentication metrics), once those exist.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, ProcessCollector

from broker.log.log import Log
from broker.metrics.collectors import BrokerCollector, LoopMonitor
from broker.metrics.stats import Histogram, RequestStats, TopicStats

if TYPE_CHECKING:
    from broker.metrics.http import MetricsServer
    from broker.metrics.webconfig import WebConfig
    from broker.server.broker import Broker

log = logging.getLogger(__name__)

#: collector factories other parts of the broker registered (register_collector)
_FACTORIES: list[Callable[[Broker], Any]] = []


def register_collector(factory: Callable[[Broker], Any]) -> None:
    """Adds a collector to every broker's metrics started from now on: `factory(broker)`
    returns a prometheus_client collector (collect() yielding metric families, e.g.
    CounterMetricFamily). Name its metrics after Kafka's (kafka_<group>_<name>) and
    list them in docs/observability.md."""
    if factory not in _FACTORIES:
        _FACTORIES.append(factory)


class BrokerMetrics:
    """One broker's figures, its registry and (once started) its HTTP listener."""

    def __init__(self, broker: Broker, host: str, port: int, web: WebConfig | None = None):
        self.broker = broker
        self.host = host
        self.port = port
        #: TLS and basic authentication (metrics.listener.web.config.file), None: neither
        self.web = web
        self.requests = RequestStats()
        self.topics = TopicStats()
        self.loop = LoopMonitor()
        self.flush_times = Histogram()
        self.zk_latency = Histogram()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker, self.requests, self.topics, self.loop, self.flush_times,
                                               self.zk_latency))
        ProcessCollector(registry=self.registry)
        # the hot path's hooks (Any: the broker is still being built)
        parts: Any = broker
        parts.server.request_stats = self.requests
        parts.replicas.topic_stats = self.topics
        Log.flush_observer = self.flush_times.observe
        self.server: MetricsServer | None = None

    async def start(self, loop: Any) -> None:
        """Binds the listener (OSError naming the address if it cannot) and hooks what
        exists only once the broker runs (the event loop, ZooKeeper's session)."""
        from broker.metrics.http import MetricsServer
        self.loop.install(loop)
        session = getattr(self.broker._store, "_session", None)
        if session is not None and hasattr(session, "latency_observer"):
            session.latency_observer = self.zk_latency.observe
        for factory in _FACTORIES:
            self.registry.register(factory(self.broker))
        self.server = MetricsServer(self, self.host, self.port, self.web)
        await self.server.start()
        self.port = self.server.port

    @property
    def scheme(self) -> str:
        """https when the listener speaks TLS."""
        return "https" if self.web is not None and self.web.ssl_context is not None else "http"

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()
        if Log.flush_observer == self.flush_times.observe:
            Log.flush_observer = None
