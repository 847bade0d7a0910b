"""Per-user quotas bind SASL clients (issue 34, item 3): a real broker process with a
PLAINTEXT listener (the tests' setup) and two SASL_PLAINTEXT ones (SCRAM-SHA-256; on one
of them sessions last 1 s and clients re-authenticate on their connections, KIP-368),
users bob and carol.

Every real client sends ApiVersions before it authenticates; the quota entity the broker
picked then (ANONYMOUS) used to stay with the connection, so a `users/bob` quota never
held bob, and every SASL user shared ANONYMOUS's default-user quota. Here bob's quota
holds through librdkafka (consumer and producer) and through the Java client, carol,
under the default user quota, is not slowed while bob is throttled, and the quota
metrics name the users; the quota stays the user's through re-authentication.

The quota window is 2 samples of 1 s (a new client may take about one second's worth at
once), so that a few seconds show the rate."""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from types import SimpleNamespace

import pytest

from broker.client import Cluster
from broker.protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest as S
from broker.security.scram import salted_password
from tests.interop.test_quotas import alter
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_module
from tests.support.ports import free_port

pytestmark = pytest.mark.interop

KIB = 1024
RECORD = KIB
PASSWORDS = {"bob": "bob-secret", "carol": "carol-secret"}
TOPIC = "sasl-quotas"
PRODUCE_TOPIC = "sasl-quotas-produce"
TOPIC_BYTES = 8 * 1024 * KIB


