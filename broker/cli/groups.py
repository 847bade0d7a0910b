"""`broker groups list|describe|reset-offsets|delete` and `broker consume --group`.

reset-offsets works as Kafka's kafka-consumer-groups --reset-offsets: it prints the plan
(TOPIC PARTITION NEW-OFFSET) and commits it only with --execute; --to-offset outside
[log start, log end] is clamped, one line per partition saying so.
"""

from __future__ import annotations

import sys
import time

from broker.cli.clients import client_security, connect
from broker.cli.errors import CliError


def _coordinator(cluster, group_id):
    from broker.client.group import GroupConsumer

    return GroupConsumer(cluster, group_id, [], enable_auto_commit=False).coordinator()


def _describe(cluster, group_id):
    from broker.protocol.errors import KafkaProtocolError
    from broker.protocol.messages.describe_groups import DescribeGroupsRequest

    r = _coordinator(cluster, group_id).request(DescribeGroupsRequest(groups=[group_id]))
    g = r.groups[0]
    if g.error_code:
        raise KafkaProtocolError(g.error_code, f"describe group {group_id}")
    if g.group_state == "Dead" and not g.members:
        from broker.protocol.errors import ErrorCode

        raise KafkaProtocolError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} does not exist")
    return g


def _committed(cluster, group_id):
    from broker.protocol.errors import KafkaProtocolError
    from broker.protocol.messages.offset_fetch import OffsetFetchRequest

    conn = _coordinator(cluster, group_id)
    version = min(conn.version_for(OffsetFetchRequest.API_KEY), 7)
    r = conn.request(OffsetFetchRequest(group_id=group_id, topics=None), version)
    if r.error_code:
        raise KafkaProtocolError(r.error_code, f"fetch offsets of group {group_id}")
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in r.topics
        for p in t.partitions
        if p.committed_offset >= 0
    }


def _wrap(fn):
    from broker.cli.clients import _run

    return _run(fn)


def groups_list(args) -> int:
    from broker.protocol.messages.list_groups import ListGroupsRequest

    with connect(args) as c:
        c.refresh([])
        seen = set()
        for node in sorted(c.brokers):
            r = c.connection(node).request(ListGroupsRequest(states_filter=[]))
            for g in r.groups:
                if g.group_id not in seen:
                    seen.add(g.group_id)
                    print(f"{g.group_id}\t{g.group_state or '-'}\t{g.protocol_type or '-'}")
    return 0


def _describe_consumer_group(cluster, group_id):
    """A KIP-848 group's ConsumerGroupDescribe, or None (not one, or a broker without it)."""
    from broker.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest

    conn = _coordinator(cluster, group_id)
    if ConsumerGroupDescribeRequest.API_KEY not in conn.versions:
        return None
    g = conn.request(ConsumerGroupDescribeRequest(group_ids=[group_id])).groups[0]
    return g if g.error_code == 0 else None


def _describe_kip848(c, g) -> dict:
    """Prints a KIP-848 group's head and members; returns (topic, partition) -> member."""
    c.refresh(None)
    names = {t.topic_id: name for name, t in c.topics.items()}
    print(
        f"Group: {g.group_id}\tType: consumer\tState: {g.group_state}\tAssignor: {g.assignor_name}\t"
        f"Epoch: {g.group_epoch}\tMembers: {len(g.members)}"
    )
    owner = {}
    for m in g.members:
        assigned = []
        for tp in m.assignment.topic_partitions:
            topic = names.get(tp.topic_id, str(tp.topic_id))
            for p in tp.partitions:
                owner[(topic, p)] = m.member_id
                assigned.append(f"{topic}-{p}")
        print(
            f"\tMember: {m.member_id}\tEpoch: {m.member_epoch}\tClient: {m.client_id}\tHost: {m.client_host}\t"
            f"Assignment: {','.join(assigned) or '-'}"
        )
    return owner


