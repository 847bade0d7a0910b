"""Apache Kafka's own command-line tools, and the project's Java test program, run from the
pinned jars that `make testdeps` fetches (tests/jvm/pom.xml), so a test reads like the shell
command a user types:

    out = kafka_tool("kafka-topics", "--bootstrap-server", b.bootstrap, "--list").stdout
    with start_kafka_tool("kafka-console-consumer", "--bootstrap-server", ..., out_dir=tmp_path) as c: ...

A tool's name is that of Kafka's bin/ script without `.sh`; it runs the main class the script
runs, as `java -cp tests/jvm/target/kafka-libs/* <main class> ARGS`, with stdin closed unless
`input` is given. Every run is bounded by a timeout. A JVM start costs about a second on two
cores, so the flags keep it small (short-lived client JVMs: C1 only, serial GC, small heap),
each main class gets a class-data-sharing archive made by its first quick run (target/cds/,
about halves the next starts), and tests group many checks per launch.

When Java or the jars are missing the test fails under CI=true and skips elsewhere, saying
how to get them (tests/support/deps.py).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.deps import missing

JVM_DIR = Path(__file__).resolve().parents[1] / "jvm"
KAFKA_LIBS = JVM_DIR / "target" / "kafka-libs"
SPARK_LIBS = JVM_DIR / "target" / "spark-libs"
TEST_PROGRAM_JAR = KAFKA_LIBS / "kbroker-jvm-tests.jar"
CDS_DIR = JVM_DIR / "target" / "cds"  # emptied by `make testdeps` whenever the jars change

# short-lived tool JVMs: the interpreter and C1 start faster than tiered C2 on 2 cores
JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:-UsePerfData", "-Xss512k", "-Djava.awt.headless=true")
DEFAULT_HEAP = "256m"
DEFAULT_TIMEOUT = 120.0
_dumps = itertools.count()

# bin/<name>.sh -> the class it runs (Kafka 4.x)
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",  # kafka.admin.ConfigCommand until 4.3
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-e2e-latency": "org.apache.kafka.tools.EndToEndLatency",
    "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    # not a bin/ script: the copier of Kafka's transactions system test (tests/kafkatest)
    "transactional-message-copier": "org.apache.kafka.tools.TransactionalMessageCopier",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-server-start": "kafka.Kafka",
}


class ToolError(AssertionError):
    pass


@dataclass
class ToolRun:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.strip()]


def require_kafka_libs() -> Path:
    """The classpath directory; fails (CI) or skips when Java or the fetched jars are absent."""
    if shutil.which("java") is None:
        missing("java", "apt-get install openjdk-17-jre-headless")
    if not TEST_PROGRAM_JAR.exists():
        missing("Apache Kafka's jars", "run 'make testdeps' (Maven fetches tests/jvm/pom.xml once)")
    return KAFKA_LIBS


def require_spark_libs() -> list[Path]:
    require_kafka_libs()
    jars = sorted(SPARK_LIBS.glob("*.jar"))
    if not jars:
        missing("Spark's Kafka connector jars", "run 'make testdeps'")
    return jars


def java_command(
    main_class: str, *args: str, heap: str = DEFAULT_HEAP, jvm_args: tuple = (), quick: bool = True
) -> list[str]:
    """quick=False leaves JIT and GC to jvm_args, without a CDS archive (the Apache Kafka
    broker, benchmarks: JVMs that run long)."""
    libs = require_kafka_libs()
    flags = [*JVM_FLAGS, *_cds_flags(main_class)] if quick else ["-Djava.awt.headless=true"]
    return ["java", f"-Xmx{heap}", *flags, *jvm_args, "-cp", f"{libs}/*", main_class, *map(str, args)]


def _cds_flags(main_class: str) -> list[str]:
    """Uses the class's archive, or has this run write one at its exit (to a name of its
    own, renamed into place by _adopt_archives once the JVM has exited: runs may overlap)."""
    quiet = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    archive = CDS_DIR / f"{main_class}.jsa"
    if archive.exists():
        return [f"-XX:SharedArchiveFile={archive}", *quiet]
    CDS_DIR.mkdir(parents=True, exist_ok=True)
    return [f"-XX:ArchiveClassesAtExit={archive}.{os.getpid()}-{next(_dumps)}.tmp", *quiet]


def _adopt_archives(cmd: list[str]) -> None:
    for arg in cmd:
        if arg.startswith("-XX:ArchiveClassesAtExit="):
            tmp = Path(arg.split("=", 1)[1])
            if tmp.exists():
                os.replace(tmp, tmp.with_name(tmp.name.split(".jsa.")[0] + ".jsa"))


def tool_command(name: str, *args: str, **kw) -> list[str]:
    """kw: heap, jvm_args, quick (as java_command)."""
    return java_command(TOOLS[name], *args, **kw)


def run_java(
    cmd: list[str],
    input: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = True,
    env: dict | None = None,
) -> ToolRun:
    try:
        p = subprocess.run(
            cmd,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        raise ToolError(
            f"{' '.join(cmd[-12:])}: no exit within {timeout} s\n"
            f"stdout: {_text(e.stdout)[-3000:]}\nstderr: {_text(e.stderr)[-3000:]}"
        ) from None
    _adopt_archives(cmd)
    run = ToolRun(cmd, p.returncode, p.stdout, p.stderr)
    if check and p.returncode != 0:
        raise ToolError(
            f"{' '.join(cmd[-12:])}: exit {p.returncode}\nstdout: {p.stdout[-3000:]}\nstderr: {p.stderr[-3000:]}"
        )
    return run


def kafka_tool(
    name: str,
    *args,
    input: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = True,
    heap: str = DEFAULT_HEAP,
    jvm_args: tuple = (),
    quick: bool = True,
) -> ToolRun:
    """Runs Kafka's bin/<name>.sh with ARGS to its end; check=True raises on a non-zero exit."""
    return run_java(
        tool_command(name, *args, heap=heap, jvm_args=jvm_args, quick=quick), input=input, timeout=timeout, check=check
    )


