"""ProducerIdManager: ids from blocks claimed in the store, never twice, one claim for
concurrent callers that find the block used up."""

import asyncio

import pytest

from broker.cluster.producer_ids import ProducerIdManager
from broker.cluster.store.file import FileMetadataStore


class CountingStore:
    """allocate_producer_id_block as the stores do it (consecutive blocks), counted and slow."""

    def __init__(self):
        self.claims = 0
        self.next = 0

    async def allocate_producer_id_block(self, broker_id, size):
        self.claims += 1
        await asyncio.sleep(0.01)  # a store round trip: callers pile up meanwhile
        start, self.next = self.next, self.next + size
        return start, start + size - 1


def test_ids_run_through_blocks_without_repeats():
    store = CountingStore()
    ids = ProducerIdManager(store, broker_id=1, block_size=3)

    async def run():
        return [await ids.generate() for _ in range(7)]

    assert asyncio.run(run()) == list(range(7))
    assert store.claims == 3


def test_concurrent_callers_share_one_claim():
    store = CountingStore()
    ids = ProducerIdManager(store, broker_id=1, block_size=100)

    async def run():
        return await asyncio.gather(*(ids.generate() for _ in range(50)))

    got = asyncio.run(run())
    assert sorted(got) == list(range(50))
    assert store.claims == 1


def test_ids_are_not_handed_out_again_after_a_restart(tmp_path):
    async def first_ids(n):
        store = FileMetadataStore(str(tmp_path))
        await store.start()
        try:
            ids = ProducerIdManager(store, broker_id=1, block_size=10)
            return [await ids.generate() for _ in range(n)]
        finally:
            await store.close()

    before = asyncio.run(first_ids(4))
    after = asyncio.run(first_ids(4))
    assert not set(before) & set(after)
    assert after[0] > max(before)


def test_a_store_failure_reaches_the_caller_and_the_next_call_claims_again():
    class Failing(CountingStore):
        async def allocate_producer_id_block(self, broker_id, size):
            if self.claims == 0:
                self.claims += 1
                raise OSError("disk full")
            return await super().allocate_producer_id_block(broker_id, size)

    store = Failing()
    ids = ProducerIdManager(store, broker_id=1, block_size=5)

    async def run():
        with pytest.raises(OSError):
            await ids.generate()
        return await ids.generate()

    assert asyncio.run(run()) == 0
