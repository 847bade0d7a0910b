"""Kafka-shaped admin tools: `broker configs`, `broker log-dirs`, `broker records delete`
and `broker offsets`, each printing what Kafka's tool of the same job prints:

    broker configs describe --bootstrap-server B --topic T [--all]       (kafka-configs --describe)
    broker configs describe --bootstrap-server B --broker 1 [--all]
    broker configs describe --bootstrap-server B --entity-type brokers --entity-default
    broker configs alter --bootstrap-server B --topic T --add-config k=v,k2=v2 --delete-config k3
    broker configs alter --bootstrap-server B --entity-type brokers --entity-name 1 | --entity-default
                         --add-config k=v --delete-config k2
    broker configs describe|alter --bootstrap-server B --group G ...   (--entity-type groups)
    broker log-dirs describe --bootstrap-server B [--broker-list 1,2] [--topic-list t1,t2]
    broker records delete --bootstrap-server B --offset-json-file plan.json   (kafka-delete-records)
    broker offsets --bootstrap-server B --topic T [--partitions 0,1] [--time earliest|latest|max-timestamp|MS]

configs takes Kafka's `--entity-type topics|brokers|groups --entity-name NAME` (or
`--entity-default`, the cluster-wide default of dynamic broker configs) too; a group's
configs (consumer.session.timeout.ms, share.auto.offset.reset ...) are Kafka 4.4's group
configs, altered with IncrementalAlterConfigs as kafka-configs does; a broker's
dynamic configs are altered with IncrementalAlterConfigs sent to that broker, the default's
through any (docs/cluster.md lists the keys that change without a restart). Errors are
one line, with the Kafka error name, exit 1; bad usage exit 2 (broker/cli/clients.py's
conventions).
"""

from __future__ import annotations

import argparse
import json
import re

from broker.cli.clients import _bootstrap, _run, connect
from broker.cli.errors import CliError

RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_GROUP = 2, 4, 32
_ENTITY_TYPES = {"topics": RESOURCE_TOPIC, "brokers": RESOURCE_BROKER, "groups": RESOURCE_GROUP}
_KINDS = {RESOURCE_TOPIC: "topic", RESOURCE_BROKER: "broker", RESOURCE_GROUP: "group"}
#: Kafka's ConfigEntry.ConfigSource names, by protocol code
SOURCE_NAMES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "DYNAMIC_CLIENT_METRICS_CONFIG",
    8: "DYNAMIC_GROUP_CONFIG",
}


# ---------------------------------------------------------------------- configs


def _entity(args) -> tuple[int, str]:
    """(resource type, name) from --topic / --broker or --entity-type/--entity-name."""
    given = [
        (RESOURCE_TOPIC, args.topic) if args.topic is not None else None,
        (RESOURCE_BROKER, args.broker) if args.broker is not None else None,
        (RESOURCE_GROUP, args.group) if args.group is not None else None,
    ]
    if args.entity_default:
        if args.entity_type != "brokers" or args.entity_name is not None:
            raise CliError("configs: --entity-default goes with --entity-type brokers (and no --entity-name)", 2)
        given.append((RESOURCE_BROKER, ""))
    elif args.entity_type is not None or args.entity_name is not None:
        if args.entity_type is None or args.entity_name is None:
            raise CliError("configs: --entity-type and --entity-name go together", 2)
        given.append((_ENTITY_TYPES[args.entity_type], args.entity_name))
    chosen = [g for g in given if g is not None]
    if len(chosen) != 1:
        raise CliError(
            "configs: name one entity: --topic T, --broker ID, --group G, --entity-type/--entity-name, or "
            "--entity-type brokers --entity-default",
            2,
        )
    rtype, name = chosen[0]
    if rtype == RESOURCE_BROKER and name != "" and not str(name).isdigit():
        raise CliError(f"configs: broker {name!r} is not a broker id", 2)
    return rtype, str(name)


