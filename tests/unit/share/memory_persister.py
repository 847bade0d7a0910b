"""Interface 1's persister kept in memory, for the delivery side's tests only (the broker
serves share groups with the share coordinator's, on __share_group_state): the writes
merge into the state as the share coordinator merges them (a batch replaces what it
covers; offsets below the new start go)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass
class ShareState:
    error: int
    state_epoch: int = -1
    start_offset: int = -1
    delivery_complete_count: int = -1
    leader_epoch: int = -1
    batches: list[StateBatch] = field(default_factory=list)


class MemoryPersister:
    def __init__(self) -> None:
        self.states: dict[tuple[str, uuid.UUID, int], ShareState] = {}
        self.writes = 0

    async def initialize(self, group_id, topic_id, partition, state_epoch, start_offset) -> int:
        self.states[(group_id, topic_id, partition)] = ShareState(0, state_epoch, start_offset)
        return 0

    async def read(self, group_id, topic_id, partition, leader_epoch) -> ShareState:
        st = self.states.get((group_id, topic_id, partition))
        if st is None:
            return ShareState(0)
        return ShareState(0, st.state_epoch, st.start_offset, -1, st.leader_epoch, list(st.batches))

    async def write(
        self,
        group_id,
        topic_id,
        partition,
        state_epoch,
        leader_epoch,
        start_offset,
        batches,
        delivery_complete_count=-1,
    ) -> int:
        self.writes += 1
        st = self.states.setdefault((group_id, topic_id, partition), ShareState(0, state_epoch, start_offset))
        per: dict[int, tuple[int, int]] = {}
        for b in st.batches:
            for o in range(b.first_offset, b.last_offset + 1):
                per[o] = (b.delivery_state, b.delivery_count)
        for b in batches:
            for o in range(b.first_offset, b.last_offset + 1):
                per[o] = (b.delivery_state, b.delivery_count)
        st.start_offset = max(st.start_offset, start_offset)
        st.leader_epoch = leader_epoch
        out: list[StateBatch] = []
        for o in sorted(k for k in per if k >= st.start_offset):
            s, n = per[o]
            if out and out[-1].last_offset + 1 == o and (out[-1].delivery_state, out[-1].delivery_count) == (s, n):
                out[-1] = StateBatch(out[-1].first_offset, o, s, n)
            else:
                out.append(StateBatch(o, o, s, n))
        st.batches = out
        return 0

    async def delete(self, group_id, partitions):
        for tid, p in partitions:
            self.states.pop((group_id, tid, p), None)
        return {(tid, p): 0 for tid, p in partitions}

    async def read_summary(self, group_id, partitions):
        return {(tid, p): self.states.get((group_id, tid, p), ShareState(0)) for tid, p in partitions}
