"""DescribeTransactions (65): the state of transactional ids this broker coordinates
(NOT_COORDINATOR for others, TRANSACTIONAL_ID_NOT_FOUND for unknown ones). As Kafka's:
DESCRIBE on each id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and the transaction's
topics the client may not describe are left out."""

from broker.protocol.api import ApiKey
from broker.protocol.messages.describe_transactions import DescribeTransactionsRequest, DescribeTransactionsResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 0

R = DescribeTransactionsResponse


def handle(ctx: RequestContext, request: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    coord = ctx.services.txn_coordinator
    out = []
    for txn_id in request.transactional_ids:
        if not ctx.has_right(RIGHTS.transactional_id, txn_id):
            err, md = int(RIGHTS.transactional_id.error_code), None
        else:
            err, md = coord.describe(txn_id)
        if md is None:
            out.append(
                R.TransactionState(
                    error_code=err,
                    transactional_id=txn_id,
                    transaction_state="",
                    transaction_timeout_ms=0,
                    transaction_start_time_ms=-1,
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=[],
                )
            )
            continue
        topics: dict[str, list[int]] = {}
        for t, p in sorted(md.partitions):
            if not ctx.has_right(RIGHTS.topic, t):
                continue
            topics.setdefault(t, []).append(p)
        out.append(
            R.TransactionState(
                error_code=0,
                transactional_id=txn_id,
                transaction_state=md.state.kafka_name,
                transaction_timeout_ms=md.timeout_ms,
                transaction_start_time_ms=md.start_ms,
                producer_id=md.producer_id,
                producer_epoch=md.producer_epoch,
                topics=[R.TopicData(topic=t, partitions=ps) for t, ps in topics.items()],
            )
        )
    return R(throttle_time_ms=0, transaction_states=out)
