"""The cost of the metrics (metrics.listener) and the status page's render time (issue 19).

    .venv/bin/python bench/observability.py overhead [--records 200000] [--runs 5] [--consume-passes N]
        [--data-dir /dev/shm] [--json F]
    .venv/bin/python bench/observability.py status [--partitions 1000] [--groups 100]
    .venv/bin/python bench/observability.py hooks
    .venv/bin/python bench/observability.py profile [--records 1000000]

overhead: `broker perf produce` then `broker perf consume` (--records records of 100 B,
one partition, acks=1) against a fresh `broker serve` pinned to CPU 0 (taskset; the perf
client on CPU 1), with metrics off and on, the two alternating (off-on, on-off, ...);
the broker's event loop is the default (uvloop when installed). Prints records/s and the
broker's CPU seconds (/proc) per run and the medians; after each metrics-on run one
scrape of /metrics, its time and the broker CPU it took (--scrape: also every 5 s during
the runs, as Prometheus would).

status: one broker with metrics.listener, --partitions partitions (topics of 100, RF 1)
and --groups groups each with committed offsets on 10 partitions (1,000 lag rows); then
the time of GET /, /status.json and /metrics over loopback (medians of 20, and the
sizes), one at a time, and meanwhile the round trips of a client's ApiVersions requests
(how long the event loop is held by the page or the scrape).

profile: py-spy samples of a broker with metrics on (pinned as above) during one produce
and one consume run: the share of the broker's busy samples in the metrics' code, and the
requests the run took (from /metrics).

hooks: what metrics on add to one request in the broker, timed in this process (timeit,
best of 5): the five histograms' observations, the error codes of a Produce and a Fetch
response, a topic's in-counters.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from broker.client import BrokerConnection, Cluster  # noqa: E402
from broker.protocol.messages.find_coordinator import FindCoordinatorRequest  # noqa: E402
from broker.protocol.messages.offset_commit import OffsetCommitRequest  # noqa: E402
from tests.support.broker_proc import BrokerProcess  # noqa: E402
from tests.support.ports import free_port  # noqa: E402


class PinnedBroker(BrokerProcess):
    def __init__(self, *args, cpu: int, **kw):
        super().__init__(*args, **kw)
        self.cpu = cpu

    def command(self) -> list[str]:
        return ["taskset", "-c", str(self.cpu), *super().command()]


def perf(kind: str, bootstrap: str, records: int) -> float:
    cmd = [
        "taskset",
        "-c",
        "1",
        sys.executable,
        "-m",
        "broker.cli.main",
        "perf",
        kind,
        "-b",
        bootstrap,
        "--topic",
        "bench",
        "--num-records",
        str(records),
        "--record-size",
        "100",
        "--json",
    ]
    if kind == "produce":
        cmd += ["--partitions", "1", "--acks", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode:
        raise SystemExit(f"perf {kind} failed: {r.stderr}")
    return float(json.loads(r.stdout.strip().splitlines()[-1])["records_per_sec"])


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_s(pid: int) -> float:
    """user + system CPU seconds of a process so far."""
    return sum(cpu_times(pid))


def scraper(port: int, stop: threading.Event, scrapes: list[float]) -> None:
    while not stop.wait(5.0):
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            r.read()
        scrapes.append(time.perf_counter() - t0)


def overhead(args: argparse.Namespace) -> None:
    kinds = ("produce", "consume", "produce_cpu", "consume_cpu", "produce_user", "consume_user")
    results: dict[str, dict[str, list[float]]] = {m: {k: [] for k in kinds} for m in ("off", "on")}
    scrapes: list[float] = []
    scrape_cost: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="kb-obs-", dir=args.data_dir) as tmp:
        for run in range(args.runs):
            for mode in ("off", "on") if run % 2 == 0 else ("on", "off"):
                mport = free_port()
                config = {"metrics.listener": f"127.0.0.1:{mport}"} if mode == "on" else {}
                data = os.path.join(tmp, f"{mode}-{run}")
                broker = PinnedBroker(data, config=config, cpu=0, event_loop="auto")
                broker.start()
                stop = threading.Event()
                thread = None
                if mode == "on" and args.scrape:
                    thread = threading.Thread(target=scraper, args=(mport, stop, scrapes), daemon=True)
                    thread.start()
                try:
                    assert broker.pid is not None
                    c0 = cpu_times(broker.pid)
                    p = perf("produce", broker.bootstrap, args.records)
                    c1 = cpu_times(broker.pid)
                    # a sendfile consume of the topic is short: read it --consume-passes times
                    t_c = time.perf_counter()
                    for _ in range(args.consume_passes):
                        perf("consume", broker.bootstrap, args.records)
                    c = args.consume_passes * args.records / (time.perf_counter() - t_c)
                    c2 = cpu_times(broker.pid)
                    if mode == "on":
                        # one scrape after the runs: its time and the broker's CPU for it
                        t0 = time.perf_counter()
                        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
                            r.read()
                        scrape_cost.append((time.perf_counter() - t0, cpu_s(broker.pid) - sum(c2)))
                finally:
                    stop.set()
                    if thread is not None:
                        thread.join()
                    broker.stop()
                    shutil.rmtree(data, ignore_errors=True)  # a tmpfs --data-dir holds one run at a time
                results[mode]["produce"].append(p)
                results[mode]["consume"].append(c)
                # the broker's CPU time per million records: steadier than throughput on a shared machine;
                # user time alone as well (the metrics' code runs in user space; system time is mostly
                # copies into the page cache and what writeback charges the writer, which varies)
                for kind, a, b, n in (
                    ("produce", c0, c1, args.records),
                    ("consume", c1, c2, args.records * args.consume_passes),
                ):
                    results[mode][f"{kind}_cpu"].append((sum(b) - sum(a)) * 1e6 / n)
                    results[mode][f"{kind}_user"].append((b[0] - a[0]) * 1e6 / n)
                print(
                    f"run {run} metrics {mode}: produce {p:,.0f} records/s (broker CPU {sum(c1) - sum(c0):.2f} s, "
                    f"user {c1[0] - c0[0]:.2f} s), consume {c:,.0f} records/s "
                    f"(broker CPU {sum(c2) - sum(c1):.2f} s, user {c2[0] - c1[0]:.2f} s)",
                    flush=True,
                )
    for kind in ("produce", "consume"):
        off, on = (statistics.median(results[m][kind]) for m in ("off", "on"))
        print(f"{kind}: median off {off:,.0f}, on {on:,.0f} records/s ({100 * (on - off) / off:+.1f}%)")
        for key, label in ((f"{kind}_cpu", "user+system"), (f"{kind}_user", "user")):
            off, on = (statistics.median(results[m][key]) for m in ("off", "on"))
            print(
                f"{kind}: broker {label} CPU s per million records, median off {off:.3f}, on {on:.3f} "
                f"({100 * (on - off) / off:+.1f}%)"
            )
        pairs = [b / a for a, b in zip(results["off"][f"{kind}_user"], results["on"][f"{kind}_user"]) if a]
        if pairs:
            print(
                f"{kind}: user CPU on/off per pair {', '.join(f'{x:.3f}' for x in pairs)} "
                f"(median {statistics.median(pairs):.3f})"
            )
    if scrapes:
        print(f"{len(scrapes)} scrapes during the runs, median {1000 * statistics.median(scrapes):.1f} ms")
    if scrape_cost:
        print(
            f"a scrape after the runs: median {1000 * statistics.median(c[0] for c in scrape_cost):.1f} ms, "
            f"broker CPU {1000 * statistics.median(c[1] for c in scrape_cost):.1f} ms"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"records": args.records, "runs": args.runs, "data_dir": args.data_dir, "results": results}, f, indent=1
            )


def timed_get(url: str, times: int = 20) -> tuple[float, int]:
    ms = []
    size = 0
    for _ in range(times):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as r:
            size = len(r.read())
        ms.append(1000 * (time.perf_counter() - t0))
    return statistics.median(ms), size


def ping(port: int, stop: threading.Event, rtts: list[float]) -> None:
    from broker.protocol.messages.api_versions import ApiVersionsRequest

    with BrokerConnection("127.0.0.1", port) as conn:
        while not stop.is_set():
            t0 = time.perf_counter()
            conn.request(ApiVersionsRequest(client_software_name="bench", client_software_version="1"))
            rtts.append(1000 * (time.perf_counter() - t0))
            time.sleep(0.002)


def status(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="kb-status-") as tmp:
        mport = free_port()
        broker = BrokerProcess(
            os.path.join(tmp, "data"),
            config={"metrics.listener": f"127.0.0.1:{mport}", "offsets.topic.num.partitions": 1},
        )
        broker.start()
        try:
            topics = [f"topic-{i:02d}" for i in range(args.partitions // 100)]
            with Cluster(broker.bootstrap) as c:
                for t in topics:
                    c.create_topic(t, 100, 1)
            t0 = time.monotonic()
            while True:
                with urllib.request.urlopen(f"http://127.0.0.1:{mport}/status.json", timeout=30) as r:
                    d = json.load(r)
                if sum(len(t["partitions"]) for t in d["topics"] if t["name"] in topics) == args.partitions:
                    break
                if time.monotonic() - t0 > 120:
                    raise SystemExit("the partitions did not all appear")
                time.sleep(0.5)
            R = OffsetCommitRequest
            with BrokerConnection("127.0.0.1", broker.port) as conn:
                # the first FindCoordinator creates __consumer_offsets
                conn.request(FindCoordinatorRequest(key="group-000", key_type=0, coordinator_keys=["group-000"]))
                for g in range(args.groups):
                    group_topics = [
                        R.OffsetCommitRequestTopic(
                            name=topics[g % len(topics)],
                            partitions=[
                                R.OffsetCommitRequestPartition(
                                    partition_index=p, committed_offset=0, committed_metadata=""
                                )
                                for p in range(10)
                            ],
                        )
                    ]
                    for _ in range(50):
                        resp = conn.request(
                            R(
                                group_id=f"group-{g:03d}",
                                generation_id_or_member_epoch=-1,
                                member_id="",
                                group_instance_id=None,
                                topics=group_topics,
                            )
                        )
                        if all(p.error_code == 0 for t in resp.topics for p in t.partitions):
                            break
                        time.sleep(0.2)
                    else:
                        raise SystemExit(f"commit of group-{g:03d} failed: {resp}")
            with urllib.request.urlopen(f"http://127.0.0.1:{mport}/status.json", timeout=30) as r:
                d = json.load(r)
            rows = sum(len(g["lag"]) for g in d["groups"])
            print(
                f"{sum(len(t['partitions']) for t in d['topics'])} partitions (with __consumer_offsets), "
                f"{len(d['groups'])} groups, {rows} lag rows"
            )
            for path in ("/", "/status.json", "/metrics"):
                # meanwhile a client's ApiVersions round trips: how long the loop is held
                stop = threading.Event()
                rtts: list[float] = []
                pinger = threading.Thread(target=ping, args=(broker.port, stop, rtts), daemon=True)
                pinger.start()
                ms, size = timed_get(f"http://127.0.0.1:{mport}{path}")
                stop.set()
                pinger.join()
                rtts.sort()
                print(
                    f"GET {path}: median {ms:.1f} ms, {size / 1024:.0f} KiB; ApiVersions round trips meanwhile: "
                    f"median {rtts[len(rtts) // 2]:.1f} ms, p99 {rtts[int(len(rtts) * 0.99)]:.1f} ms, "
                    f"max {rtts[-1]:.1f} ms ({len(rtts)})"
                )
        finally:
            broker.stop()


def hooks(args: argparse.Namespace) -> None:
    """The hot path's cost with metrics on, per request, in this process (no broker)."""
    import timeit

    from broker.metrics.stats import RequestStats, TopicStats
    from broker.protocol.messages.fetch import FetchResponse
    from broker.protocol.messages.produce import ProduceResponse

    P = ProduceResponse
    produce = P(
        throttle_time_ms=0,
        responses=[
            P.TopicProduceResponse(
                name="t",
                partition_responses=[
                    P.PartitionProduceResponse(
                        index=0,
                        error_code=0,
                        base_offset=5,
                        log_append_time_ms=-1,
                        log_start_offset=0,
                        record_errors=[],
                        error_message=None,
                    )
                ],
            )
        ],
    )
    F = FetchResponse
    fetch = F(
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            F.FetchableTopicResponse(
                topic="t",
                partitions=[F.PartitionData(partition_index=0, error_code=0, high_watermark=5, records=b"x" * 100)],
            )
        ],
    )
    stats, topics = RequestStats(), TopicStats()
    n = 200000
    for name, stmt in (
        ("RequestStats.observe (5 histograms)", lambda: stats.observe(0, 1e-5, 2e-4, 0.0, 3e-5)),
        ("count_errors(Produce response, 1 partition)", lambda: stats.count_errors(0, produce)),
        ("count_errors(Fetch response, 1 partition)", lambda: stats.count_errors(1, fetch)),
        ("TopicStats.appended", lambda: topics.appended("t", 10, 1000)),
    ):
        best = min(timeit.repeat(stmt, number=n, repeat=5)) / n
        print(f"{name}: {best * 1e6:.2f} us")


