"""A consumer-group member on the project's own client (what `broker consume --group` uses).

    with GroupConsumer("127.0.0.1:9092", "my-group", ["clicks"]) as c:
        for rec in c.poll(1.0): ...        # joins, syncs and heartbeats from inside poll()
        c.commit()                         # synchronous commit of the current positions

Protocol type "consumer" with the "range" assignor (Kafka's RangeAssignor: per topic,
partitions in order, split into contiguous ranges over the members sorted by id); when
this member leads, it computes the assignment for everyone. Committed offsets are the
starting positions; partitions without one start per auto_offset_reset. No background
thread: poll() must be called at least every session_timeout_ms.
"""

from __future__ import annotations

import time

from broker.client.cluster import Cluster
from broker.client.connection import BrokerConnection, ClientError
from broker.client.consumer import Consumer, ConsumerRecord
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
from broker.protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription
from broker.protocol.messages.find_coordinator import FindCoordinatorRequest
from broker.protocol.messages.heartbeat import HeartbeatRequest
from broker.protocol.messages.join_group import JoinGroupRequest
from broker.protocol.messages.leave_group import LeaveGroupRequest
from broker.protocol.messages.offset_commit import OffsetCommitRequest
from broker.protocol.messages.offset_fetch import OffsetFetchRequest
from broker.protocol.messages.sync_group import SyncGroupRequest

REJOIN = {
    ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.UNKNOWN_MEMBER_ID,
    ErrorCode.FENCED_INSTANCE_ID,
}
RETRY_COORDINATOR = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


