"""N real broker processes on one ZooKeeper chroot: the cluster of issue 10, on loopback.

    with Cluster(tmp_path, n=3, zookeeper=zk) as c:    # brokers 1..3 started (and joined)
        c.bootstrap                     # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
        leader = c.wait_for_leader("t", 0)
        c.kill(leader)                  # SIGKILL; stop() is SIGTERM and wait
        c.wait_for_leader("t", 0, not_in={leader})
        c.start(leader)                 # same port, same data dir
        c.wait_for_isr("t", 0, {1, 2, 3})
        c.pause(2); c.resume(2)         # SIGSTOP / SIGCONT

Invariants:
- Broker ids are 1..n. Each broker has its own data dir (DIR/broker-<id>/data) and a
  free loopback port chosen once: restarts reuse both. Its log stays next to the data
  dir (`log_tails()` prints the ends of all of them; the cluster fixtures attach them
  to a failed test's report).
- Every broker gets `zookeeper.connect` = one chroot of the given ZooKeeper, unique to
  this Cluster (the broker creates it). Without a ZooKeeper, the Cluster starts its own
  in DIR/zookeeper and stops it in close().
- What the cluster looks like is asked of a live broker (running, not paused) with the
  project's own client: a Metadata request, nothing read from files. ZooKeeper is read
  for one thing only, which no broker can answer when all are down: whether a killed
  broker's registration (/brokers/ids/<id>) is still there. start(id) waits until it
  has expired before it starts the broker (kill(id) then start(id) takes about
  zookeeper.session.timeout.ms); broker(id).start() does not wait: a broker started
  while its dead session's registration is there waits for it itself, and one started
  with a live broker's id is refused (tests/cluster/test_registration.py).
- Every wait is bounded (ClusterTimeout, an AssertionError naming what was awaited and
  the last answer seen). Every process dies at close(), at interpreter exit and with
  the thread that started it (see broker_proc.py and broker.perf.zookeeper).

A ZooKeeper ensemble: `ensemble=3` makes the Cluster's own ZooKeeper a quorum of three
servers (tests/support/zookeeper.py's ZooKeeperEnsemble; with distinct hosts on B.2, B.3,
B.4), and the brokers' `zookeeper.connect` names all three; a ZooKeeperEnsemble may also
be passed as `zookeeper`.

Distinct hosts (`distinct_hosts=True`, the fault tests): each broker and ZooKeeper listen
on an address of their own in 127.0.0.0/8 — ZooKeeper on B.2, broker i on B.(10+i), where
the block B is `address_block()`, 127.A.C from this process's pid, so that two test runs on
one machine never share addresses (a string names the block instead, e.g. "127.0.0"). The
brokers' connections to each other and to ZooKeeper leave from their own address
(broker.cluster.channel.bind_outgoing), so an iptables rule between two addresses
(tests/support/netfault.py) cuts exactly that pair. Clients, this harness included,
connect from 127.0.0.1, which is never cut. Such a cluster starts its own ZooKeeper (or
takes one on an address of that block). One distinct-host cluster at a time per process.

Until the broker speaks ZooKeeper (`broker serve --zookeeper`, issue 10), every broker
runs alone with its embedded store: the processes, ports and signals work, but the
brokers do not see each other. `speaks_zookeeper()` says which; `start()` waits for the
brokers to register with each other only when they can.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from broker.client import BrokerConnection, ClientError
from broker.client.cluster import PartitionMeta, TopicMeta
from broker.protocol.errors import KafkaProtocolError
from broker.protocol.messages.metadata import MetadataRequest
from tests.support.broker_proc import START_TIMEOUT, STOP_TIMEOUT, BrokerProcess
from tests.support.zookeeper import ZooKeeperEnsemble, ZooKeeperServer

POLL_INTERVAL = 0.1
REQUEST_TIMEOUT = 5.0  # one Metadata round trip to one broker
DEFAULT_SESSION_TIMEOUT_MS = 18000  # the broker's zookeeper.session.timeout.ms default


class ClusterTimeout(AssertionError):
    """A bounded wait ran out."""


class NoLiveBroker(RuntimeError):
    """No live broker answered."""


class ZooKeeperUnavailable(RuntimeError):
    """The cluster's ZooKeeper did not answer."""


