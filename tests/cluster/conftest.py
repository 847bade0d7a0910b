"""Cluster fixtures: one real ZooKeeper for the whole session (Debian's package, see
tests/support/zookeeper.py) and a fresh chroot per test, so tests never see each
other's znodes; `own_zookeeper` for a test that kills its ZooKeeper. Under CI=true a
missing ZooKeeper or java fails the tests."""
from __future__ import annotations

import itertools

import pytest

from tests.support.deps import missing
from tests.support.zookeeper import ZooKeeperServer, available

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
    base = "".join(c if c.isalnum() else "_" for c in request.node.name)[:80]
    return zookeeper.chroot(f"{base}_{next(_counter)}")
