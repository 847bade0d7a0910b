"""KIP-848 heartbeats on the group coordinator: the part of Kafka's GroupMetadataManager
that drives consumer groups (consumer_group.py) with time and storage.

- A heartbeat is checked against the group's coordinator (NOT_COORDINATOR and the other
  placement answers), then applied to the group under the group's lock; the records it
  calls for (group_records.py) are appended to the group's partition of
  __consumer_offsets and the answer waits until the ISR has them. An append that fails
  puts the group back as it was before the heartbeat (Kafka reverts its timeline the
  same way); one appended whose wait fails stays applied, as it stays in the log the
  next leader loads. Either is answered with the error as Kafka's GroupCoordinatorService
  maps it (a timeout: COORDINATOR_NOT_AVAILABLE).
- A group id that belongs to a classic group with members is GROUP_ID_NOT_FOUND (it is
  not a consumer group); an empty classic group gives its id up to the consumer group
  that a join creates (Kafka's offline upgrade: the classic group's metadata gets its
  tombstone, the offsets stay). The way back is the classic coordinator's: a classic
  JoinGroup to an empty consumer group writes that group's tombstones; to one with
  members it is INCONSISTENT_GROUP_PROTOCOL.
- Timers: a member heard from nothing within its group's session timeout is removed, as
  is one still holding partitions it was told to revoke after its rebalance timeout. Both
  bump the group epoch and write the member's tombstones. The session timeout and the
  heartbeat interval members are given are the group's consumer.session.timeout.ms and
  consumer.heartbeat.interval.ms when the group has them (group configs,
  group_configs.py), else the broker's; a change applies from each member's next heartbeat.

- Offsets: a member commits and fetches at its member epoch
  (`GroupCoordinator.validate_consumer_member`, OffsetCommit/OffsetFetch v9).

Served by handlers/consumer_group_heartbeat.py and consumer_group_describe.py; everything
runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Iterable
from typing import Any

from broker.group import group_records as GR, records as R
from broker.group.consumer_group import (
    ConsumerGroup,
    HeartbeatError,
    HeartbeatRequest,
    HeartbeatResult,
    MemberState,
    TopicsView,
)
from broker.group.group_configs import GroupConfigs
from broker.group.metadata_manager import OFFSETS_TOPIC, GroupMetadataManager, now_ms
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

__all__ = ["ConsumerGroupCoordinator", "DEFAULT_ASSIGNORS"]

DEFAULT_ASSIGNORS = ("uniform", "range")

# how Kafka's GroupCoordinatorService answers a KIP-848 operation whose records could not be
# written (or waited for): the rest of the codes as they are
_WRITE_ERRORS: dict[int, int] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
DEFAULT_SESSION_TIMEOUT_MS = 45000
DEFAULT_HEARTBEAT_INTERVAL_MS = 5000


class ConsumerGroupCoordinator:
    def __init__(
        self,
        manager: GroupMetadataManager,
        topic_names: Callable[[], Iterable[str]],
        assignors: Iterable[str] = DEFAULT_ASSIGNORS,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
        group_configs: GroupConfigs | None = None,
    ) -> None:
        self.manager = manager
        self.groups = manager.consumer_groups  # the manager's dict, shared (loads fill it)
        self.topic_names = topic_names
        self.assignors = list(assignors)
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.group_configs = group_configs
        self._locks: dict[str, asyncio.Lock] = {}
        self._session: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._rebalance: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        manager.on_consumer_group_loaded = self._loaded

    # ------------------------------------------------------------------ views

    def topics(self) -> TopicsView:
        out: dict[str, Any] = {}
        for name in self.topic_names():
            info = self.manager.metadata.topic(name)
            if info is not None:
                out[name] = (info.topic_id, len(info.partitions))
        return TopicsView(out)

    def session_timeout_for(self, group_id: str) -> int:
        """The group's consumer.session.timeout.ms, else the broker's."""
        if self.group_configs is None:
            return self.session_timeout_ms
        return self.group_configs.resolve(group_id).consumer_session_timeout_ms

    def heartbeat_interval_for(self, group_id: str) -> int:
        """The group's consumer.heartbeat.interval.ms, else the broker's."""
        if self.group_configs is None:
            return self.heartbeat_interval_ms
        return self.group_configs.resolve(group_id).consumer_heartbeat_interval_ms

    def assignor_of(self, g: ConsumerGroup) -> str:
        return g.preferred_assignor(self.assignors[0])

    def describe(self, group_id: str) -> tuple[int, ConsumerGroup | None]:
        err = self.manager.check_coordinator(group_id)
        if err:
            return err, None
        g = self.groups.get(group_id)
        return (0, g) if g is not None else (ErrorCode.GROUP_ID_NOT_FOUND, None)

    # ------------------------------------------------------------------ heartbeats

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        """Raises HeartbeatError for an answer with an error code."""
        gid = req.group_id
        err = self.manager.check_coordinator(gid)
        if err:
            raise HeartbeatError(err, "")
        lock = self._locks.setdefault(gid, asyncio.Lock())
        async with lock:
            if gid in self.manager.share_groups:
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.")
            classic = self.manager.groups.get(gid)
            if classic is not None and (classic.members or classic.protocol_type):
                if classic.members or req.member_epoch != 0:
                    raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.")
                # an empty classic group becomes a consumer group (its offsets stay)
                _, err = await self._store(gid, [(R.group_key(gid), None)])
                if err:
                    raise HeartbeatError(err, "")
                classic.protocol_type, classic.protocol_name, classic.leader_id = "", None, None
                classic.generation_id = 0
            g = self.groups.get(gid)
            created = g is None
            if g is None:
                if req.member_epoch != 0:
                    raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {gid} not found.")
                g = ConsumerGroup(gid)
            before = copy.deepcopy(g)
            try:
                result = g.heartbeat(req, self.topics(), self.assignors)
            except HeartbeatError:
                self._restore(gid, before, created)
                raise
            records = GR.records_after(g, result)
            if created:
                self.groups[gid] = g
            if records:
                appended, err = await self._store(gid, records)
                if err and not appended:
                    self._restore(gid, before, created)
                if err:
                    raise HeartbeatError(err, "")
            self._arm(g, result)
            return result

    async def _store(self, gid: str, records: list[GR.Record]) -> tuple[bool, int]:
        """Appends to the group's partition and waits for the ISR: (whether the records
        are in the local log, 0 or the answer). Records appended whose wait failed stay
        applied, as they stay in the log (Kafka's runtime does not revert them either)."""
        p = self.manager.partition_for(gid)
        if not self.manager.writer.is_leader(TopicPartition(OFFSETS_TOPIC, p)):
            return False, ErrorCode.NOT_COORDINATOR
        write = self.manager.runtime.append(p, records, now_ms(), self.manager.config["request.timeout.ms"])
        if write.error:
            return False, _WRITE_ERRORS.get(write.error, write.error)
        err = await write.wait()
        return True, _WRITE_ERRORS.get(err, err)

    def _restore(self, gid: str, before: ConsumerGroup, created: bool) -> None:
        if created:
            self.groups.pop(gid, None)
        else:
            self.groups[gid] = before

    def _arm(self, g: ConsumerGroup, result: HeartbeatResult) -> None:
        """Restarts the member's session timer; starts its rebalance timer when it is
        told to revoke, stops it when it has."""
        key = (g.group_id, result.member_id)
        self._cancel(self._session, key)
        if result.left:
            self._cancel(self._rebalance, key)
            return
        loop = asyncio.get_running_loop()
        session_ms = self.session_timeout_for(g.group_id)
        self._session[key] = loop.call_later(session_ms / 1000, self._expire, key, "session timeout")
        m = g.members[result.member_id]
        if m.state != MemberState.UNREVOKED_PARTITIONS:
            self._cancel(self._rebalance, key)
        elif key not in self._rebalance:
            timeout = m.rebalance_timeout_ms if m.rebalance_timeout_ms > 0 else session_ms
            self._rebalance[key] = loop.call_later(timeout / 1000, self._expire, key, "rebalance timeout")

    @staticmethod
    def _cancel(timers: dict[tuple[str, str], asyncio.TimerHandle], key: tuple[str, str]) -> None:
        t = timers.pop(key, None)
        if t is not None:
            t.cancel()

    def _loaded(self, g: ConsumerGroup) -> None:
        """A group loaded from its partition: its members have a session to keep."""
        loop = asyncio.get_running_loop()
        session_s = self.session_timeout_for(g.group_id) / 1000
        for mid in g.members:
            key = (g.group_id, mid)
            self._cancel(self._session, key)
            self._session[key] = loop.call_later(session_s, self._expire, key, "session timeout")

    def _expire(self, key: tuple[str, str], why: str) -> None:
        task = asyncio.get_running_loop().create_task(self._remove(key, why))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _remove(self, key: tuple[str, str], why: str) -> None:
        gid, mid = key
        self._cancel(self._session, key)
        self._cancel(self._rebalance, key)
        async with self._locks.setdefault(gid, asyncio.Lock()):
            g = self.groups.get(gid)
            if g is None or mid not in g.members:
                return
            before = copy.deepcopy(g)
            g.remove_member(mid)
            records = GR.records_after(g, HeartbeatResult(mid, -1, None, group_epoch_changed=True, left=True))
            appended, err = await self._store(gid, records)
            if err and not appended:
                self.groups[gid] = before
                log.warning("group %s: removing member %s (%s) failed to be stored: error %d", gid, mid, why, err)
                return
            log.info("group %s: member %s removed (%s); group epoch %d", gid, mid, why, g.group_epoch)

    async def shutdown(self) -> None:
        for timers in (self._session, self._rebalance):
            for t in timers.values():
                t.cancel()
            timers.clear()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
