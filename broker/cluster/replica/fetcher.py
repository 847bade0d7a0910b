"""Followers fetch from their leaders (Kafka's ReplicaFetcherManager, AbstractFetcherThread
and ReplicaFetcherThread).

One fetcher per (leader, fetcher index): a partition goes to fetcher
hash(topic, partition) mod num.replica.fetchers of its leader, so a broker following
another with many partitions spreads them over that many connections. Each fetcher is an
asyncio task with its own BrokerChannel to the leader, looping:

    1. partitions that just became followers (or whose leader epoch changed) first find
       where their log diverges from the leader's: OffsetForLeaderEpoch with their latest
       epoch (KIP-101/279), repeated with an older epoch while the leader does not know
       ours; they truncate there. A former leader's records nobody copied go this way;
    2. one Fetch for all the other partitions, carrying this broker's replica id, each
       from its log end offset at the current leader epoch; the leader answers from its
       log end (not its high watermark) and long-polls replica.fetch.wait.max.ms;
    3. each partition appends the leader's batches as they are (offsets, epochs, CRCs
       untouched, validated natively) and takes the leader's high watermark.

Errors: a partition the leader no longer leads (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
UNKNOWN_*) waits replica.fetch.backoff.ms and tries again until the controller moves it;
OFFSET_OUT_OF_RANGE asks the leader for its log start and end and truncates to fit (all of
it, starting at the leader's log start, when the leader deleted what we would need); a
broken connection backs off and reconnects.

All methods run on the event loop thread.
"""
from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.cluster.channel import BrokerChannel, ChannelError
from broker.cluster.metadata import BrokerInfo
from broker.log import TopicPartition
from broker.native import CorruptRecordError
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.fetch import FetchRequest
from broker.protocol.messages.list_offsets import ListOffsetsRequest
from broker.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest

if TYPE_CHECKING:
    from broker.cluster.replica.partition import Partition
    from broker.log.log import LeaderEpochCache

log = logging.getLogger(__name__)

UNDEFINED = -1
EARLIEST, LATEST = -2, -1
MAX_TRUNCATION_ROUNDS = 8


@dataclass
class FetchState:
    leader_epoch: int
    truncating: bool = True
    delay_until: float = 0.0
    epoch_to_ask: int | None = None       # the next OffsetForLeaderEpoch round's epoch
    rounds: int = 0                       # OffsetForLeaderEpoch rounds so far


@dataclass
class FetcherConfig:
    broker_id: int
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 10 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    backoff_s: float = 1.0
    request_timeout_s: float = 30.0
    num_fetchers: int = 1


