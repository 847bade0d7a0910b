"""bench/kafka_vs_kbroker.py's pinned mode without running a broker: its arguments, the
generator command it builds, the saturation verdict and the table; bench/native/kgen.c
compiles with `make bench-tools` (librdkafka-dev); the asv end-to-end benchmarks are sized
for samples of 3 s or more, repeated."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support import broker_proc
from tests.support.deps import missing, require_binary

REPO = Path(__file__).resolve().parents[2]


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return load("bench/kafka_vs_kbroker.py", "kafka_vs_kbroker")


def test_default_mode_keeps_its_defaults(bench):
    a = bench.parse_args([])
    assert not a.pinned
    assert a.partitions == [1, 10, 100, 1000] and a.sizes == [100, 1024] and a.acks == ["1", "all"]
    assert a.latency_loads == [10000, 100000] and a.mb_per_run == 30.0 and a.rounds == 3
    a = bench.parse_args(["--partitions", "1,10", "--latency-loads", "", "--broker-perf", "--acks", "-1"])
    assert a.partitions == [1, 10] and a.latency_loads == [] and a.broker_perf and a.acks == ["all"]


def test_pinned_mode_defaults_to_ten_second_runs_on_ten_partitions(bench):
    a = bench.parse_args(["--pinned"])
    assert a.pinned and a.partitions == [10] and a.latency_loads == []
    assert a.seconds == 10.0 and a.warmup_seconds == 10.0 and a.linger_ms == 5 and a.batch_size == 131072
    assert a.pin_at == "launch" and bench.parse_args(["--pinned", "--pin-at", "start"]).pin_at == "start"
    a = bench.parse_args(
        ["--pinned", "--seconds", "12", "--partitions", "1,100", "--sizes", "1024", "--latency-loads", ""]
    )
    assert a.seconds == 12.0 and a.partitions == [1, 100] and a.sizes == [1024]


def test_broker_keys_for_each_side(bench, tmp_path):
    tree = tmp_path / "old"
    (tree / ".venv" / "bin").mkdir(parents=True)
    (tree / ".venv" / "bin" / "python").touch()
    (tree / "broker").mkdir()
    a = bench.parse_args(
        [
            "--pinned",
            "--baseline",
            str(tree),
            "--baseline-set",
            "socket.send.buffer.bytes=-1",
            "--set",
            "socket.send.buffer.bytes = 65536",
            "--set",
            "log.segment.allocate.ahead.bytes=0",
        ]
    )
    assert a.baseline_settings == {"socket.send.buffer.bytes": "-1"}
    assert a.settings == {"socket.send.buffer.bytes": "65536", "log.segment.allocate.ahead.bytes": "0"}
    # each side's broker gets its own keys over the run's settings
    bench.KBroker.settings, bench.KBrokerBaseline.settings = a.settings, a.baseline_settings
    try:
        ours = bench.KBroker(tmp_path / "a", False, {"socket.send.buffer.bytes": "1"}).b.config
        theirs = bench.KBrokerBaseline(tmp_path / "b", False).b.config
    finally:
        bench.KBroker.settings, bench.KBrokerBaseline.settings = {}, {}
    assert ours["socket.send.buffer.bytes"] == "65536" and ours["log.segment.allocate.ahead.bytes"] == "0"
    assert theirs["socket.send.buffer.bytes"] == "-1" and "log.segment.allocate.ahead.bytes" not in theirs


@pytest.mark.parametrize(
    "argv",
    [
        ["--pinned", "--broker-perf"],
        ["--pinned", "--other-clients"],
        ["--pinned", "--restart-gb", "1"],
        ["--pinned", "--latency-loads", "10000"],
        ["--pinned", "--seconds", "0"],
        ["--acks", "2"],
        ["--pinned", "--set", "socket.send.buffer.bytes"],
        ["--pinned", "--set", "=1"],
        ["--pinned", "--baseline-set", "socket.send.buffer.bytes=-1"],
        ["--floor"],
        ["--pinned", "--floor", "--floor-gb", "0"],
        ["--pinned", "--floor", "--baseline", "."],
    ],
)
def test_refused_arguments(bench, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_generator_command_is_idempotent_with_acks_all(bench):
    args = SimpleNamespace(linger_ms=5, batch_size=131072)
    broker = SimpleNamespace(bootstrap="127.0.0.1:9092")
    one = bench.kgen_produce(broker, "t", 100, "1", args, 10.0)
    assert one == [
        "produce",
        "-b",
        "127.0.0.1:9092",
        "-t",
        "t",
        "-s",
        100,
        "--acks",
        "1",
        "--linger-ms",
        5,
        "--batch-size",
        131072,
        "--seconds",
        10.0,
    ]
    assert "--idempotence" in bench.kgen_produce(broker, "t", 100, "all", args, 10.0)


@pytest.mark.parametrize(
    "gen, brk, verdict",
    [
        (0.99, 0.41, "generator-bound"),
        (0.55, 0.97, "broker-bound"),
        (0.95, 0.92, "both saturated"),
        (0.60, 0.70, "neither saturated"),
        (0.90, 0.899, "generator-bound"),
    ],
)
def test_which_side_saturated_its_core(bench, gen, brk, verdict):
    assert bench.bound(gen, brk) == verdict


def test_utilisation_cell(bench):
    assert bench.utilisation(0.99, 0.41) == "generator 99% / broker 41%: generator-bound"
    assert bench.utilisation(0.99, 0.41, 0.01, 0.10) == "generator 99% / broker 41%: generator-bound"
    assert bench.utilisation(0.44, 0.45, 0.56, 0.05) == (
        "generator 44% / broker 45%: neither saturated (rest of the cores busy 56% / 5%)"
    )


def test_busiest_threads(bench):
    before = {"data-plane-kafka-request-handler-N": 10.0, "C2 CompilerThreadN": 30.0, "GC Thread#N": 1.0}
    after = {"data-plane-kafka-request-handler-N": 12.5, "C2 CompilerThreadN": 31.0, "GC Thread#N": 1.0, "new": 0.25}
    assert bench.busiest_threads(before, after) == {
        "data-plane-kafka-request-handler-N": 2.5,
        "C2 CompilerThreadN": 1.0,
        "new": 0.25,
    }
    assert list(bench.busiest_threads(before, after, top=1)) == ["data-plane-kafka-request-handler-N"]


def test_this_process_threads_and_cores_are_read_from_proc(bench):
    threads = bench.thread_cpu(os.getpid())
    assert threads and all(v >= 0 for v in threads.values())
    busy = bench.core_busy()
    assert set(busy) == set(range(os.cpu_count())) and all(v > 0 for v in busy.values())


def test_tcp_counters_are_read_from_proc(bench, tmp_path):
    snmp = tmp_path / "snmp"
    snmp.write_text("Ip: Forwarding InReceives\nIp: 1 5\nTcp: RtoAlgorithm OutSegs RetransSegs\nTcp: 1 1000 7\n")
    netstat = tmp_path / "netstat"
    netstat.write_text(
        "TcpExt: SyncookiesSent TCPOFOQueue TCPSACKReorder\nTcpExt: 0 12 3\nIpExt: InOctets\nIpExt: 99\n"
    )
    assert bench.tcp_counters((snmp, netstat)) == {
        "OutSegs": 1000,
        "RetransSegs": 7,
        "TCPOFOQueue": 12,
        "TCPSACKReorder": 3,
    }
    real = bench.tcp_counters()  # this machine's
    assert {"OutSegs", "RetransSegs", "TCPOFOQueue"} <= set(real) and all(v >= 0 for v in real.values())


def row(broker, rnd, phase, msgs, gen, brk, per_gb, case="10p 100B acks=1"):
    return {
        "broker": broker,
        "round": rnd,
        "case": case,
        "phase": phase,
        "msgs": msgs,
        "mb_s": msgs * 100 / 1e6,
        "seconds": 10.0,
        "generator_cpu": gen,
        "broker_cpu": brk,
        "generator_core_others": 0.02,
        "broker_core_others": 0.03,
        "cpu_s_per_gb": per_gb,
        "rss_mb": 50.0,
        "broker_threads": {"python": 3.0},
    }


def test_pinned_table_medians_ratio_and_verdicts(bench):
    rows = [
        row("kafka", 0, "produce", 1_000_000, 0.99, 0.40, 1.80),
        row("kbroker", 0, "produce", 1_100_000, 0.98, 0.20, 1.50),
        row("kafka", 1, "produce", 1_200_000, 0.99, 0.44, 1.90),
        row("kbroker", 1, "produce", 1_300_000, 0.97, 0.22, 1.60),
        row("kafka", 2, "produce", 1_100_000, 0.99, 0.42, 1.85),
        row("kbroker", 2, "produce", 1_210_000, 0.99, 0.21, 1.56),
        row("kafka", 0, "consume", 2_000_000, 0.50, 0.95, 0.49),
        row("kbroker", 0, "consume", 3_000_000, 0.96, 0.60, 0.33),
    ]
    text = bench.pinned_table(rows, "pinned")
    lines = text.splitlines()
    assert lines[0] == "#### pinned"
    assert lines[2].startswith("| case | phase | Apache Kafka msg/s (MB/s) | kbroker msg/s (MB/s) | kbroker / Kafka |")
    # the last column adds the rest of both cores (0.03 + 0.02 of each run's wall time)
    assert lines[4] == (
        "| 10p 100B acks=1 | produce | 1,100,000 (110.0) | 1,210,000 (121.0) | 1.10 "
        "| generator 99% / broker 42%: generator-bound | generator 98% / broker 21%: generator-bound "
        "| 1.85 / 1.56 | 2.07 / 1.93 |"
    )
    assert lines[5] == (
        "| 10p 100B acks=1 | consume | 2,000,000 (200.0) | 3,000,000 (300.0) | 1.50 "
        "| generator 50% / broker 95%: broker-bound | generator 96% / broker 60%: generator-bound "
        "| 0.49 / 0.33 | 0.52 / 0.36 |"
    )
    assert len(lines) == 6


def test_pinned_table_with_one_broker_missing(bench):
    text = bench.pinned_table([row("kbroker", 0, "produce", 1_000_000, 0.99, 0.30, 1.5)], "t")
    assert text.splitlines()[-1] == (
        "| 10p 100B acks=1 | produce | — | 1,000,000 (100.0) | — | — "
        "| generator 99% / broker 30%: generator-bound | — / 1.50 | — / 1.75 |"
    )


def test_floor_table_sets_the_kernel_beside_both_brokers(bench):
    """--floor: the floor's median (and spread) beside each broker's core per GB (its CPU and
    the rest of its core) at 1 KiB, and the produce goal, a third of Kafka's."""
    one_k = "10p 1024B acks=1"
    rows = [row("kafka", r, "produce", 700_000, 0.7, 0.9, per_gb, one_k) for r, per_gb in enumerate((1.2, 1.32, 1.26))]
    rows += [
        row("kbroker", r, "produce", 800_000, 0.7, 0.8, per_gb, one_k) for r, per_gb in enumerate((0.9, 0.8, 1.04))
    ]
    rows += [
        row("kbroker", 0, "produce", 2_500_000, 0.99, 0.2, 0.8),  # 100 B: not in this table
        row("kbroker", 0, "consume", 2_000_000, 0.7, 0.4, 0.17, one_k),
    ]
    rows += [
        {
            "broker": "floor",
            "round": r,
            "case": "kernel floor",
            "phase": "produce",
            "tool": "bench/native/ingest copy2",
            "core_s_per_gb": v,
        }
        for r, v in enumerate((0.44, 0.49, 0.47))
    ]
    lines = bench.floor_table(rows, [100, 1024]).splitlines()
    assert lines[0] == (
        "#### the kernel's floor on core 0: busy CPU s per GB, medians (min–max) of 3 round(s); brokers at 1024 B"
    )
    # each broker's core: its CPU per GB x (broker 0.9 + rest 0.03) / 0.9 for Kafka, x 0.83 / 0.8 for kbroker
    assert lines[4] == (
        "| 10p 1024B acks=1 produce | 0.470 (0.440–0.490) (`bench/native/ingest copy2`) "
        "| 1.302 (1.240–1.364) | 0.934 (0.830–1.079) | 0.36 | 0.434 |"
    )
    assert len(lines) == 5
    # the broker's core per GB: what the kernel did on its core outside it counts too
    assert bench.core_s_per_gb({"cpu_s_per_gb": 1.0, "broker_cpu": 0.8, "broker_core_others": 0.2}) == 1.25
    assert bench.core_s_per_gb({"core_s_per_gb": 0.5}) == 0.5
    # both cores' rest: 0.1 + 0.1 of the wall time beside a broker at 0.8 of its core
    assert (
        bench.machine_s_per_gb(
            {"cpu_s_per_gb": 1.0, "broker_cpu": 0.8, "broker_core_others": 0.1, "generator_core_others": 0.1}
        )
        == 1.25
    )
    assert bench.machine_s_per_gb({"cpu_s_per_gb": 1.0, "broker_cpu": 0.0}) != 1.0  # nan: no run


