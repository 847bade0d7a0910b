"""ShareFetch (78, KIP-932): a share consumer's fetch — acknowledgements of what it
received before, then records acquired for it — on its share session (broker/share/).

As Kafka 4.4's KafkaApis.handleShareFetchRequest and SharePartitionManager answer it
(UNSUPPORTED_VERSION with group.share.enable=false):

- READ on the group, else GROUP_AUTHORIZATION_FAILED for the whole request; READ on each
  topic, else TOPIC_AUTHORIZATION_FAILED for its partitions (their acknowledgements too);
  a topic id the broker does not know: UNKNOWN_TOPIC_ID.
- The share session (session.py): epoch 0 opens one (acknowledgements in it are
  INVALID_REQUEST: there is nothing to acknowledge yet), -1 closes it (its acknowledgements
  are applied, nothing is fetched, the member's acquired records are released), any other
  epoch must be the session's (INVALID_SHARE_SESSION_EPOCH; no session:
  SHARE_SESSION_NOT_FOUND; no room for one more: SHARE_SESSION_LIMIT_REACHED) — each a
  top-level error, with nothing applied.
- Acknowledgements (one type per batch or per offset: 0 gap, 1 accept, 2 release, 3 reject,
  4 renew with v2's IsRenewAck) are applied and persisted before the answer; a partition's
  refusal is its AcknowledgeErrorCode (INVALID_RECORD_STATE for records this member does
  not hold acquired, INVALID_REQUEST for a malformed batch or one past the records
  delivered, UNKNOWN_TOPIC_OR_PARTITION for a share partition this broker has not
  fetched from since it became its leader). A renew request fetches nothing
  (KIP-1222), nor one with max_records or max_bytes 0.
- The fetch reads every partition of the session led here from its next fetch offset
  (partition.py), waits up to max_wait_ms (bounded by fetch.wait.max.ms) for min_bytes in
  the purgatory as Fetch does (a DelayedFetch over the share read), then acquires for the
  member, at most max_records: whole batches in the batch-optimized mode (v1, v2 mode 0),
  exactly max_records in KIP-1206's record-limit mode (v2 mode 1). The records are the
  log's own batches, sent with sendfile as Fetch sends them, with the AcquiredRecords
  runs the client must keep to; a partition not led here answers NOT_LEADER_OR_FOLLOWER
  with its current leader and that leader's endpoint.
- A full request's answer (epoch 0) names every partition of the session; a later one
  those with records, an error or acknowledgements.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from broker.cluster.replica.delayed_fetch import DelayedFetch, satisfied
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.share_fetch import ShareFetchRequest, ShareFetchResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext
from broker.share.partition import RENEW
from broker.share.session import FINAL_EPOCH, INITIAL_EPOCH, next_epoch

if TYPE_CHECKING:
    from broker.share.manager import Entry, SharePartitionManager

API_KEY = ApiKey.SHARE_FETCH
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 1, 2

R = ShareFetchResponse
_MAX = 0x7FFFFFFF


def _top_error(code: int, message: str | None = None) -> ShareFetchResponse:
    return R(throttle_time_ms=0, error_code=code, error_message=message, acquisition_lock_timeout_ms=0, responses=[])


class Partition:
    """One partition of the request or the session, as the answer is built."""

    __slots__ = ("topic_id", "index", "name", "error", "ack_error", "acks", "entry", "answer", "has_acks")

    def __init__(self, topic_id: uuid.UUID, index: int, name: str | None) -> None:
        self.topic_id = topic_id
        self.index = index
        self.name = name
        self.error = 0
        self.ack_error = 0
        self.acks: list[tuple[int, int, Sequence[int]]] = []
        self.has_acks = False
        self.entry: Entry | None = None


def check_acks(version: int, renew: bool, batches: Sequence[Any]) -> tuple[int, list[tuple[int, int, Sequence[int]]]]:
    """The acknowledgement batches of one partition as (first, last, types), or the
    error code refusing them (INVALID_REQUEST: RENEW without IsRenewAck, batches out of
    order or overlapping)."""
    out: list[tuple[int, int, Sequence[int]]] = []
    prev = -1
    for b in batches:
        types = b.acknowledge_types
        if not types or b.first_offset < 0 or b.last_offset < b.first_offset or b.first_offset <= prev:
            return ErrorCode.INVALID_REQUEST, []
        if RENEW in types and not renew:
            return ErrorCode.INVALID_REQUEST, []
        prev = b.last_offset
        out.append((b.first_offset, b.last_offset, types))
    return 0, out


async def apply_acks(mgr: SharePartitionManager, group: str, member: str, parts: Sequence[Partition]) -> None:
    """Each partition's acknowledgements, applied and persisted (its ack_error)."""
    for p in parts:
        if not p.has_acks or p.ack_error or p.name is None:
            continue
        entry = p.entry
        if entry is None:
            try:
                entry = mgr.loaded(group, p.topic_id, p.name, p.index)
            except KafkaProtocolError as exc:
                p.ack_error = exc.code
                continue
        p.ack_error = await mgr.acknowledge(entry, member, p.acks)


