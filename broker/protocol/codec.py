"""Request/response framing on top of the generated message codecs (sans-I/O).

A frame on the wire is an int32 size followed by that many bytes::

    +----------------+---------------------------------------------+
    | size: int32 BE | header | body                                |
    +----------------+---------------------------------------------+
      4 bytes          `size` bytes ("the frame" below excludes the size)

Request header (``RequestHeader.json``)::

    v0: | api_key int16 | api_version int16 | correlation_id int32 |
    v1: | api_key int16 | api_version int16 | correlation_id int32 | client_id |
    v2: | api_key int16 | api_version int16 | correlation_id int32 | client_id | tagged fields |

    client_id is a NON-compact nullable string even in v2: int16 length (-1 = null)
    + UTF-8 bytes.  Tagged fields: unsigned varint count, then per field an unsigned
    varint tag, an unsigned varint size and the value.

Response header (``ResponseHeader.json``)::

    v0: | correlation_id int32 |
    v1: | correlation_id int32 | tagged fields |   (flexible versions; never ApiVersions)

Which header version an api/version uses is decided by
``broker.protocol.api.request_header_version`` / ``response_header_version``.

Invariants:

* Decoders take one frame WITHOUT its size prefix (bytes, bytearray or
  memoryview) and never copy it: ``records`` fields of the result are
  ``memoryview`` slices of the frame (writable if the frame is).
* Every malformation raises ``ProtocolDecodeError`` naming message, version, field
  and byte offset (offsets are relative to the start of the frame).
* ``decode_request`` reads what the schema of the request's version says and ignores
  any bytes after the body, as Kafka's broker does (real clients send such requests:
  librdkafka leaves an unfinalized 4-byte array count in some of them).  Tests that
  check an encoder writes exactly one body pass ``strict=True``, which rejects them.
  Responses, and ``Message.decode`` of a whole body, stay strict.
* ``encode_response`` returns a list of parts to be written in order (e.g. with
  ``socket.sendmsg``/``writelines`` for bytes-like parts and ``os.sendfile`` for
  ``FileRegion`` parts); the first part starts with the int32 size prefix, which
  counts every byte of every part, file regions included.  Large bytes-like
  records values are referenced, not copied, so they must not change until the
  parts are written.
* No I/O happens here.
"""

from __future__ import annotations

import struct as _struct
from typing import Any

from broker._native import produce as _native_produce

from . import _runtime as _rt
from ._runtime import Message
from .api import API_SPECS, ApiKey
from .messages.produce import ProduceRequest as _ProduceRequest
from .messages.request_header import RequestHeader
from .messages.response_header import ResponseHeader
from .types import ProtocolDecodeError, ProtocolEncodeError, UnknownApiKeyError, UnsupportedVersionError

__all__ = [
    "request_api_key",
    "decode_request_header",
    "decode_request",
    "encode_response",
    "encode_request",
    "encode_request_parts",
    "decode_response",
    "response_correlation_id",
]

BufferLike = bytes | bytearray | memoryview

_S_HH = _struct.Struct(">hh")
_S_II = _struct.Struct(">ii")
_S_I = _struct.Struct(">i")
_S_H = _struct.Struct(">h")

_CONTROLLED_SHUTDOWN = int(ApiKey.CONTROLLED_SHUTDOWN)
_API_VERSIONS = int(ApiKey.API_VERSIONS)
_UNSUPPORTED_VERSION = 35  # ErrorCode.UNSUPPORTED_VERSION

# api key -> first flexible version (None: never flexible)
_FLEX = {int(k): s.first_flexible for k, s in API_SPECS.items()}
# api key -> (request class, min version, max version, decoders), for the hot path
_REQ = {int(k): (s.request, s.versions[0], s.versions[1], s.request._DECODERS) for k, s in API_SPECS.items()}
_HDR_DECODERS = RequestHeader._DECODERS
# Produce in C (the broker's hot path: the versions of _native/include/kb_messages.h,
# which tools/gen_protocol.py writes); it hands back what it does not cover
_native_produce.setup(_ProduceRequest, _ProduceRequest.TopicProduceData, _ProduceRequest.PartitionProduceData)
_PRODUCE = int(ApiKey.PRODUCE)
_NATIVE_PRODUCE_LOWEST, _NATIVE_PRODUCE_HIGHEST = _native_produce.VERSIONS
_DECODE_BUGS = _rt._DECODE_BUGS


