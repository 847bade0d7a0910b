"""`broker topics reassign`: Kafka's kafka-reassign-partitions (ReassignPartitionsCommand)
over AlterPartitionReassignments / ListPartitionReassignments, with Kafka's JSON files:

    --generate  --topics-to-move-json-file F --broker-list 1,2,3
                {"version":1,"topics":[{"topic":"orders"}]} -> prints the current
                assignment and a proposed one over the brokers given (Kafka's
                assignReplicasToBrokers, rack-aware when the brokers have racks)
    --execute   --reassignment-json-file F [--additional] [--throttle BYTES_PER_S]
                {"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[1,2,4],
                 "log_dirs":["any","any","any"]}]} -> prints the current assignment (to roll
                back with) and starts the moves; refused while another reassignment runs
                unless --additional. --throttle first sets Kafka's replication throttles:
                leader.replication.throttled.replicas (the moving partitions' current
                replicas) and follower.replication.throttled.replicas (the replicas being
                added) on their topics, leader/follower.replication.throttled.rate on every
                broker involved (ReassignPartitionsCommand.modifyReassignmentThrottle)
    --verify    --reassignment-json-file F [--preserve-throttles]: each partition's status
                (completed, still in progress, or a replica set other than the plan's);
                once none is in progress, removes the throttles (the rates of every live
                broker, the throttled replicas of the plan's topics) as Kafka's
                clearAllThrottles, unless --preserve-throttles
    --cancel    --reassignment-json-file F: the reassignments of the plan's partitions
                still in progress go back to their original replicas
    --list      the reassignments in progress: replicas, adding, removing
    --balance   [--broker-list L] [--topics-to-move-json-file F]: a plan evening out replicas
                and preferred leaders with few moves (broker/cli/balance.py)

Errors are one line; --verify exits 0 like Kafka's whatever the status, and 1 when it
cannot tell. log_dirs other than "any" are refused (kbroker has one log dir per
broker to choose among: AlterReplicaLogDirs is not served).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from broker.cli.errors import CliError

Plan = dict[tuple[str, int], list[int]]


def add_parser(ts: Any, bootstrap: Any, run: Any) -> None:
    p = ts.add_parser(
        "reassign", help="move partition replicas between brokers (Kafka's kafka-reassign-partitions JSON files)"
    )
    bootstrap(p)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--generate", action="store_true", help="propose a plan for --topics-to-move-json-file over --broker-list"
    )
    mode.add_argument("--execute", action="store_true", help="start the plan of --reassignment-json-file")
    mode.add_argument("--verify", action="store_true", help="whether the plan's moves are done")
    mode.add_argument("--cancel", action="store_true", help="cancel the plan's moves still in progress")
    mode.add_argument("--list", action="store_true", help="the partition reassignments in progress")
    mode.add_argument(
        "--balance",
        action="store_true",
        help="propose a plan evening out replicas and preferred leaders over the brokers "
        "(--broker-list, default all; --topics-to-move-json-file, default every topic "
        "but the internal ones) with few moves, racks kept apart",
    )
    p.add_argument("--reassignment-json-file", metavar="FILE", help='a plan: {"version":1,"partitions":[...]}')
    p.add_argument(
        "--topics-to-move-json-file", metavar="FILE", help='{"version":1,"topics":[{"topic":"t"}]} (with --generate)'
    )
    p.add_argument("--broker-list", metavar="IDS", help="brokers to spread the replicas over (with --generate)")
    p.add_argument("--additional", action="store_true", help="execute even though other reassignments are in progress")
    p.add_argument(
        "--throttle",
        type=int,
        default=-1,
        metavar="BYTES_PER_S",
        help="with --execute: hold the moves' replication to this many bytes/s (Kafka's "
        "replication throttles; --verify removes them once complete)",
    )
    p.add_argument(
        "--preserve-throttles", action="store_true", help="with --verify: leave the replication throttles in place"
    )
    p.set_defaults(func=run(reassign))


def reassign(args: argparse.Namespace) -> int:
    from broker.cli.clients import connect

    if args.throttle >= 0 and not args.execute:
        raise CliError("topics reassign: --throttle goes with --execute", 2)
    if args.preserve_throttles and not args.verify:
        raise CliError("topics reassign: --preserve-throttles goes with --verify", 2)
    with connect(args) as c:
        if args.generate:
            return _generate(c, args)
        if args.balance:
            return _balance(c, args)
        if args.list:
            print(listing(c.list_partition_reassignments()))
            return 0
        plan = read_plan(_need(args.reassignment_json_file, "--reassignment-json-file"))
        if args.execute:
            return _execute(c, plan, args.additional, args.throttle)
        if args.verify:
            return _verify(c, plan, args.preserve_throttles)
        return _cancel(c, plan)


# ---------------------------------------------------------------------- files


def _need(value: str | None, option: str) -> str:
    if value is None:
        raise CliError(f"topics reassign: {option} is required here", 2)
    return value


def _load(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}", 2) from None
    except ValueError as exc:
        raise CliError(f"{path} is not JSON: {exc}", 2) from None


def read_plan(path: str) -> Plan:
    """Kafka's reassignment JSON -> {(topic, partition): replicas}; one-line errors for
    what Kafka's tool refuses (duplicates, empty replica lists, log dirs)."""
    data = _load(path)
    parts = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(parts, list) or not parts:
        raise CliError(f'{path}: no "partitions" list: nothing to reassign', 2)
    plan: Plan = {}
    for i, e in enumerate(parts):
        if not isinstance(e, dict):
            raise CliError(f"{path}: partitions[{i}] is not an object", 2)
        topic, partition, replicas = e.get("topic"), e.get("partition"), e.get("replicas")
        if (
            not isinstance(topic, str)
            or type(partition) is not int
            or not isinstance(replicas, list)
            or not all(type(r) is int for r in replicas)
        ):
            raise CliError(f'{path}: partitions[{i}] needs "topic", "partition" and "replicas" (integers)', 2)
        if not replicas:
            raise CliError(f"Partition {topic}-{partition} has an empty replica list", 2)
        if len(set(replicas)) != len(replicas):
            raise CliError(f"Partition {topic}-{partition} has duplicate replicas {replicas}", 2)
        dirs = e.get("log_dirs")
        if dirs is not None and (not isinstance(dirs, list) or any(d != "any" for d in dirs)):
            raise CliError(f'Partition {topic}-{partition}: log_dirs other than "any" are not supported', 2)
        if (topic, partition) in plan:
            raise CliError(f"Partition {topic}-{partition} appears more than once in {path}", 2)
        plan[(topic, partition)] = replicas
    return plan


