"""The same raw request sequences to Apache Kafka 4.x and to kbroker, answers compared
field by field after normalisation (tests/apache_kafka/differential.py); accepted differences,
each with its reason, are in tests/apache_kafka/differences.txt.

Each scenario runs first against Kafka, then against kbroker, with the same topic names
(two separate clusters) and records with explicit timestamps, so offsets and timestamps
are comparable as they are.
"""

from __future__ import annotations

import time
import uuid

import pytest

from broker.protocol.messages.alter_configs import AlterConfigsRequest as AC
from broker.protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
from broker.protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription
from broker.protocol.messages.create_partitions import CreatePartitionsRequest as CP
from broker.protocol.messages.create_topics import CreateTopicsRequest as CT
from broker.protocol.messages.delete_groups import DeleteGroupsRequest
from broker.protocol.messages.delete_topics import DeleteTopicsRequest as DT
from broker.protocol.messages.describe_configs import DescribeConfigsRequest as DC
from broker.protocol.messages.describe_groups import DescribeGroupsRequest
from broker.protocol.messages.fetch import FetchRequest as F
from broker.protocol.messages.find_coordinator import FindCoordinatorRequest
from broker.protocol.messages.heartbeat import HeartbeatRequest
from broker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as IAC
from broker.protocol.messages.join_group import JoinGroupRequest as JG
from broker.protocol.messages.leave_group import LeaveGroupRequest as LG
from broker.protocol.messages.list_groups import ListGroupsRequest
from broker.protocol.messages.list_offsets import ListOffsetsRequest as LO
from broker.protocol.messages.metadata import MetadataRequest as M
from broker.protocol.messages.offset_commit import OffsetCommitRequest as OC
from broker.protocol.messages.offset_fetch import OffsetFetchRequest as OF
from broker.protocol.messages.produce import ProduceRequest as P
from broker.protocol.messages.sync_group import SyncGroupRequest as SG
from broker.server.handlers import supported_versions
from tests.apache_kafka.differential import Peer, common_versions, compare, plain
from tests.interop.helpers import batch, corrupt_crc
from tests.support.broker_proc import BrokerProcess
from tests.support.kafka_broker import DEFAULTS as KAFKA_DEFAULTS

pytestmark = pytest.mark.interop

TS = 1_795_000_000_000  # record timestamps: fixed, so both brokers answer the same
RETENTION = {"retention.ms": "-1"}  # ... and neither deletes them by time
COORDINATOR_LOAD_IN_PROGRESS = 14


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory):
    """kbroker set up as the Kafka fixture is (the keys kbroker knows of its server.properties)
    and with Kafka's node id (1), so ids that are not node ids never look like one."""
    from broker.config import BROKER_KEYS

    config = {k: v for k, v in KAFKA_DEFAULTS.items() if k in BROKER_KEYS}
    config["inter.broker.listener.name"] = "PLAINTEXT"  # as the Kafka fixture's server.properties
    with BrokerProcess(tmp_path_factory.mktemp("kbroker") / "data", config=config, broker_id=1) as b:
        yield b


@pytest.fixture(scope="module")
def peers(apache_kafka, kbroker):
    versions = common_versions(apache_kafka.bootstrap, kbroker.bootstrap)
    kafka, ours = Peer("kafka", apache_kafka.bootstrap, versions), Peer("kbroker", kbroker.bootstrap, versions)
    yield kafka, ours
    kafka.close()
    ours.close()


def run(scenario: str, peers, fn, *args):
    kafka, ours = peers
    kafka.members.clear()
    ours.members.clear()
    got_kafka = fn(kafka, *args)
    got_ours = fn(ours, *args)
    problems = compare(scenario, got_kafka, got_ours, kafka, ours)
    assert not problems, f"{scenario}: {len(problems)} difference(s) not in differences.txt:\n  " + "\n  ".join(
        problems
    )


# ---------------------------------------------------------------------- helpers


def create(peer: Peer, name: str, partitions: int = 1, configs: dict | None = None, validate_only=False):
    cfg = {**RETENTION, **(configs or {})}
    req = CT(
        topics=[
            CT.CreatableTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=1,
                configs=[CT.CreatableTopicConfig(name=k, value=v) for k, v in cfg.items()],
            )
        ],
        timeout_ms=30000,
        validate_only=validate_only,
    )
    resp = peer.request(req)
    if not validate_only:
        wait_for_topic(peer, name, partitions)
    return resp


