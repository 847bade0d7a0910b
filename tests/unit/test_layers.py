"""The layers' import direction: server -> cluster / group / txn -> coordinator -> log ->
native; security/ below server and cluster; of metrics/, the layers count with stats.py
only; registry/ (the schema registry) beside server, above cluster and security, below
nothing (its formats/ import nothing of the broker: a reader of registry-framed records,
the Spark source, uses them as they are); tier/ (tiered storage) above log, below
cluster and server.

share/ (KIP-932's share-partitions, the share coordinator and its persister) is below
the server like group/. Nothing in log/ knows the cluster, the coordinators or the server; nothing in cluster/,
group/, txn/ or coordinator/ knows the server; group/ and txn/ run on coordinator/ and
know nothing of each other; coordinator/, group/ and txn/ see the cluster only through
its value types (metadata.py). Every package of broker/ has its rule here (a new one
fails test_every_package_has_a_rule until it gets one).
Checked on the source with ast, so a violation in code that no test imports is caught
too.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "broker"

#: the project's own client and what runs on it: nothing of the broker
_BROKER_SIDE = (
    "broker.server",
    "broker.cluster",
    "broker.coordinator",
    "broker.group",
    "broker.txn",
    "broker.log",
    "broker.metrics",
    "broker.cli",
)
# (what the layers below the server may use of metrics/ is test_the_layers_count_with_metrics_stats_only's)

FORBIDDEN = {
    "log": (
        "broker.server",
        "broker.tier",
        "broker.cluster",
        "broker.coordinator",
        "broker.group",
        "broker.txn",
        "broker.client",
        "broker.cli",
        "broker.spark",
        "broker.registry",
    ),
    "cluster": (
        "broker.server",
        "broker.coordinator",
        "broker.group",
        "broker.txn",
        "broker.client",
        "broker.cli",
        "broker.spark",
        "broker.registry",
    ),
    # the coordinator runtime: below the coordinators that run on it
    "coordinator": (
        "broker.server",
        "broker.group",
        "broker.txn",
        "broker.client",
        "broker.cli",
        "broker.spark",
        "broker.registry",
    ),
    # tiered storage: the logs it copies, retains and reads for, below the replicas and the
    # server (which will run it); its metadata reaches the cluster through a MetadataLog
    "tier": (
        "broker.server",
        "broker.cluster",
        "broker.coordinator",
        "broker.group",
        "broker.txn",
        "broker.client",
        "broker.cli",
        "broker.spark",
        "broker.registry",
    ),
    "group": ("broker.server", "broker.txn", "broker.client", "broker.cli", "broker.spark", "broker.registry"),
    "txn": ("broker.server", "broker.group", "broker.client", "broker.cli", "broker.spark", "broker.registry"),
    "protocol": (
        "broker.server",
        "broker.cluster",
        "broker.coordinator",
        "broker.group",
        "broker.txn",
        "broker.log",
        "broker.client",
        "broker.cli",
        "broker.spark",
        "broker.security",
        "broker.registry",
    ),
    # TLS, SASL, ACLs: used by the listeners, the inter-broker channels and the client alike
    "security": (
        "broker.server",
        "broker.cluster",
        "broker.coordinator",
        "broker.group",
        "broker.txn",
        "broker.log",
        "broker.client",
        "broker.cli",
        "broker.spark",
        "broker.registry",
    ),
    # the schema registry: the cluster's value types and channels, the replica layer through a
    # PartitionWriter (server/partition_writer.py, handed in by the broker), security's ACLs
    "registry": (
        "broker.server",
        "broker.coordinator",
        "broker.group",
        "broker.txn",
        "broker.client",
        "broker.cli",
        "broker.spark",
        "broker.perf",
        "broker.metrics",
    ),
    # the process and what reads it at scrape time: everything of the broker, no tool
    "server": ("broker.client", "broker.cli", "broker.spark", "broker.perf"),
    "metrics": ("broker.client", "broker.cli", "broker.spark", "broker.perf"),
    "client": (*_BROKER_SIDE, "broker.spark", "broker.perf", "broker.registry"),
    "spark": (*_BROKER_SIDE, "broker.perf"),
    "perf": (*_BROKER_SIDE, "broker.spark", "broker.registry"),
    # the `broker` command: runs brokers and the tools
    "cli": ("broker.spark",),
    # KIP-932's share-partitions and their state (the share coordinator on coordinator/,
    # the persister on the cluster's channels): below the server
    "share": ("broker.server", "broker.client", "broker.cli", "broker.spark", "broker.perf", "broker.registry"),
}
#: the layers that may use of cluster/ its value types only
VALUE_TYPES_ONLY = ("coordinator", "group", "txn")
#: what they may import of cluster/
GROUP_MAY_IMPORT = ("broker.cluster.metadata",)


def imports(path: Path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module


def modules(layer: str):
    return sorted(p for p in (ROOT / layer).rglob("*.py") if "messages" not in p.parts)


def packages() -> list[str]:
    return sorted(
        p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")) and any(p.rglob("*.py"))
    )


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(layer):
    bad = []
    for path in modules(layer):
        for line, name in imports(path):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[layer]):
                bad.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name}")
            if layer in VALUE_TYPES_ONLY and name.startswith("broker.cluster") and name not in GROUP_MAY_IMPORT:
                bad.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name} (only value types allowed)")
    assert not bad, "\n".join(bad)


#: what the layers below the server may use of broker/metrics: the counters they keep
#: themselves (the rest of metrics/ reads every layer at scrape time: it is above them all)
METRICS_STATS = "broker.metrics.stats"


def test_the_layers_count_with_metrics_stats_only():
    bad = []
    for layer in ("log", "cluster", "coordinator", "group", "txn", "security", "protocol"):
        for path in modules(layer):
            for line, name in imports(path):
                if (name == "broker.metrics" or name.startswith("broker.metrics.")) and name != METRICS_STATS:
                    bad.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name}")
    for path in (ROOT / "metrics" / "stats.py", ROOT / "metrics" / "__init__.py"):
        for line, name in imports(path):
            if name.startswith("broker.") and name != "broker.protocol.api":
                bad.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name} (every layer imports it)")
    assert not bad, "\n".join(bad)


def test_every_package_has_a_rule():
    assert packages() == sorted(FORBIDDEN)


def test_the_registry_formats_import_nothing_of_the_broker():
    bad = [
        f"{path.relative_to(ROOT.parent)}:{line} imports {name}"
        for path in modules("registry/formats")
        for line, name in imports(path)
        if name.startswith("broker") and not name.startswith("broker.registry.formats")
    ]
    assert modules("registry/formats"), "no broker/registry/formats"
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_violation(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("import os\nfrom broker.server.broker import Broker\n")
    assert (2, "broker.server.broker") in list(imports(bad))
