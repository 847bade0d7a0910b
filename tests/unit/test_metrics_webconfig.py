"""Issue 34, item 7: the metrics listener behind TLS and basic authentication
(metrics.listener.web.config.file, broker/metrics/webconfig.py).

The loader takes the web configuration files Prometheus' own tool (promtool check
web-config, Prometheus 2.42) takes, and refuses with one line what kbroker cannot honour
as written; `broker serve` stops on such a file with exit 2. A broker in this process
then answers every path 401 without the right credentials (the status page and
/status.json too), sends the configured headers, requires a client certificate when
told to, and spends one bcrypt per set of credentials (cached), in a worker thread: the
event loop keeps running meanwhile, and a flood of wrong passwords neither evicts the
right ones from the cache nor waits in line without bound (429)."""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
import subprocess
import sys
import time
from pathlib import Path

import bcrypt
import pytest

import broker.metrics.webconfig as webconfig
from broker.config import BrokerConfig, ConfigError
from broker.metrics.webconfig import BasicAuth, WebConfigError, credentials, load_web_config
from broker.server.broker import Broker
from tests.support.certs import make_certs
from tests.support.deps import require_binary
from tests.support.ports import free_port

PASSWORD = b"scrape-secret"
HASH = bcrypt.hashpw(PASSWORD, bcrypt.gensalt(4)).decode()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def write(directory: Path, text: str, certs) -> Path:
    """The web configuration `text` (CERT, KEY, CA replaced by the test's files) in `directory`."""
    path = directory / "web.yml"
    path.write_text(
        text.replace("CERT", str(certs.broker_cert))
        .replace("KEY", str(certs.broker_key))
        .replace("CA", str(certs.ca))
        .replace("HASH", HASH)
    )
    return path


TLS = "tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n"

GOOD = {
    "tls and users": TLS + "basic_auth_users:\n  prometheus: HASH\n",
    "users alone": "basic_auth_users:\n  prometheus: HASH\n  'grafana': '$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi'\n",
    "tls alone": TLS,
    "every supported key": TLS
    + """  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: CA
  min_version: TLS12
  max_version: TLS13
  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]
  prefer_server_cipher_suites: false
http_server_config:
  http2: true
  headers:
    Strict-Transport-Security: max-age=31536000
    X-Content-Type-Options: nosniff
    X-Frame-Options: sameorigin
    X-XSS-Protection: '1; mode=block'
    Content-Security-Policy: ''
basic_auth_users:
  prometheus: HASH
""",
}

# (file, the one line expected, whether promtool refuses the file too)
BAD = {
    "unknown top key": (TLS + "foo: 1\n", "foo: unknown key", True),
    "unknown tls key": (TLS + "  ciphers: [x]\n", "tls_server_config.ciphers: unknown key", True),
    "rate_limit": (TLS + "rate_limit:\n  interval: 1s\n", "rate_limit: not supported", True),
    "inline cert": ("tls_server_config:\n  cert: x\n  key: y\n", "tls_server_config.cert: not supported", True),
    "client_allowed_sans": (TLS + "  client_allowed_sans: [a]\n", "client_allowed_sans: not supported", True),
    "curve_preferences": (TLS + "  curve_preferences: [CurveP256]\n", "curve_preferences: not supported", False),
    "a key twice": ("basic_auth_users:\n  a: HASH\n  a: HASH\n", "line 3: key 'a' given twice", True),
    "not yaml": ("basic_auth_users: [\n", "not valid YAML", True),
    "a list": ("- 1\n", "the file: expected a mapping", True),
    "not a hash": ("basic_auth_users:\n  a: secret\n", "basic_auth_users.a: not a bcrypt hash", True),
    "cost 3": ("basic_auth_users:\n  a: '$2b$03$" + "a" * 53 + "'\n", "bcrypt cost 3 is outside 4..31", True),
    "missing key_file": ("tls_server_config:\n  cert_file: CERT\n", "tls_server_config.key_file: missing", True),
    "certificate as key": (
        "tls_server_config:\n  cert_file: CERT\n  key_file: CERT\n",
        "cannot load the certificate and key",
        True,
    ),
    "missing file": (
        "tls_server_config:\n  cert_file: /nonexistent.pem\n  key_file: KEY\n",
        "tls_server_config.cert_file: cannot read /nonexistent.pem: No such file or directory",
        True,
    ),
    "unknown version": (TLS + "  min_version: TLS14\n", "min_version: unknown TLS version 'TLS14'", True),
    "min above max": (TLS + "  min_version: TLS13\n  max_version: TLS12\n", "min_version: TLS13 is above", False),
    "unknown cipher": (
        TLS + "  cipher_suites: [ECDHE-RSA-AES128-GCM-SHA256]\n",
        "unknown cipher suite 'ECDHE-RSA-AES128-GCM-SHA256'",
        True,
    ),
    "ca without client auth": (TLS + "  client_ca_file: CA\n", "client_ca_file: set, but client_auth_type", True),
    "client auth without ca": (TLS + "  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file", False),
    "unverified client certs": (
        TLS + "  client_auth_type: RequireAnyClientCert\n  client_ca_file: CA\n",
        "RequireAnyClientCert asks for a client certificate without verifying it",
        False,
    ),
    "unknown client auth": (TLS + "  client_auth_type: Bogus\n", "client_auth_type: unknown: 'Bogus'", True),
    "header not allowed": (
        TLS + "http_server_config:\n  headers:\n    Foo: bar\n",
        "http_server_config.headers.Foo: this header cannot be configured",
        True,
    ),
    "header value": (
        TLS + "http_server_config:\n  headers:\n    X-Frame-Options: DENY\n",
        "'DENY' is not one of deny, sameorigin",
        True,
    ),
    "http2 not a boolean": (TLS + "http_server_config:\n  http2: yes please\n", "http2: expected true or false", True),
    "protects nothing": (
        "http_server_config:\n  headers: {}\n",
        "sets neither tls_server_config nor basic_auth_users: it would protect nothing",
        False,
    ),
}


