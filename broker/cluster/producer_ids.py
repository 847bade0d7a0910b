"""Producer ids for idempotent (and later transactional) producers (Kafka's
ProducerIdManager, ZooKeeper flavour).

Ids are claimed from the metadata store in blocks (`/latest_producer_id_block` in
ZooKeeper, a counter in the embedded store): a block is this broker's alone, so brokers of
a cluster never hand out the same id, and an id is never handed out twice, also across
restarts (a block half used when the broker stops is abandoned, as in Kafka).

`generate()` runs on the event loop; concurrent callers that find the block used up wait
for one claim (one store write), not one each.
"""

from __future__ import annotations

import asyncio

from broker.cluster.metadata import MetadataStore

PRODUCER_ID_BLOCK = 1000


class ProducerIdManager:
    def __init__(self, store: MetadataStore, broker_id: int, block_size: int = PRODUCER_ID_BLOCK) -> None:
        self.store = store
        self.broker_id = broker_id
        self.block_size = block_size
        self._next = 0
        self._end = -1  # the last id of the current block; -1: none claimed yet
        self._claiming = asyncio.Lock()

    async def generate(self) -> int:
        """The next unused producer id. Raises what the store raises when no block can be
        claimed (the caller answers COORDINATOR_NOT_AVAILABLE)."""
        while self._next > self._end:
            async with self._claiming:
                if self._next > self._end:
                    self._next, self._end = await self.store.allocate_producer_id_block(self.broker_id, self.block_size)
        pid = self._next
        self._next += 1
        return pid
