"""A kbroker cluster on this machine in one command: a ZooKeeper (Debian's package) and
three brokers on loopback, each with its own data dir and log, in the foreground until
Ctrl-C, which stops the brokers (SIGTERM: a clean shutdown), then ZooKeeper.

    .venv/bin/python bench/cluster/run.py                    # brokers 1..3 on 127.0.0.1:9093..9095
    .venv/bin/python bench/cluster/run.py --port 0           # free ports
    .venv/bin/python bench/cluster/run.py --brokers 5 --dir /tmp/kb --set min.insync.replicas=2
    .venv/bin/python bench/cluster/run.py --zookeeper 127.0.0.1:2181   # a ZooKeeper already running
    .venv/bin/python bench/cluster/run.py --zookeeper-ensemble 3       # a quorum of three ZooKeepers

The brokers listen on 9093.. so that a `make serve` broker (9092, the README's default)
can run beside them: point clients at the printed bootstrap string. Each broker's exact
`broker serve` command is printed, and lines on stdin act on the brokers it started:
`restart N`, `stop N`, `start N`, `kill N` (SIGKILL; a broker started again right after
waits for its old ZooKeeper session to expire, then registers), `status`.

The processes are broker.perf.local.LocalBroker and broker.perf.zookeeper.ZooKeeperServer
(the tests' harness, tests/support/cluster.py, uses the same ZooKeeper code), each in a
session of its own so that Ctrl-C reaches only this script, which stops them in order;
they die with it if it is killed. See bench/cluster/README.md.
"""

from __future__ import annotations

import argparse
import os
import queue
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

from broker.perf.local import LocalBroker
from broker.perf.zookeeper import ZooKeeperEnsemble, ZooKeeperServer, available

JOIN_TIMEOUT = 30.0  # for the brokers to list each other once they answer
STOP_TIMEOUT = 60.0  # per broker, for a clean shutdown


class Stop(Exception):
    """SIGINT or SIGTERM reached the script."""


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Run a ZooKeeper and N kbroker brokers on loopback until Ctrl-C.")
    p.add_argument("--brokers", type=int, default=3, metavar="N", help="number of brokers, ids 1..N (default 3)")
    p.add_argument(
        "--port",
        type=int,
        default=9093,
        help="port of broker 1; broker i listens on PORT+i-1 (default 9093; 0: free ports)",
    )
    p.add_argument("--zookeeper", metavar="HOST:PORT", help="use this ZooKeeper instead of starting one")
    p.add_argument(
        "--zookeeper-ensemble",
        type=int,
        default=0,
        metavar="N",
        help="start a ZooKeeper ensemble of N servers (3, 5...) on 127.0.0.1 instead of one standalone",
    )
    p.add_argument("--chroot", default="kbroker", help="ZooKeeper chroot of the cluster (default kbroker)")
    p.add_argument("--dir", help="data dirs and logs here, kept at exit (default: a temporary dir, removed)")
    p.add_argument("--keep", action="store_true", help="keep the temporary dir at exit")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker configuration key for every broker (repeatable)",
    )
    p.add_argument("--event-loop", default="auto", choices=["auto", "asyncio", "uvloop"])
    args = p.parse_args(argv)
    if args.brokers < 1:
        p.error("--brokers must be at least 1")
    for item in args.set:
        if "=" not in item:
            p.error(f"--set {item!r}: expected KEY=VALUE")
    return args


def broker_ports(first: int, n: int) -> list[int]:
    """Ports of brokers 1..n; SystemExit with one line when one is taken."""
    if first == 0:
        return [0] * n
    ports = list(range(first, first + n))
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                raise SystemExit(f"cluster: port {port} is in use (pass --port 0 for free ports)") from None
    return ports


def registered(bootstrap: str) -> tuple[list[int], int]:
    """(broker ids, controller id) as one broker's Metadata lists them."""
    from broker.client import Cluster

    with Cluster(bootstrap, client_id="cluster-run", timeout=5) as c:
        c.refresh([])
        return sorted(c.brokers), c.controller_id