def wait_for_topic(peer: Peer, name: str, partitions: int) -> None:
    """Until every partition has a leader in the metadata and that leader answers for it:
    Kafka's metadata can name a leader a moment before the partition leads (its first
    produce then got NOT_LEADER_OR_FOLLOWER on a loaded machine); ListOffsets goes where a
    produce goes."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t = peer.request(M(topics=[M.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)).topics[0]
        if t.error_code == 0 and len(t.partitions) == partitions and all(p.leader_id >= 0 for p in t.partitions):
            answer = list_offsets(peer, name, [(p, -1) for p in range(partitions)])
            if all(p.error_code == 0 for t in answer.topics for p in t.partitions):
                return
        time.sleep(0.1)
    raise AssertionError(f"{name} not ready on {peer.name}")


def produce(peer: Peer, topic: str, partition: int, records, acks: int = -1):
    req = P(
        acks=acks,
        timeout_ms=10000,
        topic_data=[
            P.TopicProduceData(
                name=topic, partition_data=[P.PartitionProduceData(index=partition, records=bytes(records))]
            )
        ],
    )
    if acks == 0:
        peer.send_no_response(req)
        return None
    return peer.request(req)


def values(n: int, prefix: str = "v") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def topic_id(peer: Peer, name: str):
    return (
        peer.request(M(topics=[M.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)).topics[0].topic_id
    )


def fetch(
    peer: Peer, topic: str, partition: int, offset: int, max_wait_ms: int = 0, isolation: int = 0, min_bytes: int = 1
):
    req = F(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=[],
        topics=[
            F.FetchTopic(
                topic=topic,
                topic_id=topic_id(peer, topic),
                partitions=[F.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)],
            )
        ],
    )
    return peer.request(req, timeout=max_wait_ms / 1000 + 30)


def list_offsets(peer: Peer, topic: str, spec: list[tuple[int, int]], isolation: int = 0):
    return peer.request(
        LO(
            replica_id=-1,
            isolation_level=isolation,
            topics=[
                LO.ListOffsetsTopic(
                    name=topic, partitions=[LO.ListOffsetsPartition(partition_index=p, timestamp=ts) for p, ts in spec]
                )
            ],
        )
    )


# ---------------------------------------------------------------------- ApiVersions


def test_api_versions_cover_what_kbroker_implements(peers):
    """Not a field-by-field comparison (Kafka implements many more APIs): every API kbroker
    advertises, Kafka advertises too, with kbroker's highest version within Kafka's range
    (a client picks the same version against either); and a request for an unknown
    ApiVersions version gets the same answer: UNSUPPORTED_VERSION with ApiVersions' range."""
    from broker.protocol import codec
    from tests.interop.helpers import RawConnection, frame, raw_header

    kafka, ours = peers
    theirs, advertised = kafka.conn.versions, ours.conn.versions  # from the connections' ApiVersions
    assert advertised == {k: (lo, hi) for k, lo, hi in supported_versions()}
    # the ZooKeeper-era inter-broker APIs (LeaderAndIsr, StopReplica, UpdateMetadata,
    # ControlledShutdown, AlterPartition), which Kafka 3.x brokers advertised too: Kafka
    # 4.x's brokers, KRaft only, no longer take them
    zk_era = {4, 5, 6, 7, 56}
    outside = {
        k: (v, theirs.get(k))
        for k, v in advertised.items()
        if k not in zk_era and (k not in theirs or not theirs[k][0] <= v[1] <= theirs[k][1])
    }
    assert outside == {}, "kbroker's highest versions outside Kafka 4.x's ranges"

    answers = []
    for peer in (kafka, ours):
        with RawConnection(peer.port) as raw:
            raw.send(frame(raw_header(18, 127, 7) + b"\x00\x00\x00"))
            _, r = codec.decode_response(18, 0, raw.read_frame())
            answers.append((r.error_code, [(k.min_version, k.max_version) for k in r.api_keys if k.api_key == 18]))
    assert answers[0][0] == answers[1][0] == 35
    assert answers[0][1] == [theirs[18]] and answers[1][1] == [advertised[18]]


# ---------------------------------------------------------------------- Metadata


