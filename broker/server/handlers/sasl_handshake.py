"""SaslHandshake (17): the client picks a SASL mechanism (broker/security/sasl.py).

On a SASL listener, before authentication or to re-authenticate (KIP-368): the
mechanism is one of `sasl.enabled.mechanisms` (and, to re-authenticate, the session's),
else UNSUPPORTED_SASL_MECHANISM with the enabled ones, and the connection closes, as
Kafka's. Elsewhere (a listener without SASL) ILLEGAL_SASL_STATE, as Kafka's KafkaApis.
Version 1 only: version 0 is followed by raw SASL tokens outside Kafka's framing, which
Kafka 4 no longer serves either."""

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from broker.server.context import RequestContext

API_KEY = ApiKey.SASL_HANDSHAKE
MIN_VERSION, MAX_VERSION = 1, 1


def handle(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    conn = ctx.connection
    auth = conn.authenticator
    if auth is None:
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    enabled = list(auth.settings.mechanisms)
    if not auth.handshake(request.mechanism):
        conn.server.audit_failure(conn, f"SASL mechanism {request.mechanism!r} refused (enabled: {', '.join(enabled)})")
        conn.close_when_sent()
        return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
    return SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=enabled)
