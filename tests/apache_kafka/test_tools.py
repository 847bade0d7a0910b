"""Apache Kafka's own command-line tools, unchanged, against a real kbroker process, each
used as Kafka's documentation shows it (bin/<tool>.sh arguments; tests/support/kafka_tools.py
runs the same main classes). Where kbroker answers differently from Kafka on purpose, the
test pins the difference (and README's "Kafka's tools" section says why).

JVM launches cost about a second each, so every test drives one tool through a whole
scenario and data is produced with the project's own client where the tool is not the point.
"""

from __future__ import annotations

import json
import re

import pytest

from broker.client import Cluster, Producer
from broker.native import partition_for_key
from broker.server.handlers import supported_versions
from tests.groups.helpers import committed, describe, wait_until
from tests.support.broker_proc import BrokerProcess
from tests.support.kafka_tools import kafka_tool, start_kafka_tool

pytestmark = pytest.mark.interop

TIMEOUT_S = 60


def produce(bootstrap: str, topic: str, count: int, partitions: int, prefix: str = "m") -> None:
    with Producer(bootstrap, acks=-1) as p:
        for i in range(count):
            p.send(topic, f"{prefix}-{i}".encode(), partition=i % partitions)
        p.flush()


def create(bootstrap: str, topic: str, partitions: int, configs: dict | None = None) -> None:
    with Cluster(bootstrap) as c:
        c.create_topic(topic, partitions, 1, configs)
        c.topic(topic, wait_s=10)


def table(out: str, header: str) -> list[dict]:
    """The rows of the whitespace-aligned table under the line starting with `header`."""
    lines = out.splitlines()
    rows, cols = [], None
    for line in lines:
        if line.startswith(header):
            cols = line.split()
            continue
        if cols and line.strip():
            rows.append(dict(zip(cols, line.split())))
        elif cols and rows:
            cols = None
    return rows


# ---------------------------------------------------------------------- kafka-topics


def test_topics_create_list_describe_alter_delete(kbroker, topic):
    b = kbroker.bootstrap
    out = kafka_tool(
        "kafka-topics",
        "--bootstrap-server",
        b,
        "--create",
        "--topic",
        topic,
        "--partitions",
        3,
        "--replication-factor",
        1,
        "--config",
        "retention.ms=3600000",
        "--config",
        "cleanup.policy=compact",
    ).stdout
    assert out.strip() == f"Created topic {topic}."

    again = kafka_tool("kafka-topics", "--bootstrap-server", b, "--create", "--topic", topic, check=False)
    assert again.returncode == 1
    assert f"Topic '{topic}' already exists." in again.stdout + again.stderr
    kafka_tool("kafka-topics", "--bootstrap-server", b, "--create", "--topic", topic, "--if-not-exists")

    rf3 = kafka_tool(
        "kafka-topics",
        "--bootstrap-server",
        b,
        "--create",
        "--topic",
        topic + "-rf3",
        "--replication-factor",
        3,
        check=False,
    )
    assert rf3.returncode == 1
    assert "Replication factor: 3 larger than available brokers: 1." in rf3.stdout + rf3.stderr

    listed = kafka_tool("kafka-topics", "--bootstrap-server", b, "--list", "--exclude-internal").lines
    assert topic in listed and "__consumer_offsets" not in listed
    assert topic + "-rf3" not in listed

    # only the overrides show as Configs (the broker's defaults carry source DEFAULT_CONFIG)
    desc = kafka_tool("kafka-topics", "--bootstrap-server", b, "--describe", "--topic", topic).lines
    head = dict(f.split(": ", 1) for f in desc[0].split("\t"))
    assert head["Topic"] == topic and head["PartitionCount"] == "3" and head["ReplicationFactor"] == "1"
    assert sorted(head["Configs"].split(",")) == ["cleanup.policy=compact", "retention.ms=3600000"]
    parts = [dict(f.split(": ", 1) for f in line.strip().split("\t")) for line in desc[1:]]
    assert [(p["Partition"], p["Leader"], p["Replicas"], p["Isr"]) for p in parts] == [
        (str(i), "0", "0", "0") for i in range(3)
    ]

    kafka_tool("kafka-topics", "--bootstrap-server", b, "--alter", "--topic", topic, "--partitions", 5)
    shrink = kafka_tool(
        "kafka-topics", "--bootstrap-server", b, "--alter", "--topic", topic, "--partitions", 2, check=False
    )
    assert shrink.returncode == 1
    assert "Topic currently has 5 partitions, 2 would not be an increase." in shrink.stdout + shrink.stderr
    with Cluster(b) as c:
        assert len(c.topic(topic).partitions) == 5

    kafka_tool("kafka-topics", "--bootstrap-server", b, "--delete", "--topic", topic)
    with Cluster(b) as c:
        assert topic not in c.refresh()


