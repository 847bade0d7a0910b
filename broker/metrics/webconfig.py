"""The metrics listener's TLS and basic authentication, configured as Prometheus' own
exporters are: a web configuration file (exporter-toolkit's format, the file of their
`--web.config.file`), named by `metrics.listener.web.config.file`.

    web = load_web_config(path)       # WebConfigError, one line, for what cannot be honoured
    web.ssl_context                   # None: plain HTTP
    web.headers                       # http_server_config.headers, sent with every answer
    auth = BasicAuth(web.users)       # when basic_auth_users is not empty
    await auth.check(authorization)   # True, False, or None (too many checks waiting)

The file (YAML; relative paths are relative to its directory, as exporter-toolkit reads
them):

    tls_server_config:
      cert_file: metrics.crt          # PEM certificate (chain) and its unencrypted key
      key_file: metrics.key
      client_auth_type: RequireAndVerifyClientCert   # or VerifyClientCertIfGiven, NoClientCert
      client_ca_file: ca.crt          # the CA of the client certificates
      min_version: TLS12              # TLS10 .. TLS13; max_version likewise
      cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]   # Go's (IANA) names, TLS <= 1.2
      prefer_server_cipher_suites: true
    http_server_config:
      http2: false                    # accepted either way: the listener speaks HTTP/1.1
      headers: {X-Content-Type-Options: nosniff}   # the five headers exporter-toolkit allows
    basic_auth_users:
      prometheus: $2b$12$...          # user -> bcrypt hash of its password

What kbroker cannot honour is refused, never ignored: keys newer than Prometheus 2.42's
format or that Python's ssl cannot do (inline `cert`/`key`/`client_ca`,
`client_allowed_sans`, `curve_preferences`, `rate_limit`), the client-auth types that
ask for a certificate without verifying it (RequestClientCert, RequireAnyClientCert), an
unknown key or value, a duplicated key, a hash that is not bcrypt, a certificate that
cannot be loaded, and a file that protects nothing (neither TLS nor users). The file is
read once, when the broker starts (exporter-toolkit reads it again on every request):
a change takes a restart.

Basic authentication: a wrong password and an unknown user are refused alike, 401 with
`WWW-Authenticate: Basic`; an unknown user costs the same bcrypt check (against a
configured hash) so that timing does not tell which users exist. bcrypt (tens of
milliseconds of CPU at cost 10, twice that per step) runs in a worker thread, one check at a time, never on the event loop; its
verdict is cached under an HMAC of the user and password with a key made at start
(never the password itself), the credentials that passed apart from those that failed:
a scraper pays one bcrypt after the broker starts, and a client guessing passwords
cannot push the right ones out of the cache. At most MAX_WAITING checks wait; beyond, a
request with new credentials is answered 429 at once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import hmac
import os
import re
import ssl
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

#: bcrypt checks that may wait for the one running; beyond, 429
MAX_WAITING = 16
#: verdicts cached, each kind (passed, failed)
MAX_CACHED = 100

_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
#: Go's TLS 1.3 suites: not configurable in Go either (cipher_suites is for TLS <= 1.2)
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})
#: the response headers exporter-toolkit lets a web config set, and the values it allows
_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
_BCRYPT = re.compile(r"\$2[aby]\$([0-9]{2})\$[./A-Za-z0-9]{53}")

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users")
_TLS_KEYS = (
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
)
_HTTP_KEYS = ("http2", "headers")
#: keys of newer exporter-toolkit versions (or Go's TLS) kbroker does not do: refused, with why
_REFUSED = {
    "rate_limit": "rate limiting is not implemented",
    "tls_server_config.cert": "an inline certificate is not supported: use cert_file",
    "tls_server_config.key": "an inline key is not supported: use key_file",
    "tls_server_config.client_ca": "inline client CAs are not supported: use client_ca_file",
    "tls_server_config.client_allowed_sans": "checking client certificates' SANs is not implemented",
    "tls_server_config.curve_preferences": "Python's ssl cannot set a list of curves (OpenSSL's defaults are used)",
}


class WebConfigError(ValueError):
    """A web configuration that cannot be used as written: one line naming the key."""


@dataclass
class WebConfig:
    path: str
    ssl_context: ssl.SSLContext | None = None
    #: user name -> bcrypt hash (both bytes, as compared)
    users: dict[bytes, bytes] = field(default_factory=dict)
    #: (name, value) sent with every answer
    headers: list[tuple[str, str]] = field(default_factory=list)
    #: what the configuration asks that is allowed but unwise, one line each
    warnings: list[str] = field(default_factory=list)


def load_web_config(path: str) -> WebConfig:
    """Reads and checks the file; WebConfigError (one line, naming the file and the key)
    for anything it cannot honour."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise WebConfigError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return _parse(path, text)
    except WebConfigError as exc:
        raise WebConfigError(f"{path}: {exc}") from None


