"""Pipelines as a data engineer runs them (issue 21): real Spark standalone clusters
(PySpark's own bin/spark-class, tests/support/spark_standalone.py), real 3-broker
clusters with ZooKeeper (tests/support/cluster.py), the examples under examples/ run as
their own processes (a driver is a process the tests can kill -9).

Fixtures: `spark_standalone` (a master and two workers, for the tests of this package),
`kcluster` (brokers 1..3 on their own ZooKeeper, for a module: the fault tests heal it
before they end), `single_broker`. Under CI=true a missing pyspark, java, spark-class or
ZooKeeper fails the tests. A failed test's report carries the brokers', ZooKeeper's and
Spark's log tails.
"""

from __future__ import annotations

import os

import pytest

from tests.pipelines.helpers import ROOT, shell_commands, substitute
from tests.support.broker_proc import BrokerProcess
from tests.support.cluster import Cluster
from tests.support.deps import missing, require_binary, require_module
from tests.support.ports import free_port
from tests.support.spark_standalone import SparkStandalone, spark_class
from tests.support.zookeeper import available

#: a killed broker's session expires within 6 s (as tests/cluster's CLUSTER_CONFIG), a stuck
#: follower leaves the ISR within 3 s; topics RF=3 with min.insync.replicas=2
PIPELINE_CONFIG = {
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 3000,
    "default.replication.factor": 3,
    "offsets.topic.replication.factor": 3,
    "min.insync.replicas": 2,
}


def require_spark() -> None:
    require_module("pyspark")
    require_binary("java", "openjdk-17-jre-headless")
    if spark_class() is None:
        missing("PySpark's bin/spark-class", "pip install -e '.[test]' (make test does it)")


DOC = ROOT / "docs" / "pipelines.md"


def doc_environment(commands: list[str]) -> dict[str, str]:
    """The `export K=V` lines of the doc ($PWD: the checkout)."""
    env = {}
    for line in commands:
        if line.startswith("export "):
            k, _, v = line[len("export ") :].partition("=")
            env[k] = v.replace("$PWD", str(ROOT))
    return env


@pytest.fixture(scope="package")
def spark_standalone(tmp_path_factory):
    """The master and the two workers of docs/pipelines.md, started with its own command
    lines (its exports applied) on free ports, logs and work dir in a temporary directory."""
    require_spark()
    directory = tmp_path_factory.mktemp("spark-standalone")
    commands = shell_commands(DOC)
    lines = [line for line in commands if "spark-class" in line]
    assert len(lines) == 3, f"docs/pipelines.md: expected a master and two workers, got {lines}"
    port, ui = free_port(), free_port()
    mapping = {
        "7077": str(port),
        "8080": str(ui),
        "8081": str(free_port()),
        "8082": str(free_port()),
        "/tmp/": f"{directory}/",
    }
    started = [substitute(line, mapping).rstrip("&").strip() for line in lines]
    s = SparkStandalone(
        directory, commands=started, port=port, ui_port=ui, env={**os.environ, **doc_environment(commands)}
    )
    s.doc_lines = lines
    with s:
        yield s


@pytest.fixture(scope="module")
def kcluster(request, tmp_path_factory):
    what = available()
    if what is not None:
        missing(what, "apt-get install zookeeper default-jre-headless, or run 'make test' as root")
    c = Cluster(tmp_path_factory.mktemp("kcluster"), n=3, config=PIPELINE_CONFIG)
    request.module.kbroker_cluster = c
    with c:
        yield c


@pytest.fixture
def single_broker(tmp_path):
    with BrokerProcess(tmp_path / "broker" / "data", config={"num.partitions": 1}) as b:
        yield b


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test shows the end of the brokers', ZooKeeper's and Spark's logs."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        c = getattr(item.module, "kbroker_cluster", None)
        if c is not None:
            report.sections.append((f"cluster logs ({report.when})", c.log_tails()))
        s = item.funcargs.get("spark_standalone") if hasattr(item, "funcargs") else None
        if s is not None:
            report.sections.append((f"Spark standalone logs ({report.when})", s.log_tails()))
