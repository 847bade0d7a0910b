"""Issue 19, test 4: the brokers' own logs.

Three brokers with log.format=json, each with its state-change log in a file of its own
(log.state.change.file) and the request log of Metadata on (log.request.api): every line
each one writes, to stderr and to its state-change log, is a JSON object; after the
leader of a partition is killed, the state-change log names the partition, the old and
the new leader and the controller epoch (the one ZooKeeper holds), and the new leader's
own line agrees; the killed broker, restarted 20,000 records behind, says which segment
of how many its log recovery is at, and how its catching up with the leader goes.
"""

from __future__ import annotations

import json
import re

from kazoo.client import KazooClient

from broker.client import Cluster as Client, Producer
from broker.cluster.store.znodes import ControllerEpochZNode
from tests.support.cluster import poll_until

TOPIC = "audited"
BEHIND = 20000


def json_lines(path) -> list[dict]:
    """Every line of the file, each parsed as one JSON object (a line that is not fails)."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        record = json.loads(line)
        assert isinstance(record, dict), f"{path}:{n}: {line!r}"
        assert {"timestamp", "level", "logger", "message"} <= set(record), f"{path}:{n}: {line!r}"
        out.append(record)
    return out


def controller_epoch(cluster) -> int:
    zk = KazooClient(hosts=cluster.zk_connect, timeout=10)
    zk.start(10)
    try:
        data, _ = zk.get(ControllerEpochZNode.PATH)
        return ControllerEpochZNode.decode(data)
    finally:
        zk.stop()
        zk.close()


def test_json_logs_state_change_log_request_log_and_recovery_progress(make_cluster, tmp_path):
    state_logs = {i: tmp_path / f"state-change-{i}.log" for i in (1, 2, 3)}
    cluster = make_cluster(
        3,
        config={"log.format": "json", "log.request.api": "Metadata", "offsets.topic.num.partitions": 1},
        per_broker={i: {"log.state.change.file": str(p)} for i, p in state_logs.items()},
    )
    with Client(cluster.bootstrap) as c:
        c.create_topic(TOPIC, 1, 3)
    old = cluster.wait_for_leader(TOPIC, 0, everywhere=True)
    cluster.wait_for_isr(TOPIC, 0, {1, 2, 3})
    with Producer(cluster.bootstrap, acks=-1) as producer:
        for i in range(50):
            producer.send(TOPIC, b"line-%d" % i, partition=0)
    cluster.kill(old)
    new = cluster.wait_for_leader(TOPIC, 0, not_in={old})
    epoch = controller_epoch(cluster)
    pattern = re.compile(
        rf"\[Controller id=(\d+) epoch=(\d+)\] partition {TOPIC}-0: leader {old} -> {new}, "
        rf"leader epoch (\d+), ISR \[[\d, ]*\] -> \[[\d, ]*\]"
    )

    def change_logged():
        for i, path in state_logs.items():
            if i == old or not path.exists():
                continue
            for r in json_lines(path):
                m = pattern.search(r["message"])
                if m:
                    return True, (i, m, r), r["message"]
        return False, None, "no line yet"

    writer, m, record = poll_until("the state-change log names the new leader", change_logged, 30)
    assert record["logger"] == "state.change.logger" and record["level"] == "INFO"
    controller, logged_epoch, leader_epoch = int(m.group(1)), int(m.group(2)), int(m.group(3))
    assert controller == writer and logged_epoch == epoch
    # the new leader's own line: the same leader epoch and controller epoch
    ours = [r["message"] for r in json_lines(state_logs[new])]
    assert any(
        f"[Broker id={new}] partition {TOPIC}-0: leader at leader epoch {leader_epoch} (leader {new})" in line
        and line.endswith(f"controller epoch {epoch}")
        for line in ours
    ), ours[-5:]
    # the state-change lines go to their file only
    assert not any(r["logger"] == "state.change.logger" for r in json_lines(cluster.broker(new).log_path))

    # the killed broker back, 20,000 records behind: its log recovery reports progress (it
    # died uncleanly), and so does its catching up with the new leader
    with Producer(cluster.bootstrap, acks=-1) as producer:
        for i in range(BEHIND):
            producer.send(TOPIC, b"later-%d" % i, partition=0)
    cluster.start(old)
    cluster.wait_for_isr(TOPIC, 0, {1, 2, 3})
    for i in (1, 2, 3):
        records = json_lines(cluster.broker(i).log_path)  # every line of stderr is JSON
        assert any(
            r["logger"] == "broker.request"
            and r["level"] == "DEBUG"
            and r["message"].startswith("completed Metadata v")
            for r in records
        ), i
        assert not any(r["logger"] == "broker.request" and "completed Produce" in r["message"] for r in records)
    recovered = [r["message"] for r in json_lines(cluster.broker(old).log_path) if "recovering segment" in r["message"]]
    assert any(
        re.search(rf"{TOPIC}-0: recovering segment 1 of 1 \(base offset 0, [\d.]+ MB so far, [\d.]+ MB/s\)", m)
        for m in recovered
    ), recovered
    caught = [r["message"] for r in json_lines(cluster.broker(old).log_path) if f"{TOPIC}-0: c" in r["message"]]
    assert any(
        m.startswith(f"{TOPIC}-0: catching up with leader {new}: {BEHIND} records behind (offset 50, ") for m in caught
    ), caught
    assert any(
        re.match(rf"{TOPIC}-0: caught up with leader {new} at offset {50 + BEHIND} \({BEHIND} records in ", m)
        for m in caught
    ), caught
