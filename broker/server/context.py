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
    from broker.security.api_rights import Right
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
    def listener_name(self) -> str:
        """The listener the request came in on (Metadata answers with its endpoints)."""
        ...

    @property
    def principal(self) -> str:
        """Who the client is: "User:<name>" (SASL, a TLS certificate) or "User:ANONYMOUS"."""
        ...

    def has_right(self, right: Right, name: str) -> bool:
        """Whether the ACLs give the request's principal `right` on the resource `name`
        (always, without an authorizer): `right` is one of the API's row in API_RIGHTS
        (`RIGHTS.group`, broker/security/api_rights.py), whose operation and resource type
        are checked, and whose refusal is audited if the row says so."""
        ...

    def has_right_on_some(self, right: Right) -> bool:
        """Whether the ACLs give `right` on some resource of its type (never audited)."""
        ...

    @property
    def received(self) -> float:
        """When the request's frame was read (the event loop's clock)."""
        ...

    #: a handler that knows its response holds no error code sets False (the metrics then
    #: need not look through it); None: unknown
    errors: bool | None

    #: the throttle time a quota asks of the answer (ms; the Fetch handler sets it for a
    #: consumer's bytes, the server for the rest)
    throttle_ms: int


#: what handle() returns: the response, None for no response (Produce with acks=0), or an
#: awaitable of either when the answer must wait (long poll, acks=all, group commit)
HandlerResult = Message | None | Awaitable[Message | None]


#: what a direct path (handlers/__init__.py DIRECT_PATHS) answered: the answer's frames,
#: the client id of its header, and the response when it holds an error code (the
#: server's metrics count them; None: no error). A tuple: built on every Produce.
Answered = tuple[list[Any], str | None, Message | None]

#: what a direct path returns: Answered; or, left to the general path with nothing done,
#: the request as it decoded it (the general path goes on with it, not decoding it again),
#: or None when it did not decode it
DirectResult = Answered | Message | None
