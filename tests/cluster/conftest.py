"""Cluster fixtures: one real ZooKeeper for the whole session (Debian's package, see
tests/support/zookeeper.py) and a fresh chroot per test, so tests never see each
other's znodes; `own_zookeeper` for a test that kills its ZooKeeper. Under CI=true a
missing ZooKeeper or java fails the tests.

Broker clusters (tests/support/cluster.py), function-scoped, each on its own chroot:
`cluster3` (brokers 1, 2, 3 with CLUSTER_CONFIG) and `make_cluster(n, config=...,
per_broker=..., zookeeper=...)` for other shapes. Tests create their own topics. A
failed test's report carries the tail of every broker's log and of ZooKeeper's; every
broker is killed when the test ends, whatever happened.
"""

from __future__ import annotations

import itertools

import pytest

from tests.support.cluster import Cluster
from tests.support.deps import missing
from tests.support.zookeeper import ZooKeeperServer, available

#: Settings for quick, bounded fault tests: a killed broker's session expires within
#: 6 s (the ZooKeeper here allows 1 s; 6 s leaves room for a busy 2-core machine), a
#: stuck follower leaves the ISR within 3 s, and replication factors suit 3 brokers.
CLUSTER_CONFIG = {
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 3000,
    "default.replication.factor": 3,
    "offsets.topic.replication.factor": 3,
}

_counter = itertools.count()


def _require_zookeeper() -> None:
    what = available()
    if what is not None:
        missing(what, "apt-get install zookeeper default-jre-headless, or run 'make test' as root")


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    _require_zookeeper()
    with ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")) as zk:
        yield zk


@pytest.fixture
def own_zookeeper(tmp_path):
    """A ZooKeeper for this test alone, to kill and restart (port and data dir kept)."""
    _require_zookeeper()
    with ZooKeeperServer(tmp_path / "zookeeper") as zk:
        yield zk


@pytest.fixture
def zk_connect(request, zookeeper) -> str:
    """'127.0.0.1:PORT/<chroot unique to this test>' (the chroot does not exist yet)."""
    return zookeeper.chroot(_chroot(request))


def _chroot(request) -> str:
    base = "".join(c if c.isalnum() else "_" for c in request.node.name)[:80]
    return f"{base}_{next(_counter)}"


@pytest.fixture
def make_cluster(request, tmp_path, zookeeper):
    """make_cluster(n=3, config=None, per_broker=None, zookeeper=None, log_level="info",
    event_loop="asyncio") -> a started Cluster. config is added to CLUSTER_CONFIG; zookeeper defaults to the session's."""
    clusters: list[Cluster] = []
    request.node.kbroker_clusters = clusters  # read by pytest_runtest_makereport
    session_zookeeper = zookeeper

    def make(
        n: int = 3,
        config: dict | None = None,
        per_broker: dict | None = None,
        zookeeper: ZooKeeperServer | None = None,
        log_level: str = "info",
        event_loop: str = "asyncio",
    ) -> Cluster:
        c = Cluster(
            tmp_path / f"cluster{len(clusters)}",
            n=n,
            zookeeper=zookeeper or session_zookeeper,
            config={**CLUSTER_CONFIG, **(config or {})},
            per_broker=per_broker,
            chroot=_chroot(request),
            log_level=log_level,
            event_loop=event_loop,
        )
        clusters.append(c)
        return c.start()

    try:
        yield make
    finally:
        for c in clusters:
            c.close()


@pytest.fixture
def cluster3(make_cluster) -> Cluster:
    """Brokers 1, 2, 3 on a fresh chroot of the session's ZooKeeper, started."""
    return make_cluster(3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test (or fixture) shows the end of each broker's log and ZooKeeper's."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for i, c in enumerate(getattr(item, "kbroker_clusters", ())):
            report.sections.append((f"cluster {i} logs ({report.when})", c.log_tails()))
