"""Cluster view for the client: bootstrap, metadata, leaders, one connection per broker,
and the admin operations (topics, configs, offsets) the CLI and the tests use."""

from __future__ import annotations

import random
import time

from broker.addresses import parse_bootstrap
from broker.client.connection import BrokerConnection, ClientError
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.alter_partition_reassignments import AlterPartitionReassignmentsRequest
from broker.protocol.messages.create_partitions import CreatePartitionsRequest
from broker.protocol.messages.create_topics import CreateTopicsRequest
from broker.protocol.messages.delete_records import DeleteRecordsRequest
from broker.protocol.messages.delete_topics import DeleteTopicsRequest
from broker.protocol.messages.describe_cluster import DescribeClusterRequest
from broker.protocol.messages.describe_configs import DescribeConfigsRequest
from broker.protocol.messages.elect_leaders import ElectLeadersRequest
from broker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from broker.protocol.messages.list_offsets import ListOffsetsRequest
from broker.protocol.messages.list_partition_reassignments import ListPartitionReassignmentsRequest
from broker.protocol.messages.metadata import MetadataRequest

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4


def check(code: int, what: str = "", message: str | None = None) -> None:
    if code:
        raise KafkaProtocolError(code, f"{what}: {message}" if message else (what or None))


class PartitionMeta:
    __slots__ = ("partition", "leader", "leader_epoch", "replicas", "isr", "error_code")

    def __init__(self, p):
        self.partition = p.partition_index
        self.leader = p.leader_id
        self.leader_epoch = p.leader_epoch
        self.replicas = list(p.replica_nodes)
        self.isr = list(p.isr_nodes)
        self.error_code = p.error_code


class TopicMeta:
    __slots__ = ("name", "topic_id", "internal", "partitions", "error_code")

    def __init__(self, t):
        self.name = t.name
        self.topic_id = t.topic_id
        self.internal = t.is_internal
        self.error_code = t.error_code
        self.partitions = {p.partition_index: PartitionMeta(p) for p in t.partitions}


