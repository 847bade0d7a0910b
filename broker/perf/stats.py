"""Throughput and latency accounting for `broker perf` (as Kafka's perf-test tools print).

Latencies are recorded per batch with the number of records they stand for, so the
percentiles are per record without a Python call per record.

On a terminal (stderr a TTY) and without --json, a live progress bar (tqdm) counts the
records towards the run's total, updated per batch answered; the five-second report lines
are printed above it.
"""

from __future__ import annotations

import json
import sys
import time


class Stats:
    def __init__(
        self,
        record_size: int,
        report_every_s: float = 5.0,
        out=sys.stdout,
        progress: bool = True,
        total: int | None = None,
    ):
        self.record_size = record_size
        self.report_every_s = report_every_s
        self.out = out
        self.progress = progress
        self.start = time.perf_counter()
        self.records = 0
        self.bytes = 0
        self.samples: list[tuple[float, int]] = []  # (latency ms, records)
        self._win_start = self.start
        self._win_records = 0
        self._win_bytes = 0
        self._win_lat_sum = 0.0
        self._win_lat_max = 0.0
        self._win_lat_n = 0
        self.bar = None
        if progress and total and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                unit="rec",
                unit_scale=True,
                file=sys.stderr,
                dynamic_ncols=True,
                mininterval=0.2,
                smoothing=0.1,
            )

    def record(self, count: int, nbytes: int, latency_ms: float | None = None) -> None:
        self.records += count
        self.bytes += nbytes
        if self.bar is not None:
            self.bar.update(count)
        self._win_records += count
        self._win_bytes += nbytes
        if latency_ms is not None:
            self.samples.append((latency_ms, count))
            self._win_lat_sum += latency_ms * count
            self._win_lat_n += count
            if latency_ms > self._win_lat_max:
                self._win_lat_max = latency_ms
        now = time.perf_counter()
        if self.progress and now - self._win_start >= self.report_every_s:
            el = now - self._win_start
            avg = self._win_lat_sum / self._win_lat_n if self._win_lat_n else 0.0
            line = (
                f"{self._win_records} records, {self._win_records / el:.1f} records/sec "
                f"({self._win_bytes / el / 1e6:.2f} MB/sec), {avg:.1f} ms avg latency, "
                f"{self._win_lat_max:.1f} ms max latency."
            )
            if self.bar is not None:
                self.bar.write(line, file=self.out)  # above the bar, which is drawn again
            else:
                print(line, file=self.out, flush=True)
            self._win_start = now
            self._win_records = self._win_bytes = self._win_lat_n = 0
            self._win_lat_sum = self._win_lat_max = 0.0

    def percentile(self, q: float) -> float:
        if not self.samples:
            return 0.0
        ordered = sorted(self.samples)
        total = sum(c for _, c in ordered)
        target = q * total
        acc = 0
        for lat, c in ordered:
            acc += c
            if acc >= target:
                return lat
        return ordered[-1][0]

    def summary(self, elapsed: float | None = None) -> dict:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elapsed = (time.perf_counter() - self.start) if elapsed is None else elapsed
        n = sum(c for _, c in self.samples)
        avg = sum(lat * c for lat, c in self.samples) / n if n else 0.0
        return {
            "records": self.records,
            "bytes": self.bytes,
            "elapsed_s": round(elapsed, 3),
            "records_per_sec": round(self.records / elapsed, 1) if elapsed > 0 else 0.0,
            "mb_per_sec": round(self.bytes / elapsed / 1e6, 2) if elapsed > 0 else 0.0,
            "avg_ms": round(avg, 3),
            "max_ms": round(max((lat for lat, _ in self.samples), default=0.0), 3),
            "p50_ms": round(self.percentile(0.50), 3),
            "p95_ms": round(self.percentile(0.95), 3),
            "p99_ms": round(self.percentile(0.99), 3),
            "p999_ms": round(self.percentile(0.999), 3),
        }


# what each command counts and which latency it measures, for the text summary
_WORDS = {
    "produce": ("records sent", "latency"),
    "consume": ("records consumed", "fetch latency"),
    "e2e": ("records sent and consumed", "end-to-end latency"),
}


def print_summary(s: dict, as_json: bool, out=sys.stdout, command: str = "produce") -> None:
    if as_json:
        print(json.dumps({**s, "command": command}, sort_keys=True), file=out, flush=True)
        return
    what, latency = _WORDS[command]
    print(
        f"{s['records']} {what}, {s['records_per_sec']:.1f} records/sec ({s['mb_per_sec']:.2f} MB/sec), "
        f"{s['avg_ms']:.2f} ms avg {latency}, {s['max_ms']:.2f} ms max {latency}, {s['p50_ms']:.2f} ms 50th, "
        f"{s['p95_ms']:.2f} ms 95th, {s['p99_ms']:.2f} ms 99th, {s['p999_ms']:.2f} ms 99.9th.",
        file=out,
        flush=True,
    )