def _request_header_version(api_key: int, api_version: int) -> int:
    if api_key not in _FLEX:
        # Unknown api key: v1 is a prefix of v2 (client_id is non-compact in both), so
        # the correlation id and client id are readable either way.  The returned
        # body offset does not skip a possible v2 tagged-field section.
        return 1
    if api_key == _CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    ff = _FLEX[api_key]
    return 2 if ff is not None and api_version >= ff else 1


# Request header, as read by decode_request / decode_request_header:
#
#   byte 0       2             4                 8                 10        10+n
#   +------------+-------------+-----------------+-----------------+---------+---------------+
#   | api_key    | api_version | correlation_id  | client_id len   | client_ | tagged fields |
#   | int16      | int16       | int32           | int16, -1=null  | id (n)  | (v2 only)     |
#   +------------+-------------+-----------------+-----------------+---------+---------------+
#   v0 (ControlledShutdown v0 only) ends after correlation_id; v1 ends after client_id.
#
# Response frame, as written by encode_response:
#
#   byte 0             4                  8
#   +------------------+------------------+--------------------------+------+
#   | size int32       | correlation_id   | 0x00: no tagged fields   | body |
#   |                  | int32            | (header v1 only)         |      |
#   +------------------+------------------+--------------------------+------+
#   size counts every byte after itself, file-region parts included.


def _short_header(end: int) -> ProtocolDecodeError:
    return ProtocolDecodeError(
        f"need 4 bytes, {end} remain",
        field="RequestHeader.request_api_key" if end < 2 else "RequestHeader.request_api_version",
        offset=0 if end < 2 else 2,
        message_name="RequestHeader",
    )


def decode_request_header(frame: BufferLike) -> tuple[RequestHeader, int]:
    """Decode the request header at the start of ``frame``; returns ``(header, body_offset)``.

    Works for api keys and versions this package does not support, so the server
    can answer them itself (see ``decode_request``).
    """
    buf = _rt.as_buffer(frame)
    end = len(buf)
    if end < 4:
        raise _short_header(end)
    api_key, api_version = _S_HH.unpack_from(buf, 0)
    hv = _request_header_version(api_key, api_version)
    return _rt.decode_body(RequestHeader, buf, 0, end, hv)


def decode_request(frame: BufferLike, strict: bool = False) -> tuple[Any, Any]:
    """Decode one request frame (without size prefix); returns ``(header, request)``.

    Bytes after the body are ignored unless ``strict`` (then a ``ProtocolDecodeError``).

    Raises ``UnknownApiKeyError`` / ``UnsupportedVersionError`` (subclasses of
    ``ProtocolDecodeError`` carrying ``.header``) when the header is readable but
    the api key or version is not supported; for an ApiVersions request of an
    unsupported version Kafka answers ``encode_response((correlation_id, 18, 0),
    ApiVersionsResponse(error_code=35, api_keys=...))``.
    """
    buf = memoryview(frame)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    end = len(buf)
    if end < 4:
        raise _short_header(end)
    api_key, version = _S_HH.unpack_from(buf, 0)
    info = _REQ.get(api_key)
    if info is None:
        header, pos = _rt.decode_body(RequestHeader, buf, 0, end, 1)
        raise UnknownApiKeyError(f"unknown api key {api_key}", header, pos)
    cls, vmin, vmax, decoders = info
    hv = _request_header_version(api_key, version)
    try:
        header, pos = _HDR_DECODERS[hv](buf, 0, end)
    except ProtocolDecodeError as exc:
        exc.set_context("RequestHeader", hv)
        raise
    if not vmin <= version <= vmax:
        raise UnsupportedVersionError(
            f"unsupported version {version} of api {api_key} ({ApiKey(api_key).name}), valid {vmin}-{vmax}", header, pos
        )
    try:
        request, pos = decoders[version](buf, pos, end)
    except ProtocolDecodeError as exc:
        exc.set_context(cls.NAME, version)
        raise
    except _DECODE_BUGS as exc:  # pragma: no cover - safety net; the decoders check explicitly
        raise ProtocolDecodeError(
            f"malformed input ({type(exc).__name__}: {exc})", message_name=cls.NAME, version=version
        ) from exc
    if strict and pos != end:
        raise _rt.trailing_error(cls.NAME, version, pos, end)
    return header, request