def promtool(path: Path) -> bool:
    """Whether Prometheus' own tool takes the file."""
    exe = require_binary("promtool", "prometheus")
    return subprocess.run([exe, "check", "web-config", str(path)], capture_output=True, timeout=60).returncode == 0


@pytest.mark.parametrize("name", sorted(GOOD))
def test_the_files_prometheus_takes_load(name, tmp_path, certs):
    path = write(tmp_path, GOOD[name], certs)
    assert promtool(path)
    web = load_web_config(str(path))
    assert (web.ssl_context is not None) == ("tls" in name or "every" in name)
    if "users" in name or "every" in name:
        assert bcrypt.checkpw(PASSWORD, web.users[b"prometheus"])


def test_every_supported_key_takes_effect(tmp_path, certs):
    web = load_web_config(str(write(tmp_path, GOOD["every supported key"], certs)))
    ctx = web.ssl_context
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.get_ca_certs()
    assert (ctx.minimum_version, ctx.maximum_version) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)
    assert not ctx.options & ssl.OP_CIPHER_SERVER_PREFERENCE
    tls12 = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384"}
    # a blank header is not sent, as exporter-toolkit
    assert web.headers == [
        ("Strict-Transport-Security", "max-age=31536000"),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "sameorigin"),
        ("X-XSS-Protection", "1; mode=block"),
    ]
    assert web.warnings == []
    users_alone = load_web_config(str(write(tmp_path, GOOD["users alone"], certs)))
    assert users_alone.warnings == [
        f"metrics.listener.web.config.file {tmp_path / 'web.yml'}: basic_auth_users "
        "without tls_server_config: passwords cross the network in the clear"
    ]


@pytest.mark.parametrize("name", sorted(BAD))
def test_what_cannot_be_honoured_is_refused_in_one_line(name, tmp_path, certs):
    text, expected, promtool_refuses = BAD[name]
    path = write(tmp_path, text, certs)
    with pytest.raises(WebConfigError) as err:
        load_web_config(str(path))
    message = str(err.value)
    assert message.startswith(f"{path}: ") and expected in message and "\n" not in message, message
    # the format is Prometheus': what it refuses, kbroker refuses (kbroker refuses some more)
    assert promtool(path) is not promtool_refuses


def test_the_key_needs_metrics_listener_and_a_usable_file(tmp_path, certs):
    base = {"log.dirs": str(tmp_path / "data")}
    path = write(tmp_path, GOOD["tls and users"], certs)
    with pytest.raises(
        ConfigError,
        match="^metrics.listener.web.config.file: set without metrics.listener: there "
        "is no listener for it to protect$",
    ):
        BrokerConfig({**base, "metrics.listener.web.config.file": str(path)})
    with pytest.raises(
        ConfigError, match="^metrics.listener.web.config.file: cannot read /nonexistent.yml: No such file or directory$"
    ):
        BrokerConfig(
            {**base, "metrics.listener": "127.0.0.1:0", "metrics.listener.web.config.file": "/nonexistent.yml"}
        )
    config = BrokerConfig({**base, "metrics.listener": "127.0.0.1:0", "metrics.listener.web.config.file": str(path)})
    assert config.metrics_web is not None and config.metrics_web.users