def wait_joined(brokers: dict[int, LocalBroker]) -> str:
    """Waits until every broker lists all of them; a line saying what it saw."""
    want = sorted(brokers)
    deadline = time.monotonic() + JOIN_TIMEOUT
    seen = {}
    while time.monotonic() < deadline:
        seen = {}
        for i, b in brokers.items():
            try:
                seen[i] = registered(b.bootstrap)
            except Exception as exc:  # noqa: BLE001 — reported below
                seen[i] = (str(exc), -1)
        if all(ids == want and controller in want for ids, controller in seen.values()):
            return f"cluster formed: brokers {want}, controller {seen[want[0]][1]}"
        time.sleep(0.2)
    return f"warning: the brokers did not list each other within {JOIN_TIMEOUT:.0f} s: {seen}"


def start_broker(broker_id: int, b: LocalBroker) -> None:
    """Starts it; RuntimeError with the broker's own last words if it does not come up."""
    try:
        b.start()
    except RuntimeError as exc:
        try:
            with open(b.log_path, errors="replace") as f:
                last = [line.strip() for line in f if line.strip()][-1:]
        except OSError:
            last = []
        raise RuntimeError(f"broker {broker_id}: {last[0] if last else exc}") from None


def stop_all(brokers: dict[int, LocalBroker], zookeeper: ZooKeeperServer | ZooKeeperEnsemble | None) -> None:
    """SIGTERM to every broker at once, wait for each, then stop ZooKeeper."""
    for b in brokers.values():
        if b.proc is not None and b.proc.poll() is None:
            b.proc.send_signal(signal.SIGTERM)
    for i, b in brokers.items():
        b.stop(STOP_TIMEOUT)
        if b.proc is not None:
            print(f"broker {i} stopped (exit {b.proc.returncode})", flush=True)
    if zookeeper is not None:
        zookeeper.stop()
        print("ZooKeeper stopped", flush=True)


COMMANDS = "restart N | stop N | start N | kill N | status"


def read_commands(commands: queue.Queue) -> None:
    """stdin, line by line, into `commands` (a thread: the main thread keeps the signals)."""
    try:
        for line in sys.stdin:
            if line.strip():
                commands.put(line.strip())
    except (OSError, ValueError):
        pass


def running(b: LocalBroker) -> bool:
    return b.proc is not None and b.proc.poll() is None


def command(line: str, brokers: dict[int, LocalBroker], reported: set[int]) -> str:
    """Acts on one stdin line; the line to print."""
    words = line.split()
    if words == ["status"]:
        return "\n".join(
            f"broker {i}   {b.bootstrap}  "
            + (f"pid {b.pid}" if running(b) else "not running" if b.proc is None else f"exited {b.proc.returncode}")
            for i, b in brokers.items()
        )
    if (
        len(words) != 2
        or words[0] not in ("restart", "stop", "start", "kill")
        or not words[1].isdigit()
        or int(words[1]) not in brokers
    ):
        return f"unknown command {line!r}: {COMMANDS} (N in {sorted(brokers)})"
    verb, i = words[0], int(words[1])
    b = brokers[i]
    if verb in ("stop", "restart", "kill") and running(b):
        reported.add(i)  # said here, not by the watch
        if verb == "kill":
            b.kill()
            return f"broker {i} killed (SIGKILL)"
        b.stop(STOP_TIMEOUT)
        if verb == "stop":
            return f"broker {i} stopped (exit {b.proc.returncode})"
    elif verb in ("stop", "kill"):
        return f"broker {i} is not running"
    if verb == "start" and running(b):
        return f"broker {i} is already running (pid {b.pid})"
    try:
        start_broker(i, b)
    except RuntimeError as exc:
        return f"broker {i} did not start: {exc}"
    reported.discard(i)
    return f"broker {i} {verb}ed: {b.bootstrap}  pid {b.pid}"


