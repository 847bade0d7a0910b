"""Fuzzing at scale: a million generated requests at one broker, a canary client beside.

    .venv/bin/python bench/fuzz/run.py [--requests 1000000] [--workers 2] [--connections 100]
                                       [--pipeline 16] [--seed 1] [--baseline-s 10] [--keep]
                                       [--client-apis-only] [--nofile N] [--out bench/results/fuzz.json]

(`make fuzz`; not part of the test suite or CI: it takes tens of minutes.)

Requests. Every request type of the protocol schemas at every version they define (the
versions the broker serves and the ones it does not), each built from its schema with
random field values (tests/unit/protocol/proto_strategies.random_instance), then its
body mutated the way a fuzzer does: bits flipped, integers overwritten with boundary
values, truncated, bytes inserted or appended, spliced with the body of another
version; one in eight goes out intact. The header is always valid (api key, version,
a fresh correlation id, client id): the fuzzing is aimed past the header decoder, at
the body decoders and the handlers behind them.

With --client-apis-only the inter-broker APIs are left out: without ACLs any client
may send them (as with Kafka without an authorizer), and what they do to the broker's
view of the cluster is a question of its own.

Load. WORKERS processes (at nice 10), each with CONNECTIONS concurrent connections; a connection
sends PIPELINE requests at once, then a valid ApiVersions request as a sentinel, and
reads answers until the sentinel's (everything before it was handled: answered, or
without an answer such as acks=0), until the broker closes the connection (the first
request not answered made it close), or for at most WAIT_S (a request may legitimately
wait: a long poll, a rebalance); then it opens a new connection. The run ends when the
broker has handled REQUESTS requests.

Canary. Meanwhile the main process produces one record at a time (acks=1, one every 2 ms
at most) to a topic of its own and times each round trip: first alone (the baseline),
then during the fuzzing.
Every record it was acknowledged is read back at the end.

Report (stdout and --out as JSON): requests sent and handled; connections closed by the
broker, by the reason the broker logged (unreadable header, unsupported version,
malformed request, bad frame size ...); handler failures (an exception that escaped a
handler: a bug), grouped by exception; broker crashes (goal 0); the canary's p50 / p99 /
max alone and during the run, its errors and whether all its records came back. The
broker runs with RLIMIT_DATA capped (BROKER_DATA_LIMIT) so that a request asking for
absurd amounts of memory fails inside the broker instead of exhausting the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing
import os
import random
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "unit", "protocol"))

from broker.client import BrokerConnection, ClientError, Cluster  # noqa: E402
from broker.native import BatchBuilder  # noqa: E402
from broker.perf.local import free_port  # noqa: E402
from broker.protocol import codec  # noqa: E402
from broker.protocol.api import API_SPECS, ApiKey  # noqa: E402
from broker.protocol.messages.api_versions import ApiVersionsRequest  # noqa: E402
from broker.protocol.messages.produce import ProduceRequest  # noqa: E402

SEEDS_PER_VERSION = 6
WAIT_S = 0.5
SENTINEL_CID = -7
BROKER_DATA_LIMIT = 4 << 30
CANARY_TOPIC = "fuzz-canary"
CANARY_INTERVAL_S = 0.002  # at most 500 round trips a second: a probe, not a load
WORKER_NICE = 10

#: what the broker logs when it closes a connection, by reason (broker/server/server.py
#: and connection.py)
CLOSE_REASONS = {
    "unreadable request header": re.compile(r"unreadable request header"),
    "unknown api key": re.compile(r"unknown api key"),
    "unsupported version": re.compile(r"unsupported version \d+ of api"),
    "malformed request": re.compile(r"malformed \S+ v\d+ request"),
    "bad frame size": re.compile(r"frame|Frame"),
    "handler failure (bug)": re.compile(r"request processing failed"),
}
INTERESTING = [
    b"\x00",
    b"\xff",
    b"\x7f",
    b"\x80",
    b"\x00\x00",
    b"\xff\xff",
    b"\x7f\xff",
    b"\x80\x00",
    b"\x00\x00\x00\x00",
    b"\xff\xff\xff\xff",
    b"\x7f\xff\xff\xff",
    b"\x80\x00\x00\x00",
    b"\x00\x00\x00\x01",
    b"\x00\x00\x10\x00",
    b"\xff" * 8,
    b"\x7f" + b"\xff" * 7,
    b"\x80" + b"\x00" * 7,
]


# ---------------------------------------------------------------------- requests


#: the APIs brokers send each other (the controller's orders, a follower's reports)
INTER_BROKER_APIS = frozenset(
    {
        ApiKey.LEADER_AND_ISR,
        ApiKey.STOP_REPLICA,
        ApiKey.UPDATE_METADATA,
        ApiKey.CONTROLLED_SHUTDOWN,
        ApiKey.ALTER_PARTITION,
    }
)


def corpus(rng: random.Random, client_apis_only: bool) -> list[tuple[int, int, bytes, bytes]]:
    """(api key, version, header bytes, body bytes) for every request type and version
    of the schemas (but the inter-broker ones with client_apis_only), SEEDS_PER_VERSION
    random instances each."""
    from proto_strategies import random_instance

    out = []
    for key, spec in sorted(API_SPECS.items()):
        if client_apis_only and key in INTER_BROKER_APIS:
            continue
        for version in range(spec.min_version, spec.max_version + 1):
            for _ in range(SEEDS_PER_VERSION):
                try:
                    frame = codec.encode_request(key, version, 0, "fuzz", random_instance(spec.request, version, rng))
                except Exception:  # a value the encoder refuses: draw again later
                    continue
                _, body_at = codec.decode_request_header(memoryview(frame)[4:])
                out.append((key, version, frame[4 : 4 + body_at], frame[4 + body_at :]))
    return out


def mutate(body: bytes, rng: random.Random, other: bytes) -> bytes:
    how = rng.randrange(8)
    if how == 0:  # intact
        return body
    b = bytearray(body)
    if how == 4 or not b:  # trailing bytes (all an empty body can get)
        return body + rng.randbytes(rng.randint(1, 16))
    if how == 1:  # bit flips
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif how == 2:  # boundary values over an integer
        v = rng.choice(INTERESTING)
        i = rng.randrange(len(b))
        b[i : i + len(v)] = v
    elif how == 3:  # truncation
        del b[rng.randrange(len(b)) :]
    elif how == 5:  # inserted bytes
        i = rng.randrange(len(b) + 1)
        b[i:i] = rng.randbytes(rng.randint(1, 16))
    elif how == 6:  # random span
        i = rng.randrange(len(b))
        n = rng.randint(1, 16)
        b[i : i + n] = rng.randbytes(n)
    else:  # splice with another version's body
        i = rng.randrange(len(b) + 1)
        b = b[:i] + other[rng.randrange(len(other) + 1) :] if other else b[:i]
    return bytes(b)


class Generator:
    def __init__(self, seed: int, client_apis_only: bool):
        self.rng = random.Random(seed)
        self.seeds = corpus(self.rng, client_apis_only)
        self.by_key = collections.defaultdict(list)
        for s in self.seeds:
            self.by_key[s[0]].append(s)
        self.cid = 0

    def next_frame(self) -> bytes:
        key, version, header, body = self.rng.choice(self.seeds)
        other = self.rng.choice(self.by_key[key])[3]
        self.cid = (self.cid + 1) % (1 << 30)
        header = header[:4] + struct.pack(">i", self.cid) + header[8:]
        payload = header + mutate(body, self.rng, other)
        return struct.pack(">i", len(payload)) + payload


SENTINEL = codec.encode_request(
    18, 3, SENTINEL_CID, "fuzz", ApiVersionsRequest(client_software_name="fuzz", client_software_version="1")
)


# ---------------------------------------------------------------------- worker processes


async def _connection(port: int, gen: Generator, pipeline: int, stats: collections.Counter, budget) -> None:
    while budget[0] > 0:
        frames = [gen.next_frame() for _ in range(pipeline)]
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            stats["connect failures"] += 1
            await asyncio.sleep(0.1)
            continue
        stats["connections"] += 1
        stats["sent"] += pipeline
        writer.write(b"".join(frames) + SENTINEL)
        answered = 0
        outcome = "closed by the broker"
        try:
            deadline = asyncio.get_running_loop().time() + WAIT_S
            while True:
                remaining = deadline - asyncio.get_running_loop().time()
                size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), remaining))[0]
                frame = await asyncio.wait_for(reader.readexactly(size), remaining)
                if struct.unpack_from(">i", frame)[0] == SENTINEL_CID:
                    outcome = "all handled"
                    break
                answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.TimeoutError:
            outcome = "still waiting after WAIT_S"
        finally:
            writer.close()
        stats[outcome] += 1
        stats["answered"] += answered
        handled = pipeline if outcome == "all handled" else answered + (outcome == "closed by the broker")
        stats["handled"] += handled
        budget[0] -= handled


async def _worker(
    port: int, seed: int, client_apis_only: bool, connections: int, pipeline: int, requests: int
) -> collections.Counter:
    gen = Generator(seed, client_apis_only)
    stats: collections.Counter = collections.Counter()
    budget = [requests]
    await asyncio.gather(*(_connection(port, gen, pipeline, stats, budget) for _ in range(connections)))
    return stats


def worker_main(
    port: int, seed: int, client_apis_only: bool, connections: int, pipeline: int, requests: int, out
) -> None:
    # the attackers yield the CPU to the broker and the canary: on a real network they
    # would not share the broker's cores, and here the canary should see the broker's
    # effects more than the scheduler's
    os.nice(WORKER_NICE)
    out.put(dict(asyncio.run(_worker(port, seed, client_apis_only, connections, pipeline, requests))))


# ---------------------------------------------------------------------- the canary


class Canary(threading.Thread):
    """Produces one record at a time (acks=1) and times each round trip; `phase` says
    which list the next ones go to."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port = port
        self.phase = "alone"
        self.latencies: dict[str, list[float]] = {"alone": [], "during": []}
        self.errors: list[str] = []
        self.acked = 0
        self.slow: list[tuple[float, str]] = []  # (ms, wall clock) of round trips over 100 ms
        self.stopped = threading.Event()

    def run(self) -> None:
        P = ProduceRequest
        conn = None
        i = 0
        while not self.stopped.is_set():
            try:
                if conn is None:
                    conn = BrokerConnection("127.0.0.1", self.port, client_id="canary", timeout=30)
                b = BatchBuilder("none")
                b.append(int(time.time() * 1000), None, b"canary-%d" % i, [])
                req = P(
                    transactional_id=None,
                    acks=1,
                    timeout_ms=30_000,
                    topic_data=[
                        P.TopicProduceData(
                            name=CANARY_TOPIC,
                            partition_data=[P.PartitionProduceData(index=0, records=bytes(b.build()))],
                        )
                    ],
                )
                t0 = time.perf_counter()
                resp = conn.request(req, version=9)
                took = time.perf_counter() - t0
                self.latencies[self.phase].append(took)
                time.sleep(max(CANARY_INTERVAL_S - took, 0))
                if took > 0.1:
                    self.slow.append((round(took * 1e3, 1), time.strftime("%H:%M:%S")))
                code = resp.responses[0].partition_responses[0].error_code
                if code:
                    self.errors.append(f"produce error {code}")
                else:
                    self.acked += 1
                i += 1
            except (ClientError, OSError) as exc:
                self.errors.append(str(exc))
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.1)
        if conn is not None:
            conn.close()


