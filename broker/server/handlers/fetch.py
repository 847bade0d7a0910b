"""Fetch (1): read file ranges below the high watermark (consumers) or log end
(followers) and send them with sendfile(2); long-poll until min_bytes or max_wait_ms.

A long poll sleeps in the ReplicaManager's purgatory (broker/cluster/replica/purgatory.py)
until one of its partitions moves — its high watermark for a consumer, its log end for a
follower — or max_wait_ms passes, then reads again.

Limits as in Kafka (KIP-74): partition_max_bytes per partition, max_bytes for the whole
response, except that the first batch of the first partition with data is returned
whole even when larger. Fetch sessions (KIP-227) are declined: the response's session
id is always 0, so clients keep sending full fetch requests.

read_committed (isolation level 1) reads below the last stable offset instead of the high
watermark and names the aborted transactions that overlap what it returns (the log's
aborted-transaction index, one entry per aborted transaction, never per record): the
records still leave with sendfile, undecoded, and the consumer drops the aborted ones.

As Kafka answers: a partition in error carries -1 for its high watermark, last stable
offset and log start offset; aborted transactions are null for read_uncommitted and for a
failed read, a list for read_committed (empty when no aborted transaction overlaps) and
an empty list for a topic the broker does not know.

Client quotas (broker/server/quotas.py): a consumer's answer counts its record bytes
against consumer_byte_rate; one that exceeds it is answered without partitions and with
the throttle time (Kafka's getThrottledResponse), its bytes taken back off the rate; the
server mutes the connection for that time. A consumer with a quota gets at most one quota
window's bytes per answer. Followers' fetches are never throttled.

Replication throttles (broker/cluster/replica/throttle.py, Kafka's shouldLeaderThrottle):
a follower's fetch of a partition this broker throttles as leader
(leader.replication.throttled.replicas), for a follower outside the ISR, gets no records
while leader.replication.throttled.rate is exceeded (its fetch offset still counts as its
position), and otherwise at most one window's worth of the rate over such partitions;
what an answer to a follower carries for throttled partitions is recorded against the
rate. Looked at once per request, only when some topic is throttled here.

A follower's fetch (a replica id) counts as its position only after its read succeeded:
the replica id must be one of the partition's replicas (else UNKNOWN_LEADER_EPOCH, or
NOT_LEADER_OR_FOLLOWER without a leader epoch, as Kafka), an offset outside the log is
OFFSET_OUT_OF_RANGE and moves nothing, and from version 12 a last fetched epoch that
diverges from this leader's epochs is answered with `diverging_epoch` (where that epoch
ends here), no records and no update, at once (Kafka's Partition.fetchRecords).

Open files: each partition read from an old segment keeps that segment open until the
response is sent. When the open-file limit allows no more (Log.read raises EMFILE), the
response stops there: the partitions left get no records this time, as when max_bytes
is reached, and the client's next fetch reads them.
"""
import asyncio
import errno
import time

from broker.cluster.replica.purgatory import HIGH_WATERMARK, LOG_END
from broker.log import OffsetOutOfRange, TopicPartition
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.fetch import FetchRequest, FetchResponse
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.FETCH
MIN_VERSION, MAX_VERSION = 4, 16

_TopicResp = FetchResponse.FetchableTopicResponse
_PartData = FetchResponse.PartitionData
_EpochEnd = FetchResponse.EpochEndOffset
_Aborted = FetchResponse.AbortedTransaction


def error_response(request, code: int) -> FetchResponse:
    """Every partition answered with `code` and no records (an old version the broker no
    longer serves), as Kafka's FetchRequest.getErrorResponse."""
    return FetchResponse(throttle_time_ms=0, error_code=code, session_id=0, responses=[
        _TopicResp(topic=t.topic, topic_id=t.topic_id, partitions=[
            _PartData(partition_index=p.partition, error_code=code, high_watermark=-1, records=b"")
            for p in t.partitions])
        for t in request.topics])


