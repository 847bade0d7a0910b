"""CLI commands that talk to a running broker: topics, produce, consume.

Errors from the broker print as one line with the Kafka error name, e.g.
`broker: TOPIC_ALREADY_EXISTS: create topic clicks: Topic 'clicks' already exists.`
"""

from __future__ import annotations

import argparse
import sys
import time

from broker.cli.errors import CliError


def _bootstrap(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        "-b",
        dest="bootstrap",
        default="127.0.0.1:9092",
        metavar="HOST:PORT",
        help="bootstrap broker(s), comma-separated (default 127.0.0.1:9092)",
    )
    command_config(p)


def command_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties for TLS and SASL, as Kafka's tools take them (security.protocol, "
        "ssl.truststore.*, ssl.keystore.*, sasl.mechanism, sasl.jaas.config)",
    )


def client_security(args):
    """The ClientSecurity of --command-config (None without it); CliError (exit 2) for a
    file or setting that cannot be used."""
    path = getattr(args, "command_config", None)
    if path is None:
        return None
    from broker.config import parse_properties
    from broker.security.listener import ClientSecurity

    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read())
        return ClientSecurity.from_properties(props)
    except OSError as exc:
        raise CliError(f"--command-config: cannot read {path}: {exc.strerror or exc}", 2) from None
    except ValueError as exc:
        raise CliError(f"--command-config {path}: {exc}", 2) from None


def connect(args):
    """A Cluster client for --bootstrap, with --command-config's security."""
    from broker.client import Cluster

    return Cluster(args.bootstrap, security=client_security(args))


def _named(p: argparse.ArgumentParser, name: str, help: str, many: bool = False) -> None:
    """NAME as an argument, or as --NAME the way Kafka's tools take it (either; `many`:
    any number of arguments and --NAME options). _run merges the two into args.NAME."""
    if many:
        p.add_argument(name + "s", nargs="*", metavar=name.upper(), help=help)
        p.add_argument(
            f"--{name}",
            action="append",
            dest=f"_{name}_option",
            metavar=name.upper(),
            help=f"a {name} as Kafka's tools name it (repeatable; with the arguments)",
        )
    else:
        p.add_argument(name, nargs="?", metavar=name.upper(), help=f"{help} (or --{name})")
        p.add_argument(
            f"--{name}", dest=f"_{name}_option", metavar=name.upper(), help="the same, as Kafka's tools name it"
        )


def _merge_named(args) -> None:
    """Folds the --NAME options of _named() into args.NAME; one line when missing or both differ."""
    for attr in [a for a in vars(args) if a.startswith("_") and a.endswith("_option")]:
        name = attr[1 : -len("_option")]
        option = getattr(args, attr)
        if hasattr(args, name + "s"):  # many
            setattr(args, name + "s", [*(getattr(args, name + "s") or []), *(option or [])])
            continue
        given = getattr(args, name)
        if given is not None and option is not None and given != option:
            raise CliError(f"{name} given twice: {given!r} and --{name} {option!r}", 2)
        value = given if given is not None else option
        if value is None:
            raise CliError(f"no {name}: give it as an argument or with --{name}", 2)
        setattr(args, name, value)


def _kv(values, what: str) -> dict[str, str]:
    out = {}
    for item in values or []:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise CliError(f"{what} {item!r}: expected key=value", 2)
        out[k] = v
    return out


def _run(fn):
    """Runs a client command, turning client/broker errors into one line."""

    def wrapper(args):
        from broker.client import ClientError
        from broker.protocol.errors import KafkaProtocolError

        _merge_named(args)
        try:
            return fn(args)
        except KafkaProtocolError as exc:
            raise CliError(str(exc)) from None
        except ClientError as exc:
            raise CliError(str(exc)) from None
        except ValueError as exc:
            raise CliError(str(exc), 2) from None

    return wrapper


# ---------------------------------------------------------------------- topics


@_run
def topics_create(args) -> int:
    with connect(args) as c:
        c.create_topic(args.topic, args.partitions, args.replication_factor, _kv(args.config, "--config"))
    print(f"created topic {args.topic}")
    return 0


