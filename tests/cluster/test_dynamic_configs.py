"""Dynamic broker configs (issue 20), on real brokers: Kafka's /config/brokers/<default>
and /config/brokers/<id> with change notifications, applied without a restart.

- A 3-broker cluster: the cluster default message.max.bytes lowered, every broker refuses
  a too-large produce (MESSAGE_TOO_LARGE); an override on broker 2 only moves broker 2;
  deleted, the default applies again; refusals with Kafka's errors and messages.
- The same shape: the default log.retention.ms lowered, a topic without an override
  loses its old segments; max.connections enforced; a broker restarted keeps its dynamic
  configs, and a broker that was down when the default changed gets it when it is back;
  so does a group's configs (GROUP resources, /config/groups).
- One broker alone (the file store): a listener's key store swapped for a new certificate
  by listener.name.<l>.ssl.keystore.location, new TLS connections present it; deprecated
  topic keys taken with a warning on CreateTopics, AlterConfigs and
  IncrementalAlterConfigs, an unknown key still INVALID_CONFIG.
- The commands docs/cluster.md shows, run as written.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.client import BrokerConnection, Cluster as Client
from broker.native import BatchBuilder
from broker.protocol.codec import encode_request
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.alter_configs import AlterConfigsRequest
from broker.protocol.messages.api_versions import ApiVersionsRequest
from broker.protocol.messages.create_topics import CreateTopicsRequest
from broker.protocol.messages.describe_configs import DescribeConfigsRequest
from broker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from broker.protocol.messages.produce import ProduceRequest
from tests.support.broker_proc import BrokerProcess
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(300)

BROKER, TOPIC_RESOURCE, GROUP_RESOURCE = 4, 2, 32
SET, DELETE = 0, 1
ROOT = Path(__file__).resolve().parents[2]


def connect(bootstrap: str) -> BrokerConnection:
    host, port = bootstrap.rsplit(":", 1)
    return BrokerConnection(host, int(port), timeout=15)


def alter(
    bootstrap: str, name: str, sets=None, deletes=(), validate_only=False, resource_type=BROKER
) -> tuple[int, str | None]:
    """IncrementalAlterConfigs of one resource, sent to `bootstrap`: (error code, message)."""
    I = IncrementalAlterConfigsRequest
    ops = [I.AlterableConfig(name=k, config_operation=SET, value=str(v)) for k, v in (sets or {}).items()]
    ops += [I.AlterableConfig(name=k, config_operation=DELETE, value=None) for k in deletes]
    with connect(bootstrap) as conn:
        r = conn.request(
            I(
                resources=[I.AlterConfigsResource(resource_type=resource_type, resource_name=name, configs=ops)],
                validate_only=validate_only,
            )
        )
    return r.responses[0].error_code, r.responses[0].error_message


def describe(bootstrap: str, name: str, keys=None, resource_type=BROKER) -> dict:
    """DescribeConfigs with synonyms: name -> entry (error: AssertionError)."""
    D = DescribeConfigsRequest
    with connect(bootstrap) as conn:
        r = conn.request(
            D(
                resources=[
                    D.DescribeConfigsResource(resource_type=resource_type, resource_name=name, configuration_keys=keys)
                ],
                include_synonyms=True,
                include_documentation=False,
            )
        ).results[0]
    assert r.error_code == 0, (r.error_code, r.error_message)
    return {e.name: e for e in r.configs}


def synonyms(entry) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def produce(bootstrap: str, topic: str, partition: int, size: int) -> int:
    """One batch of one record of `size` value bytes, acks=1: the error code."""
    b = BatchBuilder()
    b.append(int(time.time() * 1000), None, b"x" * size)
    P = ProduceRequest
    with connect(bootstrap) as conn:
        r = conn.request(
            P(
                acks=1,
                timeout_ms=10000,
                topic_data=[
                    P.TopicProduceData(
                        name=topic, partition_data=[P.PartitionProduceData(index=partition, records=bytes(b.build()))]
                    )
                ],
            )
        )
    return r.responses[0].partition_responses[0].error_code


def until(what: str, probe, timeout: float = 30.0, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)


def create_led_by_each(cluster, topic: str, **configs) -> None:
    """Three partitions, RF 3, partition p led by broker p + 1."""
    C = CreateTopicsRequest
    req = C(
        topics=[
            C.CreatableTopic(
                name=topic,
                num_partitions=-1,
                replication_factor=-1,
                assignments=[
                    C.CreatableReplicaAssignment(partition_index=p, broker_ids=r)
                    for p, r in enumerate([[1, 2, 3], [2, 3, 1], [3, 1, 2]])
                ],
                configs=[C.CreatableTopicConfig(name=k, value=str(v)) for k, v in configs.items()],
            )
        ],
        timeout_ms=30000,
        validate_only=False,
    )
    with Client(cluster.bootstrap) as c:
        r = c.controller().request(req).topics[0]
        assert r.error_code == 0, r
    for p in range(3):
        cluster.wait_for_leader(topic, p, everywhere=True)


# ---------------------------------------------------------------------- message.max.bytes


def test_message_max_bytes_default_and_per_broker_override_without_restart(make_cluster):
    cluster = make_cluster(3)
    create_led_by_each(cluster, "mm")
    bs = {b: cluster.broker(b).bootstrap for b in cluster.ids}
    leader_of = {b: b - 1 for b in cluster.ids}  # broker -> the partition it leads
    assert all(produce(bs[b], "mm", leader_of[b], 3000) == 0 for b in cluster.ids)

    # refusals first, each with Kafka's error and message, nothing written (Kafka 3.x answers
    # INVALID_REQUEST for every refused broker config, a bad value too: KAFKA-13609)
    code, msg = alter(bs[1], "1", {"broker.id": "7"})
    assert code == ErrorCode.INVALID_REQUEST and msg == (
        "Invalid config value for resource ConfigResource(type=BROKER, name='1'): Cannot update these configs "
        "dynamically: Set(broker.id)"
    )
    code, msg = alter(bs[1], "", {"listener.name.plaintext.ssl.keystore.location": "/nowhere.pem"})
    assert (
        code == ErrorCode.INVALID_REQUEST
        and "Cannot update these configs at default cluster level, broker id must be specified" in msg
    )
    code, msg = alter(bs[1], "", {"message.max.bytes": "huge"})
    assert code == ErrorCode.INVALID_REQUEST and "Invalid value huge for configuration message.max.bytes" in msg
    code, msg = alter(bs[1], "2", {"message.max.bytes": "2000"})  # broker 2's resource, sent to 1
    assert code == ErrorCode.INVALID_REQUEST and msg == "Unexpected broker id, expected 1, but received 2"
    assert alter(bs[1], "", {"message.max.bytes": "2000"}, validate_only=True) == (0, None)
    time.sleep(1)
    assert all(produce(bs[b], "mm", leader_of[b], 3000) == 0 for b in cluster.ids)

    # the cluster default, set through broker 3: every broker refuses a batch over it
    assert alter(bs[3], "", {"message.max.bytes": "2000"}) == (0, None)
    for b in cluster.ids:
        until(
            f"broker {b} refusing 3000 bytes",
            lambda b=b: produce(bs[b], "mm", leader_of[b], 3000) == ErrorCode.MESSAGE_TOO_LARGE,
        )
        assert produce(bs[b], "mm", leader_of[b], 500) == 0
        e = describe(bs[b], str(b), ["message.max.bytes"])["message.max.bytes"]
        assert (e.value, e.config_source, e.read_only) == ("2000", 3, False)
        assert synonyms(e) == [("message.max.bytes", "2000", 3), ("message.max.bytes", "1048588", 5)]
        # a topic without an override follows the broker's new default
        t = describe(bs[b], "mm", ["max.message.bytes"], TOPIC_RESOURCE)["max.message.bytes"]
        assert (t.value, t.config_source) == ("2000", 3)
    default = describe(bs[1], "")
    assert list(default) == ["message.max.bytes"] and default["message.max.bytes"].value == "2000"

    # broker 2's own value: only broker 2 takes bigger batches
    assert alter(bs[2], "2", {"message.max.bytes": "10000"}) == (0, None)
    until("broker 2 taking 3000 bytes", lambda: produce(bs[2], "mm", 1, 3000) == 0)
    assert produce(bs[1], "mm", 0, 3000) == produce(bs[3], "mm", 2, 3000) == ErrorCode.MESSAGE_TOO_LARGE
    e = describe(bs[2], "2", ["message.max.bytes"])["message.max.bytes"]
    assert (e.value, e.config_source) == ("10000", 2)
    assert synonyms(e) == [
        ("message.max.bytes", "10000", 2),
        ("message.max.bytes", "2000", 3),
        ("message.max.bytes", "1048588", 5),
    ]
    assert describe(bs[1], "1", ["message.max.bytes"])["message.max.bytes"].value == "2000"

    # the override deleted: the default again; the default deleted: Kafka's default
    assert alter(bs[2], "2", deletes=["message.max.bytes"]) == (0, None)
    until("broker 2 refusing again", lambda: produce(bs[2], "mm", 1, 3000) == ErrorCode.MESSAGE_TOO_LARGE)
    assert alter(bs[1], "", deletes=["message.max.bytes"]) == (0, None)
    for b in cluster.ids:
        until(f"broker {b} taking 3000 bytes again", lambda b=b: produce(bs[b], "mm", leader_of[b], 3000) == 0)
        e = describe(bs[b], str(b), ["message.max.bytes"])["message.max.bytes"]
        assert (e.value, e.config_source) == ("1048588", 5)  # is_default: v0 only


# ---------------------------------------------------------------------- retention, connections, restarts


def earliest(bootstrap: str, topic: str) -> int:
    with Client(bootstrap) as c:
        return c.list_offsets(topic, [0], -2)[0][0]


def answered(bootstrap: str, n: int) -> tuple[list[socket.socket], int]:
    """n new connections each sending ApiVersions: (the sockets, how many were answered
    within a second)."""
    host, port = bootstrap.rsplit(":", 1)
    socks, ok = [], 0
    frame = encode_request(ApiVersionsRequest.API_KEY, 0, 1, "t", ApiVersionsRequest())
    for _ in range(n):
        s = socket.create_connection((host, int(port)), timeout=5)
        socks.append(s)
        s.sendall(frame)
    deadline = time.monotonic() + 2
    for s in socks:
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if s.recv(4):
                ok += 1
        except (TimeoutError, OSError):
            pass
    return socks, ok


def test_retention_default_connections_and_restarts(make_cluster):
    cluster = make_cluster(3, config={"log.retention.check.interval.ms": 500, "log.segment.delete.delay.ms": 0})
    create_led_by_each(cluster, "old", **{"segment.bytes": 1024})
    bs = {b: cluster.broker(b).bootstrap for b in cluster.ids}
    for _ in range(12):
        assert produce(bs[1], "old", 0, 400) == 0
    assert earliest(cluster.bootstrap, "old") == 0

    # broker 3 is down while the default changes; it gets it when it comes back
    cluster.kill(3)
    assert alter(bs[1], "", {"log.retention.ms": 1500}) == (0, None)
    # ... and while a group's configs are set (/config/groups/<group>, with a notification)
    group_config = {"consumer.session.timeout.ms": "50000", "share.auto.offset.reset": "earliest"}
    assert alter(bs[1], "orders/eu", group_config, resource_type=GROUP_RESOURCE) == (0, None)
    until(
        "broker 2 describing the group's configs",
        lambda: (
            describe(bs[2], "orders/eu", ["consumer.session.timeout.ms"], GROUP_RESOURCE)[
                "consumer.session.timeout.ms"
            ].value
            == "50000"
        ),
    )
    # a topic without a retention override loses its old segments, no restart
    until("old segments deleted", lambda: earliest(bs[1], "old") > 0, timeout=60)
    e = until(
        "broker 2 following the default",
        lambda: (x := describe(bs[2], "old", ["retention.ms"], TOPIC_RESOURCE)["retention.ms"]).value == "1500" and x,
    )
    assert e.config_source == 3
    assert synonyms(e)[0] == ("log.retention.ms", "1500", 3)

    cluster.start(3)
    e = describe(bs[3], "3", ["log.retention.ms"])["log.retention.ms"]
    assert (e.value, e.config_source) == ("1500", 3)
    got = describe(bs[3], "orders/eu", list(group_config), GROUP_RESOURCE)
    assert {k: (e.value, e.config_source) for k, e in got.items()} == {k: (v, 8) for k, v in group_config.items()}
    assert alter(bs[3], "orders/eu", deletes=["share.auto.offset.reset"], resource_type=GROUP_RESOURCE) == (0, None)
    until(
        "broker 1 seeing the group's config removed",
        lambda: (
            describe(bs[1], "orders/eu", ["share.auto.offset.reset"], GROUP_RESOURCE)[
                "share.auto.offset.reset"
            ].config_source
            == 5
        ),
    )

    # a broker's own value survives its restart
    assert alter(bs[2], "2", {"log.cleaner.backoff.ms": 20000}) == (0, None)
    cluster.restart(2)
    e = describe(bs[2], "2", ["log.cleaner.backoff.ms"])["log.cleaner.backoff.ms"]
    assert (e.value, e.config_source) == ("20000", 2)
    assert describe(bs[1], "1", ["log.cleaner.backoff.ms"])["log.cleaner.backoff.ms"].value == "15000"

    # max.connections on broker 1: beyond it new connections wait unanswered
    assert alter(bs[1], "1", {"max.connections": 8}) == (0, None)
    time.sleep(0.5)
    socks, ok = answered(bs[1], 12)
    try:
        assert 0 < ok < 12, ok  # some answered (free slots), the rest wait
        assert ok <= 8
    finally:
        for s in socks:
            s.close()
    assert alter(bs[2], "1", {}) == (ErrorCode.INVALID_REQUEST, "Unexpected broker id, expected 2, but received 1")
    assert alter(bs[1], "1", deletes=["max.connections"]) == (0, None)
    time.sleep(0.5)
    socks, ok = answered(bs[1], 12)
    for s in socks:
        s.close()
    assert ok == 12


# ---------------------------------------------------------------------- one broker: TLS, deprecated keys


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    from tests.support.certs import make_certs

    root = tmp_path_factory.mktemp("dyn-tls")
    first, second = make_certs(root / "first"), make_certs(root / "second")
    port, ssl_port = free_port(), free_port()
    b = BrokerProcess(
        root / "data",
        broker_id=1,
        port=port,
        config={
            "listeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": first.broker_pem,
        },
    ).start()
    try:
        yield b, ssl_port, first, second
    finally:
        b.stop()


def presented(port: int) -> bytes:
    """The certificate a new TLS connection to the port is shown (DER)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as s,
    ):
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return der


