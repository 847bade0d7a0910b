"""ApiVersions (18): the API ranges this broker implements, from the handler registry."""
from broker.protocol.api import ApiKey
from broker.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.API_VERSIONS
MIN_VERSION, MAX_VERSION = 0, 4


def handle(ctx: RequestContext, request: ApiVersionsRequest) -> HandlerResult:
    from broker.server.handlers import supported_versions

    if ctx.api_version >= 3:
        ctx.connection.client_software = (request.client_software_name, request.client_software_version)
    return ApiVersionsResponse(
        error_code=0,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                  for k, lo, hi in supported_versions()],
        throttle_time_ms=0,
    )
