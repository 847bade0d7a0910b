"""OAUTHBEARER (RFC 7628) with Kafka's KIP-768 validation: the client's bearer token is a
JWT, signed by one of the keys of a JWKS (`sasl.oauthbearer.jwks.endpoint.url`, a
file: URL here, read again every `sasl.oauthbearer.jwks.endpoint.refresh.ms`), with an
expiry, the principal in `sasl.oauthbearer.sub.claim.name` (sub), and, when configured,
the audience (`sasl.oauthbearer.expected.audience`) and issuer
(`sasl.oauthbearer.expected.issuer`), allowing `sasl.oauthbearer.clock.skew.seconds`.

Signatures are checked by PyJWT (with `cryptography` for RSA and EC keys): the
maintained JOSE library of Python, never hand-rolled; only asymmetric algorithms are
accepted (RS*, PS*, ES*, EdDSA), never `none` or HMAC with a public key.

The client's first (and only) message: gs2 header, then key=value pairs separated by
\\x01, "auth=Bearer <token>" among them, ended by \\x01\\x01. The session ends at the
token's expiry (KIP-368: the client re-authenticates with a fresh token); a token that
expired already, accepted within the clock skew, gives a session that has ended already
(sasl.py's session_lifetime_ms).
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from typing import Any

from broker.config import BrokerConfig
from broker.security.sasl import SaslAuthenticationError

ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
#: Kafka's validator callback handler classes (3.x and 4.x names), accepted in
#: listener.name.<name>.oauthbearer.sasl.server.callback.handler.class
VALIDATOR_CLASSES = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
)


class TokenValidator:
    def __init__(
        self,
        jwks_path: str,
        *,
        audience: list[str] | None = None,
        issuer: str | None = None,
        sub_claim: str = "sub",
        scope_claim: str = "scope",
        clock_skew_s: int = 30,
        refresh_ms: int = 3600000,
    ):
        self.jwks_path = jwks_path
        self.audience = audience or None
        self.issuer = issuer
        self.sub_claim = sub_claim
        self.scope_claim = scope_claim
        self.clock_skew_s = clock_skew_s
        self.refresh_s = refresh_ms / 1000
        self._keys: dict[str | None, Any] = {}
        self._loaded_at = 0.0
        self._mtime = 0.0
        self._load()

    @classmethod
    def from_config(cls, config: BrokerConfig, listener: str) -> TokenValidator:
        """ValueError (one line naming the key) when the JWKS cannot be used."""
        handler = config.mechanism_value(listener, "OAUTHBEARER", "sasl.server.callback.handler.class")
        if handler is not None and handler not in VALIDATOR_CLASSES:
            raise ValueError(
                f"listener.name.{listener.lower()}.oauthbearer.sasl.server.callback.handler.class: "
                f"{handler} is not Kafka's JWT validator ({VALIDATOR_CLASSES[0]})"
            )
        url = config.listener_value(listener, "sasl.oauthbearer.jwks.endpoint.url")
        if not url:
            raise ValueError(
                "sasl.oauthbearer.jwks.endpoint.url: OAUTHBEARER needs the JWKS of the token signers "
                "(Kafka's unsecured tokens are not accepted)"
            )
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme != "file":
            raise ValueError(
                f"sasl.oauthbearer.jwks.endpoint.url: {url}: only file: URLs are read (fetch the JWKS into a file)"
            )
        return cls(
            urllib.parse.unquote(parsed.path),
            audience=config.listener_value(listener, "sasl.oauthbearer.expected.audience"),
            issuer=config.listener_value(listener, "sasl.oauthbearer.expected.issuer"),
            sub_claim=config.listener_value(listener, "sasl.oauthbearer.sub.claim.name"),
            scope_claim=config.listener_value(listener, "sasl.oauthbearer.scope.claim.name"),
            clock_skew_s=config.listener_value(listener, "sasl.oauthbearer.clock.skew.seconds"),
            refresh_ms=config.listener_value(listener, "sasl.oauthbearer.jwks.endpoint.refresh.ms"),
        )

    def _load(self) -> None:
        import jwt

        try:
            with open(self.jwks_path, encoding="utf-8") as f:
                data = json.load(f)
            keys = jwt.PyJWKSet.from_dict(data).keys
        except (OSError, ValueError, jwt.exceptions.PyJWTError) as exc:
            raise ValueError(
                f"sasl.oauthbearer.jwks.endpoint.url: cannot read the JWKS {self.jwks_path}: {exc}"
            ) from None
        self._keys = {k.key_id: k for k in keys}
        self._loaded_at = time.monotonic()
        self._mtime = os.stat(self.jwks_path).st_mtime

    def _refresh(self) -> None:
        if time.monotonic() - self._loaded_at < self.refresh_s:
            return
        try:
            if os.stat(self.jwks_path).st_mtime != self._mtime:
                self._load()
            else:
                self._loaded_at = time.monotonic()
        except (OSError, ValueError):
            self._loaded_at = time.monotonic()  # keep the keys known; try again later

    def validate(self, token: str) -> tuple[str, int]:
        """(principal name, expiry in ms since the epoch); SaslAuthenticationError."""
        import jwt

        self._refresh()
        try:
            header = jwt.get_unverified_header(token)
            key = self._keys.get(header.get("kid"))
            if key is None and header.get("kid") is None and len(self._keys) == 1:
                key = next(iter(self._keys.values()))
            if key is None:
                raise jwt.exceptions.InvalidKeyError(f"no key {header.get('kid')!r} in the JWKS")
            claims = jwt.decode(
                token,
                key.key,
                algorithms=ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.clock_skew_s,
                options={"require": ["exp", self.sub_claim], "verify_aud": self.audience is not None},
            )
        except jwt.exceptions.PyJWTError as exc:
            raise SaslAuthenticationError(
                f"Authentication failed: invalid token ({type(exc).__name__})", f"OAUTHBEARER: {exc}"
            ) from None
        sub = claims.get(self.sub_claim)
        if not isinstance(sub, str) or not sub:
            raise SaslAuthenticationError("Authentication failed: invalid token", "OAUTHBEARER: no subject")
        return sub, int(claims["exp"]) * 1000


class OAuthBearerServer:
    complete = False
    user: str | None = None
    expires_at_ms: int | None = None

    def __init__(self, validator: TokenValidator):
        self.validator = validator

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Authentication failed: invalid token", "OAUTHBEARER: not UTF-8") from None
        gs2, sep, rest = text.partition("\x01")
        if not sep or not gs2.startswith(("n,", "y,")) or not rest.endswith("\x01\x01"):
            raise SaslAuthenticationError(
                "Authentication failed: invalid OAUTHBEARER initial response", "OAUTHBEARER: malformed initial response"
            )
        pairs = dict(item.split("=", 1) for item in rest[:-2].split("\x01") if "=" in item)
        auth = pairs.get("auth", "")
        if not auth.lower().startswith("bearer "):
            raise SaslAuthenticationError(
                "Authentication failed: invalid OAUTHBEARER initial response", "OAUTHBEARER: no bearer token"
            )
        user, expiry = self.validator.validate(auth[7:].strip())
        authzid = gs2.split(",")[1]
        if authzid and authzid != f"a={user}":
            raise SaslAuthenticationError(
                "Authentication failed: the authorization id is not the token's subject",
                "OAUTHBEARER: authorization id differs",
            )
        self.user = user
        self.expires_at_ms = expiry
        self.complete = True
        return b""


def client_initial_response(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()
