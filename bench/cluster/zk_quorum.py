"""Time for the cluster to recover from ZooKeeper quorum loss (issue 20, "Measure").

Three brokers on a three-server ZooKeeper ensemble (tests/support/cluster.py with
ensemble=3, all on 127.0.0.1), an idempotent and a plain acks=all producer running
throughout (tests/faults/workload.py, 100 records/s each). Each trial SIGSTOPs two of the
three ZooKeeper servers (a different pair each time) for --outage-s seconds, then SIGCONTs
them and measures, from the SIGCONT:

  quorum      the ensemble serves again (every server says leader or follower)
  admin       a new topic (1 partition, RF 3) created through the cluster has a leader:
              the first write that needs ZooKeeper to succeed (tried in a loop; during the
              outage it fails with REQUEST_TIMED_OUT, a retriable error)
  whole       every broker lists the three brokers and a live controller, and every
              partition of the load's topic has its full ISR again

and, during the outage, how many records the producers got acknowledged (the leaders keep
serving while their sessions live), and how many broker sessions expired: when the stopped
pair holds the ensemble's leader, that leader wakes up with its clock 10 s on, sees no
ping from the brokers (they were on the third server, which dropped them) and, with the
follower stopped beside it, has the quorum to expire their sessions before it notices
anything; the brokers then register again on new sessions, as Kafka's do. At the end the checker of the fault suite checks the
whole run (0 lost, 0 duplicated by the idempotent producer).

    .venv/bin/python bench/cluster/zk_quorum.py                   # 5 trials, 10 s outages
    .venv/bin/python bench/cluster/zk_quorum.py --trials 7 --outage-s 30 --session-ms 18000

Every wait is bounded; the processes die with the script; the directory is removed
unless --keep.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from broker.client import ClientError, Cluster as Client  # noqa: E402
from broker.protocol.errors import ErrorCode, KafkaProtocolError  # noqa: E402
from tests.faults.workload import FAULT_CONFIG, Workload  # noqa: E402
from tests.support.cluster import Cluster  # noqa: E402

TOPIC = "quorum"
PARTITIONS = 3
TIMEOUT_S = 120.0
EXPIRED = "ZooKeeper session expired: its ephemeral nodes are gone"  # broker.cluster.store.zksession


def first_admin_success(bootstrap: str, name: str, deadline: float) -> float:
    """Creates topic `name` until it succeeds (and has a leader); the time it did."""
    while True:
        try:
            with Client(bootstrap, timeout=5.0) as c:
                c.create_topic(name, 1, 3)
                c.topic(name, wait_s=5.0)
            return time.monotonic()
        except KafkaProtocolError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:  # an earlier try wrote it, then timed out
                return time.monotonic()
            # INVALID_REPLICATION_FACTOR: a broker whose session expired is not registered again yet
            if exc.code not in (
                ErrorCode.REQUEST_TIMED_OUT,
                ErrorCode.NOT_CONTROLLER,
                ErrorCode.INVALID_REPLICATION_FACTOR,
                ErrorCode.LEADER_NOT_AVAILABLE,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ):
                raise
        except (ClientError, OSError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name} not created within {TIMEOUT_S} s")
        time.sleep(0.05)


def expired(c: Cluster) -> int:
    """Broker sessions expired so far (each broker logs it, then registers again)."""
    return sum(c.broker(i).log_path.read_text(errors="replace").count(EXPIRED) for i in c.ids)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--outage-s", type=float, default=10.0, help="how long two of three servers stay stopped")
    p.add_argument(
        "--session-ms",
        type=int,
        default=int(FAULT_CONFIG["zookeeper.session.timeout.ms"]),
        help="zookeeper.session.timeout.ms of the brokers (default: the fault suite's 6000)",
    )
    p.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    args = p.parse_args(argv)
    root = tempfile.mkdtemp(prefix="kbroker-zk-quorum-")
    print(
        f"cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f}; {args.trials} trials, {args.outage_s:g} s "
        f"outages, zookeeper.session.timeout.ms={args.session_ms}; dir {root}",
        flush=True,
    )
    c = Cluster(root, n=3, config={**FAULT_CONFIG, "zookeeper.session.timeout.ms": args.session_ms}, ensemble=3)
    figures: dict[str, list[float]] = {"quorum": [], "admin": [], "whole": [], "acked_during": []}
    ok = False
    try:
        c.start()
        ens = c.zookeeper
        with Client(c.bootstrap) as client:
            client.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        for part in range(PARTITIONS):
            c.wait_for_isr(TOPIC, part, {1, 2, 3}, timeout=TIMEOUT_S)
        w = Workload(c.bootstrap, TOPIC, PARTITIONS, consume=False).start()
        pairs = itertools.cycle(itertools.combinations(ens.servers, 2))
        try:
            w.wait_for_acks(200)
            for trial in range(args.trials):
                stopped = next(pairs)
                leader_stopped = ens.leader() in stopped
                expired_before = expired(c)
                for s in stopped:
                    s.pause()
                before = w.acked()
                time.sleep(args.outage_s)
                during = w.acked() - before
                for s in stopped:
                    s.resume()
                t0 = time.monotonic()
                deadline = t0 + TIMEOUT_S
                ens.wait_for_quorum(timeout=TIMEOUT_S)
                quorum = time.monotonic() - t0
                admin = first_admin_success(c.bootstrap, f"after-{trial}", deadline) - t0
                c.wait_for_brokers([1, 2, 3], timeout=TIMEOUT_S)
                for part in range(PARTITIONS):
                    c.wait_for_isr(TOPIC, part, {1, 2, 3}, timeout=TIMEOUT_S, everywhere=True)
                whole = time.monotonic() - t0
                exited = [i for i in c.ids if c.state(i) != "running"]
                if exited:
                    raise RuntimeError(f"brokers {exited} exited")
                for k, v in (("quorum", quorum), ("admin", admin), ("whole", whole), ("acked_during", during)):
                    figures[k].append(v)
                lost_sessions = expired(c) - expired_before
                print(
                    f"trial {trial + 1}: servers {[s.myid for s in stopped]} stopped {args.outage_s:g} s "
                    f"({'with' if leader_stopped else 'not'} the leader); {lost_sessions} broker sessions expired; "
                    f"after SIGCONT: quorum {quorum:.2f} s, first topic created {admin:.2f} s, cluster whole "
                    f"{whole:.2f} s; {during} records acknowledged during the outage; "
                    f"load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
                w.wait_for_acks(100)
        finally:
            w.stop()
        result = w.check()
        print(f"checker: {result.summary()}")
        med = {k: statistics.median(v) for k, v in figures.items()}
        print(
            f"medians of {args.trials}: quorum {med['quorum']:.2f} s, first topic created {med['admin']:.2f} s, "
            f"cluster whole {med['whole']:.2f} s, {med['acked_during']:.0f} records acknowledged per outage"
        )
        ok = result.ok
        return 0 if ok else 1
    finally:
        c.close()
        if args.keep or not ok:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
