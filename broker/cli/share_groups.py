"""`broker share-groups list|describe|reset-offsets|delete-offsets|delete` (Kafka's
kafka-share-groups verbs).

- `list` prints every share group of the cluster with its state (ListGroups with the type
  filter "share", asked of every broker: each answers for the groups it coordinates);
  `--state STATE` keeps those in that state.
- `describe GROUP --state` prints the group's coordinator, assignor, state, epochs and
  member count; `describe GROUP --members` one line per member with its epoch, client,
  host and assigned partitions (ShareGroupDescribe, asked of the group's coordinator).
- `describe GROUP` (or `--offsets`) prints each share-partition's start offset and lag
  (DescribeShareGroupOffsets v1), "-" where unknown.
- `reset-offsets GROUP --topic T|--all-topics --to-earliest|--to-latest|--to-offset N|
  --to-datetime T` prints the plan (GROUP TOPIC PARTITION NEW-OFFSET) and moves the
  start offsets (AlterShareGroupOffsets) only with --execute; the group must be empty.
  --to-offset outside [log start, log end] is clamped, saying so; --to-datetime takes
  Kafka's format (YYYY-MM-DDTHH:mm:SS.sss, an optional zone: Z, +hh:mm; local time
  without one).
- `delete-offsets GROUP --topic T...` deletes the state of those topics
  (DeleteShareGroupOffsets); the group must be empty.
- `delete GROUP` deletes an empty share group (DeleteGroups; its share-partitions' state
  goes with it).
"""

from __future__ import annotations

from broker.cli.clients import connect
from broker.cli.errors import CliError


def _wrap(fn):
    from broker.cli.clients import _run

    return _run(fn)


def _coordinator(cluster, group_id):
    from broker.cli.groups import _coordinator as find

    return find(cluster, group_id)


def share_groups_list(args) -> int:
    from broker.protocol.messages.list_groups import ListGroupsRequest

    with connect(args) as c:
        c.refresh([])
        seen: dict[str, str] = {}
        for node in sorted(c.brokers):
            conn = c.connection(node)
            if conn.version_for(ListGroupsRequest.API_KEY) < 5:
                raise CliError(f"broker {node} cannot list groups by type (ListGroups v5)")
            states = [args.state] if args.state else []
            r = conn.request(ListGroupsRequest(states_filter=states, types_filter=["share"]))
            for g in r.groups:
                seen.setdefault(g.group_id, g.group_state)
        print("GROUP\tSTATE")
        for gid in sorted(seen):
            print(f"{gid}\t{seen[gid]}")
    return 0


def _describe(c, group_id):
    from broker.protocol.errors import ErrorCode, KafkaProtocolError
    from broker.protocol.messages.share_group_describe import ShareGroupDescribeRequest

    conn = _coordinator(c, group_id)
    if ShareGroupDescribeRequest.API_KEY not in conn.versions:
        raise CliError(f"the coordinator of {group_id} does not serve ShareGroupDescribe")
    g = conn.request(ShareGroupDescribeRequest(group_ids=[group_id])).groups[0]
    if g.error_code:
        if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise CliError(g.error_message or f"share group {group_id} does not exist")
        raise KafkaProtocolError(g.error_code, g.error_message or f"describe share group {group_id}")
    return conn, g


def share_groups_describe(args) -> int:
    if not args.members and not args.state:
        return _describe_offsets(args)
    with connect(args) as c:
        c.refresh([])
        conn, g = _describe(c, args.group)
        if args.state:
            print("GROUP\tCOORDINATOR (ID)\tASSIGNMENT-STRATEGY\tSTATE\tGROUP-EPOCH\tASSIGNMENT-EPOCH\tMEMBERS")
            node = next((n for n, addr in c.brokers.items() if addr == (conn.host, conn.port)), -1)
            print(
                f"{g.group_id}\t{conn.host}:{conn.port} ({node})\t{g.assignor_name}\t{g.group_state}\t"
                f"{g.group_epoch}\t{g.assignment_epoch}\t{len(g.members)}"
            )
            return 0
        print("GROUP\tCONSUMER-ID\tMEMBER-EPOCH\tHOST\tCLIENT-ID\t#PARTITIONS\tASSIGNMENT")
        for m in sorted(g.members, key=lambda m: m.member_id):
            # Kafka's tool's form: TOPIC:P,P per topic, topics sorted and joined with ";"
            by_topic = sorted((tp.topic_name, sorted(tp.partitions)) for tp in m.assignment.topic_partitions)
            count = sum(len(ps) for _, ps in by_topic)
            assigned = ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in by_topic if ps)
            print(
                f"{g.group_id}\t{m.member_id}\t{m.member_epoch}\t{m.client_host}\t{m.client_id}\t{count}\t"
                f"{assigned or '-'}"
            )
    return 0


