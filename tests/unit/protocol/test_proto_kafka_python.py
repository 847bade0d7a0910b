"""Differential tests against kafka-python's protocol classes (an encoder we did not write).

Two oracles from kafka-python 3.x:

* ``kafka.protocol.<area>.<api>`` classes, driven by (a newer snapshot of) Kafka's JSON
  definitions but with their own codec code: every API and version both sides
  support is compared in both directions, byte for byte.
* ``kafka.protocol.old.*`` hand-written per-version ``Struct`` classes (no JSON at all):
  compared positionally, for a set of common APIs in the versions they implement.

Hypothesis draws instances of our classes (without unknown tagged fields, which
kafka-python cannot represent); each is encoded by both libraries and each side
decodes the other's bytes.
"""

from __future__ import annotations

import importlib
import pkgutil
import uuid
import warnings

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from proto_strategies import in_range, message_strategy

from broker.protocol import codec
from broker.protocol.api import API_SPECS, ApiKey

with warnings.catch_warnings():
    # kafka-python loads its schemas with the deprecated importlib.resources.read_text
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol as kp
    from kafka.protocol.old.types import Array as OldArray, BitField as OldBitField, Schema as OldSchema
    from kafka.protocol.schemas.fields.codecs.types import BitField


def _kp_classes() -> dict:
    found = {}
    for m in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
        if ".old" in m.name or ".schemas" in m.name or m.name.endswith("generate_stubs"):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            mod = importlib.import_module(m.name)
        for name in dir(mod):
            obj = getattr(mod, name)
            if isinstance(obj, type) and obj.__module__ == mod.__name__ and getattr(obj, "_json", None):
                found[name] = obj
    return found


KP = _kp_classes()

# kafka-python renames these fields and decodes them as a set of bits ("bitfield").
RENAMES = {
    ("MetadataResponse", "cluster_authorized_operations"): "authorized_operations",
    ("MetadataResponse.MetadataResponseTopic", "topic_authorized_operations"): "authorized_operations",
    ("DescribeClusterResponse", "cluster_authorized_operations"): "authorized_operations",
    ("TxnOffsetCommitRequest", "generation_id_or_member_epoch"): "generation_id",  # Kafka 4's name (KIP-848)
}

# The versions the brief requires at a minimum (all in kafka-python's range).
REQUIRED = {
    "Produce": (3, 9),
    "Fetch": (4, 12),
    "Metadata": (0, 12),
    "ApiVersions": (0, 3),
    "ListOffsets": None,
    "FindCoordinator": None,
    "JoinGroup": None,
    "SyncGroup": None,
    "Heartbeat": None,
    "OffsetCommit": None,
    "OffsetFetch": None,
    "CreateTopics": None,
    "InitProducerId": None,
}


def _cases():
    cases = []
    for _key, spec in sorted(API_SPECS.items()):
        for ours in (spec.request, spec.response):
            theirs = KP.get(ours.NAME)
            if theirs is None:
                continue
            lo, hi = theirs._valid_versions
            for v in range(spec.versions[0], spec.versions[1] + 1):
                if lo <= v <= hi:
                    cases.append((ours, theirs, v))
    return cases


CASES = _cases()


def test_required_apis_and_versions_are_covered():
    have = {(ours.NAME, v) for ours, _, v in CASES}
    for api, rng in REQUIRED.items():
        for suffix in ("Request", "Response"):
            name = api + suffix
            assert any(n == name for n, _ in have), name
            if rng is not None:
                for v in range(rng[0], rng[1] + 1):
                    assert (name, v) in have, (name, v)


def _bitfield_to_kp(v: int):
    s = BitField.from_32_bit_field(v & 0xFFFFFFFF)
    return None if s == {31} else s


def _bitfield_from_kp(s) -> int:
    v = BitField.to_32_bit_field({31} if s is None else s)
    return v - (1 << 32) if v >= 1 << 31 else v


def _is_bitfield(kfield) -> bool:
    return getattr(kfield, "_type", None) is BitField


def _kp_field(kcls, ours_cls, name):
    fields = kcls._struct.fields
    kname = RENAMES.get((ours_cls.__qualname__, name), name)
    return kname, fields[kname]


def _default_of(cls, name):
    return getattr(cls(), name)