class ReplicaFetcher:
    def __init__(self, manager: ReplicaFetcherManager, leader: BrokerInfo, index: int):
        self.manager = manager
        self.cfg = manager.cfg
        self.leader = leader
        self.index = index
        self.partitions: dict[TopicPartition, FetchState] = {}
        self.channel = BrokerChannel(leader.host, leader.port,
                                     client_id=f"broker-{self.cfg.broker_id}-fetcher-{index}",
                                     request_timeout=self.cfg.request_timeout_s)
        self._wake = asyncio.Event()
        self._last_error: str | None = None
        self._task = asyncio.get_running_loop().create_task(self._run())
        self.fetches = 0

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader {self.leader.broker_id} at {self.leader.host}:{self.leader.port}, #{self.index})"

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.partitions[tp] = FetchState(leader_epoch)
        self._wake.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    async def close(self) -> None:
        self._task.cancel()
        try:
            await self._task
        except (asyncio.CancelledError, Exception):
            pass
        await self.channel.close()

    # ------------------------------------------------------------------ loop

    async def _run(self) -> None:
        while True:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                truncating = [tp for tp, s in self.partitions.items() if s.truncating and self._ready(s)]
                if truncating:
                    await self._truncate(truncating)
                fetchable = [tp for tp, s in self.partitions.items() if not s.truncating and self._ready(s)]
                if not fetchable:
                    await self._sleep_until_ready()
                    continue
                await self._fetch(fetchable)
                self._last_error = None
            except ChannelError as exc:
                # once per kind of failure, not once per retry
                text = str(exc)
                (log.debug if text == self._last_error else log.info)("%s: %s; retrying every %.1f s", self,
                                                                       text, self.cfg.backoff_s)
                self._last_error = text
                await asyncio.sleep(self.cfg.backoff_s)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: fetch round failed", self)
                await asyncio.sleep(self.cfg.backoff_s)

    @staticmethod
    def _ready(s: FetchState) -> bool:
        return s.delay_until <= time.monotonic()

    async def _sleep_until_ready(self) -> None:
        soonest = min((s.delay_until for s in self.partitions.values()), default=0.0)
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), max(soonest - time.monotonic(), 0.01))
        except asyncio.TimeoutError:
            pass

    def _delay(self, tp: TopicPartition, why: str) -> None:
        s = self.partitions.get(tp)
        if s is not None:
            log.debug("%s: %s: %s; backing off", self, tp, why)
            s.delay_until = time.monotonic() + self.cfg.backoff_s

    # ------------------------------------------------------------------ truncation

    async def _truncate(self, tps: list[TopicPartition]) -> None:
        R = OffsetForLeaderEpochRequest
        topics: dict[str, list[Any]] = {}
        asked = {}
        for tp in tps:
            part = self.manager.partition(tp)
            s = self.partitions[tp]
            if part is None:
                self.partitions.pop(tp, None)
                continue
            epoch = s.epoch_to_ask if s.epoch_to_ask is not None else part.log.leader_epochs.latest_epoch
            if epoch < 0:
                # nothing written under any epoch: nothing can diverge
                self._done_truncating(tp, s)
                continue
            asked[tp] = epoch
            topics.setdefault(tp.topic, []).append(R.OffsetForLeaderPartition(
                partition=tp.partition, current_leader_epoch=s.leader_epoch, leader_epoch=epoch))
        if not topics:
            return
        req = R(replica_id=self.cfg.broker_id,
                topics=[R.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in topics.items()])
        resp = await self.channel.request(req)
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition)
                state = self.partitions.get(tp)
                part = self.manager.partition(tp)
                if state is None or part is None or tp not in asked:
                    continue
                if p.error_code:
                    self._delay(tp, ErrorCode(p.error_code).name)
                    continue
                self._apply_epoch_answer(tp, state, part, asked[tp], p.leader_epoch, p.end_offset)

    def _apply_epoch_answer(self, tp: TopicPartition, s: FetchState, part: Partition, asked_epoch: int,
                            leader_epoch: int, end_offset: int) -> None:
        lg = part.log
        offset, ask_again = truncation_point(lg.leader_epochs, lg.log_end_offset, lg.high_watermark,
                                             leader_epoch, end_offset)
        if ask_again is not None and s.rounds + 1 < MAX_TRUNCATION_ROUNDS:
            s.rounds += 1
            s.epoch_to_ask = ask_again
            return
        part.truncate_to(offset)
        self._done_truncating(tp, s)

    def _done_truncating(self, tp: TopicPartition, s: FetchState) -> None:
        s.truncating = False
        s.epoch_to_ask = None
        s.rounds = 0

    # ------------------------------------------------------------------ fetch

    async def _fetch(self, tps: list[TopicPartition]) -> None:
        F = FetchRequest
        version = self.channel.version_for(ApiKey.FETCH) if self.channel.connected else None
        topics: dict[str, list[Any]] = {}
        ids = {}
        for tp in tps:
            part = self.manager.partition(tp)
            if part is None:
                self.partitions.pop(tp, None)
                continue
            lg = part.log
            ids[tp.topic] = lg.topic_id
            topics.setdefault(tp.topic, []).append(F.FetchPartition(
                partition=tp.partition, current_leader_epoch=self.partitions[tp].leader_epoch,
                fetch_offset=lg.log_end_offset, last_fetched_epoch=lg.leader_epochs.latest_epoch,
                log_start_offset=lg.log_start_offset, partition_max_bytes=self.cfg.partition_max_bytes))
        if not topics:
            return
        req = F(replica_id=self.cfg.broker_id, replica_state=F.ReplicaState(replica_id=self.cfg.broker_id, replica_epoch=-1),
                max_wait_ms=self.cfg.max_wait_ms, min_bytes=self.cfg.min_bytes, max_bytes=self.cfg.max_bytes,
                isolation_level=0, session_id=0, session_epoch=-1,
                topics=[F.FetchTopic(topic=t, topic_id=ids[t], partitions=ps) for t, ps in topics.items()],
                forgotten_topics_data=[], rack_id="")
        resp = await self.channel.request(req, version, timeout=self.cfg.max_wait_ms / 1000 + self.cfg.request_timeout_s)
        self.fetches += 1
        if resp.error_code:
            log.info("%s: fetch failed: %s", self, ErrorCode(resp.error_code).name)
            await asyncio.sleep(self.cfg.backoff_s)
            return
        by_id = {v: k for k, v in ids.items()}
        for t in resp.responses:
            name = t.topic or by_id.get(t.topic_id)
            if name is None:
                continue  # a topic id this fetch did not name
            for d in t.partitions:
                tp = TopicPartition(name, d.partition_index)
                if tp in self.partitions:
                    await self._process(tp, d)

    async def _process(self, tp: TopicPartition, d: Any) -> None:
        part = self.manager.partition(tp)
        if part is None:
            self.partitions.pop(tp, None)
            return
        err = d.error_code
        if err == ErrorCode.NONE:
            records = d.records
            if records is not None and len(records):
                try:
                    part.append_as_follower(records)
                except (ValueError, CorruptRecordError) as exc:
                    log.warning("%s: %s: cannot append the leader's batches (%s); truncating again", self, tp, exc)
                    self.partitions[tp].truncating = True
                    return
            part.update_follower_high_watermark(d.high_watermark)
            if d.log_start_offset > part.log.log_start_offset:
                part.log.advance_log_start_offset(d.log_start_offset)
        elif err == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._handle_out_of_range(tp, part)
        else:
            self._delay(tp, ErrorCode(err).name)

    async def _handle_out_of_range(self, tp: TopicPartition, part: Partition) -> None:
        """Kafka's handleOutOfRangeError: our log end is past the leader's (an unclean
        election) or before its log start (it deleted what we would need)."""
        R = ListOffsetsRequest
        s = self.partitions[tp]
        offsets = {}
        for ts in (EARLIEST, LATEST):
            req = R(replica_id=self.cfg.broker_id, isolation_level=0, timeout_ms=0, topics=[R.ListOffsetsTopic(
                name=tp.topic, partitions=[R.ListOffsetsPartition(partition_index=tp.partition,
                                                                   current_leader_epoch=s.leader_epoch,
                                                                   timestamp=ts, max_num_offsets=1)])])
            resp = await self.channel.request(req)
            p = resp.topics[0].partitions[0]
            if p.error_code:
                self._delay(tp, ErrorCode(p.error_code).name)
                return
            offsets[ts] = p.offset
        lg = part.log
        if lg.log_end_offset > offsets[LATEST]:
            log.warning("%s: %s: log end %d is past the leader's %d: truncating", self, tp, lg.log_end_offset,
                        offsets[LATEST])
            part.truncate_to(offsets[LATEST])
        elif lg.log_end_offset < offsets[EARLIEST]:
            log.warning("%s: %s: log end %d is before the leader's log start %d: starting over there", self, tp,
                        lg.log_end_offset, offsets[EARLIEST])
            lg.truncate_fully_and_start_at(offsets[EARLIEST])


