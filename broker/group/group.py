"""A consumer group's state (Kafka's GroupMetadata) and its members.

States and transitions, as in Kafka's classic group protocol:

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join, leave, expiry, metadata change--> PreparingRebalance
    PreparingRebalance --no member left--> Empty
    Empty --DeleteGroups / all offsets expired--> Dead

Invariants:
- generation_id increases by one each time a rebalance completes.
- In CompletingRebalance and Stable, every member is of the current generation and the
  leader is a member. Assignments are only handed out in Stable.
- A member awaiting a JoinGroup answer has `join_future`; awaiting SyncGroup, `sync_future`.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.group.records import OffsetAndMetadata

if TYPE_CHECKING:
    from broker.group.coordinator import JoinResult, SyncResult


class GroupState(str, enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    #: None as the result: the coordinator is shutting down
    join_future: asyncio.Future[JoinResult | None] | None = None
    sync_future: asyncio.Future[SyncResult | None] | None = None
    heartbeat_timer: asyncio.TimerHandle | None = None
    is_new: bool = False

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(protocol)

    def supports(self, names: set[str]) -> bool:
        return any(n in names for n, _ in self.protocols)

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise KeyError("no candidate protocol")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None and not self.sync_future.done()


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, asyncio.TimerHandle | None] = field(default_factory=dict)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    # transactional commits (TxnOffsetCommit) awaiting their transaction's marker, per producer id
    pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = field(default_factory=dict)
    state_timestamp: int = -1
    join_timer: asyncio.TimerHandle | None = None
    new_member_added: bool = False
    initial_rebalance: bool = False

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    @property
    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def candidate_protocols(self) -> set[str]:
        common = None
        for m in self.members.values():
            names = {n for n, _ in m.protocols}
            common = names if common is None else common & names
        return common or set()

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Whether a member with these protocols may join (Kafka's supportsProtocols)."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(self.candidate_protocols() & names)

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            v = m.vote(candidates)
            votes[v] = votes.get(v, 0) + 1
        # most votes; ties broken by the first member's preference order
        first = next(iter(self.members.values()))
        order = {n: i for i, (n, _) in enumerate(first.protocols)}
        return max(votes, key=lambda n: (votes[n], -order.get(n, 1 << 30)))

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), None if unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        from broker.protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription

        topics: set[str] = set()
        for m in self.members.values():
            try:
                sub, _ = ConsumerProtocolSubscription.decode_versioned(m.metadata_for(self.protocol_name))
            except (KeyError, ValueError):
                return None
            topics.update(sub.topics)
        return topics
