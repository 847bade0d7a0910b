"""The schema registry of one broker, assembled: its view of `_schemas` and the reader
that keeps it current, the writer (when this broker leads `_schemas`' partition), the
REST API and its HTTP listener (schema.registry.listener).

    service = RegistryService(config, broker_id, partition_writer, metadata_cache,
                              credentials.get, lambda: authorizer, create_topic)
    await service.start(advertised_host)       # binds the listener (OSError: taken)
    replicas.on_leadership_change(service.leadership_changed)
    service.has_id("orders-value", 7)          # is id 7 registered under the subject?
    await service.close()

`ids_for(subject)` and `has_id(subject, id)` are the registry's answer to another part of
the broker (validation on produce): a frozenset kept current by the view, one dict read.
The parsing of each schema type is broker/registry/formats/, which knows nothing of the
broker (a reader of registry-framed records can use it as it is).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from broker.config import BrokerConfig, parse_listener
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.registry.api import RegistryApi
from broker.registry.auth import BasicAuthenticator
from broker.registry.http import HttpClient, HttpServer
from broker.registry.log import PartitionWriter, SchemasLog, TopicReader
from broker.registry.registry import SchemaRegistry
from broker.registry.state import RegistryState
from broker.security.acl import Authorizer

log = logging.getLogger(__name__)

#: the pseudo listener name whose listener.name.<name>.ssl.* keys configure the registry's TLS
TLS_LISTENER = "SCHEMA_REGISTRY"


def _split(text: str) -> tuple[str, str, int]:
    scheme = "https" if text.lower().startswith("https://") else "http"
    host, port = parse_listener(text, "schema.registry.listener")
    return scheme, host, port


class RegistryService:
    def __init__(
        self,
        config: BrokerConfig,
        broker_id: int,
        writer: PartitionWriter,
        metadata: TopicReader,
        credential: Callable[[str, str], Any],
        authorizer: Callable[[], Authorizer | None],
        create_topic: Callable[[str, int, int, dict[str, str]], Awaitable[object]],
    ):
        self.config = config
        self.broker_id = broker_id
        self.metadata = metadata
        self._create_topic = create_topic
        self.scheme, self.host, self.port = _split(config["schema.registry.listener"])
        self.topic = config["schema.registry.topic"]
        timeout_s = config["schema.registry.request.timeout.ms"] / 1000
        self.state = RegistryState()
        self.registry = SchemaRegistry(self.state)
        self.log = SchemasLog(self.topic, broker_id, self.state, writer, metadata, self._ensure_topic, "", timeout_s)
        self.log.on_writer_identity = self._writer_identity
        authenticator = (
            BasicAuthenticator(credential) if config["schema.registry.authentication.method"] == "BASIC" else None
        )
        self.client = HttpClient(timeout=timeout_s)
        self.api = RegistryApi(self.registry, self.log, authenticator, authorizer, self.client, timeout_s)
        self.server: HttpServer | None = None
        self.url = ""

    def _writer_identity(self, identity: tuple[int, int, str]) -> None:
        self.registry.writer_identity = identity

    async def start(self, advertised_host: str) -> None:
        """Binds the listener (OSError naming it when it cannot; TlsConfigError for a key
        store that cannot be used) and starts reading `_schemas`."""
        ssl_context = client_context = None
        if self.scheme == "https":
            from broker.security.tls import SslSettings, client_context as make_client, server_context

            settings = SslSettings.from_config(self.config, TLS_LISTENER)
            ssl_context = server_context(settings)
            client_context = make_client(settings)
        self.client.ssl_context = client_context
        self.server = HttpServer(
            self.api.handle, self.host, self.port, ssl_context, self.config["schema.registry.max.request.bytes"]
        )
        await self.server.start()
        advertised = self.config["schema.registry.advertised.listener"]
        if advertised:
            scheme, host, port = _split(advertised)
        else:
            scheme, port = self.scheme, self.server.port
            host = self.host if self.host not in ("", "0.0.0.0", "::") else advertised_host
        self.url = f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}"
        self.log.url = self.url
        self.log.start()
        log.info(
            "broker %d: schema registry at %s://%s:%d (schemas in %s)",
            self.broker_id,
            self.scheme,
            self.host or "*",
            self.server.port,
            self.topic,
        )

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()
        await self.log.close()
        await self.client.close()

    def leadership_changed(self, became_leader: Any, became_follower: Any) -> None:
        self.log.leadership_changed(became_leader, became_follower)

    async def _ensure_topic(self) -> None:
        wanted = self.config["schema.registry.topic.replication.factor"]
        alive = max(len(self.metadata.brokers()), 1)
        rf = min(wanted, alive)
        if rf < wanted:
            log.warning(
                "creating %s with replication factor %d: schema.registry.topic.replication.factor is %d "
                "but only %d brokers are alive",
                self.topic,
                rf,
                wanted,
                alive,
            )
        try:
            await self._create_topic(
                self.topic,
                1,
                rf,
                {
                    "cleanup.policy": "compact",
                    "min.insync.replicas": str(min(2, rf)),
                    "unclean.leader.election.enable": "false",
                },
            )
        except KafkaProtocolError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    # ------------------------------------------------------------------ for the rest of the broker

    def ids_for(self, subject: str) -> frozenset[int]:
        """The schema ids registered under `subject` (its versions not deleted)."""
        return self.state.ids_for(subject)

    def has_id(self, subject: str, schema_id: int) -> bool:
        """Whether schema id `schema_id` is registered under `subject`."""
        return self.state.has_id(subject, schema_id)
