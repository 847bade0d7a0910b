"""`broker share-groups list|describe` (Kafka's kafka-share-groups verbs).

- `list` prints every share group of the cluster with its state (ListGroups with the type
  filter "share", asked of every broker: each answers for the groups it coordinates);
  `--state STATE` keeps those in that state.
- `describe GROUP --state` prints the group's coordinator, assignor, state, epochs and
  member count; `describe GROUP --members` one line per member with its epoch, client,
  host and assigned partitions (ShareGroupDescribe, asked of the group's coordinator).
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
    with connect(args) as c:
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
            assigned = [f"{tp.topic_name}:{p}" for tp in m.assignment.topic_partitions for p in sorted(tp.partitions)]
            print(
                f"{g.group_id}\t{m.member_id}\t{m.member_epoch}\t{m.client_host}\t{m.client_id}\t{len(assigned)}\t"
                f"{','.join(assigned) or '-'}"
            )
    return 0


def add_parsers(sub) -> None:
    from broker.cli.clients import _bootstrap, _named

    g = sub.add_parser("share-groups", help="list and describe share groups (KIP-932)")
    gs = g.add_subparsers(dest="share_groups_command", metavar="ACTION")
    gs.required = True
    p = gs.add_parser("list", help="share groups with their state")
    _bootstrap(p)
    p.add_argument("--state", help="only the groups in this state (Empty, Stable)")
    p.set_defaults(func=_wrap(share_groups_list))
    p = gs.add_parser("describe", help="a share group's state (--state) or members and assignments (--members)")
    _bootstrap(p)
    _named(p, "group", "the share group id")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--members", action="store_true", help="one line per member: epoch, client, assignment")
    what.add_argument("--state", action="store_true", help="coordinator, assignor, state, epochs, member count")
    p.set_defaults(func=_wrap(share_groups_describe))