def watch(brokers: dict[int, LocalBroker]) -> None:
    """In the foreground until Stop: runs the commands read from stdin and says when a
    broker exits (e.g. killed by hand)."""
    reported: set[int] = set()
    commands: queue.Queue = queue.Queue()
    threading.Thread(target=read_commands, args=(commands,), daemon=True, name="stdin").start()
    while True:
        for i, b in brokers.items():
            if i not in reported and b.proc is not None and b.proc.poll() is not None:
                reported.add(i)
                print(
                    f"broker {i} exited with {b.proc.returncode} (see {b.log_path}); the others go on "
                    f"(`start {i}` on stdin starts it again)",
                    flush=True,
                )
        try:
            line = commands.get(timeout=0.5)
        except queue.Empty:
            continue
        print(command(line, brokers, reported), flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.zookeeper is None and (what := available()) is not None:
        raise SystemExit(
            f"cluster: {what} is not installed (apt-get install zookeeper default-jre-headless), "
            "or pass --zookeeper HOST:PORT"
        )
    ports = broker_ports(args.port, args.brokers)
    root = os.path.abspath(args.dir) if args.dir else tempfile.mkdtemp(prefix="kbroker-cluster-")
    os.makedirs(root, exist_ok=True)

    def on_signal(signum, frame):
        raise Stop()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    zookeeper: ZooKeeperServer | ZooKeeperEnsemble | None = None
    if args.zookeeper_ensemble and not args.zookeeper:
        zookeeper = ZooKeeperEnsemble(os.path.join(root, "zookeeper"), size=args.zookeeper_ensemble, own_session=True)
    elif not args.zookeeper:
        zookeeper = ZooKeeperServer(os.path.join(root, "zookeeper"), own_session=True)
    brokers: dict[int, LocalBroker] = {}
    try:
        if zookeeper is not None:
            zookeeper.start()
        connect = f"{args.zookeeper or zookeeper.connect}/{args.chroot.strip('/')}"
        print(f"ZooKeeper  {connect}" + (f"  (data and log in {zookeeper.dir})" if zookeeper else ""), flush=True)
        extra = dict(item.split("=", 1) for item in args.set)
        for i, port in enumerate(ports, start=1):
            data = os.path.join(root, f"broker-{i}")
            os.makedirs(data, exist_ok=True)
            b = LocalBroker(
                config={"broker.id": i, "zookeeper.connect": connect, **extra},
                data_dir=os.path.join(data, "data"),
                port=port or None,
                event_loop=args.event_loop,
                log_path=os.path.join(data, "broker.log"),
                own_session=True,
            )
            brokers[i] = b
            start_broker(i, b)
            print(
                f"broker {i}   {b.bootstrap}  pid {b.pid}  log {b.log_path}\n           {shlex.join(b.command())}",
                flush=True,
            )
        print(wait_joined(brokers), flush=True)
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        first, second = brokers[1].bootstrap, brokers[min(2, args.brokers)].bootstrap
        rf = min(3, args.brokers)
        print(
            f"\nbootstrap  {bootstrap}\n"
            f"  broker topics create orders --partitions 6 --replication-factor {rf} -b {first}\n"
            f"  broker topics describe orders -b {second}\n"
            f"  kill -9 / kill -STOP a broker's pid to watch a failover\n"
            f"stdin: {COMMANDS}\n"
            f"Ctrl-C (or kill {os.getpid()}) stops the brokers, then ZooKeeper"
            + ("." if args.dir or args.keep else f", and removes {root}."),
            flush=True,
        )
        watch(brokers)
    except Stop:
        print("\nstopping", flush=True)
    except (RuntimeError, OSError) as exc:
        print(f"cluster: {str(exc).splitlines()[0]} (logs kept in {root})", file=sys.stderr)
        args.keep = True
        return 1
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C does not cut the shutdown short
            signal.signal(signum, signal.SIG_IGN)
        stop_all(brokers, zookeeper)
        if not (args.dir or args.keep):
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