def plan_json(plan: Plan) -> str:
    """Kafka's format (formatAsReassignmentJson), partitions in order."""
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
                for (t, p), r in sorted(plan.items())
            ],
        },
        separators=(",", ":"),
    )


def _current(c: Any, topics: set[str]) -> Plan:
    out: Plan = {}
    for topic in sorted(topics):
        meta = c.topic(topic)
        for p, pm in meta.partitions.items():
            out[(topic, p)] = list(pm.replicas)
    return out


def _parts(tps: Any) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(tps))


# ---------------------------------------------------------------------- modes


def _generate(c: Any, args: argparse.Namespace) -> int:
    from broker.cluster.controller.assignment import assign_replicas
    from broker.protocol.errors import KafkaProtocolError

    path = _need(args.topics_to_move_json_file, "--topics-to-move-json-file")
    brokers_arg = _need(args.broker_list, "--broker-list")
    try:
        brokers = sorted({int(b) for b in brokers_arg.split(",") if b.strip()})
    except ValueError:
        raise CliError(f"--broker-list {brokers_arg!r}: expected broker ids like 1,2,3", 2) from None
    data = _load(path)
    topics = [t.get("topic") for t in data.get("topics", [])] if isinstance(data, dict) else []
    if not topics or not all(isinstance(t, str) for t in topics):
        raise CliError(f'{path}: expected {{"version":1,"topics":[{{"topic":"name"}}]}}', 2)
    c.refresh([])
    info = c.describe_cluster()
    racks = {b.broker_id: b.rack for b in info.brokers}
    unknown = [b for b in brokers if b not in racks]
    if unknown:
        raise CliError(f"--broker-list names brokers that are not alive: {unknown}", 2)
    current = _current(c, set(topics))
    proposed: Plan = {}
    for topic in dict.fromkeys(topics):
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])]) if parts else 0
        try:
            assigned = assign_replicas({b: racks[b] for b in brokers}, len(parts), rf)
        except KafkaProtocolError as exc:
            raise CliError(f"cannot place {topic}: {exc}") from None
        for p in parts:
            proposed[(topic, p)] = assigned[p]
    print("Current partition replica assignment")
    print(plan_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(proposed))
    return 0


