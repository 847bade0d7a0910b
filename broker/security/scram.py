"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them, sans I/O:
the server side (ScramServer), the client side (ScramClient, for this broker's own
connections and the project's client) and the salted credentials Kafka stores (never the
password) under /config/users/<user>:

    {"version":1,"config":{"SCRAM-SHA-256":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096"}}

Every primitive is Python's hashlib (PBKDF2-HMAC, the hash) and hmac (HMAC, the
constant-time comparison), and secrets for nonces and salts.

    SaltedPassword = PBKDF2-HMAC(password, salt, iterations)
    ClientKey = HMAC(SaltedPassword, "Client Key")     StoredKey = H(ClientKey)
    ServerKey = HMAC(SaltedPassword, "Server Key")
    AuthMessage = client-first-bare "," server-first "," client-final-without-proof
    ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

Kafka's limits: 4096 to 16384 iterations (AlterUserScramCredentials), no channel binding
(gs2 header "n,,", a named authorization id must be the user), the `tokenauth`
extension of delegation tokens refused (kbroker has none).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: AlterUserScramCredentials' mechanism numbers (ScramMechanism in Kafka's protocol)
MECHANISM_IDS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_NUMBERS = {v: k for k, v in MECHANISM_IDS.items()}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class ScramError(Exception):
    """Authentication failed, or a malformed SCRAM message (never says which to the client)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ScramError(f"bad base64 {text[:40]!r}") from None


def _hmac(mechanism: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, MECHANISMS[mechanism]).digest()


def _hash(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(MECHANISMS[mechanism], data).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode("utf-8"), salt, iterations)


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(cls, mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
        client_key = _hmac(mechanism, salted, b"Client Key")
        return cls(salt, _hash(mechanism, client_key), _hmac(mechanism, salted, b"Server Key"), iterations)

    @classmethod
    def from_password(
        cls, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
    ) -> ScramCredential:
        salt = secrets.token_bytes(32) if salt is None else salt
        return cls.from_salted_password(
            mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
        )

    def to_text(self) -> str:
        """Kafka's ScramCredentialUtils.credentialToString."""
        return (
            f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},server_key={_b64(self.server_key)},"
            f"iterations={self.iterations}"
        )

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        """Inverse of to_text; ValueError if malformed."""
        fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        try:
            return cls(
                base64.b64decode(fields["salt"]),
                base64.b64decode(fields["stored_key"]),
                base64.b64decode(fields["server_key"]),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a SCRAM credential: {exc}") from None


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for item in message.split(","):
        if len(item) < 2 or item[1] != "=":
            raise ScramError(f"malformed SCRAM attribute {item[:40]!r}")
        out.append((item[0], item[2:]))
    return out


def sasl_name_decode(name: str) -> str:
    """RFC 5802's saslname: '=2C' is ',' and '=3D' is '='; any other '=' is malformed."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "=":
            code = name[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ScramError("malformed user name")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def sasl_name_encode(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramServer:
    """One SCRAM exchange, server side: `evaluate(client message)` returns the next server
    message; `complete` once the client is proven, `user` then names it. ScramError for a
    failed or malformed exchange. `lookup(user)` gives the user's credential or None."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None]):
        self.mechanism = mechanism
        self.lookup = lookup
        self.user: str | None = None
        self.complete = False
        self._step = 0
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._first_bare = ""
        self._server_first = ""
        self._gs2 = ""

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("not UTF-8") from None
        if self._step == 0:
            return self._first(text)
        if self._step == 1:
            return self._final(text)
        raise ScramError("unexpected SCRAM message after the exchange")

    def _first(self, text: str) -> bytes:
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise ScramError("channel binding is not supported" if text.startswith("p=") else "malformed gs2 header")
        authzid = parts[1]
        self._gs2 = f"{parts[0]},{authzid},"
        self._first_bare = parts[2]
        attrs = _attributes(parts[2])
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramError("malformed client-first message")
        if any(k == "t" or item_key.startswith("tokenauth") for k, item_key in ((k, f"{k}={v}") for k, v in attrs[2:])):
            raise ScramError("delegation tokens are not supported")
        user = sasl_name_decode(attrs[0][1])
        if authzid and (not authzid.startswith("a=") or sasl_name_decode(authzid[2:]) != user):
            raise ScramError("the authorization id must be the user")
        credential = self.lookup(user)
        if credential is None:
            raise ScramError(f"unknown user {user!r}")
        self.user = user
        self._credential = credential
        self._nonce = attrs[1][1] + secrets.token_urlsafe(24)
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._step = 1
        return self._server_first.encode()

    def _final(self, text: str) -> bytes:
        attrs = _attributes(text)
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise ScramError("malformed client-final message")
        if _unb64(attrs[0][1]).decode("utf-8", "replace") != self._gs2:
            raise ScramError("channel binding does not match")
        if attrs[1][1] != self._nonce:
            raise ScramError("nonce mismatch")
        credential = self._credential
        assert credential is not None
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        proof = _unb64(attrs[-1][1])
        signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("bad proof length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(_hash(self.mechanism, client_key), credential.stored_key):
            raise ScramError("invalid credentials")
        self._step = 2
        self.complete = True
        return f"v={_b64(_hmac(self.mechanism, credential.server_key, auth_message))}".encode()


class ScramClient:
    """One SCRAM exchange, client side: first() -> client-first; final(server-first) ->
    client-final; verify(server-final) checks the server knew the credential."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None):
        if mechanism not in MECHANISMS:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self.user = user
        self.password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._first_bare = f"n={sasl_name_encode(user)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8")
        attrs = dict(_attributes(text))
        nonce, salt, iterations = attrs.get("r", ""), _unb64(attrs.get("s", "")), int(attrs.get("i", "0"))
        if not nonce.startswith(self._nonce) or iterations < 1:
            raise ScramError("bad server-first message")
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        signature = _hmac(self.mechanism, _hash(self.mechanism, client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = _hmac(self.mechanism, _hmac(self.mechanism, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = dict(_attributes(server_final.decode("utf-8")))
        if "e" in attrs:
            raise ScramError(f"the server refused: {attrs['e']}")
        if not hmac.compare_digest(_unb64(attrs.get("v", "")), self._server_signature):
            raise ScramError("the server's signature is wrong")
