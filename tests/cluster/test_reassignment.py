"""Partition reassignment (KIP-455) on real brokers and a real ZooKeeper: a 6-partition
RF=3 topic under idempotent acks=all load, a 4th broker joins, `broker topics reassign`
moves a replica of every partition to it (half of them the leader's) in two plans; the
second is caught mid-way (the new broker paused) and its controller is killed -9: the
next controller resumes it and it completes. At the end: 0 acknowledged records lost,
0 stored twice, no reassignment listed, replicas and ISRs as planned, the removed
replicas' directories gone from their brokers' disks, every replica byte-identical.
Bounded in time; the random seed is printed (KBROKER_REASSIGN_SEED=N runs it again)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest

from broker.client import Cluster as Client
from tests.cluster.helpers import ProducerThread, check_no_loss_no_duplicates, read_values
from tests.support.cluster import poll_until

pytestmark = pytest.mark.timeout(300)

TOPIC = "orders"
PARTITIONS = 6


def cli(*args, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli.main", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def partition_dirs(cluster, broker_id: int) -> set[int]:
    """The partitions of TOPIC with a directory (live or being deleted) on the broker's disk."""
    out = set()
    d = cluster.broker(broker_id).data_dir
    for name in os.listdir(d) if d.exists() else ():
        base = name.split(".")[0]
        topic, _, p = base.rpartition("-")
        if topic == TOPIC and p.isdigit():
            out.add(int(p))
    return out


def reassignments(cluster, bootstrap=None) -> dict:
    with Client(bootstrap or cluster.bootstrap) as c:
        return c.list_partition_reassignments()


def bootstrap_without(cluster, *paused) -> str:
    """The bootstrap list without paused brokers (a client would wait on them)."""
    return ",".join(cluster.broker(b).bootstrap for b in cluster.ids if b not in paused)


def plan_for(cluster, rng, partitions, new_broker, keep=None):
    """A plan moving one replica of each partition to `new_broker`: the leader's for
    every other partition, a follower's (never `keep`) for the rest."""
    plan = {}
    for i, p in enumerate(partitions):
        replicas = cluster.replicas_of(TOPIC, p)
        leader = cluster.leader_of(TOPIC, p)
        followers = [r for r in replicas if r != leader and r != keep]
        gone = leader if i % 2 == 0 and leader != keep else rng.choice(followers)
        plan[p] = [new_broker if r == gone else r for r in replicas]
    return plan


def write_plan(path, plan) -> str:
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": TOPIC, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
                    for p, r in plan.items()
                ],
            }
        )
    )
    return str(path)


def wait_done(cluster, plan, timeout=90.0):
    def probe():
        ongoing = reassignments(cluster)
        if ongoing:
            return False, None, f"in progress: {ongoing}"
        now = {p: (cluster.replicas_of(TOPIC, p), sorted(cluster.isr_of(TOPIC, p))) for p in plan}
        done = all(replicas == plan[p] and isr == sorted(plan[p]) for p, (replicas, isr) in now.items())
        return done, now, f"replicas and ISRs {now}"

    return poll_until(f"the reassignment of {sorted(plan)} to be done", probe, timeout)


