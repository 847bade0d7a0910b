"""Requests that wait for a partition to move (Kafka's DelayedOperationPurgatory).

A long-polling fetch, an acks=all produce and a group commit each wait until something
happens to a partition, or until their timeout. They register here, keyed by partition
and by what they wait for:

    high watermark moves   consumer fetches (ReplicaManager.fetch_records and
                           delayed_fetch.py), acks=all appends (the ISR has the batch:
                           client produces and the group coordinator's writes, through
                           ReplicaManager.append_records and delayed_produce.py)
    log end moves          follower fetches (they read up to the log end)

The ReplicaManager owns the one purgatory of a broker (`ReplicaManager.purgatory`) and
hands it to each Partition as its listener: the partition reports both moves here; a
topic's deletion or a change of leadership wakes everything watching its partitions, so
each waiter re-checks and finds its answer (an error, or data). A waiter re-checks its
own condition after every wake: waking is a hint, never a result. Every wait is the
replication layer's (DelayedProduce, DelayedFetch): the request handlers only await
what ReplicaManager.append_records and fetch_records return.

All methods run on the event loop thread. A wake costs one dict lookup when nobody
waits, so the partition can report every append.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable

HIGH_WATERMARK = 0
LOG_END = 1


class Purgatory:
    def __init__(self) -> None:
        # (partition key, HIGH_WATERMARK | LOG_END) -> futures of the requests watching it
        self._watchers: dict[tuple[Hashable, int], list[asyncio.Future[bool]]] = {}

    def __len__(self) -> int:
        return sum(len(w) for w in self._watchers.values())

    def watching(self) -> dict[int, int]:
        """HIGH_WATERMARK and LOG_END -> the requests watching for it, one waiting on
        several partitions counted once per partition (Kafka's PurgatorySize)."""
        out = {HIGH_WATERMARK: 0, LOG_END: 0}
        for (_key, kind), futs in self._watchers.items():
            out[kind] = out.get(kind, 0) + len(futs)
        return out

    # ------------------------------------------------------------------ wake

    def high_watermark_moved(self, key: Hashable) -> None:
        self._wake((key, HIGH_WATERMARK))

    def log_end_moved(self, key: Hashable) -> None:
        self._wake((key, LOG_END))

    def partition_changed(self, key: Hashable) -> None:
        """Leadership changed or the partition is gone: every waiter re-checks."""
        self._wake((key, HIGH_WATERMARK))
        self._wake((key, LOG_END))

    def _wake(self, watch: tuple[Hashable, int]) -> None:
        futs = self._watchers.pop(watch, None)
        if futs:
            for fut in futs:
                if not fut.done():
                    fut.set_result(True)

    # ------------------------------------------------------------------ wait

    def watch(self, watches: Iterable[tuple[Hashable, int]]) -> Watch:
        """Registers at once (synchronously) for the next move of any of `watches`. Check
        the condition, then watch, in one synchronous step — or watch, then check — so
        that no move between the check and the registration is missed; then await
        Watch.wait()."""
        return Watch(self, watches)

    async def wait(self, watches: Iterable[tuple[Hashable, int]], timeout: float) -> bool:
        """Waits until any of `watches` ((key, HIGH_WATERMARK | LOG_END) pairs) moves, or
        `timeout` seconds pass. True when woken, False on timeout. The caller re-checks
        its condition either way (and must have checked it in the same synchronous step
        as this call: registration happens before the first suspension)."""
        return await self.watch(watches).wait(timeout)

    async def wait_for_high_watermark(self, key: Hashable, timeout: float) -> bool:
        return await self.wait([(key, HIGH_WATERMARK)], timeout)

    def _unregister(self, keys: list[tuple[Hashable, int]], fut: asyncio.Future[bool]) -> None:
        for w in keys:
            futs = self._watchers.get(w)
            if futs is not None:
                try:
                    futs.remove(fut)
                except ValueError:
                    pass
                if not futs:
                    del self._watchers[w]


class Watch:
    """One registration in the purgatory: woken by the first move of any of its keys."""

    __slots__ = ("purgatory", "keys", "fut")

    def __init__(self, purgatory: Purgatory, watches: Iterable[tuple[Hashable, int]]) -> None:
        self.purgatory = purgatory
        self.keys = list(dict.fromkeys(watches))
        self.fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        for w in self.keys:
            purgatory._watchers.setdefault(w, []).append(self.fut)

    async def wait(self, timeout: float) -> bool:
        """True when a move woke it (maybe before this call), False after `timeout`."""
        fut = self.fut
        handle = None
        if not fut.done():
            if timeout <= 0:
                self.cancel()
                return False
            handle = fut.get_loop().call_later(timeout, _expire, fut)
        try:
            await fut
            return fut.result()
        finally:
            if handle is not None:
                handle.cancel()
            self.cancel()

    def cancel(self) -> None:
        self.purgatory._unregister(self.keys, self.fut)
        if not self.fut.done():
            self.fut.set_result(False)


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)