# ---------------------------------------------------------------------- console producer / consumer


def test_console_producer_and_consumer_keys_headers_groups(kbroker, topic):
    b = kbroker.bootstrap
    create(b, topic, 4)
    keyed = [(f"key-{i}", f"value-{i}") for i in range(12)]
    kafka_tool(
        "kafka-console-producer",
        "--bootstrap-server",
        b,
        "--topic",
        topic,
        "--reader-property",
        "parse.key=true",
        "--reader-property",
        "key.separator=:",
        input="".join(f"{k}:{v}\n" for k, v in keyed),
    )
    kafka_tool(
        "kafka-console-producer",
        "--bootstrap-server",
        b,
        "--topic",
        topic,
        "--reader-property",
        "parse.headers=true",
        "--reader-property",
        "parse.key=true",
        input="h1:a,h2:b\tkey-h\tvalue-h\n",
    )

    out = kafka_tool(
        "kafka-console-consumer",
        "--bootstrap-server",
        b,
        "--topic",
        topic,
        "--from-beginning",
        "--group",
        "console-g",
        "--max-messages",
        13,
        "--formatter-property",
        "print.key=true",
        "--formatter-property",
        "print.headers=true",
        "--formatter-property",
        "print.partition=true",
        "--formatter-property",
        "print.offset=true",
        timeout=TIMEOUT_S,
    ).lines
    got = {}
    for line in out:
        part, offset, headers, key, value = line.split("\t")
        got[key] = (int(part.split(":")[1]), int(offset.split(":")[1]), headers, value)
    assert len(got) == 13
    for k, v in keyed + [("key-h", "value-h")]:
        # the Java producer's partitioner (murmur2 of the key) agrees with kbroker's client
        assert got[k][0] == partition_for_key(k.encode(), 4), k
        assert got[k][3] == v
    assert got["key-h"][2] == "h1:a,h2:b"
    assert {got[k][2] for k, _ in keyed} == {"NO_HEADERS"}
    per_partition = {}
    for part, offset, _, _ in got.values():
        per_partition.setdefault(part, []).append(offset)
    assert all(sorted(o) == list(range(len(o))) for o in per_partition.values())

    # the group committed what it read: the same group gets only what comes next
    assert sum(committed(b, "console-g", {topic: 4}).values()) == 13
    kafka_tool("kafka-console-producer", "--bootstrap-server", b, "--topic", topic, input="later\n")
    more = kafka_tool(
        "kafka-console-consumer",
        "--bootstrap-server",
        b,
        "--topic",
        topic,
        "--group",
        "console-g",
        "--max-messages",
        1,
        "--timeout-ms",
        20000,
        timeout=TIMEOUT_S,
    ).lines
    assert more == ["later"]


# ---------------------------------------------------------------------- kafka-consumer-groups


