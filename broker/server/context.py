"""What a request handler sees besides its request: the RequestContext protocol that
every handler's signature names (`handle(ctx: RequestContext, request: XRequest)`).
server.RequestContext is its one implementation; a test may pass any object with these
attributes. The broker itself is out of reach: `ctx.services` is the narrow
BrokerServices protocol (server/services.py).
"""
from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

from broker.protocol._runtime import Message

if TYPE_CHECKING:
    from broker.server.connection import Connection
    from broker.server.services import BrokerServices


class RequestContext(Protocol):
    @property
    def services(self) -> BrokerServices: ...

    @property
    def connection(self) -> Connection: ...

    @property
    def header(self) -> Any:
        """The request's decoded RequestHeader (correlation id, client id ...)."""
        ...

    @property
    def api_version(self) -> int: ...

    @property
    def received(self) -> float:
        """When the request's frame was read (the event loop's clock)."""
        ...

    #: a handler that knows its response holds no error code sets False (the metrics then
    #: need not look through it); None: unknown
    errors: bool | None


#: what handle() returns: the response, None for no response (Produce with acks=0), or an
#: awaitable of either when the answer must wait (long poll, acks=all, group commit)
HandlerResult = Message | None | Awaitable[Message | None]
