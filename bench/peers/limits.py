"""Physical limits of this machine for the same figures: sequential write with a
data sync after every 1 MiB block (fio, else dd with conv=fdatasync), and TCP bandwidth
over loopback (iperf3 server and client on 127.0.0.1). Both bounded in time."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import time

from common import ServerProcess, free_port


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def disk_write(directory: str, size_mb: int, timeout: float) -> dict:
    """{"tool", "mb_s", "elapsed", "client_cpu", "sync_lat_ms", "note"}; raises RuntimeError."""
    fio = shutil.which("fio")
    path = os.path.join(directory, "seqwrite.dat")
    try:
        if fio:
            version = subprocess.run([fio, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
            cmd = [
                fio,
                "--name=seq",
                "--rw=write",
                "--bs=1M",
                f"--size={size_mb}M",
                "--fdatasync=1",
                "--ioengine=psync",
                f"--filename={path}",
                f"--runtime={int(timeout)}",
                "--output-format=json",
            ]
            c0, t0 = _children_cpu(), time.perf_counter()
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30)
            elapsed, cpu = time.perf_counter() - t0, _children_cpu() - c0
            if out.returncode != 0:
                raise RuntimeError(f"fio exited {out.returncode}: {out.stderr.strip()[:200]}")
            job = json.loads(out.stdout[out.stdout.index("{") :])["jobs"][0]
            w = job["write"]
            sync = job.get("sync", {}).get("lat_ns", {})
            io_mb = w["io_bytes"] / 1e6
            return {
                "tool": version.replace("fio-", "fio "),
                "mb_s": w["bw_bytes"] / 1e6,
                "elapsed": w["runtime"] / 1000,
                "io_mb": io_mb,
                "client_cpu": cpu,
                "wall": elapsed,
                "sync_lat_ms": (sync.get("mean") or 0) / 1e6,
                "sync_p99_ms": ((sync.get("percentile") or {}).get("99.000000") or 0) / 1e6,
                "cmd": " ".join(cmd[:1] + [a for a in cmd[1:] if not a.startswith("--filename")]),
            }
        dd = shutil.which("dd")
        if not dd:
            raise RuntimeError("neither fio nor dd installed")
        cmd = [dd, "if=/dev/zero", f"of={path}", "bs=1M", f"count={size_mb}", "conv=fdatasync"]
        c0, t0 = _children_cpu(), time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        elapsed, cpu = time.perf_counter() - t0, _children_cpu() - c0
        if out.returncode != 0:
            raise RuntimeError(f"dd exited {out.returncode}: {out.stderr.strip()[:200]}")
        return {
            "tool": "dd (conv=fdatasync: one sync at the end)",
            "mb_s": size_mb * 1048576 / 1e6 / elapsed,
            "elapsed": elapsed,
            "io_mb": size_mb * 1048576 / 1e6,
            "client_cpu": cpu,
            "wall": elapsed,
            "sync_lat_ms": 0.0,
            "sync_p99_ms": 0.0,
            "cmd": " ".join(cmd).replace(path, "FILE"),
        }
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timeout after {timeout:.0f} s") from None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def loopback(seconds: int, timeout: float, log_dir: str) -> dict:
    """iperf3 TCP over 127.0.0.1 for `seconds`: {"tool", "mb_s", "client_frac", "server_frac"}."""
    exe = shutil.which("iperf3")
    if not exe:
        raise RuntimeError("iperf3 not installed")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout
    version = version.split("(")[0].strip()
    port = free_port()
    server = ServerProcess(
        "iperf3",
        [exe, "-s", "-B", "127.0.0.1", "-p", str(port), "-1", "--forceflush"],
        os.path.join(log_dir, "iperf3.log"),
    )
    server.start()
    try:
        # no probe connection: a one-off (-1) server would take it for the test's client
        deadline = time.monotonic() + 10
        while "listening" not in server.log_tail(5).lower():
            if not server.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"iperf3 server did not start: {server.log_tail(2)}")
            time.sleep(0.05)
        cmd = [exe, "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=min(timeout, seconds + 30))
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"timeout after {min(timeout, seconds + 30):.0f} s") from None
        if out.returncode != 0:
            raise RuntimeError(f"iperf3 exited {out.returncode}: {(out.stdout + out.stderr).strip()[-200:]}")
        r = json.loads(out.stdout)
        end = r["end"]
        cpu = end.get("cpu_utilization_percent", {})
        return {
            "tool": version,
            "mb_s": end["sum_received"]["bits_per_second"] / 8 / 1e6,
            "elapsed": end["sum_received"]["seconds"],
            "client_frac": cpu.get("host_total", 0) / 100,
            "server_frac": cpu.get("remote_total", 0) / 100,
            "cmd": f"iperf3 -s -B 127.0.0.1 -1; iperf3 -c 127.0.0.1 -t {seconds}",
        }
    finally:
        server.stop(10)


def redis_benchmark(
    port: int, n: int, value: bytes, server_pid: int, timeout: float, pipeline: int, count: int
) -> dict:
    """redis-benchmark (C, one connection, pipelined) against the running Redis:
    XADD of n entries, then XRANGE - + COUNT `count` repeated n/count times (reads the
    stream's first `count` entries every time). {"produce": {...}, "consume": {...}}."""
    from common import cpu_delta, tree_cpu

    exe = shutil.which("redis-benchmark")
    if not exe:
        raise RuntimeError("redis-benchmark not installed")
    res = {}
    runs = {
        "produce": (
            [
                exe,
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-c",
                "1",
                "-n",
                str(n),
                "-P",
                str(pipeline),
                "--csv",
                "XADD",
                "rbench",
                "*",
                "d",
                value.decode(),
            ],
            n,
            1,
        ),
        "consume": (
            [
                exe,
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-c",
                "1",
                "-n",
                str(-(-n // count)),
                "-P",
                "4",
                "--csv",
                "XRANGE",
                "rbench",
                "-",
                "+",
                "COUNT",
                str(count),
            ],
            -(-n // count),
            count,
        ),
    }
    for phase, (cmd, requests, per_request) in runs.items():
        s0, c0, t0 = tree_cpu(server_pid), _children_cpu(), time.perf_counter()
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            res[phase] = {"error": f"timeout after {timeout:.0f} s", "timeout": True}
            continue
        wall, ccpu, scpu = time.perf_counter() - t0, _children_cpu() - c0, cpu_delta(s0, tree_cpu(server_pid))
        rows = [line for line in out.stdout.splitlines() if line.startswith('"') and not line.startswith('"test"')]
        m = re.match(r'^"[^"]*","([0-9.]+)"', rows[-1]) if rows else None
        if out.returncode != 0 or not m:
            tail = (out.stdout + out.stderr).strip()[-200:]
            res[phase] = {"error": f"redis-benchmark exited {out.returncode}: {tail}"}
            continue
        rps = float(m.group(1))
        elapsed = requests / rps
        res[phase] = {
            "count": requests * per_request,
            "elapsed": elapsed,
            "wall": wall,
            # CPU over the subprocess' whole life (it connects in ~1 ms)
            "client_cpu": ccpu * elapsed / wall,
            "server_cpu": scpu * elapsed / wall,
            "error": None,
            "timeout": False,
        }
    return res
