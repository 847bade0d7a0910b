"""ApiVersions (18): the API ranges this broker implements, from the handler registry.

v3+ also carries features (KIP-584). kbroker has one: transaction.version (the broker
config of that name; in a cluster, at most the level the controller finalized in
/feature, the one every live broker is configured with: BrokerServices.transaction_version).
At level 2 (KIP-890 part 2) the answer says supported 0-2 and finalized 2: Kafka's clients
then add partitions through Produce v12 and take the bumped epoch from EndTxn v5. Below
2 no feature is sent, and the answer is the one of a broker without transaction.version
2. The features' epoch is /feature's zk version (0 for a broker alone): a client keeps
the finalized features of the highest epoch any broker answered."""

from broker.cluster.metadata import TRANSACTION_VERSION
from broker.protocol.api import ApiKey
from broker.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from broker.server.context import RequestContext

API_KEY = ApiKey.API_VERSIONS
MIN_VERSION, MAX_VERSION = 0, 4


def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    from broker.server.handlers import supported_versions

    if ctx.api_version >= 3:
        ctx.connection.client_software = (request.client_software_name, request.client_software_version)
    level = ctx.services.transaction_version
    response = ApiVersionsResponse(
        error_code=0,
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in supported_versions(level)
        ],
        throttle_time_ms=0,
    )
    if ctx.api_version >= 3:
        response.finalized_features_epoch = ctx.services.features_epoch
    if ctx.api_version >= 3 and level >= 2:
        R = ApiVersionsResponse
        # v3 answers leave out features whose minimum is 0, as Kafka's (older clients reject them)
        if ctx.api_version >= 4:
            response.supported_features = [
                R.SupportedFeatureKey(name=TRANSACTION_VERSION, min_version=0, max_version=2)
            ]
        response.finalized_features = [
            R.FinalizedFeatureKey(name=TRANSACTION_VERSION, min_version_level=level, max_version_level=level)
        ]
    return response
