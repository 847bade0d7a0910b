"""`broker logs tail --topic T`: prints a topic of application logs (what
broker.applog.KafkaLogHandler writes, or any topic of text lines) as lines, following it.

Text values print as they are; JSON objects with a "message" print as one readable line,
`TIMESTAMP LEVEL LOGGER: MESSAGE key=value ...`, with the exception's lines after it
(`--raw` prints them as they are). Records of one fetch print in timestamp order.
"""

from __future__ import annotations

import argparse
import json
import sys

from broker.cli.clients import _run, client_security, command_config

_FIXED = ("timestamp", "level", "logger", "message", "exception", "stack")


def render(value: bytes | None, raw: bool = False) -> str:
    """One record's value as printed lines (without the final newline)."""
    if value is None:
        return "null"
    text = value.decode("utf-8", "replace")
    if raw or not text.startswith("{"):
        return text
    try:
        d = json.loads(text)
    except ValueError:
        return text
    if not isinstance(d, dict) or "message" not in d:
        return text
    head = " ".join(str(d[k]) for k in ("timestamp", "level") if d.get(k) is not None)
    logger = d.get("logger")
    line = f"{head} {logger}: {d['message']}" if logger else f"{head} {d['message']}"
    extras = [
        f"{k}={v if isinstance(v, str) and v and ' ' not in v else json.dumps(v)}"
        for k, v in d.items()
        if k not in _FIXED
    ]
    if extras:
        line += "  " + " ".join(extras)
    for k in ("exception", "stack"):
        if d.get(k):
            line += "\n" + str(d[k]).rstrip("\n")
    return line.lstrip()


@_run
def tail(args) -> int:
    from broker.client import Consumer

    out = sys.stdout
    with Consumer(
        args.bootstrap,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        security=client_security(args),
    ) as c:
        c.assign(args.topic, None, "earliest" if args.from_beginning else "latest")
        partitions = sorted(p for t, p in c.positions if t == args.topic)
        ends = None
        if not args.follow:  # what is there now, then stop
            ends = {p: off for p, (off, _) in c.cluster.list_offsets(args.topic, partitions, -1).items()}
        while True:
            if ends is not None and all(c.positions[(args.topic, p)] >= ends[p] for p in partitions):
                return 0
            records = c.poll(1.0)
            records.sort(key=lambda r: r.timestamp)
            for r in records:
                if ends is None or r.offset < ends[r.partition]:
                    out.write(render(r.value, args.raw) + "\n")
            out.flush()


def add_parsers(sub) -> None:
    lg = sub.add_parser("logs", help="follow a topic of application logs (KafkaLogHandler)")
    ls = lg.add_subparsers(dest="logs_command", metavar="ACTION")
    ls.required = True
    p = ls.add_parser(
        "tail",
        help="print a log topic's records as lines, following new ones",
        description="Print a topic of log records as lines: text as it is, JSON lines "
        "(KafkaLogHandler's layout=json) as 'TIMESTAMP LEVEL LOGGER: MESSAGE "
        "key=value ...' with the exception after it. Follows the topic until "
        "Ctrl-C unless --no-follow.",
    )
    p.add_argument(
        "--bootstrap-server",
        "--bootstrap",
        "-b",
        dest="bootstrap",
        default="127.0.0.1:9092",
        metavar="HOST:PORT",
        help="bootstrap broker(s), comma-separated (default 127.0.0.1:9092)",
    )
    command_config(p)
    p.add_argument("--topic", "-t", required=True, help="the topic to read")
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest record (default: print only records logged from now on)",
    )
    p.add_argument(
        "--follow",
        "-f",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep printing new records until Ctrl-C (default); --no-follow stops at the end "
        "the topic had at the start",
    )
    p.add_argument("--raw", action="store_true", help="print JSON records as they are, not as readable lines")
    p.set_defaults(func=tail)