def test_reassignment_to_a_new_broker_under_load_survives_a_controller_kill(make_cluster, tmp_path):
    seed = int(os.environ.get("KBROKER_REASSIGN_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (KBROKER_REASSIGN_SEED={seed} runs it again)")
    rng = random.Random(seed)
    cluster = make_cluster(3)
    with Client(cluster.bootstrap) as c:
        c.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    for p in range(PARTITIONS):
        cluster.wait_for_leader(TOPIC, p, everywhere=True)
    producer = ProducerThread(cluster.bootstrap, TOPIC, PARTITIONS, rate=1000).start()
    try:
        producer.wait_for_more(500)
        # its ZooKeeper session outlives the pause below (the others' last 6 s)
        new = cluster.add_broker(config={"zookeeper.session.timeout.ms": 30000})
        assert new == 4 and partition_dirs(cluster, 4) == set()
        before = {p: cluster.replicas_of(TOPIC, p) for p in range(PARTITIONS)}
        assert all(partition_dirs(cluster, b) == set(range(PARTITIONS)) for b in (1, 2, 3))

        # --generate proposes a plan over the four brokers (printed in Kafka's format)
        topics_file = tmp_path / "topics.json"
        topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": TOPIC}]}))
        r = cli(
            "topics",
            "reassign",
            "--generate",
            "--topics-to-move-json-file",
            topics_file,
            "--broker-list",
            "1,2,3,4",
            "-b",
            cluster.bootstrap,
        )
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0] == "Current partition replica assignment"
        proposed = json.loads(lines[lines.index("Proposed partition reassignment configuration") + 1])
        assert len(proposed["partitions"]) == PARTITIONS

        # plan 1: partitions 0-2, run to completion
        first = plan_for(cluster, rng, [0, 1, 2], new)
        print("plan 1", first)
        plan1 = write_plan(tmp_path / "plan1.json", first)
        r = cli("topics", "reassign", "--execute", "--reassignment-json-file", plan1, "-b", cluster.bootstrap)
        assert r.returncode == 0, r.stderr
        assert "Successfully started partition reassignments for orders-0,orders-1,orders-2" in r.stdout
        rollback = json.loads(r.stdout.splitlines()[2])
        assert {e["partition"]: e["replicas"] for e in rollback["partitions"]} == {p: before[p] for p in first}
        wait_done(cluster, first)
        producer.wait_for_more(300)
        r = cli("topics", "reassign", "--verify", "--reassignment-json-file", plan1, "-b", cluster.bootstrap)
        assert r.returncode == 0 and r.stdout.count("is completed.") == 3, r.stdout + r.stderr

        # plan 2: partitions 3-5 with the new broker paused: the reassignment cannot
        # finish; the controller is killed -9 in the middle and its successor resumes it
        controller = cluster.controller_id()
        second = plan_for(cluster, rng, [3, 4, 5], new, keep=controller)
        print("plan 2", second, "controller", controller)
        plan2 = write_plan(tmp_path / "plan2.json", second)
        cluster.pause(new)
        live = bootstrap_without(cluster, new)
        r = cli("topics", "reassign", "--execute", "--reassignment-json-file", plan2, "-b", live)
        assert r.returncode == 0, r.stderr
        ongoing = reassignments(cluster, live)
        assert sorted(ongoing) == [(TOPIC, 3), (TOPIC, 4), (TOPIC, 5)], ongoing
        for (_t, p), (replicas, adding, removing) in ongoing.items():
            assert adding == [new] and replicas[:3] == second[p] and len(removing) == 1
        r = cli("topics", "reassign", "--execute", "--reassignment-json-file", plan2, "-b", live)
        assert r.returncode == 1 and "existing partition assignment" in r.stderr  # one line, as Kafka's
        r = cli("topics", "reassign", "--verify", "--reassignment-json-file", plan2, "-b", live)
        assert r.stdout.count("is still in progress.") == 3, r.stdout
        cluster.kill(controller)
        successor = cluster.wait_for_controller(not_in={controller})
        print("controller", controller, "killed; now", successor)
        cluster.resume(new)
        cluster.start(controller)  # a target replica: the reassignment needs it back in the ISR
        wait_done(cluster, second)
        producer.wait_for_more(300)
        r = cli("topics", "reassign", "--verify", "--reassignment-json-file", plan2, "-b", cluster.bootstrap)
        assert r.returncode == 0 and r.stdout.count("is completed.") == 3, r.stdout + r.stderr
    finally:
        producer.stop()
    assert reassignments(cluster) == {}
    plan = {**first, **second}
    # the removed replicas are deleted from their brokers' disks; the added ones exist
    want = {b: {p for p, r in plan.items() if b in r} for b in (1, 2, 3, 4)}

    def dirs_as_planned():
        have = {b: partition_dirs(cluster, b) for b in (1, 2, 3, 4)}
        return have == want, have, f"partition directories {have}, expected {want}"

    poll_until("the partition directories to match the plan", dirs_as_planned, 30)
    assert not producer.errors, producer.errors[:5]
    stored = read_values(cluster.bootstrap, TOPIC, PARTITIONS)
    check_no_loss_no_duplicates(producer.acked, stored)
    print("acknowledged", producer.acked_count(), "records; stored", sum(len(v) for v in stored.values()))


