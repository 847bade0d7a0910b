"""Fetch (1): the ACLs, the client's quota and the answer's encoding; the reading and the
waiting are the ReplicaManager's (`fetch_records`, broker/cluster/replica/manager.py and
delayed_fetch.py: file ranges below the high watermark for consumers, the last stable
offset for read_committed, the log end for followers, sent with sendfile(2); a long poll
until min_bytes or max_wait_ms in its purgatory; KIP-74's limits; the follower's
position, diverging epochs and the leader replication throttle).

ACLs, as Kafka's KafkaApis checks them: a follower's fetch needs CLUSTER_ACTION on the
cluster, a consumer's READ on each topic; a partition refused (or of a topic id the
broker does not know, v13+) answers with its error, and the fetch then waits for
nothing. max_wait_ms is bounded by fetch.wait.max.ms: what a long poll holds of its
connection, and of the requests queued behind it, ends by then.

Fetch sessions (KIP-227) are declined: the response's session id is always 0, so
clients keep sending full fetch requests.

As Kafka answers: a partition in error carries -1 for its high watermark, last stable
offset and log start offset; aborted transactions are null for read_uncommitted and for a
failed read, a list for read_committed (empty when no aborted transaction overlaps) and
an empty list for a topic the broker does not know. A read_committed answer names the
aborted transactions its records overlap (the log's aborted-transaction index, one entry
per aborted transaction, never per record): the records still leave with sendfile,
undecoded, and the consumer drops the aborted ones.

Client quotas (broker/server/quotas.py): a consumer's answer counts its record bytes
against consumer_byte_rate; one that exceeds it is answered without partitions and with
the throttle time (Kafka's getThrottledResponse), its bytes taken back off the rate; the
server mutes the connection for that time. A consumer with a quota gets at most one quota
window's bytes per answer. Followers' fetches are never throttled so (the replication
throttles are the ReplicaManager's: broker/cluster/replica/throttle.py).

Open files: each partition read from an old segment keeps that segment open until the
response is sent (or, for an answer a quota throttles, until it is dropped).
"""

import time
from collections.abc import Awaitable

from broker.cluster.replica.delayed_fetch import FetchParams, FetchPartition, FetchResult, LogReads
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.fetch import FetchRequest, FetchResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.FETCH
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 4, 16

_TopicResp = FetchResponse.FetchableTopicResponse
_PartData = FetchResponse.PartitionData
_EpochEnd = FetchResponse.EpochEndOffset
_Aborted = FetchResponse.AbortedTransaction