def test_consumer_groups_list_describe_reset_delete(kbroker, topic, tmp_path):
    b = kbroker.bootstrap
    create(b, topic, 2)
    produce(b, topic, 10, 2)  # 5 records a partition
    group = f"{topic}-g"

    # a live member: a console consumer that stays in the group
    with start_kafka_tool(
        "kafka-console-consumer",
        "--bootstrap-server",
        b,
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--consumer-property",
        "auto.commit.interval.ms=200",
        out_dir=tmp_path,
    ) as consumer:
        wait_until(
            lambda: describe(b, group)["state"] == "Stable" and sum(committed(b, group, {topic: 2}).values()) == 10,
            TIMEOUT_S,
            "the group to commit 10",
        )
        listed = kafka_tool("kafka-consumer-groups", "--bootstrap-server", b, "--list").lines
        assert group in listed
        rows = table(
            kafka_tool("kafka-consumer-groups", "--bootstrap-server", b, "--describe", "--group", group).stdout, "GROUP"
        )
        assert [
            (r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"])
            for r in sorted(rows, key=lambda r: r["PARTITION"])
        ] == [("0", "5", "5", "0"), ("1", "5", "5", "0")]
        assert {r["CONSUMER-ID"] for r in rows} != {"-"}
        state = table(
            kafka_tool(
                "kafka-consumer-groups", "--bootstrap-server", b, "--describe", "--group", group, "--state"
            ).stdout,
            "GROUP",
        )
        assert state[0]["STATE"] == "Stable" and state[0]["#MEMBERS"] == "1"
        assert state[0]["ASSIGNMENT-STRATEGY"] in ("range", "cooperative-sticky")

        # Kafka refuses to reset the offsets of a group with members
        busy = kafka_tool(
            "kafka-consumer-groups",
            "--bootstrap-server",
            b,
            "--group",
            group,
            "--reset-offsets",
            "--to-earliest",
            "--topic",
            topic,
            "--execute",
            check=False,
        )
        assert "Assignments can only be reset if the group" in busy.stdout + busy.stderr
        consumer.stop()

    wait_until(lambda: describe(b, group)["state"] == "Empty", TIMEOUT_S, "the group to be empty")
    states = table(kafka_tool("kafka-consumer-groups", "--bootstrap-server", b, "--list", "--state").stdout, "GROUP")
    assert {r["GROUP"]: r["STATE"] for r in states}[group] == "Empty"

    def reset(*how, execute=True) -> dict[int, int]:
        out = kafka_tool(
            "kafka-consumer-groups",
            "--bootstrap-server",
            b,
            "--group",
            group,
            "--reset-offsets",
            *how,
            "--execute" if execute else "--dry-run",
        ).stdout
        return {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in table(out, "GROUP")}

    assert reset("--to-earliest", "--topic", topic) == {0: 0, 1: 0}
    assert committed(b, group, {topic: 2}) == {(topic, 0): 0, (topic, 1): 0}
    assert reset("--shift-by", 2, "--all-topics", execute=False) == {0: 2, 1: 2}
    assert committed(b, group, {topic: 2}) == {(topic, 0): 0, (topic, 1): 0}  # a dry run changes nothing
    assert reset("--to-offset", 3, "--topic", f"{topic}:1") == {1: 3}
    assert reset("--to-datetime", "2000-01-01T00:00:00.000", "--topic", f"{topic}:0") == {0: 0}
    assert reset("--to-latest", "--topic", f"{topic}:0") == {0: 5}
    assert reset("--shift-by", -1, "--topic", f"{topic}:0") == {0: 4}
    assert committed(b, group, {topic: 2}) == {(topic, 0): 4, (topic, 1): 3}
    rows = table(
        kafka_tool("kafka-consumer-groups", "--bootstrap-server", b, "--describe", "--group", group).stdout, "GROUP"
    )
    assert sorted((r["PARTITION"], r["LAG"], r["CONSUMER-ID"]) for r in rows) == [("0", "1", "-"), ("1", "2", "-")]

    out = kafka_tool(
        "kafka-consumer-groups", "--bootstrap-server", b, "--group", group, "--delete-offsets", "--topic", f"{topic}:1"
    ).stdout
    assert "Request succeeded for deleting offsets" in out
    assert committed(b, group, {topic: 2}) == {(topic, 0): 4}

    out = kafka_tool("kafka-consumer-groups", "--bootstrap-server", b, "--delete", "--group", group).stdout
    assert f"Deletion of requested consumer groups ('{group}') was successful." in out
    assert group not in kafka_tool("kafka-consumer-groups", "--bootstrap-server", b, "--list").lines
    missing = kafka_tool("kafka-consumer-groups", "--bootstrap-server", b, "--describe", "--group", group, check=False)
    assert f"Consumer group '{group}' does not exist." in missing.stdout + missing.stderr


def _consumer_group_state(b: str, group: str) -> tuple[str, int]:
    from broker.client import BrokerConnection
    from broker.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest

    host, port = b.rsplit(":", 1)
    with BrokerConnection(host, int(port)) as c:
        g = c.request(ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)).groups[0]
    return g.group_state, len(g.members)


