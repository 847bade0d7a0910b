"""Kafka's Uuid (topic ids, cluster ids): 16 bytes, printed as URL-safe base64 without
padding (22 characters).

`random_uuid` follows Kafka's Uuid.randomUuid: never an id whose text starts with '-',
which command-line tools (kafka-storage format -t ID, kafka-topics ...) would take for
an option. One in 64 random ids would."""

from __future__ import annotations

import base64
import re
import uuid

_TEXT = re.compile(r"[A-Za-z0-9_-]{21}[AQgw]")  # 16 bytes: the last character's low bits are 0


def uuid_text(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString."""
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def random_uuid() -> uuid.UUID:
    """A random id whose text does not start with '-' (nor the zero id, nor Kafka's
    reserved metadata topic id 0...01: a version 4 UUID is never either)."""
    while True:
        u = uuid.uuid4()
        if not uuid_text(u).startswith("-"):
            return u


def parse_uuid(text: object, what: str = "Kafka Uuid") -> uuid.UUID:
    """Inverse of uuid_text; ValueError naming `what` for anything else (padding, other
    alphabets, another length, bits past the 16 bytes, not a string)."""
    if not isinstance(text, str) or not _TEXT.fullmatch(text):
        raise ValueError(f"{text!r} is not a {what} (22 characters of URL-safe base64)")
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
