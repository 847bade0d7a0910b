"""broker.cluster.store.znodes: golden payloads in the exact shape Kafka (3.x) writes to
ZooKeeper, every version Kafka ever wrote decoded, round trips, and fuzzed decoders that
raise nothing but ZNodeDataError (whose message names the path and the problem)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import uuid

import pytest
from hypothesis import given, settings, strategies as st

from broker.cluster.store.znodes import (
    PERSISTENT_PATHS,
    BrokerIdZNode,
    BrokerRegistration,
    ClusterIdZNode,
    ConfigEntityChangeNotificationSequenceZNode,
    ConfigEntityZNode,
    ControllerEpochZNode,
    ControllerRegistration,
    ControllerZNode,
    DeleteTopicsTopicZNode,
    EndPoint,
    FeatureZNode,
    IsrChangeNotificationSequenceZNode,
    LeaderIsrState,
    PreferredReplicaElectionZNode,
    ProducerIdBlock,
    ProducerIdBlockZNode,
    ReassignPartitionsZNode,
    TopicAssignment,
    TopicPartition,
    TopicPartitionStateZNode,
    TopicZNode,
    ZNodeDataError,
    decode_topic_id,
    encode_topic_id,
    parse_connect_string,
    sequence_number,
)

TOPIC_ID = "1bZHrMZnQE-06y4OclvK4A"


# ---------------------------------------------------------------- paths


def test_paths_are_kafkas():
    assert ClusterIdZNode.PATH == "/cluster/id"
    assert ControllerZNode.PATH == "/controller"
    assert ControllerEpochZNode.PATH == "/controller_epoch"
    assert BrokerIdZNode.path(3) == "/brokers/ids/3"
    assert TopicZNode.path("clicks") == "/brokers/topics/clicks"
    assert TopicPartitionStateZNode.path("clicks", 7) == "/brokers/topics/clicks/partitions/7/state"
    assert ConfigEntityZNode.path("topics", "clicks") == "/config/topics/clicks"
    assert ConfigEntityChangeNotificationSequenceZNode.CREATE_PATH == "/config/changes/config_change_"
    assert DeleteTopicsTopicZNode.path("clicks") == "/admin/delete_topics/clicks"
    assert PreferredReplicaElectionZNode.PATH == "/admin/preferred_replica_election"
    assert ReassignPartitionsZNode.PATH == "/admin/reassign_partitions"
    assert IsrChangeNotificationSequenceZNode.CREATE_PATH == "/isr_change_notification/isr_change_"
    assert ProducerIdBlockZNode.PATH == "/latest_producer_id_block"
    assert {
        "/brokers/ids",
        "/brokers/topics",
        "/brokers/seqid",
        "/config/changes",
        "/config/topics",
        "/admin/delete_topics",
        "/isr_change_notification",
        "/latest_producer_id_block",
    } <= set(PERSISTENT_PATHS)


@pytest.mark.parametrize("name", ["", "a/b", ".", "..", "x\0y"])
def test_a_name_that_cannot_be_a_znode_is_refused(name):
    with pytest.raises(ValueError, match="cannot be a znode name"):
        TopicZNode.path(name)


@pytest.mark.parametrize(
    "connect, expected",
    [
        ("127.0.0.1:2181", ("127.0.0.1:2181", None)),
        ("127.0.0.1:2181/", ("127.0.0.1:2181", None)),
        ("h1:2181,h2:2182/kb", ("h1:2181,h2:2182", "/kb")),
        # a three-server ensemble (tests/cluster/test_zookeeper_ensemble.py connects through one)
        (
            "127.0.0.2:2181,127.0.0.3:2182,127.0.0.4:2183/kb/prod",
            ("127.0.0.2:2181,127.0.0.3:2182,127.0.0.4:2183", "/kb/prod"),
        ),
        ("h1:2181/a/b", ("h1:2181", "/a/b")),
        ("[::1]:2181/kb", ("[::1]:2181", "/kb")),
    ],
)
def test_connect_string(connect, expected):
    assert parse_connect_string(connect) == expected


@pytest.mark.parametrize(
    "connect",
    ["", "/kb", "h1", "h1:x", "h1:0", "h1:2181,/kb", "h1:2181/a//b", "h1:2181/a/", "h1:2181/a/../b", "h1:2181/./a"],
)
def test_bad_connect_string_is_one_clear_line(connect):
    with pytest.raises(ValueError) as e:
        parse_connect_string(connect)
    assert str(e.value).startswith("zookeeper.connect ") and "\n" not in str(e.value)


def test_sequence_number():
    assert sequence_number("config_change_0000000042", "config_change_") == 42
    for bad in ("config_change_", "config_change_12a", "isr_change_0000000001", "config_change_-1"):
        with pytest.raises(ValueError):
            sequence_number(bad, "config_change_")


def test_a_single_broker_never_loads_kazoo():
    """kazoo is for `zookeeper.connect` only: the broker, its CLI and these codecs do not import it."""
    code = (
        "import sys, broker.cli.main, broker.server.server, broker.cluster.store.znodes; "
        "assert 'kazoo' not in sys.modules, sorted(m for m in sys.modules if m.startswith('kazoo'))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tempfile.gettempdir()
    )
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------- topic ids


def test_topic_id_is_kafkas_base64():
    assert encode_topic_id(uuid.UUID(bytes=bytes(range(16)))) == "AAECAwQFBgcICQoLDA0ODw"
    assert decode_topic_id("AAECAwQFBgcICQoLDA0ODw") == uuid.UUID(bytes=bytes(range(16)))
    assert encode_topic_id(decode_topic_id(TOPIC_ID)) == TOPIC_ID
    for bad in (
        "",
        "AAECAwQFBgcICQoLDA0OD",
        "AAECAwQFBgcICQoLDA0ODw==",
        "AAECAwQFBgcICQoLDA0OD+",
        "AAECAwQFBgcICQoLDA0ODx",
        7,
    ):
        with pytest.raises(ValueError):
            decode_topic_id(bad)


# ---------------------------------------------------------------- golden payloads


def test_cluster_id():
    golden = b'{"version":"1","id":"Hm1pdDVMSUuRIOuQSwYVdQ"}'
    assert ClusterIdZNode.encode("Hm1pdDVMSUuRIOuQSwYVdQ") == golden
    assert ClusterIdZNode.decode(golden) == "Hm1pdDVMSUuRIOuQSwYVdQ"


def test_controller_v2_and_v1():
    v2 = b'{"version":2,"brokerid":1,"timestamp":"1700000000123","kraftControllerEpoch":-1}'
    assert ControllerZNode.encode(ControllerRegistration(1, 1700000000123)) == v2
    assert ControllerZNode.decode(v2) == ControllerRegistration(1, 1700000000123, -1)
    v1 = b'{"version":1,"brokerid":3,"timestamp":"1561456151532"}'
    assert ControllerZNode.decode(v1) == ControllerRegistration(3, 1561456151532, -1)


def test_controller_epoch_is_a_decimal_string():
    assert ControllerEpochZNode.encode(7) == b"7"
    assert ControllerEpochZNode.decode(b"7") == 7
    for bad in (b"", b"7\n", b" 7", b"1_0", b"\xd9\xa3", b"99999999999", b'"7"'):
        with pytest.raises(ZNodeDataError, match="/controller_epoch"):
            ControllerEpochZNode.decode(bad)


BROKER_V5 = (
    b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
    b'"endpoints":["PLAINTEXT://localhost:9092"],"jmx_port":-1,"port":9092,"host":"localhost",'
    b'"version":5,"timestamp":"1658254963614"}'
)


def test_broker_v5():
    reg = BrokerRegistration(1, (EndPoint("PLAINTEXT", "localhost", 9092),), timestamp=1658254963614)
    assert BrokerIdZNode.encode(reg) == BROKER_V5
    assert BrokerIdZNode.decode(1, BROKER_V5) == reg


def test_broker_v5_with_rack_features_and_two_listeners():
    golden = (
        b'{"features":{"metadata.version":{"min_version":1,"max_version":7}},'
        b'"listener_security_protocol_map":{"CLIENT":"PLAINTEXT","REPLICATION":"SSL"},'
        b'"endpoints":["CLIENT://host1:9092","REPLICATION://[::1]:9093"],"rack":"dc1","jmx_port":9999,'
        b'"port":9092,"host":"host1","version":5,"timestamp":"2233345666"}'
    )
    reg = BrokerIdZNode.decode(4, golden)
    assert reg == BrokerRegistration(
        4,
        (EndPoint("CLIENT", "host1", 9092, "PLAINTEXT"), EndPoint("REPLICATION", "::1", 9093, "SSL")),
        "dc1",
        9999,
        {"metadata.version": (1, 7)},
        2233345666,
        5,
    )
    assert json.loads(BrokerIdZNode.encode(reg)) == json.loads(golden)
    assert reg.endpoint("REPLICATION").connection_string == "REPLICATION://[::1]:9093"


def test_broker_older_versions():
    v1 = b'{"version":1,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666"}'
    assert BrokerIdZNode.decode(0, v1).endpoints == (EndPoint("PLAINTEXT", "localhost", 9092),)
    v2 = (
        b'{"version":2,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666",'
        b'"endpoints":["PLAINTEXT://host1:9092","SSL://host1:9093"]}'
    )
    assert BrokerIdZNode.decode(0, v2).endpoints == (
        EndPoint("PLAINTEXT", "host1", 9092),
        EndPoint("SSL", "host1", 9093, "SSL"),
    )
    v3 = v2[:-1] + b',"rack":"dc1"}'
    assert BrokerIdZNode.decode(0, v3).rack == "dc1"
    v4 = (
        b'{"listener_security_protocol_map":{"CLIENT":"PLAINTEXT","REPLICATION":"PLAINTEXT"},'
        b'"endpoints":["CLIENT://host1:9092","REPLICATION://host1:9093"],"rack":null,"jmx_port":-1,'
        b'"host":"host1","timestamp":"2233345666","port":9092,"version":4}'
    )
    reg = BrokerIdZNode.decode(0, v4)
    assert [e.listener_name for e in reg.endpoints] == ["CLIENT", "REPLICATION"] and reg.rack is None
    # features written by 2.7's KIP-584 with the since-removed first_active_version
    v5 = BROKER_V5.replace(
        b'"features":{}', b'"features":{"f":{"min_version":1,"first_active_version":2,"max_version":3}}'
    )
    assert BrokerIdZNode.decode(0, v5).features == {"f": (1, 3)}


@pytest.mark.parametrize(
    "data, problem",
    [
        (BROKER_V5.replace(b'"version":5', b'"version":0'), "'version' is out of range"),
        (BROKER_V5.replace(b'"jmx_port":-1,', b""), "'jmx_port' is missing"),
        (BROKER_V5.replace(b"PLAINTEXT://localhost:9092", b"localhost:9092"), "is not LISTENER://host:port"),
        (BROKER_V5.replace(b"PLAINTEXT://localhost:9092", b"SSL://localhost:9092"), "not in the listener security"),
        (BROKER_V5.replace(b'{"PLAINTEXT":"PLAINTEXT"}', b'{"PLAINTEXT":"TLS"}'), "unknown security protocol"),
        (BROKER_V5.replace(b'"timestamp":"1658254963614"', b'"timestamp":"soon"'), "'timestamp' is not a decimal"),
        (
            BROKER_V5.replace(b'"features":{}', b'"features":{"f":{"max_version":3}}'),
            "'min_version' is missing at 'features.f'",
        ),
    ],
)
def test_bad_broker_registration_names_path_and_problem(data, problem):
    with pytest.raises(ZNodeDataError) as e:
        BrokerIdZNode.decode(7, data)
    assert "/brokers/ids/7" in str(e.value) and problem in str(e.value)


def test_topic_v3():
    golden = (
        b'{"removing_replicas":{},"partitions":{"0":[2,1,3],"1":[3,2,1],"2":[1,3,2]},'
        b'"topic_id":"' + TOPIC_ID.encode() + b'","adding_replicas":{},"version":3}'
    )
    assignment = TopicAssignment(decode_topic_id(TOPIC_ID), {0: (2, 1, 3), 1: (3, 2, 1), 2: (1, 3, 2)})
    assert TopicZNode.encode(assignment) == golden
    assert TopicZNode.decode("clicks", golden) == assignment


def test_topic_older_versions_and_reassignment_fields():
    v1 = b'{"version":1,"partitions":{"0":[1,2],"1":[2,1]}}'
    assert TopicZNode.decode("t", v1) == TopicAssignment(None, {0: (1, 2), 1: (2, 1)})
    v2 = b'{"version":2,"partitions":{"0":[1,2,3]},"adding_replicas":{"0":[3]},"removing_replicas":{"0":[1]}}'
    assert TopicZNode.decode("t", v2) == TopicAssignment(None, {0: (1, 2, 3)}, {0: (3,)}, {0: (1,)})
    # Kafka reads a topic node without data as a topic without partitions
    assert TopicZNode.decode("t", b"") == TopicAssignment(None, {})


@pytest.mark.parametrize(
    "data, problem",
    [
        (b'{"version":3,"partitions":{"x":[1]}}', "partition 'x' at 'partitions' is not a partition number"),
        (b'{"version":3,"partitions":{"0":[1,true]}}', "'0' at 'partitions' is not an integer: True"),
        (b'{"version":3,"partitions":{"0":[-1]}}', "out of range"),
        (b'{"version":3,"partitions":{"0":[1]},"topic_id":"nope"}', "'topic_id': 'nope' is not a base64 topic id"),
        (b'{"version":3,"partitions":[1]}', "expected a JSON object at 'partitions'"),
        (b"[]", "expected a JSON object"),
        (b'{"version":3', "not JSON"),
    ],
)
def test_bad_topic_names_path_and_problem(data, problem):
    with pytest.raises(ZNodeDataError) as e:
        TopicZNode.decode("clicks", data)
    assert "/brokers/topics/clicks" in str(e.value) and problem in str(e.value)


def test_partition_state():
    golden = b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2,3]}'
    state = LeaderIsrState(leader=1, leader_epoch=0, isr=(1, 2, 3), controller_epoch=1)
    assert TopicPartitionStateZNode.encode(state) == golden
    assert TopicPartitionStateZNode.decode("t", 0, golden) == state
    recovering = golden[:-1] + b',"leader_recovery_state":1}'
    assert TopicPartitionStateZNode.decode("t", 0, recovering).leader_recovery_state == 1
    assert TopicPartitionStateZNode.encode(TopicPartitionStateZNode.decode("t", 0, recovering)) == recovering
    no_leader = b'{"controller_epoch":4,"leader":-1,"version":1,"leader_epoch":9,"isr":[]}'
    assert TopicPartitionStateZNode.decode("t", 0, no_leader) == LeaderIsrState(-1, 9, (), 4)


def test_partition_state_errors_name_the_znode():
    with pytest.raises(ZNodeDataError) as e:
        TopicPartitionStateZNode.decode("clicks", 3, b'{"controller_epoch":1,"version":1,"leader_epoch":0,"isr":[1]}')
    assert str(e.value).startswith(
        "invalid data in znode /brokers/topics/clicks/partitions/3/state: 'leader' is missing"
    )
    with pytest.raises(ZNodeDataError, match="'leader_recovery_state' is out of range"):
        TopicPartitionStateZNode.decode(
            "t", 0, b'{"controller_epoch":1,"leader":1,"leader_epoch":0,"isr":[1],"leader_recovery_state":2}'
        )


def test_topic_config():
    golden = b'{"version":1,"config":{"retention.ms":"86400000","cleanup.policy":"compact"}}'
    configs = {"retention.ms": "86400000", "cleanup.policy": "compact"}
    assert ConfigEntityZNode.encode(configs) == golden
    assert ConfigEntityZNode.decode("topics", "t", golden) == configs
    assert ConfigEntityZNode.decode("topics", "t", b"") == {}
    assert ConfigEntityZNode.decode("topics", "t", b'{"version":1}') == {}
    with pytest.raises(ZNodeDataError, match=r"/config/topics/t: 'retention.ms' at 'config' is not a string"):
        ConfigEntityZNode.decode("topics", "t", b'{"version":1,"config":{"retention.ms":1000}}')


def test_a_key_from_the_data_is_quoted_on_one_line():
    # a key comes from the znode: its control characters must not break the message's line
    with pytest.raises(ZNodeDataError) as info:
        ConfigEntityZNode.decode("topics", "t", b'{"version":1,"config":{"a\\nb":null}}')
    assert "\n" not in str(info.value) and "'a\\nb' at 'config' is not a string" in str(info.value)


def test_config_change_notification_v2_and_v1():
    golden = b'{"version":2,"entity_path":"topics/clicks"}'
    assert ConfigEntityChangeNotificationSequenceZNode.encode("topics/clicks") == golden
    path = "/config/changes/config_change_0000000000"
    assert ConfigEntityChangeNotificationSequenceZNode.decode(path, golden) == "topics/clicks"
    v1 = b'{"version":1,"entity_type":"topics","entity_name":"clicks"}'
    assert ConfigEntityChangeNotificationSequenceZNode.decode(path, v1) == "topics/clicks"
    with pytest.raises(ZNodeDataError, match="unsupported version 3"):
        ConfigEntityChangeNotificationSequenceZNode.decode(path, b'{"version":3,"entity_path":"topics/x"}')


def test_partition_lists():
    golden = b'{"version":1,"partitions":[{"topic":"clicks","partition":0},{"topic":"clicks","partition":1}]}'
    partitions = {TopicPartition("clicks", 1), TopicPartition("clicks", 0)}
    for znode in (IsrChangeNotificationSequenceZNode, PreferredReplicaElectionZNode):
        assert znode.encode(partitions) == golden
    assert PreferredReplicaElectionZNode.decode(golden) == partitions
    assert (
        IsrChangeNotificationSequenceZNode.decode("/isr_change_notification/isr_change_0000000003", golden)
        == partitions
    )


def test_reassign_partitions():
    golden = b'{"version":1,"partitions":[{"topic":"clicks","partition":0,"replicas":[1,2,3]}]}'
    reassignment = {TopicPartition("clicks", 0): (1, 2, 3)}
    assert ReassignPartitionsZNode.encode(reassignment) == golden
    assert ReassignPartitionsZNode.decode(golden) == reassignment


def test_producer_id_block():
    golden = b'{"version":1,"broker":2,"block_start":"1000","block_end":"1999"}'
    block = ProducerIdBlock(2, 1000, 1999)
    assert ProducerIdBlockZNode.encode(block) == golden
    assert ProducerIdBlockZNode.decode(golden) == block and block.size == 1000
    with pytest.raises(ZNodeDataError, match="block_end 5 is before block_start 1000"):
        ProducerIdBlockZNode.decode(b'{"version":1,"broker":2,"block_start":"1000","block_end":"5"}')
    with pytest.raises(ZNodeDataError, match="out of range"):
        ProducerIdBlockZNode.decode(b'{"version":1,"broker":2,"block_start":"0","block_end":"9223372036854775808"}')


def test_feature_v2_as_kafka_writes_it_and_v1_and_disabled():
    golden = b'{"features":{"transaction.version":{"max_version_level":2}},"version":2,"status":1}'
    assert FeatureZNode.encode({"transaction.version": 2}) == golden
    assert FeatureZNode.decode(golden) == {"transaction.version": 2}
    # a level below 1 is not finalized: not written
    assert FeatureZNode.encode({"transaction.version": 0}) == b'{"features":{},"version":2,"status":1}'
    v1 = b'{"version":1,"status":1,"features":{"f":{"min_version_level":1,"max_version_level":3}}}'
    assert FeatureZNode.decode(v1) == {"f": 3}
    assert FeatureZNode.decode(b'{"version":2,"status":0,"features":{"f":{"max_version_level":3}}}') == {}


@pytest.mark.parametrize(
    "data, problem",
    [
        (b'{"version":3,"status":1,"features":{}}', "unsupported version 3"),
        (b'{"version":2,"status":2,"features":{}}', "unknown status 2"),
        (b'{"version":2,"status":1}', "'features' is missing"),
        (b'{"version":2,"status":1,"features":{"f":{"max_version_level":0}}}', "out of range"),
        (
            b'{"version":1,"status":1,"features":{"f":{"min_version_level":3,"max_version_level":2}}}',
            "min_version_level above max_version_level",
        ),
    ],
)
def test_bad_feature_znode_names_path_and_problem(data, problem):
    with pytest.raises(ZNodeDataError, match=problem) as e:
        FeatureZNode.decode(data)
    assert "/feature" in str(e.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------- round trips

names = st.text(st.characters(whitelist_categories=("L", "N"), whitelist_characters="._-"), min_size=1, max_size=20)
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
broker_ids = st.integers(0, 2**31 - 1)
replica_lists = st.lists(broker_ids, max_size=5).map(tuple)
partition_maps = st.dictionaries(st.integers(0, 2**31 - 1), replica_lists, max_size=5)
endpoints = st.builds(
    EndPoint,
    st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=12),
    st.text("abcdefghijklmnopqrstuvwxyz0123456789-%._:", max_size=20),
    st.integers(0, 65535),
    st.sampled_from(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]),
)


@st.composite
def registrations(draw):
    eps = draw(st.lists(endpoints, max_size=3, unique_by=lambda e: e.listener_name))
    features = draw(
        st.dictionaries(texts, st.tuples(st.integers(-32768, 32767), st.integers(-32768, 32767)), max_size=3)
    )
    return BrokerRegistration(
        draw(broker_ids),
        tuple(eps),
        draw(st.none() | texts),
        draw(st.integers(-1, 65535)),
        features,
        draw(st.integers(0, 2**63 - 1)),
        5,
    )


@given(registrations())
def test_broker_round_trip(reg):
    assert BrokerIdZNode.decode(reg.broker_id, BrokerIdZNode.encode(reg)) == reg


@given(st.builds(TopicAssignment, st.none() | st.uuids(), partition_maps, partition_maps, partition_maps))
def test_topic_round_trip(assignment):
    assert TopicZNode.decode("t", TopicZNode.encode(assignment)) == assignment


@given(
    st.builds(
        LeaderIsrState,
        st.integers(-1, 2**31 - 1),
        st.integers(0, 2**31 - 1),
        replica_lists,
        st.integers(0, 2**31 - 1),
        st.integers(0, 1),
    )
)
def test_partition_state_round_trip(state):
    assert TopicPartitionStateZNode.decode("t", 0, TopicPartitionStateZNode.encode(state)) == state


@given(st.builds(ControllerRegistration, broker_ids, st.integers(0, 2**63 - 1), st.integers(-1, 2**31 - 1)))
def test_controller_round_trip(reg):
    assert ControllerZNode.decode(ControllerZNode.encode(reg)) == reg


@given(st.dictionaries(texts, texts, max_size=5))
def test_config_round_trip(configs):
    assert ConfigEntityZNode.decode("topics", "t", ConfigEntityZNode.encode(configs)) == configs


@given(st.sets(st.builds(TopicPartition, names, st.integers(0, 2**31 - 1)), max_size=5))
def test_partition_list_round_trip(partitions):
    assert PreferredReplicaElectionZNode.decode(PreferredReplicaElectionZNode.encode(partitions)) == partitions


@given(broker_ids, st.integers(0, 2**62), st.integers(1, 2**20))
def test_producer_id_block_round_trip(broker, start, size):
    block = ProducerIdBlock(broker, start, start + size - 1)
    assert ProducerIdBlockZNode.decode(ProducerIdBlockZNode.encode(block)) == block


# ---------------------------------------------------------------- fuzzing

DECODERS = {
    "/cluster/id": ClusterIdZNode.decode,
    "/controller": ControllerZNode.decode,
    "/controller_epoch": ControllerEpochZNode.decode,
    "/brokers/ids/1": lambda d: BrokerIdZNode.decode(1, d),
    "/brokers/topics/t": lambda d: TopicZNode.decode("t", d),
    "/brokers/topics/t/partitions/0/state": lambda d: TopicPartitionStateZNode.decode("t", 0, d),
    "/config/topics/t": lambda d: ConfigEntityZNode.decode("topics", "t", d),
    "/config/changes/config_change_0000000001": lambda d: ConfigEntityChangeNotificationSequenceZNode.decode(
        "/config/changes/config_change_0000000001", d
    ),
    "/isr_change_notification/isr_change_0000000001": lambda d: IsrChangeNotificationSequenceZNode.decode(
        "/isr_change_notification/isr_change_0000000001", d
    ),
    "/admin/preferred_replica_election": PreferredReplicaElectionZNode.decode,
    "/admin/reassign_partitions": ReassignPartitionsZNode.decode,
    "/latest_producer_id_block": ProducerIdBlockZNode.decode,
    "/feature": FeatureZNode.decode,
}

GOLDEN = {
    "/cluster/id": b'{"version":"1","id":"abc"}',
    "/controller": b'{"version":2,"brokerid":1,"timestamp":"1","kraftControllerEpoch":-1}',
    "/controller_epoch": b"3",
    "/brokers/ids/1": BROKER_V5.replace(b'"features":{}', b'"features":{"f":{"min_version":1,"max_version":3}}'),
    "/brokers/topics/t": b'{"version":3,"partitions":{"0":[1]},"adding_replicas":{"0":[2]},"removing_replicas":{},'
    b'"topic_id":"' + TOPIC_ID.encode() + b'"}',
    "/brokers/topics/t/partitions/0/state": b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,'
    b'"isr":[1],"leader_recovery_state":1}',
    "/config/topics/t": b'{"version":1,"config":{"a":"b"}}',
    "/config/changes/config_change_0000000001": b'{"version":2,"entity_path":"topics/t"}',
    "/isr_change_notification/isr_change_0000000001": b'{"version":1,"partitions":[{"topic":"t","partition":0}]}',
    "/admin/preferred_replica_election": b'{"version":1,"partitions":[{"topic":"t","partition":0}]}',
    "/admin/reassign_partitions": b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]}]}',
    "/latest_producer_id_block": b'{"version":1,"broker":2,"block_start":"0","block_end":"999"}',
    "/feature": b'{"features":{"transaction.version":{"max_version_level":2}},"version":2,"status":1}',
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)


def decode_or_data_error(path, data):
    try:
        DECODERS[path](data)
    except ZNodeDataError as e:
        assert e.path.startswith(path.rsplit("/", 1)[0]) and path.split("/")[1] in str(e) and "\n" not in str(e)


def test_golden_fuzz_inputs_decode():
    for path, data in GOLDEN.items():
        DECODERS[path](data)


@settings(max_examples=300)
@given(st.sampled_from(sorted(DECODERS)), st.binary(max_size=200))
def test_fuzz_bytes(path, data):
    decode_or_data_error(path, data)


@settings(max_examples=300)
@given(st.sampled_from(sorted(DECODERS)), json_values)
def test_fuzz_json_values(path, value):
    decode_or_data_error(path, json.dumps(value).encode())


def _mutate(value, draw):
    """Replaces or deletes one member somewhere in a JSON document."""
    if isinstance(value, dict) and value:
        key = draw(st.sampled_from(sorted(value)))
        action = draw(st.sampled_from(["replace", "delete", "descend"]))
        out = dict(value)
        if action == "delete":
            del out[key]
        elif action == "replace":
            out[key] = draw(json_values)
        else:
            out[key] = _mutate(value[key], draw)
        return out
    if isinstance(value, list) and value:
        i = draw(st.integers(0, len(value) - 1))
        out = list(value)
        out[i] = _mutate(value[i], draw) if draw(st.booleans()) else draw(json_values)
        return out
    return draw(json_values)


@settings(max_examples=500)
@given(st.data())
def test_fuzz_mutated_golden_payloads(data):
    path = data.draw(st.sampled_from(sorted(p for p in GOLDEN if p != "/controller_epoch")))
    mutated = _mutate(json.loads(GOLDEN[path]), data.draw)
    decode_or_data_error(path, json.dumps(mutated).encode())
