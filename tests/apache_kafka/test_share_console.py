"""Kafka 4.4's console share consumer (bin/kafka-console-share-consumer.sh, unchanged)
against a real kbroker process (issue 36's test 5): three of them in one share group on a
one-partition topic read every record between them, each record once; the group's
share.auto.offset.reset set with kafka-configs --entity-type groups as Kafka's
documentation shows."""

from __future__ import annotations

import time

import pytest

from broker.client import Cluster, Producer
from broker.protocol.messages.share_group_describe import ShareGroupDescribeRequest
from tests.groups.helpers import wait_until
from tests.support.kafka_tools import kafka_tool, start_kafka_tool

pytestmark = pytest.mark.interop

N = 300


def _members(bootstrap: str, group: str) -> int:
    with Cluster(bootstrap) as c:
        g = c.any_connection().request(ShareGroupDescribeRequest(group_ids=[group])).groups[0]
    return 0 if g.error_code else sum(1 for m in g.members if m.assignment.topic_partitions)


def test_three_console_share_consumers_read_every_record_between_them(kbroker, topic, tmp_path):
    b = kbroker.bootstrap
    group = f"{topic}-share"
    with Cluster(b) as c:
        c.create_topic(topic, 1, 1)
        c.topic(topic, wait_s=10)
    kafka_tool(
        "kafka-configs",
        "--bootstrap-server",
        b,
        "--entity-type",
        "groups",
        "--entity-name",
        group,
        "--alter",
        "--add-config",
        "share.auto.offset.reset=earliest",
    )
    tools = [
        start_kafka_tool(
            "kafka-console-share-consumer",
            "--bootstrap-server",
            b,
            "--topic",
            topic,
            "--group",
            group,
            out_dir=tmp_path,
            label=f"share-{i}",
        )
        for i in range(3)
    ]
    try:
        wait_until(lambda: _members(b, group) == 3, 90, "three console share consumers in the group")
        with Producer(b, acks=-1, linger_ms=0) as p:
            for i in range(0, N, 10):  # a batch at a time, so that each consumer gets some
                for j in range(i, i + 10):
                    p.send(topic, f"m-{j}".encode(), partition=0)
                p.flush()
                time.sleep(0.05)

        def lines() -> list[list[str]]:
            return [[x for x in t.output().splitlines() if x.startswith("m-")] for t in tools]

        wait_until(lambda: len({x for ls in lines() for x in ls}) == N, 90, "every record printed")
    finally:
        outs = [t.stop()[1] for t in tools]
    got = [[x for x in out.splitlines() if x.startswith("m-")] for out in outs]
    every = [x for g in got for x in g]
    assert sorted(every) == sorted(f"m-{i}" for i in range(N)), "a record missing or printed twice"
    assert all(got), [len(g) for g in got]
