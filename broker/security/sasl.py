"""SASL as Kafka's brokers speak it (SaslServerAuthenticator), sans I/O, and the JAAS
configuration of its mechanisms.

A SASL listener's connection has an Authenticator. Before authentication completes only
ApiVersions, SaslHandshake and SaslAuthenticate are served (anything else closes the
connection, as Kafka's). SaslHandshake picks a mechanism among `sasl.enabled.mechanisms`
(UNSUPPORTED_SASL_MECHANISM and the connection closes otherwise); SaslAuthenticate
carries the mechanism's tokens:

    PLAIN          one token "authzid NUL user NUL password", checked against the
                   user_<name>="<password>" options of the listener's PLAIN JAAS config
    SCRAM-SHA-*    client-first, then client-final (scram.py), against the salted
                   credentials in the metadata store
    OAUTHBEARER    one token "n,,\\x01auth=Bearer <JWT>\\x01\\x01", the JWT checked
                   against the JWKS file (oauthbearer.py)

A failure is SASL_AUTHENTICATION_FAILED with Kafka's message, the same for an unknown
user and a wrong password, answered after `connection.failed.authentication.delay.ms`;
then the connection closes. Re-authentication (KIP-368): with
`connections.max.reauth.ms` (or an OAUTHBEARER token's expiry) the SaslAuthenticate
answer tells the session's lifetime; the client authenticates again on the same
connection (same mechanism, same principal) before it ends, and a request after it ends
closes the connection. A session never outlives its credential: a token that expired
already (accepted within the validator's clock skew) gives a lifetime of 0 and a session
that ended when it started, as Kafka's (session_lifetime_ms).

JAAS (`listener.name.<listener>.<mechanism>.sasl.jaas.config`, Kafka's only source of
server-side SASL settings here):

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";

username/password are what this broker authenticates with to the others (on the
inter-broker listener); user_<name> are PLAIN's users.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.security.scram import MECHANISMS as SCRAM_MECHANISMS, ScramCredential, ScramError, ScramServer

API_SASL_HANDSHAKE = 17
API_API_VERSIONS = 18
API_SASL_AUTHENTICATE = 36
#: what a client may send before its authentication completes
BEFORE_AUTHENTICATION = frozenset({API_API_VERSIONS, API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE})

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


class SaslAuthenticationError(Exception):
    """Authentication failed: the client gets SASL_AUTHENTICATION_FAILED with `message`;
    `reason` (for the audit log only) says why."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.message = message
        self.reason = reason or message


# ---------------------------------------------------------------------------- JAAS

_JAAS_TOKEN = re.compile(r'\s*(?:([A-Za-z0-9_.$-]+)\s*=\s*("(?:\\.|[^"\\])*"|[^\s;"]+)|([A-Za-z0-9_.$-]+)|(;))')


@dataclass(frozen=True)
class JaasConfig:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def parse_jaas(text: str) -> JaasConfig:
    """One login module entry: `<class> <flag> key=value ... ;` (values quoted or not).
    ValueError with a one-line message when malformed."""
    text = text.strip()
    pos = 0
    words: list[str] = []
    options: dict[str, str] = {}
    ended = False
    while pos < len(text):
        m = _JAAS_TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"sasl.jaas.config: cannot read {text[pos : pos + 40]!r}")
        pos = m.end()
        if ended:
            raise ValueError("sasl.jaas.config: one login module only (text after ';')")
        if m.group(4):
            ended = True
        elif m.group(1):
            if len(words) != 2:
                raise ValueError("sasl.jaas.config: expected '<LoginModule class> required key=value ... ;'")
            value = m.group(2)
            if value.startswith('"'):
                value = re.sub(r"\\(.)", r"\1", value[1:-1])
            options[m.group(1)] = value
        else:
            words.append(m.group(3))
            if len(words) > 2:
                raise ValueError(f"sasl.jaas.config: unexpected {m.group(3)!r}")
    if len(words) != 2 or not ended:
        raise ValueError("sasl.jaas.config: expected '<LoginModule class> required key=value ... ;'")
    if words[1] not in ("required", "requisite", "sufficient", "optional"):
        raise ValueError(f"sasl.jaas.config: unknown control flag {words[1]!r}")
    return JaasConfig(words[0], words[1], options)