def der_of(pem_path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(
        pem_path.read_text().split("-----END CERTIFICATE-----")[0] + "-----END CERTIFICATE-----\n"
    )


def test_a_listener_key_store_swapped_at_runtime(tls_broker, tmp_path):
    b, ssl_port, first, second = tls_broker
    assert presented(ssl_port) == der_of(first.broker_pem)
    # a key store that cannot be loaded is refused, the old one serves on
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    code, msg = alter(b.bootstrap, "1", {"listener.name.ssl.ssl.keystore.location": bad})
    assert code == ErrorCode.INVALID_REQUEST and "Validation of dynamic config update of SSLFactory failed" in msg
    code, msg = alter(b.bootstrap, "1", {"listener.name.ssl.ssl.keystore.password": "secret"})
    assert code == ErrorCode.INVALID_REQUEST and "does not store passwords" in msg
    code, msg = alter(b.bootstrap, "1", {"ssl.keystore.location": second.broker_pem})
    assert code == ErrorCode.INVALID_REQUEST and "only per-listener using the listener prefix" in msg
    assert presented(ssl_port) == der_of(first.broker_pem)

    assert alter(b.bootstrap, "1", {"listener.name.ssl.ssl.keystore.location": second.broker_pem}) == (0, None)
    until("the new certificate", lambda: presented(ssl_port) == der_of(second.broker_pem))
    e = describe(b.bootstrap, "1")["listener.name.ssl.ssl.keystore.location"]
    assert (e.value, e.config_source, e.read_only) == (str(second.broker_pem), 2, False)
    assert synonyms(e) == [
        ("listener.name.ssl.ssl.keystore.location", str(second.broker_pem), 2),
        ("ssl.keystore.location", str(first.broker_pem), 4),
    ]
    # the same location altered again reads the file again (a renewed certificate)
    second.broker_pem.write_bytes(first.broker_pem.read_bytes())
    assert alter(b.bootstrap, "1", {"listener.name.ssl.ssl.keystore.location": second.broker_pem}) == (0, None)
    until("the renewed file", lambda: presented(ssl_port) == der_of(first.broker_pem))
    # removed: the static key store again
    assert alter(b.bootstrap, "1", deletes=["listener.name.ssl.ssl.keystore.location"]) == (0, None)
    assert "listener.name.ssl.ssl.keystore.location" not in describe(b.bootstrap, "1")
    until("the static certificate", lambda: presented(ssl_port) == der_of(first.broker_pem))


def test_deprecated_topic_keys_accepted_with_a_warning_unknown_refused(tls_broker):
    b = tls_broker[0]
    C = CreateTopicsRequest

    def create(name, configs) -> tuple[int, str | None]:
        req = C(
            topics=[
                C.CreatableTopic(
                    name=name,
                    num_partitions=1,
                    replication_factor=1,
                    assignments=[],
                    configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
                )
            ],
            timeout_ms=30000,
            validate_only=False,
        )
        with connect(b.bootstrap) as conn:
            r = conn.request(req).topics[0]
        return r.error_code, r.error_message

    assert create("dep", {"message.format.version": "2.8"})[0] == 0
    assert create("dep-bad", {"message.format.versions": "2.8"})[0] == ErrorCode.INVALID_CONFIG
    A = AlterConfigsRequest
    with connect(b.bootstrap) as conn:
        r = conn.request(
            A(
                resources=[
                    A.AlterConfigsResource(
                        resource_type=TOPIC_RESOURCE,
                        resource_name="dep",
                        configs=[A.AlterableConfig(name="message.downconversion.enable", value="false")],
                    )
                ],
                validate_only=False,
            )
        )
    assert r.responses[0].error_code == 0
    assert alter(
        b.bootstrap, "dep", {"message.timestamp.difference.max.ms": "60000"}, resource_type=TOPIC_RESOURCE
    ) == (0, None)
    code, _ = alter(b.bootstrap, "dep", {"no.such.topic.key": "1"}, resource_type=TOPIC_RESOURCE)
    assert code == ErrorCode.INVALID_CONFIG
    with connect(b.bootstrap) as conn:
        r = conn.request(
            A(
                resources=[
                    A.AlterConfigsResource(
                        resource_type=TOPIC_RESOURCE,
                        resource_name="dep",
                        configs=[A.AlterableConfig(name="no.such.topic.key", value="1")],
                    )
                ],
                validate_only=False,
            )
        )
    assert r.responses[0].error_code == ErrorCode.INVALID_CONFIG
    log = until("the warnings", lambda: (t := b.log_path.read_text()).count("accepted but has no effect") >= 3 and t)
    assert "topic configuration message.format.version=2.8 accepted but has no effect" in log
    assert "topic configuration message.timestamp.difference.max.ms=60000 accepted but has no effect" in log


# ---------------------------------------------------------------------- docs/cluster.md


def shown_commands() -> list[str]:
    text = (ROOT / "docs" / "cluster.md").read_text()
    section = text.split("## Changing settings without a restart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def test_the_documented_commands_run(tls_broker):
    b = tls_broker[0]
    commands = shown_commands()
    assert commands and all(c.startswith("broker configs ") for c in commands)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    outs = []
    for cmd in commands:
        r = subprocess.run(
            shlex.split(cmd.replace("127.0.0.1:9092", b.bootstrap)), env=env, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, (cmd, r.stderr)
        outs.append(r.stdout)
    text = "".join(outs)
    assert "Completed updating default config for brokers in the cluster." in text
    assert "Default configs for brokers in the cluster are:" in text
    # what the documented commands set is removed by the last ones
    assert describe(b.bootstrap, "") == {}