def add_parsers(sub) -> None:
    from broker.cli.clients import _bootstrap, _named

    g = sub.add_parser("share-groups", help="list, describe, reset offsets of and delete share groups (KIP-932)")
    gs = g.add_subparsers(dest="share_groups_command", metavar="ACTION")
    gs.required = True
    p = gs.add_parser("list", help="share groups with their state")
    _bootstrap(p)
    p.add_argument("--state", help="only the groups in this state (Empty, Stable)")
    p.set_defaults(func=_wrap(share_groups_list))
    p = gs.add_parser(
        "describe",
        help="a share group's start offsets and lags (the default), state (--state) or members (--members)",
    )
    _bootstrap(p)
    _named(p, "group", "the share group id")
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--offsets", action="store_true", help="start offset and lag of each share-partition (the default)"
    )
    what.add_argument("--members", action="store_true", help="one line per member: epoch, client, assignment")
    what.add_argument("--state", action="store_true", help="coordinator, assignor, state, epochs, member count")
    p.set_defaults(func=_wrap(share_groups_describe))
    p = gs.add_parser(
        "reset-offsets",
        help="move an empty share group's start offsets (prints the plan; --execute moves them)",
        description="Move an empty share group's start offsets, as Kafka's kafka-share-groups "
        "--reset-offsets: prints GROUP TOPIC PARTITION NEW-OFFSET and changes nothing unless --execute is given.",
    )
    _bootstrap(p)
    _named(p, "group", "the share group id (its members must be stopped)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", "-t", action="append", help="a topic whose start offsets move (repeatable)")
    which.add_argument("--all-topics", action="store_true", help="every topic the group has state for")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="to each partition's log start offset")
    to.add_argument("--to-latest", action="store_true", help="to each partition's log end offset")
    to.add_argument("--to-offset", type=int, metavar="N", help="to offset N, clamped to [log start, log end]")
    to.add_argument(
        "--to-datetime",
        metavar="DATETIME",
        help="to the first offset at or after this time (YYYY-MM-DDTHH:mm:SS.sss, optional zone)",
    )
    run = p.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="move the start offsets")
    run.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    p.set_defaults(func=_wrap(share_groups_reset_offsets))
    p = gs.add_parser("delete-offsets", help="delete an empty share group's state of some topics")
    _bootstrap(p)
    _named(p, "group", "the share group id")
    p.add_argument("--topic", "-t", action="append", required=True, help="a topic (repeatable)")
    p.set_defaults(func=_wrap(share_groups_delete_offsets))
    p = gs.add_parser("delete", help="delete an empty share group and its state")
    _bootstrap(p)
    _named(p, "group", "the share group id")
    p.set_defaults(func=_wrap(share_groups_delete))


# ---------------------------------------------------------------------- offsets (DescribeShareGroupOffsets ...)


def _state(c, group_id: str) -> str:
    """The group's state; "Dead" when it does not exist."""
    from broker.protocol.errors import ErrorCode
    from broker.protocol.messages.share_group_describe import ShareGroupDescribeRequest

    conn = _coordinator(c, group_id)
    g = conn.request(ShareGroupDescribeRequest(group_ids=[group_id])).groups[0]
    if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        if g.error_message and "is not a share group" in g.error_message:
            raise CliError(g.error_message)
        return "Dead"
    if g.error_code:
        from broker.protocol.errors import KafkaProtocolError

        raise KafkaProtocolError(g.error_code, g.error_message or f"describe share group {group_id}")
    return str(g.group_state)