def _balance(c: Any, args: argparse.Namespace) -> int:
    from broker.cli.balance import balance

    c.refresh([])
    racks = {b.broker_id: b.rack for b in c.describe_cluster().brokers}
    if args.broker_list is not None:
        try:
            wanted = {int(b) for b in args.broker_list.split(",") if b.strip()}
        except ValueError:
            raise CliError(f"--broker-list {args.broker_list!r}: expected broker ids like 1,2,3", 2) from None
        unknown = sorted(wanted - set(racks))
        if unknown:
            raise CliError(f"--broker-list names brokers that are not alive: {unknown}", 2)
        racks = {b: r for b, r in racks.items() if b in wanted}
    if args.topics_to_move_json_file is not None:
        data = _load(args.topics_to_move_json_file)
        topics = {t.get("topic") for t in data.get("topics", [])} if isinstance(data, dict) else set()
        if not topics or not all(isinstance(t, str) for t in topics):
            raise CliError(
                f'{args.topics_to_move_json_file}: expected {{"version":1,"topics":[{{"topic":"name"}}]}}', 2
            )
    else:
        topics = {name for name, meta in c.refresh(None).items() if not meta.internal}
    current = _current(c, topics)
    proposed = balance(current, racks)
    print("Current partition replica assignment")
    print(plan_json({tp: current[tp] for tp in proposed}))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(proposed) if proposed else "(none: replicas and preferred leaders are even already)")
    return 0