def range_assign(members: dict[str, list[str]], partitions: dict[str, list[int]]) -> dict[str, dict[str, list[int]]]:
    """Kafka's RangeAssignor. members: id -> subscribed topics; partitions: topic -> ids."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    for topic in sorted(partitions):
        subs = sorted(m for m, topics in members.items() if topic in topics)
        if not subs:
            continue
        parts = sorted(partitions[topic])
        per, extra = divmod(len(parts), len(subs))
        start = 0
        for i, m in enumerate(subs):
            n = per + (1 if i < extra else 0)
            if n:
                out[m][topic] = parts[start : start + n]
            start += n
    return out


class GroupConsumer:
    def __init__(
        self,
        bootstrap: str | Cluster,
        group_id: str,
        topics: list[str],
        *,
        session_timeout_ms: int = 10000,
        rebalance_timeout_ms: int = 30000,
        heartbeat_interval_ms: int = 3000,
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        group_instance_id: str | None = None,
        client_id: str = "kbroker-consumer",
        security=None,
    ):
        self.cluster = (
            bootstrap if isinstance(bootstrap, Cluster) else Cluster(bootstrap, client_id=client_id, security=security)
        )
        self._own_cluster = not isinstance(bootstrap, Cluster)
        self.group_id = group_id
        self.topics = list(topics)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.group_instance_id = group_instance_id
        self.consumer = Consumer(self.cluster, auto_offset_reset=auto_offset_reset)
        self.member_id = ""
        self.generation_id = -1
        self.assignment: dict[str, list[int]] = {}
        self._coordinator: BrokerConnection | None = None
        self._joined = False
        self._last_heartbeat = 0.0
        self._last_commit = time.monotonic()

    # ------------------------------------------------------------------ coordinator

    def coordinator(self) -> BrokerConnection:
        if self._coordinator is not None and not self._coordinator.closed:
            return self._coordinator
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = self.cluster.any_connection()
                version = conn.version_for(FindCoordinatorRequest.API_KEY)
                if version >= 4:
                    r = conn.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[self.group_id]), version)
                    c = r.coordinators[0]
                    err, host, port = c.error_code, c.host, c.port
                else:
                    r = conn.request(FindCoordinatorRequest(key=self.group_id, key_type=0), version)
                    err, host, port = r.error_code, r.host, r.port
                if err == 0:
                    self._coordinator = BrokerConnection(
                        host, port, client_id=self.cluster.client_id, security=self.cluster.security
                    )
                    return self._coordinator
            except ClientError:
                # the bootstrap connection broke (a broker restart): refresh() replaces it
                if time.monotonic() > deadline:
                    raise
                try:
                    self.cluster.refresh([])
                except ClientError:
                    pass
                time.sleep(0.2)
                continue
            if err not in RETRY_COORDINATOR or time.monotonic() > deadline:
                raise KafkaProtocolError(err, f"find coordinator of group {self.group_id}")
            time.sleep(0.2)

    def _request(self, req):
        try:
            return self.coordinator().request(req, timeout=self.rebalance_timeout_ms / 1000 + 10)
        except ClientError:
            if self._coordinator is not None:
                self._coordinator.close()
            self._coordinator = None
            raise

    # ------------------------------------------------------------------ membership

    def _subscription(self) -> bytes:
        return ConsumerProtocolSubscription(topics=self.topics).encode_versioned(0)

    def join(self) -> None:
        """JoinGroup + SyncGroup until this member holds an assignment."""
        deadline = time.monotonic() + self.rebalance_timeout_ms / 1000 + 30
        while True:
            if time.monotonic() > deadline:
                raise KafkaProtocolError(ErrorCode.REBALANCE_IN_PROGRESS, f"could not join group {self.group_id}")
            req = JoinGroupRequest(
                group_id=self.group_id,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=self._subscription())],
            )
            try:
                r = self._request(req)
            except ClientError:
                time.sleep(0.2)  # the coordinator is looked up again
                continue
            if r.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = r.member_id
                continue
            if r.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if r.error_code in RETRY_COORDINATOR:
                self._coordinator = None
                time.sleep(0.2)
                continue
            if r.error_code == ErrorCode.REBALANCE_IN_PROGRESS:
                continue
            if r.error_code:
                raise KafkaProtocolError(r.error_code, f"join group {self.group_id}")
            self.member_id = r.member_id
            self.generation_id = r.generation_id
            assignments = []
            if r.leader == r.member_id and not r.skip_assignment:
                assignments = self._assign(r.members)
            try:
                s = self._request(
                    SyncGroupRequest(
                        group_id=self.group_id,
                        generation_id=self.generation_id,
                        member_id=self.member_id,
                        group_instance_id=self.group_instance_id,
                        protocol_type="consumer",
                        protocol_name=r.protocol_name,
                        assignments=assignments,
                    )
                )
            except ClientError:
                time.sleep(0.2)
                continue
            if s.error_code in RETRY_COORDINATOR:
                self._coordinator = None
                time.sleep(0.2)
                continue
            if s.error_code in REJOIN:
                if s.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                continue
            if s.error_code:
                raise KafkaProtocolError(s.error_code, f"sync group {self.group_id}")
            try:
                self._take_assignment(s.assignment)
            except ClientError:
                self._coordinator = None
                time.sleep(0.2)
                continue
            self._joined = True
            self._last_heartbeat = time.monotonic()
            return

    def _assign(self, members) -> list:
        subs = {}
        for m in members:
            sub, _ = ConsumerProtocolSubscription.decode_versioned(m.metadata)
            subs[m.member_id] = list(sub.topics)
        wanted = sorted({t for ts in subs.values() for t in ts})
        metas = self.cluster.refresh(wanted)
        partitions = {t: sorted(meta.partitions) for t, meta in metas.items() if meta.error_code == 0}
        plan = range_assign(subs, partitions)
        A = ConsumerProtocolAssignment
        return [
            SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=m,
                assignment=A(
                    assigned_partitions=[A.TopicPartition(topic=t, partitions=ps) for t, ps in sorted(tps.items())]
                ).encode_versioned(0),
            )
            for m, tps in plan.items()
        ]

    def _take_assignment(self, data: bytes) -> None:
        self.assignment = {}
        if data:
            a, _ = ConsumerProtocolAssignment.decode_versioned(data)
            self.assignment = {tp.topic: list(tp.partitions) for tp in a.assigned_partitions}
        self.consumer.positions.clear()
        committed = self.committed()
        for topic, parts in self.assignment.items():
            missing = [p for p in parts if (topic, p) not in committed]
            for p in parts:
                if (topic, p) in committed:
                    self.consumer.seek(topic, p, committed[(topic, p)])
            if missing:
                self.consumer.assign(
                    topic, missing, "earliest" if self.consumer.auto_offset_reset == "earliest" else "latest"
                )

    def committed(self) -> dict[tuple[str, int], int]:
        req = OffsetFetchRequest(
            group_id=self.group_id,
            topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                for t, ps in self.assignment.items()
            ],
            require_stable=True,
        )
        version = min(self.coordinator().version_for(OffsetFetchRequest.API_KEY), 7)
        r = self.coordinator().request(req, version)
        if r.error_code:
            raise KafkaProtocolError(r.error_code, f"fetch offsets of group {self.group_id}")
        out = {}
        for t in r.topics:
            for p in t.partitions:
                if p.error_code == 0 and p.committed_offset >= 0:
                    out[(t.name, p.partition_index)] = p.committed_offset
        return out

    def _heartbeat(self) -> None:
        if time.monotonic() - self._last_heartbeat < self.heartbeat_interval_ms / 1000:
            return
        try:
            r = self._request(
                HeartbeatRequest(
                    group_id=self.group_id,
                    generation_id=self.generation_id,
                    member_id=self.member_id,
                    group_instance_id=self.group_instance_id,
                )
            )
        except ClientError:
            return  # coordinator gone: looked up again at the next heartbeat
        self._last_heartbeat = time.monotonic()
        if r.error_code in RETRY_COORDINATOR:
            self._coordinator = None
            return
        if r.error_code in REJOIN:
            if self.enable_auto_commit and r.error_code == ErrorCode.REBALANCE_IN_PROGRESS:
                try:
                    self.commit()
                except KafkaProtocolError:
                    pass
            if r.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self._joined = False
        elif r.error_code:
            raise KafkaProtocolError(r.error_code, f"heartbeat in group {self.group_id}")

    # ------------------------------------------------------------------ consuming

    def poll(self, timeout_s: float = 1.0) -> list[ConsumerRecord]:
        if not self._joined:
            self.join()
        self._heartbeat()
        if not self._joined:
            self.join()
        # auto-commit, as Kafka's consumer does it: at the start of a poll, the positions
        # after the records earlier polls returned (never records not yet handed out)
        if (
            self.enable_auto_commit
            and self.consumer.positions
            and (time.monotonic() - self._last_commit) * 1000 >= self.auto_commit_interval_ms
        ):
            try:
                self.commit()
            except ClientError:
                pass  # the coordinator is looked up again; retried later
            except KafkaProtocolError as exc:
                if exc.code in RETRY_COORDINATOR:
                    self._coordinator = None
                elif exc.code in REJOIN:
                    # out of the group (or mid-rebalance): rejoin; the positions restart
                    # from the committed offsets (at-least-once)
                    self.join()
                else:
                    raise
        if not self.consumer.positions:
            time.sleep(min(timeout_s, 0.2))
            return []
        try:
            return self.consumer.poll(min(timeout_s, self.heartbeat_interval_ms / 1000))
        except ClientError:
            time.sleep(min(timeout_s, 0.2))  # the partition leader is unreachable for now
            return []

    def commit(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        """Commits `offsets` (default: the current positions) synchronously."""
        offsets = dict(self.consumer.positions) if offsets is None else offsets
        self._last_commit = time.monotonic()
        if not offsets:
            return
        by_topic: dict[str, list] = {}
        for (t, p), off in offsets.items():
            by_topic.setdefault(t, []).append(
                OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=off, committed_metadata=""
                )
            )
        r = self._request(
            OffsetCommitRequest(
                group_id=self.group_id,
                generation_id_or_member_epoch=self.generation_id,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                topics=[
                    OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()
                ],
            )
        )
        for t in r.topics:
            for p in t.partitions:
                if p.error_code in REJOIN:
                    self._joined = False
                    raise KafkaProtocolError(p.error_code, f"commit in group {self.group_id}")
                if p.error_code:
                    raise KafkaProtocolError(p.error_code, f"commit {t.name}-{p.partition_index}")

    def close(self) -> None:
        try:
            if self._joined and self.enable_auto_commit:
                self.commit()
            if self.member_id and self._coordinator is not None:
                # a new connection if an interrupt (Ctrl-C) broke the last one mid-request
                self.coordinator().request(
                    LeaveGroupRequest(
                        group_id=self.group_id,
                        member_id=self.member_id,
                        members=[
                            LeaveGroupRequest.MemberIdentity(
                                member_id=self.member_id, group_instance_id=self.group_instance_id
                            )
                        ],
                    )
                )
        except (ClientError, KafkaProtocolError):
            pass
        finally:
            if self._coordinator is not None:
                self._coordinator.close()
            if self._own_cluster:
                self.cluster.close()

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
