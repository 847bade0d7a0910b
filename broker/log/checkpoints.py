"""Kafka's checkpoint files, written atomically (temp file, fsync, rename, fsync dir).

Offset checkpoint (recovery-point-offset-checkpoint, replication-offset-checkpoint,
log-start-offset-checkpoint), one per log dir:

    0                      <- version
    2                      <- number of entries
    clicks 0 1200          <- topic partition offset
    clicks 1 1188

Leader epoch checkpoint (leader-epoch-checkpoint), one per partition directory:

    0
    1
    0 0                    <- leader epoch, its start offset

A file that cannot be parsed raises CheckpointError naming the file and line; callers
decide (the log manager falls back to recovering everything).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import NamedTuple


class CheckpointError(ValueError):
    pass


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def read_small_text(path: str) -> str:
    """The whole of a small metadata file as text; ValueError saying what is wrong with it
    (unreadable, empty, not UTF-8) for the caller to name the file and its remedy."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ValueError(f"cannot read it: {exc.strerror}") from None
    if not raw.strip():
        raise ValueError("empty")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None


def write_atomically(path: str, text: str, fsync: bool = True, mode: int | None = None) -> None:
    """Replaces `path` with `text`: written to path.tmp, fsynced, renamed over it (then the
    dir fsynced). `mode`: the file's permissions whatever the umask, set on the temp file
    before anything is written to it (also on a temp file a crash left behind with other
    ones), so that the text is never readable with wider ones (the metadata file's SCRAM
    credentials: 0600). None: as the umask makes them (the log dirs' policy, log.dirs.mode)."""
    tmp = path + ".tmp"
    if mode is None:
        f = open(tmp, "w", encoding="utf-8")
    else:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            raise
        f = open(fd, "w", encoding="utf-8")
    with f:
        f.write(text)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _read_lines(path: str) -> list[str] | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return None


def _header(path: str, lines: list[str]) -> int:
    if len(lines) < 2 or lines[0].strip() != "0":
        raise CheckpointError(f"{path}: line 1: expected version 0")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"{path}: line 2: expected an entry count") from None
    if count < 0:
        raise CheckpointError(f"{path}: line 2: negative entry count {count}")
    if len(lines) - 2 < count:
        raise CheckpointError(f"{path}: line 2: {count} entries announced, {len(lines) - 2} present")
    # as Kafka's reader: lines beyond the announced entries make the file malformed
    for i in range(2 + count, len(lines)):
        if lines[i].strip():
            raise CheckpointError(f"{path}: line {i + 1}: more entries than the {count} announced")
    return count


class OffsetCheckpoint:
    def __init__(self, path: str):
        self.path = path

    def read(self) -> dict[TopicPartition, int]:
        lines = _read_lines(self.path)
        if lines is None:
            return {}
        count = _header(self.path, lines)
        out: dict[TopicPartition, int] = {}
        for i in range(count):
            parts = lines[2 + i].split()
            if len(parts) != 3:
                raise CheckpointError(f"{self.path}: line {i + 3}: expected 'topic partition offset'")
            try:
                out[TopicPartition(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                raise CheckpointError(f"{self.path}: line {i + 3}: bad number") from None
        return out

    def write(self, offsets: dict[TopicPartition, int], fsync: bool = True) -> None:
        lines = ["0", str(len(offsets))]
        lines += [f"{tp.topic} {tp.partition} {off}" for tp, off in sorted(offsets.items())]
        write_atomically(self.path, "\n".join(lines) + "\n", fsync)


class LeaderEpochCheckpoint:
    def __init__(self, path: str):
        self.path = path

    def read(self) -> list[tuple[int, int]]:
        lines = _read_lines(self.path)
        if lines is None:
            return []
        count = _header(self.path, lines)
        out = []
        for i in range(count):
            parts = lines[2 + i].split()
            if len(parts) != 2:
                raise CheckpointError(f"{self.path}: line {i + 3}: expected 'epoch start_offset'")
            try:
                out.append((int(parts[0]), int(parts[1])))
            except ValueError:
                raise CheckpointError(f"{self.path}: line {i + 3}: bad number") from None
        return out

    def write(self, entries: Iterable[tuple[int, int]], fsync: bool = True) -> None:
        entries = list(entries)
        lines = ["0", str(len(entries))] + [f"{e} {o}" for e, o in entries]
        write_atomically(self.path, "\n".join(lines) + "\n", fsync)
