#!/usr/bin/env python3
"""Where a kbroker's CPU goes when it produces or consumes (issue 22): the broker pinned to
core 0, kgen (bench/native/kgen, librdkafka) on core 1, as `bench/kafka_vs_kbroker.py
--pinned` runs them.

One broker is started, with the settings of the pinned comparison. The phase then runs
three times, each a kgen run of --seconds (or more) on core 1, in the page-cache regime
of that comparison (what it writes is deleted before it reaches the disk):

- produce (acks=1, linger.ms 5, batch.size 128 KiB): a warm-up run, then each run into a
  fresh topic, deleted after it (as the comparison does between cases);
- consume: a topic filled once for --fill-seconds and synced to disk, read back once to
  warm up; each run reads it from the start, again and again for --seconds.

1. measured: the broker's user and system CPU seconds per GB, the share of its core;
2. profiled: `perf record -g` on the broker's threads (kernel and user stacks), reported
   by DSO (the kernel, libpython, the native core's modules, libc) and by symbol;
3. counted: `strace -c -f` on the broker: its system calls per GB (strace slows the
   broker down, so this pass gives counts, not times).

Usage:
    make bench-tools
    .venv/bin/python bench/broker_profile.py --phase consume|produce [--size 1024]
        [--partitions 10] [--seconds 10] [--top 25] [--dir DIR] [--json FILE]

Needs perf (Debian: linux-perf) and strace, and root or kernel.perf_event_paranoid <= 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import kafka_vs_kbroker as kvk  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase", choices=("produce", "consume"), required=True)
    ap.add_argument("--size", type=int, default=1024, help="record size in bytes (default 1024)")
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=10.0, help="produce this long, and each read-back at least")
    ap.add_argument("--fill-seconds", type=float, default=5.0, help="consume: how long the topic is filled")
    ap.add_argument("--top", type=int, default=25, help="symbols listed")
    ap.add_argument("--dir", help="the broker's data (default: a temp dir)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=131072)
    return ap.parse_args(argv)


def proc_user_sys(pid: int) -> tuple[float, float]:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]) / kvk.CLK, int(parts[12]) / kvk.CLK


def consume_args(broker, topic: str, count: int, seconds: float) -> list:
    return ["consume", "-b", broker.bootstrap, "-t", topic, "--count", count, "--seconds", seconds]


class Phase:
    """One run of the profiled phase at a time: run() is kgen's JSON line."""

    def __init__(self, a: argparse.Namespace, broker, timeout: float):
        self.a, self.broker, self.timeout = a, broker, timeout
        self.runs = 0
        if a.phase == "consume":
            self.topic = "broker-profile"
            kvk.create_topic(broker, self.topic, a.partitions)
            fill = kvk.generator(
                broker.pid, kvk.kgen_produce(broker, self.topic, a.size, "1", a, a.fill_seconds), timeout
            )
            self.count = fill["messages"]
            os.sync()
            kvk.generator(broker.pid, consume_args(broker, self.topic, self.count, 0), timeout)  # warm-up

    def before(self) -> None:
        """Everything a run needs that is not the run (not to be measured or profiled)."""
        if self.a.phase == "produce":
            self.runs += 1
            self.topic = f"broker-profile-{self.runs}"
            kvk.create_topic(self.broker, self.topic, self.a.partitions)

    def run(self) -> dict:
        a, broker = self.a, self.broker
        argv = (
            consume_args(broker, self.topic, self.count, a.seconds)
            if a.phase == "consume"
            else kvk.kgen_produce(broker, self.topic, a.size, "1", a, a.seconds)
        )
        return kvk.generator(broker.pid, argv, self.timeout)

    def after(self) -> None:
        if self.a.phase == "produce":
            kvk.drop_topic(self.broker, self.topic)


def dso_name(dso: str) -> str:
    """Folds a perf DSO into a group: the kernel, libpython, the native core, other."""
    if dso.startswith("[kernel"):
        return "kernel"
    if "libpython" in dso or dso.startswith("python"):
        return "python interpreter"
    if re.match(r"(broker\._native\.)?\w+\.cpython-\d+", dso):
        return "native core (_native) and extension modules"
    if dso.startswith("libc") or dso.startswith("ld-linux"):
        return "libc"
    return dso


def syscalls_per_gb(strace_c: str, gb: float) -> dict[str, float]:
    """System calls per GB from `strace -c`'s table (calls column), most frequent first."""
    calls = {}
    for line in strace_c.splitlines():
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
        if m and m.group(2) != "total":
            calls[m.group(2)] = int(m.group(1)) / gb
    return dict(sorted(calls.items(), key=lambda kv: -kv[1]))