def metadata_sequence(peer: Peer, topic: str):
    create(peer, topic, 3)
    out = [("known", peer.request(M(topics=[M.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)))]
    out.append(
        (
            "unknown",
            peer.request(M(topics=[M.MetadataRequestTopic(name=topic + "-missing")], allow_auto_topic_creation=False)),
        )
    )
    out.append(
        (
            "invalid_name",
            peer.request(M(topics=[M.MetadataRequestTopic(name="bad name!")], allow_auto_topic_creation=True)),
        )
    )
    auto = topic + "-auto"
    out.append(
        ("auto_create", peer.request(M(topics=[M.MetadataRequestTopic(name=auto)], allow_auto_topic_creation=True)))
    )
    wait_for_topic(peer, auto, 1)
    out.append(
        ("auto_created", peer.request(M(topics=[M.MetadataRequestTopic(name=auto)], allow_auto_topic_creation=False)))
    )
    out.append(
        (
            "by_id",
            peer.request(
                M(
                    topics=[M.MetadataRequestTopic(name=None, topic_id=topic_id(peer, topic))],
                    allow_auto_topic_creation=False,
                )
            ),
        )
    )
    out.append(
        (
            "unknown_id",
            peer.request(
                M(topics=[M.MetadataRequestTopic(name=None, topic_id=uuid.uuid4())], allow_auto_topic_creation=False)
            ),
        )
    )
    out.append(("no_topics", peer.request(M(topics=[], allow_auto_topic_creation=False))))
    return out


def test_metadata(peers, topic):
    run("metadata", peers, metadata_sequence, topic)


# ---------------------------------------------------------------------- Produce


def produce_sequence(peer: Peer, topic: str):
    create(peer, topic, 2, {"max.message.bytes": "2000"})
    out = []
    for acks in (1, -1):
        out.append((f"acks_{acks}", produce(peer, topic, 0, batch(values(5), timestamp=TS), acks)))
    produce(peer, topic, 0, batch(values(3, "z"), timestamp=TS), acks=0)
    out.append(("after_acks_0", list_offsets(peer, topic, [(0, -1)])))
    out.append(("corrupt_crc", produce(peer, topic, 0, corrupt_crc(batch(values(2), timestamp=TS)))))
    out.append(("oversize", produce(peer, topic, 1, batch([b"x" * 3000], timestamp=TS))))
    out.append(("unknown_partition", produce(peer, topic, 7, batch(values(1), timestamp=TS))))
    out.append(("unknown_topic", produce(peer, topic + "-missing", 0, batch(values(1), timestamp=TS))))
    out.append(("invalid_acks", produce(peer, topic, 0, batch(values(1), timestamp=TS), acks=2)))
    out.append(("compressed", produce(peer, topic, 1, batch(values(20), timestamp=TS, compression="zstd"))))
    ends = list_offsets(peer, topic, [(0, -1), (1, -1)])
    for t in ends.topics:  # Kafka 4.4 answers a topic's partitions in no set order
        t.partitions.sort(key=lambda p: p.partition_index)
    out.append(("end_offsets", ends))
    return out


def test_produce(peers, topic):
    run("produce", peers, produce_sequence, topic)


# ---------------------------------------------------------------------- Fetch


def fetch_sequence(peer: Peer, topic: str):
    create(peer, topic, 1)
    produce(peer, topic, 0, batch(values(10), keys=values(10, "k"), timestamp=TS))
    produce(peer, topic, 0, batch(values(5, "g"), timestamp=TS + 1, compression="gzip"))
    out = [("from_start", fetch(peer, topic, 0, 0))]
    out.append(("middle", fetch(peer, topic, 0, 12)))
    out.append(("at_end", fetch(peer, topic, 0, 15)))
    out.append(("out_of_range", fetch(peer, topic, 0, 100)))
    out.append(("long_poll_empty", fetch(peer, topic, 0, 15, max_wait_ms=300)))
    out.append(("read_committed", fetch(peer, topic, 0, 0, isolation=1)))
    unknown = F(
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
                topic=topic + "-missing",
                topic_id=uuid.uuid4(),
                partitions=[F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024)],
            )
        ],
    )
    out.append(("unknown_topic_id", peer.request(unknown)))
    return out


def test_fetch(peers, topic):
    run("fetch", peers, fetch_sequence, topic)


# ---------------------------------------------------------------------- ListOffsets