@pytest.fixture(scope="module")
def sq(tmp_path_factory):
    d = tmp_path_factory.mktemp("sasl-quotas")
    plain, sasl, reauth, metrics = free_port(), free_port(), free_port(), free_port()
    config = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},REAUTH://127.0.0.1:{reauth}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,REAUTH:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        # KIP-368: sessions of 1 s there; the client authenticates again on its connection
        "listener.name.reauth.connections.max.reauth.ms": 1000,
        "metrics.listener": f"127.0.0.1:{metrics}",
        "quota.window.num": 2,
        "quota.window.size.seconds": 1,
        "num.partitions": 1,
        "offsets.topic.num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
    }
    with BrokerProcess(d / "data", config=config, port=plain) as b:
        with Cluster(b.bootstrap) as c:
            for user, password in PASSWORDS.items():
                r = c.any_connection().request(
                    S(
                        deletions=[],
                        upsertions=[
                            S.ScramCredentialUpsertion(
                                name=user,
                                mechanism=1,
                                iterations=4096,
                                salt=b"salt" * 4,
                                salted_password=salted_password("SCRAM-SHA-256", password, b"salt" * 4, 4096),
                            )
                        ],
                    )
                )
                assert r.results[0].error_code == 0
            for topic in (TOPIC, PRODUCE_TOPIC):
                c.create_topic(topic, 1, 1)
                c.topic(topic, wait_s=10)
        ck = require_module("confluent_kafka")
        # batches of 16 KiB: a fetch answers whole batches, and one larger than a quota's
        # window (128 KiB here) would never fit in it
        p = ck.Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 20, "batch.size": 16 * KIB, "acks": 1})
        value = b"v" * RECORD
        for _ in range(TOPIC_BYTES // RECORD):
            while True:
                try:
                    p.produce(TOPIC, value)
                    break
                except BufferError:
                    p.poll(0.1)
        assert p.flush(60) == 0
        yield SimpleNamespace(broker=b, plain=b.bootstrap, sasl=f"127.0.0.1:{sasl}", reauth=reauth, metrics=metrics)


def sasl_conf(sq, user: str, **extra) -> dict:
    return {
        "bootstrap.servers": sq.sasl,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
        "socket.timeout.ms": 10000,
        **extra,
    }


def metrics(sq) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{sq.metrics}/metrics", timeout=10) as f:
        return f.read().decode()


def metric(text: str, name: str, kind: str, user: str) -> float | None:
    m = re.search(rf'^kafka_server_{name}{{client_id="",type="{kind}",user="{user}"}} (\S+)$', text, re.M)
    return None if m is None else float(m.group(1))


def read_for(sq, user: str, seconds: float, out: dict) -> None:
    """bob or carol reads the topic from its start with confluent-kafka for `seconds`;
    out[user] = [(monotonic time, bytes)] of each record received."""
    ck = require_module("confluent_kafka")
    c = ck.Consumer(
        sasl_conf(sq, user, **{"group.id": f"g-{user}", "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    )
    got = out[user] = []
    try:
        c.assign([ck.TopicPartition(TOPIC, 0, ck.OFFSET_BEGINNING)])
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append((time.monotonic(), len(m.value())))
    finally:
        c.close()


def steady_rate(got: list, skip_s: float) -> float:
    """Bytes per second from `skip_s` after the first record on (past the burst a new
    client may take at once) to the last one."""
    assert got, "nothing read"
    start = got[0][0] + skip_s
    late = [(t, n) for t, n in got if t >= start]
    assert len(late) > 1, f"read {sum(n for _, n in got)} bytes, all in the first {skip_s} s"
    return sum(n for _, n in late[1:]) / (late[-1][0] - late[0][0])


def test_bobs_quota_holds_through_librdkafka_and_carol_is_not_slowed(sq):
    """users/bob consumer_byte_rate=128 KiB/s, users/<default> 1 MiB/s: bob and carol read
    at once. Before the fix both were ANONYMOUS: bob was held to nothing of his own, and
    the two shared one default-user quota (each about half of it)."""
    bob_q, default_q = 128 * KIB, 1024 * KIB
    assert alter(sq.plain, [("user", "bob")], {"consumer_byte_rate": bob_q}) == (0, None)
    assert alter(sq.plain, [("user", None)], {"consumer_byte_rate": default_q}) == (0, None)
    try:
        out: dict = {}
        readers = [threading.Thread(target=read_for, args=(sq, user, 6.0, out)) for user in ("bob", "carol")]
        for t in readers:
            t.start()
        for t in readers:
            t.join(60)
        bob, carol = steady_rate(out["bob"], 1.5), steady_rate(out["carol"], 1.5)
        print(
            f"bob {bob / KIB:.0f} KiB/s (quota {bob_q // KIB}), carol {carol / KIB:.0f} KiB/s "
            f"(quota {default_q // KIB})"
        )
        assert bob <= 1.5 * bob_q, bob / KIB
        # carol has her own default-user quota, not shared with bob: she is not slowed by
        # bob's throttling, and held (within what Kafka's rate of 2 samples lets through)
        assert 0.7 * default_q <= carol <= 2 * default_q, carol / KIB
        text = metrics(sq)
        assert metric(text, "quota_limit", "Fetch", "bob") == bob_q
        assert metric(text, "quota_limit", "Fetch", "carol") == default_q
        assert metric(text, "quota_throttle_time_seconds_total", "Fetch", "bob") > 0
        assert metric(text, "quota_rate", "Fetch", "bob") is not None
        assert metric(text, "quota_rate", "Fetch", "carol") is not None
        # nothing was read as ANONYMOUS (this test's own PLAINTEXT admin connection is
        # ANONYMOUS, under the default-user quota, and reads nothing)
        assert metric(text, "quota_throttle_time_seconds_total", "Fetch", "ANONYMOUS") in (None, 0.0), text
    finally:
        alter(sq.plain, [("user", "bob")], {"consumer_byte_rate": None})
        alter(sq.plain, [("user", None)], {"consumer_byte_rate": None})


def test_bobs_produce_quota_holds_through_librdkafka(sq):
    ck = require_module("confluent_kafka")
    quota = 128 * KIB
    assert alter(sq.plain, [("user", "bob")], {"producer_byte_rate": quota}) == (0, None)
    try:
        p = ck.Producer(sasl_conf(sq, "bob", **{"linger.ms": 5, "batch.size": 16 * KIB, "acks": 1}))
        # 768 KiB: about one window's worth goes at once, the rest at 128 KiB/s (5 s)
        started = time.monotonic()
        for _ in range(768):
            p.produce(PRODUCE_TOPIC, b"p" * RECORD)
            p.poll(0)
        assert p.flush(60) == 0
        elapsed = time.monotonic() - started
        print(f"bob produced 768 KiB in {elapsed:.1f} s")
        assert elapsed >= 3.5, elapsed
        # carol, without a produce quota, is not held
        p2 = ck.Producer(sasl_conf(sq, "carol", **{"linger.ms": 5, "acks": 1}))
        started = time.monotonic()
        for _ in range(768):
            p2.produce(PRODUCE_TOPIC, b"c" * RECORD)
            p2.poll(0)
        assert p2.flush(60) == 0
        assert time.monotonic() - started < 2.0
        text = metrics(sq)
        assert metric(text, "quota_limit", "Produce", "bob") == quota
        assert metric(text, "quota_throttle_time_seconds_total", "Produce", "bob") > 0
        assert metric(text, "quota_limit", "Produce", "carol") is None
    finally:
        alter(sq.plain, [("user", "bob")], {"producer_byte_rate": None})


def test_bobs_quota_holds_through_the_java_client(sq, tmp_path):
    """Kafka's consumer perf tool (the Java client) as bob over SASL_PLAINTEXT: held to his
    quota, and it saw the throttling (fetch-throttle-time-max)."""
    from tests.support.kafka_tools import kafka_tool

    quota = 512 * KIB
    cfg = tmp_path / "bob.properties"
    cfg.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="bob" password="{PASSWORDS["bob"]}";\n'
    )
    assert alter(sq.plain, [("user", "bob")], {"consumer_byte_rate": quota}) == (0, None)
    records = 3 * 1024  # 3 MiB: about 0.5 MiB at once, the rest at 0.5 MiB/s (5 s)
    try:
        out = kafka_tool(
            "kafka-consumer-perf-test",
            "--bootstrap-server",
            sq.sasl,
            "--topic",
            TOPIC,
            "--num-records",
            str(records),
            "--timeout",
            "60000",
            "--print-metrics",
            "--group",
            "g-java-bob",
            "--command-config",
            cfg,
            timeout=180,
        ).stdout
        lines = out.splitlines()
        i = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
        stats = dict(zip(lines[i].split(", "), lines[i + 1].split(", ")))
        assert int(stats["data.consumed.in.nMsg"]) >= records  # (whole polls: a few more)
        mb_s = float(stats["fetch.MB.sec"])
        print(f"the Java client read as bob at {mb_s:.2f} MB/s (quota {quota / 2**20} MB/s)")
        assert mb_s <= 1.0, stats
        m = re.search(
            r"^consumer-fetch-manager-metrics:fetch-throttle-time-max:\{client-id=[^}]*\}\s*:\s*([\d.]+)", out, re.M
        )
        assert m is not None and float(m.group(1)) > 0, out[-3000:]
        assert metric(metrics(sq), "quota_throttle_time_seconds_total", "Fetch", "bob") > 0
    finally:
        alter(sq.plain, [("user", "bob")], {"consumer_byte_rate": None})


def _scram(conn, user: str) -> int:
    """SCRAM-SHA-256 as `user` on an open connection, by hand (SaslHandshake, then
    SaslAuthenticate until the exchange is over): the session lifetime answered."""
    from broker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
    from broker.protocol.messages.sasl_handshake import SaslHandshakeRequest
    from broker.security.sasl import SaslClient

    assert conn.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), version=1).error_code == 0
    client = SaslClient("SCRAM-SHA-256", user, PASSWORDS[user])
    token, lifetime = client.step(None), 0
    while token is not None:
        resp = conn.request(SaslAuthenticateRequest(auth_bytes=token), version=2)
        assert resp.error_code == 0, resp.error_message
        lifetime = resp.session_lifetime_ms
        token = client.step(bytes(resp.auth_bytes))
    return lifetime


def test_the_quota_stays_bobs_through_re_authentication(sq):
    """KIP-368: a connection authenticated as bob, then again (sessions of 1 s): both
    times the Produce answers are throttled by bob's quota, and bob's sensor counts them."""
    from broker.client.connection import BrokerConnection
    from tests.interop.test_quotas import _produce

    assert alter(sq.plain, [("user", "bob")], {"producer_byte_rate": 10 * KIB}) == (0, None)
    try:
        conn = BrokerConnection("127.0.0.1", sq.reauth, client_id="reauth")
        assert _scram(conn, "bob") == 1000
        first = _produce(conn, PRODUCE_TOPIC, 40 * KIB)
        assert first.responses[0].partition_responses[0].error_code == 0 and first.throttle_time_ms > 0
        time.sleep(first.throttle_time_ms / 1000)
        assert _scram(conn, "bob") == 1000  # within the session: re-authenticated
        again = _produce(conn, PRODUCE_TOPIC, 40 * KIB)
        assert again.responses[0].partition_responses[0].error_code == 0 and again.throttle_time_ms > 0
        conn.close()
        text = metrics(sq)
        assert metric(text, "quota_limit", "Produce", "bob") == 10 * KIB
        assert re.search(
            r'^kafka_server_quota_throttled_responses_total\{client_id="",type="Produce",'
            r'user="bob"\} ([2-9]|\d\d+)',
            text,
            re.M,
        ), text
    finally:
        alter(sq.plain, [("user", "bob")], {"producer_byte_rate": None})
