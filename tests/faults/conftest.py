"""Fault-suite fixtures: iptables (tests/support/netfault.py) and clusters whose brokers and
ZooKeeper each have their own loopback address (tests/support/cluster.py, distinct_hosts),
so that a test can cut any pair apart. Under CI=true a missing dependency (root, iptables,
ZooKeeper, java) fails the test. Every rule is removed and every process killed when a test
ends, whatever happened; a failed test's report carries the logs' tails.
"""
from __future__ import annotations

import pytest

from tests.support import netfault
from tests.support.deps import missing


@pytest.fixture
def require_netfault() -> None:
    what = netfault.available()
    if what is not None:
        missing(what, "the fault tests add iptables rules on loopback: run 'make test' as root")