# ---------------------------------------------------------------------------- mechanisms


class PlainServer:
    """RFC 4616: "authzid NUL authcid NUL passwd"; the authorization id, if any, must be
    the user (as Kafka's PlainSaslServer)."""

    complete = False
    user: str | None = None

    def __init__(self, users: dict[str, str]):
        self.users = users

    def evaluate(self, token: bytes) -> bytes:
        import hmac

        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationError(_FAILED_PLAIN, "malformed PLAIN token")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationError(_FAILED_PLAIN, "PLAIN token not UTF-8") from None
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified", "no user name")
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username",
                "authorization id differs",
            )
        expected = self.users.get(user)
        # compared in constant time, also for an unknown user
        ok = hmac.compare_digest((expected or "").encode(), password.encode()) and expected is not None
        if not ok:
            raise SaslAuthenticationError(
                _FAILED_PLAIN, f"PLAIN: {'wrong password' if expected else 'unknown user'} for {user!r}"
            )
        self.user = user
        self.complete = True
        return b""


_FAILED_PLAIN = "Authentication failed: Invalid username or password"


def plain_token(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()


# ---------------------------------------------------------------------------- the session


class SaslState(enum.Enum):
    """An Authenticator's states (Kafka's SaslServerAuthenticator.SaslState, without
    the I/O ones)::

        HANDSHAKE --SaslHandshake (mechanism enabled)--> AUTHENTICATE --last token--> COMPLETE
        COMPLETE --SaslHandshake (same mechanism: KIP-368 re-authentication)--> AUTHENTICATE
        any --a refused handshake or token--> FAILED (the connection is closed)

    Before COMPLETE, and while a re-authentication is under way, a connection may send
    only ApiVersions, SaslHandshake and SaslAuthenticate (``Authenticator.allows``)."""

    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


HANDSHAKE, AUTHENTICATE, COMPLETE, FAILED = (
    SaslState.HANDSHAKE,
    SaslState.AUTHENTICATE,
    SaslState.COMPLETE,
    SaslState.FAILED,
)


@dataclass
class SaslSettings:
    """A SASL listener's mechanisms and what they check against."""

    mechanisms: list[str]
    plain_users: dict[str, str] = field(default_factory=dict)
    scram_lookup: Callable[[str, str], ScramCredential | None] = lambda user, mechanism: None
    oauth_validator: Any = None  # oauthbearer.TokenValidator, when OAUTHBEARER is enabled
    reauth_ms: dict[str, int] = field(default_factory=dict)  # mechanism -> connections.max.reauth.ms
    max_receive_size: int = 524288


class Authenticator:
    """One connection's SASL state (Kafka's SaslServerAuthenticator, without the I/O)."""

    def __init__(self, settings: SaslSettings):
        self.settings = settings
        self.state = HANDSHAKE
        self.mechanism: str | None = None
        self.principal: str | None = None  # "User:<name>" once authenticated
        self.session_expires_at: float | None = None  # the loop's clock (seconds), None: never
        self._server: Any = None
        self._reauthenticating = False

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def allows(self, api_key: int, now: float) -> bool:
        """Whether a request may be handled now: before authentication only the SASL
        requests and ApiVersions; after it anything, until the session ends (then only a
        re-authentication)."""
        if api_key in BEFORE_AUTHENTICATION:
            return True
        if self.principal is None or self._reauthenticating:
            return False
        return self.session_expires_at is None or now < self.session_expires_at

    def handshake(self, mechanism: str) -> bool:
        """SaslHandshake: True if the mechanism is enabled (and, on re-authentication,
        the one of the session)."""
        if self.state not in (HANDSHAKE, COMPLETE):
            return False
        if mechanism not in self.settings.mechanisms or (self.mechanism is not None and mechanism != self.mechanism):
            self.state = FAILED
            return False
        self._reauthenticating = self.state == COMPLETE
        self.mechanism = mechanism
        self.state = AUTHENTICATE
        self._server = self._new_server(mechanism)
        return True

    def _new_server(self, mechanism: str) -> Any:
        s = self.settings
        if mechanism == "PLAIN":
            return PlainServer(s.plain_users)
        if mechanism in SCRAM_MECHANISMS:
            return ScramServer(mechanism, lambda user: s.scram_lookup(user, mechanism))
        if mechanism == "OAUTHBEARER":
            from broker.security.oauthbearer import OAuthBearerServer

            return OAuthBearerServer(s.oauth_validator)
        raise AssertionError(mechanism)

    def authenticate(self, token: bytes, now: float) -> tuple[bytes, int]:
        """SaslAuthenticate: the server's answer and the session lifetime in ms, as the
        answer says it (meaningful once complete; 0: no limit, or a session that ended at
        once: session_expires_at tells them apart, as in Kafka's answer). SaslAuthenticationError
        when it fails (the connection is then closed)."""
        if self.state != AUTHENTICATE:
            raise SaslAuthenticationError("Unexpected SaslAuthenticate request", "SaslAuthenticate out of turn")
        if len(token) > self.settings.max_receive_size:
            self.state = FAILED
            raise SaslAuthenticationError("Invalid SASL token size", f"a token of {len(token)} bytes")
        server = self._server
        try:
            answer = server.evaluate(token)
        except ScramError as exc:
            self.state = FAILED
            raise SaslAuthenticationError(_failed(self.mechanism), f"{self.mechanism}: {exc}") from None
        except SaslAuthenticationError:
            self.state = FAILED
            raise
        if not server.complete:
            return answer, 0
        principal = "User:" + server.user
        if self._reauthenticating and principal != self.principal:
            self.state = FAILED
            raise SaslAuthenticationError(
                "Cannot change principals during re-authentication",
                f"re-authentication as {principal} instead of {self.principal}",
            )
        self.principal = principal
        self.state = COMPLETE
        self._reauthenticating = False
        expiry = getattr(server, "expires_at_ms", None)  # an OAUTHBEARER token's expiry
        lifetime_ms = session_lifetime_ms(self.settings.reauth_ms.get(self.mechanism or "", 0), expiry)
        self.session_expires_at = None if lifetime_ms is None else now + lifetime_ms / 1000
        return answer, lifetime_ms or 0


def session_lifetime_ms(reauth_ms: int, credential_expiry_ms: int | None, now_ms: float | None = None) -> int | None:
    """How long a session may last (Kafka's SaslServerAuthenticator): at most
    `reauth_ms` (connections.max.reauth.ms; 0 or less: no limit) and never past the
    credential's expiry (ms since the epoch; None: the credential does not expire). None:
    no limit. A session never outlives its credential: a token that expired already (a
    validator accepts one within its clock skew) gives a lifetime of 0, a session that has
    ended when it starts (the next request but a re-authentication closes the
    connection), never one without a limit."""
    if credential_expiry_ms is None:
        return reauth_ms if reauth_ms > 0 else None
    if now_ms is None:
        import time

        now_ms = time.time() * 1000
    left = max(int(credential_expiry_ms - now_ms), 0)
    return min(left, reauth_ms) if reauth_ms > 0 else left


def _failed(mechanism: str | None) -> str:
    """Kafka's SaslServerAuthenticator message for invalid credentials."""
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


class SaslClient:
    """The client side of PLAIN and SCRAM, one step per SaslAuthenticate:
    `step(None)` is the first token; `step(server answer)` the next one, or None when
    the exchange is over (SCRAM: after checking the server's signature)."""

    def __init__(self, mechanism: str, user: str, password: str):
        from broker.security.scram import ScramClient

        self.mechanism = mechanism
        self._scram = ScramClient(mechanism, user, password) if mechanism in SCRAM_MECHANISMS else None
        self._plain = plain_token(user, password) if mechanism == "PLAIN" else None
        if self._scram is None and self._plain is None:
            raise ValueError(f"SASL mechanism {mechanism} is not supported by this client")
        self._steps = 0

    def step(self, answer: bytes | None) -> bytes | None:
        self._steps += 1
        if self._plain is not None:
            return self._plain if self._steps == 1 else None
        scram = self._scram
        assert scram is not None
        if self._steps == 1:
            return scram.first()
        if self._steps == 2:
            assert answer is not None
            return scram.final(answer)
        assert answer is not None
        scram.verify(answer)
        return None
