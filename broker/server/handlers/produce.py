"""Produce (0): decodes the request into entries for ReplicaManager.append_records (origin
CLIENT) and encodes its per-partition results; the replication layer appends and waits
(broker/cluster/replica/manager.py and delayed_produce.py hold the rules).

Refused here, before any append: acks other than 0, 1, -1 (INVALID_REQUIRED_ACKS), a
partition without records (INVALID_RECORD), transactional records in a request without a
transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka; the first batch's
attribute byte, no decoding); each partition of the request is answered.

Transactional producers (KIP-890 part 1, transaction.partition.verification.enable): a
transactional batch of a producer with no open transaction on the partition is appended
only once its transaction coordinator confirms that the partition was added
(AddPartitionsToTxn verify_only; the coordinator itself when it is this broker);
otherwise INVALID_TXN_STATE, and NOT_ENOUGH_REPLICAS (retriable for every client) when
the coordinator cannot answer now, as Kafka. A marker written meanwhile (the transaction
ended) voids the verification (the producer state's guard), so a late batch cannot open
a transaction nobody will close. While a Produce waits so, the Produces behind it on its
connection wait for its answer (Connection.hold_produces: they may need the transaction
it opens). v12 (transaction.version 2, KIP-890 part 2; served only
with that config at 2) is the same request, but such a batch's partition is added to the
transaction here (AddPartitionsToTxn v5 to the coordinator, or the coordinator itself),
whatever transaction.partition.verification.enable says: the client sends no
AddPartitionsToTxn.

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
KAFKA_STORAGE_ERROR (broker/cluster/replica/append_errors.py maps every append exception). An internal topic
(__consumer_offsets) is INVALID_TOPIC_EXCEPTION: only its coordinator appends there.

acks=0: no response at all; if any partition failed, the connection is closed (Kafka's
way of telling an acks=0 producer). A response that must wait is returned as an
awaitable (one coroutine for the request); the others are answered at once.

The direct path (`direct`, Server.dispatch's for Produce: handlers/__init__.py
DIRECT_PATHS): decode, append, encode, without the generic request header, request
context or response objects. The common Produce — no transactional id, acks 1 or -1,
every partition answered at once — is read from its frame in C (broker._native.produce
decode_header, decode_request), appended by ReplicaManager.append_now (append_records,
once every partition said it answers at once: Partition.answers_at_once) and answered with
its bytes written in C (encode_appended). The server sends a Produce this way only
without an authorizer, client quotas, a request log of Produce, or a SASL authenticator
on the connection (Server.takes_direct). Here it leaves to the general path, before any
append, what the general path would refuse or make wait: a transactional id, acks 0 or
invalid, a version not served, a partition without records or whose first batch is
transactional, and whatever append_now declines (an internal topic, a partition not led
here, a flush policy, an acks=-1 with followers to wait for); with the request if it was
decoded (not decoded twice). A partition whose append fails is answered with its error as
the general path answers it.
"""

import logging
from collections.abc import Awaitable, Mapping

from broker._native import produce as _native
from broker.cluster.replica.delayed_produce import AppendResult, PartitionResult
from broker.cluster.replica.manager import AppendOrigin, Records
from broker.log import TopicPartition
from broker.log.producer_state import OutOfOrderSequence
from broker.native import RecordBatch
from broker.protocol import codec
from broker.protocol.api import ApiKey
from broker.protocol.codec import BufferLike
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.produce import ProduceRequest, ProduceResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import Answered, RequestContext
from broker.server.services import BrokerServices

API_KEY = ApiKey.PRODUCE
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 3, 12

log = logging.getLogger(__name__)

_TopicResp = ProduceResponse.TopicProduceResponse
_PartResp = ProduceResponse.PartitionProduceResponse
_RecordError = ProduceResponse.BatchIndexAndErrorMessage
_CLIENT = AppendOrigin.CLIENT  # read once: an enum's attribute costs ~0.1 us
RECORD_BATCH_HEADER = 61
_transactional = _native.first_batch_transactional
#: a partition's records to append
_Entry = tuple[TopicPartition, Records]
#: the entries a transaction's coordinator must confirm first: index -> (producer id, epoch, the guard)
_ToVerify = dict[int, tuple[int, int, object]]


