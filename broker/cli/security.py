"""`broker users` and `broker acls`.

`broker users`: SCRAM users (the credentials Kafka's kafka-configs --entity-type users
manages), through a running broker (AlterUserScramCredentials /
DescribeUserScramCredentials) or, before any broker runs, straight into ZooKeeper
(`--zookeeper`, as Kafka's kafka-configs --zookeeper does to create the inter-broker user).

    broker users add NAME [--mechanism M ...] [--iterations N] [--password P]  (else one line of stdin)
    broker users list
    broker users delete NAME [--mechanism M ...]

`broker acls` (CreateAcls, DescribeAcls, DeleteAcls; the options of Kafka's kafka-acls):

    broker acls add --allow-principal User:alice --operation Read --topic clicks [--resource-pattern-type prefixed]
    broker acls list [--topic T | --group G | --cluster ...] [--principal User:alice]
    broker acls remove --topic clicks [--principal User:alice] [--operation Read]
"""

from __future__ import annotations

import argparse
import secrets
import sys

from broker.cli.clients import _bootstrap, _run, connect
from broker.cli.errors import CliError

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _password(args) -> str:
    if args.password is not None:
        return args.password
    line = sys.stdin.readline().rstrip("\n")
    if not line:
        raise CliError("no password: give --password or one line on stdin", 2)
    return line


@_run
def users_add(args) -> int:
    from broker.security.scram import DEFAULT_ITERATIONS, MECHANISM_NUMBERS, ScramCredential, salted_password

    password = _password(args)
    mechanisms = args.mechanism or ["SCRAM-SHA-512"]
    iterations = args.iterations or DEFAULT_ITERATIONS
    if args.zookeeper:

        async def write(store):
            config = await store.get_user_config(args.name)
            for m in mechanisms:
                config[m] = ScramCredential.from_password(m, password, iterations).to_text()
            await store.set_user_config(args.name, config)

        _with_zookeeper(args.zookeeper, write)
    else:
        from broker.protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest as R

        ups = []
        for m in mechanisms:
            salt = secrets.token_bytes(32)
            ups.append(
                R.ScramCredentialUpsertion(
                    name=args.name,
                    mechanism=MECHANISM_NUMBERS[m],
                    iterations=iterations,
                    salt=salt,
                    salted_password=salted_password(m, password, salt, iterations),
                )
            )
        _alter(args, R(deletions=[], upsertions=ups))
    print(f"user {args.name}: {', '.join(mechanisms)} credentials set ({iterations} iterations)")
    return 0


@_run
def users_delete(args) -> int:
    from broker.security.scram import MECHANISM_NUMBERS

    if args.zookeeper:

        async def write(store):
            config = await store.get_user_config(args.name)
            for m in args.mechanism or MECHANISMS:
                config.pop(m, None)
            await store.set_user_config(args.name, config)

        _with_zookeeper(args.zookeeper, write)
    else:
        from broker.protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest as R

        mechanisms = args.mechanism or [m for m, _ in _describe(args).get(args.name, [])]
        if not mechanisms:
            raise CliError(f"RESOURCE_NOT_FOUND: user {args.name} has no SCRAM credentials")
        _alter(
            args,
            R(
                upsertions=[],
                deletions=[
                    R.ScramCredentialDeletion(name=args.name, mechanism=MECHANISM_NUMBERS[m]) for m in mechanisms
                ],
            ),
        )
    print(f"user {args.name}: credentials deleted")
    return 0


@_run
def users_list(args) -> int:
    for user, creds in sorted(_describe(args).items()):
        print(f"{user}\t" + "\t".join(f"{m} iterations={n}" for m, n in creds))
    return 0


def _alter(args, request) -> None:
    from broker.protocol.errors import ErrorCode

    with connect(args) as c:
        resp = c.any_connection().request(request)
    for r in resp.results:
        if r.error_code:
            raise CliError(f"{ErrorCode(r.error_code).name}: user {r.user}: {r.error_message}")


def _describe(args) -> dict[str, list[tuple[str, int]]]:
    from broker.protocol.errors import ErrorCode
    from broker.protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
    from broker.security.scram import MECHANISM_IDS

    with connect(args) as c:
        resp = c.any_connection().request(DescribeUserScramCredentialsRequest(users=None))
    if resp.error_code:
        raise CliError(f"{ErrorCode(resp.error_code).name}: {resp.error_message}")
    return {
        r.user: [(MECHANISM_IDS.get(i.mechanism, str(i.mechanism)), i.iterations) for i in r.credential_infos]
        for r in resp.results
        if not r.error_code
    }


