"""The Kafka-shaped admin tools against a real kbroker, each beside Kafka's own tool on the
same broker or the same data dir (issue 20):

- `broker configs describe|alter` and kafka-configs: the same lines (topic dynamic, topic
  --all, broker --all, a group's configs and --all); `alter` takes Kafka's `--add-config k=v,k2=[a,b]`; a broker key
  that cannot change at runtime is refused with Kafka's message (one line, exit 1).
- `broker log-dirs describe` and kafka-log-dirs: the same JSON (partitions in any order).
- `broker offsets` and kafka-get-offsets (GetOffsetShell): latest, earliest, by time.
- `broker records delete` and kafka-delete-records: the same offsets JSON, the same lines.
- `broker dump-log` and kafka-dump-log (DumpLogSegments) on the stopped broker's data dir:
  identical stdout for segments (--deep-iteration --print-data-log), indexes and time
  indexes (entries, --index-sanity-check), producer snapshots and __consumer_offsets
  (--offsets-decoder); a corrupt segment is said where (byte offset), exit 1.
- `--bootstrap-server` and `--topic` / `--group` beside today's forms; a deprecated topic
  key (message.format.version) is accepted with a warning in the broker's log.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from tests.groups.helpers import simple_commit
from tests.support.broker_proc import BrokerProcess
from tests.support.kafka_tools import kafka_tool, require_kafka_libs

pytestmark = pytest.mark.interop

TOPIC = "ops"
PER_PARTITION = 300
BASE_TS = int(time.time()) // 60 * 60_000 - 600_000


def broker(*args, check: int | None = 0) -> subprocess.CompletedProcess:
    exe = shutil.which("broker", path=os.path.dirname(sys.executable))
    cmd = [exe] if exe else [sys.executable, "-m", "broker.cli.main"]
    r = subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, timeout=60)
    if check is not None:
        assert r.returncode == check, (args, r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    return r


def kafka(name: str, *args) -> str:
    return kafka_tool(name, *[str(a) for a in args]).stdout


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A broker with topic `ops` (2 partitions, several segments each, written by an
    idempotent lz4 producer with keys and headers) and a committed group offset; yields
    (broker, timestamps by partition), then stops it cleanly (snapshots written)."""
    require_kafka_libs()
    import confluent_kafka as ck

    root = tmp_path_factory.mktemp("ops-tools")
    b = BrokerProcess(
        root / "data", config={"offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0}
    ).start()
    try:
        broker(
            "topics",
            "create",
            "--bootstrap-server",
            b.bootstrap,
            "--topic",
            TOPIC,
            "--partitions",
            2,
            "--config",
            "segment.bytes=4096",
            "--config",
            "index.interval.bytes=256",
        )
        p = ck.Producer(
            {
                "bootstrap.servers": b.bootstrap,
                "enable.idempotence": True,
                "compression.type": "lz4",
                "linger.ms": 2,
                "batch.num.messages": 10,
            }
        )
        for i in range(2 * PER_PARTITION):
            p.produce(
                TOPIC,
                key=f"k{i}".encode(),
                value=f"value {i} ".encode() * 3,
                partition=i % 2,
                timestamp=BASE_TS + i,
                headers=[("h", str(i).encode())],
            )
            p.poll(0)
        assert p.flush(60) == 0
        del p  # librdkafka's client goes with its last reference
        assert simple_commit(b.bootstrap, "ops-g", TOPIC, {0: 42}, metadata="m") == {0: 0}
        yield b
    finally:
        b.stop()


def test_configs_log_dirs_offsets_and_records_delete_as_kafkas_tools(data):
    bs = data.bootstrap
    # configs: alter with Kafka's syntax, then describe as kafka-configs does
    out = broker(
        "configs",
        "alter",
        "--bootstrap-server",
        bs,
        "--entity-type",
        "topics",
        "--entity-name",
        TOPIC,
        "--add-config",
        "retention.ms=86400000,cleanup.policy=[compact,delete]",
    ).stdout
    assert out == f"Completed updating config for topic {TOPIC}.\n"
    for ours, theirs in [
        (["--topic", TOPIC], ["--entity-type", "topics", "--entity-name", TOPIC]),
        (["--topic", TOPIC, "--all"], ["--entity-type", "topics", "--entity-name", TOPIC, "--all"]),
        (["--broker", 0, "--all"], ["--entity-type", "brokers", "--entity-name", 0, "--all"]),
    ]:
        mine = broker("configs", "describe", "--bootstrap-server", bs, *ours).stdout
        assert mine == kafka("kafka-configs", "--bootstrap-server", bs, "--describe", *theirs), ours
    dynamic = broker("configs", "describe", "-b", bs, "--topic", TOPIC).stdout
    assert "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:" in dynamic
    # a group's configs (Kafka 4.4's --entity-type groups): the same lines as kafka-configs
    out = broker(
        "configs", "alter", "-b", bs, "--group", "g-ops", "--add-config", "share.auto.offset.reset=earliest"
    ).stdout
    assert out == "Completed updating config for group g-ops.\n"
    for extra in ([], ["--all"]):
        mine = broker("configs", "describe", "--bootstrap-server", bs, "--group", "g-ops", *extra).stdout
        assert mine == kafka(
            "kafka-configs",
            "--bootstrap-server",
            bs,
            "--describe",
            "--entity-type",
            "groups",
            "--entity-name",
            "g-ops",
            *extra,
        ), extra
    assert "share.auto.offset.reset=earliest" in mine and "DYNAMIC_GROUP_CONFIG" in mine
    broker(
        "configs", "alter", "--bootstrap-server", bs, "--topic", TOPIC, "--delete-config", "retention.ms,cleanup.policy"
    )  # no compaction of the segments dumped below
    assert broker("configs", "describe", "-b", bs, "--topic", TOPIC).stdout == (
        f"Dynamic configs for topic {TOPIC} are:\n"
        f"  index.interval.bytes=256 sensitive=false synonyms={{DYNAMIC_TOPIC_CONFIG:index.interval.bytes=256, "
        f"DEFAULT_CONFIG:log.index.interval.bytes=4096}}\n"
        f"  segment.bytes=4096 sensitive=false synonyms={{DYNAMIC_TOPIC_CONFIG:segment.bytes=4096, "
        f"DEFAULT_CONFIG:log.segment.bytes=1073741824}}\n"
    )
    # dynamic broker configs: the cluster default and this broker's, described as kafka-configs does
    assert (
        broker(
            "configs",
            "alter",
            "-b",
            bs,
            "--entity-type",
            "brokers",
            "--entity-default",
            "--add-config",
            "log.cleaner.backoff.ms=16000",
        ).stdout
        == "Completed updating default config for brokers in the "
        "cluster.\n"
    )
    assert (
        broker(
            "configs",
            "alter",
            "-b",
            bs,
            "--entity-type",
            "brokers",
            "--entity-name",
            0,
            "--add-config",
            "log.cleaner.backoff.ms=17000",
        ).stdout
        == "Completed updating config for broker 0.\n"
    )
    for ours, theirs in [
        (["--entity-type", "brokers", "--entity-default"], ["--entity-type", "brokers", "--entity-default"]),
        (["--broker", 0], ["--entity-type", "brokers", "--entity-name", 0]),
        (["--broker", 0, "--all"], ["--entity-type", "brokers", "--entity-name", 0, "--all"]),
    ]:
        mine = broker("configs", "describe", "--bootstrap-server", bs, *ours).stdout
        assert mine == kafka("kafka-configs", "--bootstrap-server", bs, "--describe", *theirs), ours
    assert (
        "  log.cleaner.backoff.ms=17000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.cleaner.backoff.ms"
        "=17000, DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.backoff.ms=16000, DEFAULT_CONFIG:log.cleaner.backoff.ms"
        "=15000}" in mine
    )
    broker("configs", "alter", "-b", bs, "--broker", 0, "--delete-config", "log.cleaner.backoff.ms")
    broker(
        "configs",
        "alter",
        "-b",
        bs,
        "--entity-type",
        "brokers",
        "--entity-default",
        "--delete-config",
        "log.cleaner.backoff.ms",
    )
    refused = broker("configs", "alter", "-b", bs, "--broker", 0, "--add-config", "broker.id=5", check=1)
    assert refused.stderr.count("\n") == 1 and "Cannot update these configs dynamically" in refused.stderr

    # log-dirs: the same JSON document
    mine = broker("log-dirs", "describe", "--bootstrap-server", bs, "--topic-list", TOPIC).stdout.splitlines()
    theirs = kafka("kafka-log-dirs", "--bootstrap-server", bs, "--describe", "--topic-list", TOPIC).splitlines()
    assert (
        mine[:2]
        == theirs[:2]
        == ["Querying brokers for log directories information", "Received log directory information from brokers 0"]
    )

    def normal(doc: str):
        d = json.loads(doc)
        for b in d["brokers"]:
            for ld in b["logDirs"]:
                ld["partitions"].sort(key=lambda x: x["partition"])
        return d

    assert normal(mine[2]) == normal(theirs[2])
    sizes = {p["partition"]: p["size"] for p in normal(mine[2])["brokers"][0]["logDirs"][0]["partitions"]}
    assert set(sizes) == {f"{TOPIC}-0", f"{TOPIC}-1"} and min(sizes.values()) > 8192

    # offsets: latest, earliest, by time (the first record at or after it)
    for ours, theirs in [
        ([], []),
        (["--time", "earliest"], ["--time", -2]),
        (["--time", BASE_TS + 101], ["--time", BASE_TS + 101]),
    ]:
        mine = broker("offsets", "--bootstrap-server", bs, "--topic", TOPIC, *ours).stdout
        assert mine == kafka("kafka-get-offsets", "--bootstrap-server", bs, "--topic", TOPIC, *theirs), ours
    assert (
        broker("offsets", "-b", bs, "--topic", TOPIC).stdout
        == f"{TOPIC}:0:{PER_PARTITION}\n{TOPIC}:1:{PER_PARTITION}\n"
    )
    # record i went to partition i % 2 with timestamp BASE_TS + i
    assert (
        broker("offsets", "-b", bs, "--topic", TOPIC, "--time", BASE_TS + 101).stdout == f"{TOPIC}:0:51\n{TOPIC}:1:50\n"
    )
    assert broker("offsets", "-b", bs, "--topic", TOPIC, "--time", BASE_TS + 10**9).stdout == ""  # none that late

    # records delete: Kafka's JSON, Kafka's lines; then the earliest offsets moved
    plans = {}
    for p, off in ((0, 10), (1, 20)):
        plans[p] = data.data_dir.parent / f"delete-{p}.json"
        plans[p].write_text(json.dumps({"partitions": [{"topic": TOPIC, "partition": p, "offset": off}], "version": 1}))
    mine = broker("records", "delete", "--bootstrap-server", bs, "--offset-json-file", plans[0]).stdout
    theirs = kafka("kafka-delete-records", "--bootstrap-server", bs, "--offset-json-file", plans[1])
    assert (
        mine
        == f"Executing records delete operation\nRecords delete operation completed:\npartition: {TOPIC}-0\tlow_watermark: 10\n"
    )
    assert theirs.rstrip("\n") == mine.rstrip("\n").replace(
        f"{TOPIC}-0\tlow_watermark: 10", f"{TOPIC}-1\tlow_watermark: 20"
    )
    assert broker("offsets", "-b", bs, "-t", TOPIC, "--time", "earliest").stdout == f"{TOPIC}:0:10\n{TOPIC}:1:20\n"
    bad = data.data_dir.parent / "bad.json"
    bad.write_text('{"partitions": [{"topic": "ops", "partition": 0}]}')
    r = broker("records", "delete", "-b", bs, "--offset-json-file", bad, check=2)
    assert r.stderr.count("\n") == 1 and "partitions[0]" in r.stderr
    bad.write_text(json.dumps({"partitions": [{"topic": TOPIC, "partition": 7, "offset": 1}], "version": 1}))
    r = broker("records", "delete", "-b", bs, "--offset-json-file", bad, check=1)
    assert f"partition: {TOPIC}-7\terror: UNKNOWN_TOPIC_OR_PARTITION" in r.stdout

    # Kafka's spellings beside today's: --bootstrap-server, --topic, --group
    assert TOPIC in broker("topics", "describe", "--bootstrap-server", bs, "--topic", TOPIC).stdout
    assert "ops-g" in broker("groups", "describe", "--bootstrap-server", bs, "--group", "ops-g").stdout
    twice = broker("topics", "delete", "-b", bs, "one", "--topic", "other", check=2)
    assert twice.stderr.count("\n") == 1 and "given twice" in twice.stderr
    # a deprecated topic key: accepted, with a warning in the broker's log
    broker(
        "topics",
        "create",
        "-b",
        bs,
        "--topic",
        "legacy",
        "--partitions",
        1,
        "--config",
        "message.format.version=0.10.0",
        "--config",
        "message.downconversion.enable=false",
    )
    deadline = time.monotonic() + 10
    while "message.format.version=0.10.0 accepted but has no effect" not in data.log_tail(400):
        assert time.monotonic() < deadline, data.log_tail(40)
        time.sleep(0.1)


def partition_files(d, *suffixes):
    return [str(f) for f in sorted(d.iterdir()) if f.suffix in suffixes]


def test_dump_log_prints_what_kafkas_dump_log_prints(data):
    if data.running:
        data.stop()  # a clean shutdown writes the snapshots
    root = data.data_dir
    parts = [root / f"{TOPIC}-{p}" for p in (0, 1)]
    segments = [f for d in parts for f in partition_files(d, ".log", ".snapshot", ".index", ".timeindex")]
    assert sum(f.endswith(".log") for f in segments) >= 6 and any(f.endswith(".snapshot") for f in segments)
    files = ",".join(segments)
    mine = broker("dump-log", "--deep-iteration", "--print-data-log", "--files", files)
    theirs = kafka_tool("kafka-dump-log", "--deep-iteration", "--print-data-log", "--files", files)
    assert mine.stdout == theirs.stdout
    assert sorted(mine.stderr.splitlines()) == sorted(theirs.stderr.splitlines())  # non-consecutive offsets
    records = [line for line in mine.stdout.splitlines() if line.startswith("| offset: ")]
    assert len(records) == 2 * PER_PARTITION and " headerKeys: [h] key: k0 payload: value 0 value 0 " in mine.stdout
    assert re.search(r"^producerId: \d+ producerEpoch: 0 .* lastSequence: 299 lastOffset: 299 ", mine.stdout, re.M)

    indexes = ",".join(f for f in segments if f.endswith("index"))
    mine = broker("dump-log", "--index-sanity-check", "--files", indexes).stdout
    assert mine == kafka("kafka-dump-log", "--index-sanity-check", "--files", indexes)
    assert mine.count("passed sanity check.") == indexes.count(",") + 1
    verify = broker("dump-log", "--verify-index-only", "--files", indexes)
    assert [line for line in verify.stdout.splitlines() if not line.startswith("Dumping ")] == [] and not verify.stderr

    offsets = ",".join(partition_files(root / "__consumer_offsets-0", ".log"))
    mine = broker("dump-log", "--offsets-decoder", "--files", offsets).stdout
    assert mine == kafka("kafka-dump-log", "--offsets-decoder", "--files", offsets)
    assert re.search(
        r'key: \{"type":"1","data":\{"group":"ops-g","topic":"ops","partition":0\}\} '
        r'payload: \{"version":"\d","data":\{"offset":42,',
        mine,
    )

    # a directory stands for its files; checkpoints are printed too (Kafka's tool skips them)
    whole = broker("dump-log", parts[0]).stdout
    assert whole.startswith(f"Dumping {parts[0]}/00000000000000000000.log\nLog starting offset: 0\n")
    assert re.search(rf"^Dumping {parts[0]}/leader-epoch-checkpoint\nepoch: 0 startOffset: \d+\n", whole, re.M)
    assert re.search(rf"^Dumping {parts[0]}/partition.metadata\nversion: 0\ntopic_id: \S+\n", whole, re.M)
    checkpoint = broker("dump-log", root / "recovery-point-offset-checkpoint").stdout
    assert f"{TOPIC} 0 {PER_PARTITION}\n" in checkpoint and f"{TOPIC} 1 {PER_PARTITION}\n" in checkpoint


def test_dump_log_says_where_a_segment_is_corrupt(data, tmp_path):
    first = sorted((data.data_dir / f"{TOPIC}-0").glob("*.log"))[0]
    clean = broker("dump-log", first).stdout
    positions = [int(m) for m in re.findall(r" position: (\d+) ", clean)]
    assert len(positions) >= 3
    raw = bytearray(first.read_bytes())
    # a payload byte of the second batch flipped: its CRC no longer matches (Kafka: isvalid: false)
    crc_bad = tmp_path / first.name
    flipped = bytearray(raw)
    flipped[positions[2] - 1] ^= 0xFF
    crc_bad.write_bytes(flipped)
    r = broker("dump-log", crc_bad, check=1)
    assert [line.endswith("isvalid: false") for line in r.stdout.splitlines() if line.startswith("baseOffset")] == [
        False,
        True,
    ] + [False] * (len(positions) - 2)
    # the third batch's magic byte overwritten: said with its byte offset, the batches before it printed
    (tmp_path / "magic").mkdir()
    magic_bad = tmp_path / "magic" / first.name
    broken = bytearray(raw)
    broken[positions[2] + 16] = 7
    magic_bad.write_bytes(broken)
    r = broker("dump-log", magic_bad, check=1)
    assert r.stdout.count("baseOffset: ") == 2
    assert r.stderr.count("\n") == 1 and f"corrupt at byte {positions[2]}" in r.stderr, r.stderr
    # a torn write at the end: Kafka's words
    (tmp_path / "torn").mkdir()
    torn = tmp_path / "torn" / first.name
    torn.write_bytes(bytes(raw) + b"\x00\x00\x00\x00\x00\x00\x00\x09\x00")
    r = broker("dump-log", torn, check=1)
    assert r.stdout.endswith(f"Found 9 invalid bytes at the end of {first.name}\n")
    r = broker("dump-log", tmp_path / "nothing.log", check=2)
    assert r.stderr.count("\n") == 1 and "no such file" in r.stderr
