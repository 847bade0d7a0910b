"""Kafka Uuids made here (topic ids, cluster ids) as Kafka's Uuid.randomUuid makes them:
never one whose text starts with '-', which Kafka's own tools take for an option
(kafka-storage format -t -abc... : "expected one argument")."""

import base64
import uuid

import pytest

from broker.log.manager import new_cluster_id
from broker.uuids import parse_uuid, random_uuid, uuid_text


def test_the_text_is_kafkas_url_safe_base64_without_padding():
    u = uuid.UUID(bytes=bytes(range(16)))
    assert uuid_text(u) == "AAECAwQFBgcICQoLDA0ODw"
    assert base64.urlsafe_b64decode(uuid_text(u) + "==") == u.bytes
    assert parse_uuid(uuid_text(u)) == u
    # the bits past the 16 bytes (x, not w), padding, the other base64 alphabet, a length
    for bad in ("AAECAwQFBgcICQoLDA0ODx", "AAECAwQFBgcICQoLDA0ODw==", "AAECAwQFBgcICQoLDA0OD+", "AAEC", None):
        with pytest.raises(ValueError, match="topic id"):
            parse_uuid(bad, "topic id")


def test_random_ids_and_cluster_ids_never_start_with_a_dash():
    texts = [uuid_text(random_uuid()) for _ in range(5000)] + [new_cluster_id() for _ in range(5000)]
    assert all(len(t) == 22 and not t.startswith("-") for t in texts)
    # one plain uuid4 in 64 does: the check above has something to catch
    assert any(uuid_text(uuid.uuid4()).startswith("-") for _ in range(5000))
