"""Kafka's Uuid (topic ids, cluster ids): 16 bytes, printed as URL-safe base64 without
padding (22 characters).

`random_uuid` follows Kafka's Uuid.randomUuid: never an id whose text starts with '-',
which command-line tools (kafka-storage format -t ID, kafka-topics ...) would take for
an option. One in 64 random ids would."""
from __future__ import annotations

import base64
import uuid


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
