"""The `broker` command against a live broker, as a user runs it (a subprocess): topic
administration, produce from stdin, consume to stdout, one-line errors with the Kafka
error name and exit 1, configuration errors naming the key and exit 2, --help."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from broker.client import BrokerConnection, Cluster
from broker.cluster.store.znodes import encode_topic_id
from broker.native import iter_batches
from tests.interop.helpers import confluent_read_all, fetch_once, offsets
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_binary
from tests.support.ports import free_port


def wait_port(host: str, port: int, timeout: float, until=lambda: False) -> bool:
    """True once host:port accepts connections; False after `timeout` s or when until()."""
    import socket
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until():
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


pytestmark = pytest.mark.interop

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 60


def broker_cmd() -> list[str]:
    exe = shutil.which("broker", path=os.path.dirname(sys.executable)) or shutil.which("broker")
    return [exe] if exe else [sys.executable, "-m", "broker.cli.main"]


def run(*args, stdin: bytes | None = None, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(
        broker_cmd() + [str(a) for a in args], input=stdin, capture_output=True, timeout=timeout, cwd=REPO
    )


def ok(*args, **kw) -> subprocess.CompletedProcess:
    r = run(*args, **kw)
    assert r.returncode == 0, (args, r.returncode, r.stderr.decode(errors="replace"))
    return r


def one_line_error(r: subprocess.CompletedProcess, code: int, *words: str) -> str:
    err = r.stderr.decode(errors="replace")
    assert r.returncode == code, (r.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # no auto-creation: a producer naming an unknown topic gets the error, not a topic
    with BrokerProcess(tmp_path_factory.mktemp("cli") / "data", config={"auto.create.topics.enable": "false"}) as b:
        yield b


# ---------------------------------------------------------------------- topics


def describe(broker, topic) -> tuple[dict, list[dict]]:
    out = ok("topics", "describe", topic, "--bootstrap", broker.bootstrap).stdout.decode()
    lines = out.splitlines()
    assert lines and lines[0].startswith(f"Topic: {topic}\t"), out

    def fields(line):
        return dict(item.split(": ", 1) for item in line.strip().split("\t"))

    return fields(lines[0]), [fields(x) for x in lines[1:]]


def test_topics_create_list_describe_alter_delete(broker, topic_name):
    r = ok(
        "topics",
        "create",
        topic_name,
        "--partitions",
        3,
        "--replication-factor",
        1,
        "--config",
        "retention.ms=123456",
        "--config",
        "cleanup.policy=delete",
        "--bootstrap",
        broker.bootstrap,
    )
    assert topic_name in r.stdout.decode()
    assert topic_name in ok("topics", "list", "-b", broker.bootstrap).stdout.decode().split()

    head, parts = describe(broker, topic_name)
    assert head["PartitionCount"] == "3" and head["ReplicationFactor"] == "1"
    with Cluster(broker.bootstrap) as c:
        # Kafka prints topic ids as URL-safe base64 (its Uuid.toString)
        assert head["TopicId"] == encode_topic_id(c.topic(topic_name).topic_id)
    assert set(head["Configs"].split(",")) == {"retention.ms=123456", "cleanup.policy=delete"}
    assert [(p["Partition"], p["Leader"], p["Replicas"], p["Isr"]) for p in parts] == [
        (str(i), "0", "0", "0") for i in range(3)
    ]

    ok(
        "topics",
        "alter",
        topic_name,
        "--partitions",
        5,
        "--config",
        "segment.bytes=1048576",
        "--delete-config",
        "retention.ms",
        "-b",
        broker.bootstrap,
    )
    head, parts = describe(broker, topic_name)
    assert head["PartitionCount"] == "5" and len(parts) == 5
    assert set(head["Configs"].split(",")) == {"segment.bytes=1048576", "cleanup.policy=delete"}
    with Cluster(broker.bootstrap) as c:
        entries = {e.name: e.value for e in c.describe_configs(2, topic_name)}
    assert entries["segment.bytes"] == "1048576" and entries["retention.ms"] != "123456"

    ok("topics", "delete", topic_name, "-b", broker.bootstrap)
    assert topic_name not in ok("topics", "list", "-b", broker.bootstrap).stdout.decode().split()
    one_line_error(run("topics", "describe", topic_name, "-b", broker.bootstrap), 1, "UNKNOWN_TOPIC_OR_PARTITION")


def test_topic_errors_are_one_line_with_the_kafka_error_name(broker, topic_name):
    ok("topics", "create", topic_name, "--partitions", 1, "-b", broker.bootstrap)
    one_line_error(run("topics", "create", topic_name, "-b", broker.bootstrap), 1, "TOPIC_ALREADY_EXISTS", topic_name)
    one_line_error(
        run("topics", "describe", "no-such-topic-at-all", "-b", broker.bootstrap), 1, "UNKNOWN_TOPIC_OR_PARTITION"
    )
    one_line_error(
        run("topics", "delete", "no-such-topic-at-all", "-b", broker.bootstrap), 1, "UNKNOWN_TOPIC_OR_PARTITION"
    )
    one_line_error(run("topics", "create", "bad name!", "-b", broker.bootstrap), 1, "INVALID_TOPIC_EXCEPTION")
    one_line_error(
        run("topics", "create", topic_name + "-x", "--config", "retention.ms=soon", "-b", broker.bootstrap),
        1,
        "INVALID_CONFIG",
    )
    one_line_error(
        run("topics", "create", topic_name + "-y", "--replication-factor", 3, "-b", broker.bootstrap),
        1,
        "INVALID_REPLICATION_FACTOR",
    )
    one_line_error(
        run("topics", "alter", topic_name, "--partitions", 1, "-b", broker.bootstrap), 1, "INVALID_PARTITIONS"
    )
    one_line_error(run("topics", "alter", topic_name, "-b", broker.bootstrap), 2)
    one_line_error(
        run("topics", "alter", topic_name, "--config", "no.such.key=1", "-b", broker.bootstrap), 1, "INVALID_CONFIG"
    )
    # nobody listening
    one_line_error(run("topics", "list", "-b", f"127.0.0.1:{free_port()}"), 1)
    one_line_error(run("topics", "list", "-b", "no-port-here"), 2, "no-port-here")
    # what failed changed nothing
    with Cluster(broker.bootstrap) as c:
        assert len(c.topic(topic_name).partitions) == 1
        names = set(c.refresh())
    assert not {topic_name + "-x", topic_name + "-y", "bad name!"} & names


# ---------------------------------------------------------------------- produce / consume


def test_produce_keyed_lines_with_compression_then_consume(broker, topic_name):
    ok("topics", "create", topic_name, "--partitions", 2, "-b", broker.bootstrap)
    lines = [b"user-%d:event %d with some text" % (i % 5, i) for i in range(300)]
    r = ok(
        "produce",
        "--topic",
        topic_name,
        "--key-separator",
        ":",
        "--compression",
        "gzip",
        "-b",
        broker.bootstrap,
        stdin=b"\n".join(lines) + b"\n",
    )
    assert b"300" in r.stderr

    # what landed: keys split off, values intact, every batch gzip-compressed
    got = confluent_read_all(broker.bootstrap, topic_name, [0, 1])
    assert sorted((k, v) for _, _, k, v, _ in got) == sorted(tuple(x.split(b":", 1)) for x in lines)
    with Cluster(broker.bootstrap) as c, BrokerConnection("127.0.0.1", broker.port) as conn:
        topic_id = c.topic(topic_name).topic_id
        for p in (0, 1):
            d = fetch_once(conn, topic_name, topic_id, p, 0)
            codecs = {b.compression for b in iter_batches(d.records)}
            assert codecs == {1}, codecs  # gzip

    # consume --from-beginning --print-key: "key<TAB>value" lines, every message once
    r = ok(
        "consume",
        "--topic",
        topic_name,
        "--from-beginning",
        "--print-key",
        "--max-messages",
        300,
        "--timeout-ms",
        5000,
        "-b",
        broker.bootstrap,
    )
    out = r.stdout.splitlines()
    assert sorted(out) == sorted(x.replace(b":", b"\t", 1) for x in lines)
    assert b"consumed 300" in r.stderr

    # --max-messages stops early
    r = ok(
        "consume",
        "-t",
        topic_name,
        "--from-beginning",
        "--max-messages",
        7,
        "--timeout-ms",
        5000,
        "-b",
        broker.bootstrap,
    )
    assert len(r.stdout.splitlines()) == 7


def test_consume_offset_partition_and_timeout(broker, topic_name):
    ok("topics", "create", topic_name, "--partitions", 2, "-b", broker.bootstrap)
    ok(
        "produce",
        "-t",
        topic_name,
        "--partition",
        1,
        "-b",
        broker.bootstrap,
        stdin=b"".join(b"line-%d\n" % i for i in range(20)),
    )
    ok("produce", "-t", topic_name, "--partition", 0, "-b", broker.bootstrap, stdin=b"zero\n")
    assert offsets(broker.bootstrap, topic_name, [0, 1]) == {0: (0, 1), 1: (0, 20)}

    r = ok("consume", "-t", topic_name, "--partition", 1, "--offset", 15, "--timeout-ms", 1500, "-b", broker.bootstrap)
    assert r.stdout.splitlines() == [b"line-%d" % i for i in range(15, 20)]
    # no key: --print-key shows null
    r = ok(
        "consume",
        "-t",
        topic_name,
        "--partition",
        0,
        "--from-beginning",
        "--print-key",
        "--timeout-ms",
        1500,
        "-b",
        broker.bootstrap,
    )
    assert r.stdout.splitlines() == [b"null\tzero"]
    # from the end: nothing arrives, --timeout-ms ends it
    r = ok("consume", "-t", topic_name, "--timeout-ms", 700, "-b", broker.bootstrap)
    assert r.stdout == b"" and b"consumed 0" in r.stderr


def test_produce_and_consume_errors(broker, topic_name):
    one_line_error(
        run("produce", "-t", "no-such-topic-here", "-b", broker.bootstrap, stdin=b"x\n"),
        1,
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    one_line_error(
        run("consume", "-t", "no-such-topic-here", "--timeout-ms", 500, "-b", broker.bootstrap),
        1,
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    ok("topics", "create", topic_name, "--partitions", 1, "-b", broker.bootstrap)
    one_line_error(
        run("consume", "-t", topic_name, "--partition", 4, "--timeout-ms", 500, "-b", broker.bootstrap),
        1,
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    # a line without the key separator is a usage error naming the line
    one_line_error(
        run("produce", "-t", topic_name, "--key-separator", ":", "-b", broker.bootstrap, stdin=b"a:1\nno separator\n"),
        2,
        "line 2",
    )
    r = run("produce", "-t", topic_name, "--acks", "2", "-b", broker.bootstrap, stdin=b"x\n")
    assert r.returncode == 2 and b"acks" in r.stderr
    r = run("produce", "-t", topic_name, "--compression", "brotli", "-b", broker.bootstrap, stdin=b"x\n")
    assert r.returncode == 2 and b"brotli" in r.stderr


# ---------------------------------------------------------------------- serve


@pytest.mark.parametrize(
    "setting,key",
    [
        ("no.such.key=1", "no.such.key"),
        ("num.partitions=abc", "num.partitions"),
        ("log.segment.bytes=-5", "log.segment.bytes"),
        ("auto.create.topics.enable=maybe", "auto.create.topics.enable"),
    ],
)
def test_serve_refuses_bad_configuration(tmp_path, setting, key):
    r = run(
        "serve", "--data-dir", tmp_path / "data", "--listen", f"127.0.0.1:{free_port()}", "--set", setting, timeout=30
    )
    one_line_error(r, 2, key)


def test_serve_refuses_a_bad_config_file(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("broker.id=0\nlog.retention.hours=forever\n")
    r = run(
        "serve", "--config", props, "--data-dir", tmp_path / "data", "--listen", f"127.0.0.1:{free_port()}", timeout=30
    )
    one_line_error(r, 2, "log.retention.hours")
    one_line_error(run("serve", "--config", tmp_path / "missing.properties", timeout=30), 2, "missing.properties")


def test_serve_reports_every_unknown_key_at_once(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("broker.id=0\nprocess.rolez=broker\nlog.retention.hour=5\nno.such.key=1\n")
    r = run(
        "serve", "--config", props, "--data-dir", tmp_path / "data", "--listen", f"127.0.0.1:{free_port()}", timeout=30
    )
    one_line_error(
        r,
        2,
        "configuration error: unknown configuration keys:",
        "process.rolez",
        "no.such.key",
        "log.retention.hour (did you mean log.retention.hours?)",
    )


def test_serve_starts_with_a_kafka_4_kraft_server_properties(tmp_path):
    """Kafka 4's sample combined-mode server.properties: kbroker serves its PLAINTEXT
    listener as broker node.id, and says once per key what it does not do."""
    from tests.unit.test_config import KAFKA_4_KRAFT_PROPERTIES

    port, controller_port = free_port(), free_port()
    text = (
        KAFKA_4_KRAFT_PROPERTIES.replace(":9092", f":{port}")
        .replace(":9093", f":{controller_port}")
        .replace("/tmp/kraft-combined-logs", str(tmp_path / "data"))
        .replace("listeners=PLAINTEXT://:", "listeners=PLAINTEXT://127.0.0.1:")
    )
    props = tmp_path / "server.properties"
    props.write_text(text)
    err_path = tmp_path / "stderr"
    with open(err_path, "wb") as err:
        p = subprocess.Popen(
            broker_cmd() + ["serve", "--config", str(props)], stdout=subprocess.DEVNULL, stderr=err, cwd=REPO
        )
    try:
        assert wait_port("127.0.0.1", port, 30, until=lambda: p.poll() is not None), err_path.read_text()
        with BrokerConnection("127.0.0.1", port) as conn:
            from broker.protocol.messages.metadata import MetadataRequest

            brokers = conn.request(MetadataRequest(topics=[]), version=12).brokers
        assert [(b.node_id, b.port) for b in brokers] == [(1, port)]
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", controller_port), timeout=2).close()
    finally:
        p.terminate()
        p.wait(30)
    assert p.returncode == 0
    log = err_path.read_text()
    for key in ("process.roles", "controller.quorum.voters", "num.io.threads"):
        lines = [line for line in log.splitlines() if f"config key {key} has no effect" in line]
        assert len(lines) == 1 and " WARNING " in lines[0], (key, log)
    assert "node.id=1 is taken as broker.id" in log and "is not bound" in log
    assert "Traceback" not in log


@pytest.mark.parametrize(
    "listeners,words",
    [
        ("SSL://127.0.0.1:{port}", ["configuration error: ssl.keystore.location", "needs a key store"]),
        ("SASL_SSL://127.0.0.1:{port}", ["configuration error: sasl.enabled.mechanisms", "GSSAPI", "not implemented"]),
        (
            "PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{other}",
            ["configuration error: listeners", "CONTROLLER://", "would not be bound"],
        ),
    ],
)
def test_serve_refuses_listeners_it_would_not_serve_as_configured(tmp_path, listeners, words):
    """Never plaintext on a port the operator believes encrypted, never a listener silently
    left unbound: one line, exit 2, nothing listening."""
    port, other = free_port(), free_port()
    props = tmp_path / "server.properties"
    props.write_text(f"listeners={listeners.format(port=port, other=other)}\n")
    r = run("serve", "--config", props, "--data-dir", tmp_path / "data", timeout=30)
    one_line_error(r, 2, *words)
    for p in (port, other):
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", p), timeout=2).close()
    r = run("serve", "--listen", f"SSL://127.0.0.1:{port}", "--data-dir", tmp_path / "data", timeout=30)
    one_line_error(r, 2, "ssl.keystore.location", "needs a key store")


def test_serve_on_a_busy_port_fails_cleanly_and_leaves_the_data_dir_clean(broker, tmp_path):
    data = tmp_path / "data"
    with BrokerProcess(data) as b:
        with Cluster(b.bootstrap) as c:
            c.create_topic("kept", 1, 1)
    assert (data / ".kafka_cleanshutdown").exists()
    r = run("serve", "--data-dir", data, "--listen", f"127.0.0.1:{broker.port}", timeout=30)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 1 and "Traceback" not in err, err
    # the broker's own log lines go to stderr too; the error is the last line
    last = err.strip().splitlines()[-1]
    assert last == f"broker: cannot serve: cannot listen on 127.0.0.1:{broker.port}: Address already in use", err
    # the failed start must not turn the next start into a crash recovery
    assert (data / ".kafka_cleanshutdown").exists(), "a failed start removed the clean-shutdown marker"
    with BrokerProcess(data) as b:
        assert "(clean shutdown)" in b.log_tail(50)
        with Cluster(b.bootstrap) as c:
            assert "kept" in c.refresh()


@pytest.mark.parametrize("name", ["meta.properties", "partition.metadata"])
def test_serve_refuses_a_damaged_metadata_file_naming_it(tmp_path, name):
    """Not a new cluster id on every start, not a log served under an unknown topic id:
    exit 1, the last line names the file, and the file is left as it was. (A damaged
    partition.metadata of a topic the metadata store knows is rebuilt from it: see
    test_a_damaged_partition_metadata_of_a_known_topic_is_rebuilt.)"""
    data = tmp_path / "data"
    with BrokerProcess(data) as b:
        with Cluster(b.bootstrap) as c:
            c.create_topic("kept", 1, 1)
    if name == "meta.properties":
        path = data / "meta.properties"
    else:  # a partition dir of a topic nobody knows
        shutil.copytree(data / "kept-0", data / "ghost-0")
        path = data / "ghost-0" / "partition.metadata"
    path.write_bytes(b"\0" * 32)
    r = run("serve", "--data-dir", data, "--listen", f"127.0.0.1:{free_port()}", timeout=30)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 1 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("broker: cannot serve:") and str(path) in last and "refusing to start" in last, err
    assert path.read_bytes() == b"\0" * 32


def test_a_damaged_partition_metadata_of_a_known_topic_is_rebuilt(tmp_path):
    data = tmp_path / "data"
    with BrokerProcess(data) as b:
        with Cluster(b.bootstrap) as c:
            c.create_topic("kept", 1, 1)
            topic_id = c.topic("kept").topic_id
    path = data / "kept-0" / "partition.metadata"
    good = path.read_bytes()
    path.write_bytes(b"\0" * 32)
    with BrokerProcess(data) as b:
        with Cluster(b.bootstrap) as c:
            assert c.topic("kept").topic_id == topic_id
    assert path.read_bytes() == good


def test_second_broker_on_the_same_data_dir_is_refused(broker):
    port = free_port()
    p = subprocess.Popen(
        broker_cmd() + ["serve", "--data-dir", str(broker.data_dir), "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    try:
        serving = wait_port("127.0.0.1", port, 15, until=lambda: p.poll() is not None)
    finally:
        if p.poll() is None:
            p.terminate()
        _, err = p.communicate(timeout=15)
    assert not serving, "a second broker is serving the data dir of a running broker"
    assert p.returncode not in (0, None)
    assert str(broker.data_dir) in err.decode(errors="replace")


# ---------------------------------------------------------------------- help


def _command_paths() -> list[list[str]]:
    """Every command and subcommand of the parser (so new ones are covered too)."""
    import argparse

    from broker.cli.main import build_parser

    out = []

    def walk(parser, path):
        out.append(path)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, path + [name])

    walk(build_parser(), [])
    return out


COMMANDS = _command_paths()


def test_every_documented_command_exists():
    names = {" ".join(p) for p in COMMANDS}
    assert {
        "serve",
        "topics",
        "topics create",
        "topics list",
        "topics describe",
        "topics alter",
        "topics delete",
        "produce",
        "consume",
    } <= names


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "broker")
def test_help(args):
    r = run(*args, "--help", timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().startswith("usage: broker")
    assert r.stderr == b""


def _arguments_without_help() -> list[str]:
    import argparse

    from broker.cli.main import build_parser

    missing = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, path + [name])
            elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)) and not action.help:
                missing.append(" ".join(path + [action.option_strings[0] if action.option_strings else action.dest]))

    walk(build_parser(), ["broker"])
    return missing


def test_every_flag_and_argument_has_help_text():
    assert _arguments_without_help() == []


def test_make_serve_says_it_builds_the_native_core_on_first_use(tmp_path):
    """`make serve` on a fresh checkout builds .venv and the native core first (minutes):
    what make would run says so before it starts."""
    make = require_binary("make")
    r = subprocess.run([make, "-n", "serve", f"VENV={tmp_path / 'venv'}"], cwd=REPO, capture_output=True, timeout=60)
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr.decode()
    first_build = out.index("pip install")
    assert "building the native core" in out[:first_build], out


def test_no_arguments_is_a_usage_error():
    r = run(timeout=30)
    assert r.returncode == 2 and b"usage: broker" in r.stderr
    r = run("frobnicate", timeout=30)
    assert r.returncode == 2