def percentiles(samples: list[float]) -> dict:
    if not samples:
        return {"n": 0}
    s = sorted(samples)

    def at(q):
        return round(s[min(len(s) - 1, int(len(s) * q))] * 1e3, 2)

    return {"n": len(s), "p50_ms": at(0.50), "p99_ms": at(0.99), "max_ms": round(s[-1] * 1e3, 2)}


def read_back(port: int) -> int:
    """The canary records the broker returns, read over one direct connection (fuzzed
    inter-broker requests may have changed what Metadata advertises)."""
    from broker.native import iter_batches
    from broker.protocol.messages.fetch import FetchRequest as F

    n, offset = 0, 0
    with BrokerConnection("127.0.0.1", port, client_id="canary-read", timeout=30) as conn:
        while True:
            req = F(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                forgotten_topics_data=[],
                topics=[
                    F.FetchTopic(
                        topic=CANARY_TOPIC,
                        partitions=[F.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)],
                    )
                ],
            )
            part = conn.request(req, version=12).responses[0].partitions[0]
            batches = list(iter_batches(part.records or b"", validate=True))
            if part.error_code or not batches:
                return n
            for b in batches:
                n += sum(1 for r in b.records() if r.value.startswith(b"canary-"))
                offset = b.base_offset + b.last_offset_delta + 1