@_run
def topics_list(args) -> int:
    with connect(args) as c:
        for name in sorted(c.refresh()):
            if args.include_internal or not name.startswith("__"):
                print(name)
    return 0


@_run
def topics_describe(args) -> int:
    from broker.client.cluster import RESOURCE_TOPIC
    from broker.cluster.store.znodes import encode_topic_id
    from broker.config import ConfigSource

    with connect(args) as c:
        topics = c.refresh(args.topics or None)
        for name in sorted(topics):
            meta = topics[name]
            if meta.error_code:
                from broker.protocol.errors import KafkaProtocolError

                raise KafkaProtocolError(meta.error_code, f"topic {name}")
            if not args.topics and name.startswith("__") and not args.include_internal:
                continue
            parts = sorted(meta.partitions.values(), key=lambda p: p.partition)
            filtered = args.under_replicated_partitions or args.unavailable_partitions
            if args.under_replicated_partitions:
                parts = [p for p in parts if len(p.isr) < len(p.replicas)]
            if args.unavailable_partitions:
                parts = [p for p in parts if p.leader < 0 or p.leader not in c.brokers]
            if not filtered:
                rf = len(next(iter(meta.partitions.values())).replicas) if meta.partitions else 0
                overrides = [
                    e
                    for e in c.describe_configs(RESOURCE_TOPIC, name)
                    if e.config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
                ]
                cfg = ",".join(f"{e.name}={e.value}" for e in overrides)
                print(
                    f"Topic: {name}\tTopicId: {encode_topic_id(meta.topic_id)}\tPartitionCount: {len(meta.partitions)}\t"
                    f"ReplicationFactor: {rf}\tConfigs: {cfg}"
                )
            for p in parts:
                leader = p.leader if p.leader >= 0 else "none"
                print(
                    f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {leader}\t"
                    f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
                )
    return 0


@_run
def topics_elect_leaders(args) -> int:
    from broker.protocol.errors import ErrorCode

    if not args.all_topic_partitions and args.topic is None:
        raise CliError("topics elect-leaders: give --topic (with --partition) or --all-topic-partitions", 2)
    with connect(args) as c:
        if args.all_topic_partitions:
            partitions = None
        else:
            meta = c.topic(args.topic)
            wanted = [args.partition] if args.partition is not None else sorted(meta.partitions)
            partitions = [(args.topic, p) for p in wanted]
        results = c.elect_leaders(args.election_type, partitions)
    failed = 0
    done = [f"{t}-{p}" for (t, p), (err, _) in sorted(results.items()) if err == ErrorCode.NONE]
    if done:
        print(f"Successfully completed leader election ({args.election_type.upper()}) for partitions {', '.join(done)}")
    for (t, p), (err, msg) in sorted(results.items()):
        if err == ErrorCode.ELECTION_NOT_NEEDED:
            if not args.all_topic_partitions:
                print(f"Valid replica already elected for partitions {t}-{p}")
        elif err != ErrorCode.NONE:
            failed += 1
            print(
                f"Error completing leader election ({args.election_type.upper()}) for partition {t}-{p}: "
                f"{ErrorCode(err).name}{': ' + msg if msg else ''}",
                file=sys.stderr,
            )
    return 1 if failed else 0


@_run
def cluster_describe(args) -> int:
    with connect(args) as c:
        c.refresh([])
        info = c.describe_cluster()
    epoch = _controller_epoch(args.zookeeper) if args.zookeeper else None
    print(f"ClusterId: {info.cluster_id}")
    line = f"Controller: {info.controller_id}"
    if epoch is not None:
        line += f"\tControllerEpoch: {epoch}"
    print(line)
    for b in sorted(info.brokers, key=lambda b: b.broker_id):
        print(f"Broker: {b.broker_id}\tEndpoint: PLAINTEXT://{b.host}:{b.port}\tRack: {b.rack or 'none'}")
    return 0


