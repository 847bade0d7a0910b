"""A large Produce cut mid-receive (issue 22): a frame of a megabyte is received in place,
straight into its own buffer (broker/protocol/framing.py), and nothing of it reaches the
log before the whole frame is there and decoded. A client that drops the connection
part-way, and a broker killed -9 while such a frame is half received, leave the log with
exactly the acknowledged records; the broker goes on taking writes at the next offset."""

from __future__ import annotations

import socket
import time

from broker.client import BrokerConnection, Cluster, Consumer, Producer
from broker.native import BatchBuilder
from broker.protocol import codec
from broker.protocol.api import ApiKey
from broker.protocol.messages.produce import ProduceRequest
from tests.support.broker_proc import BrokerProcess

TOPIC = "cut"


def big_produce(first: int, n: int = 1000) -> tuple[ProduceRequest, list[bytes]]:
    """One Produce of one batch of n records of 1 KiB (over a megabyte in all)."""
    values = [b"%08d" % (first + i) + bytes(1016) for i in range(n)]
    b = BatchBuilder()
    for v in values:
        b.append(int(time.time() * 1000), None, v)
    req = ProduceRequest(
        acks=1,
        timeout_ms=10000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=bytes(b.build()))]
            )
        ],
    )
    return req, values


def send_part(port: int, fraction: float) -> socket.socket:
    """Opens a connection and sends the first `fraction` of a big Produce's frame; the rest never comes."""
    req, _ = big_produce(10**6)
    frame = codec.encode_request(int(ApiKey.PRODUCE), 9, 1, "cut-client", req)
    assert len(frame) > 1_000_000
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(frame[: int(len(frame) * fraction)])
    return s


def end_offset(bootstrap: str) -> int:
    with Cluster(bootstrap) as c:
        return c.list_offsets(TOPIC, [0], -1)[0][0]


def read_all(bootstrap: str, n: int) -> list[bytes]:
    out: list[bytes] = []
    with Consumer(bootstrap, max_wait_ms=100, auto_offset_reset="none") as c:
        c.assign(TOPIC, [0], {0: 0})
        deadline = time.monotonic() + 30
        while len(out) < n:
            assert time.monotonic() < deadline, f"read {len(out)} of {n}"
            out.extend(r.value for r in c.poll(0.5))
    return out


def test_a_produce_cut_mid_receive_writes_nothing_and_a_kill_keeps_what_was_acknowledged(tmp_path):
    with BrokerProcess(tmp_path / "data") as b:
        with Cluster(b.bootstrap) as c:
            c.create_topic(TOPIC, 1, 1)
        acked = [b"acked-%d" % i for i in range(50)]
        with Producer(b.bootstrap, acks=1) as p:
            for v in acked:
                p.send(TOPIC, v, partition=0)
        assert end_offset(b.bootstrap) == 50

        # the client goes away with 60% of a 1 MB frame sent: nothing is written
        s = send_part(b.port, 0.6)
        time.sleep(0.5)
        s.close()
        time.sleep(0.5)
        assert end_offset(b.bootstrap) == 50

        # the broker dies (kill -9) with 70% of a frame received in place
        s = send_part(b.port, 0.7)
        time.sleep(0.5)
        b.kill()
        s.close()
        b.start()
        assert end_offset(b.bootstrap) == 50  # recovery keeps the acknowledged records only
        assert read_all(b.bootstrap, 50) == acked

        # and the next whole frame of the same size is taken at the next offset
        req, values = big_produce(0)
        with BrokerConnection("127.0.0.1", b.port) as conn:
            r = conn.request(req).responses[0].partition_responses[0]
        assert (r.error_code, r.base_offset) == (0, 50)
        assert end_offset(b.bootstrap) == 1050
        assert read_all(b.bootstrap, 1050) == acked + values