def to_kp(obj, kcls, version: int):
    """Build the kafka-python object equal to ``obj`` (fields of ``version`` only)."""
    kwargs = {}
    ours_cls = type(obj)
    for f in ours_cls._FIELDS:
        if not in_range(f.versions, version):
            continue
        v = getattr(obj, f.name)
        kname, kf = _kp_field(kcls, ours_cls, f.name)
        if in_range(f.tagged, version) and v == _default_of(ours_cls, f.name):
            continue  # let kafka-python use its own default (it omits it, like us)
        if f.struct is not None and v is not None:
            if f.type.startswith("[]"):
                v = [to_kp(e, kf.data_class, version) for e in v]
            else:
                v = to_kp(v, kf.data_class, version)
        elif f.type == "records" and v is not None:
            v = bytes(v)
        elif _is_bitfield(kf):
            v = _bitfield_to_kp(v)
        kwargs[kname] = v
    return kcls(version=version, **kwargs)


def ours_as_kp_dict(obj, kcls, version: int) -> dict:
    """``obj`` as kafka-python's ``to_dict(json=False)`` would show it."""
    out = {}
    ours_cls = type(obj)
    for f in ours_cls._FIELDS:
        if not in_range(f.versions, version):
            continue
        v = getattr(obj, f.name)
        kname, kf = _kp_field(kcls, ours_cls, f.name)
        if f.struct is not None and v is not None:
            if f.type.startswith("[]"):
                v = [ours_as_kp_dict(e, kf.data_class, version) for e in v]
            elif in_range(f.tagged, version) and v == _default_of(ours_cls, f.name):
                v = kf.default
            else:
                v = ours_as_kp_dict(v, kf.data_class, version)
        elif f.type == "records" and v is not None:
            v = bytes(v)
        elif _is_bitfield(kf):
            v = _bitfield_to_kp(v)
        elif f.type == "uuid" and v == uuid.UUID(int=0):
            v = None  # kafka-python decodes the zero uuid as None
        out[kname] = v
    return out


def _normalise(obj, version):
    # kafka-python decodes an ApiVersionsResponse with a non-zero error code as v0
    # (like Kafka's client does for UNSUPPORTED_VERSION); keep it comparable.
    if type(obj).__name__ == "ApiVersionsResponse":
        obj.error_code = 0
    return obj


@pytest.mark.parametrize("case", CASES, ids=[f"{o.NAME}-v{v}" for o, _, v in CASES])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_differential(case, data):
    ours_cls, kcls, version = case
    obj = _normalise(data.draw(message_strategy(ours_cls, version, unknown_tags=False), label="obj"), version)
    ours_bytes = obj.encode(version)

    # ours -> kafka-python
    decoded_by_kp = kcls.decode(ours_bytes, version=version)
    assert decoded_by_kp.to_dict(json=False) == ours_as_kp_dict(obj, kcls, version)

    # kafka-python -> ours
    kp_bytes = bytes(to_kp(obj, kcls, version).encode(version=version))
    assert kp_bytes == ours_bytes
    assert ours_cls.decode(kp_bytes, version) == obj


# --------------------------------------------------------------------- framed requests

FRAMED = [
    (ApiKey.PRODUCE, 9),
    (ApiKey.FETCH, 12),
    (ApiKey.METADATA, 12),
    (ApiKey.METADATA, 1),
    (ApiKey.API_VERSIONS, 3),
    (ApiKey.API_VERSIONS, 0),
    (ApiKey.JOIN_GROUP, 6),
    (ApiKey.FIND_COORDINATOR, 4),
]


@pytest.mark.parametrize("api_key,version", FRAMED)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_framed_request_and_response_match_kafka_python(api_key, version, data):
    spec = API_SPECS[api_key]
    req = data.draw(message_strategy(spec.request, version, unknown_tags=False))
    kreq = to_kp(req, KP[spec.request.NAME], version)
    kreq.with_header(correlation_id=77, client_id="kp-client")
    kp_frame = bytes(kreq.encode(version=version, header=True, framed=True))
    ours = codec.encode_request(api_key, version, 77, "kp-client", req)
    assert ours == kp_frame
    header, decoded = codec.decode_request(kp_frame[4:], strict=True)
    assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == (
        api_key,
        version,
        77,
        "kp-client",
    )
    assert decoded == req

    resp = _normalise(data.draw(message_strategy(spec.response, version, unknown_tags=False)), version)
    parts = codec.encode_response(header, resp)
    frame = b"".join(bytes(p) for p in parts)
    kresp = KP[spec.response.NAME].decode(frame, version=version, header=True, framed=True)
    assert kresp.header.correlation_id == 77
    assert kresp.to_dict(json=False) == ours_as_kp_dict(resp, KP[spec.response.NAME], version)
    h2, r2 = codec.decode_response(api_key, version, frame[4:])
    assert h2.correlation_id == 77 and r2 == resp


# --------------------------------------------------------------------- hand-written oracle


