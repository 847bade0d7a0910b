"""A throwaway local ZooKeeper: Debian's `zookeeper` package (3.8), started directly
with java (no systemd, no service scripts), standalone on a free loopback port with its
own data dir. The tests (tests/support/zookeeper.py) and bench/cluster/run.py share it,
as they share broker.perf.local, so scripts need nothing from tests/.

    zk = ZooKeeperServer(tmp_path / "zk").start()
    zk.connect                 # "127.0.0.1:PORT" (host="127.0.0.2": on that address)
    zk.chroot("t1")            # "127.0.0.1:PORT/t1"
    zk.kill(); zk.start()      # SIGKILL, then again on the same port and data dir
    zk.pause(); zk.resume()    # SIGSTOP / SIGCONT
    zk.stop()

    ens = ZooKeeperEnsemble(tmp_path / "zk", hosts=["127.0.0.2", "127.0.0.3", "127.0.0.4"]).start()
    ens.connect                # "127.0.0.2:P1,127.0.0.3:P2,127.0.0.4:P3"
    ens.leader()               # the server that says 'Mode: leader' (None while none does)
    ens.servers[0].kill()      # each member is a ZooKeeperServer: kill, start, pause, resume

A ZooKeeperEnsemble is a quorum of such servers (3 by default), each with its own myid,
data dir and client, quorum and election ports, on one loopback address (several ports)
or on an address each; it has the standalone server's interface (connect, chroot,
running, start, stop, kill, log_tail), so tests/support/cluster.py and
bench/cluster/run.py take either.

Settings are made for fast, bounded tests: tickTime=500 ms so sessions may be as short
as 1 s (minSessionTimeout=1000), no fsync, no admin server, loopback only (127.0.0.1, or
the loopback address `host` names), a small heap.
Every wait is bounded. The JVM dies with the thread that started it (PR_SET_PDEATHSIG,
through util-linux's setpriv) and at interpreter exit, whatever happens; its log stays
in the data dir for failures (`log_tail()`). `own_session=True` puts it in a session of
its own, so a Ctrl-C at the terminal does not reach it: the script that started it
stops it last, after the brokers that use it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import time
import weakref
from pathlib import Path
from typing import BinaryIO

from broker.perf.local import free_port

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
CLASSPATH_JARS = (ZOOKEEPER_JAR, "/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar")
JVM_OPTIONS = (
    "-Xms32m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Dzookeeper.jmx.log4j.disable=true",
)
FOUR_LETTER_WORDS = "ruok,srvr,stat,mntr,cons,dump"
TICK_TIME_MS = 500
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0

ZOO_CFG = """\
tickTime={tick}
initLimit=10
syncLimit=5
dataDir={data_dir}
clientPort={port}
clientPortAddress={host}
admin.enableServer=false
4lw.commands.whitelist={words}
minSessionTimeout={min_session}
maxSessionTimeout=60000
forceSync=no
"""

#: a member of an ensemble: its id and every member's quorum and election addresses
ENSEMBLE_CFG = """\
{servers}
"""

LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
"""

_running: weakref.WeakSet[ZooKeeperServer] = weakref.WeakSet()


def available() -> str | None:
    """None when a ZooKeeper can be started here, else what is missing."""
    if not os.path.exists(ZOOKEEPER_JAR):
        return "ZooKeeper (Debian's zookeeper package)"
    if shutil.which("java") is None:
        return "java"
    return None