def groups_describe(args) -> int:
    from broker.protocol.errors import ErrorCode, KafkaProtocolError
    from broker.protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment

    with connect(args) as c:
        try:
            g = _describe(c, args.group)
        except KafkaProtocolError as exc:
            kip848 = _describe_consumer_group(c, args.group) if exc.code == ErrorCode.GROUP_ID_NOT_FOUND else None
            if kip848 is None:
                raise
            owner = _describe_kip848(c, kip848)
            _print_offsets(c, args.group, owner)
            return 0
        print(
            f"Group: {g.group_id}\tState: {g.group_state}\tProtocol: {g.protocol_type or '-'}/"
            f"{g.protocol_data or '-'}\tMembers: {len(g.members)}"
        )
        owner = {}
        for m in g.members:
            assigned = []
            if m.member_assignment:
                try:
                    a, _ = ConsumerProtocolAssignment.decode_versioned(m.member_assignment)
                    for tp in a.assigned_partitions:
                        for p in tp.partitions:
                            owner[(tp.topic, p)] = m.member_id
                            assigned.append(f"{tp.topic}-{p}")
                except ValueError:
                    assigned.append("(not a consumer assignment)")
            print(
                f"\tMember: {m.member_id}\tClient: {m.client_id}\tHost: {m.client_host}\t"
                f"Assignment: {','.join(assigned) or '-'}"
            )
        _print_offsets(c, args.group, owner)
    return 0


def _print_offsets(c, group_id: str, owner: dict) -> None:
    """The group's committed offsets, log ends and lags, and which member owns each."""
    committed = _committed(c, group_id)
    tps = sorted(set(committed) | set(owner))
    ends = {}
    for topic in sorted({t for t, _ in tps}):
        parts = [p for t, p in tps if t == topic]
        try:
            for p, (off, _) in c.list_offsets(topic, parts, -1).items():
                ends[(topic, p)] = off
        except Exception:
            pass
    print("\tTOPIC\tPARTITION\tCOMMITTED\tLOG-END\tLAG\tMEMBER")
    for tp in tps:
        com = committed.get(tp)
        end = ends.get(tp)
        lag = end - com if com is not None and end is not None else "-"
        print(
            f"\t{tp[0]}\t{tp[1]}\t{com if com is not None else '-'}\t{end if end is not None else '-'}\t"
            f"{lag}\t{owner.get(tp, '-')}"
        )


def groups_reset_offsets(args) -> int:
    from broker.protocol.errors import ErrorCode, KafkaProtocolError
    from broker.protocol.messages.offset_commit import OffsetCommitRequest

    with connect(args) as c:
        try:
            g = _describe(c, args.group)
            state = g.group_state
        except KafkaProtocolError as exc:
            if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
                raise
            state = "Dead"
        if state not in ("Empty", "Dead", ""):
            raise CliError(f"group {args.group} is not empty (state {state}): stop its consumers first")
        meta = c.topic(args.topic)
        parts = sorted(meta.partitions)
        if args.to_offset is not None:
            targets = _clamped(c, args.topic, parts, args.to_offset)
        else:
            ts = -2 if args.to_earliest else -1
            targets = {p: off for p, (off, _) in c.list_offsets(args.topic, parts, ts).items()}
        if not args.execute:
            for p, o in sorted(targets.items()):
                print(f"{args.topic}\t{p}\t{o}")
            print("dry run: nothing changed; add --execute to commit these offsets", file=sys.stderr)
            return 0
        req = OffsetCommitRequest(
            group_id=args.group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name=args.topic,
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=p, committed_offset=o, committed_metadata=""
                        )
                        for p, o in sorted(targets.items())
                    ],
                )
            ],
        )
        r = _coordinator(c, args.group).request(req)
        for t in r.topics:
            for p in t.partitions:
                if p.error_code:
                    raise KafkaProtocolError(p.error_code, f"reset {t.name}-{p.partition_index}")
        for p, o in sorted(targets.items()):
            print(f"{args.topic}\t{p}\t{o}")
    return 0


