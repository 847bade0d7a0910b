"""Client quotas against Apache Kafka's own tools and Java client (issue 20, test 3):
kafka-configs alters and describes quotas on kbroker; a producer held to its 1 MB/s quota
(within 10% over 20 s) beside an unthrottled one that is not slowed, the Java client's
produce-throttle-time metrics seeing the throttling; a consumer held to its quota while an
unthrottled consumer is not."""

from __future__ import annotations

import re
import time

import pytest

from broker.client import Cluster
from tests.support.kafka_tools import StartedTool, kafka_tool, tool_command

pytestmark = pytest.mark.interop

MB = 1 << 20
RECORD = 1024
TIMEOUT_S = 180


def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    with Cluster(bootstrap) as c:
        c.create_topic(topic, partitions, 1)
        c.topic(topic, wait_s=10)


def configs(bootstrap: str, *args: str) -> list[str]:
    return kafka_tool("kafka-configs", "--bootstrap-server", bootstrap, *args, timeout=TIMEOUT_S).lines


def test_kafka_configs_alters_and_describes_quotas(kbroker):
    b = kbroker.bootstrap
    configs(
        b,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--entity-type",
        "clients",
        "--entity-name",
        "app",
        "--add-config",
        "producer_byte_rate=1048576,consumer_byte_rate=2097152",
    )
    configs(b, "--alter", "--entity-type", "clients", "--entity-default", "--add-config", "request_percentage=50")
    out = configs(
        b,
        "--describe",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--entity-type",
        "clients",
        "--entity-name",
        "app",
    )
    (line,) = [x for x in out if x.startswith("Quota configs")]
    head, _, values = line.partition(" are ")
    assert head == "Quota configs for user-principal 'alice', client-id 'app'"
    assert sorted(values.split(", ")) == ["consumer_byte_rate=2097152.0", "producer_byte_rate=1048576.0"]
    out = configs(b, "--describe", "--entity-type", "clients", "--entity-default")
    assert out == ["Quota configs for the default client-id are request_percentage=50.0"]
    # kbroker's own command sees what Kafka's wrote
    from tests.interop.test_quotas import describe

    assert describe(b) == {
        (("user", "alice"), ("client-id", "app")): {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
        (("client-id", None),): {"request_percentage": 50.0},
    }
    configs(
        b,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--entity-type",
        "clients",
        "--entity-name",
        "app",
        "--delete-config",
        "producer_byte_rate,consumer_byte_rate",
    )
    configs(b, "--alter", "--entity-type", "clients", "--entity-default", "--delete-config", "request_percentage")
    assert describe(b) == {}
    # a bad value: Kafka's tool reports the broker's refusal and exits non-zero
    bad = kafka_tool(
        "kafka-configs",
        "--bootstrap-server",
        b,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        "x",
        "--add-config",
        "producer_byte_rate=-1",
        check=False,
        timeout=TIMEOUT_S,
    )
    assert bad.returncode != 0
    assert "Quota producer_byte_rate must be greater than 0" in bad.stdout + bad.stderr


def appended_for(bootstrap: str, topic: str, seconds: float, tool) -> tuple[int, float]:
    """(records, seconds): what the broker appended to the topic from its first record to
    `seconds` later (ListOffsets every 0.1 s), the producer running meanwhile."""
    with Cluster(bootstrap) as c:

        def count() -> int:
            return sum(o for o, _ in c.list_offsets(topic, [0], -1).values())

        deadline = time.monotonic() + 120
        while (first := count()) == 0:
            assert tool.proc.poll() is None and time.monotonic() < deadline, tool.stderr()
            time.sleep(0.02)
        t0 = time.monotonic()
        time.sleep(seconds)
        last = count()
        return last - first, time.monotonic() - t0


def _metric(output: str, name: str, client_id: str) -> float:
    m = re.search(rf"^producer-metrics:{name}:{{client-id={client_id}}}\s*:\s*([\d.eE+-]+|NaN)", output, re.M)
    assert m is not None, f"{name} of {client_id} not printed"
    return float(m.group(1))


def perf_producer(bootstrap: str, topic: str, client_id: str, records: int) -> list[str]:
    return tool_command(
        "kafka-producer-perf-test",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(RECORD),
        "--throughput",
        "-1",
        "--print-metrics",
        "--command-property",
        f"client.id={client_id}",
        "acks=1",
        "linger.ms=5",
    )


def test_a_producer_is_held_to_its_quota_and_its_neighbour_is_not(kbroker, topic, tmp_path):
    """Issue 20, test 3. One partition and the client's default batch.size keep each
    request small (16 KiB), as the 10% bound needs with Kafka's sampled rate: a new client
    may send 10 windows' worth at once, and again when that sample is forgotten 11 windows
    later — two such bursts in 20 s, plus what the requests in flight carry past each."""
    b = kbroker.bootstrap
    create(b, topic, 1)
    create(b, topic + "-free", 1)
    configs(
        b, "--alter", "--entity-type", "clients", "--entity-name", "limited", "--add-config", f"producer_byte_rate={MB}"
    )
    try:
        # 30 MB at 1 MB/s: about 30 s; the first 20 s after its first record are measured
        limited = StartedTool(perf_producer(b, topic, "limited", 30 * MB // RECORD), tmp_path, "limited")
        free = StartedTool(perf_producer(b, topic + "-free", "free", 100 * MB // RECORD), tmp_path, "free")
        records, seconds = appended_for(b, topic, 20.0, limited)
        rc_free, out_free = free.wait(TIMEOUT_S)
        rc, out = limited.wait(TIMEOUT_S)
        assert rc == 0 and rc_free == 0, limited.stderr() + free.stderr()
        rate = records * RECORD / seconds
        assert 0.9 * MB <= rate <= 1.1 * MB, (rate / MB, out)
        # the Java client saw the throttling (KIP-219: throttle_time_ms in its answers)
        assert _metric(out, "produce-throttle-time-max", "limited") > 0
        assert _metric(out, "produce-throttle-time-avg", "limited") > 0
        # the neighbour was not held: its whole run well above 1 MB/s, never throttled
        finals = re.findall(
            r"^\d+ records sent, [\d.]+ records/sec \(([\d.]+) MB/sec\), [\d.]+ ms avg latency, "
            r"[\d.]+ ms max latency, \d+ ms 50th",
            out_free,
            re.M,
        )
        assert finals, out_free
        assert float(finals[-1]) > 4.0, out_free
        assert _metric(out_free, "produce-throttle-time-max", "free") == 0
        print(f"limited: {rate / MB:.3f} MB/s over {seconds:.1f} s; free: {finals[-1]} MB/s")
    finally:
        configs(
            b,
            "--alter",
            "--entity-type",
            "clients",
            "--entity-name",
            "limited",
            "--delete-config",
            "producer_byte_rate",
        )


def _consume(bootstrap: str, topic: str, client_id: str, records: int, tmp_path) -> tuple[dict, str]:
    out = kafka_tool(
        "kafka-consumer-perf-test",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--timeout",
        "60000",
        "--print-metrics",
        "--group",
        f"{topic}-{client_id}",
        "--command-property",
        f"client.id={client_id}",
        timeout=TIMEOUT_S,
    ).stdout
    lines = out.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
    return dict(zip(lines[i].split(", "), lines[i + 1].split(", "))), out


def test_a_consumer_is_held_to_its_quota_and_another_is_not(kbroker, topic, tmp_path):
    b = kbroker.bootstrap
    create(b, topic, 1)
    records = 24 * MB // RECORD
    kafka_tool(
        "kafka-producer-perf-test",
        "--bootstrap-server",
        b,
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(RECORD),
        "--throughput",
        "-1",
        "--command-property",
        "acks=1",
        timeout=TIMEOUT_S,
    )
    configs(
        b,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-name",
        "slow-reader",
        "--add-config",
        f"consumer_byte_rate={MB}",
    )
    try:
        slow, out = _consume(b, topic, "slow-reader", records, tmp_path)
        fast, _ = _consume(b, topic, "fast-reader", records, tmp_path)
        assert int(slow["data.consumed.in.nMsg"]) == int(fast["data.consumed.in.nMsg"]) == records
        # 24 MB at 1 MB/s: Kafka's rate lets a new client take 10 windows' worth at once
        # (10 MB), and forgets a sample 11 windows old; the rest waits its turn
        assert float(slow["fetch.MB.sec"]) < 2.0, slow
        assert float(fast["fetch.MB.sec"]) > 2 * float(slow["fetch.MB.sec"]), (slow, fast)
        m = re.search(
            r"^consumer-fetch-manager-metrics:fetch-throttle-time-max:{client-id=slow-reader}\s*:\s*"
            r"([\d.]+)",
            out,
            re.M,
        )
        assert m is not None and float(m.group(1)) > 0, out[-3000:]
    finally:
        configs(
            b,
            "--alter",
            "--entity-type",
            "clients",
            "--entity-name",
            "slow-reader",
            "--delete-config",
            "consumer_byte_rate",
        )


def test_the_kafka_configs_commands_of_docs_quotas_md(kbroker):
    import shlex
    from pathlib import Path

    from tests.pipelines.helpers import fenced_blocks

    (block,) = fenced_blocks(Path(__file__).resolve().parents[2] / "docs" / "quotas.md", "sh kafka-configs")
    outputs = []
    for line in block:
        name, *args = shlex.split(line.replace("127.0.0.1:9092", kbroker.bootstrap))
        assert name == "kafka-configs.sh"
        outputs.append(kafka_tool("kafka-configs", *args, timeout=TIMEOUT_S).lines)
    assert outputs[1] == ["Quota configs for client-id 'app' are producer_byte_rate=1048576.0"]
    from tests.interop.test_quotas import describe

    assert describe(kbroker.bootstrap) == {}