class Cluster:
    def __init__(self, bootstrap: str, *, client_id: str = "kbroker-client", timeout: float = 30.0, security=None):
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.timeout = timeout
        self.security = security  # a ClientSecurity (TLS, SASL) for every connection
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicMeta] = {}
        self.controller_id = -1
        self.cluster_id: str | None = None
        self._conns: dict[int, BrokerConnection] = {}
        self._any: BrokerConnection | None = None

    # ------------------------------------------------------------------ connections

    def any_connection(self) -> BrokerConnection:
        """A connection for metadata and admin requests: to a bootstrap server, starting at
        a random one as Kafka's clients do, else to any broker the last metadata listed (so
        a client whose bootstrap servers died still finds the cluster)."""
        if self._any is not None:
            return self._any
        errors = []
        first = random.randrange(len(self.bootstrap))
        candidates = self.bootstrap[first:] + self.bootstrap[:first]
        candidates += [addr for addr in self.brokers.values() if addr not in candidates]
        for host, port in candidates:
            try:
                self._any = BrokerConnection(
                    host, port, client_id=self.client_id, timeout=self.timeout, security=self.security
                )
                return self._any
            except ClientError as exc:
                errors.append(str(exc))
        raise ClientError("; ".join(errors))

    def connection(self, broker_id: int) -> BrokerConnection:
        conn = self._conns.get(broker_id)
        if conn is None or conn.closed:
            if broker_id not in self.brokers:
                self.refresh()
            if broker_id not in self.brokers:
                raise ClientError(f"unknown broker {broker_id}")
            host, port = self.brokers[broker_id]
            conn = BrokerConnection(host, port, client_id=self.client_id, timeout=self.timeout, security=self.security)
            self._conns[broker_id] = conn
        return conn

    def drop_connection(self, broker_id: int) -> None:
        conn = self._conns.pop(broker_id, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        if self._any is not None:
            self._any.close()
            self._any = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ metadata

    def refresh(self, topics: list[str] | None = None, allow_auto_create: bool = False) -> dict[str, TopicMeta]:
        req = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=allow_auto_create,
        )
        try:
            resp = self.any_connection().request(req)
        except ClientError:
            if self._any is not None:
                self._any.close()
                self._any = None
            resp = self.any_connection().request(req)
        self.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        self.controller_id = resp.controller_id
        self.cluster_id = resp.cluster_id
        out = {}
        for t in resp.topics:
            meta = TopicMeta(t)
            out[t.name] = meta
            if t.error_code == 0:
                self.topics[t.name] = meta
            else:
                self.topics.pop(t.name, None)
        return out

    def topic(self, name: str, wait_s: float = 0.0, allow_auto_create: bool = False) -> TopicMeta:
        """Metadata of one topic; KafkaProtocolError (UNKNOWN_TOPIC_OR_PARTITION ...).
        allow_auto_create lets the broker create it (auto.create.topics.enable), as
        Kafka's producers do. Within wait_s, a topic without leaders yet and a topic the
        broker asked does not know yet are waited for, as Kafka's clients wait for a
        topic's metadata: a topic just created is known to the other brokers of a cluster
        a moment after its creation is acknowledged."""
        deadline = time.monotonic() + wait_s
        while True:
            meta = self.refresh([name], allow_auto_create).get(name)
            code = meta.error_code if meta is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if meta is not None and code == 0 and all(p.leader >= 0 for p in meta.partitions.values()):
                return meta
            if time.monotonic() >= deadline or code not in (
                ErrorCode.LEADER_NOT_AVAILABLE,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ):
                check(code, f"topic {name}")
                assert meta is not None  # check() raised for a missing topic
                return meta
            time.sleep(0.1)

    def leader_connection(self, topic: str, partition: int) -> BrokerConnection:
        meta = self.topics.get(topic) or self.topic(topic)
        p = meta.partitions.get(partition)
        if p is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition}")
        if p.leader < 0:
            raise KafkaProtocolError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition}")
        return self.connection(p.leader)

    def controller(self) -> BrokerConnection:
        if self.controller_id < 0:
            self.refresh([])
        if self.controller_id < 0:
            return self.any_connection()
        return self.connection(self.controller_id)

    # ------------------------------------------------------------------ admin

    def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        validate_only: bool = False,
    ) -> None:
        C = CreateTopicsRequest
        req = C(
            topics=[
                C.CreatableTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=replication_factor,
                    assignments=[],
                    configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
                )
            ],
            timeout_ms=int(self.timeout * 1000),
            validate_only=validate_only,
        )
        resp = self.controller().request(req)
        r = resp.topics[0]
        check(r.error_code, f"create topic {name}", r.error_message)

    def delete_topic(self, name: str) -> None:
        conn = self.controller()
        version = conn.version_for(DeleteTopicsRequest.API_KEY)
        if version >= 6:
            req = DeleteTopicsRequest(
                topics=[DeleteTopicsRequest.DeleteTopicState(name=name)], timeout_ms=int(self.timeout * 1000)
            )
        else:
            req = DeleteTopicsRequest(topic_names=[name], timeout_ms=int(self.timeout * 1000))
        r = conn.request(req, version).responses[0]
        check(r.error_code, f"delete topic {name}", r.error_message)

    def create_partitions(self, name: str, count: int) -> None:
        C = CreatePartitionsRequest
        req = C(
            topics=[C.CreatePartitionsTopic(name=name, count=count, assignments=None)],
            timeout_ms=int(self.timeout * 1000),
            validate_only=False,
        )
        r = self.controller().request(req).results[0]
        check(r.error_code, f"create partitions of {name}", r.error_message)

    def describe_cluster(self):
        """DescribeCluster: cluster id, controller, brokers with racks."""
        resp = self.any_connection().request(
            DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1)
        )
        check(resp.error_code, "describe cluster", resp.error_message)
        return resp

    def elect_leaders(
        self, election_type: str, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """ElectLeaders ('preferred' or 'unclean') on the controller; partitions None: all.
        Returns {(topic, partition): (error code, message)}."""
        E = ElectLeadersRequest
        wanted = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(p)
            wanted = [E.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()]
        req = E(
            election_type={"preferred": 0, "unclean": 1}[election_type],
            topic_partitions=wanted,
            timeout_ms=int(self.timeout * 1000),
        )
        self.refresh([])
        resp = self.controller().request(req)
        check(resp.error_code, "elect leaders")
        return {
            (r.topic, p.partition_id): (p.error_code, p.error_message)
            for r in resp.replica_election_results
            for p in r.partition_result
        }

    def _to_controller(self, req, what: str):
        """A request only the active controller answers: sent again, to the controller the
        metadata names afresh, while the answer is NOT_CONTROLLER (a controller moving)."""
        deadline = time.monotonic() + self.timeout
        while True:
            self.refresh([])
            resp = self.controller().request(req)
            if resp.error_code != ErrorCode.NOT_CONTROLLER or time.monotonic() > deadline:
                check(resp.error_code, what, getattr(resp, "error_message", None))
                return resp
            time.sleep(0.2)

    def alter_partition_reassignments(
        self, targets: dict[tuple[str, int], list[int] | None]
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """AlterPartitionReassignments (KIP-455) on the controller: {(topic, partition):
        target replicas, or None to cancel} -> {(topic, partition): (error code, message)}."""
        A = AlterPartitionReassignmentsRequest
        by_topic: dict[str, list] = {}
        for (t, p), replicas in targets.items():
            by_topic.setdefault(t, []).append(
                A.ReassignablePartition(partition_index=p, replicas=None if replicas is None else list(replicas))
            )
        req = A(
            timeout_ms=int(self.timeout * 1000),
            topics=[A.ReassignableTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )
        resp = self._to_controller(req, "alter partition reassignments")
        return {
            (t.name, p.partition_index): (p.error_code, p.error_message) for t in resp.responses for p in t.partitions
        }

    def list_partition_reassignments(
        self, partitions: list[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        """ListPartitionReassignments on the controller: {(topic, partition): (replicas,
        adding, removing)} of the partitions being reassigned (of `partitions`, or all)."""
        L = ListPartitionReassignmentsRequest
        wanted = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(p)
            wanted = [L.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
        resp = self._to_controller(
            L(timeout_ms=int(self.timeout * 1000), topics=wanted), "list partition reassignments"
        )
        return {
            (t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in resp.topics
            for p in t.partitions
        }

    def describe_configs(self, resource_type: int, name: str) -> list:
        D = DescribeConfigsRequest
        req = D(
            resources=[
                D.DescribeConfigsResource(resource_type=resource_type, resource_name=name, configuration_keys=None)
            ],
            include_synonyms=False,
            include_documentation=False,
        )
        conn = self.controller() if resource_type == RESOURCE_TOPIC else self.any_connection()
        r = conn.request(req).results[0]
        check(r.error_code, f"describe configs of {name}", r.error_message)
        return r.configs

    def alter_topic_configs(
        self, name: str, set_: dict[str, str] | None = None, delete: list[str] | None = None
    ) -> None:
        I = IncrementalAlterConfigsRequest
        ops = [I.AlterableConfig(name=k, config_operation=0, value=v) for k, v in (set_ or {}).items()]
        ops += [I.AlterableConfig(name=k, config_operation=1, value=None) for k in (delete or [])]
        req = I(
            resources=[I.AlterConfigsResource(resource_type=RESOURCE_TOPIC, resource_name=name, configs=ops)],
            validate_only=False,
        )
        r = self.controller().request(req).responses[0]
        check(r.error_code, f"alter configs of {name}", r.error_message)

    def alter_broker_configs(
        self, broker_id: int | None, set_: dict[str, str] | None = None, delete: list[str] | None = None
    ) -> None:
        """IncrementalAlterConfigs on a broker's dynamic configs (sent to that broker, as
        Kafka's admin client does) or, with None, on the cluster default (any broker)."""
        I = IncrementalAlterConfigsRequest
        ops = [I.AlterableConfig(name=k, config_operation=0, value=v) for k, v in (set_ or {}).items()]
        ops += [I.AlterableConfig(name=k, config_operation=1, value=None) for k in (delete or [])]
        name = "" if broker_id is None else str(broker_id)
        req = I(
            resources=[I.AlterConfigsResource(resource_type=RESOURCE_BROKER, resource_name=name, configs=ops)],
            validate_only=False,
        )
        if not self.brokers:
            self.refresh([])
        conn = self.any_connection() if broker_id is None else self.connection(broker_id)
        r = conn.request(req).responses[0]
        what = "the default of brokers" if broker_id is None else f"broker {broker_id}"
        check(r.error_code, f"alter configs of {what}", r.error_message)

    def list_offsets(
        self, topic: str, partitions: list[int], timestamp: int, isolation_level: int = 0
    ) -> dict[int, tuple[int, int]]:
        """partition -> (offset, timestamp) for a timestamp or -2 (earliest) / -1 (latest)."""
        L = ListOffsetsRequest
        meta = self.topics.get(topic) or self.topic(topic)
        by_leader: dict[int, list[int]] = {}
        for p in partitions:
            pm = meta.partitions.get(p)
            if pm is None:
                raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{p}")
            by_leader.setdefault(pm.leader, []).append(p)
        out = {}
        for leader, parts in by_leader.items():
            req = L(
                replica_id=-1,
                isolation_level=isolation_level,
                topics=[
                    L.ListOffsetsTopic(
                        name=topic,
                        partitions=[L.ListOffsetsPartition(partition_index=p, timestamp=timestamp) for p in parts],
                    )
                ],
            )
            resp = self.connection(leader).request(req)
            for t in resp.topics:
                for p in t.partitions:
                    check(p.error_code, f"list offsets of {topic}-{p.partition_index}")
                    out[p.partition_index] = (p.offset, p.timestamp)
        return out

    def delete_records(self, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        D = DeleteRecordsRequest
        meta = self.topics.get(topic) or self.topic(topic)
        out = {}
        for p, off in offsets.items():
            leader = meta.partitions[p].leader
            req = D(
                topics=[
                    D.DeleteRecordsTopic(
                        name=topic, partitions=[D.DeleteRecordsPartition(partition_index=p, offset=off)]
                    )
                ],
                timeout_ms=int(self.timeout * 1000),
            )
            r = self.connection(leader).request(req).topics[0].partitions[0]
            check(r.error_code, f"delete records of {topic}-{p}")
            out[p] = r.low_watermark
        return out