def _controller_epoch(connect: str) -> int | None:
    """/controller_epoch, read from ZooKeeper (no Kafka request carries it)."""
    import asyncio

    from broker.cluster.store.errors import StoreError
    from broker.cluster.store.zkclient import KafkaZkClient

    async def read():
        zk = KafkaZkClient(connect, session_timeout_ms=10000, connection_timeout_ms=10000)
        await zk.start()
        try:
            got = await zk.get_controller_epoch()
            return got[0] if got else None
        finally:
            await zk.close()

    try:
        return asyncio.run(read())
    except StoreError as exc:
        raise CliError(f"cannot read the controller epoch: {exc}") from None


@_run
def topics_alter(args) -> int:
    with connect(args) as c:
        if args.partitions is not None:
            c.create_partitions(args.topic, args.partitions)
        sets, deletes = _kv(args.config, "--config"), args.delete_config or []
        if sets or deletes:
            c.alter_topic_configs(args.topic, sets, deletes)
        if args.partitions is None and not sets and not deletes:
            raise CliError("topics alter: nothing to change (give --partitions, --config or --delete-config)", 2)
    print(f"altered topic {args.topic}")
    return 0


@_run
def topics_delete(args) -> int:
    with connect(args) as c:
        c.delete_topic(args.topic)
    print(f"deleted topic {args.topic}")
    return 0


# ---------------------------------------------------------------------- produce / consume


def _acks(value: str) -> int:
    if value == "all":
        return -1
    try:
        v = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("acks must be 0, 1, -1 or all") from None
    if v not in (0, 1, -1):
        raise argparse.ArgumentTypeError("acks must be 0, 1, -1 or all")
    return v


@_run
def produce(args) -> int:
    from broker.client import Producer

    sep = args.key_separator.encode() if args.key_separator else None
    count = 0
    with Producer(
        args.bootstrap,
        acks=args.acks,
        compression=args.compression,
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        security=client_security(args),
    ) as p:
        p.partitions_of(args.topic)  # fail early on an unknown topic
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key = None
            if sep is not None:
                key, found, value = line.partition(sep)
                if not found:
                    raise CliError(f"line {count + 1}: no key separator {args.key_separator!r}", 2)
            else:
                value = line
            p.send(args.topic, value, key=key, partition=args.partition)
            count += 1
            p.poll()
    print(f"produced {count} messages to {args.topic}", file=sys.stderr)
    return 0


@_run
def consume(args) -> int:
    from broker.client import Consumer

    if args.group:
        from broker.cli.groups import consume_group

        return consume_group(args)
    out = sys.stdout.buffer
    sep = args.key_separator.encode()
    with Consumer(
        args.bootstrap,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        security=client_security(args),
    ) as c:
        partitions = [args.partition] if args.partition is not None else None
        if args.offset is not None:
            start = args.offset
        else:
            start = "earliest" if args.from_beginning else "latest"
        c.assign(args.topic, partitions, start)
        n = 0
        deadline = time.monotonic() + args.timeout_ms / 1000 if args.timeout_ms is not None else None
        while args.max_messages is None or n < args.max_messages:
            wait = 1.0 if deadline is None else max(0.0, deadline - time.monotonic())
            records = c.poll(min(wait, 1.0))
            for r in records:
                if args.print_key:
                    out.write((r.key or b"null") + sep)
                out.write((r.value if r.value is not None else b"null") + b"\n")
                n += 1
                if args.max_messages is not None and n >= args.max_messages:
                    break
            out.flush()
            if records:
                if deadline is not None:
                    deadline = time.monotonic() + args.timeout_ms / 1000
            elif deadline is not None and time.monotonic() >= deadline:
                break
    print(f"consumed {n} messages", file=sys.stderr)
    return 0


