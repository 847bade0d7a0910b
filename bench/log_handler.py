"""broker.applog.KafkaLogHandler: its throughput to one broker and what a logging call
costs the application, with the broker up and down (issue 19).

    .venv/bin/python bench/log_handler.py [--records 200000] [--calls 200000] [--runs 5]
                                          [--broker-cpu 0] [--app-cpu 1] [--json]

Starts `broker serve` on a free loopback port pinned to one core (taskset) and runs the
application side in this process, pinned to the other (the handler's sender thread
shares that core with the application, as it would in a real one). Each run measures:

- throughput, layout text and json: --records records logged in one burst through
  logger.info (four loggers, so four keys; a 3-partition topic; the queue holds them all,
  nothing is dropped), records/s from the first call until flush() returns (every record
  acknowledged, acks=1);
- the cost of one logging call, `logger.info("line %d", i)`, timed with perf_counter_ns
  around each of --calls calls (p50, p99, p99.9; the timer pair itself costs ~0.1 µs and
  is included):
    null      a handler whose emit does nothing: Python's logging alone (record, caller)
    down      KafkaLogHandler, broker unreachable (a closed port), queue_size 10000: after
              the first 10000 calls each one drops the oldest record
    up-burst  KafkaLogHandler, broker up, the calls in a tight loop while the sender
              thread formats and produces beside them (the GIL is shared)
    up-paced  the same at ~5000 calls/s (a 0.1 ms sleep between calls)
    null-paced  the null handler at that pace: a call after a sleep costs more whatever
              the handler (cold caches, the thread's own wake-up)
  and `handle(record)` alone with the broker down: the handler's own share of a call.

Runs alternate; the medians over --runs runs are printed (--json: one JSON object).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from array import array

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from broker.applog import KafkaLogHandler  # noqa: E402
from broker.client import Cluster  # noqa: E402
from tests.support.broker_proc import BrokerProcess  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

LOGGERS = ("app.a", "app.b", "app.c", "app.d")


class PinnedBroker(BrokerProcess):
    """`broker serve` under taskset: the process and every thread it starts on one core."""

    def __init__(self, *args, cpu: int, **kw):
        super().__init__(*args, **kw)
        self.cpu = cpu

    def command(self) -> list[str]:
        return ["taskset", "-c", str(self.cpu), *super().command()]


class Nothing(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        pass


_names = iter(range(1 << 30))


def fresh_logger(handler: logging.Handler, name: str = "bench") -> logging.Logger:
    lg = logging.getLogger(f"{name}.{next(_names)}")
    lg.handlers[:] = [handler]
    lg.propagate = False
    lg.setLevel(logging.INFO)
    return lg


def percentiles(ns: array) -> dict[str, float]:
    s = sorted(ns)
    n = len(s)
    return {"p50_us": s[n // 2] / 1000, "p99_us": s[int(n * 0.99)] / 1000, "p999_us": s[int(n * 0.999)] / 1000}


def timed_calls(lg: logging.Logger, calls: int, pause_s: float = 0.0) -> dict[str, float]:
    ns = array("q", bytes(8 * calls))
    clock = time.perf_counter_ns
    info = lg.info
    for i in range(calls):
        t0 = clock()
        info("line %d", i)
        ns[i] = clock() - t0
        if pause_s:
            time.sleep(pause_s)
    return percentiles(ns)


def throughput(bootstrap: str, topic: str, layout: str, records: int) -> float:
    h = KafkaLogHandler(bootstrap, topic, layout=layout, queue_size=records, close_timeout=600)
    loggers = [fresh_logger(h, name) for name in LOGGERS]  # four keys
    try:
        t0 = time.perf_counter()
        for i in range(records):
            loggers[i % 4].info("line %d of the burst", i, extra={"seq": i})
        h.flush()
        elapsed = time.perf_counter() - t0
        assert (h.sent, h.dropped) == (records, 0), (h.sent, h.dropped)
    finally:
        h.close()
    return records / elapsed


def one_run(bootstrap: str, run: int, records: int, calls: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for layout in ("text", "json"):
        topic = f"bench-{layout}-{run}"
        with Cluster(bootstrap) as c:
            c.create_topic(topic, 3, 1)
        out[f"throughput_{layout}"] = throughput(bootstrap, topic, layout, records)

    for k, v in timed_calls(fresh_logger(Nothing()), calls).items():
        out[f"null_{k}"] = v
    for k, v in timed_calls(fresh_logger(Nothing()), calls // 10, 0.0001).items():
        out[f"null_paced_{k}"] = v

    down = KafkaLogHandler(f"127.0.0.1:{free_port()}", "bench-down", queue_size=10000, close_timeout=0.1)
    saved, sys.stderr = sys.stderr, open(os.devnull, "w")  # its "cannot deliver" line
    try:
        for k, v in timed_calls(fresh_logger(down), calls).items():
            out[f"down_{k}"] = v
        rec = logging.LogRecord("app.a", logging.INFO, __file__, 1, "line %d", (1,), None)
        ns = array("q", bytes(8 * calls))
        clock = time.perf_counter_ns
        handle = down.handle
        for i in range(calls):
            t0 = clock()
            handle(rec)
            ns[i] = clock() - t0
        for k, v in percentiles(ns).items():
            out[f"handle_down_{k}"] = v
        assert down.dropped >= 2 * calls - 10000 - 1, down.dropped
    finally:
        down.close()
        sys.stderr.close()
        sys.stderr = saved

    for name, pause in (("up_burst", 0.0), ("up_paced", 0.0001)):
        n = calls if not pause else calls // 10
        topic = f"bench-{name}-{run}"
        up = KafkaLogHandler(bootstrap, topic, queue_size=calls, close_timeout=600)
        try:
            fresh_logger(up).info("warm-up: connect and create the topic")
            up.flush()
            for k, v in timed_calls(fresh_logger(up), n, pause).items():
                out[f"{name}_{k}"] = v
            up.flush()
            assert up.dropped == 0 and up.sent == n + 1, (up.sent, up.dropped)
        finally:
            up.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=200_000, help="records per throughput run")
    ap.add_argument("--calls", type=int, default=200_000, help="timed logging calls per cost run")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--broker-cpu", type=int, default=0)
    ap.add_argument("--app-cpu", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="one JSON object of medians")
    args = ap.parse_args()
    if not shutil.which("taskset"):
        sys.exit("taskset (util-linux) is needed to pin the broker and the application")
    os.sched_setaffinity(0, {args.app_cpu})
    with tempfile.TemporaryDirectory(prefix="bench-logh-") as tmp:
        with PinnedBroker(os.path.join(tmp, "data"), cpu=args.broker_cpu) as b:
            runs = []
            for run in range(args.runs):
                r = one_run(b.bootstrap, run, args.records, args.calls)
                runs.append(r)
                if not args.json:
                    print(f"run {run + 1}: " + ", ".join(f"{k}={v:,.2f}" for k, v in r.items()), flush=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    if args.json:
        print(json.dumps(med))
        return
    print(f"\nmedians of {args.runs} runs (broker on cpu {args.broker_cpu}, application on cpu {args.app_cpu}):")
    print(f"  throughput, text layout: {med['throughput_text']:,.0f} records/s")
    print(f"  throughput, json layout: {med['throughput_json']:,.0f} records/s")
    print("  cost of logger.info(...)        p50 µs   p99 µs  p99.9 µs")
    for name, label in (
        ("null", "null handler (logging alone)"),
        ("down", "broker down"),
        ("handle_down", "handle(record), broker down"),
        ("up_burst", "broker up, burst"),
        ("null_paced", "null handler, ~5000 calls/s"),
        ("up_paced", "broker up, ~5000 calls/s"),
    ):
        print(
            f"  {label:<31} {med[name + '_p50_us']:7.2f}  {med[name + '_p99_us']:7.2f}  {med[name + '_p999_us']:8.2f}"
        )


if __name__ == "__main__":
    main()