def test_consumer_groups_tool_on_a_kip848_consumer_group(kbroker, topic, tmp_path):
    """Kafka 4.4's kafka-consumer-groups on a KIP-848 group (a console consumer with
    group.protocol=consumer): --list with --type and --state, --describe of its offsets
    (with the member that owns each partition), --members (--verbose: epochs and
    assignments by topic name), --state (--verbose: group and assignment epochs); resets
    and deletion refused while it has a member, done once it is empty. The output is as a
    Kafka 4.4 broker's for the same scenario (member ids, ports and epochs aside)."""
    b = kbroker.bootstrap
    create(b, topic, 2)
    produce(b, topic, 10, 2)  # 5 records a partition
    group = f"{topic}-g"
    classic = f"{topic}-classic"
    kafka_tool(  # a classic group beside it, with committed offsets
        "kafka-console-consumer",
        "--bootstrap-server",
        b,
        "--topic",
        topic,
        "--group",
        classic,
        "--from-beginning",
        "--max-messages",
        10,
    )

    def cg(*args, check=True):
        return kafka_tool("kafka-consumer-groups", "--bootstrap-server", b, *args, check=check)

    with start_kafka_tool(
        "kafka-console-consumer",
        "--bootstrap-server",
        b,
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--consumer-property",
        "group.protocol=consumer",
        "--consumer-property",
        "auto.commit.interval.ms=200",
        out_dir=tmp_path,
    ) as consumer:
        wait_until(
            lambda: (
                _consumer_group_state(b, group) == ("Stable", 1) and sum(committed(b, group, {topic: 2}).values()) == 10
            ),
            TIMEOUT_S,
            "the KIP-848 group to commit 10",
        )
        types = {r["GROUP"]: r["TYPE"] for r in table(cg("--list", "--type").stdout, "GROUP")}
        assert (types[group], types[classic]) == ("Consumer", "Classic")
        assert [r["GROUP"] for r in table(cg("--list", "--type", "consumer").stdout, "GROUP")] == [group]
        assert group not in {r["GROUP"] for r in table(cg("--list", "--type", "classic").stdout, "GROUP")}
        assert {r["GROUP"]: r["STATE"] for r in table(cg("--list", "--state").stdout, "GROUP")}[group] == "Stable"

        rows = table(cg("--describe", "--group", group).stdout, "GROUP")
        assert [
            (r["TOPIC"], r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"], r["CLIENT-ID"])
            for r in sorted(rows, key=lambda r: r["PARTITION"])
        ] == [(topic, "0", "5", "5", "0", "console-consumer"), (topic, "1", "5", "5", "0", "console-consumer")]
        (member,) = {r["CONSUMER-ID"] for r in rows}
        assert member != "-"
        rows = table(cg("--describe", "--group", group, "--offsets", "--verbose").stdout, "GROUP")
        assert sorted((r["PARTITION"], r["LEADER-EPOCH"], r["CURRENT-OFFSET"]) for r in rows) == [
            ("0", "0", "5"),
            ("1", "0", "5"),
        ]

        (m,) = table(cg("--describe", "--group", group, "--members").stdout, "GROUP")
        assert (m["CONSUMER-ID"], m["HOST"], m["CLIENT-ID"], m["#PARTITIONS"]) == (
            member,
            "/127.0.0.1",
            "console-consumer",
            "2",
        )
        (m,) = table(cg("--describe", "--group", group, "--members", "--verbose").stdout, "GROUP")
        assert (m["CURRENT-ASSIGNMENT"], m["TARGET-ASSIGNMENT"]) == (f"{topic}:0,1", f"{topic}:0,1")
        assert int(m["CURRENT-EPOCH"]) >= 1 and m["TARGET-EPOCH"] == m["CURRENT-EPOCH"]

        (st,) = table(cg("--describe", "--group", group, "--state").stdout, "GROUP")
        assert (st["ASSIGNMENT-STRATEGY"], st["STATE"], st["#MEMBERS"]) == ("uniform", "Stable", "1")
        (st,) = table(cg("--describe", "--group", group, "--state", "--verbose").stdout, "GROUP")
        assert int(st["GROUP-EPOCH"]) >= 1 and st["TARGET-ASSIGNMENT-EPOCH"] == st["GROUP-EPOCH"]

        busy = cg("--group", group, "--reset-offsets", "--to-earliest", "--topic", topic, "--execute", check=False)
        assert (
            f"Assignments can only be reset if the group '{group}' is inactive, but the current state is Stable."
            in (busy.stdout + busy.stderr)
        )
        busy = cg("--delete", "--group", group, check=False)
        assert f"Group '{group}' could not be deleted due to: " in busy.stdout + busy.stderr
        assert "GroupNotEmptyException" in busy.stdout + busy.stderr
        consumer.stop()

    wait_until(lambda: _consumer_group_state(b, group) == ("Empty", 0), TIMEOUT_S, "the member to leave")
    (st,) = table(cg("--describe", "--group", group, "--state").stdout, "GROUP")
    assert (st["STATE"], st["#MEMBERS"]) == ("Empty", "0")
    out = cg("--group", group, "--reset-offsets", "--to-earliest", "--topic", topic, "--execute").stdout
    assert sorted((r["PARTITION"], r["NEW-OFFSET"]) for r in table(out, "GROUP")) == [("0", "0"), ("1", "0")]
    assert committed(b, group, {topic: 2}) == {(topic, 0): 0, (topic, 1): 0}
    rows = table(cg("--describe", "--group", group).stdout, "GROUP")
    assert sorted((r["PARTITION"], r["LAG"], r["CONSUMER-ID"]) for r in rows) == [("0", "5", "-"), ("1", "5", "-")]
    out = cg("--delete", "--group", group).stdout
    assert f"Deletion of requested consumer groups ('{group}') was successful." in out
    assert group not in {r["GROUP"] for r in table(cg("--list", "--type").stdout, "GROUP")}
    missing = cg("--describe", "--group", group, check=False)
    assert f"Consumer group '{group}' does not exist." in missing.stdout + missing.stderr


def test_configs_tool_on_group_configs(kbroker, topic):
    """Kafka 4.4's kafka-configs --entity-type groups (and --group): a group's configs added,
    described (the group's own, then --all with Kafka's synonyms), a bad value refused with
    Kafka's message, one deleted."""
    b = kbroker.bootstrap
    group = f"{topic}-g"

    def configs(*args, check=True):
        return kafka_tool("kafka-configs", "--bootstrap-server", b, *args, check=check)

    out = configs(
        "--alter",
        "--entity-type",
        "groups",
        "--entity-name",
        group,
        "--add-config",
        "consumer.session.timeout.ms=50000,share.auto.offset.reset=earliest,share.record.lock.duration.ms=20000",
    ).stdout
    assert out.strip() == f"Completed updating config for group {group}."
    out = configs("--describe", "--entity-type", "groups", "--entity-name", group).stdout
    assert out.splitlines() == [
        f"Dynamic configs for group {group} are:",
        "  consumer.session.timeout.ms=50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.session."
        "timeout.ms=50000, DEFAULT_CONFIG:group.consumer.session.timeout.ms=45000}",
        "  share.auto.offset.reset=earliest sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:share.auto.offset."
        "reset=earliest, DEFAULT_CONFIG:share.auto.offset.reset=latest}",
        "  share.record.lock.duration.ms=20000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:share.record.lock."
        "duration.ms=20000, DEFAULT_CONFIG:group.share.record.lock.duration.ms=30000}",
    ]
    bad = configs("--alter", "--group", group, "--add-config", "share.delivery.count.limit=50", check=False)
    assert bad.returncode != 0
    assert "InvalidConfigurationException: share.delivery.count.limit must be in the range 2 to 10 inclusive." in (
        bad.stdout + bad.stderr
    )
    unknown = configs("--alter", "--group", group, "--add-config", "session.timeout.ms=50000", check=False)
    assert "Unknown group config name: session.timeout.ms" in unknown.stdout + unknown.stderr
    out = configs("--alter", "--group", group, "--delete-config", "share.auto.offset.reset").stdout
    assert out.strip() == f"Completed updating config for group {group}."
    lines = configs("--describe", "--group", group, "--all").stdout.splitlines()
    assert lines[0] == f"All configs for group {group} are:" and len(lines) == 22
    assert (
        "  share.auto.offset.reset=latest sensitive=false synonyms={DEFAULT_CONFIG:share.auto.offset.reset=latest}"
        in lines
    )
    assert (
        "  consumer.heartbeat.interval.ms=500 sensitive=false synonyms={STATIC_BROKER_CONFIG:group.consumer.heartbeat."
        "interval.ms=500, DEFAULT_CONFIG:group.consumer.heartbeat.interval.ms=5000}"
    ) in lines


# ---------------------------------------------------------------------- kafka-configs


def test_configs_describe_and_alter_topics_and_brokers(kbroker, topic):
    b = kbroker.bootstrap
    create(b, topic, 1)

    def topic_configs(*extra) -> dict[str, str]:
        out = kafka_tool(
            "kafka-configs",
            "--bootstrap-server",
            b,
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            *extra,
        ).stdout
        return {
            m.group(1): m.group(2)
            for m in re.finditer(r"^  ([\w.]+)=(\S*) sensitive=false synonyms=\{(.*)\}$", out, re.M)
        } | {
            "synonyms:" + m.group(1): m.group(3)
            for m in re.finditer(r"^  ([\w.]+)=(\S*) sensitive=false synonyms=\{(.*)\}$", out, re.M)
        }

    assert topic_configs() == {}
    out = kafka_tool(
        "kafka-configs",
        "--bootstrap-server",
        b,
        "--alter",
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--add-config",
        "retention.ms=3600000,segment.bytes=1048576",
    ).stdout
    assert f"Completed updating config for topic {topic}." in out
    got = topic_configs()
    assert got["retention.ms"] == "3600000" and got["segment.bytes"] == "1048576"
    # as Kafka lists them: log.retention.ms has no default (the hours have), so no broker synonym
    assert got["synonyms:retention.ms"] == "DYNAMIC_TOPIC_CONFIG:retention.ms=3600000"
    assert (
        got["synonyms:segment.bytes"] == "DYNAMIC_TOPIC_CONFIG:segment.bytes=1048576, "
        "DEFAULT_CONFIG:log.segment.bytes=1073741824"
    )
    every = topic_configs("--all")
    assert every["cleanup.policy"] == "delete" and every["retention.ms"] == "3600000"
    assert every["synonyms:max.message.bytes"] == "DEFAULT_CONFIG:message.max.bytes=1048588"

    kafka_tool(
        "kafka-configs",
        "--bootstrap-server",
        b,
        "--alter",
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--delete-config",
        "segment.bytes",
    )
    assert "segment.bytes" not in topic_configs() and "retention.ms" in topic_configs()

    for bad, why in (("no.such.config=1", "no.such.config"), ("retention.ms=abc", "retention.ms")):
        r = kafka_tool(
            "kafka-configs",
            "--bootstrap-server",
            b,
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--add-config",
            bad,
            check=False,
        )
        assert r.returncode == 1 and "InvalidConfigurationException" in r.stderr and why in r.stderr

    out = kafka_tool(
        "kafka-configs", "--bootstrap-server", b, "--describe", "--entity-type", "brokers", "--entity-name", 0, "--all"
    ).stdout
    assert (
        "  group.initial.rebalance.delay.ms=0 sensitive=false synonyms={STATIC_BROKER_CONFIG:"
        "group.initial.rebalance.delay.ms=0, DEFAULT_CONFIG:group.initial.rebalance.delay.ms=3000}" in out
    )
    assert "  advertised.listeners=null sensitive=false synonyms={}" in out
    assert "  num.partitions=1 sensitive=false synonyms={DEFAULT_CONFIG:num.partitions=1}" in out
    dynamic = kafka_tool(
        "kafka-configs", "--bootstrap-server", b, "--describe", "--entity-type", "brokers", "--entity-name", 0
    ).stdout
    assert dynamic.strip() == "Dynamic configs for broker 0 are:"

    # dynamic broker configs: the cluster default, then this broker's own, then gone again
    for target in (("--entity-default",), ("--entity-name", "0")):
        kafka_tool(
            "kafka-configs",
            "--bootstrap-server",
            b,
            "--alter",
            "--entity-type",
            "brokers",
            *target,
            "--add-config",
            "log.cleaner.backoff.ms=16000",
        )
    line = (
        "  log.cleaner.backoff.ms=16000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.cleaner.backoff.ms"
        "=16000, DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.backoff.ms=16000, DEFAULT_CONFIG:log.cleaner.backoff.ms"
        "=15000}"
    )
    for extra in ((), ("--all",)):
        out = kafka_tool(
            "kafka-configs",
            "--bootstrap-server",
            b,
            "--describe",
            "--entity-type",
            "brokers",
            "--entity-name",
            0,
            *extra,
        ).stdout
        assert line in out, out
    out = kafka_tool(
        "kafka-configs", "--bootstrap-server", b, "--describe", "--entity-type", "brokers", "--entity-default"
    ).stdout
    assert out.splitlines() == [
        "Default configs for brokers in the cluster are:",
        "  log.cleaner.backoff.ms=16000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
        "log.cleaner.backoff.ms=16000, DEFAULT_CONFIG:log.cleaner.backoff.ms=15000}",
    ], out
    for target in (("--entity-default",), ("--entity-name", "0")):
        kafka_tool(
            "kafka-configs",
            "--bootstrap-server",
            b,
            "--alter",
            "--entity-type",
            "brokers",
            *target,
            "--delete-config",
            "log.cleaner.backoff.ms",
        )
    # difference: no password in a dynamic broker config (Kafka encrypts it with
    # password.encoder.secret, which kbroker does not have)
    r = kafka_tool(
        "kafka-configs",
        "--bootstrap-server",
        b,
        "--alter",
        "--entity-type",
        "brokers",
        "--entity-name",
        "0",
        "--add-config",
        "listener.name.plaintext.ssl.keystore.password=x",
        check=False,
    )
    assert r.returncode == 1 and "kbroker does not store passwords in ZooKeeper" in r.stderr, r.stderr


# ---------------------------------------------------------------------- delete records, offsets, log dirs


def test_delete_records_get_offsets_and_log_dirs(kbroker, topic, tmp_path):
    b = kbroker.bootstrap
    create(b, topic, 2)
    produce(b, topic, 20, 2)

    spec = tmp_path / "offsets.json"
    spec.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": topic, "partition": 0, "offset": 4},
                    {"topic": topic, "partition": 1, "offset": -1},
                ],
            }
        )
    )
    out = kafka_tool("kafka-delete-records", "--bootstrap-server", b, "--offset-json-file", spec).stdout
    assert f"partition: {topic}-0\tlow_watermark: 4" in out
    assert f"partition: {topic}-1\tlow_watermark: 10" in out

    def offsets(time_spec) -> dict[int, int]:
        lines = kafka_tool("kafka-get-offsets", "--bootstrap-server", b, "--topic", topic, "--time", time_spec).lines
        return {int(line.split(":")[1]): int(line.split(":")[2]) for line in lines}

    assert offsets("earliest") == {0: 4, 1: 10}
    assert offsets("latest") == {0: 10, 1: 10}

    out = kafka_tool("kafka-log-dirs", "--bootstrap-server", b, "--describe", "--topic-list", topic).lines
    report = json.loads(out[-1])
    (broker,) = report["brokers"]
    (log_dir,) = broker["logDirs"]
    assert broker["broker"] == 0 and log_dir["error"] is None
    assert log_dir["logDir"] == str(kbroker.data_dir.resolve())
    parts = {p["partition"]: p for p in log_dir["partitions"]}
    assert set(parts) == {f"{topic}-0", f"{topic}-1"}
    for name, p in parts.items():
        # the size of the partition's segments (deleted records stay until their segment goes)
        on_disk = sum(f.stat().st_size for f in (kbroker.data_dir / name).glob("*.log"))
        assert p["size"] == on_disk > 0 and p["offsetLag"] == 0 and not p["isFuture"], (name, p)


