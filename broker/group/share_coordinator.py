"""KIP-932 share-group heartbeats on the group coordinator: the part of Kafka's
GroupMetadataManager that drives share groups (share_group.py) with time and storage.

It works as KIP-848's ConsumerGroupCoordinator does (consumer_coordinator.py, whose
storage path it reuses): a heartbeat is checked against the group's coordinator, applied
under the group's lock, its records (group_records.py) appended to the group's partition
of __consumer_offsets and waited for on the ISR before the answer; an append that fails
puts the group back as it was.

- A group id in use by a classic group (also one that only holds committed offsets) or
  by a KIP-848 consumer group is GROUP_ID_NOT_FOUND ("Group G is not a share group.", as Kafka 4.4
  answers: share groups are not converted to or from other types). Conversely a classic
  JoinGroup to a share group is INCONSISTENT_GROUP_PROTOCOL and a ConsumerGroupHeartbeat
  GROUP_ID_NOT_FOUND (coordinator.py, consumer_coordinator.py).
- A member heard from nothing within `group.share.session.timeout.ms` is removed (the
  group epoch goes up, its records get tombstones); members are told to heartbeat every
  `group.share.heartbeat.interval.ms`.
- Listeners (`add_listener`, Kafka's ShareGroupListener) learn of a member that left,
  was fenced out or expired (`on_member_left(group_id, member_id)`) and of a deleted group
  (`on_group_deleted(group_id)`): the share-partition manager releases what that member
  had acquired.

Served by handlers/share_group_heartbeat.py and share_group_describe.py; ListGroups,
DeleteGroups and DescribeGroups see share groups through `groups`; everything runs on the
broker's event loop.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Protocol

from broker.group import group_records as GR
from broker.group.consumer_coordinator import _WRITE_ERRORS
from broker.group.consumer_group import HeartbeatError, TopicsView
from broker.group.group import GroupState
from broker.group.metadata_manager import OFFSETS_TOPIC, GroupMetadataManager, now_ms
from broker.group.share_group import ShareGroup, ShareHeartbeat, ShareHeartbeatResult
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

__all__ = ["ShareGroupCoordinator", "ShareGroupListener", "share_group_settings"]

DEFAULT_SESSION_TIMEOUT_MS = 45000
DEFAULT_HEARTBEAT_INTERVAL_MS = 5000
DEFAULT_MAX_SIZE = 200


class ShareGroupListener(Protocol):
    def on_member_left(self, group_id: str, member_id: str) -> None: ...

    def on_group_deleted(self, group_id: str) -> None: ...


def share_group_settings(config: object, group_id: str) -> tuple[int, int]:
    """(session timeout ms, heartbeat interval ms) of a share group: the broker's
    `group.share.*` defaults (a broker without group configs; the broker passes its own,
    which reads `share.session.timeout.ms` / `share.heartbeat.interval.ms` first:
    broker/group/group_configs.py)."""
    return config["group.share.session.timeout.ms"], config["group.share.heartbeat.interval.ms"]  # type: ignore[index]


class ShareGroupCoordinator:
    def __init__(
        self,
        manager: GroupMetadataManager,
        topic_names: Callable[[], Iterable[str]],
        settings: Callable[[str], tuple[int, int]] = lambda gid: (
            DEFAULT_SESSION_TIMEOUT_MS,
            DEFAULT_HEARTBEAT_INTERVAL_MS,
        ),
        max_size: int = DEFAULT_MAX_SIZE,
        enabled: bool = True,
    ) -> None:
        self.manager = manager
        self.groups = manager.share_groups  # the manager's dict, shared (loads fill it)
        self.topic_names = topic_names
        self.settings = settings
        self.max_size = max_size
        self.enabled = enabled
        self._listeners: list[ShareGroupListener] = []
        self._locks: dict[str, asyncio.Lock] = {}
        self._session: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        manager.on_share_group_loaded = self._loaded
        manager.on_share_group_unloaded = self._unloaded

    # ------------------------------------------------------------------ listeners

    def add_listener(self, listener: ShareGroupListener) -> None:
        self._listeners.append(listener)

    def _member_left(self, group_id: str, member_id: str) -> None:
        for listener in self._listeners:
            try:
                listener.on_member_left(group_id, member_id)
            except Exception:
                log.exception("share group %s: a listener failed on member %s leaving", group_id, member_id)

    def _group_deleted(self, group_id: str) -> None:
        for listener in self._listeners:
            try:
                listener.on_group_deleted(group_id)
            except Exception:
                log.exception("share group %s: a listener failed on its deletion", group_id)

    # ------------------------------------------------------------------ views

    def topics(self) -> TopicsView:
        out: dict[str, tuple[uuid.UUID, int]] = {}
        for name in self.topic_names():
            info = self.manager.metadata.topic(name)
            if info is not None:
                out[name] = (info.topic_id, len(info.partitions))
        return TopicsView(out)

    def topic_ids(self) -> dict[uuid.UUID, str]:
        """topic id -> name, for the answers that name the assigned topics."""
        return {tid: name for name, (tid, _) in self.topics().by_name.items()}

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.settings(group_id)[1]

    def describe(self, group_id: str) -> tuple[int, str | None, ShareGroup | None]:
        """(error, message, group): GROUP_ID_NOT_FOUND for a group that is not a share
        group, with Kafka's message."""
        err = self.manager.check_coordinator(group_id)
        if err:
            return err, None, None
        g = self.groups.get(group_id)
        if g is not None:
            return 0, None, g
        if self._other_type(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.", None
        return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None

    def _other_type(self, group_id: str) -> bool:
        """Whether the id belongs to a group of another type: a KIP-848 consumer group, or a
        classic group (also an empty one that only holds committed offsets: Kafka's
        coordinator keeps it as a classic group)."""
        if group_id in self.manager.consumer_groups:
            return True
        classic = self.manager.groups.get(group_id)
        return classic is not None and not classic.is_(GroupState.DEAD)

    # ------------------------------------------------------------------ heartbeats

    async def heartbeat(self, req: ShareHeartbeat) -> ShareHeartbeatResult:
        """Raises HeartbeatError for an answer with an error code."""
        gid = req.group_id
        err = self.manager.check_coordinator(gid)
        if err:
            raise HeartbeatError(err, "")
        async with self._locks.setdefault(gid, asyncio.Lock()):
            if self._other_type(gid):
                raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
            g = self.groups.get(gid)
            created = g is None
            if g is None:
                if req.member_epoch != 0:
                    raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {gid} not found.")
                g = ShareGroup(gid)
            before = copy.deepcopy(g)
            try:
                result = g.heartbeat(req, self.topics(), self.max_size)
            except HeartbeatError:
                self._restore(gid, before, created)
                raise
            records = GR.share_records_after(g, result)
            if created:
                self.groups[gid] = g
            if records:
                appended, err = await self._store(gid, records)
                if err and not appended:
                    self._restore(gid, before, created)
                if err:
                    raise HeartbeatError(err, "")
            key = (gid, result.member_id)
            self._cancel(key)
            if result.left:
                log.info("share group %s: member %s left; group epoch %d", gid, result.member_id, g.group_epoch)
                self._member_left(gid, result.member_id)
            else:
                self._arm(key)
            return result

    async def _store(self, gid: str, records: list[GR.Record]) -> tuple[bool, int]:
        """Appends to the group's partition and waits for the ISR (as the consumer
        coordinator does): (whether the records are in the local log, 0 or the answer)."""
        p = self.manager.partition_for(gid)
        if not self.manager.writer.is_leader(TopicPartition(OFFSETS_TOPIC, p)):
            return False, ErrorCode.NOT_COORDINATOR
        write = self.manager.runtime.append(p, records, now_ms(), self.manager.config["request.timeout.ms"])
        if write.error:
            return False, _WRITE_ERRORS.get(write.error, write.error)
        err = await write.wait()
        return True, _WRITE_ERRORS.get(err, err)

    def _restore(self, gid: str, before: ShareGroup, created: bool) -> None:
        if created:
            self.groups.pop(gid, None)
        else:
            self.groups[gid] = before

    # ------------------------------------------------------------------ timers

    def _arm(self, key: tuple[str, str]) -> None:
        timeout_ms = self.settings(key[0])[0]
        self._session[key] = asyncio.get_running_loop().call_later(timeout_ms / 1000, self._expire, key)

    def _cancel(self, key: tuple[str, str]) -> None:
        t = self._session.pop(key, None)
        if t is not None:
            t.cancel()

    def _loaded(self, g: ShareGroup) -> None:
        """A group loaded from its partition (this broker became its coordinator): its
        members have a session to keep."""
        for mid in g.members:
            key = (g.group_id, mid)
            self._cancel(key)
            self._arm(key)

    def _unloaded(self, g: ShareGroup) -> None:
        for mid in g.members:
            self._cancel((g.group_id, mid))

    def _expire(self, key: tuple[str, str]) -> None:
        self._session.pop(key, None)
        task = asyncio.get_running_loop().create_task(self._remove(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _remove(self, key: tuple[str, str]) -> None:
        gid, mid = key
        async with self._locks.setdefault(gid, asyncio.Lock()):
            g = self.groups.get(gid)
            if g is None or mid not in g.members or key in self._session:
                return  # gone, or it heartbeated meanwhile
            before = copy.deepcopy(g)
            g.remove_member(mid)
            records = GR.share_records_after(
                g, ShareHeartbeatResult(mid, -1, None, group_epoch_changed=True, left=True)
            )
            appended, err = await self._store(gid, records)
            if err and not appended:
                self.groups[gid] = before
                self._arm(key)  # try again after another session timeout
                log.warning("share group %s: removing member %s failed to be stored: error %d", gid, mid, err)
                return
            log.info("share group %s: member %s removed (session timeout); group epoch %d", gid, mid, g.group_epoch)
            self._member_left(gid, mid)

    # ------------------------------------------------------------------ deletion

    async def delete(self, group_id: str) -> int | None:
        """DeleteGroups of a share group: NON_EMPTY_GROUP while it has members, else its
        records get their tombstones and it goes (0). None: not a share group here."""
        g = self.groups.get(group_id)
        if g is None:
            return None
        async with self._locks.setdefault(group_id, asyncio.Lock()):
            g = self.groups.get(group_id)
            if g is None:
                return ErrorCode.GROUP_ID_NOT_FOUND
            if g.members:
                return ErrorCode.NON_EMPTY_GROUP
            _, err = await self._store(group_id, GR.share_group_tombstones(g))
            if err:
                return int(err)
            self.groups.pop(group_id, None)
        log.info("share group %s deleted", group_id)
        self._group_deleted(group_id)
        return 0

    async def shutdown(self) -> None:
        for t in self._session.values():
            t.cancel()
        self._session.clear()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
