"""Produce (0): validate each partition's batches, assign offsets in place, append.

acks=0: no response at all; if any partition failed, the connection is closed (Kafka's
way of telling an acks=0 producer). acks=1: answer after the leader's append. acks=-1:
NOT_ENOUGH_REPLICAS when the ISR is smaller than min.insync.replicas before the append;
else answer once the high watermark covers the batch (the whole ISR has it; at once on a
broker alone) — NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum
meanwhile, NOT_LEADER_OR_FOLLOWER if this broker stopped leading (a new leader epoch alone
keeps it waiting) — or REQUEST_TIMED_OUT after timeout_ms. When the topic's flush policy asks for an fsync
(flush.messages), the answer waits for the group commit that makes the batch durable.
Idempotent producers: a retried batch already written is answered with the offsets of
its first write; a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER, a fenced epoch
INVALID_PRODUCER_EPOCH (broker/log/producer_state.py).
A write the disk refuses (full, I/O error), or an fsync that fails, is
KAFKA_STORAGE_ERROR for that partition; the log dir reports it once (broker/log).
"""
import asyncio
import logging

from broker.cluster.replica.purgatory import HIGH_WATERMARK
from broker.errors import APPEND_ERRORS, append_error
from broker.log import LogStorageError
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.produce import ProduceRequest, ProduceResponse
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.PRODUCE
MIN_VERSION, MAX_VERSION = 3, 11

log = logging.getLogger(__name__)

_TopicResp = ProduceResponse.TopicProduceResponse
_PartResp = ProduceResponse.PartitionProduceResponse


def handle(ctx: RequestContext, request: ProduceRequest) -> HandlerResult:
    broker = ctx.broker
    acks = request.acks
    responses = []
    failed = False
    waits = []          # (partition response, Partition, required end offset)
    flushes = []
    if acks not in (0, 1, -1):
        code, message = ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, not {acks}"
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
                continue
            try:
                if request.transactional_id is not None:
                    raise KafkaProtocolError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                             "transactions are not supported by this broker yet")
                if p.records is None or len(p.records) == 0:
                    raise KafkaProtocolError(ErrorCode.INVALID_RECORD, "no records")
                part = broker.replicas.leader_partition(topic.name, p.index)
                info = part.append_as_leader(p.records, acks)
                r.base_offset = info.base_offset
                r.log_append_time_ms = info.log_append_time
                r.log_start_offset = info.log_start_offset
                if acks == -1 and part.log.high_watermark <= info.last_offset:
                    waits.append((r, part, info.last_offset + 1, part.leader_epoch))
                if acks != 0 and part.log.needs_flush():
                    flushes.append((r, part.log))
            except APPEND_ERRORS as exc:
                r.error_code, r.error_message = append_error(exc)
                failed = True
        responses.append(_TopicResp(name=topic.name, partition_responses=presp))
    if acks == 0:
        if failed:
            log.info("%s: failed acks=0 produce; closing the connection", ctx.connection)
            ctx.connection.close()
        return None
    response = ProduceResponse(responses=responses, throttle_time_ms=0)
    if flushes or waits:
        return _complete_later(ctx.broker.replicas.purgatory, ctx.broker.replicas, response, flushes, waits,
                               request.timeout_ms)
    return response


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


async def _complete_later(purgatory, replicas, response, flushes, waits, timeout_ms: int):
    """The answer once the group commit made the batches durable and/or the ISR has them."""
    if flushes:
        logs = list({lg: None for _, lg in flushes})
        results = await asyncio.gather(*(lg.schedule_flush() for lg in logs), return_exceptions=True)
        failed = {lg: exc for lg, exc in zip(logs, results) if isinstance(exc, LogStorageError)}
        for lg, exc in zip(logs, results):
            if isinstance(exc, BaseException) and lg not in failed:
                raise exc
        for r, lg in flushes:
            if lg in failed:
                r.error_code, r.error_message = ErrorCode.KAFKA_STORAGE_ERROR, str(failed[lg])
    if waits:
        await _await_replication(purgatory, replicas, waits, timeout_ms)
    return response


async def _await_replication(purgatory, replicas, waits, timeout_ms: int) -> None:
    """Kafka's DelayedProduce: sleeps in the purgatory until the high watermark of every
    partition covers its batch (each follower fetch may move it), or the timeout. While
    this broker leads the partition it keeps waiting, whatever its leader epoch (the
    controller bumps it on every ISR shrink; the batch is still here and will commit). A
    partition this broker no longer leads answers NOT_LEADER_OR_FOLLOWER at once, as
    Kafka's checkEnoughReplicasReachOffset: the producer finds the new leader and retries
    (an idempotent one without duplicating), instead of waiting out its timeout here. So
    does one it leads again after following another leader (A -> B -> A) whose log no
    longer holds the batch (truncated as a follower): its epoch no longer reaches the
    batch's end in the epoch cache, and the offsets may now hold other records."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(timeout_ms, 0) / 1000
    pending = list(waits)
    while pending:
        still = []
        for w in pending:
            r, part, end, epoch = w
            if not part.is_leader or replicas.get(part.tp) is not part:
                r.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                r.error_message = f"this broker stopped leading {part.tp} while the batch waited for the ISR"
            elif part.leader_epoch != epoch and not part.holds(epoch, end):
                r.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                r.error_message = f"the batch of {part.tp} was truncated while it waited for the ISR"
            elif part.log.high_watermark < end:
                still.append(w)
        pending = still
        if not pending:
            break
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        await purgatory.wait([(part.tp, HIGH_WATERMARK) for _, part, _, _ in pending], remaining)
    for r, _part, _end, _epoch in pending:
        r.error_code = ErrorCode.REQUEST_TIMED_OUT
    # Kafka's checkEnoughReplicasReachOffset: the ISR may have shrunk while waiting
    for r, part, _end, _epoch in waits:
        if r.error_code == 0 and not part.enough_replicas():
            r.error_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            r.error_message = (f"the ISR {part.isr} of {part.tp} shrank below min.insync.replicas "
                               f"{part.log.config.min_insync_replicas} while waiting")