def test_broker_api_versions_lists_what_kbroker_implements(kbroker):
    out = kafka_tool("kafka-broker-api-versions", "--bootstrap-server", kbroker.bootstrap).stdout
    usable = {
        int(m.group(1)): (int(m.group(2)), int(m.group(3) or m.group(2)))
        for m in re.finditer(r"\((\d+)\): (\d+)(?: to (\d+))? \[usable", out)
    }
    # LeaderAndIsr, StopReplica, UpdateMetadata and ControlledShutdown are ZooKeeper-era
    # inter-broker APIs that Kafka 4.x's client library no longer knows: the tool cannot
    # call them usable
    zk_era = {4, 5, 6, 7}
    assert usable == {k: (lo, hi) for k, lo, hi in supported_versions() if k not in zk_era}
    assert "Produce(0): 3 to 12 [usable: 12]" in out  # 12: transaction.version 2 (the default)


# ---------------------------------------------------------------------- perf tools, e2e latency


def test_producer_and_consumer_perf_tools(kbroker, topic):
    b = kbroker.bootstrap
    create(b, topic, 2)
    out = kafka_tool(
        "kafka-producer-perf-test",
        "--bootstrap-server",
        b,
        "--topic",
        topic,
        "--num-records",
        20000,
        "--record-size",
        100,
        "--throughput",
        -1,
        "--command-property",
        "acks=all",
        "linger.ms=5",
        timeout=TIMEOUT_S,
    ).lines
    assert out[-1].startswith("20000 records sent,"), out[-3:]
    with Cluster(b) as c:
        assert sum(o for o, _ in c.list_offsets(topic, [0, 1], -1).values()) == 20000

    out = kafka_tool(
        "kafka-consumer-perf-test",
        "--bootstrap-server",
        b,
        "--topic",
        topic,
        "--num-records",
        20000,
        "--timeout",
        30000,
        "--group",
        f"{topic}-perf",
        timeout=TIMEOUT_S,
    ).lines
    header, values = out[-2].split(", "), out[-1].split(", ")
    stats = dict(zip(header, values))
    assert int(stats["data.consumed.in.nMsg"]) == 20000
    assert float(stats["data.consumed.in.MB"]) == pytest.approx(20000 * 100 / 2**20, rel=1e-3)