def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | Awaitable[ProduceResponse | None] | None:
    acks = request.acks
    responses: list[ProduceResponse.TopicProduceResponse] = []
    entries: list[_Entry] = []  # (TopicPartition, records) to append, in the request's order
    answers: list[ProduceResponse.PartitionProduceResponse] = []  # their partition responses, in the same order
    failed = False
    txn_id = request.transactional_id
    if acks not in (0, 1, -1):
        code, message = ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, not {acks}"
    elif request.transactional_id is not None and not ctx.has_right(RIGHTS.transactional_id, request.transactional_id):
        code, message = RIGHTS.transactional_id.error_code, None
    else:
        code, message = None, None
    for topic in request.topic_data:
        presp = []
        allowed = ctx.has_right(RIGHTS.topic, topic.name)
        for p in topic.partition_data:
            r = _PartResp(index=p.index, error_code=0, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1)
            presp.append(r)
            if code is not None:
                r.error_code, r.error_message = code, message
                failed = True
            elif not allowed:
                r.error_code = RIGHTS.topic.error_code
                failed = True
            elif p.records is None or len(p.records) == 0:
                r.error_code, r.error_message = ErrorCode.INVALID_RECORD, "no records"
                failed = True
            elif txn_id is None and _transactional(p.records):
                # transactional records need a transactional id (Kafka answers so)
                r.error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                r.error_message = "transactional records without a transactional id"
                failed = True
            else:
                entries.append((TopicPartition(topic.name, p.index), p.records))
                answers.append(r)
        responses.append(_TopicResp(name=topic.name, partition_responses=presp))
    # v12 (transaction.version 2): the partitions join the transaction here, whatever the
    # verification setting says
    if entries and request.transactional_id is not None and (ctx.api_version >= 12 or ctx.services.config[_VERIFY]):
        need = _to_verify(ctx, entries)
        if need:
            ctx.connection.hold_produces()  # the Produces behind it wait (Connection.hold_produces)
            return _verify_then_append(ctx, request, entries, answers, need, responses)
    if entries:
        result = ctx.services.replicas.append_records(entries, acks, request.timeout_ms, _CLIENT)
        if result.pending:
            return _answer_later(ctx, result, answers, ProduceResponse(responses=responses, throttle_time_ms=0), failed)
        failed = _fill(answers, result.partitions) or failed
    if acks == 0:
        if failed:
            log.info("%s: failed acks=0 produce; closing the connection", ctx.connection)
            ctx.connection.close()
        return None
    ctx.errors = failed
    return ProduceResponse(responses=responses, throttle_time_ms=0)


_VERIFY = "transaction.partition.verification.enable"
#: coordinator answers a producer cannot act on, answered as a retriable NOT_ENOUGH_REPLICAS (Kafka)
_RETRY_LATER = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)


def _to_verify(ctx: RequestContext, entries: list[_Entry]) -> _ToVerify:
    """Entries (by index) whose transactional batch opens a transaction on a partition
    led here: index -> (producer id, epoch, the verification guard)."""
    out: _ToVerify = {}
    replicas = ctx.services.replicas
    for i, (tp, records) in enumerate(entries):
        if len(records) < RECORD_BATCH_HEADER:
            continue
        b = RecordBatch(records)
        if not b.is_transactional or b.producer_id < 0:
            continue
        part = replicas.get(tp)
        if part is None or not part.is_leader:
            continue
        ps = part.log.producer_state
        if ps.has_open_transaction(b.producer_id, b.producer_epoch):
            continue
        out[i] = (
            b.producer_id,
            b.producer_epoch,
            ps.start_verification(b.producer_id, b.producer_epoch, b.base_sequence),
        )
    return out


async def _verify_then_append(
    ctx: RequestContext,
    request: ProduceRequest,
    entries: list[_Entry],
    answers: list[ProduceResponse.PartitionProduceResponse],
    need: _ToVerify,
    responses: list[ProduceResponse.TopicProduceResponse],
) -> ProduceResponse | None:
    try:
        return await _verified_append(ctx, request, entries, answers, need, responses)
    finally:
        ctx.connection.release_produces()


async def _verified_append(
    ctx: RequestContext,
    request: ProduceRequest,
    entries: list[_Entry],
    answers: list[ProduceResponse.PartitionProduceResponse],
    need: _ToVerify,
    responses: list[ProduceResponse.TopicProduceResponse],
) -> ProduceResponse | None:
    services = ctx.services
    pid, epoch, _guard = next(iter(need.values()))
    parts = [(entries[i][0].topic, entries[i][0].partition) for i in need]
    try:
        if ctx.api_version >= 12:
            verdict = await services.txn_coordinator.add_or_verify(
                request.transactional_id, pid, epoch, parts, add=True
            )
        else:
            verdict = await services.txn_coordinator.verify(request.transactional_id, pid, epoch, parts)
    except Exception as exc:
        log.debug("verifying %s: %s", parts, exc)
        verdict = {}
    keep_entries, keep_answers = [], []
    failed = False
    for i, (entry, r) in enumerate(zip(entries, answers)):
        if i in need:
            tp = entry[0]
            code = verdict.get((tp.topic, tp.partition), ErrorCode.NOT_ENOUGH_REPLICAS)
            if code in _RETRY_LATER:
                code = ErrorCode.NOT_ENOUGH_REPLICAS
            elif code == ErrorCode.PRODUCER_FENCED:
                code = ErrorCode.INVALID_PRODUCER_EPOCH
            if not code:
                part = services.replicas.get(tp)
                # v12: the coordinator added the partition once the previous transaction had
                # all its markers (one of them may have come meanwhile, voiding the guard); a
                # late batch is refused by its epoch (the next marker's is higher)
                if part is None or not (
                    ctx.api_version >= 12 or part.log.producer_state.verified(need[i][0], need[i][2])
                ):
                    code = ErrorCode.INVALID_TXN_STATE  # a marker came meanwhile
                else:
                    try:
                        b = RecordBatch(entry[1])
                        part.log.producer_state.check_verified_order(b.producer_id, b.producer_epoch, b.base_sequence)
                    except OutOfOrderSequence as exc:
                        r.error_code, r.error_message = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, str(exc)
                        failed = True
                        continue
            if code:
                r.error_code = code
                r.error_message = (
                    "Partition was not added to the transaction"
                    if code == ErrorCode.INVALID_TXN_STATE
                    else "Unable to verify the partition was added"
                )
                failed = True
                continue
        keep_entries.append(entry)
        keep_answers.append(r)
    if keep_entries:
        result = services.replicas.append_records(keep_entries, request.acks, request.timeout_ms, _CLIENT)
        results = await result.wait() if result.pending else result.partitions
        failed = _fill(keep_answers, results) or failed
    if request.acks == 0:
        if failed:
            ctx.connection.close()
        return None
    return ProduceResponse(responses=responses, throttle_time_ms=0)