# ---------------------------------------------------------------------- the broker


def start_broker(data_dir: str, port: int, log_path: str, nofile: int) -> subprocess.Popen:
    def limit():
        resource.setrlimit(resource.RLIMIT_DATA, (BROKER_DATA_LIMIT, BROKER_DATA_LIMIT))
        if nofile:
            try:  # beyond the hard limit only with CAP_SYS_RESOURCE (root)
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            except (ValueError, OSError):
                pass

    cmd = [
        sys.executable,
        "-m",
        "broker.cli.main",
        "serve",
        "--data-dir",
        data_dir,
        "--listen",
        f"127.0.0.1:{port}",
        "--log-level",
        "info",
    ]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=limit, cwd=ROOT
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}; see {log_path}")
        try:
            with BrokerConnection("127.0.0.1", port, timeout=2):
                return proc
        except (ClientError, OSError):
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"broker not ready; see {log_path}")


def process_usage(pid: int) -> tuple[float, float]:
    """(CPU seconds, peak RSS in MB) of a live process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/status") as f:
        hwm = next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)
    return round(cpu, 1), round(hwm / 1024, 1)


LOG_RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (\w+) ")


def broker_log_summary(log_path: str) -> tuple[dict, dict, dict]:
    """(connections closed by reason, handler failures by exception, other tracebacks by
    exception) from the broker's log: a record is a timestamped line and the lines after
    it up to the next one; a traceback's last unindented line names the exception."""
    closes: collections.Counter = collections.Counter()
    failures: collections.Counter = collections.Counter()
    others: collections.Counter = collections.Counter()
    record: list[str] = []

    def close_record():
        if not record:
            return
        head = record[0]
        if "closing" in head and (" WARNING " in head or " ERROR " in head):
            for reason, pattern in CLOSE_REASONS.items():
                if pattern.search(head):
                    closes[reason] += 1
                    break
            else:
                closes["other: " + head.split(": ", 2)[-1].strip()[:80]] += 1
        if any(line.startswith("Traceback") for line in record):
            exc = next((line.strip() for line in reversed(record) if line.strip() and not line[0].isspace()), "?")[:160]
            (failures if "request processing failed" in head else others)[exc] += 1
        record.clear()

    with open(log_path, errors="replace") as f:
        for line in f:
            if LOG_RECORD.match(line):
                close_record()
            record.append(line)
        close_record()
    return dict(closes.most_common()), dict(failures.most_common()), dict(others.most_common())


