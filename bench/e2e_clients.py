"""End-to-end throughput with real clients against a real broker on loopback.

    .venv/bin/python bench/e2e_clients.py [--messages 1000000] [--size 100] [--profile]

Starts `broker serve` on a free port (data in a temp dir), then measures:
- confluent-kafka produce (acks=1, linger.ms=5, batch.size=1 MiB, no compression,
  3 partitions), the same with enable.idempotence (acks=all, the broker checks every
  batch's producer sequence) and consume (fetch.wait.max.ms=100, 1 MiB per partition
  fetches);
- kcat produce from a file (-l) and consume to /dev/null;
while sampling the broker process' CPU time and peak RSS from /proc. With --profile,
py-spy records the broker during the confluent produce run and the top frames by own
time are printed. Client and broker share this machine's cores: say so next to the
numbers. Every phase is bounded in time.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.broker_proc import BrokerProcess  # noqa: E402
from tests.support.load import produce_n  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
PHASE_TIMEOUT = 300


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / CLK


def proc_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Sampler:
    """Peak RSS of the broker while a phase runs."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, proc_rss_mb(self.pid))
            time.sleep(0.05)

    def __enter__(self):
        self.cpu0 = proc_cpu(self.pid)
        self.t0 = time.perf_counter()
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.elapsed = time.perf_counter() - self.t0
        self.cpu = proc_cpu(self.pid) - self.cpu0


def report(name, n, size, s: Sampler):
    rate = n / s.elapsed
    print(
        f"| {name} | {n:,} | {s.elapsed:.2f} s | {rate:,.0f} | {rate * size / 1e6:.1f} | "
        f"{100 * s.cpu / s.elapsed:.0f}% | {s.peak:.0f} MB |",
        flush=True,
    )


def confluent_produce(bootstrap, topic, n, value, idempotent=False):
    import confluent_kafka as ck

    conf = {
        "bootstrap.servers": bootstrap,
        "acks": 1,
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2 << 20,
        "compression.type": "none",
    }
    if idempotent:
        # what the idempotent producer implies: acks=all, at most 5 requests in flight
        conf.update({"enable.idempotence": True, "acks": "all"})
    p = ck.Producer(conf)
    produce_n(p, topic, value, n)
    left = p.flush(PHASE_TIMEOUT)
    assert left == 0, f"{left} messages not delivered"


def confluent_consume(bootstrap, topic, n, partitions):
    import confluent_kafka as ck

    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "max.partition.fetch.bytes": 1 << 20,
            "fetch.max.bytes": 64 << 20,
            "queued.min.messages": 1_000_000,
        }
    )
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    deadline = time.monotonic() + PHASE_TIMEOUT
    while got < n and time.monotonic() < deadline:
        for m in c.consume(100_000, 1.0):
            if not m.error():
                got += 1
    c.close()
    assert got >= n, f"consumed {got} of {n}"


def top_frames(raw_path: str, limit: int = 15) -> list[tuple[float, str]]:
    """Aggregates py-spy's collapsed stacks by leaf frame (own time)."""
    own = collections.Counter()
    total = 0
    with open(raw_path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            if not count.isdigit():
                continue
            leaf = stack.split(";")[-1]
            own[leaf] += int(count)
            total += int(count)
    return [(100 * c / total, frame) for frame, c in own.most_common(limit)] if total else []


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="py-spy the broker during the confluent produce run")
    args = ap.parse_args()
    n, size = args.messages, args.size
    value = os.urandom(size // 2).hex().encode()[:size]
    tmp = tempfile.mkdtemp(prefix="kbroker-bench-")
    try:
        with BrokerProcess(os.path.join(tmp, "data"), config={"num.partitions": args.partitions}) as b:
            pid = b.proc.pid
            print(
                f"broker pid {pid}, {os.cpu_count()} cores shared by clients and broker; "
                f"{n:,} messages of {size} bytes, {args.partitions} partitions\n"
            )
            print("| run | messages | time | msg/s | MB/s | broker CPU | broker peak RSS |")
            print("|---|---|---|---|---|---|---|")
            spy = None
            if args.profile:
                raw = os.path.join(tmp, "produce.raw")
                spy = subprocess.Popen(
                    [
                        "py-spy",
                        "record",
                        "--pid",
                        str(pid),
                        "--format",
                        "raw",
                        "--output",
                        raw,
                        "--rate",
                        "200",
                        "--nonblocking",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1)
            with Sampler(pid) as s:
                confluent_produce(b.bootstrap, "confluent", n, value)
            report("confluent-kafka produce (acks=1)", n, size, s)
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
                spy.wait(30)
            with Sampler(pid) as s:
                confluent_produce(b.bootstrap, "confluent-idempotent", n, value, idempotent=True)
            report("confluent-kafka produce (enable.idempotence, acks=all)", n, size, s)
            with Sampler(pid) as s:
                confluent_consume(b.bootstrap, "confluent", n, args.partitions)
            report("confluent-kafka consume", n, size, s)
            if shutil.which("kcat"):
                path = os.path.join(tmp, "lines.txt")
                with open(path, "wb") as f:
                    line = value.replace(b"\n", b"x") + b"\n"
                    f.write(line * n)
                with Sampler(pid) as s:
                    subprocess.run(
                        [
                            "kcat",
                            "-P",
                            "-b",
                            b.bootstrap,
                            "-t",
                            "kcat",
                            "-l",
                            path,
                            "-X",
                            "acks=1",
                            "-X",
                            "linger.ms=5",
                            "-X",
                            "batch.size=1048576",
                        ],
                        check=True,
                        timeout=PHASE_TIMEOUT,
                    )
                report("kcat produce from a file (-l)", n, size, s)
                with Sampler(pid) as s:
                    subprocess.run(
                        [
                            "kcat",
                            "-C",
                            "-b",
                            b.bootstrap,
                            "-t",
                            "kcat",
                            "-o",
                            "beginning",
                            "-c",
                            str(n),
                            "-q",
                            "-f",
                            "%s\n",
                        ],
                        check=True,
                        timeout=PHASE_TIMEOUT,
                        stdout=subprocess.DEVNULL,
                    )
                report("kcat consume", n, size, s)
            if args.profile and os.path.exists(os.path.join(tmp, "produce.raw")):
                print("\nbroker during the confluent produce run, top frames by own time (py-spy):")
                for pct, frame in top_frames(os.path.join(tmp, "produce.raw")):
                    print(f"  {pct:5.1f}%  {frame}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