def test_end_to_end_latency_tool_round_trips_records(kbroker, topic):
    # the tool checks every record it reads back equals the one it sent (key, value, headers)
    out = kafka_tool(
        "kafka-e2e-latency",
        "--bootstrap-server",
        kbroker.bootstrap,
        "--topic",
        topic,
        "--num-records",
        300,
        "--producer-acks",
        "all",
        "--record-size",
        200,
        "--record-key-size",
        8,
        "--num-headers",
        2,
        "--record-header-key-size",
        4,
        "--record-header-size",
        16,
        timeout=TIMEOUT_S,
    ).stdout
    assert re.search(r"^Avg latency: [\d.]+ ms$", out, re.M), out[-500:]
    assert re.search(r"^Percentiles: 50th = \d+, 99th = \d+, 99\.9th = \d+$", out, re.M)


# ---------------------------------------------------------------------- verifiable producer / consumer


def verifiable_events(text: str) -> list[dict]:
    """The JSON events of a verifiable tool's stdout (the last line may still be partial)."""
    events = []
    for line in text.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
    return events


def test_verifiable_producer_and_consumers_lose_nothing_across_a_kill(tmp_path, topic):
    """Kafka's system-test pattern: two verifiable consumers in one group read while the
    verifiable producer writes; kbroker is killed -9 and restarted in the middle. The
    producer is set up as Kafka's idempotence system tests set it (the tool's own default is
    retries=0): every message is acknowledged, the log holds each once, and every one is
    consumed."""
    total = 4000
    with BrokerProcess(
        tmp_path / "data", config={"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 2}
    ) as kb:
        b = kb.bootstrap
        create(b, topic, 3)
        group = f"{topic}-g"
        consumers = [
            start_kafka_tool(
                "kafka-verifiable-consumer",
                "--bootstrap-server",
                b,
                "--topic",
                topic,
                "--group-id",
                group,
                "--reset-policy",
                "earliest",
                "--verbose",
                out_dir=tmp_path,
                label=f"consumer-{i}",
            )
            for i in range(2)
        ]
        try:
            wait_until(lambda: len(stable_members(b, group)) == 2, TIMEOUT_S, "two verifiable consumers in the group")
            props = tmp_path / "producer.properties"
            props.write_text("enable.idempotence=true\nretries=2147483647\nmax.in.flight.requests.per.connection=5\n")
            producer = start_kafka_tool(
                "kafka-verifiable-producer",
                "--bootstrap-server",
                b,
                "--topic",
                topic,
                "--max-messages",
                total,
                "--throughput",
                2000,
                "--acks",
                -1,
                "--command-config",
                props,
                out_dir=tmp_path,
                label="producer",
            )
            wait_until(
                lambda: (
                    sum(e["name"] == "producer_send_success" for e in verifiable_events(producer.output()))
                    >= total // 4
                ),
                TIMEOUT_S,
                "a quarter of the messages acknowledged",
            )
            kb.kill()
            kb.start()
            code, out = producer.wait(TIMEOUT_S)
            assert code == 0
            events = verifiable_events(out)
            sent = [e for e in events if e["name"] == "producer_send_success"]
            assert events[-1]["name"] == "tool_data" and events[-1]["acked"] == len(sent) == total
            assert sorted(int(e["value"]) for e in sent) == list(range(total))
            with Cluster(b) as c:
                ends = c.list_offsets(topic, [0, 1, 2], -1)
            assert sum(o for o, _ in ends.values()) == total, "a message was written twice"

            def consumed() -> set[str]:
                return {
                    e["value"] for c in consumers for e in verifiable_events(c.output()) if e["name"] == "record_data"
                }

            wait_until(lambda: len(consumed()) >= total, TIMEOUT_S, "the consumers to read every acked message")
        finally:
            for c in consumers:
                c.stop()
        assert {e["value"] for e in sent} <= consumed()
        for c in consumers:
            assert verifiable_events(c.output())[-1]["name"] == "shutdown_complete"


def stable_members(bootstrap: str, group: str) -> dict:
    d = describe(bootstrap, group)
    return d["members"] if d["state"] == "Stable" else {}