def poll_until(what: str, probe, timeout: float, interval: float = POLL_INTERVAL, context: object = None):
    """Polls probe() -> (done, value, seen) until done; returns value. A probe that raises
    (no live broker, a connection refused) counts as not done. ClusterTimeout naming what
    was awaited, the last thing seen (and `context`'s repr) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    seen = "nothing yet"
    while True:
        try:
            done, value, seen = probe()
            if done:
                return value
        except (NoLiveBroker, ZooKeeperUnavailable, ClientError, KafkaProtocolError, OSError) as exc:
            seen = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            where = "" if context is None else f"; {context!r}"
            raise ClusterTimeout(f"{what}: not within {timeout:g} s; last seen: {seen}{where}")
        time.sleep(interval)


def address_block(pid: int | None = None) -> str:
    """'127.A.C': the loopback block of this process's distinct-host clusters (never
    127.0.0, where 127.0.0.1, the clients' address, lives)."""
    pid = os.getpid() if pid is None else pid
    return f"127.{1 + (pid >> 8) % 254}.{pid & 255}"


ZOOKEEPER_HOST_SUFFIX = 2
BROKER_HOST_BASE = 10


@functools.cache
def speaks_zookeeper() -> bool:
    """Whether this build's `broker serve` accepts --zookeeper (the cluster mode)."""
    from broker.cli.main import build_parser

    _, unknown = build_parser().parse_known_args(["serve", "--zookeeper", "127.0.0.1:2181"])
    return not unknown


