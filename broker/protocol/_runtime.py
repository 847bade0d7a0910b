"""Runtime support shared by the generated codecs in ``broker.protocol.messages``.

The generated modules contain one straight-line decode and one encode function per
(struct, version); this module holds the few pieces they share: the base classes,
the slow paths (multi-byte varints, tagged-field sections, records values), and the
constructors of the error objects.

Invariants:

* Decoders work on a ``memoryview`` of format ``'B'`` (``as_buffer``) and an explicit
  ``end`` bound; every length read from the input is checked against ``end - pos``
  before it is used, so a decoder never indexes past ``end``, never allocates more
  than the input could describe and never loops more times than there are bytes
  left.  Every failure is a ``ProtocolDecodeError`` carrying the field and the
  byte offset; ``decode_body`` adds the message name and version.
* ``records`` values are decoded as ``memoryview`` slices of the input (zero-copy,
  writable when the input is writable).  Everything else is copied out (``str``,
  ``bytes``, ``int`` ...), so a decoded object only references the input buffer
  through its records fields.
* Encoders append to one ``bytearray``.  A records value that is a file region or a
  bytes-like object of at least ``SPLICE_THRESHOLD`` bytes is not copied: its
  position in the output is recorded in the splice list ``sp`` instead and
  ``assemble`` turns the bytearray plus the splices into a list of parts.  With
  ``sp=None`` (encoding to ``bytes``) every bytes-like value is copied and a file
  region is an error.
* Nothing here performs I/O.
"""

from __future__ import annotations

import functools
import struct as _struct
from collections.abc import Callable
from typing import Any, NamedTuple
from uuid import UUID

from .types import ProtocolDecodeError, ProtocolEncodeError

#: what a decoder reads: any contiguous bytes
Buffer = bytes | bytearray | memoryview
#: a generated decoder: (buffer, position, end) -> (object, position after it)
Decoder = Callable[[memoryview, int, int], tuple[Any, int]]
#: a generated encoder: (object, output, splice list) -> None
Encoder = Callable[[Any, bytearray, list[Any] | None], None]
#: a generated decoder of one tagged field: (object, buffer, position, end) -> position
TagDecoder = Callable[[Any, memoryview, int, int], int]

__all__ = ["Struct", "Message", "DataMessage", "Field", "as_buffer", "decode_body", "encode_body"]

#: Bytes-like records values at least this long are emitted as separate parts by
#: ``encode_response`` instead of being copied into the response buffer.
SPLICE_THRESHOLD = 4096

MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "MISSING", "__slots__": ()})()
ZERO_UUID = UUID(int=0)

S_INT16 = _struct.Struct(">h")
S_INT32 = _struct.Struct(">i")

#: Precompiled ``Struct(">{n}{code}")`` for arrays of fixed-size primitives with n < 32
#: elements (formatting a format string per call costs more than the packing itself).
ARRAY_STRUCTS = {code: tuple(_struct.Struct(f">{n}{code}") for n in range(32)) for code in "bhHiqd?"}


@functools.lru_cache(maxsize=256)
def array_struct(code: str, n: int) -> _struct.Struct:
    """``Struct(">{n}{code}")`` for longer arrays (cached)."""
    return _struct.Struct(f">{n}{code}")


_DECODE_BUGS = (
    IndexError,
    KeyError,
    TypeError,
    ValueError,
    OverflowError,
    _struct.error,
    MemoryError,
    RecursionError,
    AttributeError,
)
_ENCODE_ERRORS = (
    TypeError,
    AttributeError,
    ValueError,
    OverflowError,
    _struct.error,
    UnicodeEncodeError,
    IndexError,
    BufferError,
)


class Field(NamedTuple):
    """Schema metadata of one field (for introspection and tests; not used by codecs).

    ``type`` is Kafka's type string (``"int32"``, ``"string"``, ``"[]int32"``,
    ``"[]TopicProduceData"``, ``"records"`` ...); ``versions``, ``nullable``,
    ``tagged`` are inclusive ``(low, high)`` version ranges (``high`` is 32767 for
    "N+") or ``None``; ``struct`` is the struct class for struct and struct-array
    fields.
    """

    name: str
    kafka_name: str
    type: str
    versions: tuple[int, int]
    nullable: tuple[int, int] | None
    tagged: tuple[int, int] | None
    tag: int | None
    struct: Any
    flexible: tuple[int, int] | None = None  # per-field "flexibleVersions" override (RequestHeader.ClientId)