def add_parsers(sub) -> None:
    t = sub.add_parser("topics", help="create, list, describe, alter and delete topics")
    ts = t.add_subparsers(dest="topics_command", metavar="ACTION")
    ts.required = True
    p = ts.add_parser("create", help="create a topic")
    _bootstrap(p)
    _named(p, "topic", "the topic name")
    p.add_argument("--partitions", type=int, default=-1, help="default: the broker's num.partitions")
    p.add_argument("--replication-factor", type=int, default=-1, help="default: default.replication.factor")
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="topic config (repeatable)")
    p.set_defaults(func=topics_create)
    p = ts.add_parser("list", help="list topics")
    _bootstrap(p)
    p.add_argument("--include-internal", action="store_true", help="also __consumer_offsets and the like")
    p.set_defaults(func=topics_list)
    p = ts.add_parser("describe", help="partitions, leaders, replicas, ISR and config overrides")
    _bootstrap(p)
    _named(p, "topic", "topics to describe (default: all)", many=True)
    p.add_argument("--include-internal", action="store_true", help="list __consumer_offsets too")
    p.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="only partitions whose ISR is smaller than their replica list",
    )
    p.add_argument("--unavailable-partitions", action="store_true", help="only partitions without a live leader")
    p.set_defaults(func=topics_describe)
    p = ts.add_parser("alter", help="add partitions or change configs")
    _bootstrap(p)
    _named(p, "topic", "the topic name")
    p.add_argument("--partitions", type=int, help="new total partition count")
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="set a config (repeatable)")
    p.add_argument("--delete-config", action="append", metavar="KEY", help="remove an override (repeatable)")
    p.set_defaults(func=topics_alter)
    p = ts.add_parser(
        "elect-leaders",
        help="move leadership to preferred replicas, or elect out-of-sync leaders for offline partitions (unclean)",
    )
    _bootstrap(p)
    p.add_argument(
        "--election-type",
        choices=["preferred", "unclean"],
        required=True,
        help="preferred: the first replica leads again; unclean: an out-of-sync replica may lead "
        "(acknowledged records it lacks are lost)",
    )
    p.add_argument("--topic", help="the topic (with --partition: one partition)")
    p.add_argument("--partition", type=int, help="one partition of --topic")
    p.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    p.set_defaults(func=topics_elect_leaders)
    from broker.cli import reassign

    reassign.add_parser(ts, _bootstrap, _run)

    p = ts.add_parser("delete", help="delete a topic")
    _bootstrap(p)
    _named(p, "topic", "the topic name")
    p.set_defaults(func=topics_delete)

    c = sub.add_parser("cluster", help="the cluster: brokers and controller")
    cs = c.add_subparsers(dest="cluster_command", metavar="ACTION")
    cs.required = True
    p = cs.add_parser("describe", help="cluster id, controller (and its epoch) and brokers with endpoints and racks")
    _bootstrap(p)
    p.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/CHROOT]",
        help="also read the controller epoch from this ZooKeeper (no Kafka request carries it)",
    )
    p.set_defaults(func=cluster_describe)

    p = sub.add_parser("produce", help="produce stdin lines as messages")
    _bootstrap(p)
    p.add_argument("--topic", "-t", required=True, help="the topic to produce to")
    p.add_argument("--key-separator", metavar="S", help="split each line into KEY S VALUE")
    p.add_argument("--acks", type=_acks, default=-1, help="0, 1 or all (default all)")
    p.add_argument(
        "--compression",
        default="none",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="record batch compression (default none)",
    )
    p.add_argument("--partition", type=int, help="send every message to this partition")
    p.add_argument(
        "--linger-ms", type=int, default=5, metavar="MS", help="how long a batch waits for more messages (default 5)"
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=16384,
        metavar="BYTES",
        help="largest record batch per partition (default 16384)",
    )
    p.set_defaults(func=produce)

    p = sub.add_parser("consume", help="print messages to stdout")
    _bootstrap(p)
    p.add_argument("--topic", "-t", required=True, help="the topic to read")
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest offset (default: the latest; with --group, where the group has "
        "no committed offset)",
    )
    g.add_argument("--offset", type=int, metavar="N", help="start at offset N")
    p.add_argument("--partition", type=int, metavar="P", help="only this partition")
    p.add_argument("--group", metavar="G", help="join consumer group G (commits offsets)")
    p.add_argument("--max-messages", type=int, metavar="N", help="exit after printing N messages")
    p.add_argument("--timeout-ms", type=int, metavar="N", help="exit after N ms without a message")
    p.add_argument("--print-key", action="store_true", help="print KEY S VALUE (a null key as 'null')")
    p.add_argument(
        "--key-separator",
        default="\t",
        metavar="S",
        help="what separates key and value with --print-key (default a tab)",
    )
    p.set_defaults(func=consume)