def java_program(
    main: str,
    *args,
    input: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = True,
    heap: str = DEFAULT_HEAP,
) -> ToolRun:
    """Runs a class of the project's Java test program (tests/jvm/src), e.g. "ProducerCheck"."""
    return run_java(
        java_command(f"io.kbroker.jvmtests.{main}", *args, heap=heap), input=input, timeout=timeout, check=check
    )


class StartedTool:
    """A tool left running (a consumer, a verifiable consumer). Its stdout and stderr go to
    files in `out_dir` (read them at any time without blocking: output()); stop() sends
    SIGTERM, as Ctrl-C does (Kafka's tools close cleanly on it); every wait is bounded."""

    def __init__(self, cmd: list[str], out_dir: Path, name: str):
        self.cmd = cmd
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out_path = out_dir / f"{name}.out"
        self.err_path = out_dir / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err)

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def stop(self, timeout: float = 30.0) -> tuple[int, str]:
        """Ends the tool; returns (exit code, its whole stdout)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        _adopt_archives(self.cmd)
        return self.proc.returncode, self.output()

    def wait(self, timeout: float) -> tuple[int, str]:
        """Waits for the tool to exit by itself; past the timeout it is stopped (and fails)."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise ToolError(
                f"{' '.join(self.cmd[-12:])}: no exit within {timeout} s\n"
                f"stdout: {self.output()[-3000:]}\nstderr: {self.stderr()[-3000:]}"
            ) from None
        _adopt_archives(self.cmd)
        return self.proc.returncode, self.output()

    def __enter__(self) -> StartedTool:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_kafka_tool(
    name: str, *args, out_dir: Path, label: str | None = None, heap: str = DEFAULT_HEAP
) -> StartedTool:
    """Starts Kafka's bin/<name>.sh with ARGS, its output in out_dir/<label or name>.out/.err."""
    return StartedTool(tool_command(name, *args, heap=heap), out_dir, label or name)


def _text(b) -> str:
    if b is None:
        return ""
    return b.decode(errors="replace") if isinstance(b, bytes) else b