def _with_zookeeper(connect_string: str, fn) -> None:
    import asyncio

    from broker.cluster.store.errors import StoreError

    async def run():
        from broker.cluster.store.zkclient import KafkaZkClient

        store = KafkaZkClient(connect_string, connection_timeout_ms=10000)
        await store.start()
        try:
            await fn(store)
        finally:
            await store.close()

    try:
        asyncio.run(run())
    except (StoreError, ValueError) as exc:
        raise CliError(f"ZooKeeper {connect_string}: {exc}") from None


def add_parsers(sub) -> None:
    u = sub.add_parser(
        "users", help="SCRAM users: add, list, delete (the credentials, never the passwords, are stored)"
    )
    us = u.add_subparsers(dest="users_command", metavar="ACTION")
    us.required = True

    def target(p: argparse.ArgumentParser) -> None:
        _bootstrap(p)
        p.add_argument(
            "--zookeeper",
            metavar="HOST:PORT[/CHROOT]",
            help="write ZooKeeper directly, with no broker running (the inter-broker user before the first start)",
        )

    p = us.add_parser("add", help="set a user's SCRAM credentials (add or change the password)")
    target(p)
    p.add_argument("name", help="the user name")
    p.add_argument("--mechanism", action="append", choices=MECHANISMS, help="repeatable (default SCRAM-SHA-512)")
    p.add_argument("--iterations", type=int, help="PBKDF2 iterations, 4096 to 16384 (default 4096)")
    p.add_argument("--password", help="the password (default: one line read from stdin, kept out of ps)")
    p.set_defaults(func=users_add)
    p = us.add_parser("list", help="users and their SCRAM mechanisms")
    _bootstrap(p)
    p.set_defaults(func=users_list)
    p = us.add_parser("delete", help="delete a user's SCRAM credentials")
    target(p)
    p.add_argument("name", help="the user name")
    p.add_argument("--mechanism", action="append", choices=MECHANISMS, help="repeatable (default: all)")
    p.set_defaults(func=users_delete)


# ---------------------------------------------------------------------------- acls

_TYPES = {"topic": 2, "group": 3, "cluster": 4, "transactional-id": 5, "user": 7}
_OPERATIONS = (
    "All",
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "ClusterAction",
    "DescribeConfigs",
    "AlterConfigs",
    "IdempotentWrite",
)


def _resource(args) -> tuple[int, str]:
    given = [(t, getattr(args, t.replace("-", "_"))) for t in _TYPES if getattr(args, t.replace("-", "_"), None)]
    if args.cluster:
        given.append(("cluster", "kafka-cluster"))
    if len(given) != 1:
        raise CliError("name one resource: --topic, --group, --transactional-id, --user or --cluster", 2)
    kind, name = given[0]
    return _TYPES[kind], name


def _operation_code(name: str) -> int:
    from broker.security.acl import OPERATION_NAMES

    codes = {v.lower(): int(k) for k, v in OPERATION_NAMES.items()}
    key = name.replace("-", "").replace("_", "").lower()
    if key not in codes:
        raise CliError(f"--operation {name}: one of {', '.join(_OPERATIONS)}", 2)
    return codes[key]


@_run
def acls_add(args) -> int:
    from broker.protocol.errors import ErrorCode
    from broker.protocol.messages.create_acls import CreateAclsRequest

    rtype, name = _resource(args)
    pattern = 4 if args.resource_pattern_type == "prefixed" else 3
    creations = []
    for principal, permission in [(p, 3) for p in args.allow_principal or []] + [
        (p, 2) for p in args.deny_principal or []
    ]:
        for op in args.operation or ["All"]:
            for host in (args.allow_host if permission == 3 else args.deny_host) or ["*"]:
                creations.append(
                    CreateAclsRequest.AclCreation(
                        resource_type=rtype,
                        resource_name=name,
                        resource_pattern_type=pattern,
                        principal=principal,
                        host=host,
                        operation=_operation_code(op),
                        permission_type=permission,
                    )
                )
    if not creations:
        raise CliError("give --allow-principal or --deny-principal", 2)
    with connect(args) as c:
        resp = c.any_connection().request(CreateAclsRequest(creations=creations))
    for cr, r in zip(creations, resp.results):
        if r.error_code:
            raise CliError(f"{ErrorCode(r.error_code).name}: {r.error_message}")
        print(
            f"added: {'ALLOW' if cr.permission_type == 3 else 'DENY'} {cr.principal} {_operation_name(cr.operation)} "
            f"from {cr.host} on {args.resource_pattern_type.upper()} {name}"
        )
    return 0


