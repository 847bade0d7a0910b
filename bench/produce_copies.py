#!/usr/bin/env python3
"""What getting produced bytes from a socket into a log segment costs the receiving core,
mechanism by mechanism (issue 22: how a Produce's record batches should reach the active
segment). No broker: bench/native/ingest (C, `make bench-tools`) receives N GB over
loopback TCP from a sender on the other core, CRCs every frame, and writes it into 1 GiB
segment files by each mechanism:

    copy3     recv into a 64 KiB read buffer, memcpy into the frame, pwrite (the produce
              path before issue 22's first step)
    copy2     recv straight into the frame, pwrite (today's produce path)
    mmap      recv straight into the segment's mapped, fallocate'd tail (one copy)
    mmap-pop  the same, each frame's pages populated first (MADV_POPULATE_WRITE)
    splice    socket -> pipe -> segment (splice), the CRC read from a mapping

Usage:
    make bench-tools
    .venv/bin/python bench/produce_copies.py [--gb 4] [--rounds 3] [--frame 1048576]
        [--modes copy3,copy2,mmap,mmap-pop,splice] [--dir /var/tmp] [--warm] [--json FILE]

Rounds alternate the modes (each round in a rotated order); dirty pages are synced before
each run so one run's writeback does not land on the next. The table gives medians: the
receiver's CPU seconds per GB (user + system, with the runs' spread), its throughput, minor faults per MB, the
ratio to copy2, and which side saturated its core (receiver or sender: CPU / wall).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INGEST = REPO / "bench" / "native" / "ingest"
MODES = ["copy3", "copy2", "mmap", "mmap-pop", "splice"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--gb", type=float, default=4.0, help="GB (10^9 bytes) received per run (default 4)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--frame", type=int, default=1 << 20, help="bytes per frame (a Produce's batches)")
    ap.add_argument("--segment", type=int, default=1 << 30, help="segment size (a multiple of --frame)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--dir", default="/var/tmp", help="where the segment files go (removed after each run)")
    ap.add_argument("--recv-cpu", type=int, default=0)
    ap.add_argument("--send-cpu", type=int, default=1)
    ap.add_argument(
        "--warm",
        action="store_true",
        help="each run first writes and frees as much anonymous memory as it receives (see ingest.c): "
        "the page cache then comes from pages the host still backs",
    )
    ap.add_argument("--json", help="write every run and the medians here")
    a = ap.parse_args(argv)
    a.modes = [m for m in a.modes.split(",") if m]
    unknown = [m for m in a.modes if m not in MODES]
    if unknown:
        ap.error(f"unknown mode {unknown[0]} (modes: {', '.join(MODES)})")
    if a.segment % a.frame:
        ap.error("--segment must be a multiple of --frame")
    return a


def ensure_ingest() -> Path:
    if not INGEST.exists():
        p = subprocess.run(["make", "-s", "-C", str(REPO), "bench/native/ingest"], capture_output=True, text=True)
        if p.returncode != 0 or not INGEST.exists():
            raise SystemExit(f"cannot build bench/native/ingest: {p.stderr.strip() or p.stdout.strip()}")
    return INGEST


def run_once(a: argparse.Namespace, mode: str, binary: Path = INGEST) -> dict:
    os.sync()
    cmd = [
        str(binary),
        mode,
        "--gb",
        str(a.gb),
        "--frame",
        str(a.frame),
        "--segment",
        str(a.segment),
        "--dir",
        a.dir,
        "--recv-cpu",
        str(a.recv_cpu),
        "--send-cpu",
        str(a.send_cpu),
        *(["--warm"] if a.warm else []),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"ingest {mode} failed ({p.returncode}): {p.stderr.strip()}")
    return json.loads(p.stdout)


def summarize(runs: list[dict]) -> list[dict]:
    out = []
    by_mode: dict[str, list[dict]] = {}
    for r in runs:
        by_mode.setdefault(r["mode"], []).append(r)
    base = None
    for mode, rs in by_mode.items():
        med = {
            k: statistics.median(r[k] for r in rs)
            for k in ("cpu_s_per_gb", "gb_per_s", "user_s", "sys_s", "wall_s", "sender_cpu_s")
        }
        med["cpu_min"] = min(r["cpu_s_per_gb"] for r in rs)
        med["cpu_max"] = max(r["cpu_s_per_gb"] for r in rs)
        med["faults_per_mb"] = statistics.median(r["minor_faults"] / (r["bytes"] / 1e6) for r in rs)
        recv_share = statistics.median((r["user_s"] + r["sys_s"]) / r["wall_s"] for r in rs)
        send_share = statistics.median(r["sender_cpu_s"] / r["wall_s"] for r in rs)
        med["receiver_core"] = recv_share
        med["sender_core"] = send_share
        med["saturated"] = "receiver" if recv_share >= send_share else "sender"
        med["mode"] = mode
        med["runs"] = len(rs)
        if mode == "copy2":
            base = med["cpu_s_per_gb"]
        out.append(med)
    for m in out:
        m["vs_copy2"] = m["cpu_s_per_gb"] / base if base else None
    return out


def table(summary: list[dict]) -> str:
    lines = [
        "| mechanism | receiver CPU s/GB, median (min–max) | user / sys s | GB/s | faults/MB | vs copy2 | receiver / sender core | saturated |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in summary:
        ratio = f"{m['vs_copy2']:.2f}" if m["vs_copy2"] is not None else "–"
        lines.append(
            f"| {m['mode']} | {m['cpu_s_per_gb']:.3f} ({m['cpu_min']:.2f}–{m['cpu_max']:.2f}) | {m['user_s']:.2f} / {m['sys_s']:.2f} | "
            f"{m['gb_per_s']:.2f} | {m['faults_per_mb']:.0f} | {ratio} | "
            f"{m['receiver_core']:.0%} / {m['sender_core']:.0%} | {m['saturated']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    binary = ensure_ingest()
    runs: list[dict] = []
    for rnd in range(a.rounds):
        order = a.modes[rnd % len(a.modes) :] + a.modes[: rnd % len(a.modes)]
        for mode in order:
            r = run_once(a, mode, binary)
            r["round"] = rnd + 1
            runs.append(r)
            print(
                f"round {rnd + 1} {mode}: {r['cpu_s_per_gb']:.3f} CPU s/GB, {r['gb_per_s']:.2f} GB/s, "
                f"{r['minor_faults']} faults",
                file=sys.stderr,
            )
    crcs = {r["crc_xor"] for r in runs}
    if len(crcs) != 1:
        raise SystemExit(f"the mechanisms did not all receive the same bytes: {sorted(crcs)}")
    summary = summarize(runs)
    print(table(summary))
    if a.json:
        Path(a.json).write_text(
            json.dumps({"args": {k: v for k, v in vars(a).items()}, "runs": runs, "summary": summary}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