def request_api_key(frame: BufferLike) -> int:
    """The api key a request frame (without its size prefix) starts with, without decoding
    its header; -1 when the frame is too short to hold one."""
    return (frame[0] << 8) | frame[1] if len(frame) >= 2 else -1


def decode_request_body(frame: BufferLike, api_key: int, version: int, pos: int) -> Any:
    """The request body of a frame whose header decode_request_header read (`pos`: the
    body offset it returned), without decoding the header again. Raises as
    decode_request does (UnknownApiKeyError and UnsupportedVersionError carry no header).
    Produce is decoded in C (broker._native.produce, its VERSIONS), the rest by the
    generated decoders."""
    buf = memoryview(frame)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    info = _REQ.get(api_key)
    if info is None:
        raise UnknownApiKeyError(f"unknown api key {api_key}", None, pos)
    cls, vmin, vmax, _ = info
    if not vmin <= version <= vmax:
        raise UnsupportedVersionError(
            f"unsupported version {version} of api {api_key} ({ApiKey(api_key).name}), valid {vmin}-{vmax}", None, pos
        )
    if api_key == _PRODUCE and _NATIVE_PRODUCE_LOWEST <= version <= _NATIVE_PRODUCE_HIGHEST:
        try:
            native = _native_produce.decode_request(buf, pos, version)
        except ValueError as exc:  # (reason, position, field)
            raise ProtocolDecodeError(
                exc.args[0], offset=exc.args[1], field=exc.args[2], message_name=cls.NAME, version=version
            ) from None
        if native is not None:
            return native
    return _rt.decode_body(cls, buf, pos, len(buf), version)[0]