def four_letter_word(port: int, word: str, timeout: float = 2.0, host: str = "127.0.0.1") -> str:
    """Sends one of ZooKeeper's four-letter commands; '' when nothing answers."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(word.encode("ascii"))
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


def serving_mode(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> str | None:
    """'standalone', 'leader' or 'follower' as 'srvr' says; None when it does not serve."""
    for line in four_letter_word(port, "srvr", timeout=timeout, host=host).splitlines():
        if line.startswith("Mode: "):
            return line[len("Mode: ") :].strip()
    return None


class ZooKeeperServer:
    def __init__(
        self,
        directory,
        port: int | None = None,
        own_session: bool = False,
        host: str = "127.0.0.1",
        myid: int | None = None,
        peers: str = "",
    ):
        self.dir = Path(directory)
        self.host = host
        self.port = port or free_port()
        self.own_session = own_session
        #: in an ensemble: this server's id and the `server.N=...` lines of every member
        self.myid = myid
        self.peers = peers
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "zookeeper.log"
        self._log: BinaryIO | None = None

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def chroot(self, name: str) -> str:
        return f"{self.connect}/{name}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _write_config(self) -> Path:
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        text = ZOO_CFG.format(
            tick=TICK_TIME_MS,
            data_dir=self.dir / "data",
            port=self.port,
            host=self.host,
            words=FOUR_LETTER_WORDS,
            min_session=2 * TICK_TIME_MS,
        )
        if self.myid is not None:
            (self.dir / "data" / "myid").write_text(f"{self.myid}\n")
            text += ENSEMBLE_CFG.format(servers=self.peers)
        cfg.write_text(text)
        (self.dir / "log4j.properties").write_text(LOG4J_PROPERTIES)
        return cfg

    def command(self) -> list[str]:
        classpath = ":".join((str(self.dir),) + CLASSPATH_JARS)  # the dir holds log4j.properties
        # util-linux's setpriv sets PR_SET_PDEATHSIG before exec: the JVM gets SIGKILL when
        # the thread that started it ends (so start it from the main thread), even if this
        # process is killed -9 and atexit never runs. No preexec_fn: kazoo's threads run here.
        die_with_parent = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []
        return [
            *die_with_parent,
            "java",
            *JVM_OPTIONS,
            f"-Dzookeeper.log.dir={self.dir}",
            "-cp",
            classpath,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(self._write_config()),
        ]

    @property
    def mode(self) -> str | None:
        """'standalone', 'leader' or 'follower'; None when not serving (stopped, paused,
        or a member of an ensemble without quorum)."""
        return serving_mode(self.port, self.host) if self.running else None

    def start(self, timeout: float = START_TIMEOUT, wait: bool = True) -> ZooKeeperServer:
        """Starts the JVM; with `wait`, returns once it serves (a member of an ensemble
        serves once a quorum of members runs: start them all, then wait_serving())."""
        assert not self.running, "ZooKeeper already running"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=self.own_session,
        )
        _running.add(self)
        return self.wait_serving(timeout) if wait else self

    def wait_serving(self, timeout: float = START_TIMEOUT) -> ZooKeeperServer:
        deadline = time.monotonic() + timeout
        proc = self.proc
        assert proc is not None, "ZooKeeper not started"
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {proc.returncode}:\n{self.log_tail()}")
            # 'ruok' answers as soon as the socket is open; 'srvr' proves it serves
            if serving_mode(self.port, self.host) is not None:
                return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"ZooKeeper not serving on {self.connect} after {timeout} s:\n{self.log_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM (SIGKILL if it lingers) and wait."""
        proc = self.proc
        if proc is not None and self.running:
            self.resume()
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        self._close_log()

    def kill(self) -> None:
        """SIGKILL: ZooKeeper gets no chance to close its sessions."""
        proc = self.proc
        if proc is not None and self.running:
            proc.kill()
            proc.wait(STOP_TIMEOUT)
        self._close_log()

    def pause(self) -> None:
        """SIGSTOP: connections stay open, nothing answers."""
        if self.proc is not None and self.running:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.running:
            self.proc.send_signal(signal.SIGCONT)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class ZooKeeperEnsemble:
    """A quorum of ZooKeeperServers (see the module docstring): member i (myid i+1) in
    DIR/zk<i+1>, on hosts[i] (default: all on 127.0.0.1), each with a free client, quorum
    and election port. start() starts every member and returns once each serves (one is
    the leader); stop() and kill() act on every running member."""

    def __init__(self, directory, size: int = 3, hosts: list[str] | None = None, own_session: bool = False):
        hosts = list(hosts) if hosts is not None else ["127.0.0.1"] * size
        if len(hosts) < 3 or len(hosts) % 2 == 0:
            raise ValueError(f"an ensemble of {len(hosts)} servers: take an odd number, 3 or more")
        self.dir = Path(directory)
        ports = [(free_port(), free_port(), free_port()) for _ in hosts]  # client, quorum, election
        peers = "\n".join(f"server.{i + 1}={h}:{q}:{e}" for i, (h, (_c, q, e)) in enumerate(zip(hosts, ports)))
        self.servers = [
            ZooKeeperServer(self.dir / f"zk{i + 1}", port=c, own_session=own_session, host=h, myid=i + 1, peers=peers)
            for i, (h, (c, _q, _e)) in enumerate(zip(hosts, ports))
        ]

    @property
    def host(self) -> str:
        return self.servers[0].host

    @property
    def port(self) -> int:
        return self.servers[0].port

    @property
    def connect(self) -> str:
        return ",".join(s.connect for s in self.servers)

    def chroot(self, name: str) -> str:
        return f"{self.connect}/{name}"

    @property
    def running(self) -> bool:
        return any(s.running for s in self.servers)

    @property
    def log_path(self) -> Path:
        return self.dir

    def modes(self) -> dict[int, str | None]:
        """{myid: 'leader' | 'follower' | None} of every member."""
        return {i + 1: s.mode for i, s in enumerate(self.servers)}

    def leader(self) -> ZooKeeperServer | None:
        return next((s for s in self.servers if s.mode == "leader"), None)

    def wait_for_quorum(
        self, timeout: float = START_TIMEOUT, members: list[ZooKeeperServer] | None = None
    ) -> ZooKeeperServer:
        """Until `members` (default: every running one) serve and one is the leader; the leader."""
        deadline = time.monotonic() + timeout
        while True:
            wanted = members if members is not None else [s for s in self.servers if s.running]
            modes = {s.myid: s.mode for s in wanted}
            leader = next((s for s in wanted if modes[s.myid] == "leader"), None)
            if leader is not None and None not in modes.values():
                return leader
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"ZooKeeper ensemble {self.connect}: no quorum within {timeout} s "
                    f"(modes {modes}):\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def start(self, timeout: float = START_TIMEOUT) -> ZooKeeperEnsemble:
        for s in self.servers:
            if not s.running:
                s.start(wait=False)
        try:
            self.wait_for_quorum(timeout, self.servers)
        except RuntimeError:
            self.kill()
            raise
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        for s in self.servers:
            s.stop(timeout)

    def kill(self) -> None:
        for s in self.servers:
            s.kill()

    def log_tail(self, lines: int = 60) -> str:
        per = max(lines // len(self.servers), 5)
        return "\n".join(
            f"--- ZooKeeper {s.myid} ({s.connect}, {s.mode or ('down' if not s.running else 'not serving')})"
            f" ---\n{s.log_tail(per)}"
            for s in self.servers
        )

    def __enter__(self) -> ZooKeeperEnsemble:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@atexit.register
def _kill_all() -> None:
    for server in list(_running):
        server.kill()
