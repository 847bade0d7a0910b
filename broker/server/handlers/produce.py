"""Produce (0): decodes the request into entries for ReplicaManager.append_records (origin
CLIENT) and encodes its per-partition results; the replication layer appends and waits
(broker/cluster/replica/manager.py and delayed_produce.py hold the rules).

Refused here, before any append: acks other than 0, 1, -1 (INVALID_REQUIRED_ACKS), a
transactional producer (TRANSACTIONAL_ID_AUTHORIZATION_FAILED: not supported yet), a
partition without records (INVALID_RECORD); each partition of the request is answered.

What the replication layer answers per partition, in short: acks=1 after the leader's
append; acks=-1 NOT_ENOUGH_REPLICAS when the ISR is smaller than min.insync.replicas
before the append, else once the high watermark covers the batch (the whole ISR has it;
at once on a broker alone) — NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the
minimum meanwhile, NOT_LEADER_OR_FOLLOWER if this broker stopped leading or lost the
batch (a new leader epoch alone keeps it waiting) — or REQUEST_TIMED_OUT after
timeout_ms. When the topic's flush policy asks for an fsync (flush.messages), the answer
waits for the group commit that makes the batch durable (KAFKA_STORAGE_ERROR if it
fails). Idempotent producers: a retried batch already written is answered with the
offsets of its first write; a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER, a fenced
epoch INVALID_PRODUCER_EPOCH (broker/log/producer_state.py). A write the disk refuses is
KAFKA_STORAGE_ERROR (broker/errors.py maps every append exception). An internal topic
(__consumer_offsets) is INVALID_TOPIC_EXCEPTION: only its coordinator appends there.

acks=0: no response at all; if any partition failed, the connection is closed (Kafka's
way of telling an acks=0 producer). A response that must wait is returned as an
awaitable (one coroutine for the request); the others are answered at once.
"""
import logging

from broker.cluster.replica.manager import AppendOrigin
from broker.log import TopicPartition
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.produce import ProduceRequest, ProduceResponse
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.PRODUCE
MIN_VERSION, MAX_VERSION = 3, 11

log = logging.getLogger(__name__)

_TopicResp = ProduceResponse.TopicProduceResponse
_PartResp = ProduceResponse.PartitionProduceResponse
_CLIENT = AppendOrigin.CLIENT       # read once: an enum's attribute costs ~0.1 us


def handle(ctx: RequestContext, request: ProduceRequest) -> HandlerResult:
    acks = request.acks
    responses = []
    entries = []        # (TopicPartition, records) to append, in the request's order
    answers = []        # their partition responses, in the same order
    failed = False
    if acks not in (0, 1, -1):
        code, message = ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, not {acks}"
    elif request.transactional_id is not None:
        code, message = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactions are not supported by this broker yet"
    else:
        code, message = None, None
    for topic in request.topic_data:
        presp = []
        for p in topic.partition_data:
            r = _PartResp(index=p.index, error_code=0, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1)
            presp.append(r)
            if code is not None:
                r.error_code, r.error_message = code, message
                failed = True
            elif p.records is None or len(p.records) == 0:
                r.error_code, r.error_message = ErrorCode.INVALID_RECORD, "no records"
                failed = True
            else:
                entries.append((TopicPartition(topic.name, p.index), p.records))
                answers.append(r)
        responses.append(_TopicResp(name=topic.name, partition_responses=presp))
    if entries:
        result = ctx.services.replicas.append_records(entries, acks, request.timeout_ms, _CLIENT)
        if result.pending:
            return _answer_later(ctx, result, answers, ProduceResponse(responses=responses, throttle_time_ms=0),
                                 failed)
        failed = _fill(answers, result.partitions) or failed
    if acks == 0:
        if failed:
            log.info("%s: failed acks=0 produce; closing the connection", ctx.connection)
            ctx.connection.close()
        return None
    ctx.errors = failed
    return ProduceResponse(responses=responses, throttle_time_ms=0)


def error_response(request, code: int):
    """Every partition answered with `code` (an old version the broker no longer serves);
    None for acks=0, whose connection is then closed, as Kafka does."""
    if request.acks == 0:
        return None
    return ProduceResponse(throttle_time_ms=0, responses=[
        _TopicResp(name=t.name, partition_responses=[
            _PartResp(index=p.index, error_code=code, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1)
            for p in t.partition_data])
        for t in request.topic_data])


def _fill(answers, results) -> bool:
    """Copies the append's results into the partition responses; True if any failed."""
    failed = False
    for r, res in zip(answers, results):
        r.base_offset = res.base_offset
        r.log_append_time_ms = res.log_append_time
        r.log_start_offset = res.log_start_offset
        if res.error:
            r.error_code, r.error_message = res.error, res.error_message
            failed = True
    return failed


async def _answer_later(ctx, result, answers, response, failed: bool):
    """The answer once every partition's wait is over (never for acks=0: it waits for
    nothing)."""
    ctx.errors = _fill(answers, await result.wait()) or failed
    return response