def _clamped(cluster, topic: str, parts: list[int], offset: int) -> dict[int, int]:
    """`offset` for every partition, within [log start, log end], saying where it is not."""
    ends = cluster.list_offsets(topic, parts, -1)
    starts = cluster.list_offsets(topic, parts, -2)
    targets = {}
    for p in parts:
        lo, hi = starts[p][0], ends[p][0]
        targets[p] = min(max(offset, lo), hi)
        if targets[p] != offset:
            where = f"above the log end ({hi})" if offset > hi else f"below the log start ({lo})"
            print(f"offset {offset} is {where} of {topic}-{p}: using {targets[p]}", file=sys.stderr)
    return targets


def groups_delete(args) -> int:
    from broker.protocol.errors import KafkaProtocolError
    from broker.protocol.messages.delete_groups import DeleteGroupsRequest

    with connect(args) as c:
        r = _coordinator(c, args.group).request(DeleteGroupsRequest(groups_names=[args.group]))
        err = r.results[0].error_code
        if err:
            raise KafkaProtocolError(err, f"delete group {args.group}")
    print(f"deleted group {args.group}")
    return 0


def consume_group(args) -> int:
    """`broker consume --group G`: joins the group, prints messages, commits as it goes."""
    from broker.client.group import GroupConsumer

    out = sys.stdout.buffer
    sep = args.key_separator.encode()
    n = 0
    with GroupConsumer(
        args.bootstrap,
        args.group,
        [args.topic],
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        security=client_security(args),
    ) as c:
        deadline = time.monotonic() + args.timeout_ms / 1000 if args.timeout_ms is not None else None
        while args.max_messages is None or n < args.max_messages:
            records = c.poll(1.0)
            unprinted: dict[tuple[str, int], int] = {}
            for r in records:
                tp = (r.topic, r.partition)
                if args.max_messages is not None and n >= args.max_messages:
                    # poll() moved the position past this record: move it back, or the
                    # final commit would skip messages nobody printed
                    unprinted.setdefault(tp, r.offset)
                    continue
                if args.print_key:
                    out.write((r.key or b"null") + sep)
                out.write((r.value if r.value is not None else b"null") + b"\n")
                n += 1
                c.consumer.positions[tp] = r.offset + 1
            for tp, offset in unprinted.items():
                if tp in c.consumer.positions:
                    c.consumer.positions[tp] = offset
            out.flush()
            if records and deadline is not None:
                deadline = time.monotonic() + args.timeout_ms / 1000
            elif not records and deadline is not None and time.monotonic() >= deadline:
                break
        c.commit()
    print(f"consumed {n} messages", file=sys.stderr)
    return 0


def add_parsers(sub) -> None:
    from broker.cli.clients import _bootstrap, _named

    g = sub.add_parser("groups", help="list, describe, reset offsets of and delete consumer groups")
    gs = g.add_subparsers(dest="groups_command", metavar="ACTION")
    gs.required = True
    p = gs.add_parser("list", help="groups with their state")
    _bootstrap(p)
    p.set_defaults(func=_wrap(groups_list))
    p = gs.add_parser("describe", help="members, assignments, committed offsets, log end and lag")
    _bootstrap(p)
    _named(p, "group", "the group id")
    p.set_defaults(func=_wrap(groups_describe))
    p = gs.add_parser(
        "reset-offsets",
        help="move an empty group's committed offsets (prints the plan; --execute commits it)",
        description="Move an empty group's committed offsets on one topic, as Kafka's "
        "kafka-consumer-groups --reset-offsets: prints TOPIC PARTITION NEW-OFFSET "
        "and changes nothing unless --execute is given.",
    )
    _bootstrap(p)
    _named(p, "group", "the group id (its members must be stopped)")
    p.add_argument("--topic", "-t", required=True, help="the topic whose offsets move (every partition)")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="to each partition's log start offset")
    to.add_argument("--to-latest", action="store_true", help="to each partition's log end offset")
    to.add_argument(
        "--to-offset", type=int, metavar="N", help="to offset N, clamped to [log start, log end] (saying so)"
    )
    run = p.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="commit the new offsets")
    run.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    p.set_defaults(func=_wrap(groups_reset_offsets))
    p = gs.add_parser("delete", help="delete an empty group")
    _bootstrap(p)
    _named(p, "group", "the group id")
    p.set_defaults(func=_wrap(groups_delete))