def truncation_point(epochs: LeaderEpochCache, log_end: int, high_watermark: int, leader_epoch: int,
                     leader_end: int) -> tuple[int, int | None]:
    """Where a follower's log stops agreeing with its leader's (Kafka's
    getOffsetTruncationState, KIP-279), from the leader's OffsetForLeaderEpoch answer
    (leader_epoch, leader_end) to the follower's latest epoch: (offset to truncate to,
    None) — or (a fallback offset, an older epoch of ours to ask about next) when the
    leader's answer names an epoch we do not have (both logs diverged earlier).

    - the leader knows no epoch this old: keep only what is committed (the high watermark);
    - we have the epoch the leader answered with: truncate to where it ends on the leader
      or on our side, whichever is first;
    - we do not: our largest epoch below it is where to look next."""
    if leader_end == UNDEFINED or leader_epoch == UNDEFINED:
        return min(high_watermark, log_end), None
    our_epoch, our_end = epochs.end_offset_for(leader_epoch, log_end)
    if our_epoch == leader_epoch:
        return min(leader_end, our_end), None
    if our_epoch == UNDEFINED:
        return min(leader_end, log_end), None
    return min(leader_end, our_end), our_epoch


class ReplicaFetcherManager:
    def __init__(self, cfg: FetcherConfig, partition: Callable[[TopicPartition], Partition | None]):
        self.cfg = cfg
        self.partition = partition        # tp -> the local Partition (None: no longer a replica)
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._where: dict[TopicPartition, tuple[int, int]] = {}

    def fetcher_index(self, tp: TopicPartition) -> int:
        return zlib.crc32(f"{tp.topic}-{tp.partition}".encode()) % max(self.cfg.num_fetchers, 1)

    def add(self, tp: TopicPartition, leader: BrokerInfo, leader_epoch: int) -> None:
        """(Re)starts following `leader` for tp: truncation first, then fetching."""
        self.remove([tp])
        key = (leader.broker_id, self.fetcher_index(tp))
        f = self.fetchers.get(key)
        if f is not None and (f.leader.host, f.leader.port) != (leader.host, leader.port):
            asyncio.get_running_loop().create_task(f.close())
            f = None
        if f is None:
            f = self.fetchers[key] = ReplicaFetcher(self, leader, key[1])
        f.add(tp, leader_epoch)
        self._where[tp] = key

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            key = self._where.pop(tp, None)
            if key is not None and key in self.fetchers:
                self.fetchers[key].remove(tp)

    def leader_of(self, tp: TopicPartition) -> int | None:
        key = self._where.get(tp)
        return key[0] if key is not None else None

    async def shutdown(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self._where.clear()
        for f in fetchers:
            await f.close()

    async def close_idle(self) -> None:
        for key, f in list(self.fetchers.items()):
            if not f.partitions:
                del self.fetchers[key]
                await f.close()
