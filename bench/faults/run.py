"""The long randomized fault run: many schedules of random faults under load, each history
checked (Jepsen's Kafka queue workload is the model; the bounded set is tests/faults/).

    .venv/bin/python bench/faults/run.py [--schedules 100] [--seed S] [--duration 30]
                                         [--min-gap 1] [--max-gap 4] [--min-hold 2] [--max-hold 8]
                                         [--overlap 0.3] [--disk-mib 256] [--recycle 25] [--out bench/results/faults.json]
    .venv/bin/python bench/faults/run.py --schedule-seed 7003     # one schedule again (or several)

(`make faults`, FAULTS_ARGS="..."; root (iptables), ZooKeeper and java; not in CI: tens of
minutes.)

One 3-broker cluster, each broker and ZooKeeper on its own loopback address
(tests/support/cluster.py distinct_hosts, tests/faults/conftest.py's settings), serves
RECYCLE schedules, then a fresh one. A schedule: its own topic (2 partitions, 3 replicas,
min.insync.replicas 2), an idempotent and a plain acks=all confluent-kafka producer and a
committing consumer running throughout (tests/faults/workload.py); for DURATION seconds a
random fault every few seconds (tests/faults/nemesis.py: the leader isolated from
brokers and ZooKeeper, the leader or the controller cut from ZooKeeper, a follower
isolated, a random split of brokers and ZooKeeper, kill -9 or SIGSTOP of a leader, the
leader's or a follower's disk full (each broker's directory is a tmpfs of DISK_MIB); with
chance OVERLAP a second one on top), held for a random while, then healed; at the end everything healed, the cluster back to full
ISRs, the producers flushed, a fresh consumer reads everything and the checker
(tests/faults/checker.py) judges the history and the replicas' logs (byte-identical).

Each schedule's seed is printed (`--schedule-seed` reruns the same choices; timings vary).
A schedule whose cluster does not recover (a liveness failure, not a safety anomaly) is
reported as `stuck` and the cluster is replaced. Exit status 1 when any anomaly was found.
Summary: schedules, operations (sends + polls), acknowledged records, anomalies by kind,
allowed duplicates (plain producer), stuck schedules, and the seeds of failed schedules.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, ROOT)

from broker.client import Cluster as Client  # noqa: E402
from tests.faults.nemesis import Nemesis  # noqa: E402
from tests.faults.workload import FAULT_CONFIG, Workload, replica_logs  # noqa: E402
from tests.support import netfault  # noqa: E402
from tests.support.cluster import Cluster  # noqa: E402
from tests.support.netfault import NetFaults  # noqa: E402
from tests.support.small_fs import small_tmpfs  # noqa: E402
from tests.support.zookeeper import available as zookeeper_available  # noqa: E402

PARTITIONS = 2


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schedules", type=int, default=100)
    ap.add_argument("--seed", type=int, default=None, help="base seed (default: random, printed)")
    ap.add_argument(
        "--schedule-seed",
        type=int,
        nargs="+",
        default=None,
        help="run the schedules of these seeds (in this order, on one cluster)",
    )
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of faults per schedule")
    ap.add_argument("--min-gap", type=float, default=1.0)
    ap.add_argument("--max-gap", type=float, default=4.0)
    ap.add_argument("--min-hold", type=float, default=2.0)
    ap.add_argument("--max-hold", type=float, default=8.0)
    ap.add_argument("--overlap", type=float, default=0.3, help="chance of a second fault before healing")
    ap.add_argument("--rate", type=float, default=100.0, help="records/s of each producer")
    ap.add_argument(
        "--disk-mib",
        type=int,
        default=256,
        help="each broker's directory a tmpfs of this size, for disk-full faults (0: none)",
    )
    ap.add_argument("--recycle", type=int, default=25, help="schedules per cluster")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one, removed)")
    ap.add_argument("--out", default=None, help="JSON report")
    return ap.parse_args(argv)


def new_cluster(base: Path, n: int, disk_mib: int, mounts: contextlib.ExitStack) -> tuple[Cluster, dict]:
    """A started cluster; with disk_mib, each broker's directory a tmpfs of that size
    (unmounted when `mounts` closes): {broker: SmallFs}."""
    disks = {}
    if disk_mib:
        for i in (1, 2, 3):
            disks[i] = mounts.enter_context(small_tmpfs(base / f"cluster{n}" / f"broker-{i}", mib=disk_mib))
    c = Cluster(base / f"cluster{n}", n=3, config=FAULT_CONFIG, distinct_hosts=True)
    try:
        c.start()
    except BaseException:
        c.close()
        raise
    return c, disks


def run_schedule(c: Cluster, net: NetFaults, seed: int, args, disks: dict) -> dict:
    rng = random.Random(seed)
    topic = f"f{seed}"
    lines: list[str] = []
    log = lines.append
    nem = Nemesis(c, net, rng, log=log, disks=disks)
    with Client(c.bootstrap) as client:
        client.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
    nem.wait_healthy({topic: PARTITIONS}, timeout=c.timeout)
    w = Workload(c.bootstrap, topic, PARTITIONS, rate=args.rate).start()
    faults = []
    t0 = time.monotonic()
    try:
        w.wait_for_acks(100)
        end = time.monotonic() + args.duration
        while time.monotonic() < end:
            time.sleep(rng.uniform(args.min_gap, args.max_gap))
            faults.append(nem.random_fault([topic], PARTITIONS))
            if rng.random() < args.overlap:  # a second fault on top of the first
                time.sleep(rng.uniform(0, args.min_hold))
                faults.append("+ " + nem.random_fault([topic], PARTITIONS))
            time.sleep(rng.uniform(args.min_hold, args.max_hold))
            nem.heal()
        nem.heal()
        recovered = nem.wait_healthy({topic: PARTITIONS}, timeout=c.timeout)
        w.wait_for_acks(100, timeout=c.timeout)
    finally:
        try:
            nem.heal()
        finally:
            w.stop()
    result = w.check(replica_logs(c, topic, PARTITIONS))
    return {
        "seed": seed,
        "topic": topic,
        "faults": faults,
        "seconds": round(time.monotonic() - t0, 1),
        "recovered_s": round(recovered, 1),
        "counts": result.counts,
        "ok": result.ok,
        "anomalies": {k: v for k, v in result.anomalies.items() if v},
        "allowed_duplicates": result.allowed_duplicates,
        "failed_present": result.failed_present,
        "epoch_bump_duplicates": result.epoch_bump_duplicates,
        "summary": result.summary(),
        "log": lines,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    # SIGTERM (a timeout, kill) ends the run through its finally: rules removed, brokers stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for what in (netfault.available(), zookeeper_available()):
        if what is not None:
            print(f"cannot run: {what} is missing", file=sys.stderr)
            return 2
    base_seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    seeds = (
        list(args.schedule_seed)
        if args.schedule_seed is not None
        else [base_seed * 1000 + i for i in range(args.schedules)]
    )
    print(
        f"faults: {len(seeds)} schedules, base seed {base_seed}, {args.duration:g} s of faults each "
        f"(gaps {args.min_gap:g}-{args.max_gap:g} s, holds {args.min_hold:g}-{args.max_hold:g} s)",
        flush=True,
    )
    tmp = None if args.dir else tempfile.TemporaryDirectory(prefix="kbroker-faults-")
    base = Path(args.dir or tmp.name)
    results: list[dict] = []
    kinds: collections.Counter[str] = collections.Counter()
    stuck: list[int] = []
    t_start = time.monotonic()
    net = NetFaults("bench-faults")
    cluster = None
    disks: dict = {}
    mounts = contextlib.ExitStack()
    n_clusters = 0
    try:
        for i, seed in enumerate(seeds):
            if cluster is None or (i and i % args.recycle == 0):
                if cluster is not None:
                    cluster.close()
                mounts.close()
                cluster, disks = new_cluster(base, n_clusters, args.disk_mib, mounts)
                n_clusters += 1
            try:
                r = run_schedule(cluster, net, seed, args, disks)
            except Exception as exc:
                # no recovery within the bounds (or a client that gave up): liveness
                stuck.append(seed)
                print(f"[{i + 1}/{len(seeds)}] seed {seed}: STUCK: {type(exc).__name__}: {exc}", flush=True)
                traceback.print_exc()
                print(cluster.log_tails(15), flush=True)
                net.heal()
                cluster.close()
                mounts.close()
                cluster = None
                continue
            results.append(r)
            kinds.update({k: len(v) for k, v in r["anomalies"].items()})
            status = "ok" if r["ok"] else "ANOMALIES"
            print(
                f"[{i + 1}/{len(seeds)}] seed {seed} {status} ({r['seconds']:.0f} s, recovered in "
                f"{r['recovered_s']:.1f} s): {r['summary']}",
                flush=True,
            )
            print("    faults: " + "; ".join(r["faults"]), flush=True)
            if not r["ok"]:
                print("    " + "\n    ".join(r["log"]), flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    finally:
        net.heal()
        if cluster is not None:
            cluster.close()
        mounts.close()
        if tmp is not None:
            tmp.cleanup()

    ops = sum(r["counts"]["sends"] + r["counts"]["polls"] for r in results)
    failed = [r["seed"] for r in results if not r["ok"]]
    summary = {
        "command": " ".join([os.path.relpath(sys.argv[0], ROOT) if sys.argv else "run.py", *sys.argv[1:]]),
        "base_seed": base_seed,
        "schedules": len(results),
        "stuck": stuck,
        "operations": ops,
        "sends": sum(r["counts"]["sends"] for r in results),
        "acked": sum(r["counts"]["acked"] for r in results),
        "polls": sum(r["counts"]["polls"] for r in results),
        "faults": sum(len(r["faults"]) for r in results),
        "anomalies": sum(kinds.values()),
        "anomalies_by_kind": dict(kinds),
        "allowed_duplicates": sum(r["allowed_duplicates"] for r in results),
        "epoch_bump_duplicates": sum(r.get("epoch_bump_duplicates", 0) for r in results),
        "failed_seeds": failed,
        "minutes": round((time.monotonic() - t_start) / 60, 1),
    }
    print("\nsummary: " + json.dumps(summary, indent=1), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"summary": summary, "schedules": results}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