#: frames that are the metrics' own work on the hot path (the timing lines inlined in
#: Connection._run_pending and Server.dispatch are not separable: a few attribute reads)
METRICS_FRAMES = ("broker/metrics/", "_observe_sent", "_count_out (")


def profile(args: argparse.Namespace) -> None:
    """py-spy samples of the broker (metrics on) while perf produces and consumes: the
    share of its busy samples inside the metrics' code. Independent of how loaded the
    machine is, unlike a throughput comparison."""
    with tempfile.TemporaryDirectory(prefix="kb-prof-") as tmp:
        mport = free_port()
        broker = PinnedBroker(
            os.path.join(tmp, "data"), config={"metrics.listener": f"127.0.0.1:{mport}"}, cpu=0, event_loop="auto"
        )
        broker.start()
        raw = os.path.join(tmp, "samples.txt")
        spy = subprocess.Popen(
            [
                os.path.join(os.path.dirname(sys.executable), "py-spy"),
                "record",
                "--pid",
                str(broker.pid),
                "--rate",
                "250",
                "--format",
                "raw",
                "--output",
                raw,
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(1.0)
            p = perf("produce", broker.bootstrap, args.records)
            c = perf("consume", broker.bootstrap, args.records)
            with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
                text = r.read().decode()
        finally:
            spy.send_signal(2)
            spy.wait(60)
            broker.stop()
        total = metrics = 0
        for line in open(raw):
            stack, _, count = line.rstrip().rpartition(" ")
            if not count.isdigit():
                continue
            total += int(count)
            if any(f in stack for f in METRICS_FRAMES):
                metrics += int(count)
        requests = {
            m.group(1): float(m.group(2))
            for m in re.finditer(r'kafka_network_requests_total\{request="(\w+)"\} ([\d.e+]+)', text)
        }
        print(
            f"produce {p:,.0f} records/s, consume {c:,.0f} records/s; Produce requests {requests.get('Produce', 0):,.0f}, "
            f"Fetch requests {requests.get('Fetch', 0):,.0f}"
        )
        print(
            f"{total} busy samples of the broker, {metrics} in the metrics' code: {100 * metrics / max(total, 1):.2f}%"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    o = sub.add_parser("overhead")
    o.add_argument("--records", type=int, default=200000)
    o.add_argument("--runs", type=int, default=5)
    o.add_argument("--scrape", action="store_true", help="scrape /metrics every 5 s during the metrics-on runs")
    o.add_argument(
        "--consume-passes",
        type=int,
        default=1,
        help="read the topic this many times per run (the consume rate is then over all passes, "
        "each a separate `broker perf consume` process)",
    )
    o.add_argument(
        "--data-dir",
        default=None,
        help="where the brokers' data goes (default: the system's temp dir; /dev/shm keeps "
        "page-cache writeback out of the figures)",
    )
    o.add_argument("--json", default=None, help="write every run's figures to this file")
    s = sub.add_parser("status")
    s.add_argument("--partitions", type=int, default=1000)
    s.add_argument("--groups", type=int, default=100)
    sub.add_parser("hooks")
    f = sub.add_parser("profile")
    f.add_argument("--records", type=int, default=1000000)
    args = p.parse_args()
    {"overhead": overhead, "status": status, "hooks": hooks, "profile": profile}[args.what](args)


if __name__ == "__main__":
    main()