def _describe(c, rtype: int, name: str) -> list:
    from broker.protocol.errors import KafkaProtocolError
    from broker.protocol.messages.describe_configs import DescribeConfigsRequest as D

    req = D(
        resources=[D.DescribeConfigsResource(resource_type=rtype, resource_name=name, configuration_keys=None)],
        include_synonyms=True,
        include_documentation=False,
    )
    c.refresh([])
    conn = c.connection(int(name)) if rtype == RESOURCE_BROKER and name else c.controller()
    r = conn.request(req).results[0]
    if r.error_code:
        raise KafkaProtocolError(r.error_code, f"describe configs of {name}: {r.error_message or ''}".rstrip(": "))
    return r.configs


@_run
def configs_describe(args) -> int:
    rtype, name = _entity(args)
    with connect(args) as c:
        if rtype == RESOURCE_TOPIC:
            c.topic(name)  # UNKNOWN_TOPIC_OR_PARTITION, said as such
        entries = _describe(c, rtype, name)
    kind = _KINDS[rtype]
    # as Kafka's tool: without --all, the entity's own layer only (a broker's dynamic
    # configs, not the cluster default's it inherits)
    own = {RESOURCE_TOPIC: 1, RESOURCE_GROUP: 8}.get(rtype, 2 if name else 3)
    shown = sorted((e for e in entries if args.all or e.config_source == own), key=lambda e: e.name)
    if rtype == RESOURCE_BROKER and not name:
        print("Default configs for brokers in the cluster are:")
    else:
        print(f"{'All' if args.all else 'Dynamic'} configs for {kind} {name} are:")
    for e in shown:
        synonyms = ", ".join(f"{SOURCE_NAMES.get(s.source, s.source)}:{s.name}={_null(s.value)}" for s in e.synonyms)
        value = "null" if e.is_sensitive else _null(e.value)
        print(f"  {e.name}={value} sensitive={'true' if e.is_sensitive else 'false'} synonyms={{{synonyms}}}")
    return 0


def _null(value: str | None) -> str:
    return "null" if value is None else value


def parse_config_list(text: str) -> dict[str, str]:
    """Kafka's --add-config: 'k1=v1,k2=[a,b],k3=v3' (a list value in brackets)."""
    out: dict[str, str] = {}
    for m in re.finditer(r"\s*([^=,\s]+)\s*=\s*(\[[^\]]*\]|[^,]*)\s*(?:,|$)", text):
        key, value = m.group(1), m.group(2).strip()
        out[key] = value[1:-1] if value.startswith("[") else value
    if not out or "".join(f"{k}{v}" for k, v in out.items()).replace(",", "") == "":
        raise CliError(f"--add-config {text!r}: expected k1=v1,k2=[v1,v2]", 2)
    return out


@_run
def configs_alter(args) -> int:
    rtype, name = _entity(args)
    sets: dict[str, str] = {}
    for item in args.add_config or []:
        sets.update(parse_config_list(item))
    deletes = [k.strip() for item in args.delete_config or [] for k in item.split(",") if k.strip()]
    if not sets and not deletes:
        raise CliError("configs alter: nothing to change (give --add-config or --delete-config)", 2)
    with connect(args) as c:
        if rtype == RESOURCE_TOPIC:
            c.topic(name)
            c.alter_topic_configs(name, sets, deletes)
        else:
            _alter_broker(c, name, sets, deletes, rtype)
    if rtype == RESOURCE_TOPIC:
        print(f"Completed updating config for topic {name}.")
    elif rtype == RESOURCE_GROUP:
        print(f"Completed updating config for group {name}.")
    elif name:
        print(f"Completed updating config for broker {name}.")
    else:
        print("Completed updating default config for brokers in the cluster.")
    return 0


