"""Process and machine helpers shared by the peer benchmark: free loopback ports, CPU time
and RSS of a process tree read from /proc, a server process started in its own session
and stopped with everything it spawned, and the machine description line.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import subprocess
import threading
import time

CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float, alive=lambda: True) -> bool:
    """True once 127.0.0.1:port accepts a connection, False after timeout or when
    alive() turns false (the server died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads)."""
    st = _stat(pid)
    return (int(st[11]) + int(st[12])) / CLK if st else 0.0


def proc_start(pid: int) -> int | None:
    st = _stat(pid)
    return int(st[19]) if st else None


def tree_pids(root: int) -> list[int]:
    """root and all its live descendants (by parent pid, from /proc)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st:
            children.setdefault(int(st[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def tree_cpu(root: int) -> dict[int, float]:
    return {pid: proc_cpu(pid) for pid in tree_pids(root)}


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


def tree_rss_mb(root: int) -> float:
    total = 0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total * PAGE / 1e6


class RssSampler:
    """Peak RSS of a server's process tree while a phase runs (background thread)."""

    def __init__(self, root: int | None, every_s: float = 0.25):
        self.root = root
        self.every_s = every_s
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, tree_rss_mb(self.root))
            self._stop.wait(self.every_s)

    def __enter__(self):
        if self.root:
            self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._t.is_alive():
            self._t.join(5)


class ServerProcess:
    """A server started in a new session (its own process group) with stdout/stderr to a
    log file. stop() sends SIGTERM to the group, waits, then SIGKILLs the group and any
    descendant seen while it ran that is still alive (by pid and start time, so a
    recycled pid is never hit)."""

    def __init__(self, name: str, cmd: list[str], log_path: str, env: dict | None = None, cwd: str | None = None):
        self.name = name
        self.cmd = cmd
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self._seen: dict[int, int | None] = {}

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def remember_children(self) -> None:
        if self.alive():
            for pid in tree_pids(self.proc.pid):
                self._seen.setdefault(pid, proc_start(pid))

    def log_tail(self, lines: int = 5) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return " | ".join(x.strip() for x in f.readlines()[-lines:] if x.strip())
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        self.remember_children()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        deadline = time.monotonic() + 10
        for pid, started in self._seen.items():
            if pid == self.proc.pid:
                continue
            while proc_start(pid) == started and started is not None and time.monotonic() < deadline:
                time.sleep(0.1)  # helpers usually exit with their parent
            if proc_start(pid) == started and started is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def machine_info() -> dict:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_kb = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kb = int(line.split()[1])
                    break
    except OSError:
        pass
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    flags = " + ".join(x.upper().replace("_", ".") for x in ("sse4_2", "avx2", "avx512f") if x in have)
                    break
    except OSError:
        pass
    distro = ""
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    distro = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return {
        "cores": os.cpu_count() or 0,
        "ram_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "cpu_model": model,
        "cpu_flags": flags,
        "distro": distro,
        "python": platform.python_version(),
        "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
