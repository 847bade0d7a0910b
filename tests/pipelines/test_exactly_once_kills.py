"""Issue 41, item 1: an exactly-once streaming query rides through each broker of the
cluster killed -9 in turn, the brokers at their default settings
(`zookeeper.session.timeout.ms` 18 s: a killed broker's partitions, and the
coordinators of the transactional ids it led, move only once its session expires).

The query is examples/exactly_once/run.py on the Spark standalone cluster (page views
from a 6-partition RF=3 topic, windows of event time, a 1-minute watermark, a stream-
static join, the kbroker sink with deliveryGuarantee=exactly-once). Each broker is
killed in turn, first the coordinator of the query's first transactional id. Before
each kill the partitions of the query's topics get leaders other than the victim, so
that the batches go on while what the victim coordinated is unreachable: micro-batches
are planned and their writers created, tasks start transactions and the driver commits
them while their coordinator is down (the data path's failover, the same with any
session timeout, is tests/pipelines/test_faults.py's). After each kill the query must
complete batches again, then the broker restarts and catches up before the next. Then the generation is stopped (Ctrl-C), the job catches up and
checks its own result; the test checks it again independently: the counts read with
read_committed (confluent-kafka) against the views themselves, every closed window once
and right. The query never fails.

One query for the three kills keeps it bounded (about five minutes, some two of them
waiting for the watermark to close the windows of the kills); every wait has a
timeout; the random seed is printed (KBROKER_FAULT_SEED=N repeats the choices). The
stall of each kill is printed, not asserted (bench/pipelines/run.py --only eos-stall
measures it).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sys
import time
from collections import Counter
from datetime import datetime, timezone

import pytest

from broker.client import Cluster as Client
from broker.protocol.messages.find_coordinator import FindCoordinatorRequest
from tests.pipelines.helpers import ROOT, JobProcess, create_topic, read_topic
from tests.support.cluster import Cluster
from tests.support.deps import missing, require_module
from tests.support.zookeeper import available
from tests.txn.test_single_broker import read as read_isolated

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

EXAMPLE = ROOT / "examples" / "exactly_once" / "run.py"
#: a window closes every 10 s of event time: within each outage (18 s and more) batches
#: write counts, in transactions the coordinator being down has to see through
WINDOW_S = 10
WATERMARK_S = 60  # the example's default watermark, "1 minute"
DURATION_S = 900  # --duration: an upper bound, the test ends the generation
RATE = 40  # views/s
#: a driver's start and first batches take minutes on a busy 2-core machine
JOB_TIMEOUT = 600.0
HEAL_TIMEOUT = 120.0
TOPICS = ("views", "view-counts")
#: a batch line of a batch that wrote counts
WROTE = re.compile(r": \d+ views in, [1-9]\d* counts out")


def coordinator_of(bootstrap: str, key: str, key_type: int) -> int:
    """The broker coordinating a transactional id (key_type 1) or a group (0)."""
    with Client(bootstrap) as c:
        conn = c.any_connection()
        r = conn.request(
            FindCoordinatorRequest(key=key, key_type=key_type), min(conn.version_for(FindCoordinatorRequest.API_KEY), 3)
        )
        assert r.error_code == 0, r
        return r.node_id


def lead_elsewhere(c: Cluster, victim: int) -> None:
    """The data topics' partitions led by brokers other than `victim`: it goes last in
    their replica lists (a reassignment to the same replicas, reordered), then a
    preferred leader election. Killing it then stops no read or write of the query's
    data: only what it coordinates (the query's transactions, its group) and the
    internal partitions it leads (the sink log's, __transaction_state's) fail over."""
    moves = {}
    for t in TOPICS:
        for p, meta in c.describe(t).partitions.items():
            replicas = list(meta.replicas)
            if replicas[0] == victim or meta.leader == victim:
                moves[(t, p)] = [b for b in replicas if b != victim] + [victim]
    if not moves:
        return
    with Client(c.bootstrap) as client:
        assert all(code == 0 for code, _ in client.alter_partition_reassignments(moves).values())
        deadline = time.monotonic() + HEAL_TIMEOUT
        while client.list_partition_reassignments(list(moves)):
            assert time.monotonic() < deadline, "the replica lists were not reordered"
            time.sleep(0.2)
        client.elect_leaders("preferred", list(moves))
    for t, p in moves:
        c.wait_for_leader(t, p, not_in={victim}, timeout=HEAL_TIMEOUT)


def in_sync(c: Cluster, timeout: float = HEAL_TIMEOUT) -> None:
    """Every partition of every topic (the internal ones too: the transaction log, the
    sink log, the offsets topic) has all its replicas in sync again: the next kill then
    costs one broker, not two."""
    deadline = time.monotonic() + timeout
    while True:
        lagging = []
        try:
            with Client(c.bootstrap) as client:
                for name, meta in client.refresh(None).items():
                    lagging += [(name, p) for p, m in meta.partitions.items() if set(m.isr) != set(m.replicas)]
        except Exception as exc:  # noqa: BLE001 - a broker still starting: ask again
            lagging = [str(exc)]
        if not lagging:
            return
        assert time.monotonic() < deadline, f"not in sync within {timeout} s: {lagging[:10]}"
        time.sleep(0.5)


def wrote_after(job: JobProcess, t: float) -> float | None:
    """When the first batch after t that wrote counts completed (None: none yet)."""
    return next((when for when, line in job.lines if when > t and WROTE.search(line)), None)


def batches_after(job: JobProcess, t: float) -> int:
    return sum(1 for when, _, _ in job.batches if when > t)


def longest_gap(job: JobProcess, start: float, end: float) -> float:
    times = [start] + [t for t, _, _ in job.batches if start <= t <= end] + [end]
    return max(b - a for a, b in zip(times, times[1:]))


def window_of(ms: int) -> str:
    s = ms // 1000
    return datetime.fromtimestamp(s - s % WINDOW_S, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def test_exactly_once_query_rides_through_each_broker_killed_at_default_settings(spark_standalone, tmp_path):
    require_module("confluent_kafka")
    what = available()
    if what is not None:
        missing(what, "apt-get install zookeeper default-jre-headless, or run 'make test' as root")
    seed = int(os.environ.get("KBROKER_FAULT_SEED", random.randrange(1 << 30)))
    print(f"\nseed {seed} (KBROKER_FAULT_SEED={seed} repeats the choices)")
    rng = random.Random(seed)
    # every broker setting at its default: zookeeper.session.timeout.ms 18000,
    # replica.lag.time.max.ms 30000, transaction.state.log.num.partitions 50 ...
    with Cluster(tmp_path / "kbroker", n=3, config={}) as c:
        create_topic(c.bootstrap, "views", 6, 3, {"min.insync.replicas": "2"})
        create_topic(c.bootstrap, "view-counts", 1, 3, {"min.insync.replicas": "2"})
        job = JobProcess(
            [
                sys.executable,
                str(EXAMPLE),
                "--bootstrap",
                c.bootstrap,
                "--master",
                spark_standalone.master_url,
                "--duration",
                str(DURATION_S),
                "--rate",
                str(RATE),
                "--speedup",
                "1",
                "--window",
                f"{WINDOW_S} seconds",
                "--checkpoint",
                str(tmp_path / "checkpoint"),
                "--catch-up-timeout",
                "400",
            ],
            env=spark_standalone.env,
            log_path=tmp_path / "job.log",
        ).start()
        try:
            query = job.wait_for_line(r"^query (\S+) started", timeout=JOB_TIMEOUT).group(1)
            job.wait_for_line(r"^generating views", timeout=JOB_TIMEOUT)
            job.wait_for_batches(2, records=True, timeout=JOB_TIMEOUT)
            # the first counts written: the transaction log and the sink log exist, with
            # every broker's replicas, before any broker is killed
            job.wait_for_line(r"[1-9]\d* counts out", timeout=JOB_TIMEOUT)
            # the query's transactional ids (one per shuffle partition: two) and who
            # coordinates them; the coordinator of the first is killed first
            coordinators = {f"{query}-{i}": coordinator_of(c.bootstrap, f"{query}-{i}", 1) for i in range(2)}
            first = coordinators[f"{query}-0"]
            order = [first] + rng.sample([b for b in c.ids if b != first], len(c.ids) - 1)
            print(
                f"transactional ids' coordinators {coordinators}; group view-counts's "
                f"{coordinator_of(c.bootstrap, 'view-counts', 0)}; kill order {order}"
            )
            assert set(coordinators.values()) <= set(order)
            stalls, killed_at = [], []
            for victim in order:
                lead_elsewhere(c, victim)
                t0 = time.monotonic()
                killed_at.append(time.time())
                c.kill(victim)
                # the query goes on: batches complete again, and write counts (their
                # transactions committed) once what the victim coordinated has moved,
                # after its session expired, and the ISRs have shrunk
                deadline = time.monotonic() + JOB_TIMEOUT
                while batches_after(job, t0) < 3 or not wrote_after(job, t0):
                    assert job.alive and not job.failed(), job.output()
                    assert time.monotonic() < deadline, (
                        f"no counts written after killing broker {victim}:\n{job.output()}"
                    )
                    time.sleep(0.5)
                stalls.append((victim, longest_gap(job, t0 - 2, time.monotonic()), wrote_after(job, t0) - t0))
                c.start(victim)  # waits for its old registration to expire
                in_sync(c)
                assert job.alive and not job.failed(), job.output()
            print(
                "after each kill -9: "
                + "; ".join(
                    f"broker {v}: longest time without a batch {gap:.1f} s, first counts written {wrote:.1f} s after"
                    for v, gap, wrote in stalls
                )
            )
            # views go on until the watermark has passed the windows of every kill, so
            # that their counts are final (written) and checked
            time.sleep(WATERMARK_S + WINDOW_S + 15)
            job.wait_for_batches(batches_after(job, 0) + 2, timeout=JOB_TIMEOUT)
            job.proc.send_signal(signal.SIGINT)  # ends the generation: catch up, check
            code = job.proc.wait(JOB_TIMEOUT)
        finally:
            job.close()
        out = job.output(200)
        assert code == 0 and not job.failed(), out
        summary = job.wait_for_line(
            r"^checked: (\d+) \(window, page\) rows, (\d+) written twice, (\d+) missing, "
            r"(\d+) wrong; ([\d,]+) of ([\d,]+) views",
            timeout=1,
        )
        assert summary.group(2, 3, 4) == ("0", "0", "0"), out
        assert int(summary.group(1)) > 0 and summary.group(5) == summary.group(6), out

        # again, independently of the example's own check: the views themselves and the
        # counts as a read_committed Kafka consumer (librdkafka) sees them
        views = [json.loads(v) for values in read_topic(c.bootstrap, "views").values() for v in values]
        truth = Counter((window_of(v["ms"]), v["page"]) for v in views)
        counts = [json.loads(v) for v in read_isolated(c.bootstrap, "view-counts", 1, "read_committed", deadline_s=60)]
        keys = Counter((w["window_start"], w["page"]) for w in counts)
        assert not [k for k, n in keys.items() if n > 1], "a (window, page) written twice"
        wrong = [
            (w, truth[(w["window_start"], w["page"])])
            for w in counts
            if w["views"] != truth[(w["window_start"], w["page"])]
        ]
        assert not wrong, wrong[:5]
        last = max(w["window_start"] for w in counts)
        closed = {k for k in truth if k[0] <= last}
        assert closed <= set(keys), f"closed windows missing: {sorted(closed - set(keys))[:5]}"
        # the windows of the kills are among those checked (event time = wall time -
        # --duration with --speedup 1: the example's event clock ends at "now")
        assert all(window_of(int((t - DURATION_S) * 1000)) <= last for t in killed_at), (killed_at, last)
        print(
            f"{len(counts)} (window, page) counts, each once and right, {sum(w['views'] for w in counts):,} of "
            f"{len(views):,} views (the rest in windows still open)"
        )
