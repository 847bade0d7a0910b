"""A throwaway local broker process for benchmarks (`broker serve` on a free loopback
port, data in a temporary directory), so bench scripts need nothing from tests/.

    with LocalBroker(config={"num.partitions": 3}) as b:
        run_produce(ProduceOptions(b.bootstrap, ...))

`own_session=True` (bench/cluster/run.py) starts it in a session of its own, so a
Ctrl-C at the terminal reaches only the script, which stops the brokers before the
ZooKeeper they use; it then dies with the thread that started it (PR_SET_PDEATHSIG,
through util-linux's setpriv), so it never outlives the script.

`nofile` sets the broker process' open-file limit (RLIMIT_NOFILE, soft and hard).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port() -> int:
    """A loopback port that no other process's bind to port 0 takes for the next minute,
    while a server that sets SO_REUSEADDR (kbroker's listeners, Java's, Python's
    create_server) can listen on it: the port is left in TIME_WAIT by a connection this
    side accepted and closed first. Two processes that each pick ports so (parallel test
    workers, two `broker perf` runs) do not get the same one between the pick and their
    server's bind, as a plain bind-and-close would allow."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port: int = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            accepted, _ = listener.accept()
            accepted.close()  # this side closes first: its port goes into TIME_WAIT
    return port


def terminate(proc: subprocess.Popen | None, timeout: float) -> None:
    """SIGTERM (a clean shutdown) and wait, bounded; SIGKILL past the bound."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class LocalBroker:
    def __init__(
        self,
        config: dict | None = None,
        data_dir: str | None = None,
        port: int | None = None,
        event_loop: str = "auto",
        log_path: str | None = None,
        own_session: bool = False,
        nofile: int | None = None,
    ):
        self.config = dict(config or {})
        self.own_session = own_session
        self.nofile = nofile
        self._tmp = None
        if data_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="kbroker-local-")
            data_dir = os.path.join(self._tmp, "data")
        self.data_dir = data_dir
        self.port = port or free_port()
        self.event_loop = event_loop
        self.log_path = log_path or os.path.join(os.path.dirname(os.path.abspath(data_dir)), f"broker-{self.port}.log")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self._started().pid

    def _started(self) -> subprocess.Popen[bytes]:
        if self.proc is None:
            raise RuntimeError("the broker has not been started")
        return self.proc

    def command(self) -> list[str]:
        """The `broker serve` command line this broker runs (what to type to start it by hand)."""
        cmd = [
            sys.executable,
            "-m",
            "broker.cli.main",
            "serve",
            "--data-dir",
            self.data_dir,
            "--listen",
            f"127.0.0.1:{self.port}",
            "--event-loop",
            self.event_loop,
        ]
        for k, v in self.config.items():
            cmd += ["--set", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 60.0) -> float:
        """Starts the broker; returns the seconds until it answered ApiVersions."""
        from broker.client import BrokerConnection, ClientError

        die_with_parent = ["setpriv", "--pdeathsig", "KILL"] if self.own_session and shutil.which("setpriv") else []
        cmd = [*die_with_parent, *self.command()]
        t0 = time.perf_counter()
        with open(self.log_path, "ab") as log:
            self.proc = proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=self.own_session,
                preexec_fn=None if self.nofile is None else self._limit_nofile,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"broker exited with {proc.returncode}; see {self.log_path}")
            try:
                with BrokerConnection("127.0.0.1", self.port, timeout=2):
                    return time.perf_counter() - t0
            except (ClientError, OSError):
                time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"broker not ready after {timeout} s; see {self.log_path}")

    def _limit_nofile(self) -> None:
        import resource

        if self.nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def open_fds(self) -> int:
        """File descriptors the broker process holds now."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def stop(self, timeout: float = 60.0) -> None:
        terminate(self.proc, timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def rss_mb(self) -> float:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def cleanup(self) -> None:
        self.kill()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> LocalBroker:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self.cleanup()
