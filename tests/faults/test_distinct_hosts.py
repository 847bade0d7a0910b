"""Each broker and ZooKeeper on its own loopback address, the brokers' outgoing connections
(replica fetchers, the controller's channels, the kazoo client) leaving from their own
address: so a DROP rule between two addresses cuts exactly that pair."""

from __future__ import annotations

import socket
import struct

from broker.client import Cluster as Client
from tests.support.cluster import poll_until
from tests.support.zookeeper import four_letter_word


def established() -> list[tuple[str, int, str, int]]:
    """(local ip, local port, remote ip, remote port) of every established IPv4 TCP
    connection of this machine (/proc/net/tcp)."""
    out = []
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[3] != "01":  # TCP_ESTABLISHED
                continue
            (lip, lport), (rip, rport) = (a.split(":") for a in fields[1:3])
            out.append((_ip(lip), int(lport, 16), _ip(rip), int(rport, 16)))
    return out


def _ip(hex_le: str) -> str:
    return socket.inet_ntoa(struct.pack("<I", int(hex_le, 16)))


def test_brokers_connect_from_their_own_address(fault_cluster):
    c = fault_cluster(3)
    hosts = {i: c.host_of(i) for i in c.ids}
    assert len(set(hosts.values()) | {c.zk_host}) == 4 and "127.0.0.1" not in hosts.values()
    with Client(c.bootstrap) as client:
        client.create_topic("t", 3, 3, {"min.insync.replicas": "2"})
    for p in range(3):
        c.wait_for_isr("t", p, {1, 2, 3})

    # ZooKeeper sees each broker's session coming from that broker's address
    cons = four_letter_word(c.zookeeper.port, "cons", host=c.zk_host)
    for i, host in hosts.items():
        assert f"/{host}:" in cons, f"broker {i}'s session not from {host}: {cons}"

    # connections between brokers (fetchers, controller) leave from the broker's own address
    # (a new ISR is full from the start: the followers' fetchers may still be connecting)
    ports = {c.broker(i).port: host for i, host in hosts.items()}

    def each_broker_connected():
        pairs = {
            (lip, rip)
            for lip, _lport, rip, rport in established()
            if rport in ports and rip == ports[rport] and rip != lip
        }
        sources = {lip for lip, _ in pairs}
        return set(hosts.values()) <= sources, pairs, f"(from, to) {sorted(pairs)}"

    poll_until("a connection from each broker's own address to another broker", each_broker_connected, timeout=30)


def test_a_cut_from_zookeeper_expires_that_broker_alone(fault_cluster, net):
    c = fault_cluster(3)
    victim = next(i for i in c.ids if i != c.controller_id())
    others = [i for i in c.ids if i != victim]
    net.cut(c.host_of(victim), c.zk_host)

    def victim_gone():
        registered = c.registered_in_zookeeper()
        assert set(others) <= set(registered), f"brokers {others} expired too: {registered}"
        return victim not in registered, None, f"registered {registered}"

    poll_until(f"broker {victim}'s session expired", victim_gone, timeout=c.timeout)

    def metadata_says_so():  # the controller sees the expiry, then tells the brokers
        ids = set(c.registered_ids(via=others[0]))
        return ids == set(others), None, f"broker {others[0]}'s metadata lists {sorted(ids)}"

    poll_until(f"broker {others[0]}'s metadata without broker {victim}", metadata_says_so, timeout=c.timeout)

    net.heal()

    def back():
        registered = c.registered_in_zookeeper()
        return set(registered) == set(c.ids), None, f"registered {registered}"

    poll_until(f"broker {victim} registered again", back, timeout=c.timeout)
    c.wait_for_brokers(c.ids)


def test_the_source_address_rule():
    from broker.cluster import channel

    try:
        for unbound in (None, "", "0.0.0.0", "::", "localhost", "broker1.example"):
            channel.bind_outgoing(unbound)
            assert channel.source_address("127.0.0.2") is None, unbound
        channel.bind_outgoing("127.0.0.11")
        assert channel.source_address("127.0.0.2") == ("127.0.0.11", 0)
        assert channel.source_address("10.1.2.3") is None  # a loopback source reaches no one else
        assert channel.source_address("::1") is None  # another family
        channel.bind_outgoing("192.0.2.7")
        assert channel.source_address("192.0.2.9") == ("192.0.2.7", 0)
        assert channel.source_address("127.0.0.1") == ("192.0.2.7", 0)
        channel.bind_outgoing("[::1]")
        assert channel.source_address("::1") == ("::1", 0) and channel.source_address("127.0.0.1") is None
    finally:
        channel.bind_outgoing(None)