def _read_all(ctx, request, version, replica_id):
    services = ctx.services
    remaining = request.max_bytes if version >= 3 else 0x7FFFFFFF
    if replica_id < 0 and services.quotas.fetch.enabled:
        remaining = min(remaining, _quota_window_bytes(ctx))
    total = 0
    first = True
    responses = []
    watched = []        # the partitions whose moves end a long poll
    errors = False
    committed = request.isolation_level == 1
    starved = False     # out of open segments: the remaining partitions get no records
    # the leader replication throttle (Kafka's shouldLeaderThrottle), looked at only for a
    # follower's fetch of a throttled partition it is out of sync for, at most once
    quota = services.replicas.quotas.leader if replica_id >= 0 else None
    if quota is not None and (not quota.topics or quota.bound is None):
        quota = None
    exceeded = None
    throttled_left = 0
    # as Kafka's: a follower's fetch needs CLUSTER_ACTION, a consumer's READ on each topic
    cluster_ok = replica_id < 0 or ctx.authorize(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    for t in request.topics:
        if version >= 13:
            name = services.metadata.topic_name(t.topic_id)
        else:
            name = t.topic
        allowed = cluster_ok and (replica_id >= 0 or name is None
                                  or ctx.authorize(Operation.READ, ResourceType.TOPIC, name))
        parts = []
        for p in t.partitions:
            d = _PartData(partition_index=p.partition, error_code=0, high_watermark=-1, last_stable_offset=-1,
                          log_start_offset=-1, aborted_transactions=[] if committed else None, records=b"")
            parts.append(d)
            if name is None:
                _error(d, ErrorCode.UNKNOWN_TOPIC_ID)
                errors = True
                continue
            if not allowed:
                _error(d, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                errors = True
                continue
            try:
                part = services.replicas.leader_partition(name, p.partition, p.current_leader_epoch)
                lg = part.log
                watched.append(part.tp)
                follower = replica_id >= 0
                lso = lg.last_stable_offset
                if follower:
                    part.check_follower(replica_id, p.current_leader_epoch)
                    limit = lg.log_end_offset
                elif committed:
                    limit = lso
                else:
                    limit = lg.high_watermark
                d.high_watermark = lg.high_watermark
                d.last_stable_offset = lso
                d.log_start_offset = lg.log_start_offset
                if follower and version >= 12:
                    diverging = part.diverging_epoch(p.fetch_offset, p.last_fetched_epoch)
                    if diverging is not None:
                        # no records, no follower update: it truncates first (answered at once)
                        d.diverging_epoch = _EpochEnd(epoch=diverging[0], end_offset=diverging[1])
                        errors = True
                        continue
                max_bytes = min(p.partition_max_bytes, remaining)
                sl = None
                if starved:
                    continue
                held = capped = False
                if quota is not None and quota.is_throttled(name, p.partition) \
                        and replica_id not in part.maximal_isr:
                    if exceeded is None:
                        exceeded = quota.exceeded()
                        throttled_left = quota.window_bytes()
                    # exceeded: no records (the fetch still counts as the follower's position)
                    held = exceeded or throttled_left <= 0
                    capped = True
                    max_bytes = min(max_bytes, throttled_left)
                if held or (max_bytes <= 0 and not first):
                    # out of room: no records this time, but a follower's position is known
                    if follower and not lg.log_start_offset <= p.fetch_offset <= lg.log_end_offset:
                        raise OffsetOutOfRange(f"{part.tp}: offset {p.fetch_offset} outside the log")
                else:
                    try:
                        sl = lg.read(p.fetch_offset, max(max_bytes, 0), limit, min_one_batch=first)
                    except OSError as exc:
                        if exc.errno not in (errno.EMFILE, errno.ENFILE):
                            # a read error: the dir's failure (Kafka's LogDirFailureChannel
                            # from a fetch) takes it offline; this partition answers so
                            lg.dir_health.failed(exc, f"reading {part.tp}")
                            raise KafkaProtocolError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None
                        starved = True
                        continue
                if follower:
                    # only now: an offset the read refused proves nothing (Kafka's fetchRecords)
                    services.replicas.record_follower_fetch(part, replica_id, p.fetch_offset)
                if sl is not None:
                    d.records = sl
                    if committed and not follower:
                        found = lg.collect_aborted(p.fetch_offset, limit)
                        if found:
                            d.aborted_transactions = [_Aborted(producer_id=a.producer_id, first_offset=a.first_offset)
                                                      for a in found]
                    total += sl.length
                    remaining -= sl.length
                    first = False
                    if capped:
                        throttled_left -= sl.length
            except KafkaProtocolError as exc:
                _error(d, exc.code)
                errors = True
            except OffsetOutOfRange:
                _error(d, ErrorCode.OFFSET_OUT_OF_RANGE)
                errors = True
        responses.append(_TopicResp(topic=name or "", topic_id=t.topic_id, partitions=parts))
    return responses, total, watched, errors


_UNKNOWN_TOPIC = (ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def _error(d, code: int) -> None:
    d.error_code = code
    d.high_watermark = d.last_stable_offset = d.log_start_offset = -1
    d.aborted_transactions = [] if code in _UNKNOWN_TOPIC else None


def _release(responses) -> None:
    for t in responses:
        for d in t.partitions:
            close = getattr(d.records, "close", None)
            if close is not None:
                close()


def _done(ctx, request, total, watched, errors, deadline) -> bool:
    return (total >= request.min_bytes or errors or not watched or ctx.connection.closed
            or asyncio.get_running_loop().time() >= deadline)


def handle(ctx: RequestContext, request: FetchRequest) -> HandlerResult:
    version = ctx.api_version
    replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
    if replica_id >= 0:
        ctx.connection.follower = True       # its requests' metrics are FetchFollower's
    # fetch.wait.max.ms bounds the wait a client may ask for (what a long poll holds of its
    # connection, and the requests queued behind it, ends by then)
    deadline = ctx.received + min(max(request.max_wait_ms, 0), ctx.services.config["fetch.wait.max.ms"]) / 1000
    responses, total, watched, errors = _read_all(ctx, request, version, replica_id)
    if _done(ctx, request, total, watched, errors, deadline):
        return _answer(ctx, responses, total, replica_id, errors)
    _release(responses)
    # watch now, in the same step as the read that found too little: a move before the
    # long poll's task first runs must not be missed
    watch = _watch(ctx, watched, replica_id)
    return _long_poll(ctx, request, version, replica_id, watch, deadline)


def _quota_window_bytes(ctx) -> int:
    """What a consumer's quota allows in one window: a fetch answers at most that (beyond
    the first batch, always whole), as Kafka's getMaxValueInQuotaWindow."""
    sensor = ctx.connection.quota_sensors[1]
    if sensor is None or sensor.quota is None:
        return 0x7FFFFFFF
    return max(int(sensor.quota * ctx.services.quotas.window_ms / 1000), 1)


def _answer(ctx, responses, total: int, replica_id: int, errors: bool) -> FetchResponse:
    """The answer, unless the consumer's quota (consumer_byte_rate) throttles it: then,
    as Kafka's, the bytes are taken back off the rate and the answer holds no partitions,
    only the throttle time (the client fetches them again once it has waited)."""
    if replica_id < 0 and total:
        sensor = ctx.connection.quota_sensors[1]
        if sensor is not None and ctx.services.quotas.fetch.enabled:
            now_ms = time.monotonic() * 1000
            throttle = sensor.record(total, now_ms)
            if throttle:
                sensor.unrecord(total, now_ms)
                _release(responses)
                ctx.throttle_ms = max(ctx.throttle_ms, throttle)
                ctx.errors = False
                return FetchResponse(throttle_time_ms=throttle, error_code=0, session_id=0, responses=[])
    _count_out(ctx, responses, total, replica_id)
    if replica_id >= 0 and total:
        _record_throttled(ctx.services.replicas.quotas.leader, responses)
    ctx.errors = errors
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=responses)


def _record_throttled(quota, responses) -> None:
    """The bytes an answer to a follower carries for throttled partitions, in sync or
    not, count against the leader throttle (Kafka's sizeOfThrottledPartitions)."""
    if not quota.topics:
        return
    size = 0
    for t in responses:
        for d in t.partitions:
            records = d.records
            if records and quota.is_throttled(t.topic, d.partition_index):
                size += records.length if hasattr(records, "length") else len(records)
    quota.record(size)


def _count_out(ctx, responses, total: int, replica_id: int) -> None:
    """Kafka's BytesOutPerSec per topic (client fetches) or ReplicationBytesOutPerSec
    (followers' fetches), when metrics are on: per partition answered, not per record."""
    stats = ctx.services.replicas.topic_stats
    if stats is None or not total:
        return
    if replica_id >= 0:
        stats.replication_bytes_out += total
        return
    for t in responses:
        size = 0
        for d in t.partitions:
            records = d.records
            if records:
                size += records.length if hasattr(records, "length") else len(records)
        if size:
            stats.fetched(t.topic, size)


def _watch(ctx, watched: list[TopicPartition], replica_id: int):
    kind = LOG_END if replica_id >= 0 else HIGH_WATERMARK
    return ctx.services.replicas.purgatory.watch([(tp, kind) for tp in watched])


async def _long_poll(ctx, request, version, replica_id, watch, deadline):
    """Waits for data on any requested partition (or max_wait_ms), then reads again."""
    loop = asyncio.get_running_loop()
    while True:
        await watch.wait(deadline - loop.time())
        responses, total, watched, errors = _read_all(ctx, request, version, replica_id)
        if _done(ctx, request, total, watched, errors, deadline):
            return _answer(ctx, responses, total, replica_id, errors)
        _release(responses)
        watch = _watch(ctx, watched, replica_id)
