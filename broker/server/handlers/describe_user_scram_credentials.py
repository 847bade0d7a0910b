"""DescribeUserScramCredentials (50): each user's SCRAM mechanisms and iteration counts
(never salts or keys), from the broker's credential cache (the store's /config/users).

As Kafka's: no users (null or empty) means every user; a user without credentials is
RESOURCE_NOT_FOUND, one named twice DUPLICATE_RESOURCE (for each mention)."""

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.security.scram import MECHANISM_NUMBERS
from broker.server.context import RequestContext

API_KEY = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 0

_R = DescribeUserScramCredentialsResponse
_Result = _R.DescribeUserScramCredentialsResult


def handle(ctx: RequestContext, request: DescribeUserScramCredentialsRequest) -> DescribeUserScramCredentialsResponse:
    if not ctx.has_right(RIGHTS.cluster, CLUSTER_NAME):
        return _R(
            throttle_time_ms=0, error_code=RIGHTS.cluster.error_code, error_message="Authorization failed.", results=[]
        )
    users = ctx.services.credentials.users()
    names = [u.name for u in request.users] if request.users else sorted(users)
    seen: dict[str, int] = {}
    for n in names:
        seen[n] = seen.get(n, 0) + 1
    results = []
    for n in names:
        if seen[n] > 1:
            results.append(
                _Result(
                    user=n,
                    error_code=ErrorCode.DUPLICATE_RESOURCE,
                    credential_infos=[],
                    error_message="Cannot describe SCRAM credentials for the same user twice in a single request",
                )
            )
        elif n not in users:
            results.append(
                _Result(
                    user=n,
                    error_code=ErrorCode.RESOURCE_NOT_FOUND,
                    credential_infos=[],
                    error_message="Attempt to describe a user credential that does not exist",
                )
            )
        else:
            results.append(
                _Result(
                    user=n,
                    error_code=0,
                    error_message=None,
                    credential_infos=[
                        _R.CredentialInfo(mechanism=MECHANISM_NUMBERS[m], iterations=c.iterations)
                        for m, c in sorted(users[n].items())
                    ],
                )
            )
    return _R(throttle_time_ms=0, error_code=0, error_message=None, results=results)
