"""Client quotas on a real broker process (the embedded store): AlterClientQuotas and
DescribeClientQuotas (round trip, defaults, validate_only, Kafka's errors for bad input),
quotas beside SCRAM credentials in the same user entry, throttle_time_ms in Produce and
Fetch answers and the muted connection, changes without restart, `broker quotas`, and the
quota metrics. Kafka's own tools and Java client: tests/apache_kafka/test_quotas.py."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import pytest

from broker.client import Cluster
from broker.client.connection import BrokerConnection
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.alter_client_quotas import AlterClientQuotasRequest as A
from broker.protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest as S
from broker.protocol.messages.describe_client_quotas import DescribeClientQuotasRequest as D
from broker.protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
from broker.protocol.messages.produce import ProduceRequest as P
from tests.interop.helpers import batch, fetch_once
from tests.support.broker_proc import BrokerProcess
from tests.support.ports import free_port

INVALID = ErrorCode.INVALID_REQUEST


@pytest.fixture(scope="module")
def qbroker(tmp_path_factory):
    metrics = free_port()
    with BrokerProcess(
        tmp_path_factory.mktemp("quotas") / "data", config={"metrics.listener": f"127.0.0.1:{metrics}"}
    ) as b:
        b.metrics_port = metrics
        yield b


def entity(*pairs):
    return [A.EntityData(entity_type=t, entity_name=n) for t, n in pairs]


def alter(bootstrap, pairs, ops, validate_only=False):
    req = A(
        entries=[
            A.EntryData(
                entity=entity(*pairs),
                ops=[A.OpData(key=k, value=0.0 if v is None else v, remove=v is None) for k, v in ops.items()],
            )
        ],
        validate_only=validate_only,
    )
    with Cluster(bootstrap) as c:
        resp = c.any_connection().request(req)
    (e,) = resp.entries
    return e.error_code, e.error_message


def describe(bootstrap, components=(), strict=False):
    req = D(components=[D.ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components], strict=strict)
    with Cluster(bootstrap) as c:
        resp = c.any_connection().request(req)
    if resp.error_code:
        return resp.error_code, resp.error_message
    return {
        tuple((x.entity_type, x.entity_name) for x in e.entity): {v.key: v.value for v in e.values}
        for e in resp.entries
    }


def test_alter_then_describe_with_defaults(qbroker):
    b = qbroker.bootstrap
    assert alter(b, [("user", "alice")], {"producer_byte_rate": 1048576, "request_percentage": 50.5}) == (0, None)
    assert alter(b, [("user", None), ("client-id", "app")], {"consumer_byte_rate": 2e6}) == (0, None)
    assert alter(b, [("client-id", None)], {"producer_byte_rate": 5e5}) == (0, None)
    got = describe(b)
    assert got[(("user", "alice"),)] == {"producer_byte_rate": 1048576.0, "request_percentage": 50.5}
    assert got[(("user", None), ("client-id", "app"))] == {"consumer_byte_rate": 2e6}
    assert got[(("client-id", None),)] == {"producer_byte_rate": 5e5}
    # exact user, strict: that entity alone; default client ids; any user, strict
    assert describe(b, [("user", 0, "alice")], strict=True) == {(("user", "alice"),): got[(("user", "alice"),)]}
    assert set(describe(b, [("client-id", 1, None)], strict=True)) == {(("client-id", None),)}
    assert set(describe(b, [("user", 2, None)], strict=False)) == {
        (("user", "alice"),),
        (("user", None), ("client-id", "app")),
    }
    # removal; validate_only writes nothing
    assert alter(b, [("user", "alice")], {"request_percentage": None}) == (0, None)
    assert alter(b, [("client-id", "nobody")], {"producer_byte_rate": 10}, validate_only=True) == (0, None)
    got = describe(b)
    assert got[(("user", "alice"),)] == {"producer_byte_rate": 1048576.0}
    assert (("client-id", "nobody"),) not in got
    for pairs in ([("user", "alice")], [("user", None), ("client-id", "app")], [("client-id", None)]):
        alter(b, pairs, {"producer_byte_rate": None, "consumer_byte_rate": None})
    assert describe(b) == {}


@pytest.mark.parametrize(
    "pairs, ops, message",
    [
        ([("user", "alice")], {"producer_bytes_rate": 100}, "Invalid configuration key producer_bytes_rate"),
        ([("user", "alice")], {"producer_byte_rate": -1}, "Quota producer_byte_rate must be greater than 0"),
        ([("client-id", "a")], {"consumer_byte_rate": 0}, "Quota consumer_byte_rate must be greater than 0"),
        ([("client-id", "a")], {"producer_byte_rate": 1.5}, "producer_byte_rate cannot be a fractional value."),
        ([("group", "g")], {"producer_byte_rate": 1}, "Unhandled client quota entity type: group"),
        ([("user", "")], {"producer_byte_rate": 1}, "Empty user not supported"),
        ([], {"producer_byte_rate": 1}, "Invalid empty client quota entity"),
        (
            [("user", "a"), ("user", "b")],
            {"producer_byte_rate": 1},
            "Invalid client quota entity, duplicate entity entry user",
        ),
    ],
)
def test_bad_input_is_refused_as_kafka_refuses_it(qbroker, pairs, ops, message):
    assert alter(qbroker.bootstrap, pairs, ops) == (INVALID, message)
    assert describe(qbroker.bootstrap) == {}


def test_bad_describe_filters(qbroker):
    b = qbroker.bootstrap
    assert describe(b, [("user", 0, None)]) == (
        INVALID,
        "Request specified MATCH_TYPE_EXACT, but set match string to null.",
    )
    assert describe(b, [("user", 2, None), ("user", 1, None)]) == (
        INVALID,
        "Entity type user cannot appear more than once in the filter.",
    )
    assert describe(b, [("group", 2, None)]) == (ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type group")
    assert describe(b, [("user", 7, None)]) == (INVALID, "Unknown match type 7")


def test_quotas_and_scram_credentials_share_the_user_entry(qbroker):
    b = qbroker.bootstrap
    from broker.security.scram import salted_password

    with Cluster(b) as c:
        r = c.any_connection().request(
            S(
                deletions=[],
                upsertions=[
                    S.ScramCredentialUpsertion(
                        name="carol",
                        mechanism=1,
                        iterations=4096,
                        salt=b"s" * 16,
                        salted_password=salted_password("SCRAM-SHA-256", "pw", b"s" * 16, 4096),
                    )
                ],
            )
        )
        assert r.results[0].error_code == 0
    assert alter(b, [("user", "carol")], {"producer_byte_rate": 4096}) == (0, None)
    assert describe(b, [("user", 0, "carol")], strict=True) == {(("user", "carol"),): {"producer_byte_rate": 4096.0}}
    with Cluster(b) as c:
        users = c.any_connection().request(DescribeUserScramCredentialsRequest(users=None))
    assert [u.user for u in users.results] == ["carol"]
    assert alter(b, [("user", "carol")], {"producer_byte_rate": None}) == (0, None)
    with Cluster(b) as c:
        users = c.any_connection().request(DescribeUserScramCredentialsRequest(users=None))
        assert [u.user for u in users.results] == ["carol"]  # the credential is still there
        c.any_connection().request(S(upsertions=[], deletions=[S.ScramCredentialDeletion(name="carol", mechanism=1)]))


def _produce(conn: BrokerConnection, topic: str, size: int):
    records = batch([b"x" * size])
    return conn.request(
        P(
            transactional_id=None,
            acks=1,
            timeout_ms=10000,
            topic_data=[
                P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=0, records=records)])
            ],
        )
    )


def test_produce_answers_carry_throttle_time_and_the_connection_is_muted(qbroker, topic_name):
    b = qbroker.bootstrap
    with Cluster(b) as c:
        c.create_topic(topic_name, 1, 1)
        c.topic(topic_name, wait_s=10)
    quota = 100_000
    assert alter(b, [("client-id", "slow")], {"producer_byte_rate": quota}) == (0, None)
    try:
        host, port = b.split(":")
        conn = BrokerConnection(host, int(port), client_id="slow")
        throttles = []
        # 10 windows x 100 kB/s is what a new client may send at once; 1.25 MB is past it
        for _ in range(5):
            r = _produce(conn, topic_name, 250_000)
            assert r.responses[0].partition_responses[0].error_code == 0
            throttles.append(r.throttle_time_ms)
        assert throttles[:3] == [0, 0, 0] and throttles[-1] > 0, throttles
        # about (1.25 MB / 10 s - 100 kB/s) / 100 kB/s x 10 s = 2.5 s
        assert 1500 <= throttles[-1] <= 3500, throttles
        # the connection reads nothing for the throttle time: the next answer comes after it
        started = time.monotonic()
        r = _produce(conn, topic_name, 10)
        assert time.monotonic() - started >= throttles[-1] / 1000 * 0.9
        # another client is not throttled meanwhile
        other = BrokerConnection(host, int(port), client_id="fast")
        assert _produce(other, topic_name, 250_000).throttle_time_ms == 0
        other.close()
        conn.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{qbroker.metrics_port}/metrics", timeout=10) as f:
            text = f.read().decode()
        assert 'kafka_server_quota_limit{client_id="slow",type="Produce",user=""} 100000.0' in text
        line = next(
            x
            for x in text.splitlines()
            if x.startswith("kafka_server_quota_throttle_time_seconds_total{") and 'client_id="slow"' in x
        )
        assert float(line.split()[-1]) > 0
    finally:
        alter(b, [("client-id", "slow")], {"producer_byte_rate": None})


def test_fetch_past_the_quota_is_answered_empty_with_throttle_time(qbroker, topic_name):
    b = qbroker.bootstrap
    with Cluster(b) as c:
        c.create_topic(topic_name, 1, 1)
        t = c.topic(topic_name, wait_s=10)
        for _ in range(6):
            _produce(c.any_connection(), topic_name, 500_000)
    assert alter(b, [("user", None), ("client-id", "reader")], {"consumer_byte_rate": 200_000}) == (0, None)
    try:
        host, port = b.split(":")
        conn = BrokerConnection(host, int(port), client_id="reader")
        offset, got, throttled = 0, 0, None
        while offset < 6 and throttled is None:
            from broker.protocol.messages.fetch import FetchRequest as F

            req = F(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                forgotten_topics_data=[],
                topics=[
                    F.FetchTopic(
                        topic=topic_name,
                        topic_id=t.topic_id,
                        partitions=[F.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=600_000)],
                    )
                ],
            )
            resp = conn.request(req)
            if resp.throttle_time_ms:
                throttled = resp
                break
            got += len(resp.responses[0].partitions[0].records or b"")
            offset += 1
        assert throttled is not None and got >= 1_500_000  # 10 windows x 200 kB/s first
        assert throttled.responses == [] and throttled.throttle_time_ms > 0
        conn.close()
        # a client id without a quota reads on
        other = BrokerConnection(host, int(port), client_id="other")
        assert len(fetch_once(other, topic_name, t.topic_id, 0, 0, max_bytes=600_000).records) > 0
        other.close()
    finally:
        alter(b, [("user", None), ("client-id", "reader")], {"consumer_byte_rate": None})


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "broker.cli.main", "quotas", *args], capture_output=True, text=True, timeout=60
    )


def test_broker_quotas_cli(qbroker):
    b = qbroker.bootstrap
    r = _cli(
        "alter",
        "--bootstrap-server",
        b,
        "--user",
        "dave",
        "--client",
        "etl",
        "--add-config",
        "producer_byte_rate=1048576,consumer_byte_rate=2097152",
    )
    assert (r.returncode, r.stdout, r.stderr) == (
        0,
        "Quota configs for user-principal 'dave', client-id 'etl' are updated\n",
        "",
    )
    r = _cli("alter", "--bootstrap-server", b, "--client-defaults", "--add-config", "request_percentage=25")
    assert r.returncode == 0, r.stderr
    r = _cli("describe", "--bootstrap-server", b)
    assert r.stdout.splitlines() == [
        "Quota configs for the default client-id are request_percentage=25.0",
        "Quota configs for user-principal 'dave', client-id 'etl' are consumer_byte_rate=2097152.0, "
        "producer_byte_rate=1048576.0",
    ]
    r = _cli("describe", "--bootstrap-server", b, "--user", "dave", "--client", "etl")
    assert len(r.stdout.splitlines()) == 1
    r = _cli("alter", "--bootstrap-server", b, "--user", "dave", "--add-config", "producer_byte_rate=-5")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (
        "broker: INVALID_REQUEST: user-principal 'dave': Quota producer_byte_rate must be greater than 0\n"
    )
    r = _cli("alter", "--bootstrap-server", b, "--add-config", "producer_byte_rate=1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    for args in (
        ["--user", "dave", "--client", "etl", "--delete-config", "producer_byte_rate,consumer_byte_rate"],
        ["--client-defaults", "--delete-config", "request_percentage"],
    ):
        assert _cli("alter", "--bootstrap-server", b, *args).returncode == 0
    assert _cli("describe", "--bootstrap-server", b).stdout == ""


def test_quotas_survive_a_restart(tmp_path):
    with BrokerProcess(tmp_path / "data") as b:
        assert alter(b.bootstrap, [("user", None)], {"producer_byte_rate": 123456}) == (0, None)
        b.restart()
        assert describe(b.bootstrap) == {(("user", None),): {"producer_byte_rate": 123456.0}}


def test_request_percentage_throttles_at_most_one_window(qbroker):
    """request_percentage: the share of the handling time; a tiny quota is soon exceeded,
    and the request quota's throttle is at most one window (1 s), as Kafka's."""
    from broker.protocol.messages.metadata import MetadataRequest

    b = qbroker.bootstrap
    assert alter(b, [("client-id", "busy")], {"request_percentage": 0.0001}) == (0, None)
    try:
        host, port = b.split(":")
        conn = BrokerConnection(host, int(port), client_id="busy")
        throttles = [
            conn.request(MetadataRequest(topics=None, allow_auto_topic_creation=False)).throttle_time_ms
            for _ in range(3)
        ]
        conn.close()
        assert all(0 < t <= 1000 for t in throttles[1:]), throttles
    finally:
        alter(b, [("client-id", "busy")], {"request_percentage": None})
