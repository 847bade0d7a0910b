"""TLS from Kafka's ssl.* keys (broker/security/tls.py) and a listener's connections over
it (broker/server/connection.py): key and trust stores as PEM files, inline PEM and
PKCS12, JKS refused with what to do, cipher suites by Java's names, the client
certificate's subject as principal through ssl.principal.mapping.rules, refused
handshakes audited and closed, a fetch's file ranges sent through TLS, and a large
request received in place from OpenSSL — on real sockets with a real TLS client,
without a broker process."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import struct
from types import SimpleNamespace

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.security.listener import ListenerSecurity, inter_broker_security, listener_securities
from broker.security.tls import (
    NoMatchingRule,
    PrincipalMapper,
    SslSettings,
    TlsConfigError,
    client_context,
    openssl_cipher_names,
    server_context,
    subject_dn,
)
from broker.server.connection import Connection
from tests.support.certs import PKCS12_PASSWORD


def settings(**values) -> SslSettings:
    return SslSettings.from_properties({k.replace("__", "."): str(v) for k, v in values.items()})


# ---------------------------------------------------------------------------- stores


def test_key_stores_as_pem_file_inline_pem_and_pkcs12(certs):
    server_context(settings(ssl__keystore__type="PEM", ssl__keystore__location=certs.broker_pem))
    server_context(
        settings(
            ssl__keystore__type="PEM",
            ssl__keystore__certificate__chain=certs.broker_cert.read_text(),
            ssl__keystore__key=certs.broker_key.read_text(),
        )
    )
    server_context(
        settings(
            ssl__keystore__type="PKCS12",
            ssl__keystore__location=certs.broker_p12,
            ssl__keystore__password=PKCS12_PASSWORD,
        )
    )
    ctx = server_context(
        settings(
            ssl__keystore__type="PEM",
            ssl__keystore__location=certs.broker_pem,
            ssl__truststore__type="PKCS12",
            ssl__truststore__location=certs.ca_p12,
            ssl__truststore__password=PKCS12_PASSWORD,
            ssl__client__auth="required",
        )
    )
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.cert_store_stats()["x509_ca"] == 1
    # no private key file left behind
    assert not [p for p in os.listdir("/tmp") if p.startswith("kbroker-tls-")]


@pytest.mark.parametrize(
    "values, words",
    [
        (dict(ssl__keystore__location="/x.jks"), ["ssl.keystore.type", "JKS", "PKCS12"]),
        (
            dict(ssl__keystore__type="PEM", ssl__keystore__location="/no/such.pem"),
            ["ssl.keystore.location", "/no/such.pem"],
        ),
        (dict(ssl__keystore__type="PEM"), ["needs a key store"]),
        (dict(ssl__keystore__type="PKCS12", ssl__keystore__password="wrong"), ["wrong password"]),
        (dict(ssl__keystore__type="PEM", ssl__client__auth="required"), ["ssl.client.auth", "trust store"]),
        (dict(ssl__keystore__type="PEM", ssl__cipher__suites="TLS_AES_128_GCM_SHA256"), ["TLS 1.3", "all three"]),
        (dict(ssl__keystore__type="PEM", ssl__cipher__suites="TLS_NO_SUCH_SUITE"), ["unknown to OpenSSL"]),
    ],
)
def test_stores_and_settings_that_cannot_be_used_say_which_key(certs, values, words):
    if values.get("ssl__keystore__type") == "PKCS12":
        values["ssl__keystore__location"] = certs.broker_p12
    elif (
        values.get("ssl__keystore__type") == "PEM"
        and "ssl__keystore__location" not in values
        and "ssl__client__auth" in values
        or "ssl__cipher__suites" in values
    ):
        values["ssl__keystore__location"] = certs.broker_pem
    with pytest.raises(TlsConfigError) as info:
        server_context(settings(**values))
    for w in words:
        assert w in str(info.value)
    assert "\n" not in str(info.value)


def test_cipher_suites_by_java_names():
    tls12, tls13 = openssl_cipher_names(
        [
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_RSA_WITH_AES_256_GCM_SHA384",
            "ECDHE-ECDSA-CHACHA20-POLY1305",
            "TLS_AES_256_GCM_SHA384",
        ]
    )
    assert tls12 == ["ECDHE-RSA-AES128-GCM-SHA256", "AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305"]
    assert tls13 == ["TLS_AES_256_GCM_SHA384"]


def test_only_tls12_suites_listed_disables_tls13(certs):
    ctx = server_context(
        settings(
            ssl__keystore__type="PEM",
            ssl__keystore__location=certs.broker_pem,
            ssl__cipher__suites="TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        )
    )
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_2
    assert [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"] == ["ECDHE-ECDSA-AES128-GCM-SHA256"]


def test_listener_prefixed_settings_and_the_inter_broker_client(certs):
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://:0,SSL://:0,INTERNAL://:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,INTERNAL:SSL",
            "inter.broker.listener.name": "INTERNAL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.broker_pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(certs.ca),
            "listener.name.internal.ssl.client.auth": "required",
            "listener.name.ssl.ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),.*$/$1/U",
        }
    )
    secs = listener_securities(config)
    assert secs["PLAINTEXT"].ssl_context is None
    assert secs["SSL"].ssl_context.verify_mode == ssl.CERT_NONE
    assert secs["INTERNAL"].ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert secs["SSL"].mapper.name("CN=alice,O=x") == "ALICE"
    client = inter_broker_security(config)
    assert client.security_protocol == "SSL" and client.ssl_context.check_hostname
    with pytest.raises(ConfigError):
        BrokerConfig({"listener.name.ssl.ssl.client.auth": "sometimes"})


# ---------------------------------------------------------------------------- principals


def test_principal_mapping_rules_as_kafkas():
    m = PrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, "
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, DEFAULT"
    )
    assert m.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert m.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US") == "duke@javasoft"
    assert m.name("CN=other,O=x") == "CN=other,O=x"
    assert PrincipalMapper(None).name("CN=a,O=b") == "CN=a,O=b"
    with pytest.raises(NoMatchingRule):
        PrincipalMapper("RULE:^CN=(x)$/$1/").name("CN=y")
    with pytest.raises(ValueError):
        PrincipalMapper("RULE:^CN=([/$1/")


def test_subject_in_rfc2253_order(certs):
    der = ssl.PEM_cert_to_DER_cert(certs.client_cert.read_text())
    assert subject_dn(der) == "CN=alice,OU=clients,O=kbroker tests,C=US"


# ---------------------------------------------------------------------------- connections


class FakeServer:
    def __init__(self, loop):
        self.loop = loop
        self.services = SimpleNamespace(config={"socket.request.max.bytes": 1 << 20})
        self.max_queued_bytes_per_connection = 4 << 20
        self.request_memory = None
        self.established = []
        self.frames = []
        self.answers = {}
        self.closed = []
        self.audited = []

    def dispatch(self, conn, frame):
        self.frames.append((conn.principal, bytes(frame)))
        return self.answers.get(bytes(frame), [b"\x00\x00\x00\x02ok"])

    def connection_closed(self, conn):
        self.closed.append(conn)

    def connection_established(self, conn):
        self.established.append(conn)

    def audit_failure(self, conn, what):
        self.audited.append(what)


def tls_listener(certs, client_auth="required", rules=None) -> ListenerSecurity:
    ctx = server_context(
        settings(
            ssl__keystore__type="PEM",
            ssl__keystore__location=certs.broker_pem,
            ssl__truststore__type="PEM",
            ssl__truststore__location=certs.ca,
            ssl__client__auth=client_auth,
        )
    )
    return ListenerSecurity("SSL", "SSL", ctx, PrincipalMapper(rules))


def client_ctx(certs, pem=None):
    ctx = client_context(
        settings(
            ssl__truststore__type="PEM",
            ssl__truststore__location=certs.ca,
            **({"ssl__keystore__type": "PEM", "ssl__keystore__location": pem} if pem else {}),
        )
    )
    return ctx


async def connect(certs, security, client_pem=None, plaintext=False):
    loop = asyncio.get_running_loop()
    server = FakeServer(loop)
    a, b = socket.socketpair()
    conn = Connection(server, a, ("127.0.0.1", 5555), SimpleNamespace(name="SSL", security=security))
    if plaintext:
        return server, conn, b
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(sock=b, ssl=client_ctx(certs, client_pem), server_hostname="localhost"), 5
    )
    return server, conn, (reader, writer)


async def _until(pred, timeout=5.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.005)


def test_a_client_certificate_names_the_principal_and_requests_flow(certs):
    async def run():
        server, conn, (reader, writer) = await connect(
            certs, tls_listener(certs, rules="RULE:^CN=([a-z]+),.*$/$1/,DEFAULT"), certs.client_pem
        )
        writer.write(struct.pack(">i", 3) + b"abc")
        assert await asyncio.wait_for(reader.readexactly(6), 5) == b"\x00\x00\x00\x02ok"
        assert server.frames == [("User:alice", b"abc")]
        # the handshake done, the connection no longer counts as authenticating
        assert server.established == [conn] and not conn.authenticating
        writer.close()
        await _until(lambda: conn.closed)

    asyncio.run(run())


def test_without_a_requested_certificate_the_client_is_anonymous(certs):
    async def run():
        server, conn, (reader, writer) = await connect(certs, tls_listener(certs, "requested"))
        writer.write(struct.pack(">i", 1) + b"x")
        await asyncio.wait_for(reader.readexactly(6), 5)
        assert server.frames == [("User:ANONYMOUS", b"x")]
        writer.close()

    asyncio.run(run())


def test_file_ranges_go_through_tls_in_large_reads(certs, tmp_path):
    """A response of bytes and file ranges (a fetch) arrives whole and in order."""
    data = os.urandom(3 * 1024 * 1024 + 17)
    path = tmp_path / "segment"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    closed = []

    class Slice:
        def __init__(self, offset, length):
            self.fd, self.offset, self.length = fd, offset, length

        def close(self):
            closed.append(self.offset)

    async def run():
        server, conn, (reader, writer) = await connect(certs, tls_listener(certs), certs.client_pem)
        total = 8 + len(data) - 200  # "head", the two ranges, "tail"
        server.answers[b"fetch"] = [
            struct.pack(">i", total) + b"head",
            Slice(100, 2_000_000),
            Slice(2_000_100, len(data) - 2_000_200),
            b"tail",
        ]
        writer.write(struct.pack(">i", 5) + b"fetch")
        got = await asyncio.wait_for(reader.readexactly(4 + total), 10)
        assert got[4:8] == b"head" and got[8:-4] == data[100:-100] and got[-4:] == b"tail"
        assert len(closed) == 2 and conn.out_bytes == 0  # each range released once sent
        writer.close()

    try:
        asyncio.run(run())
    finally:
        os.close(fd)


def test_large_requests_over_tls_are_received_in_place(certs, monkeypatch):
    """SSLSocket.recv_into writes a large frame's decrypted bytes into the frame itself
    (the buffer dispatched), across TLS records and reads; small frames around it as before."""
    from tests.support.framing_spy import spy_direct_buffers

    owners = spy_direct_buffers(monkeypatch)
    big = [os.urandom(900_000), os.urandom(300_000)]

    async def run():
        server, conn, (reader, writer) = await connect(certs, tls_listener(certs), certs.client_pem)
        got = []
        server.dispatch = lambda c, f: got.append(f)
        writer.write(b"".join(struct.pack(">i", len(p)) + p for p in (b"a", big[0], b"bc", big[1], b"d")))
        await _until(lambda: len(got) == 5)
        assert [bytes(f) for f in got] == [b"a", big[0], b"bc", big[1], b"d"]
        assert len(owners) == 2 and got[1] is owners[0] and got[3] is owners[1]
        writer.close()
        await _until(lambda: conn.closed)

    asyncio.run(run())


@pytest.mark.parametrize("pem", ["expired_pem", "self_signed_pem", "other_ca_pem", None])
def test_bad_client_certificates_are_refused_audited_and_closed(certs, pem, caplog):
    async def run():
        loop = asyncio.get_running_loop()
        server = FakeServer(loop)
        a, b = socket.socketpair()
        conn = Connection(server, a, ("127.0.0.1", 1), SimpleNamespace(name="SSL", security=tls_listener(certs)))
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    sock=b, ssl=client_ctx(certs, getattr(certs, pem) if pem else None), server_hostname="localhost"
                ),
                5,
            )
            # TLS 1.3: the client learns of the refusal on its first read
            writer.write(struct.pack(">i", 1) + b"x")
            assert await asyncio.wait_for(reader.read(), 5) == b""
        except (ssl.SSLError, ConnectionError):
            pass
        await _until(lambda: conn.closed)
        assert server.frames == [] and len(server.audited) == 1 and "TLS handshake failed" in server.audited[0]
        assert server.established == []  # it never counted as authenticated

    asyncio.run(run())


def test_plaintext_bytes_to_a_tls_listener_are_refused(certs):
    async def run():
        server, conn, peer = await connect(certs, tls_listener(certs), plaintext=True)
        peer.sendall(struct.pack(">i", 10) + b"\x00\x12\x00\x03" + b"\x00" * 6)  # an ApiVersions
        await _until(lambda: conn.closed)
        assert server.frames == [] and "TLS handshake failed" in server.audited[0]
        peer.close()

    asyncio.run(run())


def test_the_audit_log_holds_repeated_failures_to_one_line(caplog):
    from broker.server.server import ThrottledLog, audit

    held = ThrottledLog(10.0, audit)
    with caplog.at_level(logging.WARNING, logger="broker.audit"):
        for _ in range(50):
            held(logging.WARNING, "TLS handshake failed from %s", "10.0.0.1")
    assert [r.name for r in caplog.records] == ["broker.audit"]


def test_describe_configs_never_tells_a_password(certs):
    from broker.protocol.messages.describe_configs import DescribeConfigsResponse as R
    from broker.server.broker_configs import describe

    config = BrokerConfig({"ssl.keystore.password": "secret", "ssl.keystore.type": "PKCS12"})
    entries = {
        e.name: e
        for e in describe(
            SimpleNamespace(config=config, broker_id=0),
            "0",
            None,
            R.DescribeConfigsSynonym,
            R.DescribeConfigsResourceResult,
            False,
        )
    }
    e = entries["ssl.keystore.password"]
    assert e.value is None and e.is_sensitive and all(s.value is None for s in e.synonyms)
    assert entries["ssl.keystore.type"].value == "PKCS12" and not entries["ssl.keystore.type"].is_sensitive


def test_the_ktls_probe_says_what_it_found():
    """docs/security.md's command: one line per condition, the verdict last, exit 0 only
    when kTLS is usable."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "bench/tls/ktls_probe.py"], capture_output=True, text=True, timeout=30)
    lines = run.stdout.splitlines()
    assert lines[0].startswith("kernel: TCP_ULP tls") and lines[1].startswith("python ")
    assert lines[-1] in ("kTLS usable: yes", "kTLS usable: no")
    assert run.returncode == (0 if lines[-1].endswith("yes") else 1)