def test_cancel_and_errors_through_the_cli(make_cluster, tmp_path):
    """--cancel goes back to the original replicas and deletes the replica being added;
    plans the controller refuses are one line each, with Kafka's error names. Sessions
    outlive the pause below (a paused broker whose session expired is no live broker to
    add: INVALID_REPLICA_ASSIGNMENT)."""
    cluster = make_cluster(3, config={"zookeeper.session.timeout.ms": 20000})
    # the broker to pause is neither a replica nor the controller (which must answer)
    controller = cluster.controller_id()
    before = [controller, next(b for b in (1, 2, 3) if b != controller)]
    spare = ({1, 2, 3} - set(before)).pop()
    from broker.protocol.messages.create_topics import CreateTopicsRequest as C

    with Client(cluster.bootstrap) as c:
        req = C(
            topics=[
                C.CreatableTopic(
                    name=TOPIC,
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=[],
                    assignments=[C.CreatableReplicaAssignment(partition_index=0, broker_ids=before)],
                )
            ],
            timeout_ms=30000,
            validate_only=False,
        )
        assert c.controller().request(req).topics[0].error_code == 0
    cluster.wait_for_leader(TOPIC, 0, everywhere=True)
    assert cluster.replicas_of(TOPIC, 0) == before
    r = cli(
        "topics",
        "reassign",
        "--execute",
        "--reassignment-json-file",
        write_plan(tmp_path / "bad.json", {0: [before[0], 9]}),
        "-b",
        cluster.bootstrap,
    )
    assert r.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    r = cli(
        "topics",
        "reassign",
        "--execute",
        "--reassignment-json-file",
        write_plan(tmp_path / "nope.json", {5: [1, 2]}),
        "-b",
        cluster.bootstrap,
    )
    assert r.returncode == 1 and "orders-5 does not exist" in r.stderr, r.stderr
    # a reassignment held in progress: the spare broker paused cannot catch up
    cluster.pause(spare)
    live = bootstrap_without(cluster, spare)
    plan = write_plan(tmp_path / "plan.json", {0: [spare, before[1]]})
    try:
        r = cli("topics", "reassign", "--execute", "--reassignment-json-file", plan, "-b", live)
        assert r.returncode == 0, r.stderr
        assert list(reassignments(cluster, live)) == [(TOPIC, 0)]
        r = cli("topics", "reassign", "--list", "-b", live)
        assert r.returncode == 0 and r.stdout.splitlines() == [
            "Current partition reassignments:",
            f"orders-0: replicas: {spare},{before[1]},{before[0]}. adding: {spare}. removing: {before[0]}.",
        ], r.stdout
        r = cli("topics", "reassign", "--cancel", "--reassignment-json-file", plan, "-b", live)
        assert r.returncode == 0 and "Successfully cancelled partition reassignment for: orders-0" in r.stdout, (
            r.stdout + r.stderr
        )
        assert reassignments(cluster, live) == {}
    finally:
        cluster.resume(spare)
    assert set(cluster.replicas_of(TOPIC, 0)) == set(before)
    poll_until(
        "the cancelled replica's directory to go",
        lambda: (not partition_dirs(cluster, spare), None, f"{partition_dirs(cluster, spare)}"),
        30,
    )
    r = cli("topics", "reassign", "--cancel", "--reassignment-json-file", plan, "-b", cluster.bootstrap)
    assert r.returncode == 0 and "nothing to cancel" in r.stdout
    r = cli("topics", "reassign", "--list", "-b", cluster.bootstrap)
    assert r.stdout == "No partition reassignments found.\n"