def _execute(c: Any, plan: Plan, additional: bool, throttle: int = -1) -> int:
    from broker.protocol.errors import ErrorCode

    current = _current(c, {t for t, _ in plan})
    missing = [tp for tp in plan if tp not in current]
    if missing:
        raise CliError(f"Topic or partition {_parts(missing)} does not exist")
    ongoing = c.list_partition_reassignments()
    if not additional and ongoing:
        raise CliError(
            "Cannot execute because there is an existing partition assignment. Use --additional to "
            "override this and create a new partition assignment in addition to the existing one."
        )
    print("Current partition replica assignment")
    print()
    print(plan_json({tp: current[tp] for tp in plan}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if throttle >= 0:
        print(
            "Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
            "throttle is removed."
        )
        set_throttles(c, current, plan, {tp: (r, a) for tp, (r, a, _rm) in ongoing.items()}, throttle)
        print(f"The inter-broker throttle limit was set to {throttle} B/s")
    results = c.alter_partition_reassignments({tp: list(r) for tp, r in plan.items()})
    failed = {tp: (err, msg) for tp, (err, msg) in results.items() if err != ErrorCode.NONE}
    if failed:
        first = sorted(failed)[0]
        err, msg = failed[first]
        raise CliError(
            f"Error reassigning partition(s): {_parts(failed)}: {first[0]}-{first[1]}: "
            f"{ErrorCode(err).name}{': ' + msg if msg else ''}"
        )
    print(f"Successfully started partition reassignment{'s' if len(plan) > 1 else ''} for {_parts(plan)}")
    return 0


def listing(ongoing: dict[tuple[str, int], tuple[list[int], list[int], list[int]]]) -> str:
    """--list, in Kafka's words (curReassignmentsToString)."""
    if not ongoing:
        return "No partition reassignments found."
    lines = ["Current partition reassignments:"]
    for (t, p), (replicas, adding, removing) in sorted(ongoing.items()):
        line = f"{t}-{p}: replicas: {','.join(map(str, replicas))}."
        if adding:
            line += f" adding: {','.join(map(str, adding))}."
        if removing:
            line += f" removing: {','.join(map(str, removing))}."
        lines.append(line)
    return "\n".join(lines)


def set_throttles(
    c: Any, current: Plan, plan: Plan, ongoing: dict[tuple[str, int], tuple[list[int], list[int]]], rate: int
) -> None:
    """Kafka's modifyReassignmentThrottle: the topics' throttled replicas, then the rate on
    every broker a move reads from or writes to."""
    from broker.cluster.replica.throttle import (
        FOLLOWER_RATE,
        FOLLOWER_REPLICAS,
        LEADER_RATE,
        LEADER_REPLICAS,
        reassignment_throttles,
    )

    leader, follower = reassignment_throttles(current, plan, ongoing)
    for topic in sorted(set(leader) | set(follower)):
        configs = {LEADER_REPLICAS: leader[topic]} if topic in leader else {}
        if topic in follower:
            configs[FOLLOWER_REPLICAS] = follower[topic]
        c.alter_topic_configs(topic, configs)
    brokers = {
        int(pair.split(":")[1]) for lists in (leader, follower) for v in lists.values() for pair in v.split(",") if pair
    }
    for broker in sorted(brokers):
        c.alter_broker_configs(broker, {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)})


def clear_throttles(c: Any, plan: Plan) -> None:
    """Kafka's clearAllThrottles: the throttle rates of every live broker (Kafka adds the
    plan's brokers, which a dead one would fail), the throttled replicas of the plan's
    topics."""
    from broker.cluster.replica.throttle import (
        FOLLOWER_RATE,
        FOLLOWER_REPLICAS,
        LEADER_RATE,
        LEADER_REPLICAS,
    )

    brokers = sorted(b.broker_id for b in c.describe_cluster().brokers)
    print(f"Clearing broker-level throttles on broker{'s' if len(brokers) != 1 else ''} {','.join(map(str, brokers))}")
    for broker in brokers:
        c.alter_broker_configs(
            broker, delete=[LEADER_RATE, FOLLOWER_RATE, "replica.alter.log.dirs.io.max.bytes.per.second"]
        )
    topics = sorted({t for t, _ in plan})
    print(f"Clearing topic-level throttles on topic{'s' if len(topics) != 1 else ''} {','.join(topics)}")
    for topic in topics:
        c.alter_topic_configs(topic, delete=[LEADER_REPLICAS, FOLLOWER_REPLICAS])


def _verify(c: Any, plan: Plan, preserve_throttles: bool = False) -> int:
    ongoing = c.list_partition_reassignments(sorted(plan))
    current = _current(c, {t for t, _ in plan})
    print("Status of partition reassignment:")
    for tp, target in sorted(plan.items()):
        name = f"{tp[0]}-{tp[1]}"
        if tp in ongoing:
            print(f"Reassignment of partition {name} is still in progress.")
        elif tp not in current:
            print(f"Reassignment of partition {name} failed: the partition does not exist.")
        elif current[tp] == target:
            print(f"Reassignment of partition {name} is completed.")
        else:
            print(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{','.join(map(str, current[tp]))} rather than {','.join(map(str, target))}."
            )
    if not ongoing and not preserve_throttles:
        clear_throttles(c, {tp: r for tp, r in plan.items() if tp in current})
    return 0


def _cancel(c: Any, plan: Plan) -> int:
    from broker.protocol.errors import ErrorCode

    ongoing = c.list_partition_reassignments(sorted(plan))
    wanted = [tp for tp in sorted(plan) if tp in ongoing]
    if not wanted:
        print("None of the plan's partitions is being reassigned: nothing to cancel.")
        return 0
    results = c.alter_partition_reassignments({tp: None for tp in wanted})
    done = [tp for tp, (err, _m) in results.items() if err in (ErrorCode.NONE, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)]
    failed = {tp: e for tp, e in results.items() if tp not in done}
    if done:
        print(f"Successfully cancelled partition reassignment{'s' if len(done) > 1 else ''} for: {_parts(done)}")
    if failed:
        first = sorted(failed)[0]
        err, msg = failed[first]
        raise CliError(
            f"Error cancelling partition reassignment(s) of {_parts(failed)}: "
            f"{ErrorCode(err).name}{': ' + msg if msg else ''}"
        )
    return 0
