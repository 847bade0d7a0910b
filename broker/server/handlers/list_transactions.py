"""ListTransactions (66): the transactional ids this broker coordinates (kafka-transactions
list asks every broker), filtered by state, producer id and (v1) open duration, and, as
Kafka's, by DESCRIBE on each transactional id."""

from broker.protocol.api import ApiKey
from broker.protocol.messages.list_transactions import ListTransactionsRequest, ListTransactionsResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.LIST_TRANSACTIONS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 1


def handle(ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse:
    found, unknown = ctx.services.txn_coordinator.list_transactions(
        request.state_filters, request.producer_id_filters, request.duration_filter if ctx.api_version >= 1 else -1
    )
    return ListTransactionsResponse(
        throttle_time_ms=0,
        error_code=0,
        unknown_state_filters=unknown,
        transaction_states=[
            ListTransactionsResponse.TransactionState(transactional_id=t, producer_id=pid, transaction_state=st)
            for t, pid, st in found
            if ctx.has_right(RIGHTS.transactional_id, t)
        ],
    )
