"""The layers' import direction: server -> cluster / group / txn -> log -> native;
security/ below server and cluster; registry/ (the schema registry) beside server, above
cluster and security, below nothing (its formats/ import nothing of the broker: a reader
of registry-framed records, the Spark source, uses them as they are).

Nothing in log/ knows the cluster, groups or the server; nothing in cluster/, group/ or
txn/ knows the server; group/ and txn/ see the cluster only through its value types
(metadata.py).
Checked on the source with ast, so a violation in code that no test imports is caught
too.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "broker"

FORBIDDEN = {
    "log": ("broker.server", "broker.cluster", "broker.group", "broker.client", "broker.cli", "broker.spark",
            "broker.registry"),
    "cluster": ("broker.server", "broker.group", "broker.client", "broker.cli", "broker.spark", "broker.registry"),
    "group": ("broker.server", "broker.client", "broker.cli", "broker.spark", "broker.registry"),
    "txn": ("broker.server", "broker.client", "broker.cli", "broker.spark", "broker.registry"),
    "protocol": ("broker.server", "broker.cluster", "broker.group", "broker.log", "broker.client", "broker.cli",
                 "broker.spark", "broker.security", "broker.registry"),
    # TLS, SASL, ACLs: used by the listeners, the inter-broker channels and the client alike
    "security": ("broker.server", "broker.cluster", "broker.group", "broker.log", "broker.client", "broker.cli",
                 "broker.spark", "broker.registry"),
    # the schema registry: the cluster's value types and channels, the replica layer through a
    # PartitionWriter (server/partition_writer.py, handed in by the broker), security's ACLs
    "registry": ("broker.server", "broker.group", "broker.txn", "broker.client", "broker.cli", "broker.spark",
                 "broker.metrics"),
}
#: what group/ may use of cluster/: value types only
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


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(layer):
    bad = []
    for path in modules(layer):
        for line, name in imports(path):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[layer]):
                bad.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name}")
            if layer in ("group", "txn") and name.startswith("broker.cluster") and name not in GROUP_MAY_IMPORT:
                bad.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name} (only value types allowed)")
    assert not bad, "\n".join(bad)


def test_the_registry_formats_import_nothing_of_the_broker():
    bad = [f"{path.relative_to(ROOT.parent)}:{line} imports {name}"
           for path in modules("registry/formats") for line, name in imports(path)
           if name.startswith("broker") and not name.startswith("broker.registry.formats")]
    assert modules("registry/formats"), "no broker/registry/formats"
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_violation(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("import os\nfrom broker.server.broker import Broker\n")
    assert (2, "broker.server.broker") in list(imports(bad))
