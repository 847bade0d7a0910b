"""DeleteTopics (20): by name (v0-5) or by name or topic id (v6). An unknown topic's
error carries the error's own description as its message, as Kafka's does."""

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.DELETE_TOPICS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 6

_Result = DeleteTopicsResponse.DeletableTopicResult
_DESCRIPTIONS: dict[int, str] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.TOPIC_DELETION_DISABLED: "Topic deletion is disabled.",
}


def handle(ctx: RequestContext, request: DeleteTopicsRequest) -> HandlerResult:
    return _handle(ctx, request)


async def _handle(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    services = ctx.services
    if ctx.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(n, None) for n in request.topic_names]
    results = []
    for name, topic_id in wanted:
        r = _Result(name=name, error_code=0, error_message=None)
        results.append(r)
        if name is None:
            name = services.metadata.topic_name(topic_id)
            r.name = name
            if name is None:
                r.error_code = ErrorCode.UNKNOWN_TOPIC_ID
                continue
        if not ctx.has_right(RIGHTS.topic, name):
            r.error_code, r.error_message = RIGHTS.topic.error_code, "Authorization failed."
            continue
        info = services.metadata.topic(name)
        if info is not None:
            r.topic_id = info.topic_id
        try:
            await services.admin.delete_topic(name, request.timeout_ms)
        except KafkaProtocolError as exc:
            r.error_code = exc.code
            r.error_message = exc.message or _DESCRIPTIONS.get(exc.code)
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)