def test_floor_run_measures_the_broker_core(bench, tmp_path):
    """run_floor drives bench/native/ingest (built by make bench-tools, as ensure_kgen does
    for the comparison) and books core 0's busy time over it, per GB received."""
    require_binary("cc", "gcc")
    p = subprocess.run(
        ["make", "-s", "-C", str(REPO), "bench/native/ingest"], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stdout + p.stderr
    args = bench.parse_args(["--pinned", "--floor", "--floor-gb", "0.05", "--batch-size", "131072"])
    (r,) = bench.run_floor(args, tmp_path / "floor", 2)
    assert r["broker"] == "floor" and r["round"] == 2 and r["phase"] == "produce"
    assert r["tool"] == "bench/native/ingest copy2"
    assert r["gb"] == pytest.approx(0.05, rel=0.01)
    assert r["core_s_per_gb"] > 0 and r["cpu_s_per_gb"] > 0
    assert list((tmp_path / "floor").iterdir()) == []  # its segment files are gone


def test_kgen_builds_with_make_bench_tools(tmp_path):
    """The C generator compiles without a warning through the Makefile's target, and says
    how it is used. Needs librdkafka-dev (under CI=true its absence fails this test)."""
    if not Path("/usr/include/librdkafka/rdkafka.h").exists():
        missing(
            "librdkafka-dev (librdkafka's headers, for bench/native/kgen)",
            "apt-get install -y librdkafka-dev, or run 'make test' as root",
        )
    require_binary("cc", "gcc")
    require_binary("make")
    kgen = tmp_path / "kgen"
    p = subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(REPO),
            "bench-tools",
            f"KGEN={kgen}",
            f"INGEST={tmp_path / 'ingest'}",
            f"ALLOC_AHEAD={tmp_path / 'alloc_ahead'}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "warning" not in p.stdout + p.stderr, p.stdout + p.stderr
    usage = subprocess.run([str(kgen)], capture_output=True, text=True, timeout=10)
    assert usage.returncode == 2 and "usage: kgen produce" in usage.stderr
    no_target = subprocess.run(
        [str(kgen), "produce", "-b", "127.0.0.1:1", "-t", "t"], capture_output=True, text=True, timeout=10
    )
    assert no_target.returncode == 2 and "give --seconds S or --count N" in no_target.stderr
    no_count = subprocess.run(
        [str(kgen), "consume", "-b", "127.0.0.1:1", "-t", "t"], capture_output=True, text=True, timeout=10
    )
    assert no_count.returncode == 2 and "--count N is required" in no_count.stderr


def test_asv_end_to_end_samples_last_three_seconds_and_repeat():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        e2e = load("bench/benchmarks/end_to_end.py", "asv_end_to_end")
    finally:
        sys.path.remove(str(REPO / "bench"))
    best_rate = 10e6  # msg/s: the fastest produce or consume seen on this machine
    assert e2e.RECORDS / best_rate >= 3.0
    for cls in (e2e.Produce, e2e.Consume):
        assert cls.number == 1 and cls.warmup_time == 0
        assert cls.repeat[0] >= 3 and cls.min_run_count >= 3
        assert [m for m in dir(cls) if m.startswith("time_")], cls


def test_missing_librdkafka_dev_is_said_in_one_line(bench, monkeypatch, tmp_path):
    monkeypatch.setattr(bench, "RDKAFKA_HEADER", tmp_path / "rdkafka.h")
    monkeypatch.setattr(bench, "KGEN", tmp_path / "kgen")
    with pytest.raises(SystemExit) as exc:
        bench.ensure_kgen()
    assert exc.value.code == "kgen needs librdkafka's headers: apt-get install -y librdkafka-dev"


def test_jit_compiler_threads_are_recognised(bench):
    assert bench.compiling({"CN CompilerThre": 1.25, "data-plane-kafk": 2.0, "python": 0.5}) == 1.25
    assert bench.compiling({"python": 3.0}) == 0.0
    a = bench.parse_args(["--pinned", "--warmup-max-seconds", "0"])
    assert a.warmup_max_seconds == 0.0 and bench.parse_args(["--pinned"]).warmup_max_seconds == 300.0


def test_baseline_is_another_checkout_of_kbroker(bench, tmp_path):
    """--baseline DIR: kbroker from another checkout in Apache Kafka's place (before/after)."""
    with pytest.raises(SystemExit):
        bench.parse_args(["--baseline", str(REPO)])  # needs --pinned
    with pytest.raises(SystemExit):
        bench.parse_args(["--pinned", "--baseline", str(tmp_path)])  # not a checkout with a .venv
    (tmp_path / "broker").mkdir()
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").write_text("")
    a = bench.parse_args(["--pinned", "--baseline", str(tmp_path)])
    assert a.baseline == tmp_path.resolve()
    bench.KBrokerBaseline.tree = tmp_path
    b = bench.KBrokerBaseline(tmp_path / "data", False, None)
    cmd = b.b.command()
    assert str(tmp_path / ".venv" / "bin" / "python") in cmd and sys.executable not in cmd
    assert cmd[cmd.index("-m") + 1] == "broker.cli.main"
    assert cmd[cmd.index("--event-loop") + 1] == "asyncio"
    # started like every test broker: in that checkout's directory, killed at exit
    py = tmp_path / ".venv" / "bin" / "python"
    py.write_text("#!/bin/sh\nexec sleep 60\n")
    py.chmod(0o755)
    b.b.start(wait=False)
    try:
        assert os.readlink(f"/proc/{b.pid}/cwd") == str(tmp_path)
        assert b.b in broker_proc._running
    finally:
        b.kill()
    with pytest.raises(SystemExit):
        bench.parse_args(["--pinned", "--baseline-event-loop", "uvloop"])  # needs --baseline
    a = bench.parse_args(["--pinned", "--baseline", str(tmp_path), "--baseline-event-loop", "uvloop"])
    assert a.baseline_event_loop == "uvloop"
    bench.KBrokerBaseline.event_loop = "uvloop"
    try:
        cmd = bench.KBrokerBaseline(tmp_path / "data", False, None).b.command()
        assert cmd[cmd.index("--event-loop") + 1] == "uvloop"
    finally:
        bench.KBrokerBaseline.event_loop = "asyncio"
    text = bench.pinned_table(
        [
            row("kbroker-baseline", 0, "produce", 1_000_000, 0.99, 0.30, 1.5),
            row("kbroker", 0, "produce", 1_100_000, 0.99, 0.30, 1.4),
        ],
        "t",
        ("kbroker-baseline", "kbroker"),
        ("baseline", "kbroker"),
    )
    assert "| baseline msg/s (MB/s) | kbroker msg/s (MB/s) | kbroker / baseline |" in text
    assert "| 1.10 |" in text and "| 1.50 / 1.40 |" in text
