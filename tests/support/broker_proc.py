"""A real broker process on a free loopback port, as `broker serve` runs it.

    with BrokerProcess(tmp_path / "data", config={"num.partitions": 3}) as b:
        b.bootstrap            # "127.0.0.1:PORT"
        b.restart()            # SIGTERM (clean shutdown), start again on the same port
        b.kill()               # SIGKILL, no clean shutdown
        b.start()
        b.pause(); b.resume()  # SIGSTOP / SIGCONT: alive, silent (its sockets stay open)
        b.terminate(); b.wait()  # SIGTERM without waiting, then wait for the exit

`nofile` sets the broker's open-file limit (RLIMIT_NOFILE, soft and hard), `umask` the
umask it starts with (else the test process's). `host` is the
loopback address it listens on (default 127.0.0.1; the fault tests give each broker its
own, from which its connections to other brokers and ZooKeeper then leave too).
`python` and `cwd` run another checkout's broker (its .venv's interpreter, in its
directory, so `-m broker.cli.main` is its code): bench/kafka_vs_kbroker.py --baseline.

Every wait is bounded. The process dies with the thread that started it
(PR_SET_PDEATHSIG through util-linux's setpriv, so start brokers from the main thread)
and is killed at interpreter exit, whatever happens.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path

from tests.support.ports import free_port

START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0

_running: weakref.WeakSet[BrokerProcess] = weakref.WeakSet()


class BrokerProcess:
    def __init__(
        self,
        data_dir,
        config: dict | None = None,
        port: int | None = None,
        broker_id: int = 0,
        log_level: str = "info",
        env: dict | None = None,
        event_loop: str = "asyncio",
        nofile: int | None = None,
        host: str = "127.0.0.1",
        python: str | None = None,
        cwd: Path | None = None,
        umask: int | None = None,
    ):
        self.data_dir = Path(data_dir)
        self.python = python or sys.executable
        self.cwd = cwd
        self.host = host
        self.config = dict(config or {})
        self.port = port or free_port()
        # a port picked here may be taken before the broker binds it (by any process's
        # outgoing connection: free ports and ephemeral ports come from the same range);
        # until the broker has once been ready, such a start is retried on another port
        self._port_chosen_here = port is None and "listeners" not in self.config
        self._ever_ready = False
        self.broker_id = broker_id
        self.log_level = log_level
        # the suite runs on asyncio's own loop; tests/interop/test_uvloop.py repeats the
        # core scenarios on uvloop (`broker serve` itself picks uvloop when installed)
        self.event_loop = event_loop
        self.env = env
        self.nofile = nofile
        self.umask = umask
        self.proc: subprocess.Popen | None = None
        self.paused = False
        self.log_path = self.data_dir.parent / f"broker-{self.broker_id}-{self.port}.log"
        self._log = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def command(self) -> list[str]:
        # SIGKILL when the thread that started it ends, even if this process is killed -9
        die_with_parent = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []
        # a test naming log.dirs itself (several log dirs) has them instead of the data dir
        data_dir = [] if "log.dirs" in self.config else ["--data-dir", str(self.data_dir)]
        cmd = [
            *die_with_parent,
            self.python,
            "-m",
            "broker.cli.main",
            "serve",
            *data_dir,
            "--broker-id",
            str(self.broker_id),
            "--log-level",
            self.log_level,
            "--event-loop",
            self.event_loop,
        ]
        if "listeners" not in self.config:  # else the test names its listeners (one of them on self.port)
            cmd += ["--listen", f"{self.host}:{self.port}"]
        for k, v in self.config.items():
            cmd += ["--set", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = START_TIMEOUT, wait: bool = True) -> BrokerProcess:
        """Starts the process; with wait, returns once it answers ApiVersions (else call
        wait_ready(), e.g. after starting several brokers at once)."""
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._close_log()
        self._log = open(self.log_path, "ab")
        env = dict(os.environ)
        env.update(self.env or {})
        self.paused = False
        self._env = env
        self._spawn()
        if wait:
            self.wait_ready(timeout)
        return self

    def _spawn(self) -> None:
        self.proc = subprocess.Popen(
            self.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=self._env,
            stdin=subprocess.DEVNULL,
            preexec_fn=self.preexec,
            cwd=self.cwd,
        )
        _running.add(self)

    def preexec(self) -> None:
        """Runs in the child before exec: applies `nofile` and `umask`."""
        if self.umask is not None:
            os.umask(self.umask)
        if self.nofile is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def open_fds(self) -> int:
        """File descriptors the broker process holds now."""
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        from broker.client import BrokerConnection, ClientError

        deadline = time.monotonic() + timeout
        port_retries = 3
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                if (
                    self._port_chosen_here
                    and not self._ever_ready
                    and port_retries
                    and f"cannot listen on {self.host}:{self.port}: Address already in use" in tail
                ):
                    port_retries -= 1
                    self.port = free_port()
                    self._spawn()
                    continue
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{tail}")
            try:
                with BrokerConnection(self.host, self.port, timeout=2):
                    self._ever_ready = True
                    return
            except (ClientError, OSError):
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker not ready after {timeout} s:\n{self.log_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait: the broker shuts down cleanly. Returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            self._close_log()
            return self.proc.returncode if self.proc else 0
        self.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise RuntimeError(f"broker did not stop within {timeout} s:\n{self.log_tail()}") from None
        finally:
            self._close_log()

    def kill(self) -> None:
        """SIGKILL: no clean shutdown (a paused broker dies too)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.paused = False
        self._close_log()

    def terminate(self) -> None:
        """SIGTERM without waiting (a paused broker is resumed first, or it would never
        see the signal); wait() collects the exit."""
        if self.running:
            self.resume()
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = STOP_TIMEOUT) -> int:
        """Waits for the exit after terminate(); subprocess.TimeoutExpired if it lingers."""
        code = self.proc.wait(timeout)
        self._close_log()
        return code

    def pause(self) -> None:
        """SIGSTOP: the process stays, its sockets stay open, nothing answers. Returns
        once the kernel has stopped it (the signal is delivered asynchronously)."""
        if self.running:
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True
            self._wait_state(lambda state: state in "Tt", "stopped")

    def resume(self) -> None:
        """SIGCONT; returns once the process runs again."""
        if self.running and self.paused:
            self.proc.send_signal(signal.SIGCONT)
            self._wait_state(lambda state: state not in "Tt", "resumed")
        self.paused = False

    def process_state(self) -> str:
        """The state letter of /proc/<pid>/stat: R, S, D, T (stopped), Z ...; '' when gone."""
        try:
            return Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return ""

    def _wait_state(self, ok, what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not ok(state := self.process_state()) and state not in ("", "Z"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {self.broker_id} not {what} after {timeout} s (state {state})")
            time.sleep(0.01)

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        except RuntimeError:
            self.kill()


@atexit.register
def _kill_all() -> None:
    for broker in list(_running):
        broker.kill()