def encode_response(header: Any, response: Message) -> list[Any]:
    """Encode ``response`` with its response header and size prefix; returns the parts.

    ``header`` is the request's ``RequestHeader`` or a tuple ``(correlation_id,
    api_key, api_version)``.  Parts are bytes-like objects and file regions (any
    object with ``fd``/``offset``/``length``, e.g. ``FileRegion``); the int32 size
    at the start of the first part counts all of them.
    """
    if isinstance(header, tuple):
        correlation_id, api_key, api_version = header
    else:
        correlation_id = header.correlation_id
        api_key = header.request_api_key
        api_version = header.request_api_version
    spec = API_SPECS.get(api_key)
    if spec is None:
        raise ProtocolEncodeError(f"unknown api key {api_key}")
    if response.__class__ is not spec.response:
        raise ProtocolEncodeError(
            f"expected a {spec.response.NAME} for api key {api_key}, got {type(response).__name__}"
        )
    if api_key == _PRODUCE:
        parts: list[Any] | None
        try:
            parts = _native_produce.encode_response(correlation_id, api_version, response)
        except (OverflowError, TypeError, ValueError):
            parts = None  # a bad field: the generated encoder names it
        if parts is not None:
            return parts
    out = bytearray(8)
    try:
        _S_II.pack_into(out, 0, 0, correlation_id)
    except _struct.error as exc:
        raise ProtocolEncodeError(f"bad correlation id {correlation_id!r}: {exc}") from None
    ff = spec.first_flexible
    if api_key != _API_VERSIONS and ff is not None and api_version >= ff:
        out.append(0)  # response header v1: empty tagged-field section
    sp: list[Any] = []
    _rt.encode_body(response, api_version, out, sp)
    return _rt.assemble(out, sp)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, request: Message
) -> bytes:
    """Encode a request with its header and size prefix (for the project's own client)."""
    spec = API_SPECS.get(api_key)
    if spec is None:
        raise ProtocolEncodeError(f"unknown api key {api_key}")
    if request.__class__ is not spec.request:
        raise ProtocolEncodeError(f"expected a {spec.request.NAME} for api key {api_key}, got {type(request).__name__}")
    hv = _request_header_version(api_key, api_version)
    header = RequestHeader(
        request_api_key=api_key, request_api_version=api_version, correlation_id=correlation_id, client_id=client_id
    )
    out = bytearray(4)
    _rt.encode_body(header, hv, out, None)
    _rt.encode_body(request, api_version, out, None)
    _S_I.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_request_parts(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, request: Message
) -> list[Any]:
    """Like encode_request, but large records values are referenced, not copied: returns
    the parts to write in order (e.g. with ``socket.sendmsg``), the first starting with
    the size prefix that counts them all."""
    spec = API_SPECS.get(api_key)
    if spec is None:
        raise ProtocolEncodeError(f"unknown api key {api_key}")
    if request.__class__ is not spec.request:
        raise ProtocolEncodeError(f"expected a {spec.request.NAME} for api key {api_key}, got {type(request).__name__}")
    hv = _request_header_version(api_key, api_version)
    header = RequestHeader(
        request_api_key=api_key, request_api_version=api_version, correlation_id=correlation_id, client_id=client_id
    )
    out = bytearray(4)
    sp: list[Any] = []
    _rt.encode_body(header, hv, out, None)
    _rt.encode_body(request, api_version, out, sp)
    return _rt.assemble(out, sp)


def response_correlation_id(frame: BufferLike) -> int:
    """The correlation id of a response frame (the first field of every header version)."""
    buf = _rt.as_buffer(frame)
    if len(buf) < 4:
        raise ProtocolDecodeError(
            f"need 4 bytes, {len(buf)} remain",
            field="ResponseHeader.correlation_id",
            offset=0,
            message_name="ResponseHeader",
        )
    correlation_id: int = _S_I.unpack_from(buf, 0)[0]
    return correlation_id


def decode_response(api_key: int, api_version: int, frame: BufferLike) -> tuple[Any, Any]:
    """Decode a response frame (without size prefix); returns ``(header, response)``.

    An ApiVersions response to a version the broker does not support comes back as
    v0 with error UNSUPPORTED_VERSION; like Kafka's client, it is decoded as v0 then
    (and a body that fails to decode at the requested version is retried as v0).
    """
    spec = API_SPECS.get(api_key)
    if spec is None:
        raise ProtocolDecodeError(f"unknown api key {api_key}", message_name="ResponseHeader", offset=0)
    buf = _rt.as_buffer(frame)
    end = len(buf)
    ff = spec.first_flexible
    hv = 1 if api_key != _API_VERSIONS and ff is not None and api_version >= ff else 0
    header, pos = _rt.decode_body(ResponseHeader, buf, 0, end, hv)
    if api_key == _API_VERSIONS and api_version > 0:
        if end - pos >= 2 and _S_H.unpack_from(buf, pos)[0] == _UNSUPPORTED_VERSION:
            api_version = 0
        else:
            try:
                return header, _decode_whole(spec.response, buf, pos, end, api_version)
            except ProtocolDecodeError as first:
                try:
                    return header, _decode_whole(spec.response, buf, pos, end, 0)
                except ProtocolDecodeError:
                    raise first from None
    return header, _decode_whole(spec.response, buf, pos, end, api_version)


def _decode_whole(cls: type[Message], buf: memoryview, pos: int, end: int, version: int) -> Any:
    obj, pos = _rt.decode_body(cls, buf, pos, end, version)
    if pos != end:
        raise _rt.trailing_error(cls.NAME, version, pos, end)
    return obj