def error_response(request: FetchRequest, code: int) -> FetchResponse:
    """Every partition answered with `code` and no records (an old version the broker no
    longer serves), as Kafka's FetchRequest.getErrorResponse."""
    return FetchResponse(
        throttle_time_ms=0,
        error_code=code,
        session_id=0,
        responses=[
            _TopicResp(
                topic=t.topic,
                topic_id=t.topic_id,
                partitions=[
                    _PartData(partition_index=p.partition, error_code=code, high_watermark=-1, records=b"")
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse | Awaitable[FetchResponse]:
    version = ctx.api_version
    services = ctx.services
    replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
    if replica_id >= 0:
        ctx.connection.follower = True  # its requests' metrics are FetchFollower's
    committed = request.isolation_level == 1
    max_bytes = request.max_bytes if version >= 3 else 0x7FFFFFFF
    if replica_id < 0 and services.quotas.fetch.enabled:
        max_bytes = min(max_bytes, _quota_window_bytes(ctx))
    responses: list[FetchResponse.FetchableTopicResponse] = []
    reading: list[FetchPartition] = []  # what the ReplicaManager reads, in the request's order
    answers: list[FetchResponse.PartitionData] = []  # their partitions' answers, in the same order
    refused = False
    # ACLs, as Kafka's: a follower's fetch needs CLUSTER_ACTION, a consumer's READ on each topic
    cluster_ok = replica_id < 0 or ctx.has_right(RIGHTS.follower, CLUSTER_NAME)
    for t in request.topics:
        if version >= 13:
            name = services.metadata.topic_name(t.topic_id)
            topic_id = t.topic_id
        else:
            name = t.topic
            topic_id = None
        allowed = cluster_ok and (replica_id >= 0 or name is None or ctx.has_right(RIGHTS.topic, name))
        parts = []
        for p in t.partitions:
            d = _PartData(
                partition_index=p.partition,
                error_code=0,
                high_watermark=-1,
                last_stable_offset=-1,
                log_start_offset=-1,
                aborted_transactions=[] if committed else None,
                records=b"",
            )
            parts.append(d)
            if name is None:
                _error(d, ErrorCode.UNKNOWN_TOPIC_ID)
                refused = True
            elif not allowed:
                _error(d, RIGHTS.topic.error_code if cluster_ok else RIGHTS.follower.error_code)
                refused = True
            else:
                reading.append(
                    FetchPartition(
                        name,
                        p.partition,
                        p.fetch_offset,
                        p.partition_max_bytes,
                        p.current_leader_epoch,
                        p.last_fetched_epoch if version >= 12 else -1,
                        topic_id,
                    )
                )
                answers.append(d)
        responses.append(_TopicResp(topic=name or "", topic_id=t.topic_id, partitions=parts))
    # fetch.wait.max.ms bounds the wait a client may ask for (what a long poll holds of its
    # connection, and the requests queued behind it, ends by then); a fetch with a partition
    # refused here waits for nothing
    max_wait_ms = 0 if refused else min(max(request.max_wait_ms, 0), services.config["fetch.wait.max.ms"])
    params = FetchParams(replica_id, max_bytes, request.min_bytes, max_wait_ms, ctx.received, committed)
    conn = ctx.connection
    result = services.replicas.fetch_records(params, reading, lambda: conn.closed)
    if result.pending:
        return _answer_later(ctx, result, responses, answers, replica_id, refused)
    assert result.read is not None
    return _answer(ctx, result.read, responses, answers, replica_id, refused)


async def _answer_later(
    ctx: RequestContext,
    result: FetchResult,
    responses: list[FetchResponse.FetchableTopicResponse],
    answers: list[FetchResponse.PartitionData],
    replica_id: int,
    refused: bool,
) -> FetchResponse:
    """The answer once the fetch's wait in the purgatory is over (delayed_fetch.py)."""
    return _answer(ctx, await result.wait(), responses, answers, replica_id, refused)


_UNKNOWN_TOPIC = (ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def _error(d: FetchResponse.PartitionData, code: int) -> None:
    d.error_code = code
    d.high_watermark = d.last_stable_offset = d.log_start_offset = -1
    d.aborted_transactions = [] if code in _UNKNOWN_TOPIC else None


def _fill(answers: list[FetchResponse.PartitionData], read: LogReads) -> None:
    """Each partition's answer from what the ReplicaManager read."""
    for d, r in zip(answers, read.partitions):
        if r.error:
            _error(d, r.error)
            continue
        d.high_watermark = r.high_watermark
        d.last_stable_offset = r.last_stable_offset
        d.log_start_offset = r.log_start_offset
        if r.diverging is not None:
            d.diverging_epoch = _EpochEnd(epoch=r.diverging[0], end_offset=r.diverging[1])
        if r.records is not None:
            d.records = r.records
            if r.aborted:
                d.aborted_transactions = [
                    _Aborted(producer_id=a.producer_id, first_offset=a.first_offset) for a in r.aborted
                ]


def _quota_window_bytes(ctx: RequestContext) -> int:
    """What a consumer's quota allows in one window: a fetch answers at most that (beyond
    the first batch, always whole), as Kafka's getMaxValueInQuotaWindow."""
    sensor = ctx.connection.quota_sensors[1]
    if sensor is None or sensor.quota is None:
        return 0x7FFFFFFF
    return max(int(sensor.quota * ctx.services.quotas.window_ms / 1000), 1)


def _answer(
    ctx: RequestContext,
    read: LogReads,
    responses: list[FetchResponse.FetchableTopicResponse],
    answers: list[FetchResponse.PartitionData],
    replica_id: int,
    refused: bool,
) -> FetchResponse:
    """The answer, unless the consumer's quota (consumer_byte_rate) throttles it: then,
    as Kafka's, the bytes are taken back off the rate and the answer holds no partitions,
    only the throttle time (the client fetches them again once it has waited)."""
    total = read.bytes
    if replica_id < 0 and total:
        sensor = ctx.connection.quota_sensors[1]
        if sensor is not None and ctx.services.quotas.fetch.enabled:
            now_ms = time.monotonic() * 1000
            throttle = sensor.record(total, now_ms)
            if throttle:
                sensor.unrecord(total, now_ms)
                read.release()
                ctx.throttle_ms = max(ctx.throttle_ms, throttle)
                ctx.errors = False
                return FetchResponse(throttle_time_ms=throttle, error_code=0, session_id=0, responses=[])
    _fill(answers, read)
    _count_out(ctx, responses, total, replica_id)
    ctx.errors = refused or read.errors
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=responses)


def _count_out(
    ctx: RequestContext, responses: list[FetchResponse.FetchableTopicResponse], total: int, replica_id: int
) -> None:
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