def test_broker_serve_stops_on_a_file_it_cannot_honour_with_exit_2(tmp_path, certs):
    path = write(tmp_path, TLS + "  client_auth_type: RequestClientCert\n  client_ca_file: CA\n", certs)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli.main",
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--set",
            f"metrics.listener=127.0.0.1:{free_port()}",
            "--set",
            f"metrics.listener.web.config.file={path}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"broker: configuration error: metrics.listener.web.config.file: {path}: tls_server_config.client_auth_type: "
        "RequestClientCert asks for a client certificate without verifying it, which Python's ssl cannot do: use "
        "RequireAndVerifyClientCert (or VerifyClientCertIfGiven) with client_ca_file"
    ]


# ---------------------------------------------------------------------------- a broker here


def basic(user: bytes, password: bytes) -> bytes:
    return b"Authorization: Basic " + base64.b64encode(user + b":" + password) + b"\r\n"


async def request(port: int, ctx: ssl.SSLContext | None, head: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1" if ctx else None
    )
    writer.write(head)
    raw = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    top, _, body = raw.partition(b"\r\n\r\n")
    lines = top.decode().split("\r\n")
    return int(lines[0].split()[1]), dict(line.split(": ", 1) for line in lines[1:]), body


def client_context(certs, cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    if cert:
        ctx.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    return ctx


async def started(tmp_path, web_text: str, certs) -> tuple[Broker, int]:
    mport = free_port()
    config = BrokerConfig(
        {
            "broker.id": 1,
            "log.dirs": str(tmp_path / "data"),
            "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
            "metrics.listener": f"127.0.0.1:{mport}",
            "metrics.listener.web.config.file": str(write(tmp_path, web_text, certs)),
        }
    )
    broker = Broker(config)
    await asyncio.wait_for(broker.start(), 60)
    return broker, mport


def test_every_path_is_behind_the_same_check(tmp_path, certs, caplog):
    web = TLS + "basic_auth_users:\n  prometheus: HASH\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n"

    async def scenario():
        broker, port = await started(tmp_path, web, certs)
        ctx = client_context(certs)
        try:
            requests = [
                b"GET /metrics HTTP/1.1\r\n",
                b"GET / HTTP/1.1\r\n",
                b"GET /status HTTP/1.1\r\n",
                b"GET /status.json HTTP/1.1\r\n",
                b"GET /nothing HTTP/1.1\r\n",
                b"HEAD /metrics HTTP/1.1\r\n",
                b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n",
                b"nonsense\r\n",
            ]
            wrong = [
                b"",
                basic(b"prometheus", b"wrong"),
                basic(b"nobody", PASSWORD),
                basic(b"", b""),
                b"Authorization: Basic !!!notbase64\r\n",
                b"Authorization: Bearer " + PASSWORD + b"\r\n",
                b"Authorization: Basic " + base64.b64encode(b"no colon") + b"\r\n",
                basic(b"prometheus", PASSWORD + b"x" * 80),
            ]  # beyond bcrypt's 72 bytes
            for line in requests:
                for creds in wrong:
                    status, headers, body = await request(port, ctx, line + creds + b"\r\n")
                    assert status == 401, (line, creds)
                    assert headers["WWW-Authenticate"].startswith("Basic realm=")
                    assert headers["X-Frame-Options"] == "deny"
                    assert b"kafka_" not in body and b"broker" not in body
            metrics, root, status_page, status_json, nothing, head, post, nonsense = [
                await request(port, ctx, line + basic(b"prometheus", PASSWORD) + b"\r\n") for line in requests
            ]
            assert metrics[0] == 200 and b"kafka_controller_active_controller_count 1.0" in metrics[2]
            assert metrics[1]["X-Frame-Options"] == "deny"
            assert root[0] == status_page[0] == 200 and b"kbroker broker 1" in root[2]
            assert status_json[0] == 200 and b'"broker_id":1' in status_json[2]
            assert head[0] == 200 and head[2] == b""
            assert (nothing[0], post[0], nonsense[0]) == (404, 405, 400)
            # one bcrypt per set of credentials, whatever the number of requests: the four
            # wrong ones that parse as Basic credentials, and the right one
            assert broker.metrics.server.auth.verifications == 5
            # plain HTTP to the TLS listener: no answer
            status = None
            try:
                status = (await request(port, None, b"GET /metrics HTTP/1.1\r\n\r\n"))[0]
            except (ValueError, IndexError, ConnectionError):
                pass
            assert status is None
        finally:
            await broker.shutdown()

    with caplog.at_level(logging.WARNING, logger="broker.audit"):
        asyncio.run(scenario())
    audit = [r.getMessage() for r in caplog.records if r.name == "broker.audit"]
    assert audit[0] == "metrics listener: basic authentication failed (user 'prometheus') from 127.0.0.1"
    assert len(audit) == 1  # held to one line per 10 s


def test_the_status_page_and_json_are_refused_without_credentials(tmp_path, certs):
    """Without TLS too: the users alone guard them."""

    async def scenario():
        broker, port = await started(tmp_path, GOOD["users alone"], certs)
        try:
            for path in (b"/", b"/status.json"):
                status, headers, body = await request(port, None, b"GET " + path + b" HTTP/1.1\r\n\r\n")
                assert (status, headers["WWW-Authenticate"], body) == (
                    401,
                    'Basic realm="kbroker", charset="UTF-8"',
                    b"unauthorized\n",
                )
                status, _, body = await request(
                    port, None, b"GET " + path + b" HTTP/1.1\r\n" + basic(b"prometheus", PASSWORD) + b"\r\n"
                )
                assert status == 200 and b"cluster" in body
        finally:
            await broker.shutdown()

    asyncio.run(scenario())


def test_a_client_certificate_is_required_when_configured(tmp_path, certs):
    web = TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: CA\n"

    async def scenario():
        broker, port = await started(tmp_path, web, certs)
        try:
            status, _, body = await request(port, client_context(certs, cert=True), b"GET /metrics HTTP/1.1\r\n\r\n")
            assert status == 200 and b"kafka_" in body
            for ctx in (
                client_context(certs),
                _with_cert(certs, certs.other_ca_pem),
                _with_cert(certs, certs.expired_pem),
            ):
                with pytest.raises((ssl.SSLError, ConnectionError, ValueError, IndexError)):
                    await request(port, ctx, b"GET /metrics HTTP/1.1\r\n\r\n")
        finally:
            await broker.shutdown()

    asyncio.run(scenario())


def _with_cert(certs, pem: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.load_cert_chain(str(pem))
    return ctx


# ---------------------------------------------------------------------------- the checks themselves


def test_credentials_parsing():
    assert credentials("Basic " + base64.b64encode(b"a:b:c").decode()) == (b"a", b"b:c")
    assert credentials("basic  " + base64.b64encode(b"a:").decode()) == (b"a", b"")
    for bad in (
        "Basic",
        "Basic ###",
        "Bearer " + base64.b64encode(b"a:b").decode(),
        "Basic " + base64.b64encode(b"ab").decode(),
    ):
        assert credentials(bad) is None, bad


def test_bcrypt_runs_off_the_event_loop():
    """A cost-13 hash takes a second or so of CPU; the loop keeps ticking meanwhile."""
    slow = bcrypt.hashpw(PASSWORD, bcrypt.gensalt(13))

    async def scenario():
        auth = BasicAuth({b"u": slow})
        stalls = []

        async def ticker():
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                stalls.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        t0 = time.monotonic()
        ok = await auth.check("Basic " + base64.b64encode(b"u:" + PASSWORD).decode())
        took = time.monotonic() - t0
        tick.cancel()
        return ok, took, max(stalls, default=took)  # none: the loop never ran

    ok, took, worst = asyncio.run(scenario())
    assert ok
    # the check itself lasted far longer than any pause of the loop (were it run on the
    # loop, the loop would have stood still for all of it)
    assert worst < took / 2, (worst, took)


def test_a_flood_of_wrong_passwords_neither_evicts_the_right_ones_nor_queues_without_bound(monkeypatch):
    monkeypatch.setattr(webconfig, "MAX_WAITING", 4)
    monkeypatch.setattr(webconfig, "MAX_CACHED", 8)
    hashed = bcrypt.hashpw(PASSWORD, bcrypt.gensalt(8))

    async def scenario():
        auth = BasicAuth({b"prometheus": hashed})
        good = "Basic " + base64.b64encode(b"prometheus:" + PASSWORD).decode()
        assert await auth.check(good) is True
        assert auth.verifications == 1
        guesses = [auth.check("Basic " + base64.b64encode(b"prometheus:guess%d" % i).decode()) for i in range(40)]
        verdicts = await asyncio.gather(*guesses)
        # a few were checked (False), the rest refused at once while 4 waited (None: 429)
        assert set(verdicts) == {False, None} and verdicts.count(False) <= 5, verdicts
        assert len(auth._failed) <= 8
        # the scraper's credentials are still cached: no bcrypt, not even a wait
        before = auth.verifications
        assert await auth.check(good) is True and auth.verifications == before
        # an unknown user costs a bcrypt too (against a configured hash), and is refused
        assert await auth.check("Basic " + base64.b64encode(b"nobody:" + PASSWORD).decode()) is False
        assert auth.verifications == before + 1

    asyncio.run(scenario())