def _parse(path: str, text: str) -> WebConfig:
    import yaml

    try:
        doc = yaml.load(text, Loader=_strict_loader())  # a SafeLoader: plain data only
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise WebConfigError(f"not valid YAML: {exc.problem or exc.context}{where}") from None
    except yaml.YAMLError as exc:
        raise WebConfigError(f"not valid YAML: {' '.join(str(exc).split())}") from None
    top = _mapping(doc if doc is not None else {}, "", "the file")
    _check_keys(top, _TOP_KEYS, "")
    web = WebConfig(path)
    base = os.path.dirname(os.path.abspath(path))
    tls = top.get("tls_server_config")
    if tls is not None:
        web.ssl_context = _tls_context(_mapping(tls, "", "tls_server_config"), base)
    http = top.get("http_server_config")
    if http is not None:
        http = _mapping(http, "", "http_server_config")
        _check_keys(http, _HTTP_KEYS, "http_server_config.")
        if "http2" in http:
            _bool(http["http2"], "http_server_config.http2")
        web.headers = _headers(http.get("headers"))
    web.users = _users(top.get("basic_auth_users"))
    if web.ssl_context is None and not web.users:
        raise WebConfigError("sets neither tls_server_config nor basic_auth_users: it would protect nothing")
    if web.ssl_context is None:
        web.warnings.append(
            f"metrics.listener.web.config.file {path}: basic_auth_users without tls_server_config: "
            "passwords cross the network in the clear"
        )
    return web