class Struct:
    """Base of every generated class: slotted, mutable, compared field by field."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]
    _FIELDS: tuple[Field, ...] = ()


class Message(Struct):
    """Base of generated top-level classes (requests, responses, headers, data)."""

    __slots__ = ()
    NAME: str = ""
    API_KEY: int | None = None
    MIN_VERSION: int = 0
    MAX_VERSION: int = 0
    FLEXIBLE_VERSION: int | None = None
    _DECODERS: tuple[Decoder | None, ...] = ()
    _ENCODERS: tuple[Encoder | None, ...] = ()

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return cls.FLEXIBLE_VERSION is not None and version >= cls.FLEXIBLE_VERSION

    @classmethod
    def decode(cls, data: Buffer, version: int) -> Any:
        """Decode a whole body (no size prefix, no header); trailing bytes are an error."""
        buf = as_buffer(data)
        end = len(buf)
        obj, pos = decode_body(cls, buf, 0, end, version)
        if pos != end:
            raise trailing_error(cls.NAME, version, pos, end)
        return obj

    def encode(self, version: int) -> bytes:
        """Encode the body alone (no header, no size prefix) as bytes.

        Fields that do not exist in ``version`` are silently not written.  A
        ``FileRegion`` records value cannot be encoded this way (use
        ``codec.encode_response``).
        """
        out = bytearray()
        encode_body(self, version, out, None)
        return bytes(out)


class DataMessage(Message):
    """Base of versioned data structs (e.g. the consumer protocol), which are not
    framed by a request header but prefixed by their int16 version."""

    __slots__ = ()

    def encode_versioned(self, version: int) -> bytes:
        out = bytearray(S_INT16.pack(version))
        encode_body(self, version, out, None)
        return bytes(out)

    @classmethod
    def decode_versioned(cls, data: Buffer) -> tuple[Any, int]:
        """Decode ``int16 version`` + body; returns ``(obj, version)``.

        As in Kafka's ConsumerProtocol, a version newer than ``MAX_VERSION`` is
        decoded as ``MAX_VERSION`` (later versions only append fields) and
        trailing bytes are ignored.
        """
        buf = as_buffer(data)
        end = len(buf)
        if end < 2:
            raise ProtocolDecodeError(f"need 2 bytes, {end} remain", field="version", offset=0, message_name=cls.NAME)
        version = S_INT16.unpack_from(buf, 0)[0]
        if version < cls.MIN_VERSION:
            raise ProtocolDecodeError(
                f"unsupported version {version}", field="version", offset=0, message_name=cls.NAME
            )
        if version > cls.MAX_VERSION:
            version = cls.MAX_VERSION
        obj, _ = decode_body(cls, buf, 2, end, version)
        return obj, version


def as_buffer(data: Buffer) -> memoryview:
    """A one-dimensional byte memoryview of ``data`` (no copy)."""
    buf = memoryview(data)
    if buf.format != "B" or buf.ndim != 1:
        buf = buf.cast("B")
    return buf


def decode_body(cls: type[Message], buf: memoryview, pos: int, end: int, version: int) -> tuple[Any, int]:
    """Run ``cls``'s decoder for ``version`` on ``buf[pos:end]``; returns ``(obj, pos)``."""
    decs = cls._DECODERS
    if not (cls.MIN_VERSION <= version <= cls.MAX_VERSION) or decs[version] is None:
        raise ProtocolDecodeError(
            f"unsupported version {version} (valid {cls.MIN_VERSION}-{cls.MAX_VERSION})",
            field=None,
            offset=pos,
            message_name=cls.NAME,
            version=version,
        )
    try:
        return decs[version](buf, pos, end)  # type: ignore[misc]  # checked above
    except ProtocolDecodeError as exc:
        exc.set_context(cls.NAME, version)
        raise
    except _DECODE_BUGS as exc:  # pragma: no cover - safety net; the decoders check explicitly
        raise ProtocolDecodeError(
            f"malformed input ({type(exc).__name__}: {exc})", message_name=cls.NAME, version=version
        ) from exc


