"""Whether the broker that holds a broker id's registration is gone: what a starting
broker asks when ZooKeeper still has /brokers/ids/<id> under a session that is not its own.

A broker killed -9 (or whose machine died) leaves its ephemeral registration behind until
ZooKeeper expires its session, zookeeper.session.timeout.ms after its last heartbeat. A
broker restarted within that time finds its id taken. It must not take over an id that a
*live* broker holds (two brokers with one id corrupt the cluster), and it should not fail
either when the holder is merely a dead process of its own past: under systemd that is a
restart loop, by hand a wait-and-retry. So the starting broker decides from what the
registration advertises, before it serves anything, with its listener already bound:

1. The registration advertises the very host:port this broker has just bound. No live
   process serves it (the bind would have failed: the listener sets SO_REUSEADDR, never
   SO_REUSEPORT), so the holder is gone: this broker's own previous run, on the same
   address. This is the common case (a restart on the same host and port) and needs no
   network probe.
2. Otherwise (the broker restarted on another port or host) the advertised endpoint is
   probed: a TCP connection refused there means nobody listens, the holder is gone. A
   connection accepted (a live broker, also a paused one, whose kernel still accepts),
   a timeout or any other error (an unreachable host, a network cut) counts as alive:
   the start is refused at once, as before.

Gone: the store waits for the session to expire (at most zookeeper.session.timeout.ms
plus ZooKeeper's expiry tick, one log line saying so), then registers. The decision is
made once per holding session.
"""

from __future__ import annotations

import asyncio
import socket

from broker.cluster.channel import source_address
from broker.cluster.store.znodes import BrokerRegistration
from broker.timeouts import wait_for

#: how long the probe of a registered endpoint waits for the TCP handshake
PROBE_TIMEOUT_S = 2.0


async def holder_gone(
    own: BrokerRegistration, registered: BrokerRegistration, probe_timeout_s: float = PROBE_TIMEOUT_S
) -> str | None:
    """Why the broker that registered `registered` is gone, or None when it may be alive.
    `own` is this broker's registration, its endpoints bound (see the module docstring)."""
    mine = {(e.host, e.port) for e in own.endpoints}
    for e in registered.endpoints:
        if (e.host, e.port) in mine:
            return f"it advertises {e.host}:{e.port}, the address this broker has just bound"
    refused = []
    for e in registered.endpoints:
        if not await _refused(e.host, e.port, probe_timeout_s):
            return None
        refused.append(f"{e.host}:{e.port}")
    if not refused:
        return None
    return f"nothing listens at {', '.join(refused)}, the address it advertises (connection refused)"


async def _refused(host: str, port: int, timeout_s: float) -> bool:
    """True only when a TCP connection to host:port is refused."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return False
    if not infos:
        return False
    family, _, _, _, addr = infos[0]
    local = source_address(str(addr[0]))
    try:
        _, writer = await wait_for(
            asyncio.open_connection(host=str(addr[0]), port=port, family=family, local_addr=local), timeout_s
        )
    except ConnectionRefusedError:
        return True
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return False
