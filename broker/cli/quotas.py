"""`broker quotas`: client quotas (producer_byte_rate, consumer_byte_rate,
request_percentage) of users, client ids and (user, client id) pairs, through a running
broker (DescribeClientQuotas / AlterClientQuotas), with kafka-configs' options:

    broker quotas describe [--user U | --user-defaults] [--client C | --client-defaults]
    broker quotas alter (--user U | --user-defaults) [--client C | --client-defaults] \\
        --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152 [--delete-config K,K] [--validate-only]

describe without an entity lists every quota; with one, exactly that entity (kafka-configs
--describe). Lines as kafka-configs prints them: ``Quota configs for user-principal 'alice',
client-id 'app' are producer_byte_rate=1048576.0``.
"""

from __future__ import annotations

import argparse

from broker.cli.clients import _bootstrap, _run, connect
from broker.cli.errors import CliError

USER, CLIENT_ID = "user", "client-id"
_KIND = {USER: "user-principal", CLIENT_ID: "client-id"}


def _entity(args, required: bool) -> list[tuple[str, str | None]]:
    """[(entity type, name or None for the default)] from --user/--user-defaults, --client/--client-defaults."""
    out: list[tuple[str, str | None]] = []
    if args.user is not None and args.user_defaults:
        raise CliError("give --user or --user-defaults, not both", 2)
    if args.client is not None and args.client_defaults:
        raise CliError("give --client or --client-defaults, not both", 2)
    if args.user is not None or args.user_defaults:
        out.append((USER, args.user))
    if args.client is not None or args.client_defaults:
        out.append((CLIENT_ID, args.client))
    if required and not out:
        raise CliError("name the entity: --user NAME or --user-defaults, and/or --client NAME or --client-defaults", 2)
    return out


def _describe_entity(entity) -> str:
    return ", ".join(
        f"{_KIND.get(t, t)} '{n}'" if n is not None else f"the default {_KIND.get(t, t)}" for t, n in entity
    )


@_run
def quotas_describe(args) -> int:
    from broker.protocol.errors import ErrorCode
    from broker.protocol.messages.describe_client_quotas import DescribeClientQuotasRequest as R

    entity = _entity(args, required=False)
    components = [R.ComponentData(entity_type=t, match_type=0 if n is not None else 1, match=n) for t, n in entity]
    with connect(args) as c:
        resp = c.any_connection().request(R(components=components, strict=bool(entity)))
    if resp.error_code:
        raise CliError(f"{ErrorCode(resp.error_code).name}: {resp.error_message}")
    rows = []
    for e in resp.entries or []:
        ent = sorted(((x.entity_type, x.entity_name) for x in e.entity), key=lambda x: x[0] != USER)
        values = ", ".join(f"{v.key}={v.value!r}" for v in sorted(e.values, key=lambda v: v.key))
        rows.append(f"Quota configs for {_describe_entity(ent)} are {values}")
    for row in sorted(rows):
        print(row)
    return 0


def _configs(text: str | None, what: str, values: bool) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        if not values:
            out[item] = None
            continue
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise CliError(f"{what} {item!r}: expected key=value", 2)
        try:
            out[k] = float(v)
        except ValueError:
            raise CliError(f"{what} {item!r}: {v!r} is not a number", 2) from None
    return out


@_run
def quotas_alter(args) -> int:
    from broker.protocol.errors import ErrorCode
    from broker.protocol.messages.alter_client_quotas import AlterClientQuotasRequest as R

    entity = _entity(args, required=True)
    add = _configs(args.add_config, "--add-config", True)
    delete = _configs(args.delete_config, "--delete-config", False)
    if not add and not delete:
        raise CliError("nothing to change: give --add-config and/or --delete-config", 2)
    ops = [R.OpData(key=k, value=v or 0.0, remove=False) for k, v in add.items()]
    ops += [R.OpData(key=k, value=0.0, remove=True) for k in delete if k not in add]
    request = R(
        entries=[R.EntryData(entity=[R.EntityData(entity_type=t, entity_name=n) for t, n in entity], ops=ops)],
        validate_only=args.validate_only,
    )
    with connect(args) as c:
        resp = c.any_connection().request(request)
    for r in resp.entries:
        if r.error_code:
            raise CliError(f"{ErrorCode(r.error_code).name}: {_describe_entity(entity)}: {r.error_message}")
    verb = "would be" if args.validate_only else "are"
    print(f"Quota configs for {_describe_entity(entity)} {verb} updated")
    return 0


def add_parsers(sub) -> None:
    q = sub.add_parser(
        "quotas",
        help="client quotas (producer_byte_rate, consumer_byte_rate, request_percentage) "
        "of users and client ids: describe, alter",
    )
    qs = q.add_subparsers(dest="quotas_command", metavar="ACTION")
    qs.required = True

    def entity(p: argparse.ArgumentParser) -> None:
        _bootstrap(p)
        p.add_argument("--user", metavar="NAME", help="a user (principal name, e.g. alice for User:alice)")
        p.add_argument("--user-defaults", action="store_true", help="the default of every user (<default>)")
        p.add_argument("--client", metavar="ID", help="a client id")
        p.add_argument("--client-defaults", action="store_true", help="the default of every client id (<default>)")

    p = qs.add_parser("describe", help="quotas: all, or exactly one entity's")
    entity(p)
    p.set_defaults(func=quotas_describe)
    p = qs.add_parser("alter", help="set (--add-config) or remove (--delete-config) an entity's quotas")
    entity(p)
    p.add_argument("--add-config", metavar="K=V,K=V", help="e.g. producer_byte_rate=1048576,request_percentage=50")
    p.add_argument("--delete-config", metavar="K,K", help="e.g. producer_byte_rate")
    p.add_argument("--validate-only", action="store_true", help="check, change nothing")
    p.set_defaults(func=quotas_alter)
