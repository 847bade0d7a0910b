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
"""

from __future__ import annotations

from typing import NamedTuple

from ._runtime import Message
from .messages import API_MESSAGES, ApiKey

__all__ = ["ApiKey", "ApiSpec", "API_SPECS", "api_spec", "request_header_version", "response_header_version"]


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
