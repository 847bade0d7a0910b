"""Sans-I/O Kafka wire protocol: framing, headers and per-API message codecs.

Layout:

* ``framing``  -- ``FrameReader``: byte stream -> frames (no size prefix).
* ``codec``    -- frames <-> (header, message): ``decode_request``,
  ``decode_request_header``, ``encode_response``, ``encode_request``,
  ``decode_response``.
* ``api``      -- ``ApiKey``, ``API_SPECS`` (classes, versions, flexible versions),
  header-version rules.
* ``messages`` -- generated classes, one module per API (``messages.produce`` ...).
* ``errors``   -- generated ``ErrorCode`` and ``KafkaProtocolError``.
* ``types``    -- ``FileRegion`` and the exceptions.
* ``schema``   -- Kafka's JSON definitions the code is generated from (data only).

Invariant: nothing in this package performs I/O or imports asyncio, socket,
selectors or file APIs; it only transforms bytes and objects.
"""

from .api import API_SPECS, ApiKey, ApiSpec, api_spec, request_header_version, response_header_version
from .codec import (
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    response_correlation_id,
)
from .errors import ErrorCode, KafkaProtocolError
from .framing import DEFAULT_MAX_FRAME_SIZE, FrameReader, FrameTooLarge, InvalidFrame
from .types import (
    FileRegion,
    ProtocolDecodeError,
    ProtocolEncodeError,
    UnknownApiKeyError,
    UnsupportedRequestError,
    UnsupportedVersionError,
)

__all__ = [
    "API_SPECS",
    "ApiKey",
    "ApiSpec",
    "api_spec",
    "request_header_version",
    "response_header_version",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_response",
    "response_correlation_id",
    "ErrorCode",
    "KafkaProtocolError",
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameReader",
    "FrameTooLarge",
    "InvalidFrame",
    "FileRegion",
    "ProtocolDecodeError",
    "ProtocolEncodeError",
    "UnknownApiKeyError",
    "UnsupportedRequestError",
    "UnsupportedVersionError",
]
