"""`broker perf produce|consume|e2e`: throughput and latency, like Kafka's perf-test tools.

Progress lines every 5 s on long runs, then a summary: records/s, MB/s, avg / p50 / p95 /
p99 / p99.9 latency; --json prints one JSON line instead (records_per_sec, mb_per_sec,
avg_ms, p50_ms, p95_ms, p99_ms, p999_ms, max_ms, records, bytes, elapsed_s).
"""

from __future__ import annotations

import sys

from broker.cli.clients import client_security
from broker.cli.errors import CliError


def _acks(value: str) -> int:
    import argparse

    if value == "all":
        return -1
    if value in ("0", "1", "-1"):
        return int(value)
    raise argparse.ArgumentTypeError("acks must be 0, 1, -1 or all")


def _common(p) -> None:
    from broker.cli.clients import _bootstrap

    _bootstrap(p)
    p.add_argument("--topic", "-t", required=True, help="the topic to write or read")
    p.add_argument("--num-records", type=int, required=True, metavar="N", help="how many records")
    p.add_argument(
        "--record-size",
        type=int,
        default=100,
        metavar="B",
        help="bytes per record value (default 100; consume counts MB/sec with it)",
    )
    p.add_argument("--json", action="store_true", help="one JSON line instead of the text summary")
    p.add_argument("--timeout-s", type=float, default=600.0, help="give up after this long")


def _producer_args(p) -> None:
    p.add_argument("--throughput", type=float, default=-1, metavar="MSGS_PER_S", help="-1: as fast as possible")
    p.add_argument("--acks", type=_acks, default=1, help="0, 1 or all (default 1)")
    p.add_argument(
        "--compression",
        default="none",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="record batch compression (default none)",
    )
    p.add_argument("--batch-size", type=int, default=16384, metavar="BYTES", help="per-partition batch bytes")
    p.add_argument(
        "--linger-ms", type=float, default=0.0, metavar="MS", help="how long a batch waits for more records (default 0)"
    )
    p.add_argument("--partitions", type=int, metavar="P", help="create the topic with P partitions if missing")
    p.add_argument("--max-inflight", type=int, default=5, help="requests in flight per connection")


def _run(fn):
    def wrapper(args):
        from broker.client import ClientError
        from broker.protocol.errors import KafkaProtocolError

        if args.num_records <= 0 or args.record_size < (8 if args.perf_command == "e2e" else 0):
            raise CliError("--num-records must be > 0 (and --record-size >= 8 for e2e)", 2)
        try:
            result = fn(args)
        except (KafkaProtocolError, ClientError, TimeoutError) as exc:
            raise CliError(str(exc)) from None
        from broker.perf.stats import print_summary

        print_summary(result, args.json, sys.stdout, command=args.perf_command)
        return 0

    return wrapper


def _popts(args):
    from broker.perf.produce import ProduceOptions

    return ProduceOptions(
        args.bootstrap,
        args.topic,
        args.num_records,
        args.record_size,
        args.throughput,
        args.acks,
        args.compression,
        args.batch_size,
        args.linger_ms,
        args.partitions,
        args.max_inflight,
        getattr(args, "discard", False),
        args.timeout_s,
        progress=not args.json,
        security=client_security(args),
    )


def _copts(args):
    from broker.perf.consume import ConsumeOptions

    return ConsumeOptions(
        args.bootstrap,
        args.topic,
        args.num_records,
        args.record_size,
        decode=getattr(args, "decode", "none"),
        timeout_s=args.timeout_s,
        progress=not args.json,
        security=client_security(args),
    )


def perf_produce(args) -> dict:
    from broker.perf.produce import run_produce

    return run_produce(_popts(args))


def perf_consume(args) -> dict:
    from broker.perf.consume import run_consume

    return run_consume(_copts(args))


def perf_e2e(args) -> dict:
    from broker.perf.consume import run_e2e

    return run_e2e(_popts(args), _copts(args))


def add_parsers(sub) -> None:
    perf = sub.add_parser("perf", help="throughput and latency tests (like Kafka's perf-test tools)")
    ps = perf.add_subparsers(dest="perf_command", metavar="TEST")
    ps.required = True
    p = ps.add_parser("produce", help="produce N records as fast as possible (or at --throughput)")
    _common(p)
    _producer_args(p)
    p.add_argument(
        "--discard",
        action="store_true",
        help="send to a local socket that drops everything (no broker): measures the generator",
    )
    p.set_defaults(func=_run(perf_produce))
    p = ps.add_parser("consume", help="consume N records from the earliest offsets")
    _common(p)
    p.add_argument(
        "--decode",
        default="none",
        choices=["none", "arrow"],
        help="none: count records from batch headers (CRC checked); arrow: decode every record",
    )
    p.set_defaults(func=_run(perf_consume))
    p = ps.add_parser("e2e", help="produce and consume at once; latency from send to consume")
    _common(p)
    _producer_args(p)
    p.set_defaults(func=_run(perf_e2e))