def error_response(request: ProduceRequest, code: int) -> ProduceResponse | None:
    """Every partition answered with `code` (an old version the broker no longer serves);
    None for acks=0, whose connection is then closed, as Kafka does."""
    if request.acks == 0:
        return None
    return ProduceResponse(
        throttle_time_ms=0,
        responses=[
            _TopicResp(
                name=t.name,
                partition_responses=[
                    _PartResp(
                        index=p.index, error_code=code, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1
                    )
                    for p in t.partition_data
                ],
            )
            for t in request.topic_data
        ],
    )


def _fill(answers: list[ProduceResponse.PartitionProduceResponse], results: list[PartitionResult]) -> bool:
    """Copies the append's results into the partition responses; True if any failed."""
    failed = False
    for r, res in zip(answers, results):
        r.base_offset = res.base_offset
        r.log_append_time_ms = res.log_append_time
        r.log_start_offset = res.log_start_offset
        if res.error:
            r.error_code, r.error_message = res.error, res.error_message
            if res.record_errors:  # KIP-467 (v8+; older versions write the error code only)
                r.record_errors = [
                    _RecordError(batch_index=i, batch_index_error_message=why) for i, why in res.record_errors
                ]
            failed = True
    return failed


async def _answer_later(
    ctx: RequestContext,
    result: AppendResult,
    answers: list[ProduceResponse.PartitionProduceResponse],
    response: ProduceResponse,
    failed: bool,
) -> ProduceResponse:
    """The answer once every partition's wait is over (never for acks=0: it waits for
    nothing)."""
    ctx.errors = _fill(answers, await result.wait()) or failed
    return response


# ---------------------------------------------------------------------- the direct path


def direct(
    services: BrokerServices, frame: BufferLike, version_caps: Mapping[int, int]
) -> Answered | ProduceRequest | None:
    """A Produce frame's answer (see the module docstring), its partitions appended: an
    Answered (the answer's frames, the client id, the response when a partition failed).
    Otherwise nothing is appended, and the general path handles the request: the
    request as decoded here (what the general decoder gives for it), or None when it was
    not decoded. The caller checked the server-wide conditions (Server.takes_direct)."""
    head = _native.decode_header(frame)
    if head is None:
        return None
    version, correlation_id, client_id, pos = head
    if version > version_caps.get(API_KEY, MAX_VERSION):
        return None
    try:
        request = _native.decode_request(frame, pos, version)
    except ValueError:  # malformed: the general path says what is wrong
        return None
    if request is None:
        return None
    acks = request.acks
    if request.transactional_id is not None or (acks != 1 and acks != -1):
        return request
    entries = []
    topics = request.topic_data
    for topic in topics:
        name = topic.name
        for p in topic.partition_data:
            records = p.records
            if records is None or len(records) == 0 or _transactional(records):
                return request  # refused by handle()
            entries.append((TopicPartition(name, p.index), records))
    results = services.replicas.append_now(entries, acks, request.timeout_ms)
    if results is None:
        return request  # it would wait, or be refused before its append
    for r in results:
        if r.error:
            break
    else:
        return _native.encode_appended(correlation_id, version, topics, results), client_id, None
    # a partition failed: answered as the general path answers it, its errors counted
    responses = [
        _TopicResp(
            name=t.name,
            partition_responses=[
                _PartResp(index=p.index, error_code=0, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1)
                for p in t.partition_data
            ],
        )
        for t in topics
    ]
    _fill([r for t in responses for r in t.partition_responses], results)
    response = ProduceResponse(responses=responses, throttle_time_ms=0)
    return codec.encode_response((correlation_id, API_KEY, version), response), client_id, response
