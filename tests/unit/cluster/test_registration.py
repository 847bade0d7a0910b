"""holder_gone: whether the broker holding a broker id's registration is gone, decided
from the endpoint it advertises (broker/cluster/registration.py), with real sockets."""

from __future__ import annotations

import asyncio
import socket

from broker.cluster.registration import holder_gone
from broker.cluster.store.znodes import BrokerRegistration, EndPoint
from tests.support.ports import free_port


def reg(port: int, host: str = "127.0.0.1") -> BrokerRegistration:
    return BrokerRegistration(1, (EndPoint("PLAINTEXT", host, port),))


def test_the_address_this_broker_bound_means_gone_without_a_probe():
    port = free_port()
    why = asyncio.run(holder_gone(reg(port), reg(port)))
    assert why is not None and f"127.0.0.1:{port}" in why and "just bound" in why


def test_a_listener_at_the_registered_address_means_alive():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert asyncio.run(holder_gone(reg(free_port()), reg(s.getsockname()[1]))) is None


def test_a_refused_connection_means_gone():
    dead = free_port()  # nothing listens there
    why = asyncio.run(holder_gone(reg(free_port()), reg(dead)))
    assert why is not None and f"127.0.0.1:{dead}" in why and "refused" in why


def test_an_unresolvable_host_counts_as_alive():
    assert asyncio.run(holder_gone(reg(free_port()), reg(9092, host="no-such-host.invalid"))) is None
