"""The peers' servers, each started by the benchmark on free loopback ports with its data
in a temporary directory, and stopped (with everything it spawned) and deleted after.

    with RedisServer(tmp_root) as s:     # s.port, s.pid (root of the measured tree)
        ...
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

from common import ServerProcess, free_port, wait_port


class StartError(RuntimeError):
    pass


def _version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def deb_version(package: str) -> str:
    v = _version(["dpkg-query", "-W", "-f", "${Version}", package])
    return v.split(":", 1)[-1].split("-", 1)[0] if v else ""


class _Managed:
    name = "server"
    start_timeout = 30.0

    def __init__(self, tmp_root: str | None = None):
        self.tmp = tempfile.mkdtemp(prefix=f"peers-{self.name}-", dir=tmp_root)
        self.procs: list[ServerProcess] = []
        self.main: ServerProcess | None = None

    @property
    def pid(self) -> int:
        return self.main.pid

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        for p in reversed(self.procs):
            try:
                p.stop()
            except Exception:  # noqa: BLE001 — go on stopping the others
                pass

    def cleanup(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc):
        try:
            self.stop()
        finally:
            self.cleanup()

    def _launch(self, name: str, cmd: list[str], env: dict | None = None) -> ServerProcess:
        p = ServerProcess(name, cmd, os.path.join(self.tmp, f"{name}.log"), env=env, cwd=self.tmp)
        self.procs.append(p)
        p.start()
        return p

    def _wait(self, p: ServerProcess, port: int, what: str) -> None:
        t0 = time.monotonic()
        if not wait_port(port, self.start_timeout, p.alive):
            state = "exited" if not p.alive() else f"not listening after {self.start_timeout:.0f} s"
            raise StartError(f"{what} {state}: {p.log_tail(3)[:300]}")
        self.startup_s = time.monotonic() - t0
        p.remember_children()


class RedisServer(_Managed):
    """redis-server with AOF on, fsync once a second (appendfsync everysec), RDB off."""

    name = "redis"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if not exe:
            raise StartError("redis-server not installed")
        self.version = _version([exe, "--version"]).split(" v=")[-1].split()[0] if exe else ""
        self.port = free_port()
        self.main = self._launch(
            "redis",
            [
                exe,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--protected-mode",
                "yes",
                "--dir",
                self.tmp,
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
                "--daemonize",
                "no",
                "--logfile",
                "",
                "--databases",
                "1",
            ],
        )
        self._wait(self.main, self.port, "redis-server")


class NatsServer(_Managed):
    """nats-server with JetStream, file store in the temp dir."""

    name = "nats"

    def start(self) -> None:
        exe = shutil.which("nats-server")
        if not exe:
            raise StartError("nats-server not installed")
        self.version = _version([exe, "--version"]).replace("nats-server: v", "")
        self.port = free_port()
        self.main = self._launch(
            "nats", [exe, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", os.path.join(self.tmp, "js")]
        )
        self._wait(self.main, self.port, "nats-server")


class RabbitServer(_Managed):
    """rabbitmq-server (the Debian package's scripts, run as the current user) with only
    the rabbitmq_stream plugin; node name, Mnesia, logs, config, plugins file, Erlang
    cookie (HOME) all in the temp dir; AMQP, stream, distribution and its own epmd on
    free loopback ports."""

    name = "rabbitmq"
    start_timeout = 120.0

    def start(self) -> None:
        server = "/usr/lib/rabbitmq/bin/rabbitmq-server"
        epmd = shutil.which("epmd")
        if not os.path.exists(server) or not epmd:
            raise StartError("rabbitmq-server not installed")
        self.version = deb_version("rabbitmq-server")
        self.erlang = deb_version("erlang-base")
        epmd_port, amqp, self.port, dist = free_port(), free_port(), free_port(), free_port()
        t = self.tmp
        with open(os.path.join(t, "enabled_plugins"), "w") as f:
            f.write("[rabbitmq_stream].\n")
        with open(os.path.join(t, "rabbitmq.conf"), "w") as f:
            f.write(
                f"listeners.tcp.1 = 127.0.0.1:{amqp}\n"
                f"stream.listeners.tcp.1 = 127.0.0.1:{self.port}\n"
                f"stream.advertised_host = 127.0.0.1\n"
                f"stream.advertised_port = {self.port}\n"
            )
        open(os.path.join(t, "rabbitmq-env.conf"), "w").close()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update(
            {
                "HOME": t,  # .erlang.cookie goes here
                "ERL_EPMD_ADDRESS": "127.0.0.1",
                "ERL_EPMD_PORT": str(epmd_port),
                "RABBITMQ_CONF_ENV_FILE": os.path.join(t, "rabbitmq-env.conf"),
                "RABBITMQ_NODENAME": f"kbpeers{self.port}@localhost",
                "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
                "RABBITMQ_NODE_PORT": str(amqp),
                "RABBITMQ_DIST_PORT": str(dist),
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
                "RABBITMQ_MNESIA_BASE": os.path.join(t, "mnesia"),
                "RABBITMQ_LOG_BASE": os.path.join(t, "log"),
                "RABBITMQ_LOGS": os.path.join(t, "log", "rabbit.log"),
                "RABBITMQ_PID_FILE": os.path.join(t, "rabbit.pid"),
                "RABBITMQ_PLUGINS_EXPAND_DIR": os.path.join(t, "plugins-expand"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(t, "enabled_plugins"),
                "RABBITMQ_CONFIG_FILE": os.path.join(t, "rabbitmq.conf"),
                "RABBITMQ_ADVANCED_CONFIG_FILE": os.path.join(t, "advanced.config"),
            }
        )
        self.epmd = self._launch("epmd", [epmd, "-address", "127.0.0.1", "-port", str(epmd_port)], env=env)
        if not wait_port(epmd_port, 10, self.epmd.alive):
            raise StartError(f"epmd did not start: {self.epmd.log_tail(2)}")
        self.main = self._launch("rabbitmq", [server], env=env)
        self._wait(self.main, self.port, "rabbitmq-server (stream port)")
        # the stream listener is up only once the plugin has booted; give the node a
        # moment to finish its boot steps before the first connection
        time.sleep(1.0)