def list_offsets_sequence(peer: Peer, topic: str):
    create(peer, topic, 2)
    for i in range(3):
        produce(peer, topic, 0, batch(values(4, f"b{i}-"), timestamp=TS + 1000 * i))
    specs = [
        (0, -2),
        (0, -1),
        (0, -3),
        (0, TS),
        (0, TS + 500),
        (0, TS + 1000),
        (0, TS + 99999),
        (1, -2),
        (1, -1),
        (1, -3),
        (1, TS),
        (5, -1),
        # earliest-local (KIP-405): the log start of a log without tiered storage
        (0, -4),
        (1, -4),
        (0, -5),
        (1, -5),
        (0, -6),
        (1, -6),
    ]
    out = [(f"spec_{p}_{ts}", list_offsets(peer, topic, [(p, ts)])) for p, ts in specs]
    out.append(("read_committed_latest", list_offsets(peer, topic, [(0, -1)], isolation=1)))
    out.append(("read_committed_earliest_local", list_offsets(peer, topic, [(1, -4)], isolation=1)))
    return out


def test_list_offsets(peers, topic):
    run("list_offsets", peers, list_offsets_sequence, topic)


# ---------------------------------------------------------------------- the group cycle


def find_coordinator(peer: Peer, group: str):
    """FindCoordinator until the coordinator is there (Kafka creates __consumer_offsets on
    the first request and answers COORDINATOR_NOT_AVAILABLE meanwhile, as clients expect)."""
    deadline = time.monotonic() + 30
    while True:
        r = peer.request(FindCoordinatorRequest(key=group, key_type=0, coordinator_keys=[group]))
        if r.coordinators[0].error_code == 0 or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def group_sequence(peer: Peer, topic: str):
    create(peer, topic, 2)
    group = topic + "-g"
    out = [("find_coordinator", find_coordinator(peer, group))]
    subscription = ConsumerProtocolSubscription(topics=[topic]).encode_versioned(1)
    assignment = ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=[0, 1])]
    ).encode_versioned(1)
    protocols = [JG.JoinGroupRequestProtocol(name="range", metadata=subscription)]

    def join(member_id: str):
        """JoinGroup, again while the coordinator loads its partition (as clients retry)."""
        deadline = time.monotonic() + 30
        while True:
            r = peer.request(
                JG(
                    group_id=group,
                    session_timeout_ms=10000,
                    rebalance_timeout_ms=10000,
                    member_id=member_id,
                    protocol_type="consumer",
                    protocols=protocols,
                ),
                timeout=40,
            )
            if r.error_code != COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                return r
            time.sleep(0.2)

    first = join("")
    out.append(("join_member_id_required", first))
    joined = join(first.member_id)
    out.append(("join", joined))
    member, gen = joined.member_id, joined.generation_id
    out.append(
        (
            "sync",
            peer.request(
                SG(
                    group_id=group,
                    generation_id=gen,
                    member_id=member,
                    protocol_type="consumer",
                    protocol_name="range",
                    assignments=[SG.SyncGroupRequestAssignment(member_id=member, assignment=assignment)],
                )
            ),
        )
    )
    out.append(("heartbeat", peer.request(HeartbeatRequest(group_id=group, generation_id=gen, member_id=member))))
    out.append(
        (
            "heartbeat_bad_generation",
            peer.request(HeartbeatRequest(group_id=group, generation_id=gen + 5, member_id=member)),
        )
    )
    out.append(
        (
            "commit",
            peer.request(
                OC(
                    group_id=group,
                    generation_id_or_member_epoch=gen,
                    member_id=member,
                    topics=[
                        OC.OffsetCommitRequestTopic(
                            name=topic,
                            partitions=[
                                OC.OffsetCommitRequestPartition(
                                    partition_index=p, committed_offset=7 + p, committed_metadata=f"m{p}"
                                )
                                for p in (0, 1)
                            ],
                        )
                    ],
                )
            ),
        )
    )
    out.append(
        (
            "commit_unknown_member",
            peer.request(
                OC(
                    group_id=group,
                    generation_id_or_member_epoch=gen,
                    member_id="nobody",
                    topics=[
                        OC.OffsetCommitRequestTopic(
                            name=topic,
                            partitions=[OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)],
                        )
                    ],
                )
            ),
        )
    )
    out.append(
        (
            "fetch_offsets",
            peer.request(
                OF(
                    group_id=group,
                    topics=[OF.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1, 5])],
                    groups=[
                        OF.OffsetFetchRequestGroup(
                            group_id=group,
                            topics=[OF.OffsetFetchRequestTopics(name=topic, partition_indexes=[0, 1, 5])],
                        )
                    ],
                )
            ),
        )
    )
    out.append(("describe_stable", peer.request(DescribeGroupsRequest(groups=[group]))))
    listed = peer.request(ListGroupsRequest(states_filter=[]))
    listed.groups = [g for g in listed.groups if g.group_id == group]
    out.append(("list", listed))
    out.append(
        ("leave", peer.request(LG(group_id=group, member_id=member, members=[LG.MemberIdentity(member_id=member)])))
    )
    out.append(
        ("heartbeat_after_leave", peer.request(HeartbeatRequest(group_id=group, generation_id=gen, member_id=member)))
    )
    out.append(("describe_empty", peer.request(DescribeGroupsRequest(groups=[group]))))
    deleted = peer.request(DeleteGroupsRequest(groups_names=[group, group + "-missing"]))
    deleted.results.sort(key=lambda r: r.group_id)  # Kafka answers in no set order
    out.append(("delete", deleted))
    out.append(("describe_deleted", peer.request(DescribeGroupsRequest(groups=[group]))))
    return out


