"""BrokerMetrics: one broker's Prometheus registry and its HTTP listener (the package
docstring says how the figures get here)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector

from broker.metrics.collectors import BrokerCollector, LoopMonitor

if TYPE_CHECKING:
    from broker.metrics.http import MetricsServer
    from broker.metrics.webconfig import WebConfig
    from broker.server.broker import Broker


class BrokerMetrics:
    """One broker's registry and (once started) its HTTP listener. It attaches nothing to
    the broker: the collector reads what the broker's components offer."""

    def __init__(self, broker: Broker, host: str, port: int, web: WebConfig | None = None):
        self.broker = broker
        self.host = host
        self.port = port
        #: TLS and basic authentication (metrics.listener.web.config.file), None: neither
        self.web = web
        #: the event loop's idle time: the metrics' own instrument (the loop is asyncio's)
        self.loop = LoopMonitor()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker, self.loop))
        ProcessCollector(registry=self.registry)
        self.server: MetricsServer | None = None

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Binds the listener (OSError naming the address if it cannot) and starts timing
        the event loop's waits."""
        from broker.metrics.http import MetricsServer

        self.loop.install(loop)
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
