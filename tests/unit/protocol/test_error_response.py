"""error_response: for every API the broker serves, at every version, the response to
a request with one element in each of its arrays encodes, decodes, carries the code in
every error code, and names the request's topics and partitions where it answers them."""

from __future__ import annotations

import uuid

import pytest

from broker.protocol import codec
from broker.protocol.api import API_SPECS
from broker.protocol.error_response import error_response
from broker.server.handlers import HANDLERS

CASES = [(key, v) for key, h in sorted(HANDLERS.items()) for v in range(h.MIN_VERSION, h.MAX_VERSION + 1)]
TOPIC_ID = uuid.UUID(int=7)


def full(cls, version: int):
    """An instance of `cls` with one element in every array of structs, and identifying
    fields set to recognisable values."""
    out = cls()
    for f in cls._FIELDS:
        if not f.versions[0] <= version <= f.versions[1]:
            continue
        if f.struct is not None and f.type.startswith("[]"):
            setattr(out, f.name, [full(f.struct, version)])
        elif f.struct is not None:
            setattr(out, f.name, full(f.struct, version))
        elif f.type == "[]int32" and "partition" in f.name:
            setattr(out, f.name, [5])
        elif f.type == "[]string" and f.name != "configuration_keys":
            setattr(out, f.name, ["t1"])
        elif f.type == "string" and f.name in ("name", "topic", "topic_name"):
            setattr(out, f.name, "t1")
        elif f.type == "uuid" and f.name == "topic_id":
            setattr(out, f.name, TOPIC_ID)
        elif f.type == "int32" and f.name in ("partition_index", "partition", "index"):
            setattr(out, f.name, 5)
    return out


def walk(obj, version: int):
    """(field name, value) of every field in the version, nested structs included."""
    for f in type(obj)._FIELDS:
        if not f.versions[0] <= version <= f.versions[1]:
            continue
        value = getattr(obj, f.name)
        yield f.name, value
        if f.struct is not None:
            for item in value if isinstance(value, list) else [value] if value is not None else []:
                yield from walk(item, version)


@pytest.mark.parametrize("api_key,version", CASES)
def test_every_api_and_version_gets_an_error_response_that_encodes(api_key, version):
    spec = API_SPECS[api_key]
    request = full(spec.request, version)
    response = error_response(api_key, version, request, 39, "Too many open files")
    header = type("H", (), {"correlation_id": 9, "request_api_key": api_key, "request_api_version": version})()
    frame = b"".join(bytes(p) for p in codec.encode_response(header, response))
    _, decoded = codec.decode_response(api_key, version, frame[4:])
    fields = list(walk(decoded, version))
    codes = [v for n, v in fields if n.endswith("error_code")]
    assert codes and all(c == 39 for c in codes), (spec.response.NAME, version, fields)
    names = {v for n, v in fields if n in ("name", "topic", "topic_name")}
    requested = {v for n, v in walk(request, version) if n in ("name", "topic", "topic_name")}
    if requested & {"t1"} and any(f.struct is not None and f.type.startswith("[]") for f in spec.response._FIELDS):
        assert "t1" in names or not any(n in ("name", "topic", "topic_name") for n, _ in fields), (
            spec.response.NAME,
            version,
            fields,
        )


def test_produce_answers_each_partition_of_the_request():
    from broker.protocol.messages.produce import ProduceRequest as P

    req = P(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            P.TopicProduceData(
                name="a", partition_data=[P.PartitionProduceData(index=0), P.PartitionProduceData(index=3)]
            ),
            P.TopicProduceData(name="b", partition_data=[P.PartitionProduceData(index=1)]),
        ],
    )
    resp = error_response(0, 9, req, 39, "no")
    assert [
        (t.name, [(p.index, p.error_code, p.error_message) for p in t.partition_responses]) for t in resp.responses
    ] == [("a", [(0, 39, "no"), (3, 39, "no")]), ("b", [(1, 39, "no")])]


def test_create_topics_answers_each_topic_with_the_message():
    from broker.protocol.messages.create_topics import CreateTopicsRequest as C

    req = C(topics=[C.CreatableTopic(name="x", num_partitions=3), C.CreatableTopic(name="y")])
    resp = error_response(19, 7, req, -1, "Too many open files")
    assert [(t.name, t.error_code, t.error_message) for t in resp.topics] == [
        ("x", -1, "Too many open files"),
        ("y", -1, "Too many open files"),
    ]