class Cluster:
    def __init__(
        self,
        directory,
        n: int = 3,
        zookeeper: ZooKeeperServer | ZooKeeperEnsemble | None = None,
        config: dict | None = None,
        per_broker: dict[int, dict] | None = None,
        chroot: str | None = None,
        log_level: str = "info",
        distinct_hosts: bool | str = False,
        ensemble: int = 0,
        event_loop: str = "asyncio",
    ):
        self.dir = Path(directory)
        #: the brokers' --event-loop (the suite runs asyncio's; see tests/cluster/test_uvloop_cluster.py)
        self.event_loop = event_loop
        #: '127.A.C' when each process has its own address (see the module docstring), else None
        self.block = (
            (distinct_hosts if isinstance(distinct_hosts, str) else address_block()) if distinct_hosts else None
        )
        self.own_zookeeper = zookeeper is None
        if self.block is not None and zookeeper is not None and not zookeeper.host.startswith(self.block + "."):
            raise ValueError(f"distinct hosts: ZooKeeper must listen in {self.block}.0/24, not on {zookeeper.host}")
        if zookeeper is None and ensemble:
            zookeeper = ZooKeeperEnsemble(
                self.dir / "zookeeper",
                hosts=[
                    "127.0.0.1" if self.block is None else f"{self.block}.{ZOOKEEPER_HOST_SUFFIX + i}"
                    for i in range(ensemble)
                ],
            )
        self.zookeeper = zookeeper or ZooKeeperServer(
            self.dir / "zookeeper", host="127.0.0.1" if self.block is None else f"{self.block}.{ZOOKEEPER_HOST_SUFFIX}"
        )
        self.chroot = (chroot or f"kb_{uuid.uuid4().hex[:12]}").strip("/")
        self.zk_connect = self.zookeeper.chroot(self.chroot)
        self.coordinated = speaks_zookeeper()
        self.config = {**(config or {}), "zookeeper.connect": self.zk_connect}
        session_ms = int(self.config.get("zookeeper.session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS))
        #: default bound of every wait: a dead broker's session expires, a controller acts
        self.timeout = 2 * session_ms / 1000 + 10
        self.brokers: dict[int, BrokerProcess] = {}
        self.log_level = log_level
        for broker_id in range(1, n + 1):
            cfg = {**self.config, **(per_broker or {}).get(broker_id, {})}
            self.brokers[broker_id] = BrokerProcess(
                self.dir / f"broker-{broker_id}" / "data",
                config=cfg,
                broker_id=broker_id,
                log_level=log_level,
                host=self.host_of(broker_id),
                event_loop=event_loop,
            )

    def __repr__(self) -> str:
        return f"Cluster({self.zk_connect}, {', '.join(f'{i}={self.state(i)}' for i in self.ids)})"

    # ------------------------------------------------------------------ processes

    @property
    def ids(self) -> list[int]:
        return list(self.brokers)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def host_of(self, broker_id: int) -> str:
        """The address broker `broker_id` listens on (and, distinct hosts, connects from)."""
        return "127.0.0.1" if self.block is None else f"{self.block}.{BROKER_HOST_BASE + broker_id}"

    @property
    def zk_host(self) -> str:
        return self.zookeeper.host

    def broker(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id]

    def live_ids(self) -> list[int]:
        """The brokers running and not paused."""
        return [i for i, b in self.brokers.items() if b.running and not b.paused]

    def state(self, broker_id: int) -> str:
        b = self.brokers[broker_id]
        if b.running:
            return "paused" if b.paused else "running"
        return "not started" if b.proc is None else f"exited {b.proc.returncode}"

    def start(self, broker_id: int | None = None, timeout: float = START_TIMEOUT) -> Cluster:
        """Starts one broker, or (no id) the ZooKeeper it owns and every broker at once.
        Returns once they answer, and when they can form a cluster, once every live
        broker lists them."""
        ids = self.ids if broker_id is None else [broker_id]
        if broker_id is None and self.own_zookeeper and not self.zookeeper.running:
            self.zookeeper.start()
        if self.coordinated:
            self.wait_for_unregistered(ids, timeout=timeout)
        for i in ids:
            self.brokers[i].start(wait=False)
        for i in ids:
            self.brokers[i].wait_ready(timeout)
        if self.coordinated:
            self.wait_for_brokers(ids, timeout=timeout)
        return self

    def add_broker(
        self, broker_id: int | None = None, config: dict | None = None, timeout: float = START_TIMEOUT
    ) -> int:
        """A new broker joins the running cluster (next id by default), with the
        cluster's config plus `config`; started like the others (same ZooKeeper chroot,
        its own data dir and port). Returns its id."""
        broker_id = broker_id if broker_id is not None else max(self.brokers, default=0) + 1
        if broker_id in self.brokers:
            raise ValueError(f"broker {broker_id} is already in this cluster")
        self.brokers[broker_id] = BrokerProcess(
            self.dir / f"broker-{broker_id}" / "data",
            config={**self.config, **(config or {})},
            broker_id=broker_id,
            log_level=self.log_level,
            host=self.host_of(broker_id),
            event_loop=self.event_loop,
        )
        self.start(broker_id, timeout)
        return broker_id

    def kill(self, broker_id: int) -> None:
        """SIGKILL: no clean shutdown, the ZooKeeper session lives on until it expires."""
        self.brokers[broker_id].kill()

    def stop(self, broker_id: int, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait (a controlled shutdown); returns the exit code."""
        return self.brokers[broker_id].stop(timeout)

    def terminate(self, broker_id: int) -> None:
        """SIGTERM without waiting; `broker(id).wait()` collects the exit."""
        self.brokers[broker_id].terminate()

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: alive but silent; past the session timeout ZooKeeper expires it."""
        self.brokers[broker_id].pause()

    def resume(self, broker_id: int) -> None:
        self.brokers[broker_id].resume()

    def restart(self, broker_id: int, timeout: float = START_TIMEOUT) -> BrokerProcess:
        """stop() then start(): same port, same data dir."""
        self.stop(broker_id)
        self.start(broker_id, timeout)
        return self.brokers[broker_id]

    def close(self) -> None:
        """Kills every broker (their data is thrown away), then stops an own ZooKeeper."""
        for b in self.brokers.values():
            b.kill()
        if self.own_zookeeper:
            self.zookeeper.stop()

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    def log_tails(self, lines: int = 40) -> str:
        out = []
        for i, b in self.brokers.items():
            out.append(f"----- broker {i} ({self.state(i)}, {b.bootstrap}) {b.log_path} -----")
            out.append(b.log_tail(lines))
        out.append(f"----- ZooKeeper {self.zookeeper.connect} {self.zookeeper.log_path} -----")
        out.append(self.zookeeper.log_tail(lines if self.own_zookeeper else lines // 2))
        return "\n".join(out)

    # ------------------------------------------------------------------ what the brokers say

    def metadata(self, topics: list[str] | None = (), via: int | None = None, timeout: float = REQUEST_TIMEOUT):
        """(answering broker id, MetadataResponse) from `via`, or from the first live broker
        that answers. topics=None asks for every topic; nothing is auto-created."""
        candidates = [via] if via is not None else self.live_ids()
        request = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        errors = []
        for i in candidates:
            try:
                with BrokerConnection(
                    self.brokers[i].host, self.brokers[i].port, client_id="cluster-harness", timeout=timeout
                ) as conn:
                    return i, conn.request(request)
            except (ClientError, KafkaProtocolError, OSError) as exc:
                errors.append(f"broker {i}: {exc}")
        raise NoLiveBroker("; ".join(errors) or "no live broker")

    def describe(self, topic: str, via: int | None = None) -> TopicMeta:
        """The topic as a live broker sees it (its error_code set when it has none)."""
        _, resp = self.metadata([topic], via)
        return TopicMeta(resp.topics[0])

    def partition(self, topic: str, partition: int, via: int | None = None) -> PartitionMeta | None:
        return self.describe(topic, via).partitions.get(partition)

    def leader_of(self, topic: str, partition: int, via: int | None = None) -> int:
        """The leader's id; -1 when there is none (or the partition is unknown)."""
        p = self.partition(topic, partition, via)
        return p.leader if p is not None else -1

    def isr_of(self, topic: str, partition: int, via: int | None = None) -> list[int]:
        p = self.partition(topic, partition, via)
        return p.isr if p is not None else []

    def replicas_of(self, topic: str, partition: int, via: int | None = None) -> list[int]:
        p = self.partition(topic, partition, via)
        return p.replicas if p is not None else []

    def controller_id(self, via: int | None = None) -> int:
        """The controller a live broker names; -1 when it knows none."""
        return self.metadata([], via)[1].controller_id

    def registered_ids(self, via: int | None = None) -> list[int]:
        """The brokers a live broker lists in Metadata."""
        return sorted(b.node_id for b in self.metadata([], via)[1].brokers)

    def registered_in_zookeeper(self) -> list[int]:
        """The ids under /brokers/ids of this cluster's chroot: ZooKeeper's own answer,
        there even when every broker is down (until their sessions expire)."""
        path = f"/{self.chroot}/brokers/ids"  # outside the chroot, which may not exist yet
        zk = KazooClient(hosts=self.zookeeper.connect, timeout=REQUEST_TIMEOUT)
        try:
            zk.start(timeout=REQUEST_TIMEOUT)
            return sorted(int(i) for i in zk.get_children(path)) if zk.exists(path) else []
        except (KazooException, KazooTimeoutError) as exc:
            raise ZooKeeperUnavailable(f"{self.zk_connect}: {exc!r}") from None
        finally:
            zk.stop()
            zk.close()

    # ------------------------------------------------------------------ bounded waits

    def _until(self, what: str, probe, timeout: float | None):
        """poll_until() with the cluster's default timeout and its state in the error."""
        return poll_until(what, probe, self.timeout if timeout is None else timeout, context=self)

    def _asked(self, everywhere: bool) -> list[int | None]:
        """Whom a wait asks: every live broker (everywhere: their metadata caches agree),
        or whichever live broker answers first."""
        if not everywhere:
            return [None]
        live = self.live_ids()
        if not live:
            raise NoLiveBroker("no live broker")
        return live

    def wait_for_leader(
        self, topic: str, partition: int, not_in=(), timeout: float | None = None, everywhere: bool = False
    ) -> int:
        """A live leader, not one of not_in (e.g. the broker just killed); its id."""

        def probe():
            leaders = {via: self.leader_of(topic, partition, via) for via in self._asked(everywhere)}
            found = set(leaders.values())
            leader = found.pop() if len(found) == 1 else -1
            return leader in self.live_ids() and leader not in set(not_in), leader, f"leaders {leaders}"

        return self._until(f"a leader of {topic}-{partition} not in {set(not_in) or '{}'}", probe, timeout)

    def wait_for_isr(
        self, topic: str, partition: int, expected, timeout: float | None = None, everywhere: bool = False
    ) -> list[int]:
        """The ISR is exactly `expected` (in any order); returns it as the broker lists it."""
        expected = set(expected)

        def probe():
            isrs = {via: self.isr_of(topic, partition, via) for via in self._asked(everywhere)}
            return all(set(isr) == expected for isr in isrs.values()), next(iter(isrs.values())), f"ISR {isrs}"

        return self._until(f"ISR of {topic}-{partition} == {sorted(expected)}", probe, timeout)

    def wait_for_controller(self, not_in=(), timeout: float | None = None, everywhere: bool = False) -> int:
        """A live controller, not one of not_in; its id."""

        def probe():
            ids = {via: self.controller_id(via) for via in self._asked(everywhere)}
            found = set(ids.values())
            controller = found.pop() if len(found) == 1 else -1
            return controller in self.live_ids() and controller not in set(not_in), controller, f"controller {ids}"

        return self._until(f"a controller not in {set(not_in) or '{}'}", probe, timeout)

    def wait_for_unregistered(self, ids, timeout: float | None = None) -> None:
        """None of `ids` (brokers not running) is registered in ZooKeeper any more."""
        ids = set(ids)

        def probe():
            left = ids & set(self.registered_in_zookeeper())
            return not left, None, f"still registered: {sorted(left)}"

        self._until(f"registrations of brokers {sorted(ids)} gone", probe, timeout)

    def wait_for_brokers(self, ids=None, timeout: float | None = None) -> None:
        """Every live broker lists `ids` (default: the live brokers) and names a
        controller. A broker killed a moment ago may still be listed until its ZooKeeper
        session expires: this checks that the given ones are there, not that others are gone."""
        ids = set(self.live_ids() if ids is None else ids)

        def probe():
            seen = {via: (self.registered_ids(via), self.controller_id(via)) for via in self.live_ids()}
            done = all(ids <= set(listed) and controller in listed for listed, controller in seen.values())
            return done, None, f"(brokers, controller) {seen}"

        self._until(f"brokers {sorted(ids)} registered", probe, timeout)
