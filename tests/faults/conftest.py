"""Fault-suite fixtures: iptables (tests/support/netfault.py) and clusters whose brokers and
ZooKeeper each have their own loopback address (tests/support/cluster.py, distinct_hosts),
so that a test can cut any pair apart. Under CI=true a missing dependency (root, iptables,
ZooKeeper, java) fails the test. Every rule is removed and every process killed when a test
ends, whatever happened; a failed test's report carries the logs' tails.
"""

from __future__ import annotations

import pytest

from tests.faults.workload import FAULT_CONFIG
from tests.support import netfault
from tests.support.cluster import Cluster
from tests.support.deps import missing
from tests.support.netfault import NetFaults
from tests.support.zookeeper import available as zookeeper_available


@pytest.fixture
def require_netfault() -> None:
    what = netfault.available()
    if what is not None:
        missing(what, "the fault tests add iptables rules on loopback: run 'make test' as root")


@pytest.fixture
def net(require_netfault):
    """A NetFaults for this test: every rule it added is gone when the test ends."""
    with NetFaults("faults") as n:
        yield n
    assert netfault.rules_of_this_process() == [], "a rule outlived its test"


@pytest.fixture
def fault_cluster(request, tmp_path, require_netfault):
    """fault_cluster(n=3, config=None, per_broker=None) -> a started Cluster on distinct
    hosts, its own ZooKeeper on its own address, FAULT_CONFIG plus `config` (and
    per_broker[id] for broker id)."""
    what = zookeeper_available()
    if what is not None:
        missing(what, "apt-get install zookeeper default-jre-headless, or run 'make test' as root")
    clusters: list[Cluster] = []
    request.node.kbroker_clusters = clusters

    def make(
        n: int = 3, config: dict | None = None, log_level: str = "info", per_broker: dict[int, dict] | None = None
    ) -> Cluster:
        c = Cluster(
            tmp_path / f"cluster{len(clusters)}",
            n=n,
            config={**FAULT_CONFIG, **(config or {})},
            distinct_hosts=True,
            log_level=log_level,
            per_broker=per_broker,
        )
        clusters.append(c)
        return c.start()

    try:
        yield make
    finally:
        for c in clusters:
            c.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test (or fixture) shows the end of each broker's log and ZooKeeper's."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for i, c in enumerate(getattr(item, "kbroker_clusters", ())):
            report.sections.append((f"cluster {i} logs ({report.when})", c.log_tails()))
