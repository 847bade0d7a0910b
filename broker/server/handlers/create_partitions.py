"""CreatePartitions (37): grow a topic to `count` partitions (at most
MAX_PARTITIONS_PER_REQUEST, as CreateTopics)."""

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext
from broker.server.handlers.create_topics import MAX_PARTITIONS_PER_REQUEST

API_KEY = ApiKey.CREATE_PARTITIONS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 3


def handle(ctx: RequestContext, request: CreatePartitionsRequest) -> HandlerResult:
    return _handle(ctx, request)


async def _handle(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    results = []
    for t in request.topics:
        r = CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name, error_code=0, error_message=None)
        results.append(r)
        if not ctx.has_right(RIGHTS.topic, t.name):
            r.error_code, r.error_message = RIGHTS.topic.error_code, "Authorization failed."
            continue
        if t.count > MAX_PARTITIONS_PER_REQUEST:
            r.error_code, r.error_message = (
                ErrorCode.POLICY_VIOLATION,
                f"more than {MAX_PARTITIONS_PER_REQUEST} partitions in one request",
            )
            continue
        try:
            assignments = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
            await ctx.services.admin.create_partitions(
                t.name, t.count, assignments, request.validate_only, request.timeout_ms
            )
        except KafkaProtocolError as exc:
            r.error_code, r.error_message = exc.code, exc.message
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)