def _operation_name(code: int) -> str:
    from broker.security.acl import Operation

    return Operation(code).name


def _filter(args, cls):
    rtype, name = (1, None)
    if any(getattr(args, t.replace("-", "_"), None) for t in _TYPES) or args.cluster:
        rtype, name = _resource(args)
    pattern = {"literal": 3, "prefixed": 4, "match": 2, "any": 1}[args.resource_pattern_type]
    return cls(
        resource_type_filter=rtype,
        resource_name_filter=name,
        pattern_type_filter=pattern,
        principal_filter=args.principal,
        host_filter=None,
        operation=_operation_code(args.operation[0]) if args.operation else 1,
        permission_type=1,
    )


@_run
def acls_list(args) -> int:
    from broker.protocol.errors import ErrorCode
    from broker.protocol.messages.describe_acls import DescribeAclsRequest
    from broker.security.acl import Operation, PatternType, Permission, ResourceType

    f = _filter(args, DescribeAclsRequest)
    with connect(args) as c:
        resp = c.any_connection().request(f)
    if resp.error_code:
        raise CliError(f"{ErrorCode(resp.error_code).name}: {resp.error_message}")
    for r in resp.resources:
        print(f"{ResourceType(r.resource_type).name}:{PatternType(r.pattern_type).name}:{r.resource_name}")
        for a in r.acls:
            print(f"\t{Permission(a.permission_type).name} {a.principal} {Operation(a.operation).name} from {a.host}")
    return 0


@_run
def acls_remove(args) -> int:
    from broker.protocol.errors import ErrorCode
    from broker.protocol.messages.delete_acls import DeleteAclsRequest

    f = _filter(args, DeleteAclsRequest.DeleteAclsFilter)
    with connect(args) as c:
        resp = c.any_connection().request(DeleteAclsRequest(filters=[f]))
    r = resp.filter_results[0]
    if r.error_code:
        raise CliError(f"{ErrorCode(r.error_code).name}: {r.error_message}")
    print(f"removed {len(r.matching_acls)} ACLs")
    return 0


def add_acl_parsers(sub) -> None:
    a = sub.add_parser("acls", help="ACLs: add, list, remove (as Kafka's kafka-acls)")
    acts = a.add_subparsers(dest="acls_command", metavar="ACTION")
    acts.required = True

    def resource(p: argparse.ArgumentParser, default_pattern: str) -> None:
        _bootstrap(p)
        p.add_argument("--topic", help="a TOPIC resource (a name, or a prefix with --resource-pattern-type prefixed)")
        p.add_argument("--group", help="a GROUP resource")
        p.add_argument("--transactional-id", help="a TRANSACTIONAL_ID resource")
        p.add_argument("--user", help="a USER resource (for delegation-token and quota rights)")
        p.add_argument("--cluster", action="store_true", help="the CLUSTER resource")
        p.add_argument(
            "--resource-pattern-type",
            default=default_pattern,
            choices=["literal", "prefixed"] + (["match", "any"] if default_pattern == "any" else []),
            help=f"how the name matches (default {default_pattern})",
        )
        p.add_argument(
            "--operation", action="append", metavar="OP", help=f"repeatable: {', '.join(_OPERATIONS)} (default All)"
        )

    p = acts.add_parser("add", help="add ALLOW/DENY ACLs")
    resource(p, "literal")
    p.add_argument("--allow-principal", action="append", metavar="TYPE:NAME", help="e.g. User:alice (repeatable)")
    p.add_argument("--deny-principal", action="append", metavar="TYPE:NAME", help="e.g. User:bob (repeatable)")
    p.add_argument("--allow-host", action="append", help="address or CIDR block (default *)")
    p.add_argument("--deny-host", action="append", help="address or CIDR block (default *)")
    p.set_defaults(func=acls_add)
    for name, fn, what in (
        ("list", acls_list, "list ACLs (all, or those matching the options)"),
        ("remove", acls_remove, "remove the ACLs matching the options"),
    ):
        p = acts.add_parser(name, help=what)
        resource(p, "any")
        p.add_argument("--principal", metavar="TYPE:NAME", help="only this principal's ACLs")
        p.set_defaults(func=fn)
