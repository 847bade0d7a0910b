"""Followers fetch from their leaders (Kafka's ReplicaFetcherManager, AbstractFetcherThread
and ReplicaFetcherThread).

One fetcher per (leader, fetcher index): a partition goes to fetcher
hash(topic, partition) mod num.replica.fetchers of its leader, so a broker following
another with many partitions spreads them over that many connections. Each fetcher is an
asyncio task with its own BrokerChannel to the leader, looping:

    1. partitions that just became followers (or whose leader epoch changed) first find
       where their log diverges from the leader's: OffsetForLeaderEpoch with their latest
       epoch (KIP-101/279); an answer naming an epoch we never had truncates to where our
       older epoch ends and asks again about it, round after round until done (each
       round's epoch is lower: the rounds end). A former leader's records nobody copied
       go this way. A partition without any epoch keeps only its high watermark;
    2. one Fetch for all the other partitions, carrying this broker's replica id, each
       from its log end offset at the current leader epoch with its latest epoch as
       last_fetched_epoch; the leader answers from its log end (not its high watermark)
       and long-polls replica.fetch.wait.max.ms;
    3. each partition's answer is used only if the request still matches the partition's
       fetch state — same state (leader epoch, not removed and added again), same log, no
       truncation since, log end where the request started — as Kafka's
       processFetchRequest; a stale one is dropped. A diverging epoch (KIP-320) truncates
       as step 1; otherwise the leader's batches are appended as they are (offsets,
       epochs, CRCs untouched, validated natively) and the leader's high watermark taken.

Replication throttles (broker/cluster/replica/throttle.py, Kafka's shouldFollowerThrottle):
partitions this broker throttles as follower (follower.replication.throttled.replicas)
that are not in sync (the leader's high watermark beyond our log end at the last answer)
are left out of the request while follower.replication.throttled.rate is exceeded, and
otherwise fetch at most their share of one window's worth of the rate; the bytes fetched
for throttled partitions are recorded against it. A fetcher whose partitions are all left
out looks again after THROTTLED_RECHECK_S.

Errors: a partition the leader no longer leads (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
UNKNOWN_*) waits replica.fetch.backoff.ms and tries again until the controller moves it.
Two of them mostly mean the leader has not yet applied the LeaderAndIsr we have (the
controller's updates reach the brokers tens of ms apart): UNKNOWN_LEADER_EPOCH and
NOT_LEADER_OR_FOLLOWER are retried after EPOCH_RETRY_S, doubling up to
replica.fetch.backoff.ms, so a leader epoch bump (a reassignment, a leader moved) does
not hold acks=all producers for a whole backoff as Kafka's fetcher does;
OFFSET_OUT_OF_RANGE asks the leader for its log start and end and truncates to fit (all of
it, starting at the leader's log start, when the leader deleted what we would need); a
broken connection backs off and reconnects. A request unanswered for
replica.fetch.wait.max.ms plus stall_margin_s drops the connection and reconnects at once,
and so does a LeaderAndIsr naming the leader of a fetcher whose request has waited past
its long poll (a network cut healed: TCP alone would take many seconds to notice).

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
from broker.log import LogStorageError, TopicPartition
from broker.native import CorruptRecordError
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.fetch import FetchRequest
from broker.protocol.messages.list_offsets import ListOffsetsRequest
from broker.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest
from broker.timeouts import wait_for

if TYPE_CHECKING:
    from broker.cluster.replica.partition import Partition
    from broker.cluster.replica.throttle import ReplicationQuota
    from broker.log.log import LeaderEpochCache, Log

log = logging.getLogger(__name__)

UNDEFINED = -1
EARLIEST, LATEST = -2, -1
#: a request unanswered this long past replica.fetch.wait.max.ms makes a LeaderAndIsr
#: naming the fetcher's leader reset its connection (it is stalled, not long-polling)
STALLED_AFTER_S = 1.0
#: a follower this many records behind its leader says how its catching up goes, every
#: CATCH_UP_LOG_S, and when it has caught up
CATCH_UP_LOG_RECORDS = 10000
CATCH_UP_LOG_S = 10.0
#: a fetcher whose partitions the follower throttle all left out looks again after this
THROTTLED_RECHECK_S = 0.1
#: the first retry after an error that means the leader is behind us (see above)
EPOCH_RETRY_S = 0.05
_BEHIND_US = frozenset((ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER))


@dataclass(eq=False)
class FetchState:
    """One partition's place in its fetcher; replaced (never mutated in its epoch) when
    the partition is added again, so an answer to a request made under an older state
    is recognised by identity."""

    leader_epoch: int
    truncating: bool = True
    delay_until: float = 0.0
    behind_since: float = 0.0  # catching up (far behind) since then; 0: not
    behind_offset: int = -1  # our log end then
    logged_at: float = 0.0  # the last progress line
    #: the leader's high watermark minus our log end after the last answer (None: no
    #: answer yet); 0 is in sync, never throttled (Kafka's PartitionFetchState.lag)
    lag: int | None = None
    #: errors in a row that mean the leader is behind us (each retry waits twice as long)
    quick_retries: int = 0


@dataclass(frozen=True)
class _Sent:
    """What a request was made from, for its answer to be checked against (Kafka's
    processFetchRequest compares the fetch offset and the fetch state): the same state
    (same leader epoch, not removed and added again), the same log, no truncation since,
    and the log end still where the request started."""

    state: FetchState
    log: Log
    truncations: int
    log_end: int
    epoch: int  # our latest leader epoch then (last_fetched_epoch / the epoch asked)


@dataclass
class FetcherConfig:
    broker_id: int
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 10 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    backoff_s: float = 1.0
    request_timeout_s: float = 30.0  # not used by the fetchers: see stall_margin_s
    num_fetchers: int = 1
    #: a fetcher's request unanswered for replica.fetch.wait.max.ms plus this resets its
    #: connection (Kafka waits replica.socket.timeout.ms, 30 s: a connection stalled on
    #: dropped packets kept a healed follower out of the ISR until TCP gave up)
    stall_margin_s: float = 5.0


class ReplicaFetcher:
    def __init__(self, manager: ReplicaFetcherManager, leader: BrokerInfo, index: int):
        self.manager = manager
        self.cfg = manager.cfg
        self.leader = leader
        self.index = index
        self.partitions: dict[TopicPartition, FetchState] = {}
        self.timeout_s = self.cfg.max_wait_ms / 1000 + self.cfg.stall_margin_s
        self.channel = BrokerChannel(
            leader.host,
            leader.port,
            client_id=f"broker-{self.cfg.broker_id}-fetcher-{index}",
            request_timeout=self.timeout_s,
        )
        self._wake = asyncio.Event()
        self._closing = False  # close(): the loop ends even if its cancellation were lost
        self._last_error: str | None = None
        self._request_since: float | None = None  # when the request in flight was sent
        self._retry_at_once = False  # the last failure was a stall: reconnect now
        self._task = asyncio.get_running_loop().create_task(self._run())
        self.fetches = 0
        self.stale_answers = 0  # partition answers dropped as stale
        self.resets = 0  # stalled connections reset
        self.throttled = 0  # throttled partitions out of sync at the last request

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader {self.leader.broker_id} at {self.leader.host}:{self.leader.port}, #{self.index})"

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.partitions[tp] = FetchState(leader_epoch)
        self._wake.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    async def close(self) -> None:
        self._closing = True
        self._task.cancel()
        try:
            await self._task
        except (asyncio.CancelledError, Exception):
            pass
        await self.channel.close()

    def stalled(self, now: float | None = None) -> bool:
        """A request has been in flight longer than the leader's long poll explains."""
        since = self._request_since
        return since is not None and (now or time.monotonic()) - since > self.cfg.max_wait_ms / 1000 + min(
            STALLED_AFTER_S, self.cfg.stall_margin_s
        )

    def reset_if_stalled(self) -> bool:
        """Drops a stalled connection (its request fails; the next round reconnects at
        once): a LeaderAndIsr naming this fetcher's leader, as after a network cut heals."""
        if not self.stalled():
            return False
        log.info(
            "%s: no answer for %.1f s: resetting the connection", self, time.monotonic() - (self._request_since or 0.0)
        )
        self.resets += 1
        self._retry_at_once = True
        self.channel.reset(f"{self}: connection reset: stalled")
        return True

    async def _request(self, request: Any, version: int | None = None) -> Any:
        """channel.request bounded by max wait + stall margin; a request that times out
        (the connection is dropped) is retried on a new connection without backing off."""
        self._request_since = since = time.monotonic()
        try:
            return await self.channel.request(request, version, timeout=self.timeout_s)
        except ChannelError:
            if time.monotonic() - since >= self.timeout_s:
                self.resets += 1
                self._retry_at_once = True
            raise
        finally:
            self._request_since = None

    # ------------------------------------------------------------------ loop

    async def _run(self) -> None:
        while not self._closing:
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
                    if not any(s.truncating and self._ready(s) for s in self.partitions.values()):
                        await self._sleep_until_ready()
                    continue
                if not await self._fetch(fetchable):
                    # every partition left out by the follower throttle: look again soon
                    # (Kafka waits replica.fetch.backoff.ms; a shorter pause holds the rate closer)
                    await self._pause(min(self.cfg.backoff_s, THROTTLED_RECHECK_S))
                self._last_error = None
            except ChannelError as exc:
                # once per kind of failure, not once per retry
                text = str(exc)
                at_once, self._retry_at_once = self._retry_at_once, False
                (log.debug if text == self._last_error else log.info)(
                    "%s: %s; %s",
                    self,
                    text,
                    "reconnecting" if at_once else f"retrying every {self.cfg.backoff_s:.1f} s",
                )
                self._last_error = text
                if not at_once:
                    await asyncio.sleep(self.cfg.backoff_s)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: fetch round failed", self)
                await asyncio.sleep(self.cfg.backoff_s)

    @staticmethod
    def _ready(s: FetchState) -> bool:
        return s.delay_until <= time.monotonic()

    async def _pause(self, seconds: float) -> None:
        """Sleeps `seconds`, or until a partition is added."""
        self._wake.clear()
        try:
            await wait_for(self._wake.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def _sleep_until_ready(self) -> None:
        soonest = min((s.delay_until for s in self.partitions.values()), default=0.0)
        self._wake.clear()
        try:
            await wait_for(self._wake.wait(), max(soonest - time.monotonic(), 0.01))
        except asyncio.TimeoutError:
            pass

    def _delay(self, tp: TopicPartition, why: str, err: int | None = None) -> None:
        s = self.partitions.get(tp)
        if s is not None:
            wait = self.cfg.backoff_s
            if err in _BEHIND_US:
                wait = min(wait, EPOCH_RETRY_S * (1 << min(s.quick_retries, 16)))
                s.quick_retries += 1
            log.debug("%s: %s: %s; backing off %.2f s", self, tp, why, wait)
            s.delay_until = time.monotonic() + wait

    def _sent(self, tp: TopicPartition, part: Partition) -> _Sent:
        lg = part.log
        return _Sent(self.partitions[tp], lg, lg.truncations, lg.log_end_offset, lg.leader_epochs.latest_epoch)

    def _current(self, tp: TopicPartition, sent: _Sent, truncating: bool) -> Partition | None:
        """The partition, when an answer to a request made from `sent` still applies to it;
        None (the answer is dropped) when the partition was removed or added again, its
        log was truncated or replaced, or its log end moved since (AbstractFetcherThread
        processes an answer only when the fetch offset and state still match)."""
        part = self.manager.partition(tp)
        s = self.partitions.get(tp)
        if part is None:
            if s is sent.state:
                self.partitions.pop(tp, None)
            return None
        lg = part.log
        if (
            s is not sent.state
            or s.truncating != truncating
            or lg is not sent.log
            or lg.truncations != sent.truncations
            or lg.log_end_offset != sent.log_end
        ):
            self.stale_answers += 1
            log.debug("%s: %s: dropping an answer to a request made before the partition's state changed", self, tp)
            return None
        return part

    # ------------------------------------------------------------------ truncation

    async def _truncate(self, tps: list[TopicPartition]) -> None:
        """One OffsetForLeaderEpoch round for the partitions still truncating: each asks
        about its latest epoch and truncates; an answer naming an epoch we never had
        truncates to where our older epoch ends and leaves the partition truncating, to
        ask about that (lower) epoch next round — until done, as Kafka."""
        R = OffsetForLeaderEpochRequest
        topics: dict[str, list[Any]] = {}
        asked: dict[TopicPartition, _Sent] = {}
        for tp in tps:
            part = self.manager.partition(tp)
            s = self.partitions[tp]
            if part is None:
                self.partitions.pop(tp, None)
                continue
            sent = self._sent(tp, part)
            if sent.epoch < 0:
                # no epoch to ask about: keep what is committed, as Kafka's
                # truncateToHighWatermark for a partition without epochs
                part.truncate_to(part.log.high_watermark)
                s.truncating = False
                continue
            asked[tp] = sent
            topics.setdefault(tp.topic, []).append(
                R.OffsetForLeaderPartition(
                    partition=tp.partition, current_leader_epoch=s.leader_epoch, leader_epoch=sent.epoch
                )
            )
        if not topics:
            return
        req = R(
            replica_id=self.cfg.broker_id,
            topics=[R.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in topics.items()],
        )
        resp = await self._request(req)
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition)
                was = asked.get(tp)
                part = self._current(tp, was, truncating=True) if was is not None else None
                if was is None or part is None:
                    continue
                if p.error_code:
                    self._delay(tp, ErrorCode(p.error_code).name, p.error_code)
                    continue
                self._truncate_to_epoch_end(tp, was.state, part, was.epoch, p.leader_epoch, p.end_offset)

    def _truncate_to_epoch_end(
        self, tp: TopicPartition, s: FetchState, part: Partition, asked_epoch: int, leader_epoch: int, end_offset: int
    ) -> None:
        lg = part.log
        offset, done = truncation_point(
            lg.leader_epochs, lg.log_end_offset, lg.high_watermark, asked_epoch, leader_epoch, end_offset
        )
        part.truncate_to(offset)
        s.truncating = not done
        if not done:
            log.info(
                "%s: %s: the leader lacks our epoch %d: truncated to %d, asking about epoch %d next",
                self,
                tp,
                asked_epoch,
                lg.log_end_offset,
                lg.leader_epochs.latest_epoch,
            )

    # ------------------------------------------------------------------ fetch

    def _throttle(self, tps: list[TopicPartition]) -> tuple[list[TopicPartition], int, int]:
        """The follower throttle (Kafka's shouldFollowerThrottle), once per request: the
        throttled partitions out of sync are left out while the follower quota is
        exceeded; otherwise they come first (in turns, so that each in turn gets a whole
        batch if its batches are larger than its share), each fetching at most its share
        of one window's bytes. (partitions to fetch, how many were left out, the share)."""
        quota = self.manager.quota
        self.throttled = 0
        if quota is None or not quota.topics or quota.bound is None:
            return tps, 0, 0
        throttled, others = [], []
        for tp in tps:
            lag = self.partitions[tp].lag
            if (lag is None or lag > 0) and quota.is_throttled(tp.topic, tp.partition):
                throttled.append(tp)
            else:
                others.append(tp)
        self.throttled = len(throttled)
        if not throttled:
            return tps, 0, 0
        if quota.exceeded():
            return others, len(throttled), 0
        turn = self.fetches % len(throttled)
        share = max(quota.window_bytes() // max(self.manager.throttled_partitions(), 1), 1)
        return throttled[turn:] + throttled[:turn] + others, 0, share

    async def _fetch(self, tps: list[TopicPartition]) -> bool:
        """One Fetch round; False when no request was sent because the follower throttle
        left every partition out."""
        F = FetchRequest
        version = self.channel.version_for(ApiKey.FETCH) if self.channel.connected else None
        topics: dict[str, list[Any]] = {}
        ids = {}
        sent: dict[TopicPartition, _Sent] = {}
        tps, left_out, share = self._throttle(tps)
        quota = self.manager.quota
        for tp in tps:
            part = self.manager.partition(tp)
            if part is None:
                self.partitions.pop(tp, None)
                continue
            lg = part.log
            ids[tp.topic] = lg.topic_id
            s = sent[tp] = self._sent(tp, part)
            max_bytes = self.cfg.partition_max_bytes
            if share and quota is not None and s.state.lag != 0 and quota.is_throttled(tp.topic, tp.partition):
                max_bytes = min(max_bytes, share)
            topics.setdefault(tp.topic, []).append(
                F.FetchPartition(
                    partition=tp.partition,
                    current_leader_epoch=s.state.leader_epoch,
                    fetch_offset=s.log_end,
                    last_fetched_epoch=s.epoch,
                    log_start_offset=lg.log_start_offset,
                    partition_max_bytes=max_bytes,
                )
            )
        if not topics:
            return not left_out
        req = F(
            replica_id=self.cfg.broker_id,
            replica_state=F.ReplicaState(replica_id=self.cfg.broker_id, replica_epoch=-1),
            max_wait_ms=self.cfg.max_wait_ms,
            min_bytes=self.cfg.min_bytes,
            max_bytes=self.cfg.max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[F.FetchTopic(topic=t, topic_id=ids[t], partitions=ps) for t, ps in topics.items()],
            forgotten_topics_data=[],
            rack_id="",
        )
        resp = await self._request(req, version)
        self.fetches += 1
        if resp.error_code:
            log.info("%s: fetch failed: %s", self, ErrorCode(resp.error_code).name)
            await asyncio.sleep(self.cfg.backoff_s)
            return True
        by_id = {v: k for k, v in ids.items()}
        for t in resp.responses:
            name = t.topic or by_id.get(t.topic_id)
            if name is None:
                continue  # a topic id this fetch did not name
            for d in t.partitions:
                tp = TopicPartition(name, d.partition_index)
                if tp in sent:
                    await self._process(tp, d, sent[tp])
        return True

    async def _process(self, tp: TopicPartition, d: Any, sent: _Sent) -> None:
        part = self._current(tp, sent, truncating=False)
        if part is None:
            return
        err = d.error_code
        if err == ErrorCode.NONE:
            sent.state.quick_retries = 0
            div = d.diverging_epoch
            if div is not None and div.epoch >= 0 and div.end_offset >= 0:
                # KIP-320: our log diverges from the leader's; truncate (no append, no high
                # watermark: the next fetch brings them), as truncateOnFetchResponse
                self._truncate_to_epoch_end(tp, sent.state, part, sent.epoch, div.epoch, div.end_offset)
                return
            records = d.records
            if records is not None and len(records):
                self.manager.replication_bytes_in += len(records)
                quota = self.manager.quota
                if quota is not None and quota.topics and quota.is_throttled(tp.topic, tp.partition):
                    # in sync or not, as Kafka's: the throttle bounds all replication of its partitions
                    quota.record(len(records))
                try:
                    part.append_as_follower(records)
                except (ValueError, CorruptRecordError) as exc:
                    log.warning("%s: %s: cannot append the leader's batches (%s); truncating again", self, tp, exc)
                    sent.state.truncating = True
                    return
                except LogStorageError as exc:
                    # its log dir refused the write (reported to the dir's health, which
                    # takes a failed dir offline): this partition backs off, the others go on
                    self._delay(tp, str(exc))
                    return
            part.update_follower_high_watermark(d.high_watermark)
            sent.state.lag = max(d.high_watermark - part.log.log_end_offset, 0)
            if sent.state.behind_since or d.high_watermark - sent.log_end >= CATCH_UP_LOG_RECORDS:
                self._catching_up(tp, sent, part.log.log_end_offset, d.high_watermark)
            if d.log_start_offset > part.log.log_start_offset:
                part.log.advance_log_start_offset(d.log_start_offset)
        elif err == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._handle_out_of_range(tp, sent)
        else:
            self._delay(tp, ErrorCode(err).name, err)

    def _catching_up(self, tp: TopicPartition, sent: _Sent, end: int, leader_hw: int) -> None:
        """Progress lines of a follower far behind its leader (restarted after a while,
        or new): when it starts, every CATCH_UP_LOG_S, and when it has caught up."""
        state = sent.state
        now = time.monotonic()
        leader = self.leader.broker_id
        if not state.behind_since:
            state.behind_since, state.behind_offset, state.logged_at = now, sent.log_end, now
            log.info(
                "%s: catching up with leader %d: %d records behind (offset %d, the leader's high watermark %d)",
                tp,
                leader,
                leader_hw - sent.log_end,
                sent.log_end,
                leader_hw,
            )
        elapsed = max(now - state.behind_since, 1e-6)
        rate = (end - state.behind_offset) / elapsed
        if end >= leader_hw:
            log.info(
                "%s: caught up with leader %d at offset %d (%d records in %.1f s, %.0f records/s)",
                tp,
                leader,
                end,
                end - state.behind_offset,
                elapsed,
                rate,
            )
            state.behind_since = 0.0
        elif now - state.logged_at >= CATCH_UP_LOG_S:
            log.info(
                "%s: catching up with leader %d: offset %d of %d, %d behind, %.0f records/s",
                tp,
                leader,
                end,
                leader_hw,
                leader_hw - end,
                rate,
            )
            state.logged_at = now

    async def _handle_out_of_range(self, tp: TopicPartition, sent: _Sent) -> None:
        """Kafka's handleOutOfRangeError: our log end is past the leader's (an unclean
        election) or before its log start (it deleted what we would need)."""
        R = ListOffsetsRequest
        offsets = {}
        for ts in (EARLIEST, LATEST):
            req = R(
                replica_id=self.cfg.broker_id,
                isolation_level=0,
                timeout_ms=0,
                topics=[
                    R.ListOffsetsTopic(
                        name=tp.topic,
                        partitions=[
                            R.ListOffsetsPartition(
                                partition_index=tp.partition,
                                current_leader_epoch=sent.state.leader_epoch,
                                timestamp=ts,
                                max_num_offsets=1,
                            )
                        ],
                    )
                ],
            )
            resp = await self._request(req)
            p = resp.topics[0].partitions[0]
            if p.error_code:
                self._delay(tp, ErrorCode(p.error_code).name)
                return
            offsets[ts] = p.offset
        part = self._current(tp, sent, truncating=False)  # the state may have changed meanwhile
        if part is None:
            return
        lg = part.log
        if lg.log_end_offset > offsets[LATEST]:
            log.warning(
                "%s: %s: log end %d is past the leader's %d: truncating", self, tp, lg.log_end_offset, offsets[LATEST]
            )
            part.truncate_to(offsets[LATEST])
        elif lg.log_end_offset < offsets[EARLIEST]:
            log.warning(
                "%s: %s: log end %d is before the leader's log start %d: starting over there",
                self,
                tp,
                lg.log_end_offset,
                offsets[EARLIEST],
            )
            lg.truncate_fully_and_start_at(offsets[EARLIEST])


def truncation_point(
    epochs: LeaderEpochCache, log_end: int, high_watermark: int, asked_epoch: int, leader_epoch: int, leader_end: int
) -> tuple[int, bool]:
    """Where a follower's log stops agreeing with its leader's (Kafka's
    getOffsetTruncationState, KIP-101/279), from the leader's answer (leader_epoch,
    leader_end) about our epoch `asked_epoch` — an OffsetForLeaderEpoch answer or a
    Fetch answer's diverging epoch: (offset to truncate to, whether that is the end).

    - the leader knows no epoch this old: keep only what is committed (the high watermark);
    - we have the epoch the leader answered with: truncate to where it ends on the leader
      or on our side, whichever is first; done;
    - we do not: truncate to where our largest epoch below it ends, and ask again about
      that epoch (not done). The epoch asked about next is below `asked_epoch`, so the
      rounds end; an answer naming an epoch above the one asked (a confused leader)
      keeps only what is committed."""
    if leader_end == UNDEFINED or leader_epoch == UNDEFINED or leader_epoch > asked_epoch:
        return min(high_watermark, log_end), True
    our_epoch, our_end = epochs.end_offset_for(leader_epoch, log_end)
    if our_epoch == leader_epoch:
        return min(leader_end, our_end, log_end), True
    if our_epoch == UNDEFINED:
        return min(leader_end, log_end), True
    return min(our_end, log_end), False


class ReplicaFetcherManager:
    def __init__(
        self,
        cfg: FetcherConfig,
        partition: Callable[[TopicPartition], Partition | None],
        quota: ReplicationQuota | None = None,
    ):
        self.cfg = cfg
        self.partition = partition  # tp -> the local Partition (None: no longer a replica)
        #: the follower replication throttle (None: none)
        self.quota = quota
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._where: dict[TopicPartition, tuple[int, int]] = {}
        #: Kafka's ReplicationBytesInPerSec: bytes of the leaders' batches appended here
        self.replication_bytes_in = 0

    def throttled_partitions(self) -> int:
        """Throttled partitions out of sync over every fetcher, at their last requests:
        one window's bytes of the follower throttle are shared among them."""
        return sum(f.throttled for f in self.fetchers.values())

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

    def reset_stalled(self, leader_ids: Iterable[int]) -> int:
        """Resets the stalled connections of the fetchers from these leaders (a
        LeaderAndIsr named them: a network cut may have healed); returns how many."""
        ids = set(leader_ids)
        return sum(f.reset_if_stalled() for (leader, _), f in list(self.fetchers.items()) if leader in ids)

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
