"""The group coordinator (Kafka's classic GroupCoordinator): group membership.

Joins, syncs, heartbeats and leaves drive each group's state machine (group.py); the
assignment itself is computed by the group leader (a client) and relayed here. Timers
(session expiry, rebalance timeout, initial rebalance delay) are asyncio TimerHandles on
the broker's loop; everything runs on that loop.

What is stored — committed offsets, group metadata after each rebalance, tombstones — and
where (the group's partition of __consumer_offsets, loaded when this broker leads it) is
the metadata manager's (metadata_manager.py); the coordinator asks it to store and is
told when groups are loaded or unloaded.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from broker.group import group_records as CR, records as R
from broker.group.group import Group, GroupState, Member
from broker.group.metadata_manager import GroupMetadataManager, now_ms
from broker.group.records import OffsetAndMetadata
from broker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

NO_GENERATION = -1

S = GroupState


@dataclass
class JoinResult:
    error: int = 0
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass
class SyncResult:
    error: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class GroupCoordinator:
    def __init__(self, config: Any, manager: GroupMetadataManager) -> None:
        self.config = config
        self.manager = manager
        self.groups = manager.groups  # the manager's dict, shared
        self.rebalances = 0  # completed rebalances (new generations), for the metrics
        manager.on_group_loaded = self._after_load
        manager.on_group_unloaded = self._unloaded

    # ------------------------------------------------------------------ lifecycle

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    async def startup(self) -> None:
        await self.manager.startup()

    async def shutdown(self) -> None:
        await self.manager.shutdown()
        for g in self.groups.values():
            self._cancel_timers(g)
            for m in g.members.values():
                self._answer(m, None, None)

    def check_coordinator(self, group_id: str) -> int:
        return self.manager.check_coordinator(group_id)

    def has_offsets_topic(self) -> bool:
        return self.manager.has_offsets_topic()

    async def ensure_offsets_topic(self) -> None:
        await self.manager.ensure_offsets_topic()

    def coordinator_node(self, group_id: str) -> int:
        return self.manager.coordinator_node(group_id)

    def _after_load(self, g: Group) -> None:
        if g.members:
            g.state = S.STABLE
            for m in g.members.values():
                self._schedule_heartbeat(g, m)
        else:
            g.state = S.EMPTY
            if g.protocol_type is None:
                g.protocol_type = ""

    def _unloaded(self, g: Group) -> None:
        """The group's partition moved away: its members find the new coordinator."""
        self._cancel_timers(g)
        for m in g.members.values():
            self._answer(
                m, JoinResult(ErrorCode.NOT_COORDINATOR, member_id=m.member_id), SyncResult(ErrorCode.NOT_COORDINATOR)
            )

    @staticmethod
    def _answer(m: Member, join: JoinResult | None, sync: SyncResult | None) -> None:
        """Answers the member's JoinGroup and SyncGroup still waiting (None: the
        coordinator is shutting down)."""
        if m.join_future is not None and not m.join_future.done():
            m.join_future.set_result(join)
        if m.sync_future is not None and not m.sync_future.done():
            m.sync_future.set_result(sync)

    # ------------------------------------------------------------------ timers

    def _cancel_timers(self, g: Group) -> None:
        if g.join_timer is not None:
            g.join_timer.cancel()
            g.join_timer = None
        for m in g.members.values():
            if m.heartbeat_timer is not None:
                m.heartbeat_timer.cancel()
                m.heartbeat_timer = None
        for h in g.pending_members.values():
            if h is not None:
                h.cancel()

    def _schedule_heartbeat(self, g: Group, m: Member) -> None:
        if m.heartbeat_timer is not None:
            m.heartbeat_timer.cancel()
        m.heartbeat_timer = self.loop.call_later(m.session_timeout_ms / 1000, self._member_expired, g, m)

    def _member_expired(self, g: Group, m: Member) -> None:
        if g.members.get(m.member_id) is not m or g.is_(S.DEAD):
            return
        if m.awaiting_join:
            return  # the rebalance timeout governs members waiting in JoinGroup
        log.info("group %s: member %s session expired (%d ms)", g.group_id, m.member_id, m.session_timeout_ms)
        self._remove_member_and_update(g, m, "session timeout")

    def _set_state(self, g: Group, state: GroupState) -> None:
        g.state = state
        g.state_timestamp = now_ms()

    # ------------------------------------------------------------------ rebalance

    def _prepare_rebalance(self, g: Group, reason: str) -> None:
        if g.is_(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(g, ErrorCode.REBALANCE_IN_PROGRESS)
        if g.join_timer is not None:
            g.join_timer.cancel()
        initial = g.is_(S.EMPTY)
        rebalance_ms = max(g.max_rebalance_timeout_ms, 0)
        self._set_state(g, S.PREPARING_REBALANCE)
        log.info("group %s: preparing rebalance (generation %d): %s", g.group_id, g.generation_id, reason)
        if initial:
            delay_ms = min(self.config["group.initial.rebalance.delay.ms"], rebalance_ms)
            g.initial_rebalance = True
            g.new_member_added = False
            self._schedule_initial_join(g, delay_ms, rebalance_ms - delay_ms)
        else:
            g.initial_rebalance = False
            g.join_timer = self.loop.call_later(rebalance_ms / 1000, self._join_timeout, g)
            self._try_complete_join(g)

    def _schedule_initial_join(self, g: Group, delay_ms: int, remaining_ms: int) -> None:
        def fire() -> None:
            g.join_timer = None
            if not g.is_(S.PREPARING_REBALANCE):
                return
            if g.new_member_added and remaining_ms > 0:
                g.new_member_added = False
                step = min(self.config["group.initial.rebalance.delay.ms"], remaining_ms)
                self._schedule_initial_join(g, step, remaining_ms - step)
                return
            g.initial_rebalance = False
            self._complete_join(g)

        g.join_timer = self.loop.call_later(delay_ms / 1000, fire)

    def _join_timeout(self, g: Group) -> None:
        g.join_timer = None
        if g.is_(S.PREPARING_REBALANCE):
            self._complete_join(g)

    def _try_complete_join(self, g: Group) -> None:
        if g.is_(S.PREPARING_REBALANCE) and not g.initial_rebalance and g.all_joined():
            if g.join_timer is not None:
                g.join_timer.cancel()
                g.join_timer = None
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        # members that did not rejoin in time are out (static ones too, as in Kafka)
        for m in [m for m in g.members.values() if not m.awaiting_join]:
            log.info("group %s: removing member %s (did not rejoin)", g.group_id, m.member_id)
            self._remove_member(g, m)
        for _mid, h in list(g.pending_members.items()):
            if h is not None:
                h.cancel()
        g.pending_members.clear()
        g.generation_id += 1
        self.rebalances += 1
        if not g.members:
            g.protocol_name = None
            g.leader_id = None
            self._set_state(g, S.EMPTY)
            log.info("group %s: empty at generation %d", g.group_id, g.generation_id)
            # appended before whatever caused this (a LeaveGroup, an expiry) is answered,
            # as Kafka does: a crash right after must not bring the old members back
            _, write = self.manager.append(g.group_id, [self.manager.group_record(g)], offsets=False)
            if write is not None:
                self.loop.create_task(self.manager.await_durable(write, False))
            return
        g.protocol_name = g.select_protocol()
        if g.leader_id not in g.members:
            g.leader_id = next(iter(g.members))
        self._set_state(g, S.COMPLETING_REBALANCE)
        log.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            g.group_id,
            g.generation_id,
            len(g.members),
            g.protocol_name,
            g.leader_id,
        )
        members = [(m.member_id, m.group_instance_id, m.metadata_for(g.protocol_name)) for m in g.members.values()]
        for m in g.members.values():
            res = JoinResult(
                0,
                g.generation_id,
                g.protocol_type,
                g.protocol_name,
                g.leader_id,
                m.member_id,
                members if m.member_id == g.leader_id else [],
            )
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(res)
            m.join_future = None
            m.is_new = False
            self._schedule_heartbeat(g, m)

    def _reset_and_propagate_assignment_error(self, g: Group, error: int) -> None:
        for m in g.members.values():
            m.assignment = b""
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result(SyncResult(error))
            m.sync_future = None

    def _remove_member(self, g: Group, m: Member) -> None:
        g.members.pop(m.member_id, None)
        if m.group_instance_id and g.static_members.get(m.group_instance_id) == m.member_id:
            del g.static_members[m.group_instance_id]
        if m.heartbeat_timer is not None:
            m.heartbeat_timer.cancel()
            m.heartbeat_timer = None
        self._answer(
            m, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=m.member_id), SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        )

    def _remove_member_and_update(self, g: Group, m: Member, reason: str) -> None:
        self._remove_member(g, m)
        if g.is_(S.STABLE) or g.is_(S.COMPLETING_REBALANCE):
            self._prepare_rebalance(g, f"removing member {m.member_id}: {reason}")
        elif g.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(g)

    async def _store_group(self, g: Group) -> int:
        return await self.manager.store(g.group_id, [self.manager.group_record(g)], offsets=False)

    # ------------------------------------------------------------------ JoinGroup

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        reason: str | None = None,
    ) -> JoinResult:
        err = self.check_coordinator(group_id)
        if err:
            return JoinResult(err, member_id=member_id)
        if not (
            self.config["group.min.session.timeout.ms"]
            <= session_timeout_ms
            <= self.config["group.max.session.timeout.ms"]
        ):
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        if group_id in self.manager.share_groups:
            # Kafka 4.4: a share group is never converted; a classic join is refused
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        cg = self.manager.consumer_groups.get(group_id)
        if cg is not None:
            # a KIP-848 group: a classic member may not join one with members (Kafka with
            # group.consumer.migration.policy=disabled); an empty one becomes classic again
            if cg.members:
                return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
            err = await self.manager.store(group_id, CR.group_tombstones(cg), offsets=False)
            if err:
                return JoinResult(err, member_id=member_id)
            self.manager.consumer_groups.pop(group_id, None)
        names = {n for n, _ in protocols}
        g = self.groups.get(group_id)
        if g is None:
            if member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
            g = Group(group_id, state_timestamp=now_ms())
        if g.is_(S.DEAD):
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=member_id)
        if not g.supports_protocols(protocol_type, names):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id)
        # a new group exists only once a join was accepted (no empty leftovers of bad joins)
        self.groups.setdefault(group_id, g)
        if member_id and member_id not in g.pending_members:
            # Kafka's order: a fenced static member first, then an unknown member id (or a
            # static member whose instance id the group does not know)
            err = self._validate_member(g, member_id, group_instance_id)
            if not err and group_instance_id and group_instance_id not in g.static_members:
                err = ErrorCode.UNKNOWN_MEMBER_ID
            if err:
                return JoinResult(err, member_id=member_id)
        if not member_id or member_id in g.pending_members:
            return await self._join_new_member(
                g,
                member_id,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                protocols,
                require_known_member_id,
            )
        return await self._join_existing_member(
            g, g.members[member_id], protocols, session_timeout_ms, rebalance_timeout_ms
        )

    async def _join_new_member(
        self,
        g: Group,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        session_ms: int,
        rebalance_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known: bool,
    ) -> JoinResult:
        if instance_id and instance_id in g.static_members:
            return await self._rejoin_static(
                g, instance_id, client_id, client_host, session_ms, rebalance_ms, protocols
            )
        if len(g.members) >= self.config["group.max.size"]:
            return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id=member_id)
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known and not instance_id:
                # KIP-394: hand out the id; the member rejoins with it within its session timeout
                def expire_pending(mid: str = member_id) -> None:
                    if g.pending_members.pop(mid, "gone") != "gone":
                        self._try_complete_join(g)

                g.pending_members[member_id] = self.loop.call_later(session_ms / 1000, expire_pending)
                return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
        handle = g.pending_members.pop(member_id, None)
        if handle is not None:
            handle.cancel()
        m = Member(
            member_id,
            instance_id,
            client_id,
            client_host,
            session_ms,
            rebalance_ms,
            protocol_type,
            [(n, bytes(md)) for n, md in protocols],
            is_new=True,
        )
        if not g.members:
            g.protocol_type = protocol_type
        g.members[member_id] = m
        if instance_id:
            g.static_members[instance_id] = member_id
        g.new_member_added = True
        fut = m.join_future = self.loop.create_future()
        self._schedule_heartbeat(g, m)
        if g.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(g)
        else:
            self._prepare_rebalance(g, f"adding new member {member_id}")
        return await self._await_join(fut, m)

    async def _rejoin_static(
        self,
        g: Group,
        instance_id: str,
        client_id: str,
        client_host: str,
        session_ms: int,
        rebalance_ms: int,
        protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        """A static member restarted (KIP-345): it takes over its old identity under a new
        member id; a stable group with unchanged subscriptions does not rebalance."""
        old = g.members[g.static_members[instance_id]]
        new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        unchanged = old.matches(protocols)
        self._answer(old, JoinResult(ErrorCode.FENCED_INSTANCE_ID), SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        if old.heartbeat_timer is not None:
            old.heartbeat_timer.cancel()
        del g.members[old.member_id]
        m = Member(
            new_id,
            instance_id,
            client_id,
            client_host,
            session_ms,
            rebalance_ms,
            old.protocol_type,
            [(n, bytes(md)) for n, md in protocols],
            old.assignment,
        )
        g.members[new_id] = m
        g.static_members[instance_id] = new_id
        if g.leader_id == old.member_id:
            g.leader_id = new_id
        self._schedule_heartbeat(g, m)
        if g.is_(S.STABLE) and unchanged:
            err = await self._store_group(g)
            if err:
                return JoinResult(err, member_id=new_id)
            members = []
            if new_id == g.leader_id:
                members = [
                    (x.member_id, x.group_instance_id, x.metadata_for(g.protocol_name)) for x in g.members.values()
                ]
            return JoinResult(
                0,
                g.generation_id,
                g.protocol_type,
                g.protocol_name,
                g.leader_id,
                new_id,
                members,
                skip_assignment=new_id == g.leader_id,
            )
        fut = m.join_future = self.loop.create_future()
        if g.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(g)
        else:
            self._prepare_rebalance(g, f"static member {instance_id} rejoined with new metadata")
        return await self._await_join(fut, m)

    async def _join_existing_member(
        self, g: Group, m: Member, protocols: list[tuple[str, bytes]], session_ms: int, rebalance_ms: int
    ) -> JoinResult:
        m.session_timeout_ms = session_ms
        m.rebalance_timeout_ms = rebalance_ms
        if g.is_(S.PREPARING_REBALANCE):
            m.protocols = [(n, bytes(md)) for n, md in protocols]
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=m.member_id))
            fut = m.join_future = self.loop.create_future()
            self._schedule_heartbeat(g, m)
            self._try_complete_join(g)
            return await self._await_join(fut, m)
        if g.is_(S.COMPLETING_REBALANCE) or g.is_(S.STABLE):
            same = m.matches(protocols)
            if same and (g.is_(S.COMPLETING_REBALANCE) or m.member_id != g.leader_id):
                # nothing changed: the member gets the current generation again
                self._schedule_heartbeat(g, m)
                members = []
                if m.member_id == g.leader_id:
                    members = [
                        (x.member_id, x.group_instance_id, x.metadata_for(g.protocol_name)) for x in g.members.values()
                    ]
                return JoinResult(
                    0, g.generation_id, g.protocol_type, g.protocol_name, g.leader_id, m.member_id, members
                )
            m.protocols = [(n, bytes(md)) for n, md in protocols]
            fut = m.join_future = self.loop.create_future()
            self._schedule_heartbeat(g, m)
            self._prepare_rebalance(g, f"member {m.member_id} rejoined" + ("" if same else " with new metadata"))
            return await self._await_join(fut, m)
        return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=m.member_id)

    async def _await_join(self, fut: asyncio.Future[JoinResult | None], m: Member) -> JoinResult:
        # `fut` is passed in, not read back from m.join_future: completing the join (which
        # may happen synchronously, when this member is the last one the rebalance waited
        # for) resets m.join_future to None
        res = await fut
        if res is None:
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=m.member_id)
        return res

    @staticmethod
    def _validate_member(g: Group, member_id: str, group_instance_id: str | None) -> int:
        """Kafka's validateCurrentMember: FENCED_INSTANCE_ID when the instance id belongs
        to another member id, UNKNOWN_MEMBER_ID when the member is not in the group."""
        if group_instance_id:
            known = g.static_members.get(group_instance_id)
            if known is not None and known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in g.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return 0

    # ------------------------------------------------------------------ SyncGroup

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        err = self.check_coordinator(group_id)
        if err:
            return SyncResult(err)
        g = self.groups.get(group_id)
        if g is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        err = self._validate_member(g, member_id, group_instance_id)
        if err:
            return SyncResult(err)
        m = g.members[member_id]
        if generation_id != g.generation_id:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != g.protocol_type) or (
            protocol_name is not None and protocol_name != g.protocol_name
        ):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if g.is_(S.PREPARING_REBALANCE) or g.is_(S.EMPTY):
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        self._schedule_heartbeat(g, m)
        if g.is_(S.STABLE):
            return SyncResult(0, g.protocol_type, g.protocol_name, m.assignment)
        # CompletingRebalance
        if m.sync_future is None or m.sync_future.done():
            m.sync_future = self.loop.create_future()
        fut = m.sync_future
        if member_id == g.leader_id:
            generation = g.generation_id
            for mid, member in g.members.items():
                member.assignment = bytes(assignments.get(mid, b""))
            err = await self._store_group(g)
            if g.generation_id != generation or not g.is_(S.COMPLETING_REBALANCE):
                return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
            if err:
                self._reset_and_propagate_assignment_error(g, err)
                self._prepare_rebalance(g, f"cannot store the assignment ({ErrorCode(err).name})")
                return SyncResult(err)
            self._set_state(g, S.STABLE)
            log.info("group %s: stable at generation %d", g.group_id, g.generation_id)
            for member in g.members.values():
                if member.sync_future is not None and not member.sync_future.done():
                    member.sync_future.set_result(SyncResult(0, g.protocol_type, g.protocol_name, member.assignment))
                member.sync_future = None
        res = await fut
        return res if res is not None else SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)

    # ------------------------------------------------------------------ Heartbeat / LeaveGroup

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> int:
        err = self.check_coordinator(group_id)
        if err:
            return err
        g = self.groups.get(group_id)
        if g is None or g.is_(S.EMPTY) or g.is_(S.DEAD):
            return ErrorCode.UNKNOWN_MEMBER_ID
        err = self._validate_member(g, member_id, group_instance_id)
        if err:
            return err
        if generation_id != g.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        m = g.members[member_id]
        self._schedule_heartbeat(g, m)
        if g.is_(S.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return 0

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        err = self.check_coordinator(group_id)
        if err:
            return err, [err] * len(members)
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, [ErrorCode.UNKNOWN_MEMBER_ID] * len(members)
        results: list[int] = []
        for member_id, instance_id in members:
            if instance_id:
                known = g.static_members.get(instance_id)
                if known is None:
                    results.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != known:
                    results.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
                member_id = known
            m = g.members.get(member_id)
            if m is None:
                if member_id in g.pending_members:
                    h = g.pending_members.pop(member_id)
                    if h is not None:
                        h.cancel()
                    self._try_complete_join(g)
                    results.append(0)
                else:
                    results.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            log.info("group %s: member %s leaves", g.group_id, member_id)
            self._remove_member_and_update(g, m, "the member left the group")
            results.append(0)
        top = results[0] if len(results) == 1 else 0
        return top, results

    # ------------------------------------------------------------------ offsets

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], OffsetAndMetadata],
    ) -> dict[tuple[str, int], int]:
        err = self.check_coordinator(group_id)
        if err:
            return {tp: err for tp in offsets}
        if group_id in self.manager.share_groups:
            # Kafka's ShareGroup.validateOffsetCommit: a share group has no committed offsets
            return {tp: ErrorCode.GROUP_ID_NOT_FOUND for tp in offsets}
        g = self.groups.get(group_id)
        cg = self.manager.consumer_groups.get(group_id)
        if cg is not None:
            # a KIP-848 group: a member commits at its epoch; others only to an empty group
            err = self.validate_consumer_member(group_id, member_id, generation_id, commit=True)
            if err:
                return {tp: err for tp in offsets}
            if g is None:
                g = self.groups[group_id] = Group(group_id, protocol_type="", state_timestamp=now_ms())
            return await self.manager.store_offsets(g, offsets)
        if generation_id < 0 and not member_id:
            # a "simple" commit: the group must not be managed by a consumer group
            if g is not None and not g.is_(S.EMPTY) and not g.is_(S.DEAD):
                return {tp: ErrorCode.UNKNOWN_MEMBER_ID for tp in offsets}
            if g is None:
                g = self.groups[group_id] = Group(group_id, protocol_type="", state_timestamp=now_ms())
        else:
            if g is None:
                # Kafka: a commit with a generation (or member id) for a group it does not
                # know comes from an older generation
                return {tp: ErrorCode.ILLEGAL_GENERATION for tp in offsets}
            err = self._validate_member(g, member_id, group_instance_id)
            if err:
                return {tp: err for tp in offsets}
            if generation_id != g.generation_id:
                return {tp: ErrorCode.ILLEGAL_GENERATION for tp in offsets}
            if g.is_(S.COMPLETING_REBALANCE):
                return {tp: ErrorCode.REBALANCE_IN_PROGRESS for tp in offsets}
            self._schedule_heartbeat(g, g.members[member_id])
        return await self.manager.store_offsets(g, offsets)

    def validate_consumer_member(self, group_id: str, member_id: str | None, epoch: int, commit: bool) -> int:
        """0, or why a KIP-848 group refuses an offset commit (or fetch) of `member_id` at
        `epoch` (Kafka's ConsumerGroup.validateOffsetCommit / validateOffsetFetch): a
        commit without member from an admin only while the group has no member, a
        member's only at its epoch (STALE_MEMBER_EPOCH), an unknown member
        UNKNOWN_MEMBER_ID. A group that is not a KIP-848 group: 0."""
        cg = self.manager.consumer_groups.get(group_id)
        if cg is None:
            return 0
        if epoch < 0 and not member_id:
            return ErrorCode.UNKNOWN_MEMBER_ID if commit and cg.members else 0
        m = cg.members.get(member_id or "")
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch != m.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return 0

    def validate_consumer_txn_member(
        self, group_id: str, member_id: str, epoch: int, group_instance_id: str | None
    ) -> int:
        """0, or why a KIP-848 group refuses a transactional offset commit (Kafka 4.4's
        ConsumerGroup.validateOffsetCommit with isTransactional): a producer without group
        metadata (epoch -1, no member, no instance id) commits whatever the members, as does
        anyone while the group has none; otherwise the member must exist (UNKNOWN_MEMBER_ID)
        and commit at its epoch (STALE_MEMBER_EPOCH; Kafka 4.4 also takes an older epoch for
        partitions the member has owned since it, which kbroker does not track)."""
        cg = self.manager.consumer_groups.get(group_id)
        if cg is None:
            return 0
        if epoch < 0 and not cg.members:
            return 0
        if epoch == -1 and not member_id and group_instance_id is None:
            return 0
        m = cg.members.get(member_id)
        if m is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if epoch != m.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return 0

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> tuple[int, dict[tuple[str, int], OffsetAndMetadata | None]]:
        if group_id in self.manager.share_groups and not self.check_coordinator(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}  # Kafka's ShareGroup.validateOffsetFetch
        return self.manager.fetch_offsets(group_id, partitions)

    async def commit_txn_offsets(
        self,
        group_id: str,
        pid: int,
        epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], OffsetAndMetadata],
    ) -> dict[tuple[str, int], int]:
        """TxnOffsetCommit (Kafka's handleTxnCommitOffsets): KIP-447 fences a member of an
        older generation (ILLEGAL_GENERATION) or an unknown one (UNKNOWN_MEMBER_ID); a
        producer without group metadata (generation -1, no member) commits as a
        standalone one. The offsets are visible only once the transaction commits.
        A KIP-848 group's member commits at its member epoch (validate_consumer_txn_member)."""
        err = self.check_coordinator(group_id)
        if err:
            return {tp: err for tp in offsets}
        if group_id in self.manager.share_groups:
            return {tp: ErrorCode.GROUP_ID_NOT_FOUND for tp in offsets}
        g = self.groups.get(group_id)
        if group_id in self.manager.consumer_groups:
            err = self.validate_consumer_txn_member(group_id, member_id, generation_id, group_instance_id)
            if err:
                return {tp: err for tp in offsets}
            if g is None:
                g = self.groups[group_id] = Group(group_id, protocol_type="", state_timestamp=now_ms())
            return await self.manager.store_txn_offsets(g, pid, epoch, offsets)
        if g is None:
            if generation_id >= 0 or member_id:
                return {tp: ErrorCode.ILLEGAL_GENERATION for tp in offsets}
            g = self.groups[group_id] = Group(group_id, protocol_type="", state_timestamp=now_ms())
        elif member_id or generation_id >= 0:
            if member_id and not g.has_member(member_id):
                return {tp: ErrorCode.UNKNOWN_MEMBER_ID for tp in offsets}
            if group_instance_id and g.static_members.get(group_instance_id) not in (None, member_id):
                return {tp: ErrorCode.FENCED_INSTANCE_ID for tp in offsets}
            if generation_id >= 0 and generation_id != g.generation_id:
                return {tp: ErrorCode.ILLEGAL_GENERATION for tp in offsets}
        return await self.manager.store_txn_offsets(g, pid, epoch, offsets)

    def complete_txn_offsets(self, partition: int, pid: int, commit: bool) -> None:
        self.manager.complete_txn_offsets(partition, pid, commit)

    def has_pending_txn_offset(self, group_id: str, tp: tuple[str, int]) -> bool:
        return self.manager.has_pending_txn_offset(group_id, tp)

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        err = self.check_coordinator(group_id)
        if err:
            return err, {}
        g = self.groups.get(group_id)
        if g is None or g.is_(S.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        subscribed = g.subscribed_topics() if not g.is_(S.EMPTY) else set()
        if subscribed is None and not g.is_(S.EMPTY):
            return ErrorCode.NON_EMPTY_GROUP, {}
        result: dict[tuple[str, int], int] = {}
        tombstones: list[tuple[bytes, bytes | None]] = []
        gone: list[tuple[str, int]] = []
        for tp in partitions:
            if tp[0] in (subscribed or set()):
                result[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            result[tp] = 0
            if tp in g.offsets:
                tombstones.append((R.offset_key(group_id, tp[0], tp[1]), None))
                gone.append(tp)
        if tombstones:
            err = await self.manager.store(group_id, tombstones)
            if err:
                return err, {}
            for tp in gone:
                g.offsets.pop(tp, None)
        return 0, result

    # ------------------------------------------------------------------ describe / list / delete

    def describe_group(self, group_id: str) -> tuple[int, Group | None]:
        err = self.check_coordinator(group_id)
        if err:
            return err, None
        return 0, self.groups.get(group_id)

    def list_groups(self, states: set[str] | None = None) -> list[Group]:
        out = []
        for g in self.groups.values():
            if g.is_(S.DEAD):
                continue
            if self.check_coordinator(g.group_id):
                continue
            if states and g.state.value.lower() not in {s.lower() for s in states}:
                continue
            out.append(g)
        return sorted(out, key=lambda g: g.group_id)

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        out = {}
        for gid in group_ids:
            err = self.check_coordinator(gid)
            if err:
                out[gid] = err
                continue
            g = self.groups.get(gid)
            cg = self.manager.consumer_groups.get(gid)
            if cg is not None:
                # a KIP-848 group: only once it has no member; its records and its offsets go
                if cg.members:
                    out[gid] = ErrorCode.NON_EMPTY_GROUP
                    continue
                tombstones: list[tuple[bytes, bytes | None]] = [
                    (R.offset_key(gid, t, p), None) for t, p in (g.offsets if g is not None else {})
                ]
                tombstones += CR.group_tombstones(cg)
                err = await self.manager.store(gid, tombstones)
                if err:
                    out[gid] = err
                    continue
                self.manager.consumer_groups.pop(gid, None)
                if g is not None:
                    g.state = S.DEAD
                    self.groups.pop(gid, None)
                out[gid] = 0
                continue
            if g is None or g.is_(S.DEAD):
                out[gid] = ErrorCode.GROUP_ID_NOT_FOUND
                continue
            if not g.is_(S.EMPTY):
                out[gid] = ErrorCode.NON_EMPTY_GROUP
                continue
            tombstones = [(R.offset_key(gid, t, p), None) for t, p in g.offsets]
            tombstones.append((R.group_key(gid), None))
            err = await self.manager.store(gid, tombstones)
            if err:
                out[gid] = err
                continue
            self._cancel_timers(g)
            g.state = S.DEAD
            self.groups.pop(gid, None)
            out[gid] = 0
        return out

    def topic_deleted(self, topic: str) -> int:
        return self.manager.topic_deleted(topic)

    async def expire_offsets(self, now: int | None = None) -> int:
        return await self.manager.expire_offsets(now)
