"""Value types and exceptions shared by every part of ``broker.protocol``.

Invariants:

* Nothing here performs I/O.  ``FileRegion`` only *describes* a byte range of an
  open file; whoever writes the response to the socket is responsible for
  sending it (e.g. with ``os.sendfile``) and for keeping ``fd`` open until then.
* Every decoding failure caused by the input bytes is reported as
  ``ProtocolDecodeError`` (a ``ValueError``).  Its message always names the
  message, the version, the field and the byte offset (relative to the start
  of the buffer handed to the decoder, i.e. the frame without its size prefix
  when decoding through ``broker.protocol.codec``).
* Every encoding failure caused by an invalid field value (wrong type, integer
  out of range, ``None`` in a non-nullable field, ...) is reported as
  ``ProtocolEncodeError`` (a ``ValueError``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = [
    "FileRegion",
    "ProtocolDecodeError",
    "ProtocolEncodeError",
    "UnsupportedRequestError",
    "UnknownApiKeyError",
    "UnsupportedVersionError",
]


class FileRegion(NamedTuple):
    """``length`` bytes of the open file descriptor ``fd`` starting at ``offset``.

    May be used as the value of a ``records`` field of a response; the encoder
    emits it as a separate part (see ``broker.protocol.codec.encode_response``)
    so it can be sent with sendfile(2).  Any object with ``fd``, ``offset`` and
    ``length`` attributes is accepted in its place.
    """

    fd: int
    offset: int
    length: int


class ProtocolDecodeError(ValueError):
    """Malformed input: the bytes do not form a valid message of this version.

    Attributes (any may be ``None`` when unknown): ``message_name`` (Kafka's
    name, e.g. ``"ProduceRequest"``), ``version``, ``field`` (dotted path from
    the innermost struct, e.g. ``"TopicProduceData.name"``), ``offset`` (byte
    offset in the decoded buffer) and ``reason``.
    """

    def __init__(
        self,
        reason: str,
        *,
        field: str | None = None,
        offset: int | None = None,
        message_name: str | None = None,
        version: int | None = None,
    ) -> None:
        self.reason = reason
        self.field = field
        self.offset = offset
        self.message_name = message_name
        self.version = version
        super().__init__(reason)

    def set_context(self, message_name: str, version: int) -> None:
        """Fill in the message name and version if an inner decoder left them unset."""
        if self.message_name is None:
            self.message_name = message_name
        if self.version is None:
            self.version = version

    def __str__(self) -> str:
        msg = self.message_name if self.message_name is not None else "message"
        ver = f" v{self.version}" if self.version is not None else ""
        field = self.field if self.field is not None else "<unknown field>"
        off = self.offset if self.offset is not None else "?"
        return f"{msg}{ver}: field {field} at byte offset {off}: {self.reason}"


class ProtocolEncodeError(ValueError):
    """A field value cannot be encoded in the requested version."""


class UnsupportedRequestError(ProtocolDecodeError):
    """The request header is valid but the body cannot be decoded by this package.

    ``header`` is the decoded ``RequestHeader`` (correlation id etc.) so the
    server can answer (or close the connection) itself; ``body_offset`` is
    where the body starts in the frame.
    """

    def __init__(self, reason: str, header: Any, body_offset: int) -> None:
        super().__init__(reason, field="RequestHeader.request_api_key", offset=0, message_name="RequestHeader")
        self.header = header
        self.body_offset = body_offset


class UnknownApiKeyError(UnsupportedRequestError):
    """The api key is not one of ``broker.protocol.api.ApiKey``."""


class UnsupportedVersionError(UnsupportedRequestError):
    """The api key is known but the version is outside its valid range.

    Kafka answers an ApiVersions request of an unsupported version with an
    ApiVersions v0 response carrying UNSUPPORTED_VERSION (error 35) and closes
    the connection for every other api.
    """

    def __init__(self, reason: str, header: Any, body_offset: int) -> None:
        super().__init__(reason, header, body_offset)
        self.field = "RequestHeader.request_api_version"
        self.offset = 2
