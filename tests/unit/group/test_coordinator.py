"""The group coordinator and its metadata manager over an in-memory partition writer:
membership, storage, loading and unloading, without a broker process or a disk."""

import asyncio
import uuid

from broker.cluster.metadata import BrokerInfo, PartitionState, TopicInfo
from broker.config import BrokerConfig
from broker.group import OFFSETS_TOPIC, GroupCoordinator, GroupMetadataManager
from broker.group.records import OffsetAndMetadata
from broker.log import TopicPartition
from broker.native import assign_offsets, iter_batches
from broker.protocol.errors import ErrorCode

GROUP = "g1"


class MemoryWrite:
    """One write of the MemoryWriter (a PartitionWrite)."""

    def __init__(self, writer, tp, last_offset, timeout_ms, error=0, error_message=None):
        self.writer, self.tp, self.timeout_ms = writer, tp, timeout_ms
        self.last_offset, self.error, self.error_message = last_offset, error, error_message

    async def wait(self):
        if self.error:
            return self.error
        if self.writer.hw.get(self.tp, 0) > self.last_offset:
            return 0
        await asyncio.sleep(self.timeout_ms / 1000)
        return 0 if self.writer.hw.get(self.tp, 0) > self.last_offset else ErrorCode.REQUEST_TIMED_OUT


class MemoryWriter:
    """An in-memory PartitionWriter: one byte log per partition; the high watermark
    follows each append unless `hold` is set (a follower that does not fetch)."""

    def __init__(self):
        self.data: dict[TopicPartition, bytearray] = {}
        self.end: dict[TopicPartition, int] = {}
        self.hw: dict[TopicPartition, int] = {}
        self.leading: set[TopicPartition] = set()
        self.hold = False

    def is_leader(self, tp):
        return tp in self.leading

    def leader_epoch(self, tp):
        return 0

    def append(self, tp, records, timeout_ms):
        base = self.end.get(tp, 0)
        nxt = assign_offsets(records, base)[0]
        self.data.setdefault(tp, bytearray()).extend(records)
        self.end[tp] = nxt
        if not self.hold:
            self.hw[tp] = nxt
        return MemoryWrite(self, tp, nxt - 1, timeout_ms)

    def loadable_range(self, tp):
        return 0, self.end.get(tp, 0)

    def read(self, tp, offset, max_bytes, end):
        out = bytearray()
        for b in iter_batches(self.data.get(tp, b"")):
            if b.next_offset > offset and b.base_offset < end:
                out += bytes(memoryview(self.data[tp])[b.position : b.position + b.size])
        return bytes(out)


class Cluster:
    """A TopicReader with __consumer_offsets (1 partition) and topic `t`."""

    def __init__(self):
        self.topics = {}
        for name, n in ((OFFSETS_TOPIC, 1), ("t", 2)):
            parts = {p: PartitionState(p, [1], 1, 0, [1]) for p in range(n)}
            self.topics[name] = TopicInfo(name, uuid.uuid4(), parts)

    def topic(self, name):
        return self.topics.get(name)

    def brokers(self):
        return {1: BrokerInfo(1, "127.0.0.1", 9092)}


def make(writer=None, **config):
    cfg = BrokerConfig(
        {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 1, "request.timeout.ms": 200, **config}
    )
    writer = writer or MemoryWriter()
    writer.leading.add(TopicPartition(OFFSETS_TOPIC, 0))
    manager = GroupMetadataManager(cfg, writer, Cluster(), lambda *a: None)
    return GroupCoordinator(cfg, manager), manager, writer


async def join(coord, member_id=""):
    return await coord.join_group(
        GROUP, member_id, None, "client", "/127.0.0.1", 10_000, 10_000, "consumer", [("range", b"meta")], False
    )


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_offsets_survive_a_reload_from_the_partition():
    async def main():
        coord, manager, writer = make()
        await coord.startup()
        res = await coord.commit_offsets(GROUP, -1, "", None, {("t", 0): OffsetAndMetadata(42, -1, "m")})
        assert res == {("t", 0): 0}
        await coord.shutdown()
        # a new coordinator (the partition's next leader) replays what was written
        coord2, manager2, _ = make(writer)
        await coord2.startup()
        err, offsets = coord2.fetch_offsets(GROUP, [("t", 0), ("t", 1)])
        assert err == 0
        assert offsets[("t", 0)].offset == 42 and offsets[("t", 0)].metadata == "m"
        assert offsets[("t", 1)] is None
        await coord2.shutdown()

    run(main())


