"""bench/produce_copies.py and bench/native/ingest.c (what each way of getting produced bytes
from a socket into a segment costs): the C program builds through `make bench-tools`, every
mechanism receives the same bytes into segments that roll and are removed, and the driver's
summary and table say which mechanism costs what against today's path."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from tests.support.deps import require_binary

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def copies():
    spec = importlib.util.spec_from_file_location("produce_copies", REPO / "bench" / "produce_copies.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def built(tmp_path_factory, name: str, variable: str) -> Path:
    """bench/native/<name>, built without a warning by the Makefile's rule (its path in
    `variable`) into a temporary directory."""
    require_binary("cc", "gcc")
    require_binary("make")
    binary = tmp_path_factory.mktemp(name) / name
    p = subprocess.run(
        ["make", "-s", "-C", str(REPO), str(binary), f"{variable}={binary}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "warning" not in p.stdout + p.stderr, p.stdout + p.stderr
    return binary


@pytest.fixture(scope="module")
def ingest(tmp_path_factory):
    return built(tmp_path_factory, "ingest", "INGEST")


def test_every_mechanism_receives_the_same_bytes_and_leaves_no_segment(copies, ingest, tmp_path):
    a_argv = [
        "--gb",
        "0.02",
        "--frame",
        "65536",
        "--segment",
        str(1 << 20),
        "--dir",
        str(tmp_path),
        "--recv-cpu",
        "-1",
        "--send-cpu",
        "-1",
    ]
    a = copies.parse_args(a_argv)
    runs = [copies.run_once(a, mode, ingest) for mode in copies.MODES]
    assert [r["mode"] for r in runs] == copies.MODES
    assert all(r["complete"] and r["bytes"] == 20_000_000 // 65536 * 65536 for r in runs), runs
    assert len({r["crc_xor"] for r in runs}) == 1, runs  # 19 segments rolled, the same bytes in each
    assert list(tmp_path.iterdir()) == []
    assert not any(r["warm"] for r in runs)
    warm = copies.run_once(copies.parse_args([*a_argv, "--warm"]), "copy2", ingest)
    assert warm["warm"] and warm["complete"] and warm["crc_xor"] == runs[0]["crc_xor"]
    mmap = next(r for r in runs if r["mode"] == "mmap")
    assert mmap["minor_faults"] >= mmap["bytes"] // 4096 // 2  # the mapped tail is faulted in page by page


def test_bad_arguments_are_one_line_errors(copies, ingest):
    with pytest.raises(SystemExit):
        copies.parse_args(["--modes", "copy2,zerocopy"])
    with pytest.raises(SystemExit):
        copies.parse_args(["--frame", "1000", "--segment", "1500"])
    p = subprocess.run([str(ingest), "teleport"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and p.stderr == "ingest: unknown mode teleport\n"
    p = subprocess.run([str(ingest)], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and p.stderr.startswith("usage: ingest copy3|copy2|mmap|mmap-pop|splice")


def test_summary_ratios_and_saturation(copies):
    def run(mode, cpu, wall, sender):
        return {
            "mode": mode,
            "bytes": 10**9,
            "cpu_s_per_gb": cpu,
            "gb_per_s": 1 / wall,
            "user_s": 0.1 * cpu,
            "sys_s": 0.9 * cpu,
            "wall_s": wall,
            "sender_cpu_s": sender,
            "minor_faults": 250_000,
        }

    summary = copies.summarize(
        [
            run("copy2", 0.40, 0.5, 0.45),
            run("copy2", 0.44, 0.5, 0.45),
            run("mmap", 0.30, 0.5, 0.49),
            run("mmap", 0.32, 0.5, 0.49),
        ]
    )
    by = {m["mode"]: m for m in summary}
    assert by["copy2"]["vs_copy2"] == 1.0 and round(by["mmap"]["vs_copy2"], 3) == round(0.31 / 0.42, 3)
    assert by["copy2"]["saturated"] == "sender" and by["mmap"]["saturated"] == "sender"
    assert by["mmap"]["faults_per_mb"] == 250
    text = copies.table(summary)
    assert text.splitlines()[2].startswith("| copy2 | 0.420 (0.40–0.44) |") and "| 0.74 |" in text.splitlines()[3]
    json.dumps(summary)


@pytest.fixture(scope="module")
def profile():
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("broker_profile", REPO / "bench" / "broker_profile.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "bench"))
    return module


def test_broker_profile_reads_strace_and_perf_names(profile):
    """bench/broker_profile.py: strace -c's table into calls per GB, perf's DSOs into groups."""
    table = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 61.20    0.912345          58     15745           recvfrom
 20.01    0.300000          37      7978           pwrite64
  0.10    0.001000           4       250        12 epoll_wait
------ ----------- ----------- --------- --------- ----------------
100.00    1.213345          50     23973        12 total
"""
    calls = profile.syscalls_per_gb(table, 0.5)
    assert calls == {"recvfrom": 31490.0, "pwrite64": 15956.0, "epoll_wait": 500.0}
    assert list(calls) == ["recvfrom", "pwrite64", "epoll_wait"]
    assert profile.dso_name("[kernel.kallsyms]") == "kernel"
    assert profile.dso_name("libpython3.11.so.1.0") == "python interpreter"
    assert profile.dso_name("segment.cpython-311-x86_64-linux-gnu.so") == "native core (_native) and extension modules"
    assert profile.dso_name("libc.so.6") == "libc"
    a = profile.parse_args(["--phase", "produce"])
    assert a.phase == "produce" and a.size == 1024 and a.partitions == 10 and a.seconds == 10.0
    with pytest.raises(SystemExit):
        profile.parse_args([])  # --phase is required


@pytest.mark.parametrize("script", ["bench/produce_copies.py", "bench/broker_profile.py", "bench/kafka_vs_kbroker.py"])
def test_the_readme_bench_commands_start(script):
    """The scripts the README's Benchmarks section names answer --help from a checkout."""
    import sys

    readme = (REPO / "README.md").read_text()
    assert script in readme
    p = subprocess.run([sys.executable, script, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("usage:"), p.stderr
    if script == "bench/kafka_vs_kbroker.py":  # the README names its --floor
        assert "--floor" in readme and "--floor" in p.stdout


@pytest.fixture(scope="module")
def alloc_ahead(tmp_path_factory):
    return built(tmp_path_factory, "alloc_ahead", "ALLOC_AHEAD")


@pytest.mark.parametrize("mode", ["plain", "ahead"])
@pytest.mark.parametrize("keep", [False, True])
def test_alloc_ahead_writes_what_it_says_and_leaves_no_file(alloc_ahead, tmp_path, mode, keep):
    """bench/native/alloc_ahead (docs/native.md, "Blocks allocated ahead"): both modes
    write the bytes asked for, report their CPU, and remove their files."""
    argv = [str(alloc_ahead), mode, "--gb", "0.01", "--chunk", "65536", "--dir", str(tmp_path)]
    p = subprocess.run(argv + (["--keep"] if keep else []), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["mode"] == mode and r["bytes"] >= 10_000_000 and r["bytes"] % 65536 == 0
    assert r["keep"] is keep and r["ahead"] == (1 << 20 if mode == "ahead" else 0)
    assert r["cpu_s_per_gb"] >= 0 and r["machine_busy_s"] >= 0
    assert list(tmp_path.iterdir()) == []
    usage = subprocess.run([str(alloc_ahead), "sideways"], capture_output=True, text=True, timeout=10)
    assert usage.returncode == 2 and "usage: alloc_ahead plain|ahead" in usage.stderr