def encode_body(obj: Message, version: int, out: bytearray, sp: list[Any] | None) -> None:
    """Append ``obj`` encoded at ``version`` to ``out`` (see module docstring for ``sp``)."""
    cls = type(obj)
    encs = cls._ENCODERS
    if not (cls.MIN_VERSION <= version <= cls.MAX_VERSION) or encs[version] is None:
        raise ProtocolEncodeError(
            f"{cls.NAME}: unsupported version {version} (valid {cls.MIN_VERSION}-{cls.MAX_VERSION})"
        )
    try:
        encs[version](obj, out, sp)  # type: ignore[misc]  # checked above
    except ProtocolEncodeError as exc:
        raise ProtocolEncodeError(f"{cls.NAME} v{version}: {exc}") from exc
    except _ENCODE_ERRORS as exc:
        where = explain_encode_failure(obj, version, cls.FLEXIBLE_VERSION)
        raise ProtocolEncodeError(
            f"{cls.NAME} v{version}: {where or 'invalid value'} ({type(exc).__name__}: {exc})"
        ) from exc


# --------------------------------------------------------------------------- errors


def eof(where: str, pos: int, end: int, need: int) -> ProtocolDecodeError:
    return ProtocolDecodeError(f"need {need} bytes, {max(end - pos, 0)} remain", field=where, offset=pos)


def group_eof(struct_name: str, fields: tuple[tuple[str, int], ...], pos: int, end: int) -> ProtocolDecodeError:
    """Truncation inside a group of fixed-size fields: name the first field cut off."""
    p = pos
    for name, size in fields:
        if p + size > end:
            return eof(f"{struct_name}.{name}", p, end, size)
        p += size
    return eof(struct_name, pos, end, p - pos)  # pragma: no cover


def overrun(where: str, pos: int, length: int, remaining: int, what: str = "length") -> ProtocolDecodeError:
    return ProtocolDecodeError(f"{what} {length} exceeds the {remaining} remaining bytes", field=where, offset=pos)


def null_error(where: str, pos: int) -> ProtocolDecodeError:
    return ProtocolDecodeError("null in a non-nullable field", field=where, offset=pos)


def utf8_error(where: str, pos: int, exc: UnicodeDecodeError) -> ProtocolDecodeError:
    return ProtocolDecodeError(
        f"invalid UTF-8 ({exc.reason} at string byte {exc.start})", field=where, offset=pos + exc.start
    )


def tag_size_error(where: str, pos: int, used: int, size: int) -> ProtocolDecodeError:
    return ProtocolDecodeError(f"tagged field declared {size} bytes but its value used {used}", field=where, offset=pos)


def trailing_error(name: str, version: int, pos: int, end: int) -> ProtocolDecodeError:
    return ProtocolDecodeError(
        f"{end - pos} trailing bytes after the body", field="<end>", offset=pos, message_name=name, version=version
    )


# --------------------------------------------------------------------------- varints


def uvarint_tail(buf: memoryview, pos: int, end: int, value: int, where: str) -> tuple[int, int]:
    """Finish an unsigned varint whose first byte ``value`` (>= 0x80) was at ``pos - 1``.

    Kafka's varints are at most 5 bytes (32 bits); unrolled for speed.
    """
    if pos < end:
        b = buf[pos]
        value = (value & 0x7F) | ((b & 0x7F) << 7)
        if b < 0x80:
            return value, pos + 1
        if pos + 1 < end:
            b = buf[pos + 1]
            value |= (b & 0x7F) << 14
            if b < 0x80:
                return value, pos + 2
            if pos + 2 < end:
                b = buf[pos + 2]
                value |= (b & 0x7F) << 21
                if b < 0x80:
                    return value, pos + 3
                if pos + 3 < end:
                    b = buf[pos + 3]
                    if b & 0x80:
                        raise ProtocolDecodeError("unsigned varint longer than 5 bytes", field=where, offset=pos - 1)
                    value |= b << 28
                    if value > 0xFFFFFFFF:
                        raise ProtocolDecodeError("unsigned varint exceeds 32 bits", field=where, offset=pos - 1)
                    return value, pos + 4
    raise ProtocolDecodeError("truncated unsigned varint", field=where, offset=pos - 1)