# ---------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1_000_000, help="requests the broker must handle")
    ap.add_argument("--workers", type=int, default=2, help="fuzzing processes")
    ap.add_argument("--connections", type=int, default=100, help="concurrent connections per process")
    ap.add_argument("--pipeline", type=int, default=16, help="requests sent at once on a connection")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--baseline-s", type=float, default=10.0, help="seconds the canary runs alone first")
    ap.add_argument("--keep", action="store_true", help="keep the broker's data dir and log")
    ap.add_argument(
        "--nofile",
        type=int,
        default=0,
        help="the broker's file descriptor limit (0: inherited); fuzzed CreateTopics / "
        "CreatePartitions grow topics to tens of thousands of partitions, and at the fd "
        "limit the broker stops accepting connections",
    )
    ap.add_argument(
        "--client-apis-only",
        action="store_true",
        help="leave out the inter-broker APIs (LeaderAndIsr, StopReplica, UpdateMetadata, "
        "ControlledShutdown, AlterPartition)",
    )
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "fuzz.json"))
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="kbroker-fuzz-")
    port = free_port()
    log_path = os.path.join(tmp, "broker.log")
    proc = start_broker(os.path.join(tmp, "data"), port, log_path, args.nofile)
    try:
        with Cluster(f"127.0.0.1:{port}") as c:
            c.create_topic(CANARY_TOPIC, 1, 1)
        canary = Canary(port)
        canary.start()
        time.sleep(args.baseline_s)
        canary.phase = "during"
        print(
            f"fuzzing 127.0.0.1:{port} with {args.requests} requests ({args.workers} processes x "
            f"{args.connections} connections, pipelines of {args.pipeline}); broker log {log_path}",
            flush=True,
        )
        t0 = time.monotonic()
        results: multiprocessing.Queue = multiprocessing.Queue()
        share = -(-args.requests // args.workers)
        workers = [
            multiprocessing.Process(
                target=worker_main,
                args=(
                    port,
                    args.seed * 1000 + i,
                    args.client_apis_only,
                    args.connections,
                    args.pipeline,
                    share,
                    results,
                ),
            )
            for i in range(args.workers)
        ]
        for w in workers:
            w.start()
        stats: collections.Counter = collections.Counter()
        for _ in workers:
            stats.update(results.get())
        for w in workers:
            w.join()
        elapsed = time.monotonic() - t0
        canary.stopped.set()
        canary.join(60)
        crashed = proc.poll() is not None
        read = None if crashed else read_back(port)
        cpu_s, peak_rss_mb = (None, None) if crashed else process_usage(proc.pid)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    closes, failures, other_tracebacks = broker_log_summary(log_path)
    data = os.path.join(tmp, "data")
    partitions_on_disk = sum(1 for name in os.listdir(data) if os.path.isdir(os.path.join(data, name)))
    report = {
        "command": "bench/fuzz/run.py " + " ".join(sys.argv[1:]),
        "requests_handled": stats["handled"],
        "requests_sent": stats["sent"],
        "answers": stats["answered"],
        "seconds": round(elapsed, 1),
        "connections": stats["connections"],
        "connection_outcomes": {
            k: stats[k]
            for k in ("all handled", "closed by the broker", "still waiting after WAIT_S", "connect failures")
        },
        "closed_by_reason": closes,
        "handler_failures": failures,
        "other_tracebacks": other_tracebacks,
        "broker_crashed": crashed,
        "broker_exit_code": proc.returncode,
        "canary": {
            "alone": percentiles(canary.latencies["alone"]),
            "during": percentiles(canary.latencies["during"]),
            "errors": len(canary.errors),
            "first_errors": canary.errors[:5],
            "acked": canary.acked,
            "read_back": read,
            "over_100_ms": len(canary.slow),
            "slowest": sorted(canary.slow, reverse=True)[:5],
        },
        "broker_cpu_s": cpu_s,
        "broker_peak_rss_mb": peak_rss_mb,
        "partitions_on_disk": partitions_on_disk,
    }
    text = json.dumps(report, indent=2)
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    if args.keep or crashed:
        print(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if crashed or failures else 0


if __name__ == "__main__":
    sys.exit(main())
