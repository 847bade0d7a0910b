"""The share-group coordinator (broker/group/share_coordinator.py) on an in-memory
__consumer_offsets (test_coordinator.py's MemoryWriter): a heartbeat is stored before it
is answered and a failed append changes nothing; the membership listeners (the
interface the share-partition manager registers on) hear of a member that left, one
whose session ended and a deleted group, once each; a listener that fails does not stop
the others; a new coordinator loads the group from what was written."""

from __future__ import annotations

import asyncio

import pytest

from broker.group.consumer_group import HeartbeatError
from broker.group.share_coordinator import ShareGroupCoordinator
from broker.group.share_group import ShareHeartbeat
from broker.protocol.errors import ErrorCode
from tests.unit.group.test_coordinator import MemoryWrite, make, run


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.events: list[tuple[str, ...]] = []
        self.fail = fail

    def on_member_left(self, group_id: str, member_id: str) -> None:
        self.events.append(("left", group_id, member_id))
        if self.fail:
            raise RuntimeError("a listener that fails")

    def on_group_deleted(self, group_id: str) -> None:
        self.events.append(("deleted", group_id))
        if self.fail:
            raise RuntimeError("a listener that fails")


def _share(manager, session_ms: int = 60_000) -> ShareGroupCoordinator:
    return ShareGroupCoordinator(manager, lambda: ["t"], lambda gid: (session_ms, 100), max_size=10)


def _hb(mid: str, epoch: int = 0) -> ShareHeartbeat:
    return ShareHeartbeat("sg", mid, epoch, subscribed_topic_names=["t"] if epoch == 0 else None)


def test_listeners_hear_of_members_leaving_expiring_and_the_group_deleted():
    async def main():
        coord, manager, _ = make()
        await coord.startup()
        sc = _share(manager, session_ms=300)
        failing, rec = Recorder(fail=True), Recorder()
        sc.add_listener(failing)
        sc.add_listener(rec)
        assert (await sc.heartbeat(_hb("a"))).member_epoch == 1
        assert (await sc.heartbeat(_hb("b"))).member_epoch == 2
        assert (await sc.delete("sg")) == ErrorCode.NON_EMPTY_GROUP
        r = await sc.heartbeat(_hb("a", -1))
        assert r.left and rec.events == [("left", "sg", "a")]
        # b stops heartbeating: removed after its session, listeners told once
        await asyncio.sleep(0.8)
        assert rec.events == [("left", "sg", "a"), ("left", "sg", "b")]
        assert not manager.share_groups["sg"].members
        assert (await sc.delete("sg")) == 0
        assert rec.events[-1] == ("deleted", "sg") and failing.events == rec.events
        assert "sg" not in manager.share_groups
        assert (await sc.delete("sg")) is None  # not a share group (any more)
        await sc.shutdown()
        await coord.shutdown()

    run(main())


def test_a_failed_append_changes_nothing_and_a_new_coordinator_loads_the_group():
    async def main():
        coord, manager, writer = make()
        await coord.startup()
        sc = _share(manager)
        assert (await sc.heartbeat(_hb("a"))).member_epoch == 1
        append = writer.append
        writer.append = lambda tp, records, timeout_ms: MemoryWrite(
            writer, tp, -1, timeout_ms, ErrorCode.KAFKA_STORAGE_ERROR
        )
        with pytest.raises(HeartbeatError) as e:
            await sc.heartbeat(_hb("b"))
        assert e.value.code == ErrorCode.NOT_COORDINATOR
        writer.append = append
        g = manager.share_groups["sg"]
        assert set(g.members) == {"a"} and g.group_epoch == 1
        assert (await sc.heartbeat(_hb("b"))).member_epoch == 2
        assert (await sc.heartbeat(_hb("a", 1))).member_epoch == 2
        await sc.shutdown()
        await coord.shutdown()
        coord2, manager2, _ = make(writer)
        manager2.metadata.topics = manager.metadata.topics  # the same topic ids
        await coord2.startup()
        sc2 = _share(manager2)
        h = manager2.share_groups["sg"]
        assert (h.group_epoch, h.assignment_epoch, h.target) == (2, 2, g.target)
        assert {m: (x.member_epoch, x.assigned) for m, x in h.members.items()} == {
            m: (x.member_epoch, x.assigned) for m, x in g.members.items()
        }
        # carries on at the same epoch: nothing changed
        r = await sc2.heartbeat(_hb("a", 2))
        assert r.member_epoch == 2 and r.assignment is None
        await sc2.shutdown()
        await coord2.shutdown()

    run(main())
