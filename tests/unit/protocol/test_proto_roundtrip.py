"""Every generated class, every valid version: encode -> decode gives an equal object,
and encoding is deterministic (re-encoding the decoded object gives the same bytes)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from proto_strategies import all_message_versions, message_strategy

CASES = all_message_versions()


def _id(case) -> str:
    cls, v = case
    return f"{cls.NAME}-v{v}"


def test_every_included_class_has_cases():
    names = {cls.NAME for cls, _ in CASES}
    assert len(names) == 66 * 2 + 4 + (7 + 6) * 2 + 2 * 2  # ConsumerGroup*, ShareGroup*, Share* records
    assert len(CASES) > 400


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_roundtrip(case, data):
    cls, version = case
    obj = data.draw(message_strategy(cls, version), label="obj")
    encoded = obj.encode(version)
    decoded = cls.decode(encoded, version)
    assert decoded == obj
    assert decoded.encode(version) == encoded
    assert obj.encode(version) == encoded
    # decoding from a writable buffer at an offset gives the same object
    buf = bytearray(b"\xee" * 3 + encoded)
    assert cls.decode(memoryview(buf)[3:], version) == obj


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_default_instance_roundtrip(case):
    cls, version = case
    obj = cls()
    assert cls.decode(obj.encode(version), version) == obj