def _alter_broker(c, name: str, sets: dict[str, str], deletes: list[str], rtype: int = RESOURCE_BROKER) -> None:
    """IncrementalAlterConfigs on a broker's dynamic configs (sent to that broker, as
    Kafka's admin client does), on the cluster default or on a group's configs (any broker)."""
    from broker.protocol.errors import KafkaProtocolError
    from broker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as I

    ops = [I.AlterableConfig(name=k, config_operation=0, value=v) for k, v in sets.items()]
    ops += [I.AlterableConfig(name=k, config_operation=1, value=None) for k in deletes]
    req = I(
        resources=[I.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=ops)],
        validate_only=False,
    )
    c.refresh([])
    conn = c.connection(int(name)) if rtype == RESOURCE_BROKER and name else c.any_connection()
    r = conn.request(req).responses[0]
    if r.error_code:
        what = f"group {name}" if rtype == RESOURCE_GROUP else f"broker {name}" if name else "the default of brokers"
        raise KafkaProtocolError(r.error_code, f"alter configs of {what}: {r.error_message or ''}".rstrip(": "))


# ---------------------------------------------------------------------- log dirs


def _ints(text: str | None, what: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CliError(f"{what} {text!r}: expected comma-separated numbers", 2) from None


@_run
def log_dirs_describe(args) -> int:
    from broker.protocol.messages.describe_log_dirs import DescribeLogDirsRequest as D

    topics = [t for t in (args.topic_list or "").split(",") if t]
    print("Querying brokers for log directories information")
    with connect(args) as c:
        c.refresh([])
        wanted = _ints(args.broker_list, "--broker-list") or sorted(c.brokers)
        unknown = [b for b in wanted if b not in c.brokers]
        if unknown:
            raise CliError(
                f"log-dirs: no broker {', '.join(map(str, unknown))} in the cluster "
                f"(brokers {', '.join(map(str, sorted(c.brokers)))})",
                2,
            )
        request_topics = None
        if topics:
            metas = c.refresh(topics)
            request_topics = [
                D.DescribableLogDirTopic(topic=t, partitions=sorted(metas[t].partitions))
                for t in topics
                if t in metas and not metas[t].error_code
            ]
        brokers = []
        for b in wanted:
            resp = c.connection(b).request(D(topics=request_topics))
            dirs = []
            for r in resp.results:
                parts = [
                    {
                        "partition": f"{t.name}-{p.partition_index}",
                        "size": p.partition_size,
                        "offsetLag": p.offset_lag,
                        "isFuture": p.is_future_key,
                    }
                    for t in r.topics
                    for p in t.partitions
                ]
                dirs.append(
                    {
                        "partitions": sorted(parts, key=lambda x: x["partition"]),
                        "error": None if r.error_code == 0 else _exception_name(r.error_code),
                        "logDir": r.log_dir,
                    }
                )
            brokers.append({"broker": b, "logDirs": dirs})
    print(f"Received log directory information from brokers {','.join(map(str, wanted))}")
    print(json.dumps({"brokers": brokers, "version": 1}, separators=(",", ":")))
    return 0


def _exception_name(code: int) -> str:
    """The Java exception class Kafka's tools print for an error code (its Errors enum:
    KAFKA_STORAGE_ERROR is org.apache.kafka.common.errors.KafkaStorageException)."""
    from broker.protocol.errors import ErrorCode

    special = {
        ErrorCode.KAFKA_STORAGE_ERROR: "KafkaStorageException",
        ErrorCode.UNKNOWN_SERVER_ERROR: "UnknownServerException",
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "ClusterAuthorizationException",
    }
    try:
        err = ErrorCode(code)
    except ValueError:
        return "org.apache.kafka.common.errors.UnknownServerException"  # as Errors.forCode
    name = special.get(err) or "".join(w.capitalize() for w in err.name.split("_")) + "Exception"
    return f"org.apache.kafka.common.errors.{name}"


# ---------------------------------------------------------------------- records delete


def read_offsets_json(path: str) -> list[tuple[str, int, int]]:
    """Kafka's --offset-json-file: {"partitions": [{"topic": T, "partition": P, "offset": O}], "version": 1}."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise CliError(f"--offset-json-file {path}: {exc.strerror}", 2) from None
    except json.JSONDecodeError as exc:
        raise CliError(
            f"--offset-json-file {path}: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", 2
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise CliError(f'--offset-json-file {path}: expected {{"partitions": [...], "version": 1}}', 2)
    if doc.get("version", 1) != 1:
        raise CliError(f"--offset-json-file {path}: version {doc.get('version')!r} (only 1 exists)", 2)
    out, seen = [], set()
    for i, p in enumerate(doc["partitions"]):
        if (
            not isinstance(p, dict)
            or not isinstance(p.get("topic"), str)
            or not isinstance(p.get("partition"), int)
            or not isinstance(p.get("offset"), int)
        ):
            raise CliError(
                f'--offset-json-file {path}: partitions[{i}] needs "topic" (string), '
                '"partition" and "offset" (numbers)',
                2,
            )
        if (p["topic"], p["partition"]) in seen:
            raise CliError(f"--offset-json-file {path}: {p['topic']}-{p['partition']} given twice", 2)
        seen.add((p["topic"], p["partition"]))
        out.append((p["topic"], p["partition"], p["offset"]))
    if not out:
        raise CliError(f"--offset-json-file {path}: no partitions", 2)
    return out


@_run
def records_delete(args) -> int:
    from broker.protocol.errors import KafkaProtocolError

    plan = read_offsets_json(args.offset_json_file)
    print("Executing records delete operation")
    lines, failed = [], 0
    with connect(args) as c:
        for topic, partition, offset in plan:
            try:
                meta = c.topic(topic)
                if partition not in meta.partitions:
                    from broker.protocol.errors import ErrorCode

                    raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition}")
                low = c.delete_records(topic, {partition: offset})[partition]
                lines.append(f"partition: {topic}-{partition}\tlow_watermark: {low}")
            except KafkaProtocolError as exc:
                failed += 1
                lines.append(f"partition: {topic}-{partition}\terror: {exc}")
    print("Records delete operation completed:")
    for line in lines:
        print(line)
    return 1 if failed else 0


# ---------------------------------------------------------------------- offsets

TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3}


def _time(value: str) -> int:
    if value in TIMES:
        return TIMES[value]
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "--time: earliest, latest, max-timestamp, -1, -2, -3 or a timestamp in ms"
        ) from None


@_run
def offsets(args) -> int:
    partitions = _ints(args.partitions, "--partitions")
    with connect(args) as c:
        every = c.refresh(None)
        if args.topic is None:
            names = sorted(every)
        elif args.topic in every:
            names = [args.topic]
        else:
            try:
                pattern = re.compile(args.topic)
            except re.error:
                pattern = re.compile(re.escape(args.topic))
            names = sorted(t for t in every if pattern.fullmatch(t))
        if args.exclude_internal_topics:
            names = [t for t in names if not every[t].internal]
        if not names:
            raise CliError(f"offsets: no topic matches {args.topic!r}" if args.topic else "offsets: no topics")
        for name in names:
            wanted = sorted(every[name].partitions)
            if partitions is not None:
                wanted = [p for p in wanted if p in partitions]
            if not wanted:
                continue
            got = c.list_offsets(name, wanted, args.time)
            for p in wanted:
                offset, _ = got[p]
                if offset >= 0:  # none at or after --time: no line, as Kafka's tool
                    print(f"{name}:{p}:{offset}")
    return 0


# ---------------------------------------------------------------------- parsers


def add_parsers(sub) -> None:
    cf = sub.add_parser(
        "configs",
        help="describe and alter topic configs, dynamic broker configs and group configs (Kafka's kafka-configs)",
    )
    cs = cf.add_subparsers(dest="configs_command", metavar="ACTION")
    cs.required = True
    for action, helptext in (
        ("describe", "configs of a topic, a broker or a group: the dynamic ones, or --all with sources and synonyms"),
        (
            "alter",
            "set (--add-config) or remove (--delete-config) a topic's overrides, "
            "a broker's (or the cluster default's) dynamic configs, or a group's configs",
        ),
    ):
        p = cs.add_parser(action, help=helptext)
        _bootstrap(p)
        p.add_argument("--topic", metavar="TOPIC", help="the topic")
        p.add_argument("--broker", metavar="ID", help="the broker")
        p.add_argument("--group", metavar="GROUP", help="the group (its group configs)")
        p.add_argument(
            "--entity-type", choices=["topics", "brokers", "groups"], help="as Kafka's tool: topics, brokers or groups"
        )
        p.add_argument("--entity-name", metavar="NAME", help="as Kafka's tool: the topic name, broker id or group id")
        p.add_argument(
            "--entity-default",
            action="store_true",
            help="as Kafka's tool, with --entity-type brokers: the cluster-wide default",
        )
        if action == "describe":
            p.add_argument("--all", action="store_true", help="every config, not only the dynamic ones")
            p.set_defaults(func=configs_describe)
        else:
            p.add_argument(
                "--add-config",
                action="append",
                metavar="K=V,K2=[A,B]",
                help="configs to set, Kafka's syntax (repeatable)",
            )
            p.add_argument("--delete-config", action="append", metavar="K1,K2", help="overrides to remove (repeatable)")
            p.set_defaults(func=configs_alter)

    ld = sub.add_parser("log-dirs", help="each broker's log directories and partition sizes (kafka-log-dirs)")
    lds = ld.add_subparsers(dest="log_dirs_command", metavar="ACTION")
    lds.required = True
    p = lds.add_parser("describe", help="log dirs, partition sizes and offset lags as Kafka's JSON")
    _bootstrap(p)
    p.add_argument("--broker-list", metavar="1,2", help="only these brokers (default: all)")
    p.add_argument("--topic-list", metavar="T1,T2", help="only these topics (default: all)")
    p.set_defaults(func=log_dirs_describe)

    rc = sub.add_parser("records", help="delete records below an offset (kafka-delete-records)")
    rcs = rc.add_subparsers(dest="records_command", metavar="ACTION")
    rcs.required = True
    p = rcs.add_parser(
        "delete",
        help="move partitions' log start offsets up, as Kafka's offsets JSON says",
        description="Delete every record below the given offset of each partition (-1: up to "
        'the high watermark). The file is Kafka\'s: {"partitions": [{"topic": '
        '"t", "partition": 0, "offset": 10}], "version": 1}. Exit 1 if a '
        "partition failed (each said on its line).",
    )
    _bootstrap(p)
    p.add_argument("--offset-json-file", required=True, metavar="FILE", help="the plan, Kafka's JSON")
    p.set_defaults(func=records_delete)

    p = sub.add_parser(
        "offsets",
        help="partitions' earliest, latest or by-time offsets (kafka-get-offsets)",
        description="Print TOPIC:PARTITION:OFFSET for each partition, as Kafka's GetOffsetShell: "
        "the latest offset (the log end, default), the earliest, the one of the "
        "record with the highest timestamp, or the first at or after a time in ms "
        "(no line for a partition that has none).",
    )
    _bootstrap(p)
    p.add_argument("--topic", "-t", metavar="TOPIC", help="a topic, or a regular expression (default: all)")
    p.add_argument("--partitions", metavar="0,1", help="only these partitions")
    p.add_argument(
        "--time",
        type=_time,
        default=-1,
        metavar="TIME",
        help="earliest (-2), latest (-1, default), max-timestamp (-3) or a timestamp in ms",
    )
    p.add_argument("--exclude-internal-topics", action="store_true", help="leave __consumer_offsets out")
    p.set_defaults(func=offsets)
