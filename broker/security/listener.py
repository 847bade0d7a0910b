"""What a listener needs beyond plaintext, built once at start from the configuration:

    securities = listener_securities(config)      # listener name -> ListenerSecurity
    sec.ssl_context                                # SSL and SASL_SSL listeners, else None
    sec.principal_from_certificate(der)           # ssl.principal.mapping.rules

TlsConfigError (one line naming the key) when a store cannot be read: the broker stops
before it binds anything.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.config import BrokerConfig
from broker.security.sasl import Authenticator, JaasConfig, SaslSettings, parse_jaas
from broker.security.scram import ScramCredential
from broker.security.tls import (
    PrincipalMapper,
    SslSettings,
    TlsConfigError,
    client_context,
    server_context,
    subject_dn,
)


@dataclass
class ListenerSecurity:
    name: str
    security_protocol: str
    ssl_context: ssl.SSLContext | None = None
    mapper: PrincipalMapper = field(default_factory=lambda: PrincipalMapper(None))
    sasl: SaslSettings | None = None

    def new_authenticator(self) -> Authenticator | None:
        """A connection's SASL state, on a SASL listener."""
        return None if self.sasl is None else Authenticator(self.sasl)

    def principal_from_certificate(self, der: bytes) -> str:
        """The principal name of a client certificate (its mapped subject); ValueError
        when no mapping rule applies."""
        return self.mapper.name(subject_dn(der))


@dataclass
class ClientSecurity:
    """What a connection to a broker needs beyond plaintext: this broker's own connections
    to others (on the inter-broker listener), the project's client. With a SASL
    mechanism: the user and password it authenticates with (PLAIN, SCRAM)."""

    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> ClientSecurity:
        """Kafka's client properties: security.protocol, ssl.*, sasl.mechanism with
        sasl.jaas.config (username="..." password="...") or sasl.username/sasl.password
        (librdkafka's names). TlsConfigError / ValueError for what cannot be used."""
        protocol = props.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"security.protocol: unknown {protocol!r}")
        out = cls(protocol)
        if protocol in ("SSL", "SASL_SSL"):
            out.ssl_context = client_context(SslSettings.from_properties(props))
        if protocol.startswith("SASL_"):
            out.sasl_mechanism = props.get("sasl.mechanism", "GSSAPI").upper()
            if out.sasl_mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
                raise ValueError(
                    f"sasl.mechanism: {out.sasl_mechanism} is not supported by this client "
                    "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
                )
            jaas = props.get("sasl.jaas.config")
            options = parse_jaas(jaas).options if jaas else {}
            out.sasl_username = props.get("sasl.username", options.get("username"))
            out.sasl_password = props.get("sasl.password", options.get("password"))
            if out.sasl_username is None or out.sasl_password is None:
                raise ValueError("sasl.jaas.config: username and password are needed")
        return out


def inter_broker_security(config: BrokerConfig) -> ClientSecurity:
    """The inter-broker listener's settings, client side (Kafka takes them from the same
    listener.name.<name>.ssl.* keys)."""
    name = config.inter_broker_listener
    protocol = next((x.security_protocol for x in config.advertised_endpoints if x.name == name), "PLAINTEXT")
    out = ClientSecurity(protocol)
    if protocol in ("SSL", "SASL_SSL"):
        out.ssl_context = client_context(SslSettings.from_config(config, name))
    if protocol.startswith("SASL_"):
        mechanism = config["sasl.mechanism.inter.broker.protocol"]
        if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise TlsConfigError(
                f"sasl.mechanism.inter.broker.protocol: {mechanism} between brokers is not "
                "implemented (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
            )
        options = _jaas(config, name, mechanism).options
        if "username" not in options or "password" not in options:
            raise TlsConfigError(
                f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config: username and "
                "password are what this broker authenticates to the others with; both are needed"
            )
        out.sasl_mechanism, out.sasl_username, out.sasl_password = mechanism, options["username"], options["password"]
    return out


def _jaas(config: BrokerConfig, listener: str, mechanism: str) -> JaasConfig:
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = config.mechanism_value(listener, mechanism, "sasl.jaas.config")
    if text is None:
        raise TlsConfigError(f"{key}: needed for {mechanism} on listener {listener}")
    try:
        return parse_jaas(text)
    except ValueError as exc:
        raise TlsConfigError(f"{key}: {exc}") from None


def listener_securities(
    config: BrokerConfig, scram_lookup: Callable[[str, str], ScramCredential | None] = lambda user, mechanism: None
) -> dict[str, ListenerSecurity]:
    """Every listener's security (PLAINTEXT ones too: nothing in them). `scram_lookup`
    finds a user's SCRAM credential (the broker's cache of the metadata store's)."""
    out = {}
    for x in config.endpoints:
        sec = ListenerSecurity(x.name, x.security_protocol)
        if x.security_protocol.startswith("SASL_"):
            sec.sasl = _sasl_settings(config, x.name, scram_lookup)
        if x.security_protocol in ("SSL", "SASL_SSL"):
            settings = SslSettings.from_config(config, x.name)
            sec.ssl_context = server_context(settings)
            try:
                sec.mapper = PrincipalMapper(settings["ssl.principal.mapping.rules"])
            except ValueError as exc:
                raise TlsConfigError(str(exc)) from None
        out[x.name] = sec
    return out


def _sasl_settings(
    config: BrokerConfig, name: str, scram_lookup: Callable[[str, str], ScramCredential | None]
) -> SaslSettings:
    mechanisms = list(config.listener_value(name, "sasl.enabled.mechanisms"))
    settings = SaslSettings(
        mechanisms,
        scram_lookup=scram_lookup,
        max_receive_size=config.listener_value(name, "sasl.server.max.receive.size"),
    )
    for mechanism in mechanisms:
        reauth = config.mechanism_value(name, mechanism, "connections.max.reauth.ms")
        settings.reauth_ms[mechanism] = (
            reauth if reauth is not None else config.listener_value(name, "connections.max.reauth.ms")
        )
    if "PLAIN" in mechanisms:
        options = _jaas(config, name, "PLAIN").options
        settings.plain_users = {k[5:]: v for k, v in options.items() if k.startswith("user_")}
    if "OAUTHBEARER" in mechanisms:
        from broker.security.oauthbearer import TokenValidator

        try:
            settings.oauth_validator = TokenValidator.from_config(config, name)
        except ValueError as exc:
            raise TlsConfigError(str(exc)) from None
    return settings
