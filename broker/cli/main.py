"""`broker`: serve a broker, administer topics, produce and consume.

    broker serve [--config FILE] [--data-dir DIR] [--listen HOST:PORT] [--broker-id N]
                 [--zookeeper HOST:PORT[/CHROOT]] [--set key=value ...]
    broker topics create|list|describe|alter|elect-leaders|delete --bootstrap HOST:PORT ...
    broker cluster describe --bootstrap HOST:PORT [--zookeeper HOST:PORT[/CHROOT]]
    broker produce --bootstrap HOST:PORT --topic T ...     (lines from stdin)
    broker consume --bootstrap HOST:PORT --topic T ...
    broker transactions list|describe|abort --bootstrap HOST:PORT ...   (as kafka-transactions)
    broker producers describe --bootstrap HOST:PORT --topic T --partition N
    broker logs tail --bootstrap-server HOST:PORT --topic T [--from-beginning] [--no-follow] [--raw]
    broker configs describe|alter --bootstrap-server HOST:PORT --topic T | --broker ID | --group G ...
    broker log-dirs describe --bootstrap-server HOST:PORT [--broker-list 1,2] [--topic-list T1,T2]
    broker records delete --bootstrap-server HOST:PORT --offset-json-file FILE
    broker offsets --bootstrap-server HOST:PORT [--topic T] [--time earliest|latest|max-timestamp|MS]
    broker dump-log [--deep-iteration] [--print-data-log] [--offsets-decoder] [--transaction-log-decoder]
                    --files F1,F2 | PATH ...
    broker doctor [--data-dir DIR] [--config FILE] [--pid PID]
    broker quotas describe|alter --bootstrap-server HOST:PORT [--user U | --user-defaults]
                  [--client C | --client-defaults] [--add-config K=V,...] [--delete-config K,...]

Every client command takes --bootstrap-server (Kafka's spelling) as well as --bootstrap / -b,
and --topic / --group beside a topic or group given as an argument.

Exit codes: 0 success; 1 the broker or the network reported an error (printed as one
line, with the Kafka error name); 2 bad usage or configuration (one line naming the key
or option); 130 / 143 stopped by SIGINT / SIGTERM. The client commands take SIGTERM as
Ctrl-C: they unwind, so `consume --group` commits what it printed and leaves its group
(`serve` has its own clean shutdown on both).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from broker import __version__
from broker.cli.errors import CliError  # noqa: E402  (re-exported for the command modules)


def _parse_set(values: list[str]) -> dict[str, str]:
    out = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--set {item!r}: expected key=value", 2)
        out[key.strip()] = value.strip()
    return out


def cmd_serve(args: argparse.Namespace) -> int:
    from broker.config import BrokerConfig, ConfigError

    overrides = _parse_set(args.set)
    if args.data_dir is not None:
        overrides["log.dirs"] = args.data_dir
    if args.listen is not None:
        overrides["listeners"] = args.listen if "://" in args.listen else "PLAINTEXT://" + args.listen
    if args.broker_id is not None:
        overrides["broker.id"] = str(args.broker_id)
    if args.zookeeper is not None:
        overrides["zookeeper.connect"] = args.zookeeper
    try:
        config = BrokerConfig.from_sources(args.config, overrides)
    except ConfigError as exc:
        raise CliError(f"configuration error: {exc}", 2) from None
    # every dir the broker creates gets log.dirs.mode, every file it without the execute
    # bits (0700: dirs 0700, segments 0600), whatever the umask it was started with
    os.umask(0o777 & ~config.log_dirs_mode)
    from broker.server import logsetup

    try:
        logsetup.configure(config, getattr(logging, args.log_level.upper()))
    except OSError as exc:
        raise CliError(f"configuration error: {exc}", 2) from None
    for line in config.warnings:
        logging.getLogger("broker").warning("%s", line)
    from broker.cluster.store.errors import MetadataFileError
    from broker.log.manager import LogDirError
    from broker.server.broker import BrokerStartupError, run_broker
    from broker.server.loop import run

    try:
        run(run_broker(config), args.event_loop)
    except (OSError, LogDirError, BrokerStartupError, MetadataFileError) as exc:
        raise CliError(f"cannot serve: {exc}") from None
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="broker", description="kbroker: a Kafka-compatible log broker.")
    p.add_argument("--version", action="version", version=f"kbroker {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    s = sub.add_parser(
        "serve",
        help="run a broker (one broker needs nothing else: no ZooKeeper)",
        description="Run a broker. Settings come from --config (server.properties format), "
        "then --set / the shortcuts below, over Kafka's defaults.",
    )
    s.add_argument("--config", metavar="FILE", help="server.properties-format file")
    s.add_argument("--data-dir", metavar="DIR", help="log directory (log.dirs)")
    s.add_argument("--listen", metavar="HOST:PORT", help="listener address (listeners), e.g. 127.0.0.1:9092")
    s.add_argument("--broker-id", type=int, metavar="N", help="broker.id")
    s.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/CHROOT]",
        help="join the cluster coordinated by this ZooKeeper (zookeeper.connect); "
        "without it the broker runs alone with an embedded metadata store",
    )
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="any configuration key (repeatable)")
    s.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="least severe log lines written to stderr (default info)",
    )
    s.add_argument(
        "--event-loop", default="auto", choices=["auto", "asyncio", "uvloop"], help="auto: uvloop when installed"
    )
    s.set_defaults(func=cmd_serve)

    from broker.cli import (
        clients,
        doctor,
        dumplog,
        groups,
        logs,
        ops,
        perf,
        quotas,
        security,
        share_groups,
        transactions,
    )

    clients.add_parsers(sub)
    groups.add_parsers(sub)
    share_groups.add_parsers(sub)
    transactions.add_parsers(sub)
    perf.add_parsers(sub)
    security.add_parsers(sub)
    security.add_acl_parsers(sub)
    quotas.add_parsers(sub)
    logs.add_parsers(sub)
    ops.add_parsers(sub)
    dumplog.add_parsers(sub)
    doctor.add_parsers(sub)
    return p


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, so that it unwinds as after Ctrl-C."""


def _on_sigterm(signum, frame):
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command != "serve":
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return args.func(args)
    except CliError as exc:
        print(f"broker: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt as exc:
        return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
