"""SaslAuthenticate (36): one SASL token of the mechanism the handshake picked
(broker/security/sasl.py), the server's answer back.

Authenticated: the connection's principal is the SASL user (User:<name>); from v1 the
answer says the session's lifetime (connections.max.reauth.ms, an OAUTHBEARER token's
expiry: KIP-368). Failed: SASL_AUTHENTICATION_FAILED with Kafka's message (the same for
an unknown user and a wrong password), answered after
connection.failed.authentication.delay.ms (a guesser gets few tries per connection
and second), written to the audit log with the reason, and the connection closes. On a
listener without SASL, or out of turn: ILLEGAL_SASL_STATE, as Kafka's KafkaApis."""

import asyncio
from collections.abc import Awaitable

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from broker.security.sasl import AUTHENTICATE, COMPLETE, SaslAuthenticationError
from broker.server.context import RequestContext

API_KEY = ApiKey.SASL_AUTHENTICATE
MIN_VERSION, MAX_VERSION = 0, 2


def handle(
    ctx: RequestContext, request: SaslAuthenticateRequest
) -> SaslAuthenticateResponse | Awaitable[SaslAuthenticateResponse]:
    conn = ctx.connection
    auth = conn.authenticator
    if auth is None or auth.state != AUTHENTICATE:
        if auth is not None:
            conn.server.audit_failure(conn, "SaslAuthenticate without a SaslHandshake")
            conn.close_when_sent()
        return SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message="SaslAuthenticate request received after successful authentication"
            if auth is None
            else "SaslAuthenticate request received out of turn",
        )
    try:
        answer, lifetime_ms = auth.authenticate(bytes(request.auth_bytes), ctx.received)
    except SaslAuthenticationError as exc:
        conn.server.audit_failure(conn, f"SASL {auth.mechanism} authentication failed: {exc.reason}")
        return _refuse(ctx, exc.message)
    if auth.principal is not None and auth.state == COMPLETE:
        conn.authenticated(auth.principal)
    return SaslAuthenticateResponse(
        error_code=ErrorCode.NONE, error_message=None, auth_bytes=answer, session_lifetime_ms=lifetime_ms
    )


async def _refuse(ctx: RequestContext, message: str) -> SaslAuthenticateResponse:
    delay_ms = ctx.services.config["connection.failed.authentication.delay.ms"]
    if delay_ms > 0:
        await asyncio.sleep(delay_ms / 1000)
    ctx.connection.close_when_sent()
    return SaslAuthenticateResponse(
        error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=message, auth_bytes=b""
    )