@functools.cache
def _strict_loader() -> Any:
    """YAML's safe loader (plain data only) that refuses a key given twice in one mapping
    (Go's yaml, which exporter-toolkit reads the file with, refuses it too)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML has no type hints: Any
        pass

    def construct_mapping(loader: Any, node: Any) -> dict[Any, Any]:
        loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            try:
                duplicate = key in out
            except TypeError:
                raise WebConfigError(f"line {key_node.start_mark.line + 1}: a key must be a plain value") from None
            if duplicate:
                raise WebConfigError(f"line {key_node.start_mark.line + 1}: key {key!r} given twice")
            out[key] = loader.construct_object(value_node, deep=True)
        return out

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return StrictLoader


def _mapping(value: Any, where: str, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WebConfigError(f"{where}{name}: expected a mapping (key: value lines), not {_kind(value)}")
    return value


def _check_keys(section: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    for key in section:
        refused = _REFUSED.get(f"{where}{key}")
        if refused is not None:
            raise WebConfigError(f"{where}{key}: not supported by kbroker's metrics listener: {refused}")
        if key not in known:
            raise WebConfigError(f"{where}{key}: unknown key (known here: {', '.join(known)})")


def _string(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise WebConfigError(f"{name}: expected a string, not {_kind(value)}")
    return value


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise WebConfigError(f"{name}: expected true or false, not {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)


def _tls_context(tls: dict[str, Any], base: str) -> ssl.SSLContext:
    where = "tls_server_config."
    _check_keys(tls, _TLS_KEYS, where)
    cert_file = _string(tls.get("cert_file", ""), where + "cert_file")
    key_file = _string(tls.get("key_file", ""), where + "key_file")
    if not cert_file or not key_file:
        raise WebConfigError(
            f"{where}{'key_file' if cert_file else 'cert_file'}: missing (TLS needs cert_file and key_file)"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.options |= ssl.OP_NO_COMPRESSION
    cert_path, key_path = _path(base, cert_file, where + "cert_file"), _path(base, key_file, where + "key_file")
    try:
        ctx.load_cert_chain(cert_path, key_path, password=_no_password)
    except (ssl.SSLError, _EncryptedKey) as exc:
        problem = (
            "the key is encrypted (the web configuration has no key password: decrypt it)"
            if isinstance(exc, _EncryptedKey)
            else f"{exc.reason or exc} (PEM files: the certificate, then its own private key, unencrypted)"
        )
        raise WebConfigError(f"{where}cert_file, key_file: cannot load the certificate and key: {problem}") from None
    ctx.minimum_version = _version(tls.get("min_version", "TLS12"), where + "min_version")
    ctx.maximum_version = _version(tls.get("max_version", "TLS13"), where + "max_version")
    if ctx.minimum_version > ctx.maximum_version:
        raise WebConfigError(
            f"{where}min_version: {tls.get('min_version')} is above max_version {tls.get('max_version', 'TLS13')}"
        )
    if "cipher_suites" in tls:
        _ciphers(ctx, tls["cipher_suites"], where + "cipher_suites")
    if _bool(tls.get("prefer_server_cipher_suites", True), where + "prefer_server_cipher_suites"):
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    auth = _string(tls.get("client_auth_type", "NoClientCert"), where + "client_auth_type")
    if auth in ("RequestClientCert", "RequireAnyClientCert"):
        raise WebConfigError(
            f"{where}client_auth_type: {auth} asks for a client certificate without verifying it, "
            "which Python's ssl cannot do: use RequireAndVerifyClientCert (or "
            "VerifyClientCertIfGiven) with client_ca_file"
        )
    if auth not in _CLIENT_AUTH:
        raise WebConfigError(f"{where}client_auth_type: unknown: {auth!r} (one of {', '.join(_CLIENT_AUTH)})")
    ca_file = _string(tls.get("client_ca_file", ""), where + "client_ca_file")
    if ca_file and auth == "NoClientCert":
        raise WebConfigError(
            f"{where}client_ca_file: set, but client_auth_type {auth} checks no client "
            "certificate (set RequireAndVerifyClientCert)"
        )
    if auth != "NoClientCert":
        if not ca_file:
            raise WebConfigError(
                f"{where}client_auth_type: {auth} needs client_ca_file (the CA that signs the client certificates)"
            )
        try:
            ctx.load_verify_locations(cafile=_path(base, ca_file, where + "client_ca_file"))
        except ssl.SSLError as exc:
            raise WebConfigError(f"{where}client_ca_file: cannot load the certificates: {exc.reason or exc}") from None
    ctx.verify_mode = _CLIENT_AUTH[auth]
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class _EncryptedKey(Exception):
    pass


def _no_password() -> str:
    raise _EncryptedKey()


def _path(base: str, name: str, key: str) -> str:
    path = os.path.join(base, name)
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise WebConfigError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None
    return path


def _version(value: Any, key: str) -> ssl.TLSVersion:
    name = _string(value, key)
    if name not in _TLS_VERSIONS:
        raise WebConfigError(f"{key}: unknown TLS version {name!r} (one of {', '.join(_TLS_VERSIONS)})")
    return _TLS_VERSIONS[name]


def _ciphers(ctx: ssl.SSLContext, value: Any, key: str) -> None:
    """Go's cipher suite names (IANA's) for TLS <= 1.2, as OpenSSL's; TLS 1.3 suites are
    named but not configurable, in Go as in Python."""
    from broker.security.tls import TlsConfigError, openssl_cipher_names

    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise WebConfigError(f"{key}: expected a list of cipher suite names")
    if not value:
        return  # Go's default: OpenSSL's here
    names = [x for x in value if x not in _TLS13_SUITES]
    foreign = [x for x in names if not x.startswith("TLS_")]
    if foreign:
        raise WebConfigError(f"{key}: unknown cipher suite {foreign[0]!r} (Go's names, as TLS_ECDHE_RSA_WITH_...)")
    try:
        tls12, _ = openssl_cipher_names(names)
    except TlsConfigError as exc:
        raise WebConfigError(f"{key}: unknown cipher suite: {str(exc).rsplit(': ', 1)[1]}") from None
    if not tls12:
        if ctx.minimum_version <= ssl.TLSVersion.TLSv1_2:
            raise WebConfigError(f"{key}: names no suite of TLS 1.2 or below, while min_version allows them")
        return
    try:
        ctx.set_ciphers(":".join(tls12))
    except ssl.SSLError as exc:
        raise WebConfigError(f"{key}: {exc.reason or exc}") from None


def _headers(value: Any) -> list[tuple[str, str]]:
    if value is None:
        return []
    headers = _mapping(value, "http_server_config.", "headers")
    out = []
    for name, raw in headers.items():
        key = f"http_server_config.headers.{name}"
        if name not in _HEADERS:
            raise WebConfigError(f"{key}: this header cannot be configured (the ones that can: {', '.join(_HEADERS)})")
        text = _string(raw, key)
        allowed = _HEADERS[name]
        if text and allowed and text not in allowed:
            raise WebConfigError(f"{key}: {text!r} is not one of {', '.join(allowed)}")
        if not all(" " <= c <= "~" for c in text):
            raise WebConfigError(f"{key}: only printable ASCII may be sent in a header")
        if text:  # blank: not sent, as exporter-toolkit
            out.append((name, text))
    return out


def _users(value: Any) -> dict[bytes, bytes]:
    if value is None:
        return {}
    users = _mapping(value, "", "basic_auth_users")
    out = {}
    for user, hashed in users.items():
        if not isinstance(user, str):
            raise WebConfigError(f"basic_auth_users: user {user!r} is not a string (quote it)")
        key = f"basic_auth_users.{user}"
        if not user or ":" in user:
            raise WebConfigError(f"{key}: a user name of basic authentication is not empty and has no ':'")
        text = _string(hashed, key)
        m = _BCRYPT.fullmatch(text)
        if m is None:
            raise WebConfigError(f"{key}: not a bcrypt hash ($2a$, $2b$ or $2y$, a cost, 53 characters)")
        if not 4 <= int(m.group(1)) <= 31:
            raise WebConfigError(f"{key}: bcrypt cost {int(m.group(1))} is outside 4..31")
        out[user.encode()] = text.encode()
    return out


# ---------------------------------------------------------------------------- checking


def credentials(authorization: str) -> tuple[bytes, bytes] | None:
    """(user, password) of an `Authorization: Basic ...` value, None if it is not one."""
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(b":")
    return (user, password) if sep else None


def _verify(password: bytes, hashed: bytes) -> bool:
    import bcrypt

    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # e.g. a password over bcrypt's 72 bytes
        return False


class BasicAuth:
    """basic_auth_users checked as exporter-toolkit does, verdicts cached (module doc)."""

    def __init__(self, users: dict[bytes, bytes]):
        assert users
        self.users = users
        #: an unknown user is checked against this (and refused): the same cost as a known one's
        self._decoy = next(iter(users.values()))
        self._key = os.urandom(32)
        self._passed: OrderedDict[bytes, None] = OrderedDict()
        self._failed: OrderedDict[bytes, None] = OrderedDict()
        self._lock: asyncio.Lock | None = None
        self._waiting = 0
        #: bcrypt checks made (the cache spares the rest)
        self.verifications = 0

    async def check(self, authorization: str) -> bool | None:
        """Whether the Authorization header's credentials are a user's; None when
        MAX_WAITING checks already wait (the caller answers 429)."""
        creds = credentials(authorization)
        if creds is None:
            return False
        user, password = creds
        digest = hmac.new(self._key, len(user).to_bytes(4, "big") + user + password, hashlib.sha256).digest()
        verdict = self._cached(digest)
        if verdict is not None:
            return verdict
        if self._waiting >= MAX_WAITING:
            return None
        if self._lock is None:
            self._lock = asyncio.Lock()
        self._waiting += 1
        try:
            async with self._lock:
                verdict = self._cached(digest)  # checked while this one waited
                if verdict is not None:
                    return verdict
                hashed = self.users.get(user)
                ok = await asyncio.get_running_loop().run_in_executor(
                    None, _verify, password, self._decoy if hashed is None else hashed
                )
                ok = ok and hashed is not None
                self.verifications += 1
                cache = self._passed if ok else self._failed
                cache[digest] = None
                if len(cache) > MAX_CACHED:
                    cache.popitem(last=False)
                return ok
        finally:
            self._waiting -= 1

    def _cached(self, digest: bytes) -> bool | None:
        if digest in self._passed:
            return True
        if digest in self._failed:
            return False
        return None