def _old_classes() -> dict:
    found = {}
    for m in pkgutil.iter_modules(importlib.import_module("kafka.protocol.old").__path__, "kafka.protocol.old."):
        mod = importlib.import_module(m.name)
        for name in dir(mod):
            obj = getattr(mod, name)
            if (
                isinstance(obj, type)
                and hasattr(obj, "SCHEMA")
                and hasattr(obj, "API_KEY")
                and "_v" in name
                and isinstance(getattr(obj, "API_VERSION", None), int)
            ):
                found[(name.rsplit("_v", 1)[0], obj.API_VERSION)] = obj
    return found


OLD = _old_classes()

# Hand-written classes compared positionally (non-flexible versions: no tagged fields).
OLD_APIS = [
    "Produce",
    "Fetch",
    "ListOffsets",
    "Metadata",
    "OffsetCommit",
    "OffsetFetch",
    "FindCoordinator",
    "JoinGroup",
    "Heartbeat",
    "LeaveGroup",
    "SyncGroup",
    "DescribeGroups",
    "ListGroups",
    "SaslHandshake",
    "ApiVersions",
    "CreateTopics",
    "DeleteTopics",
    "InitProducerId",
    "AddPartitionsToTxn",
    "AddOffsetsToTxn",
    "EndTxn",
    "TxnOffsetCommit",
    "SaslAuthenticate",
    "DeleteGroups",
    "DescribeConfigs",
    "AlterConfigs",
    "CreatePartitions",
]


def _old_cases():
    out = []
    for _key, spec in sorted(API_SPECS.items()):
        for ours in (spec.request, spec.response):
            api = ours.NAME[: -len("Request")] if ours.NAME.endswith("Request") else ours.NAME[: -len("Response")]
            if api not in OLD_APIS:
                continue
            for v in range(spec.versions[0], spec.versions[1] + 1):
                if spec.is_flexible(v):
                    continue
                old = OLD.get((ours.NAME, v))
                if old is not None:
                    out.append((ours, old, v))
    return out


OLD_CASES = _old_cases()


def _positional(obj, version: int):
    """``obj`` as nested tuples in wire order (fields of ``version`` only)."""
    vals = []
    for f in type(obj)._FIELDS:
        if not in_range(f.versions, version):
            continue
        v = getattr(obj, f.name)
        if f.struct is not None and v is not None:
            v = [_positional(e, version) for e in v] if f.type.startswith("[]") else _positional(v, version)
        elif f.type == "records" and v is not None:
            v = bytes(v)
        vals.append(v)
    return tuple(vals)


def _shape(t, value):
    """Reshape one of our positional values to the hand-written schema type ``t``.

    The hand-written classes sometimes flatten a one-field struct array into an
    array of its field (``Array(String)`` for Metadata topics), group consecutive
    fields into an inline ``Schema``, and represent authorized-operations int32s
    as a set of bits; the bytes on the wire are the same.
    """
    if isinstance(t, OldArray):
        if value is None:
            return None
        et = t.array_of
        if isinstance(et, OldSchema):
            return [_shape(et, e) for e in value]
        return [_shape(et, e[0] if isinstance(e, tuple) and len(e) == 1 else e) for e in value]
    if isinstance(t, OldSchema):
        it = iter(value)
        out = tuple(_shape_fields(t, it))
        assert next(it, StopIteration) is StopIteration
        return out
    if t is OldBitField:
        return _bitfield_to_kp(value)
    return value


def _shape_fields(schema, it):
    for t in schema.fields:
        if isinstance(t, OldSchema):
            yield tuple(_shape_fields(t, it))  # inline group of consecutive fields
        else:
            yield _shape(t, next(it))


def _plain(value):
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if hasattr(value, "SCHEMA"):
        return tuple(_plain(getattr(value, n)) for n in value.SCHEMA.names)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def test_old_oracle_has_cases():
    names = {o.NAME for o, _, _ in OLD_CASES}
    assert {"ProduceRequest", "FetchResponse", "MetadataResponse", "ApiVersionsRequest"} <= names
    assert len(OLD_CASES) > 100


@pytest.mark.parametrize("case", OLD_CASES, ids=[f"{o.NAME}-v{v}" for o, _, v in OLD_CASES])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_differential_hand_written(case, data):
    ours_cls, old_cls, version = case
    obj = _normalise(data.draw(message_strategy(ours_cls, version, unknown_tags=False), label="obj"), version)
    ours_bytes = obj.encode(version)
    expected = _shape(old_cls.SCHEMA, _positional(obj, version))
    # ours -> hand-written decoder
    assert _plain(old_cls.decode(ours_bytes)) == _plain(expected)
    # hand-written encoder -> ours
    old_bytes = bytes(old_cls(*expected).encode())
    assert old_bytes == ours_bytes
    assert ours_cls.decode(old_bytes, version) == obj