def read_uvarint(buf: memoryview, pos: int, end: int, where: str) -> tuple[int, int]:
    if pos >= end:
        raise eof(where, pos, end, 1)
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    return uvarint_tail(buf, pos + 1, end, b, where)


def put_uvarint(out: bytearray, n: int) -> None:
    if n < 0 or n > 0xFFFFFFFF:
        raise ProtocolEncodeError(f"unsigned varint out of range: {n}")
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


# --------------------------------------------------------------------------- uuids

_UUID_CACHE: dict[bytes, UUID] = {}


def uuid_from(raw: bytes) -> UUID:
    """``UUID(bytes=raw)``, memoised (topic ids repeat in every request)."""
    u = _UUID_CACHE.get(raw)
    if u is None:
        if len(_UUID_CACHE) >= 4096:
            _UUID_CACHE.clear()
        u = _UUID_CACHE[raw] = UUID(bytes=raw)
    return u


# --------------------------------------------------------------------------- tagged fields


def read_tags(
    o: Any, buf: memoryview, pos: int, end: int, n: int, where: str, known: dict[int, TagDecoder] | None = None
) -> int:
    """Read ``n`` tagged fields; ``known`` maps tag -> decoder(o, buf, pos, stop) -> pos.

    Unknown tags are kept in ``o.unknown_tagged_fields`` as ``(tag, bytes)``.
    """
    if n * 2 > end - pos:
        raise overrun(where, pos, n, end - pos, "tagged field count")
    unknown = []
    for _ in range(n):
        tag, pos = read_uvarint(buf, pos, end, where)
        size, pos = read_uvarint(buf, pos, end, where)
        if size > end - pos:
            raise overrun(f"{where}[tag {tag}]", pos, size, end - pos, "tagged field size")
        stop = pos + size
        dec = known.get(tag) if known is not None else None
        if dec is None:
            unknown.append((tag, bytes(buf[pos:stop])))
        else:
            p = dec(o, buf, pos, stop)
            if p != stop:
                raise tag_size_error(f"{where}[tag {tag}]", pos, p - pos, size)
        pos = stop
    o.unknown_tagged_fields = unknown
    return pos


def put_tags(out: bytearray, known: list[tuple[int, bytes]], unknown: list[tuple[int, bytes]]) -> None:
    """Write a tagged-field section: known ``(tag, bytes)`` (ascending) merged with unknown ones."""
    if unknown:
        items = sorted([*known, *unknown], key=_tag_key)
    else:
        items = known
    put_uvarint(out, len(items))
    for tag, data in items:
        put_uvarint(out, tag)
        put_uvarint(out, len(data))
        out += data


def _tag_key(item: tuple[int, bytes]) -> int:
    return item[0]


# --------------------------------------------------------------------------- bytes and records


def put_bytes(out: bytearray, v: Buffer | None, compact: bool, nullable: bool) -> None:
    if v is None:
        if not nullable:
            raise ProtocolEncodeError("None in a non-nullable bytes field")
        if compact:
            out.append(0)
        else:
            out += b"\xff\xff\xff\xff"
        return
    n = v.nbytes if isinstance(v, memoryview) else len(v)
    if compact:
        put_uvarint(out, n + 1)
    else:
        out += S_INT32.pack(n)
    out += v


def put_records(out: bytearray, sp: list[Any] | None, v: Any, compact: bool, nullable: bool) -> None:
    """Write a records value: bytes-like, None, or a file region (``fd``/``offset``/``length``)."""
    if v is None:
        if not nullable:
            raise ProtocolEncodeError("None in a non-nullable records field")
        if compact:
            out.append(0)
        else:
            out += b"\xff\xff\xff\xff"
        return
    if isinstance(v, (bytes, bytearray)):
        n = len(v)
        region = False
    elif isinstance(v, memoryview):
        n = v.nbytes
        region = False
    else:
        try:
            n = v.length
            v.fd, v.offset  # noqa: B018 - must look like a file region
        except AttributeError:
            raise ProtocolEncodeError(
                f"records value must be bytes-like, None or a file region, not {type(v).__name__}"
            ) from None
        if n < 0:
            raise ProtocolEncodeError(f"file region with negative length {n}")
        region = True
    if compact:
        put_uvarint(out, n + 1)
    else:
        out += S_INT32.pack(n)
    if region:
        if sp is None:
            raise ProtocolEncodeError("a file region records value can only be encoded by encode_response")
        sp.append((len(out), v, n))
    elif sp is not None and n >= SPLICE_THRESHOLD:
        sp.append((len(out), v, n))
    else:
        out += v


