"""What a listener needs beyond plaintext, built once at start from the configuration:

    securities = listener_securities(config)      # listener name -> ListenerSecurity
    sec.ssl_context                                # SSL and SASL_SSL listeners, else None
    sec.principal_from_certificate(der)           # ssl.principal.mapping.rules

TlsConfigError (one line naming the key) when a store cannot be read: the broker stops
before it binds anything.
"""
from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from broker.config import BrokerConfig
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

    def principal_from_certificate(self, der: bytes) -> str:
        """The principal name of a client certificate (its mapped subject); ValueError
        when no mapping rule applies."""
        return self.mapper.name(subject_dn(der))


@dataclass
class ClientSecurity:
    """What a connection to a broker needs beyond plaintext: this broker's own connections
    to others (on the inter-broker listener), the project's client."""

    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None


def inter_broker_security(config: BrokerConfig) -> ClientSecurity:
    """The inter-broker listener's settings, client side (Kafka takes them from the same
    listener.name.<name>.ssl.* keys)."""
    name = config.inter_broker_listener
    protocol = next((x.security_protocol for x in config.advertised_endpoints if x.name == name), "PLAINTEXT")
    out = ClientSecurity(protocol)
    if protocol in ("SSL", "SASL_SSL"):
        out.ssl_context = client_context(SslSettings.from_config(config, name))
    return out


def listener_securities(config: BrokerConfig) -> dict[str, ListenerSecurity]:
    """Every listener's security (PLAINTEXT ones too: nothing in them)."""
    out = {}
    for x in config.endpoints:
        sec = ListenerSecurity(x.name, x.security_protocol)
        if x.security_protocol in ("SSL", "SASL_SSL"):
            settings = SslSettings.from_config(config, x.name)
            sec.ssl_context = server_context(settings)
            try:
                sec.mapper = PrincipalMapper(settings["ssl.principal.mapping.rules"])
            except ValueError as exc:
                raise TlsConfigError(str(exc)) from None
        out[x.name] = sec
    return out
