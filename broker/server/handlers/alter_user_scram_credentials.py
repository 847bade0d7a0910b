"""AlterUserScramCredentials (51): upserts (salt and salted password, as the client
computed them: the broker keeps only the stored and server keys) and deletes SCRAM
credentials, written to the store's /config/users/<user> with a change notification,
so that every broker's credential cache follows (Kafka's ZooKeeper layout).

Refused per user, with Kafka's codes and messages, and then nothing of that user is
written: an empty name (UNACCEPTABLE_CREDENTIAL), an unknown mechanism
(UNSUPPORTED_SASL_MECHANISM), a mechanism altered twice for one user
(DUPLICATE_RESOURCE), iterations outside 4096..16384 (UNACCEPTABLE_CREDENTIAL), the
deletion of a credential that does not exist (RESOURCE_NOT_FOUND)."""

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.security.scram import MAX_ITERATIONS, MECHANISM_IDS, MIN_ITERATIONS, ScramCredential
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.ALTER_USER_SCRAM_CREDENTIALS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 0

_Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


def _check(request: AlterUserScramCredentialsRequest) -> tuple[dict[str, tuple[int, str]], list[str]]:
    """(user -> (error, message) for the refused users, every user in request order)."""
    errors: dict[str, tuple[int, str]] = {}
    order: list[str] = []
    altered: set[tuple[str, int]] = set()

    def refuse(user: str, code: int, message: str) -> None:
        errors.setdefault(user, (code, message))

    for item in [*request.deletions, *request.upsertions]:
        if item.name not in order:
            order.append(item.name)
        if not item.name:
            refuse(item.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif item.mechanism not in MECHANISM_IDS:
            refuse(item.name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif (item.name, item.mechanism) in altered:
            refuse(
                item.name, ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"
            )
        altered.add((item.name, item.mechanism))
    for u in request.upsertions:
        if u.name in errors:
            continue
        if u.iterations < MIN_ITERATIONS:
            refuse(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too few iterations: {u.iterations}")
        elif u.iterations > MAX_ITERATIONS:
            refuse(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too many iterations: {u.iterations}")
        elif not u.salt or not u.salted_password:
            refuse(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "A salt and a salted password are needed")
    return errors, order


def handle(ctx: RequestContext, request: AlterUserScramCredentialsRequest) -> HandlerResult:
    return _alter(ctx, request)


async def _alter(ctx: RequestContext, request: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
    services = ctx.services
    errors, order = _check(request)
    if not ctx.has_right(RIGHTS.cluster, CLUSTER_NAME):
        errors = {u: (RIGHTS.cluster.error_code, "Authorization failed.") for u in order}
    for user in order:
        if user in errors:
            continue
        config = dict(await services.get_user_config(user))
        for d in request.deletions:
            if d.name == user:
                if config.pop(MECHANISM_IDS[d.mechanism], None) is None:
                    errors[user] = (
                        ErrorCode.RESOURCE_NOT_FOUND,
                        "Attempt to delete a user credential that does not exist",
                    )
        if user in errors:
            continue
        for u in request.upsertions:
            if u.name == user:
                mechanism = MECHANISM_IDS[u.mechanism]
                config[mechanism] = ScramCredential.from_salted_password(
                    mechanism, bytes(u.salted_password), bytes(u.salt), u.iterations
                ).to_text()
        try:
            await services.set_user_config(user, config)
        except Exception as exc:  # the store unavailable ...: this user only
            errors[user] = (ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot write the credentials: {exc}")
    return AlterUserScramCredentialsResponse(
        throttle_time_ms=0,
        results=[
            _Result(user=u, error_code=errors.get(u, (0, None))[0], error_message=errors.get(u, (0, None))[1])
            for u in order
        ],
    )