def test_kafkas_reassign_partitions_tool_executes_and_verifies(make_cluster, tmp_path):
    """Kafka's own kafka-reassign-partitions (the pinned jars) against kbroker: --generate,
    --execute --throttle of a plan moving replicas to a broker that joined (the tool sets
    the topic's throttled replicas and every involved broker's rates), --verify until it
    says every move is complete, which then clears the throttles (IncrementalAlterConfigs
    on every broker and the topic); kbroker's own --verify agrees. Under CI=true missing
    jars fail the test (tests/support/deps.py)."""
    from tests.support.kafka_tools import kafka_tool, require_kafka_libs

    require_kafka_libs()
    cluster = make_cluster(3)
    with Client(cluster.bootstrap) as c:
        c.create_topic(TOPIC, 3, 2, {})
    for p in range(3):
        cluster.wait_for_leader(TOPIC, p, everywhere=True)
    new = cluster.add_broker()
    bootstrap = cluster.broker(1).bootstrap
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": TOPIC}]}))
    out = kafka_tool(
        "kafka-reassign-partitions",
        "--bootstrap-server",
        bootstrap,
        "--generate",
        "--topics-to-move-json-file",
        str(topics_file),
        "--broker-list",
        "1,2,3,4",
    ).stdout
    assert "Current partition replica assignment" in out and "Proposed partition reassignment configuration" in out
    plan = {p: [new, cluster.replicas_of(TOPIC, p)[1]] for p in range(3)}
    plan_file = write_plan(tmp_path / "plan.json", plan)
    out = kafka_tool(
        "kafka-reassign-partitions",
        "--bootstrap-server",
        bootstrap,
        "--execute",
        "--reassignment-json-file",
        plan_file,
        "--throttle",
        "50000000",
    ).stdout
    assert "Successfully started partition reassignments for orders-0,orders-1,orders-2" in out, out
    assert "The inter-broker throttle limit was set to 50000000 B/s" in out, out
    assert "follower.replication.throttled.replicas=" in topic_overrides(bootstrap)

    def verified():
        run = kafka_tool(
            "kafka-reassign-partitions",
            "--bootstrap-server",
            bootstrap,
            "--verify",
            "--reassignment-json-file",
            plan_file,
            check=False,
        )
        done = run.returncode == 0 and run.stdout.count("is completed.") == 3
        return done, run.stdout, f"exit {run.returncode}: {run.stdout[-800:]} {run.stderr[-800:]}"

    out = poll_until("kafka-reassign-partitions --verify to report completion", verified, 120, interval=1.0)
    print(out)
    assert "Clearing broker-level throttles on brokers" in out and "Clearing topic-level throttles" in out, out
    for b in (1, 2, 3, new):
        assert "throttled" not in broker_dynamic_configs(bootstrap, b)
    assert "throttled" not in topic_overrides(bootstrap)
    wait_done(cluster, plan)
    r = cli("topics", "reassign", "--verify", "--reassignment-json-file", plan_file, "-b", bootstrap)
    assert r.returncode == 0 and r.stdout.count("is completed.") == 3, r.stdout + r.stderr
    out = kafka_tool("kafka-reassign-partitions", "--bootstrap-server", bootstrap, "--list").stdout
    assert "No partition reassignments found." in out, out


def test_balance_proposes_a_plan_that_evens_out_a_new_broker(make_cluster, tmp_path):
    """--balance over a cluster a broker joined: executed, every broker holds its share
    of the replicas (within one) and of the preferred leaders."""
    cluster = make_cluster(3)
    with Client(cluster.bootstrap) as c:
        c.create_topic(TOPIC, 4, 3, {})
    for p in range(4):
        cluster.wait_for_leader(TOPIC, p, everywhere=True)
    cluster.add_broker()
    r = cli("topics", "reassign", "--balance", "-b", cluster.bootstrap)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    proposed = json.loads(lines[lines.index("Proposed partition reassignment configuration") + 1])
    plan = {e["partition"]: e["replicas"] for e in proposed["partitions"]}
    assert plan, r.stdout
    r = cli(
        "topics",
        "reassign",
        "--execute",
        "--reassignment-json-file",
        write_plan(tmp_path / "b.json", plan),
        "-b",
        cluster.bootstrap,
    )
    assert r.returncode == 0, r.stderr
    wait_done(cluster, plan)
    after = {p: cluster.replicas_of(TOPIC, p) for p in range(4)}
    held = {b: sum(b in r for r in after.values()) for b in (1, 2, 3, 4)}
    first = {b: sum(r[0] == b for r in after.values()) for b in (1, 2, 3, 4)}
    assert held == {1: 3, 2: 3, 3: 3, 4: 3} and set(first.values()) == {1}, (after, held, first)
    r = cli("topics", "reassign", "--balance", "-b", cluster.bootstrap)
    assert "(none: replicas and preferred leaders are even already)" in r.stdout, r.stdout