def test_a_commit_the_isr_does_not_acknowledge_times_out():
    async def main():
        coord, _, writer = make()
        await coord.startup()
        writer.hold = True
        res = await coord.commit_offsets(GROUP, -1, "", None, {("t", 0): OffsetAndMetadata(1, -1, "")})
        assert res == {("t", 0): ErrorCode.REQUEST_TIMED_OUT}
        err, offsets = coord.fetch_offsets(GROUP, [("t", 0)])
        assert offsets[("t", 0)] is None  # not applied: never acknowledged
        await coord.shutdown()

    run(main())


def test_unknown_partition_and_oversized_metadata_are_refused_per_partition():
    async def main():
        coord, _, _ = make(**{"offset.metadata.max.bytes": 4})
        await coord.startup()
        res = await coord.commit_offsets(
            GROUP,
            -1,
            "",
            None,
            {
                ("t", 0): OffsetAndMetadata(1, -1, "toolong"),
                ("t", 9): OffsetAndMetadata(1, -1, ""),
                ("nope", 0): OffsetAndMetadata(1, -1, ""),
            },
        )
        assert res == {
            ("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE,
            ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        await coord.shutdown()

    run(main())


def test_a_member_joins_and_syncs_then_the_group_moves_away():
    async def main():
        coord, manager, _ = make()
        await coord.startup()
        j = await join(coord)
        assert j.error == 0 and j.generation_id == 1 and j.leader == j.member_id
        s = await coord.sync_group(GROUP, 1, j.member_id, None, "consumer", "range", {j.member_id: b"assign"})
        assert s.error == 0 and s.assignment == b"assign"
        assert coord.heartbeat(GROUP, 1, j.member_id, None) == 0
        # this broker stops leading the group's offsets partition
        manager.writer.leading.clear()
        manager.leadership_changed([], [TopicPartition(OFFSETS_TOPIC, 0)])
        assert coord.heartbeat(GROUP, 1, j.member_id, None) == ErrorCode.NOT_COORDINATOR
        assert GROUP not in manager.groups
        # and leads it again: the stored generation comes back, the member is known
        manager.writer.leading.add(TopicPartition(OFFSETS_TOPIC, 0))
        manager.leadership_changed([TopicPartition(OFFSETS_TOPIC, 0)], [])
        assert coord.heartbeat(GROUP, 1, j.member_id, None) == 0
        await coord.shutdown()

    run(main())


def test_not_leading_the_partition_is_not_coordinator():
    async def main():
        coord, manager, writer = make()
        writer.leading.clear()
        await coord.startup()
        assert coord.check_coordinator(GROUP) == ErrorCode.NOT_COORDINATOR
        j = await join(coord)
        assert j.error == ErrorCode.NOT_COORDINATOR
        await coord.shutdown()

    run(main())


def test_topic_deletion_drops_its_offsets_and_an_empty_group():
    async def main():
        coord, manager, writer = make()
        await coord.startup()
        await coord.commit_offsets(GROUP, -1, "", None, {("t", 0): OffsetAndMetadata(5, -1, "")})
        assert coord.topic_deleted("t") == 1
        assert GROUP not in manager.groups
        coord2, _, _ = make(writer)
        await coord2.startup()
        assert coord2.fetch_offsets(GROUP, None) == (0, {})
        await coord.shutdown()
        await coord2.shutdown()

    run(main())


def test_a_new_leader_loads_up_to_its_log_end_not_its_lagging_high_watermark():
    """A follower's high watermark trails the leader's by a fetch: the commits the old
    leader acknowledged are in the new leader's log above its high watermark."""

    async def main():
        coord, _, writer = make()
        await coord.startup()
        await coord.commit_offsets(GROUP, -1, "", None, {("t", 0): OffsetAndMetadata(7, -1, "")})
        writer.hw[TopicPartition(OFFSETS_TOPIC, 0)] = 0  # as a follower that just took over
        await coord.shutdown()
        coord2, _, _ = make(writer)
        await coord2.startup()
        assert coord2.fetch_offsets(GROUP, [("t", 0)])[1][("t", 0)].offset == 7
        await coord2.shutdown()

    run(main())


def test_a_kip848_group_written_to_the_partition_is_loaded_by_the_next_leader_and_unloaded_with_it():
    """The records of a KIP-848 consumer group (group_records.py, Kafka 4.x's) in
    __consumer_offsets: the partition's next leader replays them into the same group,
    beside the classic groups and offsets of the same partition."""
    from broker.group import group_records as GR
    from broker.group.consumer_group import ConsumerGroup, HeartbeatRequest, TopicsView

    async def main():
        coord, manager, writer = make()
        await coord.startup()
        topics = TopicsView({"t": (uuid.UUID(int=7), 2)})
        g = ConsumerGroup("kip848")
        log = []
        for mid in ("a", "b"):
            req = HeartbeatRequest("kip848", mid, 0, rebalance_timeout_ms=5000, subscribed_topic_names=["t"], owned={})
            log += GR.records_after(g, g.heartbeat(req, topics, ["uniform"]))
        assert await manager.store("kip848", log, offsets=False) == 0
        assert await coord.commit_offsets(GROUP, -1, "", None, {("t", 0): OffsetAndMetadata(3, -1, "")}) == {
            ("t", 0): 0
        }
        await coord.shutdown()
        coord2, manager2, _ = make(writer)
        await coord2.startup()
        loaded = manager2.consumer_groups["kip848"]
        assert (loaded.group_epoch, loaded.assignment_epoch, loaded.target) == (g.group_epoch, 2, g.target)
        assert loaded.members == g.members
        assert coord2.fetch_offsets(GROUP, [("t", 0)])[1][("t", 0)].offset == 3
        writer.leading.clear()
        manager2.leadership_changed([], [TopicPartition(OFFSETS_TOPIC, 0)])
        assert manager2.consumer_groups == {}
        await coord2.shutdown()

    run(main())


def _kip848(manager, **kw):
    from broker.group.consumer_coordinator import ConsumerGroupCoordinator

    return ConsumerGroupCoordinator(manager, lambda: ["t"], **kw)


def _hb(mid, epoch=0, owned=None, **kw):
    from broker.group.consumer_group import HeartbeatRequest

    if epoch == 0:
        kw.setdefault("rebalance_timeout_ms", 5000)
        kw.setdefault("subscribed_topic_names", ["t"])
    return HeartbeatRequest("cg", mid, epoch, owned={} if owned is None else owned, **kw)


def test_kip848_heartbeats_are_stored_before_they_are_answered_and_a_failed_append_changes_nothing():
    from broker.group.consumer_group import HeartbeatError

    async def main():
        coord, manager, writer = make()
        await coord.startup()
        cc = _kip848(manager)
        a = await cc.heartbeat(_hb("a"))
        assert a.member_epoch == 1 and sum(len(p) for p in a.assignment.values()) == 2
        # the append fails: not answered, not applied
        append = writer.append
        writer.append = lambda tp, records, timeout_ms: MemoryWrite(
            writer, tp, -1, timeout_ms, ErrorCode.KAFKA_STORAGE_ERROR
        )
        try:
            await cc.heartbeat(_hb("b"))
            raise AssertionError("answered")
        except HeartbeatError as e:
            assert e.code == ErrorCode.NOT_COORDINATOR  # as Kafka maps a storage error
        assert set(cc.groups["cg"].members) == {"a"} and cc.groups["cg"].group_epoch == 1
        writer.append = append
        # appended, but the ISR does not acknowledge in time: answered
        # COORDINATOR_NOT_AVAILABLE, and kept, as the log keeps it
        writer.hold = True
        try:
            await cc.heartbeat(_hb("b"))
            raise AssertionError("answered")
        except HeartbeatError as e:
            assert e.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert set(cc.groups["cg"].members) == {"a", "b"}
        writer.hold = False
        # the next leader of the partition has the group as this one has it
        await cc.shutdown()
        await coord.shutdown()
        coord2, manager2, _ = make(writer)
        await coord2.startup()
        cc2 = _kip848(manager2)
        loaded = cc2.groups["cg"]
        assert loaded.group_epoch == 2 and loaded.members["a"].assigned == a.assignment
        assert set(loaded.members) == {"a", "b"} and loaded.target == cc.groups["cg"].target
        again = await cc2.heartbeat(_hb("a", 1, owned=a.assignment))
        assert again.member_epoch == 1 and loaded.members["a"].state.name == "UNREVOKED_PARTITIONS"
        await cc2.shutdown()
        await coord2.shutdown()

    run(main())


def test_kip848_group_ids_of_classic_groups_and_of_no_group_and_other_coordinators():
    from broker.group.consumer_group import HeartbeatError, HeartbeatRequest

    async def main():
        coord, manager, writer = make()
        await coord.startup()
        cc = _kip848(manager)
        await join(coord)  # GROUP is a classic group with a member: not a consumer group
        classic = HeartbeatRequest(GROUP, "a", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["t"], owned={})
        for req, code in (
            (classic, ErrorCode.GROUP_ID_NOT_FOUND),
            (_hb("x", 3), ErrorCode.GROUP_ID_NOT_FOUND),  # no such group, and not a join
        ):
            try:
                await cc.heartbeat(req)
                raise AssertionError("answered")
            except HeartbeatError as e:
                assert e.code == code
        assert cc.describe("nope") == (ErrorCode.GROUP_ID_NOT_FOUND, None)
        writer.leading.clear()
        manager.leadership_changed([], [TopicPartition(OFFSETS_TOPIC, 0)])
        try:
            await cc.heartbeat(_hb("a"))
            raise AssertionError("answered")
        except HeartbeatError as e:
            assert e.code == ErrorCode.NOT_COORDINATOR
        await cc.shutdown()
        await coord.shutdown()

    run(main())


def test_kip848_a_silent_member_is_removed_after_its_session_and_one_that_does_not_revoke_after_its_rebalance_timeout():
    async def main():
        coord, manager, writer = make()
        await coord.startup()
        cc = _kip848(manager, session_timeout_ms=1500)
        a = await cc.heartbeat(_hb("a", rebalance_timeout_ms=150))
        b = await cc.heartbeat(_hb("b"))
        assert b.assignment == {}  # both partitions are a's until it lets one go
        # a keeps heartbeating but never revokes: after its rebalance timeout it is out
        for _ in range(20):
            await asyncio.sleep(0.05)
            if "a" not in cc.groups["cg"].members:
                break
            await cc.heartbeat(_hb("a", a.member_epoch, owned=a.assignment))
        assert set(cc.groups["cg"].members) == {"b"}
        b = await cc.heartbeat(_hb("b", b.member_epoch))
        assert sum(len(p) for p in b.assignment.values()) == 2
        # b falls silent: gone after its session
        await asyncio.sleep(2)
        assert cc.groups["cg"].members == {}
        await cc.shutdown()
        await coord.shutdown()
        coord2, manager2, _ = make(writer)
        await coord2.startup()
        assert manager2.consumer_groups["cg"].members == {}  # the removals were stored
        await coord2.shutdown()

    run(main())


def test_kip848_members_commit_transactional_offsets_at_their_member_epoch():
    """TxnOffsetCommit to a KIP-848 group, as Kafka 4.4's ConsumerGroup.validateOffsetCommit
    takes it: a member at its epoch (kept once the transaction commits), a stale or newer
    epoch STALE_MEMBER_EPOCH, an unknown member UNKNOWN_MEMBER_ID, a producer without group
    metadata (-1, no member) whatever the members. Before the fix a member's commit was
    checked against the classic group: ILLEGAL_GENERATION."""

    async def main():
        coord, manager, _ = make()
        await coord.startup()
        cc = _kip848(manager)
        a = await cc.heartbeat(_hb("a"))
        assert a.member_epoch == 1
        tp = ("t", 0)

        async def commit(member, epoch, offset, instance=None):
            res = await coord.commit_txn_offsets("cg", 7, 0, epoch, member, instance, {tp: OffsetAndMetadata(offset)})
            return res[tp]

        assert await commit("a", 1, 5) == 0
        assert await commit("a", 0, 6) == ErrorCode.STALE_MEMBER_EPOCH
        assert await commit("a", 2, 6) == ErrorCode.STALE_MEMBER_EPOCH
        assert await commit("nobody", 1, 6) == ErrorCode.UNKNOWN_MEMBER_ID
        assert await commit("", -1, 6, instance="i-1") == ErrorCode.UNKNOWN_MEMBER_ID
        assert await commit("", -1, 6) == 0  # a producer without the consumer's group metadata
        coord.complete_txn_offsets(0, 7, commit=True)
        assert coord.fetch_offsets("cg", [tp])[1][tp].offset == 6
        await cc.shutdown()
        await coord.shutdown()

    run(main())


def test_kip848_offline_upgrade_and_back():
    """An empty classic group becomes a consumer group on a consumer's join (its offsets
    stay); a classic member may not join a consumer group with members, and turns an
    empty one back into a classic group."""
    from broker.group.consumer_group import HeartbeatRequest

    async def main():
        coord, manager, writer = make()
        await coord.startup()
        cc = _kip848(manager)
        j = await join(coord)
        s = await coord.sync_group(GROUP, 1, j.member_id, None, "consumer", "range", {j.member_id: b"x"})
        assert s.error == 0
        assert await coord.commit_offsets(GROUP, 1, j.member_id, None, {("t", 0): OffsetAndMetadata(7)}) == {
            ("t", 0): 0
        }
        assert coord.leave_group(GROUP, [(j.member_id, None)])[0] == 0
        await asyncio.sleep(0)
        req = HeartbeatRequest(GROUP, "c1", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["t"], owned={})
        r = await cc.heartbeat(req)
        assert r.member_epoch == 1 and GROUP in manager.consumer_groups
        assert coord.fetch_offsets(GROUP, [("t", 0)])[1][("t", 0)].offset == 7
        # a member commits at its epoch; at another epoch it is stale
        ok = await coord.commit_offsets(GROUP, 1, "c1", None, {("t", 1): OffsetAndMetadata(3)})
        assert ok == {("t", 1): 0}
        stale = await coord.commit_offsets(GROUP, 0, "c1", None, {("t", 1): OffsetAndMetadata(4)})
        assert stale == {("t", 1): ErrorCode.STALE_MEMBER_EPOCH}
        simple = await coord.commit_offsets(GROUP, -1, "", None, {("t", 1): OffsetAndMetadata(4)})
        assert simple == {("t", 1): ErrorCode.UNKNOWN_MEMBER_ID}  # the group has members
        assert (await join(coord)).error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        await cc.heartbeat(HeartbeatRequest(GROUP, "c1", -1))
        back = await join(coord)
        assert back.error == 0 and GROUP not in manager.consumer_groups
        await cc.shutdown()
        await coord.shutdown()
        # the next leader sees the classic group only
        coord2, manager2, _ = make(writer)
        await coord2.startup()
        assert GROUP not in manager2.consumer_groups and GROUP in manager2.groups
        await coord2.shutdown()

    run(main())


def test_kip848_delete_groups_refuses_a_group_with_members_and_deletes_an_empty_one_with_its_offsets():
    from broker.group.consumer_group import HeartbeatRequest

    async def main():
        coord, manager, writer = make()
        await coord.startup()
        cc = _kip848(manager)
        r = await cc.heartbeat(_hb("a"))
        assert await coord.commit_offsets("cg", r.member_epoch, "a", None, {("t", 0): OffsetAndMetadata(5)}) == {
            ("t", 0): 0
        }
        assert await coord.delete_groups(["cg"]) == {"cg": ErrorCode.NON_EMPTY_GROUP}
        await cc.heartbeat(HeartbeatRequest("cg", "a", -1))
        assert await coord.delete_groups(["cg"]) == {"cg": 0}
        assert "cg" not in manager.consumer_groups and coord.fetch_offsets("cg", [("t", 0)])[1][("t", 0)] is None
        await cc.shutdown()
        await coord.shutdown()
        coord2, manager2, _ = make(writer)  # and so it stays on the next leader
        await coord2.startup()
        assert "cg" not in manager2.consumer_groups and coord2.fetch_offsets("cg", [("t", 0)])[1][("t", 0)] is None
        await coord2.shutdown()

    run(main())