def assemble(out: bytearray, sp: list[Any]) -> list[Any]:
    """Split ``out`` at the splice points; returns the list of parts.

    ``out`` must start with a 4-byte placeholder, which receives the int32 size of
    everything after it (including spliced parts).
    """
    total = len(out) - 4
    for _, _, n in sp:
        total += n
    if total > 0x7FFFFFFF:
        raise ProtocolEncodeError(f"frame of {total} bytes exceeds the int32 size prefix")
    S_INT32.pack_into(out, 0, total)
    if not sp:
        return [out]
    mv = memoryview(out)
    parts: list[Any] = []
    prev = 0
    for at, v, n in sp:
        if at > prev:
            parts.append(mv[prev:at])
        if n:
            parts.append(v)
        prev = at
    if prev < len(out):
        parts.append(mv[prev:])
    return parts


# --------------------------------------------------------------------------- encode diagnostics

_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}


def _in(rng: tuple[int, int] | None, v: int) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


def _check_value(t: str, f: Field, v: Any, version: int, compact: bool) -> str | None:
    if v is None:
        return None if _in(f.nullable, version) else "None in a non-nullable field"
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        if not isinstance(v, int):
            return f"expected int, got {type(v).__name__}"
        if not lo <= v <= hi:
            return f"{v} out of range for {t}"
    elif t == "float64":
        if not isinstance(v, (int, float)):
            return f"expected float, got {type(v).__name__}"
    elif t == "string":
        if not isinstance(v, str):
            return f"expected str, got {type(v).__name__}"
        try:
            b = v.encode()
        except UnicodeEncodeError as exc:
            return f"not encodable as UTF-8 ({exc.reason})"
        if not compact and len(b) > 0x7FFF:
            return f"string of {len(b)} bytes exceeds the int16 length"
    elif t == "uuid":
        if not isinstance(v, UUID):
            return f"expected uuid.UUID, got {type(v).__name__}"
    elif t == "bytes":
        if not isinstance(v, (bytes, bytearray, memoryview)):
            return f"expected bytes-like, got {type(v).__name__}"
    return None


def explain_encode_failure(obj: Any, version: int, flexible_version: int | None, path: str = "") -> str | None:
    """Find the first field of ``obj`` that cannot be encoded at ``version`` (slow path)."""
    flexible = flexible_version is not None and version >= flexible_version
    prefix = path or type(obj).__qualname__
    for f in type(obj)._FIELDS:
        if not _in(f.versions, version):
            continue
        where = f"{prefix}.{f.name}"
        try:
            v = getattr(obj, f.name)
        except AttributeError:
            return f"field {where} is not set"
        compact = _in(f.flexible, version) if f.flexible is not None else flexible
        if f.type.startswith("[]"):
            if v is None:
                if not _in(f.nullable, version):
                    return f"field {where}: None in a non-nullable field"
                continue
            if not isinstance(v, (list, tuple)):
                return f"field {where}: expected a list, got {type(v).__name__}"
            for i, e in enumerate(v):
                if f.struct is not None:
                    if not isinstance(e, f.struct):
                        return f"field {where}[{i}]: expected {f.struct.__qualname__}, got {type(e).__name__}"
                    r = explain_encode_failure(e, version, flexible_version, f"{where}[{i}]")
                    if r:
                        return r
                else:
                    r = _check_value(f.type[2:], f._replace(nullable=None), e, version, compact)
                    if r:
                        return f"field {where}[{i}]: {r}"
        elif f.struct is not None:
            if v is None:
                if not _in(f.nullable, version):
                    return f"field {where}: None in a non-nullable field"
                continue
            if not isinstance(v, f.struct):
                return f"field {where}: expected {f.struct.__qualname__}, got {type(v).__name__}"
            r = explain_encode_failure(v, version, flexible_version, where)
            if r:
                return r
        else:
            r = _check_value(f.type, f, v, version, compact)
            if r:
                return f"field {where}: {r}"
    return None
