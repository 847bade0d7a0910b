"""A real Apache Kafka 4.x broker from the pinned jars (tests/jvm/pom.xml): KRaft, one node
in combined mode (broker and controller), storage formatted by `kafka-storage format`, free
loopback ports, a small heap.

    with KafkaBroker(tmp_path / "kafka", config={"num.partitions": 3}) as k:
        k.bootstrap          # "127.0.0.1:PORT"
        k.log_dir            # its log.dirs (partition directories live here)
        k.stop(); k.start()  # clean shutdown and start again, same ports and data

Every wait is bounded; the JVM is killed at exit whatever happens. `jvm_flags` replaces
the quick-start flags (benchmarks give the broker Kafka's own, KAFKA_JVM_FLAGS: a full JIT, G1).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from broker.uuids import random_uuid, uuid_text
from tests.support.kafka_tools import java_command, kafka_tool
from tests.support.ports import free_port

START_TIMEOUT = 90.0
STOP_TIMEOUT = 60.0

# what a one-node test cluster needs, and settings that make tests quick and comparable
DEFAULTS = {
    "num.partitions": 1,
    "offsets.topic.replication.factor": 1,
    "offsets.topic.num.partitions": 4,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "share.coordinator.state.topic.replication.factor": 1,
    "share.coordinator.state.topic.min.isr": 1,
    "group.initial.rebalance.delay.ms": 0,
    "auto.create.topics.enable": "true",
}
QUICK_JVM_FLAGS = ("-Xms256m", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
# what bin/kafka-server-start.sh gives the broker (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS)
KAFKA_JVM_FLAGS = (
    "-Xms1g",
    "-Xmx1g",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
)

LOG4J2_PROPERTIES = """status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = FILE
logger.state.name = state.change.logger
logger.state.level = warn
"""


def kafka_uuid() -> str:
    """A Kafka Uuid as Kafka prints it: 16 random bytes, URL-safe base64 without padding."""
    return uuid_text(random_uuid())


class KafkaBroker:
    def __init__(
        self,
        directory,
        config: dict | None = None,
        port: int | None = None,
        node_id: int = 1,
        jvm_flags: tuple = QUICK_JVM_FLAGS,
    ):
        self.dir = Path(directory)
        self.port = port or free_port()
        self.controller_port = free_port()
        self.node_id = node_id
        self.jvm_flags = jvm_flags
        self.log_dir = self.dir / "data"
        self.config_path = self.dir / "server.properties"
        self.log_path = self.dir / "server.log"
        self.cluster_id = kafka_uuid()
        self.config = {**DEFAULTS, **(config or {})}
        self.proc: subprocess.Popen | None = None
        self._out = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> None:
        props = {
            "process.roles": "broker,controller",
            "node.id": self.node_id,
            "controller.quorum.voters": f"{self.node_id}@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            **self.config,
        }
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.dir / "log4j2.properties").write_text(LOG4J2_PROPERTIES.format(path=self.log_path))

    def format(self) -> None:
        """`kafka-storage format` once (a formatted log dir is kept across restarts)."""
        if (self.log_dir / "meta.properties").exists():
            return
        self._write_config()
        kafka_tool("kafka-storage", "format", "-t", self.cluster_id, "-c", self.config_path, timeout=120)

    def start(self, timeout: float = START_TIMEOUT) -> KafkaBroker:
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.format()
        self._write_config()
        cmd = java_command(
            "kafka.Kafka",
            self.config_path,
            heap=self._heap(),
            quick=False,
            jvm_args=(
                *self._other_flags(),
                f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={self.dir}",
            ),
        )
        self._out = open(self.dir / "stdout.log", "ab")
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._wait_ready(timeout)
        return self

    def _heap(self) -> str:
        for f in self.jvm_flags:
            if f.startswith("-Xmx"):
                return f[4:]
        return "1g"

    def _other_flags(self) -> tuple:
        return tuple(f for f in self.jvm_flags if not f.startswith("-Xmx"))

    def _wait_ready(self, timeout: float) -> None:
        """Ready once the broker answers Metadata with itself in it (registered with the controller)."""
        from broker.client import BrokerConnection, ClientError
        from broker.protocol.messages.metadata import MetadataRequest

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Apache Kafka exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with BrokerConnection("127.0.0.1", self.port, timeout=2) as c:
                    if c.request(MetadataRequest(topics=[], allow_auto_topic_creation=False)).brokers:
                        return
            except (ClientError, OSError):
                pass
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"Apache Kafka not ready after {timeout} s:\n{self.log_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM: Kafka's controlled shutdown. Returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"Apache Kafka did not stop within {timeout} s:\n{self.log_tail()}") from None
        finally:
            self._close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._close()

    def _close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None

    def log_tail(self, lines: int = 60) -> str:
        out = []
        for p in (self.dir / "stdout.log", self.log_path):
            try:
                out += p.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                pass
        return "\n".join(out[-lines:]) or "(no log)"

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        except RuntimeError:
            self.kill()
