"""The included Kafka APIs: api keys, message classes, versions and header versions.

Invariants:

* ``ApiKey`` and ``API_SPECS`` are derived from the generated registry
  (``broker.protocol.messages``), which ``tools/gen_protocol.py`` writes from the
  single list of included APIs; nothing here repeats that list.
* Valid and flexible version ranges are the ones of the Kafka spec snapshot the
  package was generated from (request and response always agree; the generator
  checks it).
* Header versions follow Kafka's rules:

  - request header v2 for flexible versions, v1 otherwise, except
    ControlledShutdown v0, which uses request header v0 (no client id);
  - response header v1 for flexible versions, v0 otherwise, except ApiVersions,
    whose responses always use header v0 (so a client can read the error code of a
    response to a version it does not understand).

  For a version outside the valid range the same rule is applied to the version
  number (as Kafka's generated ``requestHeaderVersion`` does), so the header of a
  request with a too-new version can still be read.
* The codecs reach further than kbroker's own requests are written for: ``client_versions``
  is what its client and inter-broker channel may send (``CLIENT_MAX_VERSIONS`` caps the
  APIs whose newer versions add fields those requests do not fill in). What the broker
  serves is its handlers' business (``broker.server.handlers``), never the codecs'.
"""

from __future__ import annotations

from typing import NamedTuple

from ._runtime import Message
from .messages import API_MESSAGES, ApiKey

__all__ = [
    "ApiKey",
    "ApiSpec",
    "API_SPECS",
    "CLIENT_MAX_VERSIONS",
    "api_spec",
    "client_versions",
    "request_header_version",
    "response_header_version",
]


class ApiSpec(NamedTuple):
    """What the package knows about one api key."""

    api_key: ApiKey
    request: type[Message]
    response: type[Message]
    versions: tuple[int, int]  # (min, max) valid versions, inclusive
    first_flexible: int | None  # first flexible version, None if never flexible
    latest_version_unstable: bool  # Kafka's "latestVersionUnstable" for the max version

    @property
    def min_version(self) -> int:
        return self.versions[0]

    @property
    def max_version(self) -> int:
        return self.versions[1]

    def is_valid(self, version: int) -> bool:
        return self.versions[0] <= version <= self.versions[1]

    def is_flexible(self, version: int) -> bool:
        return self.first_flexible is not None and version >= self.first_flexible


#: api key -> ApiSpec, for every included API.
API_SPECS: dict[int, ApiSpec] = {
    key: ApiSpec(key, req, resp, versions, flexible, unstable)
    for key, (req, resp, versions, flexible, unstable) in API_MESSAGES.items()
}


#: api key -> the newest version kbroker's own requests (its client, CLI and inter-broker
#: channel) are written for, where the codecs (Kafka 4.4's definitions) go further: Produce
#: v13 names topics by id, Fetch v18 and Metadata v13 add fields those requests never fill
#: in... Raising one is checking the code that builds that request against the new version.
CLIENT_MAX_VERSIONS: dict[int, int] = {
    ApiKey.PRODUCE: 12,
    ApiKey.FETCH: 17,
    ApiKey.LIST_OFFSETS: 10,
    ApiKey.METADATA: 12,
    ApiKey.OFFSET_COMMIT: 9,
    ApiKey.OFFSET_FETCH: 9,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.API_VERSIONS: 4,
    ApiKey.INIT_PRODUCER_ID: 5,
    ApiKey.TXN_OFFSET_COMMIT: 5,
    ApiKey.DESCRIBE_LOG_DIRS: 4,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.DESCRIBE_CLUSTER: 1,
    ApiKey.LIST_TRANSACTIONS: 1,
}


def client_versions(api_key: int) -> tuple[int, int]:
    """The (min, max) versions of `api_key` kbroker's own requests may be sent in."""
    lo, hi = API_SPECS[api_key].versions
    return lo, min(hi, CLIENT_MAX_VERSIONS.get(api_key, hi))


def api_spec(api_key: int) -> ApiSpec | None:
    """The ``ApiSpec`` of ``api_key``, or ``None`` if it is not included."""
    return API_SPECS.get(api_key)


def request_header_version(api_key: int, api_version: int) -> int:
    """RequestHeader version used by requests of ``api_key`` at ``api_version``.

    Raises ``KeyError`` for an api key that is not included.
    """
    spec = API_SPECS[api_key]
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 2 if spec.is_flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """ResponseHeader version used by responses of ``api_key`` at ``api_version``.

    Raises ``KeyError`` for an api key that is not included.
    """
    spec = API_SPECS[api_key]
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if spec.is_flexible(api_version) else 0