def test_group_cycle(peers, topic):
    run("groups", peers, group_sequence, topic)


# ---------------------------------------------------------------------- topic admin validation


def topic_admin_sequence(peer: Peer, topic: str):
    out = [("create", shared_configs(create(peer, topic, 2, {"cleanup.policy": "compact"})))]
    out.append(("validate_only", shared_configs(create(peer, topic + "-v", 3, validate_only=True))))

    def bad(name, partitions, rf, configs=None):
        return peer.request(
            CT(
                topics=[
                    CT.CreatableTopic(
                        name=name,
                        num_partitions=partitions,
                        replication_factor=rf,
                        configs=[CT.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
                    )
                ],
                timeout_ms=30000,
            )
        )

    out.append(("exists", bad(topic, 1, 1)))
    out.append(("zero_partitions", bad(topic + "-z", 0, 1)))
    out.append(("replication_3", bad(topic + "-r", 1, 3)))
    out.append(("unknown_config", bad(topic + "-c", 1, 1, {"no.such.config": "1"})))
    out.append(("bad_config_value", bad(topic + "-c", 1, 1, {"retention.ms": "soon"})))
    out.append(("invalid_name", bad("bad name!", 1, 1)))
    out.append(("name_too_long", bad("x" * 250, 1, 1)))
    out.append(
        (
            "duplicate_in_request",
            peer.request(
                CT(
                    topics=[
                        CT.CreatableTopic(name=topic + "-d", num_partitions=1, replication_factor=1),
                        CT.CreatableTopic(name=topic + "-d", num_partitions=1, replication_factor=1),
                    ],
                    timeout_ms=30000,
                )
            ),
        )
    )

    def partitions(name, count, validate_only=False):
        return peer.request(
            CP(
                topics=[CP.CreatePartitionsTopic(name=name, count=count, assignments=None)],
                timeout_ms=30000,
                validate_only=validate_only,
            )
        )

    out.append(("partitions_validate_only", partitions(topic, 4, True)))
    out.append(("partitions_same", partitions(topic, 2)))
    out.append(("partitions_fewer", partitions(topic, 1)))
    out.append(("partitions_unknown", partitions(topic + "-missing", 3)))
    out.append(("partitions_increase", partitions(topic, 3)))
    out.append(
        (
            "delete_unknown",
            peer.request(
                DT(
                    topic_names=[topic + "-missing"],
                    topics=[DT.DeleteTopicState(name=topic + "-missing")],
                    timeout_ms=30000,
                )
            ),
        )
    )
    out.append(
        ("delete", peer.request(DT(topic_names=[topic], topics=[DT.DeleteTopicState(name=topic)], timeout_ms=30000)))
    )
    return out


def shared_configs(resp) -> dict:
    """CreateTopics answers every config of the new topic: only kbroker's are compared, by name."""
    from broker.config import TOPIC_KEYS

    out = plain(resp)
    for t in out["topics"]:
        if t["configs"]:
            t["configs"] = {c["name"]: c for c in t["configs"] if c["name"] in TOPIC_KEYS}
    return out


def test_create_delete_topics_and_partitions_validation(peers, topic):
    run("topic_admin", peers, topic_admin_sequence, topic)


# ---------------------------------------------------------------------- DescribeConfigs of defaults


def describe_configs_sequence(peer: Peer, topic: str):
    create(peer, topic, 1, {})

    def describe(resource_type, name, keys=None):
        return peer.request(
            DC(
                resources=[
                    DC.DescribeConfigsResource(resource_type=resource_type, resource_name=name, configuration_keys=keys)
                ],
                include_synonyms=True,
                include_documentation=False,
            )
        )

    return [
        ("topic", by_name(describe(2, topic))),
        ("topic_keys", by_name(describe(2, topic, ["segment.bytes", "cleanup.policy"]))),
        ("unknown_topic", by_name(describe(2, topic + "-missing"))),
        ("broker", by_name(describe(4, str(peer.node_id)), broker=True)),
    ]


def by_name(resp, broker: bool = False) -> dict:
    """The answer as plain data with each result's configs keyed by name, only the keys
    kbroker implements (Kafka has many more: tiered storage, quotas, KRaft ...; that
    kbroker's names all exist in Kafka is test_config_names_kbroker_implements_exist_in_kafka)."""
    from broker.config import BROKER_KEYS, TOPIC_KEYS

    keys = set(BROKER_KEYS) - ZOOKEEPER_KEYS if broker else set(TOPIC_KEYS)
    out = plain(resp)
    for r in out["results"]:
        r["configs"] = {c["name"]: c for c in r["configs"] if c["name"] in keys}
    return out


def test_describe_configs_of_defaults(peers, topic):
    run("describe_configs", peers, describe_configs_sequence, topic)


# ---------------------------------------------------------------------- group configs


def group_configs_sequence(peer: Peer, group: str):
    """Kafka 4.4's group configs (GROUP resources): a group's configs described before and
    after they are set (with synonyms and documentation), bad values refused, one
    removed, the set replaced by the legacy AlterConfigs."""

    def describe(name, keys=None):
        r = peer.request(
            DC(
                resources=[DC.DescribeConfigsResource(resource_type=32, resource_name=name, configuration_keys=keys)],
                include_synonyms=True,
                include_documentation=True,
            )
        )
        out = plain(r)
        for res in out["results"]:
            res["configs"] = {c["name"]: c for c in res["configs"]}  # Kafka's order is a hash map's
        return out

    def alter(*ops, name=group, validate_only=False):
        return peer.request(
            IAC(
                resources=[
                    IAC.AlterConfigsResource(
                        resource_type=32,
                        resource_name=name,
                        configs=[IAC.AlterableConfig(name=n, config_operation=o, value=v) for n, o, v in ops],
                    )
                ],
                validate_only=validate_only,
            )
        )

    out = [("fresh", describe(group)), ("some_keys", describe(group, ["share.auto.offset.reset", "nope"]))]
    out.append(("empty_name", describe("")))
    out.append(("set", alter(("consumer.session.timeout.ms", 0, "50000"), ("share.auto.offset.reset", 0, "earliest"))))
    out.append(("after_set", describe(group)))
    for i, ops in enumerate(
        [
            [("consumer.session.timeout.ms", 0, "1000")],
            [("consumer.heartbeat.interval.ms", 0, "20000")],
            [("nope", 0, "1")],
            [("share.auto.offset.reset", 0, "bogus")],
            [("share.isolation.level", 0, "x")],
            [("consumer.session.timeout.ms", 0, "abc")],
            [("share.record.lock.duration.ms", 0, "500")],
            [("share.delivery.count.limit", 0, "11")],
            [("consumer.session.timeout.ms", 2, "5")],
            [("consumer.session.timeout.ms", 0, None)],
            [("consumer.session.timeout.ms", 1, None), ("consumer.session.timeout.ms", 0, "50000")],
            [("errors.deadletterqueue.topic.name", 0, "__x")],
            [("streams.num.standby.replicas", 0, "3")],
            [("consumer.heartbeat.interval.ms", 0, "15000"), ("consumer.session.timeout.ms", 0, "46000")],
            [("share.partition.max.record.locks", 0, "5000")],
        ]
    ):
        out.append((f"refused_{i}", alter(*ops)))
    out.append(("validate_only", alter(("share.delivery.count.limit", 0, "3"), validate_only=True)))
    out.append(("by_duration", alter(("share.auto.offset.reset", 0, "by_duration:PT1H"))))
    out.append(("internal", alter(("consumer.assignor.offload.enable", 0, "false"))))
    out.append(("default_resource", alter(("consumer.session.timeout.ms", 0, "50000"), name="")))
    out.append(("delete", alter(("share.auto.offset.reset", 1, None))))
    out.append(("after_delete", describe(group)))
    legacy = AC(
        resources=[
            AC.AlterConfigsResource(
                resource_type=32,
                resource_name=group,
                configs=[AC.AlterableConfig(name="share.delivery.count.limit", value="3")],
            )
        ],
        validate_only=False,
    )
    out.append(("legacy", peer.request(legacy)))
    out.append(("after_legacy", describe(group)))
    return out


def test_group_configs(peers, topic):
    run("group_configs", peers, group_configs_sequence, topic)


def test_config_names_kbroker_implements_exist_in_kafka(peers, topic):
    """Every topic and broker config kbroker accepts is one Kafka describes (same spelling)."""
    from broker.config import BROKER_KEYS, TOPIC_KEYS

    kafka, _ = peers
    create(kafka, topic, 1)
    names = {}
    for rtype, name in ((2, topic), (4, str(kafka.node_id))):
        r = kafka.request(
            DC(resources=[DC.DescribeConfigsResource(resource_type=rtype, resource_name=name, configuration_keys=None)])
        )
        names[rtype] = {c.name for c in r.results[0].configs}
    assert set(TOPIC_KEYS) - names[2] == CONFLUENT_TOPIC_KEYS
    assert set(BROKER_KEYS) - names[4] == ZOOKEEPER_KEYS | AUTHORIZER_KEYS | OWN_KEYS | INTERNAL_KEYS | DROPPED_KEYS


# Confluent Server's topic configs of schema validation on produce (docs/schema-registry.md):
# Apache Kafka has no registry to check records against (differences.txt says so)
CONFLUENT_TOPIC_KEYS = {
    "confluent.key.schema.validation",
    "confluent.value.schema.validation",
    "confluent.key.subject.name.strategy",
    "confluent.value.subject.name.strategy",
}

# the ACL authorizer's settings: Kafka's authorizer reads them, its broker configuration
# does not describe them (kbroker's DescribeConfigs leaves them out too)
AUTHORIZER_KEYS = {"super.users", "allow.everyone.if.no.acl.found"}

# kbroker's own settings, where Kafka uses log4j's file and JMX, or a finalized feature
# (transaction.version), the blocks it allocates ahead of its segments' appends, the
# mode of its log dirs, the metrics listener's web config, the bounds of what clients
# that authenticate late or wait long can hold, and its schema registry
# (differences.txt says so for DescribeConfigs)
OWN_KEYS = {
    "metrics.listener",
    "metrics.listener.web.config.file",
    "log.format",
    "log.file",
    "log.file.max.bytes",
    "log.file.backup.count",
    "log.state.change.file",
    "log.request.api",
    "transaction.version",
    "log.segment.allocate.ahead.bytes",
    "log.dirs.mode",
    "connections.max.unauthenticated.ms",
    "max.connections.unauthenticated",
    "queued.max.request.bytes.per.connection",
    "fetch.wait.max.ms",
    "schema.registry.listener",
    "schema.registry.advertised.listener",
    "schema.registry.topic",
    "schema.registry.topic.replication.factor",
    "schema.registry.authentication.method",
    "schema.registry.max.request.bytes",
    "schema.registry.request.timeout.ms",
}

# keys Kafka 4.4 defines as internal: it does not describe them (nor does kbroker)
INTERNAL_KEYS = {"share.coordinator.state.topic.prune.interval.ms"}

# keys of earlier Kafka 4.x releases that Kafka 4.4 no longer has: group.share.enable switched
# share groups on until 4.2 made them generally available (the share.version feature since)
DROPPED_KEYS = {"group.share.enable"}

# kbroker's cluster mode runs on ZooKeeper (Kafka 3.x's keys, with the ZooKeeper-era
# controller's); Kafka 4.x has KRaft only and dropped them
ZOOKEEPER_KEYS = {
    "zookeeper.connect",
    "zookeeper.session.timeout.ms",
    "zookeeper.connection.timeout.ms",
    "controlled.shutdown.max.retries",
    "controlled.shutdown.retry.backoff.ms",
    "leader.imbalance.per.broker.percentage",
}
