"""Group configs (Kafka 4.4's GROUP resources, broker/group/group_configs.py) on a real
broker: set and described with the raw protocol as kafka-configs sends it, refused with
Kafka 4.4's error codes and messages (taken from a Kafka 4.4.0 broker's answers to the
same requests; tests/apache_kafka/test_differential.py compares the two field by field),
kept across a restart, and acted on by the KIP-848 coordinator: a group's
consumer.heartbeat.interval.ms is what its members are told, its consumer.session.timeout.ms
is when a silent member is removed. `broker configs --group` prints them."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from broker.client import BrokerConnection
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.alter_configs import AlterConfigsRequest as A
from broker.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest as H
from broker.protocol.messages.describe_configs import DescribeConfigsRequest as DC
from broker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as I
from tests.groups.helpers import child_env, create_topic, find_coordinator, host_port, wait_until

# the bounds a group's values must lie within; the broker's own defaults inside them
BROKER_CONFIG = {
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.session.timeout.ms": 30000,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.heartbeat.interval.ms": 5000,
}
GROUP = 32
SET, DELETE, APPEND = 0, 1, 2


def describe(bootstrap: str, group: str, keys=None):
    with BrokerConnection(*host_port(bootstrap)) as c:
        r = c.request(
            DC(
                resources=[
                    DC.DescribeConfigsResource(resource_type=GROUP, resource_name=group, configuration_keys=keys)
                ],
                include_synonyms=True,
                include_documentation=True,
            )
        ).results[0]
    return r


def configs(bootstrap: str, group: str) -> dict:
    r = describe(bootstrap, group)
    assert r.error_code == 0, r
    return {c.name: c for c in r.configs}


def alter(bootstrap: str, group: str, *ops, validate_only: bool = False):
    with BrokerConnection(*host_port(bootstrap)) as c:
        r = c.request(
            I(
                resources=[
                    I.AlterConfigsResource(
                        resource_type=GROUP,
                        resource_name=group,
                        configs=[I.AlterableConfig(name=n, config_operation=o, value=v) for n, o, v in ops],
                    )
                ],
                validate_only=validate_only,
            )
        ).responses[0]
    return r.error_code, r.error_message


def test_a_group_config_is_set_described_with_its_synonyms_and_removed(broker, name):
    fresh = configs(broker.bootstrap, name)
    # Kafka 4.4 describes every group config but the internal ones not set
    assert "consumer.assignor.offload.enable" not in fresh and len(fresh) == 21
    s = fresh["consumer.session.timeout.ms"]
    assert (s.value, s.config_source, s.read_only, s.config_type) == ("30000", 4, False, 3)  # server.properties
    # the broker key's layers, as a topic config's synonyms (server.properties', then Kafka's default)
    assert [(x.name, x.value, x.source) for x in s.synonyms] == [
        ("group.consumer.session.timeout.ms", "30000", 4),
        ("group.consumer.session.timeout.ms", "45000", 5),
    ]
    assert s.documentation == "The timeout to detect client failures when using the consumer group protocol."
    reset = fresh["share.auto.offset.reset"]
    assert [(x.name, x.value, x.source) for x in reset.synonyms] == [("share.auto.offset.reset", "latest", 5)]

    assert alter(broker.bootstrap, name, ("consumer.session.timeout.ms", SET, "20000")) == (0, None)
    assert alter(broker.bootstrap, name, ("share.auto.offset.reset", SET, "by_duration:PT1H")) == (0, None)
    got = configs(broker.bootstrap, name)
    s = got["consumer.session.timeout.ms"]
    assert (s.value, s.config_source) == ("20000", 8)  # GROUP_CONFIG
    assert [(x.name, x.value, x.source) for x in s.synonyms] == [
        ("consumer.session.timeout.ms", "20000", 8),
        ("group.consumer.session.timeout.ms", "30000", 4),
        ("group.consumer.session.timeout.ms", "45000", 5),
    ]
    assert got["share.auto.offset.reset"].value == "by_duration:PT1H"
    assert alter(broker.bootstrap, name, ("consumer.assignor.offload.enable", SET, "false")) == (0, None)
    assert configs(broker.bootstrap, name)["consumer.assignor.offload.enable"].value == "false"  # internal, set: shown

    assert alter(broker.bootstrap, name, ("share.auto.offset.reset", DELETE, None)) == (0, None)
    got = configs(broker.bootstrap, name)
    assert (got["share.auto.offset.reset"].value, got["share.auto.offset.reset"].config_source) == ("latest", 5)
    assert got["consumer.session.timeout.ms"].value == "20000"  # the others stay

    # validate_only: checked, not kept
    assert alter(broker.bootstrap, name, ("consumer.heartbeat.interval.ms", SET, "200"), validate_only=True) == (
        0,
        None,
    )
    assert configs(broker.bootstrap, name)["consumer.heartbeat.interval.ms"].value == "5000"

    # the legacy AlterConfigs replaces the group's whole set, as Kafka 4.4's does
    with BrokerConnection(*host_port(broker.bootstrap)) as c:
        r = c.request(
            A(
                resources=[
                    A.AlterConfigsResource(
                        resource_type=GROUP,
                        resource_name=name,
                        configs=[A.AlterableConfig(name="share.delivery.count.limit", value="3")],
                    )
                ],
                validate_only=False,
            )
        ).responses[0]
    assert r.error_code == 0
    got = configs(broker.bootstrap, name)
    assert {n for n, c in got.items() if c.config_source == 8} == {"share.delivery.count.limit"}


# (operations, error code, Kafka 4.4.0's message) as a Kafka 4.4.0 broker answered them
REFUSED = [
    (
        [("consumer.session.timeout.ms", SET, "500")],
        40,
        "consumer.session.timeout.ms must be in the range 1000 to 60000 inclusive.",
    ),
    (
        [("consumer.heartbeat.interval.ms", SET, "20000")],
        40,
        "consumer.heartbeat.interval.ms must be in the range 100 to 15000 inclusive.",
    ),
    ([("nope", SET, "1")], 40, "Unknown group config name: nope"),
    (
        [("share.auto.offset.reset", SET, "bogus")],
        40,
        "Invalid value bogus for configuration share.auto.offset.reset: Invalid value `bogus` for configuration "
        "share.auto.offset.reset. The value must be either 'earliest', 'latest' or of the format "
        "'by_duration:<PnDTnHnMn.nS>'.",
    ),
    (
        [("share.isolation.level", SET, "x")],
        40,
        "Invalid value x for configuration share.isolation.level: String must be one of: read_committed, read_uncommitted",
    ),
    (
        [("consumer.session.timeout.ms", SET, "abc")],
        40,
        "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT",
    ),
    (
        [("share.record.lock.duration.ms", SET, "500")],
        40,
        "Invalid value 500 for configuration share.record.lock.duration.ms: Value must be at least 1000",
    ),
    (
        [("share.delivery.count.limit", SET, "11")],
        40,
        "share.delivery.count.limit must be in the range 2 to 10 inclusive.",
    ),
    (
        [("share.partition.max.record.locks", SET, "5000")],
        40,
        "share.partition.max.record.locks must be in the range 100 to 4000 inclusive.",
    ),
    (
        [("consumer.session.timeout.ms", APPEND, "5")],
        40,
        "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST.",
    ),
    ([("consumer.session.timeout.ms", SET, None)], 42, "Null value not supported for : consumer.session.timeout.ms"),
    (
        [("consumer.session.timeout.ms", DELETE, None), ("consumer.session.timeout.ms", SET, "50000")],
        42,
        "Error due to duplicate config keys",
    ),
    (
        [("errors.deadletterqueue.topic.name", SET, "__x")],
        40,
        "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'",
    ),
    ([("streams.num.standby.replicas", SET, "3")], 40, "streams.num.standby.replicas must be less than or equal to 2"),
    # a session timeout must stay above the heartbeat interval (the broker's, when not set)
    (
        [("consumer.session.timeout.ms", SET, "5000")],
        40,
        "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms",
    ),
]


@pytest.mark.parametrize("ops,code,message", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_bad_group_configs_are_refused_as_kafka_refuses_them(broker, name, ops, code, message):
    assert alter(broker.bootstrap, name, *ops) == (code, message)
    assert not [c for c in configs(broker.bootstrap, name).values() if c.config_source == 8]  # nothing kept


def test_the_default_group_resource_is_refused(broker):
    assert alter(broker.bootstrap, "", ("consumer.session.timeout.ms", SET, "50000")) == (
        ErrorCode.INVALID_REQUEST,
        "Default group resources are not allowed.",
    )
    r = describe(broker.bootstrap, "")
    assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST, "Group name must not be empty")


def _heartbeat(conn, group: str, topic: str, **kw):
    fields = dict(group_id=group, member_id="m-1", member_epoch=0, rebalance_timeout_ms=5000)
    fields.update(subscribed_topic_names=[topic], topic_partitions=[])
    fields.update(kw)
    return conn.request(H(**fields), 1)


def _consumer_group_state(bootstrap: str, group: str):
    from broker.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest

    with BrokerConnection(*host_port(bootstrap)) as c:
        g = c.request(ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)).groups[0]
    return g.group_state, len(g.members)


def test_the_kip848_coordinator_runs_a_group_with_its_own_session_timeout_and_heartbeat_interval(broker, name):
    """consumer.heartbeat.interval.ms is what the group's members are told; a member that
    goes silent is removed after the group's consumer.session.timeout.ms (2 s), long before
    the broker's 30 s; a group without configs gets the broker's values."""
    create_topic(broker.bootstrap, name, 2)
    wait_until(lambda: find_coordinator(broker.bootstrap, name)[0] == 0, 30, "a coordinator")
    # alone, 2000 would not exceed the broker's heartbeat interval (5000): both at once
    ops = [("consumer.session.timeout.ms", SET, "2000"), ("consumer.heartbeat.interval.ms", SET, "700")]
    assert alter(broker.bootstrap, name, *ops) == (0, None)
    other = name + "-plain"
    with BrokerConnection(*host_port(broker.bootstrap)) as conn:
        joined = _heartbeat(conn, name, name)
        assert (joined.error_code, joined.heartbeat_interval_ms) == (0, 700)
        plain = _heartbeat(conn, other, name)
        assert (plain.error_code, plain.heartbeat_interval_ms) == (0, 5000)
        silent_since = time.monotonic()
        assert _consumer_group_state(broker.bootstrap, name) == ("Stable", 1)
        wait_until(lambda: _consumer_group_state(broker.bootstrap, name) == ("Empty", 0), 15, "the silent member gone")
        assert time.monotonic() - silent_since < 10
        assert _consumer_group_state(broker.bootstrap, other)[1] == 1  # 30 s: still there
        # a change applies from the next heartbeat
        assert alter(broker.bootstrap, other, ("consumer.heartbeat.interval.ms", SET, "900")) == (0, None)
        again = _heartbeat(conn, other, name, member_epoch=plain.member_epoch, rebalance_timeout_ms=-1)
        assert (again.error_code, again.heartbeat_interval_ms) == (0, 900)


def test_group_configs_survive_a_restart(tmp_path):
    from tests.support.broker_proc import BrokerProcess

    with BrokerProcess(tmp_path / "data", config=BROKER_CONFIG) as b:
        assert alter(b.bootstrap, "kept", ("share.record.lock.duration.ms", SET, "20000")) == (0, None)
        assert alter(b.bootstrap, "a/b c", ("consumer.session.timeout.ms", SET, "12000")) == (0, None)
        b.restart()
        assert configs(b.bootstrap, "kept")["share.record.lock.duration.ms"].value == "20000"
        assert configs(b.bootstrap, "a/b c")["consumer.session.timeout.ms"].value == "12000"
        assert configs(b.bootstrap, "kept")["consumer.session.timeout.ms"].config_source == 4


def test_broker_configs_cli_for_groups(broker, name):
    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "broker.cli.main", "configs", *args, "--bootstrap-server", broker.bootstrap],
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=60,
        )

    r = cli(
        "alter", "--group", name, "--add-config", "consumer.session.timeout.ms=20000,share.auto.offset.reset=earliest"
    )
    assert (r.returncode, r.stdout) == (0, f"Completed updating config for group {name}.\n"), r.stderr
    r = cli("describe", "--entity-type", "groups", "--entity-name", name)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"Dynamic configs for group {name} are:",
        "  consumer.session.timeout.ms=20000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=20000, "
        "STATIC_BROKER_CONFIG:group.consumer.session.timeout.ms=30000, "
        "DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000}",
        "  share.auto.offset.reset=earliest sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:share.auto.offset.reset=earliest, "
        "DEFAULT_CONFIG:share.auto.offset.reset=latest}",
    ]
    r = cli("alter", "--group", name, "--add-config", "share.delivery.count.limit=50")
    assert r.returncode == 1
    assert (
        "INVALID_CONFIG" in r.stderr
        and "share.delivery.count.limit must be in the range 2 to 10 inclusive." in r.stderr
    )
    r = cli("alter", "--group", name, "--delete-config", "share.auto.offset.reset")
    assert r.returncode == 0, r.stderr
    r = cli("describe", "--group", name, "--all")
    lines = r.stdout.splitlines()
    assert lines[0] == f"All configs for group {name} are:" and len(lines) == 22
    assert (
        "  share.auto.offset.reset=latest sensitive=false synonyms={DEFAULT_CONFIG:share.auto.offset.reset=latest}"
        in lines
    )
