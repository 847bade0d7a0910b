"""The layers' import direction: server -> cluster / group / txn -> log -> native;
security/ below server and cluster; of metrics/, the layers count with stats.py only.

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
    "log": ("broker.server", "broker.cluster", "broker.group", "broker.client", "broker.cli", "broker.spark"),
    "cluster": ("broker.server", "broker.group", "broker.client", "broker.cli", "broker.spark"),
    "group": ("broker.server", "broker.client", "broker.cli", "broker.spark"),
    "txn": ("broker.server", "broker.client", "broker.cli", "broker.spark"),
    "protocol": ("broker.server", "broker.cluster", "broker.group", "broker.log", "broker.client", "broker.cli",
                 "broker.spark", "broker.security"),
    # TLS, SASL, ACLs: used by the listeners, the inter-broker channels and the client alike
    "security": ("broker.server", "broker.cluster", "broker.group", "broker.log", "broker.client", "broker.cli",
                 "broker.spark"),
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


#: what the layers below the server may use of broker/metrics: the counters they keep
#: themselves (the rest of metrics/ reads every layer at scrape time: it is above them all)
METRICS_STATS = "broker.metrics.stats"


def test_the_layers_count_with_metrics_stats_only():
    bad = []
    for layer in ("log", "cluster", "group", "txn", "security", "protocol"):
        for path in modules(layer):
            for line, name in imports(path):
                if (name == "broker.metrics" or name.startswith("broker.metrics.")) and name != METRICS_STATS:
                    bad.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name}")
    for path in (ROOT / "metrics" / "stats.py", ROOT / "metrics" / "__init__.py"):
        for line, name in imports(path):
            if name.startswith("broker.") and name != "broker.protocol.api":
                bad.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name} (every layer imports it)")
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_violation(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("import os\nfrom broker.server.broker import Broker\n")
    assert (2, "broker.server.broker") in list(imports(bad))
