"""Small file systems of a test's own, mounted where a broker keeps a log dir, to break:
real disk faults for a real broker process, without touching the machine's disks.

    with small_tmpfs(tmp_path / "fs", mib=32) as fs:
        fs.fill()          # writes a filler file until ENOSPC: a full disk
        fs.free()          # removes it

    with failing_ext4(tmp_path / "fs", mib=64) as fs:
        fs.fail()          # the disk fails: every read and write there is EIO from now on
        fs.repair()        # (nothing may hold files there) unmounted and mounted again

failing_ext4 is an ext4 file system in an image file on a loop device; fail() is the
EXT4_IOC_SHUTDOWN ioctl (what xfs_io's "shutdown" does, without flushing the journal, as
a dying disk would not): from then on open(), read(), write() and fsync() there fail with
EIO, for descriptors already open too and for root (chmod 000 stops nobody running as
root, and an unmounted tmpfs stays writable through the descriptors open on it). repair()
mounts it again, the journal replayed: what was written before the failure and not
committed is lost, as after a real one.

Mounting needs root (CAP_SYS_ADMIN), and failing_ext4 mkfs.ext4 and a free loop device;
without them the test fails under CI and skips on a developer machine, saying so. Every
mount is unmounted at exit whatever happens (lazily when a process still holds it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import struct
import subprocess
from pathlib import Path

from tests.support.deps import missing

EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2  # shut down at once, the journal not flushed


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
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={mib}m,mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if r.returncode != 0:
        missing("a tmpfs mount", f"mount failed: {r.stderr.strip()} (a container without CAP_SYS_ADMIN?)")
    try:
        yield SmallFs(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


class FailingFs:
    def __init__(self, path: Path, image: Path):
        self.path = path
        self.image = image
        self.failed = False

    def mount(self) -> None:
        r = subprocess.run(
            ["mount", "-o", "loop", str(self.image), str(self.path)], capture_output=True, text=True, timeout=60
        )
        if r.returncode != 0:
            missing(
                "a loop-mounted ext4 image",
                f"mount -o loop failed: {r.stderr.strip()} (no free loop "
                f"device, or a container without CAP_SYS_ADMIN?)",
            )

    def fail(self) -> None:
        """Every I/O on this file system fails with EIO from now on (EXT4_IOC_SHUTDOWN)."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)
        self.failed = True

    def unmount(self, lazy: bool = False) -> bool:
        r = subprocess.run(["umount", *(["-l"] if lazy else []), str(self.path)], capture_output=True, timeout=60)
        return r.returncode == 0

    def repair(self) -> None:
        """Mounted again, its journal replayed (nothing may hold files there: stop the
        broker first)."""
        if not self.unmount():
            raise RuntimeError(f"cannot unmount {self.path}: a process still holds files there")
        self.mount()
        self.failed = False


@contextlib.contextmanager
def failing_ext4(path: Path, mib: int = 64):
    """A FailingFs mounted on `path` (created; it must be empty), unmounted at exit."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        missing("a loop-mounted ext4 image", "mounting needs root: run the tests as root, as 'make test' in CI does")
    mkfs = shutil.which("mkfs.ext4")
    if mkfs is None:
        missing("mkfs.ext4", "apt-get install e2fsprogs")
    image = path.parent / f".{path.name}.ext4"
    with open(image, "wb") as f:
        f.truncate(mib << 20)
    r = subprocess.run([mkfs, "-q", "-F", str(image)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    fs = FailingFs(path, image)
    fs.mount()
    try:
        yield fs
    finally:
        if not fs.unmount():
            fs.unmount(lazy=True)  # a process still holds it: detached now, released with it
        image.unlink(missing_ok=True)
