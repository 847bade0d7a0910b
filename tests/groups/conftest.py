"""Consumer-group fixtures: one real broker process per test module, configured by the
module's BROKER_CONFIG (merged over GROUP_CONFIG), on a free loopback port."""

from __future__ import annotations

import itertools

import pytest

from tests.groups.helpers import GROUP_CONFIG
from tests.support.broker_proc import BrokerProcess

_counter = itertools.count()


@pytest.fixture(scope="module")
def broker(request, tmp_path_factory):
    config = dict(GROUP_CONFIG)
    config.update(getattr(request.module, "BROKER_CONFIG", {}))
    with BrokerProcess(tmp_path_factory.mktemp("broker") / "data", config=config) as b:
        yield b


@pytest.fixture
def name(request):
    """A topic / group name unique to the test."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:100]
    return f"{base}-{next(_counter)}"
