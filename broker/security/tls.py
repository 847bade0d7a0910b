"""TLS for listeners and inter-broker connections, from Kafka's ssl.* keys, with
Python's ssl (OpenSSL); principals from client certificates.

    settings = SslSettings.from_config(config, "SSL")     # listener.name.ssl.* over ssl.*
    ctx = server_context(settings)          # an ssl.SSLContext for the listener
    ctx = client_context(settings)          # for this broker's connections to others
    principal_name(der_cert, mapper)        # "CN=client,O=x" through ssl.principal.mapping.rules

Key stores (`ssl.keystore.type`):
    PEM       `ssl.keystore.location` is one file with the certificate chain and the
              private key (`ssl.key.password` if the key is encrypted), or the two inline:
              `ssl.keystore.certificate.chain` and `ssl.keystore.key`
    PKCS12    `ssl.keystore.location` with `ssl.keystore.password`, read with the
              `cryptography` package (already a dependency for JWT signatures and the
              subject names of certificates), handed to OpenSSL as PEM
    JKS       refused at start with what to do (Java's format: convert it)
Trust stores (`ssl.truststore.type`): PEM (`ssl.truststore.location`, or the
certificates inline in `ssl.truststore.certificates`) or PKCS12.

What OpenSSL loads from files only (a certificate chain and its key) goes through a
temporary file of mode 0600 in a private directory, removed at once.

`ssl.cipher.suites` takes Java's (IANA) names as Kafka's users write them, and
OpenSSL's: a TLS 1.2 suite is translated, TLS 1.3 suites have the same names in both.
Python's ssl cannot restrict the TLS 1.3 suites (no SSL_CTX_set_ciphersuites), so a list
naming some of them but not all is refused; one naming none disables TLS 1.3, as
Java would not negotiate it either.

Principals (Kafka's DefaultKafkaPrincipalBuilder): on an SSL listener the client
certificate's subject in RFC 2253 form (`CN=a,OU=b,O=c,C=d`, as Java's
X500Principal.getName), mapped by `ssl.principal.mapping.rules`; ANONYMOUS without a
client certificate.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.config import BrokerConfig, ConfigError

ANONYMOUS = "ANONYMOUS"

_TLS_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")

_KEYS = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.protocol",
    "ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm",
    "ssl.principal.mapping.rules",
)


class TlsConfigError(ValueError):
    """A TLS setting that cannot be used (a file missing, a wrong password, a store type
    that cannot be read ...): one line naming the key."""


@dataclass(frozen=True)
class SslSettings:
    """The ssl.* settings of one listener (listener.name.<name>.ssl.* over ssl.*), or of a
    client (the project's own, from client properties)."""

    values: dict[str, Any]
    where: str = ""  # "listener.name.ssl." or "" (for messages)

    @classmethod
    def from_config(cls, config: BrokerConfig, listener_name: str) -> SslSettings:
        return cls(
            {k: config.listener_value(listener_name, k) for k in _KEYS}, f"listener.name.{listener_name.lower()}."
        )

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> SslSettings:
        """Client properties (Kafka's client keys, the same names); defaults as Kafka's."""
        from broker.config import BROKER_KEYS

        values = {}
        for k in _KEYS:
            try:
                values[k] = BROKER_KEYS[k].parse(props[k]) if k in props else BROKER_KEYS[k].default
            except ConfigError as exc:
                raise TlsConfigError(str(exc)) from None
        return cls(values)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def fail(self, key: str, problem: str) -> TlsConfigError:
        return TlsConfigError(f"{key}: {problem}")


# ---------------------------------------------------------------------------- contexts


def server_context(settings: SslSettings) -> ssl.SSLContext:
    """The listener's context: its key store (required), trust store (for client
    certificates), ssl.client.auth, versions and cipher suites."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions_and_ciphers(ctx, settings)
    if not _load_keystore(ctx, settings):
        raise settings.fail(
            "ssl.keystore.location",
            "a TLS listener needs a key store (ssl.keystore.location, "
            "or ssl.keystore.certificate.chain and ssl.keystore.key)",
        )
    trusted = _load_truststore(ctx, settings)
    auth = settings["ssl.client.auth"]
    ctx.verify_mode = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL}.get(auth, ssl.CERT_NONE)
    if auth != "none" and not trusted:
        raise settings.fail(
            "ssl.client.auth",
            f"{auth} needs a trust store to check client certificates "
            "(ssl.truststore.location or ssl.truststore.certificates)",
        )
    return ctx


def client_context(settings: SslSettings) -> ssl.SSLContext:
    """A client's context (this broker's connections to others, the project's client):
    the trust store (else the system's), a key store when one is configured (for
    ssl.client.auth), host names checked unless ssl.endpoint.identification.algorithm
    is empty."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions_and_ciphers(ctx, settings)
    _load_keystore(ctx, settings)
    if not _load_truststore(ctx, settings):
        ctx.load_default_certs()
    algorithm = (settings["ssl.endpoint.identification.algorithm"] or "").strip()
    if algorithm.lower() not in ("", "https"):
        raise settings.fail("ssl.endpoint.identification.algorithm", f"{algorithm!r}: only https (or empty)")
    ctx.check_hostname = algorithm.lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _versions_and_ciphers(ctx: ssl.SSLContext, settings: SslSettings) -> None:
    enabled = [_TLS_VERSIONS[v] for v in settings["ssl.enabled.protocols"] or ["TLSv1.2", "TLSv1.3"]]
    if not enabled:
        raise settings.fail("ssl.enabled.protocols", "no TLS version enabled")
    ctx.minimum_version, ctx.maximum_version = min(enabled), max(enabled)
    ctx.options |= ssl.OP_NO_COMPRESSION
    suites = settings["ssl.cipher.suites"]
    if suites:
        tls12, tls13 = openssl_cipher_names(suites)
        if tls13 and set(tls13) != set(_TLS13_SUITES):
            raise settings.fail(
                "ssl.cipher.suites",
                f"{', '.join(tls13)}: Python's ssl cannot restrict the TLS 1.3 "
                "suites; list all three or none (none disables TLS 1.3)",
            )
        if not tls13:
            if ctx.minimum_version > ssl.TLSVersion.TLSv1_2:
                raise settings.fail("ssl.cipher.suites", "no TLS 1.3 suite listed while only TLS 1.3 is enabled")
            ctx.maximum_version = min(ctx.maximum_version, ssl.TLSVersion.TLSv1_2)
        if tls12:
            ctx.set_ciphers(":".join(tls12))
        elif ctx.maximum_version >= ssl.TLSVersion.TLSv1_3:
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3


def openssl_cipher_names(suites: list[str]) -> tuple[list[str], list[str]]:
    """(TLS 1.2 suites as OpenSSL names, TLS 1.3 suites) of a list of Java (IANA) or
    OpenSSL names; TlsConfigError naming those OpenSSL does not know."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.set_ciphers("ALL:@SECLEVEL=0")
    known = {c["name"] for c in probe.get_ciphers()}
    tls12, tls13, unknown = [], [], []
    for suite in suites:
        if suite in _TLS13_SUITES:
            tls13.append(suite)
            continue
        name = suite if suite in known else _iana_to_openssl(suite)
        if name in known:
            tls12.append(name)
        else:
            unknown.append(suite)
    if unknown:
        raise TlsConfigError(f"ssl.cipher.suites: unknown to OpenSSL {ssl.OPENSSL_VERSION}: {', '.join(unknown)}")
    return tls12, tls13


def _iana_to_openssl(name: str) -> str:
    """TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 -> ECDHE-RSA-AES128-GCM-SHA256 (OpenSSL's
    naming of the TLS 1.2 suites)."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, cipher = name[4:].split("_WITH_", 1)
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256").replace("_CBC", "")
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    parts = ([] if kx == "RSA" else [kx]) + [cipher]
    return "-".join(parts).replace("_", "-")


def _load_keystore(ctx: ssl.SSLContext, settings: SslSettings) -> bool:
    """Loads the key store if one is configured; whether one was."""
    kind = settings["ssl.keystore.type"]
    location = settings["ssl.keystore.location"]
    chain, key = settings["ssl.keystore.certificate.chain"], settings["ssl.keystore.key"]
    if location is None and chain is None and key is None:
        return False
    if kind == "JKS":
        raise settings.fail(
            "ssl.keystore.type",
            "JKS (Java's key store format) cannot be read: set PEM or PKCS12 "
            "(keytool -importkeystore -deststoretype PKCS12 converts a JKS)",
        )
    if location is not None and (chain is not None or key is not None):
        raise settings.fail(
            "ssl.keystore.location",
            "set either ssl.keystore.location or ssl.keystore.certificate.chain and ssl.keystore.key",
        )
    password = settings["ssl.key.password"]
    if kind == "PKCS12":
        if location is None:
            raise settings.fail("ssl.keystore.location", "a PKCS12 key store is a file")
        pem, password = (
            _pkcs12_to_pem(location, settings["ssl.keystore.password"], settings, "ssl.keystore.location"),
            None,
        )
    elif location is not None:
        pem = _read(location, settings, "ssl.keystore.location")
    else:
        if chain is None or key is None:
            raise settings.fail(
                "ssl.keystore.certificate.chain",
                "an inline PEM key store needs both ssl.keystore.certificate.chain and ssl.keystore.key",
            )
        pem = (chain.strip() + "\n" + key.strip() + "\n").encode()
    with _private_file(pem) as path:
        try:
            ctx.load_cert_chain(path, password=password)
        except ssl.SSLError as exc:
            raise settings.fail(
                "ssl.keystore.location" if location else "ssl.keystore.key",
                f"cannot load the certificate chain and key: {exc.reason or exc}",
            ) from None
    return True


def _load_truststore(ctx: ssl.SSLContext, settings: SslSettings) -> bool:
    kind = settings["ssl.truststore.type"]
    location = settings["ssl.truststore.location"]
    inline = settings["ssl.truststore.certificates"]
    if location is None and inline is None:
        return False
    if kind == "JKS":
        raise settings.fail("ssl.truststore.type", "JKS (Java's trust store format) cannot be read: set PEM or PKCS12")
    try:
        if inline is not None:
            ctx.load_verify_locations(cadata=inline)
        elif kind == "PKCS12":
            pem = _pkcs12_to_pem(
                location,
                settings["ssl.truststore.password"],
                settings,
                "ssl.truststore.location",
                certificates_only=True,
            )
            ctx.load_verify_locations(cadata=pem.decode())
        else:
            _read(location, settings, "ssl.truststore.location")
            ctx.load_verify_locations(cafile=location)
    except ssl.SSLError as exc:
        raise settings.fail(
            "ssl.truststore.location", f"cannot load the trusted certificates: {exc.reason or exc}"
        ) from None
    return True


def _read(path: str, settings: SslSettings, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise settings.fail(key, f"cannot read {path}: {exc.strerror or exc}") from None


def _pkcs12_to_pem(
    path: str, password: str | None, settings: SslSettings, key: str, certificates_only: bool = False
) -> bytes:
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        pkcs12,
    )

    data = _read(path, settings, key)
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as exc:
        raise settings.fail(key, f"cannot read the PKCS12 store {path} (wrong password?): {exc}") from None
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.insert(0, store.cert.certificate)
    out = b"".join(c.public_bytes(Encoding.PEM) for c in certs)
    if not certificates_only:
        if store.key is None:
            raise settings.fail(key, f"the PKCS12 store {path} holds no private key")
        out += store.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    if not out:
        raise settings.fail(key, f"the PKCS12 store {path} holds no certificate")
    return out


class _private_file:
    """A temporary file of mode 0600 in a private directory, removed on exit."""

    def __init__(self, data: bytes):
        self.data = data
        self.dir: str | None = None

    def __enter__(self) -> str:
        self.dir = tempfile.mkdtemp(prefix="kbroker-tls-")
        path = os.path.join(self.dir, "store.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.data)
        return path

    def __exit__(self, *exc: object) -> None:
        assert self.dir is not None
        path = os.path.join(self.dir, "store.pem")
        try:
            os.unlink(path)
        finally:
            os.rmdir(self.dir)


# ---------------------------------------------------------------------------- principals


def subject_dn(der: bytes) -> str:
    """The subject of a DER certificate in RFC 2253 form, as Java's X500Principal.getName()
    (most specific attribute first: CN=client,OU=team,O=org,C=US)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


class PrincipalMapper:
    """Kafka's SslPrincipalMapper: ssl.principal.mapping.rules, a comma-separated list of
    RULE:pattern/replacement/[LU] and DEFAULT; the first rule whose pattern matches the
    whole subject gives the name (replacement with $1..$9), L/U lower or upper case it;
    DEFAULT keeps the subject. No rule matching: NoMatchingRule (the client is refused,
    as Kafka's)."""

    _RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
    _SPLIT = re.compile(r"\s*(" + _RULE + r")\s*(?:[,\n]\s*|$)")

    def __init__(self, rules: str | None):
        self.rules: list[Callable[[str], str | None]] = []
        text = (rules or "DEFAULT").strip()
        pos = 0
        while pos < len(text):
            m = self._SPLIT.match(text, pos)
            if m is None or m.end() == pos:
                raise ValueError(f"ssl.principal.mapping.rules: invalid rule at {text[pos:]!r}")
            pos = m.end()
            if m.group(2):
                self.rules.append(lambda dn: dn)
            elif m.group(3) is not None:
                self.rules.append(self._rule(m.group(3), m.group(4), m.group(5)))
            else:
                raise ValueError(f"ssl.principal.mapping.rules: invalid rule {m.group(1)!r}")

    @staticmethod
    def _rule(pattern: str, replacement: str, case: str) -> Callable[[str], str | None]:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"ssl.principal.mapping.rules: bad pattern {pattern!r}: {exc}") from None
        tokens: list[str | int] = []  # literal text, or a group number ($n)
        i = 0
        while i < len(replacement):
            c = replacement[i]
            if c == "\\" and i + 1 < len(replacement):
                tokens.append(replacement[i + 1])
                i += 2
            elif c == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
                tokens.append(int(replacement[i + 1]))
                i += 2
            else:
                tokens.append(c)
                i += 1

        def expand(m: re.Match[str]) -> str:
            return "".join(t if isinstance(t, str) else (m.group(t) or "") for t in tokens)

        def apply(dn: str) -> str | None:
            if regex.fullmatch(dn) is None:
                return None
            out = regex.sub(expand, dn)
            return out.lower() if case == "L" else out.upper() if case == "U" else out

        return apply

    def name(self, dn: str) -> str:
        for rule in self.rules:
            out = rule(dn)
            if out is not None:
                return out
        raise NoMatchingRule(f"no rule of ssl.principal.mapping.rules applies to {dn}")


class NoMatchingRule(ValueError):
    """No ssl.principal.mapping.rules rule matches a client certificate's subject."""