def perf_report(data: Path, sort: str, limit: int) -> list[tuple[float, str]]:
    """(percent, name) rows of `perf report --sort SORT` (self time, not children)."""
    p = subprocess.run(
        [
            "perf",
            "report",
            "-i",
            str(data),
            "--stdio",
            "--no-children",
            "--sort",
            sort,
            "--percent-limit",
            "0.3",
            "-g",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    rows = []
    for line in p.stdout.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(.*\S)", line)
        if m:
            rows.append((float(m.group(1)), re.sub(r"\s{2,}", "  ", m.group(2))))
    return rows[:limit]


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    for tool in ("perf", "strace", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(
                f"broker_profile needs {tool}: apt-get install -y "
                + {"perf": "linux-perf", "strace": "strace", "taskset": "util-linux"}[tool]
            )
    kvk.KGEN = kvk.ensure_kgen()
    kvk.check_pinning()
    root = Path(a.dir or tempfile.mkdtemp(prefix="broker-profile-"))
    broker = kvk.KBroker(root, False, kvk.PINNED_SETTINGS)
    timeout = 3 * a.seconds + 120
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {kvk.BROKER_CORE})
    try:
        broker.start()
    finally:
        os.sched_setaffinity(0, mine)
    out: dict = {"phase": a.phase, "size": a.size, "partitions": a.partitions}
    try:
        kvk.pin(broker.pid, kvk.BROKER_CORE)
        phase = Phase(a, broker, timeout)
        if a.phase == "produce":  # a warm-up run, not measured
            phase.before()
            phase.run()
            phase.after()

        phase.before()
        u0, s0 = proc_user_sys(broker.pid)
        cons = phase.run()
        u1, s1 = proc_user_sys(broker.pid)
        phase.after()
        gb = cons["bytes"] / 1e9
        out["measured"] = {
            "gb": gb,
            "mb_per_s": cons["mb_per_s"],
            "user_s_per_gb": (u1 - u0) / gb,
            "sys_s_per_gb": (s1 - s0) / gb,
            "cpu_s_per_gb": (u1 - u0 + s1 - s0) / gb,
            "broker_core": cons["broker_cpu"],
            "generator_core": cons["generator_cpu"],
            "saturated": kvk.bound(cons["generator_cpu"], cons["broker_cpu"]),
        }
        print(f"measured: {out['measured']}", file=sys.stderr, flush=True)

        data = root / "perf.data"
        phase.before()
        perf = subprocess.Popen(
            [
                "taskset",
                "-c",
                str(kvk.GENERATOR_CORE),
                "perf",
                "record",
                "-q",
                "-F",
                "1999",
                "-g",
                "-p",
                str(broker.pid),
                "-o",
                str(data),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(1.0)
        cons_p = phase.run()
        perf.send_signal(signal.SIGINT)
        perf.wait(timeout=120)
        phase.after()
        by_dso = perf_report(data, "dso", 100)
        groups: dict[str, float] = {}
        for pct, dso in by_dso:
            groups[dso_name(dso)] = groups.get(dso_name(dso), 0.0) + pct
        out["profile"] = {
            "mb_per_s": cons_p["mb_per_s"],
            "by_group": groups,
            "by_dso": by_dso,
            "by_symbol": perf_report(data, "dso,sym", a.top),
        }

        trace = root / "strace.txt"
        phase.before()
        st = subprocess.Popen(
            [
                "taskset",
                "-c",
                str(kvk.GENERATOR_CORE),
                "strace",
                "-c",
                "-f",
                "-q",
                "-o",
                str(trace),
                "-p",
                str(broker.pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)
        cons_s = phase.run()
        st.send_signal(signal.SIGINT)
        st.wait(timeout=60)
        phase.after()
        out["syscalls_per_gb"] = syscalls_per_gb(trace.read_text(), cons_s["bytes"] / 1e9)
    finally:
        broker.stop()
        if not a.dir:
            shutil.rmtree(root, ignore_errors=True)

    m = out["measured"]
    print(
        f"kbroker {a.phase}, {a.partitions} partitions, {a.size} B records, kgen on core {kvk.GENERATOR_CORE}: "
        f"{m['mb_per_s']:.0f} MB/s, broker {m['cpu_s_per_gb']:.3f} CPU s/GB "
        f"(user {m['user_s_per_gb']:.3f}, system {m['sys_s_per_gb']:.3f}); broker core {m['broker_core']:.0%}, "
        f"generator core {m['generator_core']:.0%}: {m['saturated']}"
    )
    print("\n| where (perf, self time) | share of the broker's samples |\n|---|---|")
    for name, pct in sorted(out["profile"]["by_group"].items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {pct:.1f}% |")
    print("\n| symbol | share |\n|---|---|")
    for pct, sym in out["profile"]["by_symbol"]:
        print(f"| `{sym}` | {pct:.1f}% |")
    print(f"\n| system call | calls per GB {'read' if a.phase == 'consume' else 'produced'} |\n|---|---|")
    for name, n in list(out["syscalls_per_gb"].items())[:12]:
        print(f"| {name} | {n:,.0f} |")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
