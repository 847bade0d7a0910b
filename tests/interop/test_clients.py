"""Each real client (kcat, confluent-kafka, kafka-python, aiokafka) produces 10,000 keyed
messages with headers to a 3-partition topic and consumes them back: byte-identical,
every message exactly once, offsets dense, per-partition order kept — for every codec
and acks 0, 1 and all."""

from __future__ import annotations

import random
import zlib

import pytest

from broker.client import Cluster
from tests.interop import clients as C
from tests.interop.conftest import allowed, require_client

N = 10_000
PARTITIONS = 3


def make_messages(n: int, seed: int, same_headers: bool = False):
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        key = b"key-%d" % rnd.randrange(50)
        body = rnd.randbytes(rnd.randrange(10, 120)).hex().encode()
        value = b"%06d-" % i + body
        headers = [("idx", b"%d" % (0 if same_headers else i)), ("src", b"interop")]
        out.append((key, value, headers))
    return out


def verify(produced, got, check_headers=True):
    assert len(got) == len(produced), f"consumed {len(got)} messages, produced {len(produced)}"
    seen = set()
    by_partition: dict[int, list] = {}
    for p, o, k, v, h in got:
        assert (p, o) not in seen, f"duplicate offset {p}/{o}"
        seen.add((p, o))
        by_partition.setdefault(p, []).append((o, k, v, h))
    # offsets dense from 0 in every partition; values in production order within one
    for p, items in by_partition.items():
        items.sort()
        assert [o for o, *_ in items] == list(range(len(items))), f"partition {p}: offsets not dense"
        idx = [int(v.split(b"-", 1)[0]) for _, _, v, _ in items]
        assert idx == sorted(idx), f"partition {p}: order differs from production order"
    # byte-identical content, each message exactly once
    want = {m[1]: m for m in produced}
    assert len(want) == len(produced)
    key_partition = {}
    for p, _o, k, v, h in got:
        m = want.pop(v, None)
        assert m is not None, f"unexpected or duplicated value {v[:20]!r}"
        assert k == m[0], f"key mismatch for {v[:20]!r}: {k!r} != {m[0]!r}"
        if check_headers:
            assert [(hk, bytes(hv)) for hk, hv in h] == m[2], f"headers differ for {v[:20]!r}: {h!r}"
        assert key_partition.setdefault(k, p) == p, f"key {k!r} spread over partitions"
    assert not want


@pytest.mark.interop
@pytest.mark.parametrize("acks", C.ACKS, ids=lambda a: f"acks{a}")
@pytest.mark.parametrize("codec", C.CODECS)
@pytest.mark.parametrize("client", C.CLIENTS)
def test_produce_consume_roundtrip(broker, topic_name, client, codec, acks):
    require_client(client)
    allowed(client, f"produce-consume {codec} acks={acks}")
    with Cluster(broker.bootstrap) as cluster:
        cluster.create_topic(topic_name, PARTITIONS, 1)
    messages = make_messages(N, zlib.crc32(f"{client}{codec}{acks}".encode()), same_headers=client == "kcat")
    C.PRODUCE[client](broker.bootstrap, topic_name, messages, acks, codec)
    got = C.consume(client, broker.bootstrap, topic_name, N, list(range(PARTITIONS)))
    verify(messages, got)
