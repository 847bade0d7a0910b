"""Security end to end: one real broker process (shared by the module) with a PLAINTEXT,
an SSL (client certificates requested), a SASL_SSL (PLAIN, SCRAM-SHA-512, OAUTHBEARER),
a SASL_PLAINTEXT (SCRAM-SHA-256) and an mTLS listener (certificates required), ACLs on
(kafka.security.authorizer.AclAuthorizer, super user User:admin), driven by real clients
— confluent-kafka, kafka-python, aiokafka, franz-go, KafkaJS and the Java client through
Kafka's own tools, each over SASL_SSL (SCRAM-SHA-512, PLAIN) and SSL (without and with a
client certificate) —
and the `broker users` / `broker acls` commands docs/security.md shows.

Refused, with nothing written and the broker still serving: wrong passwords, unknown
users and mechanisms, plaintext to TLS and TLS to plaintext, expired, self-signed and
untrusted client certificates, requests before authentication, inter-broker requests
from clients, and users without the ACL each operation needs."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.client.connection import BrokerConnection, ClientError
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.controlled_shutdown import ControlledShutdownRequest
from broker.protocol.messages.leader_and_isr import LeaderAndIsrRequest
from broker.protocol.messages.stop_replica import StopReplicaRequest
from broker.protocol.messages.update_metadata import UpdateMetadataRequest
from broker.security.listener import ClientSecurity
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_module
from tests.support.ports import free_port

pytestmark = pytest.mark.interop

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
TIMEOUT = 30


def broker_cmd() -> list[str]:
    exe = shutil.which("broker", path=os.path.dirname(sys.executable)) or shutil.which("broker")
    return [exe] if exe else [sys.executable, "-m", "broker.cli.main"]


def cli(*args, stdin: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(broker_cmd() + [str(a) for a in args], input=stdin, capture_output=True, timeout=60)
    if check:
        assert r.returncode == 0, (args, r.stderr.decode(errors="replace"))
    return r


def jwks_and_token(d: Path, sub: str = "alice", exp_s: int = 600):
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="test-key", use="sig", alg="RS256")
    (d / "jwks.json").write_text(json.dumps({"keys": [jwk]}))

    def token(sub=sub, exp_s=exp_s):
        now = int(time.time())
        return jwt.encode(
            {"sub": sub, "iat": now, "exp": now + exp_s, "aud": "kbroker", "iss": "test-idp", "scope": "kafka"},
            key,
            algorithm="RS256",
            headers={"kid": "test-key"},
        )

    return token


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    from tests.support.certs import make_certs

    d = tmp_path_factory.mktemp("secure")
    certs = make_certs(d / "certs")
    token = jwks_and_token(d)
    ports = SimpleNamespace(
        plain=free_port(), ssl=free_port(), sasl_ssl=free_port(), sasl_plain=free_port(), mtls=free_port()
    )
    plain_jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
        + ";"
    )
    config = {
        "listeners": f"PLAINTEXT://127.0.0.1:{ports.plain},SSL://127.0.0.1:{ports.ssl},"
        f"SASL_SSL://127.0.0.1:{ports.sasl_ssl},SASL_PLAINTEXT://127.0.0.1:{ports.sasl_plain},"
        f"MTLS://127.0.0.1:{ports.mtls}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,MTLS:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": certs.broker_pem,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": certs.ca,
        "listener.name.ssl.ssl.client.auth": "requested",
        "listener.name.mtls.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),.*$/$1/,DEFAULT",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas,
        "listener.name.sasl_ssl.sasl.oauthbearer.jwks.endpoint.url": f"file://{d / 'jwks.json'}",
        "listener.name.sasl_ssl.sasl.oauthbearer.expected.audience": "kbroker",
        "listener.name.sasl_ssl.sasl.oauthbearer.expected.issuer": "test-idp",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-256",
        # KIP-368: sessions there last 2 s; clients authenticate again on their connections
        "listener.name.sasl_plaintext.connections.max.reauth.ms": 2000,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "num.partitions": 1,
        "offsets.topic.num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
        "connection.failed.authentication.delay.ms": 200,
    }
    with BrokerProcess(d / "data", config=config, port=ports.plain) as b:
        admin = d / "admin.properties"
        admin.write_text(
            f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nssl.truststore.type=PEM\n"
            f"ssl.truststore.location={certs.ca}\n"
            f"sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="admin" password="{PASSWORDS["admin"]}";\n'
        )
        boot = f"127.0.0.1:{ports.sasl_ssl}"
        # docs/security.md's commands: SCRAM users and ACLs
        for user in ("alice", "bob"):
            cli(
                "users",
                "add",
                user,
                "--bootstrap",
                boot,
                "--command-config",
                admin,
                "--mechanism",
                "SCRAM-SHA-512",
                "--mechanism",
                "SCRAM-SHA-256",
                "--password",
                PASSWORDS[user],
            )
        for principal in ("User:alice", "User:ANONYMOUS"):
            cli(
                "acls",
                "add",
                "--bootstrap",
                boot,
                "--command-config",
                admin,
                "--allow-principal",
                principal,
                "--operation",
                "Read",
                "--operation",
                "Write",
                "--operation",
                "Create",
                "--topic",
                "sec-",
                "--resource-pattern-type",
                "prefixed",
            )
            for group_prefix in ("g-", "sec-"):
                cli(
                    "acls",
                    "add",
                    "--bootstrap",
                    boot,
                    "--command-config",
                    admin,
                    "--allow-principal",
                    principal,
                    "--operation",
                    "Read",
                    "--group",
                    group_prefix,
                    "--resource-pattern-type",
                    "prefixed",
                )
        # bob may describe the topics, nothing more
        cli(
            "acls",
            "add",
            "--bootstrap",
            boot,
            "--command-config",
            admin,
            "--allow-principal",
            "User:bob",
            "--operation",
            "Describe",
            "--topic",
            "sec-",
            "--resource-pattern-type",
            "prefixed",
        )
        yield SimpleNamespace(broker=b, certs=certs, ports=ports, dir=d, admin=admin, boot=boot, token=token)


def conf(secure, kind: str, **extra) -> dict:
    """librdkafka settings of a client on one of the listeners."""
    p, c = secure.ports, secure.certs
    base = {"socket.timeout.ms": 10000, "message.timeout.ms": 15000}
    if kind == "scram":
        base.update(
            {
                "bootstrap.servers": f"127.0.0.1:{p.sasl_ssl}",
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "ssl.ca.location": str(c.ca),
            }
        )
    elif kind == "plain":
        base.update(
            {
                "bootstrap.servers": f"127.0.0.1:{p.sasl_ssl}",
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "ssl.ca.location": str(c.ca),
            }
        )
    elif kind == "ssl-cert":
        base.update(
            {
                "bootstrap.servers": f"127.0.0.1:{p.ssl}",
                "security.protocol": "SSL",
                "ssl.ca.location": str(c.ca),
                "ssl.certificate.location": str(c.client_cert),
                "ssl.key.location": str(c.client_key),
            }
        )
    elif kind == "ssl":
        base.update(
            {"bootstrap.servers": f"127.0.0.1:{p.ssl}", "security.protocol": "SSL", "ssl.ca.location": str(c.ca)}
        )
    base.update(extra)
    return base


def confluent_round_trip(secure, kind, topic, user="alice", **extra):
    ck = require_module("confluent_kafka")
    c = conf(secure, kind, **extra)
    if kind in ("scram", "plain"):
        c.update({"sasl.username": user, "sasl.password": PASSWORDS[user]})
    producer = ck.Producer(c)
    errors = []
    for i in range(5):
        producer.produce(topic, f"{kind}-{i}".encode(), on_delivery=lambda e, m: errors.append(e) if e else None)
    assert producer.flush(TIMEOUT) == 0 and errors == []
    consumer = ck.Consumer({**c, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < 5 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value().decode())
    consumer.close()
    assert got == [f"{kind}-{i}" for i in range(5)]


@pytest.mark.parametrize("kind", ["scram", "plain", "ssl-cert", "ssl"])
def test_confluent_kafka_over_sasl_ssl_and_ssl(secure, kind):
    confluent_round_trip(secure, kind, f"sec-confluent-{kind}")


def test_confluent_kafka_with_oauthbearer(secure):
    def oauth_cb(_config):
        return secure.token(), time.time() + 600

    confluent_round_trip(
        secure, "scram", "sec-confluent-oauth", user="alice", **{"sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}
    )


#: (listener, TLS client certificate, SASL mechanism) of each client's round
KINDS = {
    "scram": ("sasl_ssl", False, "SCRAM-SHA-512"),
    "plain": ("sasl_ssl", False, "PLAIN"),
    "ssl": ("ssl", False, None),
    "ssl-cert": ("mtls", True, None),
}


def python_client_settings(secure, kind: str) -> dict:
    """kafka-python's / aiokafka's settings for one of KINDS."""
    listener, cert, mechanism = KINDS[kind]
    ctx = ssl.create_default_context(cafile=str(secure.certs.ca))
    if cert:
        ctx.load_cert_chain(str(secure.certs.client_cert), str(secure.certs.client_key))
    out = dict(
        bootstrap_servers=f"127.0.0.1:{getattr(secure.ports, listener)}",
        ssl_context=ctx,
        security_protocol="SASL_SSL" if mechanism else "SSL",
    )
    if mechanism:
        out.update(sasl_mechanism=mechanism, sasl_plain_username="alice", sasl_plain_password=PASSWORDS["alice"])
    return out


@pytest.mark.parametrize("kind", ["scram", "plain", "ssl", "ssl-cert"])
def test_kafka_python_and_aiokafka(secure, kind):
    """Both produce and consume (in a group) over SASL_SSL with SCRAM-SHA-512 and PLAIN, and
    over SSL without and with a client certificate."""
    kafka = require_module("kafka")
    settings = python_client_settings(secure, kind)
    topic = f"sec-kafka-python-{kind}"
    p = kafka.KafkaProducer(**settings, request_timeout_ms=10000)
    for i in range(3):
        p.send(topic, f"kp-{i}".encode()).get(timeout=TIMEOUT)
    p.close()
    c = kafka.KafkaConsumer(
        topic, **settings, group_id=f"g-kp-{kind}", auto_offset_reset="earliest", consumer_timeout_ms=10000
    )
    got = []
    for m in c:  # stops after consumer_timeout_ms without records
        got.append(m.value)
        if len(got) == 3:
            break
    c.close()
    assert got == [b"kp-0", b"kp-1", b"kp-2"]
    aiokafka = require_module("aiokafka")
    import asyncio

    async def run():
        topic = f"sec-aiokafka-{kind}"
        p = aiokafka.AIOKafkaProducer(**settings)
        await p.start()
        try:
            for i in range(3):
                await p.send_and_wait(topic, f"ai-{i}".encode())
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer(topic, **settings, auto_offset_reset="earliest", group_id=f"g-aiokafka-{kind}")
        await c.start()
        try:
            got = []
            async with asyncio.timeout(TIMEOUT):
                async for m in c:
                    got.append(m.value)
                    if len(got) == 3:
                        break
        finally:
            await c.stop()
        assert got == [b"ai-0", b"ai-1", b"ai-2"]

    asyncio.run(run())


def test_kafka_python_over_sasl_plaintext_scram_sha_256(secure):
    kafka = require_module("kafka")
    p = kafka.KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{secure.ports.sasl_plain}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="alice",
        sasl_plain_password=PASSWORDS["alice"],
    )
    p.send("sec-sasl-plaintext", b"x").get(timeout=TIMEOUT)
    p.close()


def test_the_java_client_over_sasl_ssl_ssl_and_oauthbearer(secure, tmp_path):
    """Kafka's console producer and consumer (the Java client) with client properties:
    SASL_SSL with SCRAM-SHA-512, PLAIN and OAUTHBEARER, SSL without and with a client
    certificate."""
    from tests.support.kafka_tools import kafka_tool

    c, p = secure.certs, secure.ports
    # the Java client reads PEM stores too
    common = f"ssl.truststore.type=PEM\nssl.truststore.location={c.ca}\n"
    token_file = tmp_path / "token.jwt"
    token_file.write_text(secure.token())
    setups = {
        "scram": (
            p.sasl_ssl,
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="alice" password="{PASSWORDS["alice"]}";\n',
        ),
        "plain": (
            p.sasl_ssl,
            "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="alice" password="{PASSWORDS["alice"]}";\n',
        ),
        "ssl": (p.ssl, "security.protocol=SSL\n"),
        "mtls": (p.mtls, f"security.protocol=SSL\nssl.keystore.type=PEM\nssl.keystore.location={c.client_pem}\n"),
        "oauth": (
            p.sasl_ssl,
            "security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n"
            "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;\n"
            "sasl.login.callback.handler.class="
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
            f"sasl.oauthbearer.token.endpoint.url=file://{token_file}\n",
        ),
    }
    jvm = (f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=file://{token_file}",)
    for name, (port, props) in setups.items():
        cfg = tmp_path / f"{name}.properties"
        cfg.write_text(common + props)
        topic = f"sec-java-{name}"
        kafka_tool(
            "kafka-console-producer",
            "--bootstrap-server",
            f"127.0.0.1:{port}",
            "--topic",
            topic,
            "--producer.config",
            cfg,
            input=f"{name}-1\n{name}-2\n",
            jvm_args=jvm,
        )
        out = kafka_tool(
            "kafka-console-consumer",
            "--bootstrap-server",
            f"127.0.0.1:{port}",
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            2,
            "--group",
            f"g-java-{name}",
            "--consumer.config",
            cfg,
            jvm_args=jvm,
            timeout=90,
        ).lines
        assert [line for line in out if line.startswith(name)] == [f"{name}-1", f"{name}-2"], out


@pytest.mark.parametrize("kind", list(KINDS))
def test_franz_go_and_kafkajs(secure, kind):
    """The Go and Node checks of tests/apache_kafka/test_go_node_clients.py (codecs, keys,
    headers, a two-member group) over SASL_SSL with SCRAM-SHA-512 and PLAIN, and over SSL
    without and with a client certificate (User:alice by ssl.principal.mapping.rules),
    TLS and SASL from the environment."""
    from tests.apache_kafka.test_go_node_clients import GO_BIN, GROUP_RECORDS, NODE_DIR
    from tests.support.deps import missing

    node = shutil.which("node")
    if not GO_BIN.exists() or node is None or not (NODE_DIR / "node_modules" / "kafkajs").exists():
        missing("the Go client checks and KafkaJS", "run 'make testdeps' (needs go, node and npm)")
    from broker.client import Cluster, Producer

    listener, cert, mechanism = KINDS[kind]
    port = getattr(secure.ports, listener)
    ctx = ssl.create_default_context(cafile=str(secure.certs.ca))
    admin = ClientSecurity("SASL_SSL", ctx, "PLAIN", "admin", PASSWORDS["admin"])
    env = {
        **os.environ,
        "KBROKER_SECURITY_PROTOCOL": "SASL_SSL" if mechanism else "SSL",
        "KBROKER_CA_FILE": str(secure.certs.ca),
    }
    if mechanism:
        env.update(
            KBROKER_SASL_MECHANISM=mechanism, KBROKER_SASL_USER="alice", KBROKER_SASL_PASSWORD=PASSWORDS["alice"]
        )
    if cert:
        env.update(KBROKER_CERT_FILE=str(secure.certs.client_cert), KBROKER_KEY_FILE=str(secure.certs.client_key))
    for client, partitions in (("franz", 5), ("kafkajs", 2)):
        topic, group_topic = f"sec-{client}-{kind}", f"sec-{client}-{kind}-g"
        with Cluster(secure.boot, security=admin) as c:
            for name, n in ((topic, partitions), (group_topic, 4)):
                c.create_topic(name, n, 1)
                c.topic(name, wait_s=10)
        with Cluster(secure.boot, security=admin) as c, Producer(c, acks=-1) as p:
            for i in range(GROUP_RECORDS):
                p.send(group_topic, f"g{i}".encode(), partition=i % 4)
            p.flush()
        cmd = [str(GO_BIN), "franz"] if client == "franz" else [node, str(NODE_DIR / "check.js")]
        p = subprocess.run(
            cmd + [f"127.0.0.1:{port}", topic, group_topic],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        assert p.returncode == 0, (client, p.stderr[-3000:])
        got: dict = {}
        for line in p.stdout.splitlines():
            if line.startswith("{"):
                facts = json.loads(line)
                got.setdefault(facts.pop("check"), []).append(facts)
        assert got["read_back"][0]["mismatches"] == 0 and got["read_back"][0]["matched"] == partitions * 200
        (g,) = got["group"]
        assert (g["read"], g["duplicates"]) == (GROUP_RECORDS, 0)


def test_clients_re_authenticate_before_their_session_ends(secure):
    """connections.max.reauth.ms=2000 on the SASL_PLAINTEXT listener: librdkafka (KIP-368)
    authenticates again on its connection; no request ever arrives after a session ended
    (the broker would close the connection and say so in its audit log)."""
    ck = require_module("confluent_kafka")
    topic = "sec-reauth"
    p = ck.Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{secure.ports.sasl_plain}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": PASSWORDS["alice"],
            "linger.ms": 0,
        }
    )
    errors, sent = [], 0
    end = time.monotonic() + 5
    while time.monotonic() < end:
        p.produce(topic, f"r-{sent}".encode(), on_delivery=lambda e, m: errors.append(e) if e else None)
        sent += 1
        p.poll(0.05)
    assert p.flush(TIMEOUT) == 0 and errors == []
    assert end_offset(secure, topic) == sent
    assert "session expired" not in secure.broker.log_path.read_text()


# ---------------------------------------------------------------------------- refused


def end_offset(secure, topic: str) -> int:
    ck = require_module("confluent_kafka")
    c = ck.Consumer(
        {
            **conf(secure, "plain", **{"sasl.username": "admin", "sasl.password": PASSWORDS["admin"]}),
            "group.id": "g-admin-offsets",
        }
    )
    try:
        lo, hi = c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)
        return hi
    finally:
        c.close()


def healthy(secure) -> None:
    """The broker still serves an authorized client."""
    confluent_round_trip(secure, "scram", f"sec-healthy-{time.monotonic_ns()}")


@pytest.mark.parametrize(
    "user, password, mechanism",
    [("alice", "wrong", "SCRAM-SHA-512"), ("nobody", "x", "SCRAM-SHA-512"), ("alice", "wrong", "PLAIN")],
)
def test_bad_credentials_are_refused(secure, user, password, mechanism):
    security = ClientSecurity(
        "SASL_SSL", ssl.create_default_context(cafile=str(secure.certs.ca)), mechanism, user, password
    )
    t0 = time.monotonic()
    with pytest.raises(ClientError, match="SASL_AUTHENTICATION_FAILED"):
        BrokerConnection("127.0.0.1", secure.ports.sasl_ssl, security=security)
    assert time.monotonic() - t0 >= 0.2  # connection.failed.authentication.delay.ms


def test_unknown_mechanism_and_requests_before_authentication(secure):
    from broker.protocol.messages.metadata import MetadataRequest
    from broker.protocol.messages.sasl_handshake import SaslHandshakeRequest

    c = BrokerConnection("127.0.0.1", secure.ports.sasl_plain)
    resp = c.request(SaslHandshakeRequest(mechanism="GSSAPI"), version=1)
    assert resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and resp.mechanisms == ["SCRAM-SHA-256"]
    for request in (
        MetadataRequest(topics=None),
        LeaderAndIsrRequest(controller_id=0, controller_epoch=1, broker_epoch=1),
    ):
        c = BrokerConnection("127.0.0.1", secure.ports.sasl_plain)
        with pytest.raises(ClientError, match="closed"):
            c.request(request)
    log = secure.broker.log_path.read_text()
    assert "broker.audit" in log and "before authentication completed" in log


def test_plaintext_to_tls_and_tls_to_plaintext(secure):
    s = socket.create_connection(("127.0.0.1", secure.ports.ssl), timeout=5)
    s.sendall(struct.pack(">i", 10) + b"\x00\x12\x00\x03" + b"\x00" * 6)
    try:
        assert s.recv(100) == b""  # closed, nothing answered
    except ConnectionResetError:
        pass  # (or reset: the same refusal)
    s.close()
    ctx = ssl.create_default_context(cafile=str(secure.certs.ca))
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with socket.create_connection(("127.0.0.1", secure.ports.plain), timeout=5) as raw:
            ctx.wrap_socket(raw, server_hostname="localhost")


@pytest.mark.parametrize("pem", ["expired_pem", "self_signed_pem", "other_ca_pem"])
def test_bad_client_certificates_are_refused(secure, pem):
    ctx = ssl.create_default_context(cafile=str(secure.certs.ca))
    ctx.load_cert_chain(str(getattr(secure.certs, pem)))
    with pytest.raises(ClientError):
        BrokerConnection("127.0.0.1", secure.ports.mtls, security=ClientSecurity("SSL", ctx), timeout=5)


def test_clients_may_not_send_inter_broker_requests(secure):
    """Not even authenticated: LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown
    need CLUSTER_ACTION."""
    ctx = ssl.create_default_context(cafile=str(secure.certs.ca))
    for who, security in (
        ("anonymous", None),
        ("alice", ClientSecurity("SASL_SSL", ctx, "SCRAM-SHA-512", "alice", PASSWORDS["alice"])),
    ):
        port = secure.ports.plain if security is None else secure.ports.sasl_ssl
        with BrokerConnection("127.0.0.1", port, security=security) as c:
            for req in (
                LeaderAndIsrRequest(controller_id=0, controller_epoch=1, broker_epoch=1),
                StopReplicaRequest(controller_id=0, controller_epoch=1, broker_epoch=1),
                UpdateMetadataRequest(controller_id=0, controller_epoch=1, broker_epoch=1),
                ControlledShutdownRequest(broker_id=0, broker_epoch=1),
            ):
                assert c.request(req).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED, (who, req)


def test_users_without_the_acls_are_refused_and_nothing_is_written(secure):
    ck = require_module("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "sec-guarded"
    confluent_round_trip(secure, "scram", topic)  # alice may
    before = end_offset(secure, topic)
    bob = {**conf(secure, "scram"), "sasl.username": "bob", "sasl.password": PASSWORDS["bob"]}
    # no WRITE: produce refused
    p = ck.Producer({**bob, "message.timeout.ms": 5000})
    errors = []
    p.produce(topic, b"bob", on_delivery=lambda e, m: errors.append(e))
    p.flush(15)
    assert errors and errors[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    # no READ: consume refused (bob may use group bob-g, so that the topic's refusal shows)
    cli(
        "acls",
        "add",
        "--bootstrap",
        secure.boot,
        "--command-config",
        secure.admin,
        "--allow-principal",
        "User:bob",
        "--operation",
        "Read",
        "--group",
        "bob-g",
    )
    c = ck.Consumer({**bob, "group.id": "bob-g", "auto.offset.reset": "earliest"})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    codes = set()
    deadline = time.monotonic() + 10
    while not codes and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error():
            codes.add(m.error().code())
    c.close()
    assert ck.KafkaError.TOPIC_AUTHORIZATION_FAILED in codes
    # no group READ: joining refused
    c = ck.Consumer({**bob, "group.id": "not-bobs", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    codes = set()
    deadline = time.monotonic() + 10
    while not codes and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error():
            codes.add(m.error().code())
    c.close()
    assert ck.KafkaError.GROUP_AUTHORIZATION_FAILED in codes
    # no DELETE: DeleteTopics refused; no CLUSTER rights: CreateAcls refused
    admin = AdminClient(bob)
    fut = admin.delete_topics([topic], operation_timeout=10)[topic]
    with pytest.raises(ck.KafkaException) as info:
        fut.result(15)
    assert info.value.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    fut = admin.create_topics([NewTopic("other-bob", 1, 1)])["other-bob"]
    with pytest.raises(ck.KafkaException) as info:
        fut.result(15)
    assert info.value.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    bob_cfg = secure.dir / "bob.properties"
    bob_cfg.write_text(
        secure.admin.read_text()
        .replace('username="admin"', 'username="bob"')
        .replace(PASSWORDS["admin"], PASSWORDS["bob"])
    )
    r = cli(
        "acls",
        "add",
        "--bootstrap",
        secure.boot,
        "--command-config",
        bob_cfg,
        "--allow-principal",
        "User:bob",
        "--operation",
        "All",
        "--topic",
        "sec-",
        check=False,
    )
    assert r.returncode == 1 and b"CLUSTER_AUTHORIZATION_FAILED" in r.stderr
    # Metadata leaves out what bob may not describe; nothing was written
    md = admin.list_topics(timeout=10)
    assert all(t.startswith("sec-") for t in md.topics)
    assert end_offset(secure, topic) == before
    # refusals are audited (one line per 10 s: others' may be the one shown, bob's counted)
    log = secure.broker.log_path.read_text()
    assert "broker.audit: refused User:" in log and " from 127.0.0.1 on " in log
    healthy(secure)


def test_the_cli_lists_users_and_acls(secure):
    out = cli("users", "list", "--bootstrap", secure.boot, "--command-config", secure.admin).stdout.decode()
    assert "alice\t" in out and "SCRAM-SHA-512 iterations=4096" in out
    # a password from stdin (kept out of ps), then deleted
    cli("users", "add", "carol", "--bootstrap", secure.boot, "--command-config", secure.admin, stdin=b"carol-pw\n")
    assert (
        "carol\t" in cli("users", "list", "--bootstrap", secure.boot, "--command-config", secure.admin).stdout.decode()
    )
    cli("users", "delete", "carol", "--bootstrap", secure.boot, "--command-config", secure.admin)
    assert (
        "carol\t"
        not in cli("users", "list", "--bootstrap", secure.boot, "--command-config", secure.admin).stdout.decode()
    )
    out = cli("acls", "list", "--bootstrap", secure.boot, "--command-config", secure.admin).stdout.decode()
    assert "TOPIC:PREFIXED:sec-" in out and "ALLOW User:alice READ from *" in out
    cli(
        "acls",
        "add",
        "--bootstrap",
        secure.boot,
        "--command-config",
        secure.admin,
        "--allow-principal",
        "User:carol",
        "--operation",
        "Read",
        "--topic",
        "clicks",
    )
    out = cli(
        "acls", "remove", "--bootstrap", secure.boot, "--command-config", secure.admin, "--topic", "clicks"
    ).stdout.decode()
    assert out.strip() == "removed 1 ACLs"


def test_kafkas_kafka_acls_and_kafka_configs(secure, tmp_path):
    """Kafka's own tools: kafka-acls adds, lists and removes ACLs; kafka-configs sets and
    deletes SCRAM credentials (AlterUserScramCredentials), which then log in."""
    from tests.support.kafka_tools import kafka_tool

    admin = tmp_path / "admin.properties"
    admin.write_text(secure.admin.read_text())
    b = secure.boot
    kafka_tool(
        "kafka-acls",
        "--bootstrap-server",
        b,
        "--command-config",
        admin,
        "--add",
        "--allow-principal",
        "User:dave",
        "--operation",
        "Read",
        "--topic",
        "dave-topic",
    )
    out = kafka_tool(
        "kafka-acls", "--bootstrap-server", b, "--command-config", admin, "--list", "--topic", "dave-topic"
    ).stdout
    assert "User:dave" in out and "READ" in out
    kafka_tool(
        "kafka-configs",
        "--bootstrap-server",
        b,
        "--command-config",
        admin,
        "--alter",
        "--add-config",
        "SCRAM-SHA-512=[iterations=8192,password=dave-secret]",
        "--entity-type",
        "users",
        "--entity-name",
        "dave",
    )
    ctx = ssl.create_default_context(cafile=str(secure.certs.ca))
    with BrokerConnection(
        "127.0.0.1",
        secure.ports.sasl_ssl,
        security=ClientSecurity("SASL_SSL", ctx, "SCRAM-SHA-512", "dave", "dave-secret"),
    ):
        pass
    kafka_tool(
        "kafka-configs",
        "--bootstrap-server",
        b,
        "--command-config",
        admin,
        "--alter",
        "--delete-config",
        "SCRAM-SHA-512",
        "--entity-type",
        "users",
        "--entity-name",
        "dave",
    )
    with pytest.raises(ClientError, match="SASL_AUTHENTICATION_FAILED"):
        BrokerConnection(
            "127.0.0.1",
            secure.ports.sasl_ssl,
            security=ClientSecurity("SASL_SSL", ctx, "SCRAM-SHA-512", "dave", "dave-secret"),
        )
    kafka_tool(
        "kafka-acls",
        "--bootstrap-server",
        b,
        "--command-config",
        admin,
        "--remove",
        "--force",
        "--allow-principal",
        "User:dave",
        "--operation",
        "Read",
        "--topic",
        "dave-topic",
    )
    out = kafka_tool(
        "kafka-acls", "--bootstrap-server", b, "--command-config", admin, "--list", "--topic", "dave-topic"
    ).stdout
    assert "User:dave" not in out


def test_every_client_command_takes_command_config(secure):
    """produce, consume, logs tail and the Kafka-shaped tools (configs, log-dirs, offsets)
    reach a SASL_SSL listener with --command-config, as topics/groups/users/acls do."""
    b, admin, topic = secure.boot, secure.admin, "sec-cli-tools"
    cli("topics", "create", topic, "--partitions", "1", "--bootstrap", b, "--command-config", admin)
    r = cli("produce", "--bootstrap-server", b, "--command-config", admin, "--topic", topic, stdin=b"one\ntwo\n")
    assert b"produced 2 messages" in r.stderr
    out = cli(
        "consume",
        "--bootstrap-server",
        b,
        "--command-config",
        admin,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        "2",
        "--timeout-ms",
        "15000",
    ).stdout
    assert out.split() == [b"one", b"two"]
    out = cli(
        "logs",
        "tail",
        "--bootstrap-server",
        b,
        "--command-config",
        admin,
        "--topic",
        topic,
        "--from-beginning",
        "--no-follow",
    ).stdout
    assert out.split() == [b"one", b"two"]
    out = cli("offsets", "--bootstrap-server", b, "--command-config", admin, "--topic", topic).stdout.decode()
    assert out.strip() == f"{topic}:0:2"
    out = cli(
        "configs", "describe", "--bootstrap-server", b, "--command-config", admin, "--topic", topic
    ).stdout.decode()
    assert topic in out
    out = cli(
        "log-dirs", "describe", "--bootstrap-server", b, "--command-config", admin, "--topic-list", topic
    ).stdout.decode()
    assert f'"partition":"{topic}-0"' in out
    # without it the TLS listener is not spoken to: one line, no traceback
    r = cli("offsets", "--bootstrap-server", b, "--topic", topic, check=False)
    assert r.returncode != 0 and b"Traceback" not in r.stderr


def test_the_projects_client_sends_large_batches_over_tls(secure):
    """Batches above the splice threshold go out in parts (sendmsg on plain sockets); a TLS
    socket has no sendmsg. broker perf over SASL_SSL, 16 KiB batches of 1 KB records."""
    b, admin, topic = secure.boot, secure.admin, "sec-perf-tls"
    out = cli(
        "perf",
        "produce",
        "--bootstrap",
        b,
        "--command-config",
        admin,
        "--topic",
        topic,
        "--num-records",
        3000,
        "--record-size",
        1000,
        "--partitions",
        1,
        "--json",
    ).stdout
    assert json.loads(out)["records"] == 3000
    out = cli(
        "perf",
        "consume",
        "--bootstrap",
        b,
        "--command-config",
        admin,
        "--topic",
        topic,
        "--num-records",
        3000,
        "--json",
    ).stdout
    assert json.loads(out)["records"] == 3000
    assert end_offset(secure, topic) == 3000
