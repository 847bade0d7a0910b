"""WriteTxnMarkers (27): a transaction coordinator asks this broker, as leader, to write
COMMIT or ABORT markers (server/txn_markers.py writes them with acks=-1). Every
partition gets its own answer: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
INVALID_PRODUCER_EPOCH (a marker of a fenced epoch; with v2's TransactionVersion 2, KIP-1228,
also one at the producer's own epoch while a transaction is open: the coordinator bumped
the epoch at the end, so such a marker is a late one), TRANSACTION_COORDINATOR_FENCED (an
older coordinator epoch than the producer's last marker's)... Only brokers send it:
CLUSTER_ACTION, else CLUSTER_AUTHORIZATION_FAILED for every partition, as Kafka's."""

from broker.protocol.api import ApiKey
from broker.protocol.messages.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext
from broker.server.txn_markers import write_markers
from broker.txn.coordinator import Marker

API_KEY = ApiKey.WRITE_TXN_MARKERS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 2

R = WriteTxnMarkersResponse


async def _handle(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    markers = [
        Marker(
            m.producer_id,
            m.producer_epoch,
            bool(m.transaction_result),
            m.coordinator_epoch,
            tuple((t.name, p) for t in m.topics for p in t.partition_indexes),
            m.transaction_version if ctx.api_version >= 2 else 0,
        )
        for m in request.markers
    ]
    if ctx.has_right(RIGHTS.cluster_action, CLUSTER_NAME):
        results = await write_markers(ctx.services, markers)
    else:
        results = {(m.producer_id, t, p): RIGHTS.cluster_action.error_code for m in markers for t, p in m.partitions}
    out = []
    for m in markers:
        topics: dict[str, list[WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult]] = {}
        for t, p in m.partitions:
            topics.setdefault(t, []).append(
                R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=results.get((m.producer_id, t, p), 0))
            )
        out.append(
            R.WritableTxnMarkerResult(
                producer_id=m.producer_id,
                topics=[R.WritableTxnMarkerTopicResult(name=t, partitions=ps) for t, ps in topics.items()],
            )
        )
    return R(markers=out)


def handle(ctx: RequestContext, request: WriteTxnMarkersRequest) -> HandlerResult:
    return _handle(ctx, request)