async def resolve(mgr: SharePartitionManager, group: str, parts: Sequence[Partition]) -> None:
    """Loads the share partition of each partition not in error (its entry), or sets its
    error."""
    for p in parts:
        if p.error or p.name is None or p.entry is not None:
            continue
        try:
            p.entry = await mgr.partition(group, p.topic_id, p.name, p.index)
        except KafkaProtocolError as exc:
            p.error = exc.code


def leader_of(ctx: RequestContext, name: str | None, index: int) -> tuple[int, int, Any]:
    """(leader id, leader epoch, broker info) as the metadata cache knows them."""
    if name is None:
        return -1, -1, None
    md = ctx.services.metadata
    state = md.partition_state(name, index)
    if state is None:
        return -1, -1, None
    return state.leader, state.leader_epoch, md.leader_of(name, index)


async def handle(ctx: RequestContext, request: ShareFetchRequest) -> ShareFetchResponse:
    services = ctx.services
    mgr = services.share_partitions
    version = ctx.api_version
    group = request.group_id
    member = request.member_id or ""
    if not services.config["group.share.enable"]:
        return _top_error(ErrorCode.UNSUPPORTED_VERSION, "Share groups are not enabled on this broker.")
    if not group or not ctx.has_right(RIGHTS.group, group):
        return _top_error(RIGHTS.group.error_code if group else ErrorCode.INVALID_GROUP_ID)
    if not member:
        return _top_error(ErrorCode.INVALID_REQUEST, "no member id")
    renew = version >= 2 and request.is_renew_ack
    epoch = request.share_session_epoch
    has_acks = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
    if epoch == INITIAL_EPOCH and has_acks:
        return _top_error(ErrorCode.INVALID_REQUEST, "acknowledgements in a request opening a share session")
    # the share session: every check before anything is applied
    if epoch == INITIAL_EPOCH:
        session = mgr.sessions.open(group, member, ctx.connection)
        if session is None:
            return _top_error(ErrorCode.SHARE_SESSION_LIMIT_REACHED, "too many share sessions on this broker")
    else:
        session = mgr.sessions.get(group, member)
        if session is None:
            return _top_error(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if epoch != FINAL_EPOCH:
            if epoch != session.epoch:
                return _top_error(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
            session.epoch = next_epoch(epoch)
    metadata = services.metadata
    parts: dict[tuple[uuid.UUID, int], Partition] = {}

    def part(tid: uuid.UUID, index: int) -> Partition:
        p = parts.get((tid, index))
        if p is None:
            name = metadata.topic_name(tid)
            p = parts[(tid, index)] = Partition(tid, index, name)
            if name is None:
                p.error = ErrorCode.UNKNOWN_TOPIC_ID
            elif not ctx.has_right(RIGHTS.topic, name):
                p.error = RIGHTS.topic.error_code
        return p

    for t in request.topics:
        for rp in t.partitions:
            p = part(t.topic_id, rp.partition_index)
            if epoch != FINAL_EPOCH:
                session.partitions[(t.topic_id, rp.partition_index)] = None
            if rp.acknowledgement_batches:
                p.has_acks = True
                code, p.acks = check_acks(version, renew, rp.acknowledgement_batches)
                p.ack_error = code or p.error
    if epoch != FINAL_EPOCH:
        for ft in request.forgotten_topics_data:
            for index in ft.partitions:
                session.partitions.pop((ft.topic_id, index), None)
    # the partitions fetched: the session's (none when closing it or renewing)
    fetching: list[Partition] = []
    if epoch != FINAL_EPOCH and not renew and request.max_records > 0 and request.max_bytes > 0:
        fetching = [part(tid, index) for tid, index in session.partitions]
    ordered = list(parts.values())
    await resolve(mgr, group, fetching)
    await apply_acks(mgr, group, member, ordered)
    if epoch == FINAL_EPOCH:
        mgr.sessions.remove(group, member)
        mgr.release_member(group, member)
    lock_ms = mgr.settings(group).lock_ms
    answers: dict[tuple[uuid.UUID, int], tuple[Any, list[tuple[int, int, int]]]] = {}
    if fetching:
        answers = await _fetch(ctx, request, mgr, member, fetching)
    # the answer
    full = epoch == INITIAL_EPOCH
    by_topic: dict[uuid.UUID, list[ShareFetchResponse.PartitionData]] = {}
    endpoints: dict[int, Any] = {}
    for p in ordered:
        records, acquired = answers.get((p.topic_id, p.index), (None, []))
        if not (full or records is not None or p.error or p.has_acks):
            continue
        d = R.PartitionData(
            partition_index=p.index,
            error_code=p.error,
            acknowledge_error_code=p.ack_error if p.has_acks else 0,
            records=records if records is not None else b"",
            acquired_records=[
                R.AcquiredRecords(first_offset=f, last_offset=la, delivery_count=n) for f, la, n in acquired
            ],
        )
        if p.error == ErrorCode.NOT_LEADER_OR_FOLLOWER or p.ack_error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            leader, leader_epoch, info = leader_of(ctx, p.name, p.index)
            d.current_leader = R.LeaderIdAndEpoch(leader_id=leader, leader_epoch=leader_epoch)
            if info is not None:
                ep = info.endpoint(ctx.listener_name)
                if ep is not None:
                    endpoints[leader] = R.NodeEndpoint(node_id=leader, host=ep[0], port=ep[1], rack=info.rack)
        else:
            d.current_leader = R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
        by_topic.setdefault(p.topic_id, []).append(d)
    ctx.errors = any(p.error or p.ack_error for p in ordered)
    return R(
        throttle_time_ms=0,
        error_code=0,
        acquisition_lock_timeout_ms=lock_ms,
        responses=[R.ShareFetchableTopicResponse(topic_id=tid, partitions=ps) for tid, ps in by_topic.items()],
        node_endpoints=list(endpoints.values()),
    )


async def _fetch(
    ctx: RequestContext,
    request: ShareFetchRequest,
    mgr: SharePartitionManager,
    member: str,
    fetching: list[Partition],
) -> dict[tuple[uuid.UUID, int], tuple[Any, list[tuple[int, int, int]]]]:
    """Reads the partitions (waiting in the purgatory for min_bytes up to max_wait_ms) and
    acquires for the member what the last read holds."""
    services = ctx.services
    await resolve(mgr, request.group_id, fetching)
    targets: list[Entry | int] = [
        p.entry if p.entry is not None else (p.error or ErrorCode.UNKNOWN_SERVER_ERROR) for p in fetching
    ]
    max_bytes = request.max_bytes
    max_records = request.max_records
    strict = ctx.api_version >= 2 and request.share_acquire_mode == 1
    max_wait_ms = min(max(request.max_wait_ms, 0), services.config["fetch.wait.max.ms"])
    deadline = ctx.received + max_wait_ms / 1000
    conn = ctx.connection
    read = mgr.read(targets, max_bytes)
    if max_wait_ms > 0 and not satisfied(read, request.min_bytes, deadline, lambda: conn.closed):
        read.release()
        delayed = DelayedFetch(
            services.replicas.purgatory,
            lambda: mgr.read(targets, max_bytes),
            request.min_bytes,
            deadline,
            read.watches,
            lambda: conn.closed,
        )
        read = await delayed.complete()
    for p, r in zip(fetching, read.partitions):
        if r.error and not p.error:
            p.error = r.error
    acquired = mgr.acquire(member, read, max_records, strict)
    out: dict[tuple[uuid.UUID, int], tuple[Any, list[tuple[int, int, int]]]] = {}
    for p, (records, runs) in zip(fetching, acquired):
        if records is not None:
            out[(p.topic_id, p.index)] = (records, runs)
    return out