def _offsets(c, group_id: str, topics: list[str] | None = None) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (start offset, lag)} of the group's share-partitions (all, or
    those of `topics`), from DescribeShareGroupOffsets v1."""
    from broker.protocol.errors import KafkaProtocolError
    from broker.protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as D

    conn = _coordinator(c, group_id)
    if D.API_KEY not in conn.versions:
        raise CliError(f"the coordinator of {group_id} does not serve DescribeShareGroupOffsets")
    asked = None
    if topics is not None:
        asked = [
            D.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=sorted(c.topic(t).partitions))
            for t in topics
        ]
    r = conn.request(D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=asked)]))
    g = r.groups[0]
    if g.error_code:
        raise KafkaProtocolError(g.error_code, g.error_message or f"describe the offsets of {group_id}")
    out = {}
    for t in g.topics:
        for p in t.partitions:
            if p.error_code:
                raise KafkaProtocolError(p.error_code, p.error_message or f"{t.topic_name}-{p.partition_index}")
            out[(t.topic_name, p.partition_index)] = (p.start_offset, p.lag)
    return out


def _describe_offsets(args) -> int:
    with connect(args) as c:
        _describe(c, args.group)  # a group that does not exist is said so
        offsets = _offsets(c, args.group)
        print("GROUP\tTOPIC\tPARTITION\tSTART-OFFSET\tLAG")
        for (topic, p), (start, lag) in sorted(offsets.items()):
            print(f"{args.group}\t{topic}\t{p}\t{start if start >= 0 else '-'}\t{lag if lag >= 0 else '-'}")
    return 0


def parse_datetime(text: str) -> int:
    """Kafka's --to-datetime (YYYY-MM-DDTHH:mm:SS.sss with an optional zone) in epoch ms."""
    import datetime as dt

    t = text.strip()
    if t.endswith("Z"):
        t = t[:-1] + "+00:00"
    try:
        when = dt.datetime.fromisoformat(t)
    except ValueError:
        raise CliError(f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss, optionally with a zone") from None
    if when.tzinfo is None:
        when = when.astimezone()  # local time, as Kafka's tools read it
    return int(when.timestamp() * 1000)


def share_groups_reset_offsets(args) -> int:
    import sys

    from broker.protocol.errors import KafkaProtocolError
    from broker.protocol.messages.alter_share_group_offsets import AlterShareGroupOffsetsRequest as A

    with connect(args) as c:
        state = _state(c, args.group)
        if state not in ("Empty", "Dead"):
            raise CliError(f"Share group '{args.group}' is not empty.")
        if args.all_topics:
            topics = sorted({t for t, _ in _offsets(c, args.group)}) if state != "Dead" else []
        else:
            topics = list(dict.fromkeys(args.topic))
        plan: dict[tuple[str, int], int] = {}
        for topic in topics:
            parts = sorted(c.topic(topic).partitions)
            if args.to_offset is not None:
                from broker.cli.groups import _clamped

                targets = _clamped(c, topic, parts, args.to_offset)
            elif args.to_datetime is not None:
                ts = parse_datetime(args.to_datetime)
                found = c.list_offsets(topic, parts, ts)
                ends = c.list_offsets(topic, parts, -1)
                targets = {p: (found[p][0] if found[p][0] >= 0 else ends[p][0]) for p in parts}
            else:
                ts = -2 if args.to_earliest else -1
                targets = {p: off for p, (off, _) in c.list_offsets(topic, parts, ts).items()}
            plan.update({(topic, p): o for p, o in targets.items()})
        if args.execute and plan:
            by: dict[str, list[tuple[int, int]]] = {}
            for (t, p), o in sorted(plan.items()):
                by.setdefault(t, []).append((p, o))
            req = A(
                group_id=args.group,
                topics=[
                    A.AlterShareGroupOffsetsRequestTopic(
                        topic_name=t,
                        partitions=[
                            A.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o) for p, o in ps
                        ],
                    )
                    for t, ps in by.items()
                ],
            )
            r = _coordinator(c, args.group).request(req)
            if r.error_code:
                raise KafkaProtocolError(r.error_code, r.error_message or f"reset the offsets of {args.group}")
            for t in r.responses:
                for p in t.partitions:
                    if p.error_code:
                        raise KafkaProtocolError(
                            p.error_code, p.error_message or f"reset {t.topic_name}-{p.partition_index}"
                        )
        print("GROUP\tTOPIC\tPARTITION\tNEW-OFFSET")
        for (t, p), o in sorted(plan.items()):
            print(f"{args.group}\t{t}\t{p}\t{o}")
        if not args.execute:
            print("dry run: nothing changed; add --execute to move these start offsets", file=sys.stderr)
    return 0


def share_groups_delete_offsets(args) -> int:
    from broker.protocol.errors import ErrorCode, KafkaProtocolError
    from broker.protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsRequest as D

    topics = list(dict.fromkeys(args.topic))
    with connect(args) as c:
        r = _coordinator(c, args.group).request(
            D(group_id=args.group, topics=[D.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics])
        )
        if r.error_code == ErrorCode.NON_EMPTY_GROUP:
            raise CliError(f"Share group '{args.group}' is not empty.")
        if r.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            raise CliError(r.error_message or f"share group {args.group} does not exist")
        if r.error_code:
            raise KafkaProtocolError(r.error_code, r.error_message or f"delete the offsets of {args.group}")
        failed = False
        print("TOPIC\tSTATUS")
        for t in r.responses:
            status = "Successful" if not t.error_code else f"Error: {ErrorCode(t.error_code).name}"
            failed = failed or bool(t.error_code)
            print(f"{t.topic_name}\t{status}")
    return 1 if failed else 0


def share_groups_delete(args) -> int:
    from broker.protocol.errors import ErrorCode, KafkaProtocolError
    from broker.protocol.messages.delete_groups import DeleteGroupsRequest

    with connect(args) as c:
        state = _state(c, args.group)
        if state == "Dead":
            raise CliError(f"share group {args.group} does not exist")
        r = _coordinator(c, args.group).request(DeleteGroupsRequest(groups_names=[args.group]))
        err = r.results[0].error_code
        if err == ErrorCode.NON_EMPTY_GROUP:
            raise CliError(f"Share group '{args.group}' is not empty.")
        if err:
            raise KafkaProtocolError(err, f"delete share group {args.group}")
    print(f"Deletion of requested share groups ('{args.group}') was successful.")
    return 0
