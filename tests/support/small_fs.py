"""A small tmpfs of its own for a test, to fill up: a real full disk (ENOSPC) for a real
broker process, without touching the machine's disks.

    with small_tmpfs(tmp_path / "fs", mib=32) as fs:
        fs.fill()          # writes a filler file until ENOSPC
        fs.free()          # removes it

Mounting needs root (CAP_SYS_ADMIN); without it the test fails under CI and skips on a
developer machine, saying so. The mount is lazily unmounted at exit whatever happens.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from tests.support.deps import missing


class SmallFs:
    def __init__(self, path: Path):
        self.path = path
        self.filler = path / "filler"

    def fill(self) -> None:
        """Writes until the filesystem is full (then fills the last partial page)."""
        with open(self.filler, "ab", buffering=0) as f:
            for size in (1 << 20, 4096, 1):
                chunk = b"\0" * size
                try:
                    while True:
                        f.write(chunk)
                except OSError as exc:
                    if exc.errno != 28:
                        raise

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)


@contextlib.contextmanager
def small_tmpfs(path: Path, mib: int):
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        missing("a tmpfs mount", "mounting needs root: run the tests as root, as 'make test' in CI does")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m,mode=0755", "tmpfs", str(path)],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        missing("a tmpfs mount", f"mount failed: {r.stderr.strip()} (a container without CAP_SYS_ADMIN?)")
    try:
        yield SmallFs(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)
