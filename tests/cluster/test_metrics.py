"""Issue 19, test 1: the metrics of three real brokers, scraped over HTTP from each one's
metrics.listener and parsed with prometheus_client's own parser.

After N records produced one request each (acks=all) to a 3-broker RF=3 topic and read
back once: the records, requests and error codes counted, the five time histograms of
Produce, the bytes in (= the log's size on disk = the bytes out to the one consumer) and
the bytes the two followers replicated all match. A group's lag equals produced minus
committed. Killing a follower raises UnderReplicatedPartitions, summed over the
survivors, to exactly the number of partitions it was a replica of, and it returns to 0
once the follower is back; killing the controller leaves ActiveControllerCount summing
to 1 over the survivors. Connections are counted per listener, under each one's name.
"""

from __future__ import annotations

import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.client import BrokerConnection, Cluster as Client, Consumer, Producer
from broker.client.group import GroupConsumer
from broker.protocol.messages.api_versions import ApiVersionsRequest
from broker.protocol.messages.metadata import MetadataRequest
from tests.support.broker_proc import BrokerProcess
from tests.support.cluster import poll_until
from tests.support.ports import free_port

N = 120
TOPIC = "obs"
OFFSETS_PARTITIONS = 3
WAIT_S = 45.0


def scrape(port: int) -> dict[str, list]:
    """metric family name -> its samples, as Prometheus would read them."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        out.setdefault(family.name, []).extend(family.samples)
    return out


def value(families: dict[str, list], sample: str, **labels) -> float:
    """The sum of the samples named `sample` whose labels include `labels`."""
    family = sample
    for suffix in ("_total", "_count", "_sum", "_bucket"):
        if sample.endswith(suffix) and sample[: -len(suffix)] in families:
            family = sample[: -len(suffix)]
    return sum(
        s.value
        for s in families.get(family, ())
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


def wait(what: str, probe, expected) -> None:
    """Until probe() == expected (bounded; the last value seen in the failure)."""

    def check():
        v = probe()
        return v == expected, v, v

    poll_until(what, check, WAIT_S, interval=0.3)


@pytest.fixture
def metered(make_cluster):
    ports = {i: free_port() for i in (1, 2, 3)}
    cluster = make_cluster(
        3,
        config={"offsets.topic.num.partitions": OFFSETS_PARTITIONS},
        per_broker={i: {"metrics.listener": f"127.0.0.1:{p}"} for i, p in ports.items()},
    )
    return cluster, ports


def test_metrics_match_a_known_load_and_follow_failures(metered):
    cluster, ports = metered
    with Client(cluster.bootstrap) as c:
        c.create_topic(TOPIC, 1, 3)
    leader = cluster.wait_for_leader(TOPIC, 0, everywhere=True)
    cluster.wait_for_isr(TOPIC, 0, {1, 2, 3})

    # N records, one Produce request each (flushed one by one), acks=all
    with Producer(cluster.bootstrap, acks=-1, linger_ms=0) as producer:
        for i in range(N):
            producer.send(TOPIC, b"record-%04d" % i, partition=0)
            producer.flush()
    with Consumer(cluster.bootstrap) as consumer:
        consumer.assign(TOPIC, [0], offsets="earliest")
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < N and time.monotonic() < deadline:
            got += consumer.poll(1.0)
    assert len(got) == N

    # every replica holds the N records (the followers' log end and high watermark move
    # with their next fetches)
    wait(
        "every replica's log end offset is N",
        lambda: [value(scrape(p), "kafka_log_end_offset", topic=TOPIC, partition="0") for p in ports.values()],
        [N] * 3,
    )
    m = {i: scrape(p) for i, p in ports.items()}
    lead = m[leader]
    assert value(lead, "kafka_server_messages_in_total", topic=TOPIC) == N
    assert sum(value(x, "kafka_server_messages_in_total", topic=TOPIC) for x in m.values()) == N
    assert sum(value(x, "kafka_network_requests_total", request="Produce") for x in m.values()) == N
    for part in ("request_queue_time", "local_time", "remote_time", "response_send_time", "total_time"):
        name = f"kafka_network_{part}_seconds"
        assert sum(value(x, f"{name}_count", request="Produce") for x in m.values()) == N, part
        assert value(lead, f"{name}_bucket", request="Produce", le="+Inf") == N, part
    assert value(lead, "kafka_network_errors_total", request="Produce") == 0  # no error code at all
    # fetches split as Kafka splits them: the consumer's, and the two followers'
    assert value(lead, "kafka_network_total_time_seconds_count", request="FetchConsumer") >= 1
    assert value(lead, "kafka_network_requests_total", request="FetchFollower") >= 2
    # (no group yet: nothing else is replicated, so only the leader serves followers)
    assert [value(m[i], "kafka_network_requests_total", request="FetchFollower") for i in m if i != leader] == [0, 0]
    # one error code: a Metadata request for a topic that does not exist
    unknown = value(lead, "kafka_network_errors_total", request="Metadata", error="UNKNOWN_TOPIC_OR_PARTITION")
    with BrokerConnection("127.0.0.1", cluster.broker(leader).port) as conn:
        conn.request(
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name="no-such-topic")], allow_auto_topic_creation=False
            )
        )
    assert (
        value(
            scrape(ports[leader]), "kafka_network_errors_total", request="Metadata", error="UNKNOWN_TOPIC_OR_PARTITION"
        )
        == unknown + 1
    )
    size = value(lead, "kafka_log_size_bytes", topic=TOPIC, partition="0")
    assert size > N * 11  # N batches, each with its 11-byte value
    assert value(lead, "kafka_server_bytes_in_total", topic=TOPIC) == size
    assert value(lead, "kafka_server_bytes_out_total", topic=TOPIC) == size  # read once, by one consumer
    followers = [i for i in m if i != leader]
    for i in followers:
        assert value(m[i], "kafka_log_size_bytes", topic=TOPIC, partition="0") == size
        assert value(m[i], "kafka_server_replication_bytes_in_total") >= size
    assert value(lead, "kafka_server_replication_bytes_out_total") >= 2 * size
    assert value(lead, "kafka_server_leader_count") >= 1
    assert sum(value(x, "kafka_server_under_replicated_partitions") for x in m.values()) == 0
    assert sum(value(x, "kafka_controller_active_controller_count") for x in m.values()) == 1

    # a group's lag: produced minus committed, from the coordinator
    committed = N - 37
    with GroupConsumer(
        cluster.bootstrap, "obs-group", [TOPIC], auto_offset_reset="earliest", enable_auto_commit=False
    ) as group:
        group.poll(1.0)
        group.commit({(TOPIC, 0): committed})

    # the one broker coordinating the group reports it (the others have no sample: 0)
    wait(
        "the coordinator reports the group's lag",
        lambda: sorted(
            value(scrape(p), "kafka_consumer_group_lag", group="obs-group", topic=TOPIC, partition="0")
            for p in ports.values()
        ),
        [0, 0, N - committed],
    )

    # a follower killed: every partition it is a replica of is under-replicated, exactly
    controller = cluster.controller_id()
    victim = next(i for i in followers if i != controller)
    expected = sum(
        victim in cluster.replicas_of(t, p)
        for t, n in ((TOPIC, 1), ("__consumer_offsets", OFFSETS_PARTITIONS))
        for p in range(n)
    )
    assert expected == 1 + OFFSETS_PARTITIONS
    cluster.kill(victim)
    survivors = [i for i in ports if i != victim]
    wait(
        f"UnderReplicatedPartitions sums to {expected}",
        lambda: sum(value(scrape(ports[i]), "kafka_server_under_replicated_partitions") for i in survivors),
        expected,
    )
    cluster.start(victim)
    wait(
        "UnderReplicatedPartitions back to 0",
        lambda: sum(value(scrape(p), "kafka_server_under_replicated_partitions") for p in ports.values()),
        0,
    )

    # the controller killed: exactly one of the survivors is the active controller
    controller = cluster.controller_id()
    cluster.kill(controller)
    cluster.wait_for_controller(not_in={controller})
    survivors = [i for i in ports if i != controller]
    wait(
        "ActiveControllerCount sums to 1 over the survivors",
        lambda: sum(value(scrape(ports[i]), "kafka_controller_active_controller_count") for i in survivors),
        1,
    )
    new = cluster.wait_for_controller(not_in={controller})
    assert value(scrape(ports[new]), "kafka_controller_active_controller_count") == 1
    assert value(scrape(ports[new]), "kafka_controller_leader_elections_total") >= 1


def test_connections_are_counted_per_listener(tmp_path):
    """kafka_server_connections has one sample per listener, labelled with its name
    (every connection was once counted as "PLAINTEXT", whatever its listener)."""
    plain, external, mport = free_port(), free_port(), free_port()
    config = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},EXTERNAL://127.0.0.1:{external}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "metrics.listener": f"127.0.0.1:{mport}",
    }

    def connections() -> dict[str, float]:
        return {s.labels["listener"]: s.value for s in scrape(mport)["kafka_server_connections"]}

    with BrokerProcess(tmp_path / "data", config=config, port=plain):
        wait("no client connection yet", connections, {"PLAINTEXT": 0, "EXTERNAL": 0})
        conns = [BrokerConnection("127.0.0.1", port) for port in (plain, external, external)]
        try:
            for conn in conns:  # each accepted and answered
                conn.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
            wait("one connection on PLAINTEXT, two on EXTERNAL", connections, {"PLAINTEXT": 1, "EXTERNAL": 2})
        finally:
            for conn in conns:
                conn.close()
        wait("the connections closed", connections, {"PLAINTEXT": 0, "EXTERNAL": 0})