def test_the_commands_of_docs_cluster_md_run_as_written(make_cluster, tmp_path):
    """docs/cluster.md's reassignment commands, run as a shell would (the bootstrap
    address substituted, plan.json being --generate's proposal, as the page says)."""
    import re
    import shutil
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "cluster.md").read_text()
    section = doc[doc.index("## Moving replicas") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    commands = [re.sub(r"\s+#\s.*$", "", line).strip() for line in block.splitlines()]
    commands = [c for c in commands if c and not c.startswith("#")]
    assert [c.split()[3] for c in commands[1:]] == [
        "--generate",
        "--execute",
        "--verify",
        "--cancel",
        "--list",
        "--balance",
    ]
    cluster = make_cluster(3)
    with Client(cluster.bootstrap) as c:
        c.create_topic(TOPIC, 2, 3, {})
    for p in range(2):
        cluster.wait_for_leader(TOPIC, p, everywhere=True)
    cluster.add_broker()
    exe = shutil.which("broker", path=os.path.dirname(sys.executable))
    broker_cmd = exe or f"{sys.executable} -m broker.cli.main"
    for command in commands:
        line = command.replace("127.0.0.1:9093", cluster.bootstrap)
        if line.startswith("broker "):
            line = broker_cmd + line[len("broker") :]
        r = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (command, r.stdout, r.stderr)
        if "--generate" in command:
            lines = r.stdout.splitlines()
            (tmp_path / "plan.json").write_text(lines[lines.index("Proposed partition reassignment configuration") + 1])
        if "--execute" in command:
            assert "Successfully started partition reassignment" in r.stdout, r.stdout


def log_bytes(cluster, broker_id: int, partitions) -> int:
    """Bytes of TOPIC's log segments for `partitions` on the broker's disk."""
    total = 0
    for p in partitions:
        d = cluster.broker(broker_id).data_dir / f"{TOPIC}-{p}"
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            continue
        for name in names:
            if name.endswith(".log"):
                try:
                    total += os.path.getsize(d / name)
                except FileNotFoundError:
                    pass
    return total


def prefill(bootstrap: str, partitions: int, per_partition: int, value_size: int = 1000) -> None:
    """`per_partition` bytes of records into each partition, in batches of about 16 KB
    (values `<p>:<seq>` with negative sequence numbers, before the load's; padded keys)."""
    from tests.support.deps import require_module

    ck = require_module("confluent_kafka")
    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.size": 16384,
            "compression.type": "none",
        }
    )
    count = per_partition // (value_size + 80)
    failed = []

    def report(err, _msg):
        if err is not None:
            failed.append(str(err))

    for p in range(partitions):
        for seq in range(-count, 0):
            while True:
                try:
                    producer.produce(
                        TOPIC,
                        key=os.urandom(value_size // 2).hex().encode(),
                        value=f"{p}:{seq}".encode(),
                        partition=p,
                        on_delivery=report,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
    assert producer.flush(120) == 0 and not failed, failed[:5]


def broker_dynamic_configs(bootstrap: str, broker_id: int) -> str:
    r = cli("configs", "describe", "--entity-type", "brokers", "--entity-name", broker_id, "-b", bootstrap)
    assert r.returncode == 0, r.stderr
    return r.stdout


def topic_overrides(bootstrap: str) -> str:
    r = cli("configs", "describe", "--entity-type", "topics", "--entity-name", TOPIC, "-b", bootstrap)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_throttled_reassignment_is_held_to_its_rate_and_verify_removes_the_throttles(make_cluster, tmp_path):
    """Issue 20's test 2, its throttle: a 6-partition RF=3 topic holding 24 MB, a 4th
    broker joins and a plan moves a replica of every partition to it (the leader's of
    half) with --throttle 1000000 under idempotent acks=all load. The new replicas' logs
    grow at 1 MB/s within 20% (measured from 15% of the move, past the first window's
    burst, to 70%); then the controller is killed -9 (and started again: it holds
    target replicas) and the move still completes under its successor; 0 lost,
    0 duplicated; --verify reports completion and removes the throttles from the brokers
    and the topic."""
    seed = int(os.environ.get("KBROKER_REASSIGN_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (KBROKER_REASSIGN_SEED={seed} runs it again)")
    rng = random.Random(seed)
    rate = 1_000_000
    cluster = make_cluster(3)
    with Client(cluster.bootstrap) as c:
        c.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    for p in range(PARTITIONS):
        cluster.wait_for_leader(TOPIC, p, everywhere=True)
    prefill(cluster.bootstrap, PARTITIONS, 4_000_000)
    size = log_bytes(cluster, 1, range(PARTITIONS))
    assert size >= 20_000_000, size  # >= 20 s at the throttle
    producer = ProducerThread(cluster.bootstrap, TOPIC, PARTITIONS, rate=300).start()
    try:
        producer.wait_for_more(300)
        new = cluster.add_broker()
        plan = plan_for(cluster, rng, range(PARTITIONS), new)
        print("plan", plan)
        plan_file = write_plan(tmp_path / "plan.json", plan)
        r = cli(
            "topics",
            "reassign",
            "--execute",
            "--reassignment-json-file",
            plan_file,
            "--throttle",
            rate,
            "-b",
            cluster.bootstrap,
        )
        assert r.returncode == 0, r.stderr
        assert f"The inter-broker throttle limit was set to {rate} B/s" in r.stdout, r.stdout
        assert "You must run --verify periodically" in r.stdout
        started = time.monotonic()
        samples = []  # (when, bytes on the new broker) until the controller is killed
        deadline = started + 150
        killed = None
        while True:
            moved = log_bytes(cluster, new, range(PARTITIONS))
            if killed is None:
                samples.append((time.monotonic(), moved))
                if moved >= 0.7 * size:
                    killed = cluster.controller_id()
                    cluster.kill(killed)
                    successor = cluster.wait_for_controller(not_in={killed})
                    print(f"controller {killed} killed at {moved} of {size} bytes; now {successor}")
                    cluster.start(killed)
            elif not reassignments(cluster):
                break
            assert time.monotonic() < deadline, f"not done in 150 s; moved {moved} of {size} bytes"
            time.sleep(0.5)
        assert killed is not None
        took = time.monotonic() - started
        wait_done(cluster, plan)
        # the throttles as Kafka's tool sets them, still there until --verify: rates on
        # every broker involved, the topic's lists (leaders: the current replicas;
        # followers: the new one). Checked after the move: the CLI calls take seconds
        # that the rate's samples need.
        for b in (1, 2, 3, new):
            assert f"leader.replication.throttled.rate={rate}" in broker_dynamic_configs(cluster.bootstrap, b)
        overrides = topic_overrides(cluster.bootstrap)
        assert (
            "follower.replication.throttled.replicas=" + ",".join(f"{p}:{new}" for p in range(PARTITIONS)) in overrides
        ), overrides
        producer.wait_for_more(300)
        r = cli("topics", "reassign", "--verify", "--reassignment-json-file", plan_file, "-b", cluster.bootstrap)
        assert r.returncode == 0 and r.stdout.count("is completed.") == PARTITIONS, r.stdout + r.stderr
        assert f"Clearing broker-level throttles on brokers 1,2,3,{new}" in r.stdout, r.stdout
        assert f"Clearing topic-level throttles on topic {TOPIC}" in r.stdout, r.stdout
    finally:
        producer.stop()
    final = log_bytes(cluster, new, range(PARTITIONS))
    t1, b1 = next((t, b) for t, b in samples if b >= 0.15 * size)
    t2, b2 = samples[-1]
    assert t2 - t1 >= 8, samples  # the rate over at least 8 s
    measured = (b2 - b1) / (t2 - t1)
    print(f"moved {final} bytes in {took:.1f} s; between {b1} and {b2} bytes: {measured:.0f} B/s (throttle {rate} B/s)")
    assert 0.8 * rate <= measured <= 1.2 * rate, (measured, samples)
    assert took >= 0.8 * (0.7 * size - 2 * rate) / rate, took
    # the throttles are gone: no broker's dynamic config, no topic override
    for b in (1, 2, 3, new):
        assert "throttled" not in broker_dynamic_configs(cluster.bootstrap, b)
    assert "throttled" not in topic_overrides(cluster.bootstrap)
    assert not producer.errors, producer.errors[:5]
    stored = read_values(cluster.bootstrap, TOPIC, PARTITIONS)
    check_no_loss_no_duplicates(producer.acked, stored)
    print("acknowledged", producer.acked_count(), "records; stored", sum(len(v) for v in stored.values()))
