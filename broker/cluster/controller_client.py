"""A broker's requests to the active controller (Kafka's BrokerToControllerChannelManager):
AlterPartition from leaders, ControlledShutdown at shutdown.

The controller is whoever the metadata cache last named (UpdateMetadata carries it). The
request goes over a BrokerChannel to that broker, or straight to this broker's own
controller when it is the one (`local`). NOT_CONTROLLER or an unreachable controller:
wait a little (the next UpdateMetadata may name another) and try again, until the
deadline.

All methods run on the event loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from broker.cluster.cache import MetadataCache
from broker.cluster.channel import BrokerChannel, ChannelError
from broker.cluster.metadata import BrokerInfo
from broker.protocol._runtime import Message
from broker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1


class ControllerUnavailable(Exception):
    """No controller answered before the deadline."""


class ControllerClient:
    def __init__(
        self,
        broker_id: int,
        metadata: MetadataCache,
        local: Callable[[Message], Awaitable[Message]],
        request_timeout: float = 30.0,
    ):
        self.broker_id = broker_id
        self.metadata = metadata
        self.local = local
        self.request_timeout = request_timeout
        self._channel: BrokerChannel | None = None
        self._channel_to: tuple[int, str, int] | None = None

    async def request(self, request: Message, timeout: float | None = None) -> Any:
        """The controller's answer; ControllerUnavailable after `timeout` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.request_timeout if timeout is None else timeout)
        while True:
            cid = self.metadata.controller_id
            try:
                if cid == self.broker_id:
                    resp = await self.local(request)
                elif cid >= 0 and (b := self.metadata.broker(cid)) is not None:
                    resp = await self._remote(cid, b, request, max(deadline - loop.time(), 0.1))
                else:
                    resp = None
            except ChannelError as exc:
                log.debug("controller %d unreachable: %s", cid, exc)
                resp = None
            if resp is not None and getattr(resp, "error_code", 0) != ErrorCode.NOT_CONTROLLER:
                return resp
            if loop.time() + RETRY_BACKOFF_S > deadline:
                raise ControllerUnavailable(
                    f"no controller answered within {self.request_timeout if timeout is None else timeout:.1f} s"
                )
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _remote(self, cid: int, b: BrokerInfo, request: Message, timeout: float) -> Any:
        to = (cid, b.host, b.port)
        if self._channel is None or self._channel_to != to:
            if self._channel is not None:
                await self._channel.close()
            self._channel = BrokerChannel(
                b.host, b.port, client_id=f"broker-{self.broker_id}-to-controller", request_timeout=self.request_timeout
            )
            self._channel_to = to
        return await self._channel.request(request, timeout=timeout)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
