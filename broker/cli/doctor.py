"""`broker doctor`: checks this host (and a data dir) against docs/deploy.md's advice.

Each check prints one line: `[ok]`, `[advice]` (a setting to change for performance or
safety margins), `[limit]` (a limit below what a broker needs: it can fail with "Map
failed", "Too many open files" and the like once it holds enough segments or
connections) or `[unsafe]` (other local users can read a data dir, or the metadata file
that holds the SCRAM credentials and ACLs), then the value now, the advice, why, and the
command that changes it.

Exit codes: 0 when no limit is below its advice and nothing is unsafe (advice lines may
remain), 1 otherwise, 2 for bad usage (a data dir that does not exist, an unreadable
--config).

Sysctls are read from /proc/sys (`--proc` names another /proc, e.g. a container's view or
a test's tree); the open-files limit is this process's (the shell's: the service gets
LimitNOFILE from deploy/kbroker.service), or a running broker's with `--pid`.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
from dataclasses import dataclass
from pathlib import Path

from broker.cli.errors import CliError

OK, ADVICE, LIMIT, UNSAFE = "ok", "advice", "limit", "unsafe"

#: docs/deploy.md's table: (sysctl, kind, advised value, comparison, why)
MAX_MAP_COUNT = 262144
FILE_MAX = 1_000_000
NOFILE = 100_000
SWAPPINESS = 1
DIRTY_BACKGROUND_RATIO = 5
DIRTY_RATIO = 60
FREE_FRACTION = 0.10
GOOD_FILESYSTEMS = ("ext4", "xfs")


@dataclass
class Finding:
    level: str
    name: str
    now: str
    advice: str
    why: str
    fix: str = ""

    def lines(self) -> list[str]:
        head = f"[{self.level}] {self.name} = {self.now}"
        if self.level != OK:
            head += f" (advice: {self.advice})"
        out = [head, f"    why: {self.why}"]
        if self.fix and self.level != OK:
            out.append(f"    fix: {self.fix}")
        return out


def _sysctl(proc: Path, name: str) -> int | None:
    try:
        return int((proc / "sys" / name.replace(".", "/")).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _persist(name: str, value: int) -> str:
    return f"sysctl -w {name}={value}, and persist it: echo '{name} = {value}' >> /etc/sysctl.d/60-kbroker.conf"


def _at_least(proc: Path, name: str, want: int, level: str, why: str) -> Finding:
    now = _sysctl(proc, name)
    if now is None:
        return Finding(ADVICE, name, "unknown", f">= {want}", f"cannot read {proc}/sys: {why}")
    return Finding(OK if now >= want else level, name, str(now), f">= {want}", why, _persist(name, want))


def _at_most(proc: Path, name: str, want: int, level: str, why: str) -> Finding:
    now = _sysctl(proc, name)
    if now is None:
        return Finding(ADVICE, name, "unknown", f"<= {want}", f"cannot read {proc}/sys: {why}")
    return Finding(OK if now <= want else level, name, str(now), f"<= {want}", why, _persist(name, want))


def _nofile(pid: int | None, proc: Path) -> tuple[int | None, str]:
    """(soft RLIMIT_NOFILE, whose) of this process or of `pid`."""
    if pid is None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return (None if soft == resource.RLIM_INFINITY else soft), "this shell"
    try:
        for line in (proc / str(pid) / "limits").read_text().splitlines():
            if line.startswith("Max open files"):
                value = line.split()[3]
                return (None if value == "unlimited" else int(value)), f"process {pid}"
    except (OSError, ValueError, IndexError) as exc:
        raise CliError(f"doctor: cannot read the limits of process {pid}: {exc}", 2) from None
    raise CliError(f"doctor: process {pid} lists no open-files limit", 2)


def host_findings(proc: Path, pid: int | None = None) -> list[Finding]:
    out = [
        _at_least(
            proc,
            "vm.max_map_count",
            MAX_MAP_COUNT,
            LIMIT,
            "each segment maps its offset index and time index (2 maps a segment, plus the "
            "interpreter's): past the limit the broker cannot open more segments",
        ),
        _at_least(
            proc,
            "fs.file-max",
            FILE_MAX,
            LIMIT,
            "every segment holds 3 open files (log, index, time index) and every client a socket, "
            "for the whole machine",
        ),
    ]
    soft, whose = _nofile(pid, proc)
    out.append(
        Finding(
            OK if soft is None or soft >= NOFILE else LIMIT,
            f"open files limit ({whose})",
            "unlimited" if soft is None else str(soft),
            f">= {NOFILE}",
            "3 open files a segment plus a socket a connection: the default 1024 runs out with a "
            "few hundred partitions",
            "LimitNOFILE=100000 in the unit (deploy/kbroker.service has it); for a shell, "
            "'kbroker - nofile 100000' in /etc/security/limits.d/kbroker.conf",
        )
    )
    out += [
        _at_most(
            proc,
            "vm.swappiness",
            SWAPPINESS,
            ADVICE,
            "a broker lives on the page cache; swapping its heap out stalls requests for seconds "
            "(1, not 0: the kernel may still swap rather than kill under pressure)",
        ),
        _at_most(
            proc,
            "vm.dirty_background_ratio",
            DIRTY_BACKGROUND_RATIO,
            ADVICE,
            "start writing dirty pages back early and steadily, instead of in bursts that stall the disk",
        ),
        _at_least(
            proc,
            "vm.dirty_ratio",
            DIRTY_RATIO,
            ADVICE,
            "the broker appends to the page cache (replication, not fsync, keeps records safe): a "
            "high ceiling keeps writers from blocking in write() when the disk lags for a moment",
        ),
    ]
    return out


def _mount(path: Path) -> tuple[str, str, str] | None:
    """(mount point, filesystem type, options) of the mount holding `path`."""
    best = None
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 4:
                    continue
                mnt = parts[1].replace("\\040", " ")
                if (str(path) == mnt or str(path).startswith(mnt.rstrip("/") + "/")) and (
                    best is None or len(mnt) > len(best[0])
                ):
                    best = (mnt, parts[2], parts[3])
    except OSError:
        return None
    return best


def _others_readable(d: Path) -> int:
    """How many files and dirs in `d` and its partition dirs others may read (through the
    dirs they may enter)."""
    count = 0
    try:
        entries = list(os.scandir(d))
    except OSError:
        return 0
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        count += bool(st.st_mode & 0o004)
        if e.is_dir(follow_symlinks=False) and st.st_mode & 0o001:
            try:
                count += sum(bool(f.stat(follow_symlinks=False).st_mode & 0o004) for f in os.scandir(e.path))
            except OSError:
                pass
    return count


def permission_findings(d: Path) -> list[Finding]:
    """A data dir other local users may enter or list (only if every dir above it lets
    them through), and a metadata file with more than 0600 (the broker writes it so)."""
    from broker.cluster.store.file import FILE_MODE, FILE_NAME

    out = []
    mode = d.stat().st_mode & 0o777
    blocked = next((p for p in d.parents if not os.stat(p).st_mode & 0o001), None)
    why = (
        "it holds the records, and for a broker alone the metadata file with every user's SCRAM salt and keys "
        "and the ACLs: other local users must not read them"
    )
    if not mode & 0o005:
        now = f"{mode:04o}"
    elif blocked is not None:
        now = f"{mode:04o} (others cannot reach it: {blocked} is closed to them)"
    else:
        what = "list and enter it" if mode & 0o005 == 0o005 else "list it" if mode & 0o004 else "enter it"
        readable = _others_readable(d) if mode & 0o001 else 0
        now = f"{mode:04o} (others can {what}" + (f", and read {readable} files and dirs in it)" if readable else ")")
    exposed = bool(mode & 0o005) and blocked is None
    out.append(
        Finding(
            UNSAFE if exposed else OK,
            f"permissions of {d}",
            now,
            "0700, or 0750 to let a group read",
            why + " (the broker creates its dirs with log.dirs.mode)",
            f"chmod -R o-rwx {d}",
        )
    )
    meta = d / FILE_NAME
    try:
        meta_mode = meta.stat().st_mode & 0o777
    except OSError:
        return out
    out.append(
        Finding(
            UNSAFE if meta_mode & ~FILE_MODE else OK,
            f"permissions of {meta}",
            f"{meta_mode:04o}",
            f"{FILE_MODE:04o}",
            "it holds every user's SCRAM salt and keys (enough to test passwords "
            "offline) and the ACLs; the broker writes it 0600 and makes it so at start",
            f"chmod 600 {meta}",
        )
    )
    return out


def data_dir_findings(data_dir: Path, proc: Path, nofile: int | None) -> list[Finding]:
    if not data_dir.is_dir():
        raise CliError(f"doctor: data dir {data_dir} does not exist (give the broker's log.dirs)", 2)
    d = data_dir.resolve()
    out = []
    writable = os.access(d, os.W_OK | os.X_OK)
    out.append(
        Finding(
            OK if writable else ADVICE,
            f"{d} writable",
            "yes" if writable else "no (for this user)",
            "writable by the broker's user",
            "the broker writes segments, checkpoints and snapshots there",
            f"chown -R kbroker:kbroker {d} (run doctor as that user to check exactly)",
        )
    )
    out += permission_findings(d)
    mount = _mount(d)
    if mount is not None:
        mnt, fstype, options = mount
        out.append(
            Finding(
                OK if fstype in GOOD_FILESYSTEMS else ADVICE,
                f"filesystem of {d}",
                f"{fstype} on {mnt}",
                " or ".join(GOOD_FILESYSTEMS),
                "the ones Kafka is run on in production; tmpfs loses everything at reboot, network "
                "filesystems break mmap and fsync semantics",
                "put log.dirs on a local ext4 or XFS filesystem",
            )
        )
        atime = "noatime" in options.split(",")
        out.append(
            Finding(
                OK if atime else ADVICE,
                f"mount options of {mnt}",
                options,
                "noatime",
                "every read would otherwise update the file's access time (a write per read)",
                f"add noatime to {mnt}'s options in /etc/fstab, then mount -o remount {mnt}",
            )
        )
    usage = shutil.disk_usage(d)
    free = usage.free / usage.total if usage.total else 0.0
    out.append(
        Finding(
            OK if free >= FREE_FRACTION else ADVICE,
            f"free space of {d}",
            f"{usage.free // 2**20} MiB ({free:.0%})",
            f">= {FREE_FRACTION:.0%}",
            "a full disk takes the log dir offline: keep room for retention to catch up",
            "lower retention.ms / retention.bytes, or add disk",
        )
    )
    segments = sum(1 for _ in d.glob("*/*.log"))
    maps = _sysctl(proc, "vm.max_map_count")
    if maps is not None:
        need = 2 * segments + 1000
        out.append(
            Finding(
                OK if need <= maps // 2 else LIMIT,
                f"segments in {d}",
                str(segments),
                f"2 maps each, at most half of vm.max_map_count ({maps}) with room to grow",
                "a broker that reaches vm.max_map_count cannot open its next segment",
                _persist("vm.max_map_count", max(MAX_MAP_COUNT, 4 * need)),
            )
        )
    if nofile is not None:
        need = 3 * segments + 1000
        out.append(
            Finding(
                OK if need <= nofile * 0.8 else LIMIT,
                f"open files for {segments} segments",
                str(need),
                f"<= 80% of the open files limit ({nofile})",
                "each segment keeps 3 files open, and clients need sockets",
                "raise LimitNOFILE in the unit",
            )
        )
    return out


def cmd_doctor(args: argparse.Namespace) -> int:
    proc = Path(args.proc)
    data_dirs = [Path(d) for d in args.data_dir or []]
    if args.config:
        from broker.config import BrokerConfig, ConfigError

        try:
            config = BrokerConfig.from_sources(args.config, {})
        except (ConfigError, OSError) as exc:
            raise CliError(f"doctor: {args.config}: {exc}", 2) from None
        data_dirs += [Path(d) for d in (config["log.dirs"] or [config["log.dir"]])]
    findings = host_findings(proc, args.pid)
    nofile, _ = _nofile(args.pid, proc)
    for d in data_dirs:
        findings += data_dir_findings(d, proc, nofile)
    print(f"kbroker doctor: this host{''.join(f', data dir {d}' for d in data_dirs)} (advice: docs/deploy.md)")
    for f in findings:
        if f.level != OK or args.verbose:
            print("\n".join(f.lines()))
    limits = sum(f.level == LIMIT for f in findings)
    advice = sum(f.level == ADVICE for f in findings)
    unsafe = sum(f.level == UNSAFE for f in findings)
    oks = sum(f.level == OK for f in findings)
    print(
        f"{oks} ok, {advice} advice, {limits} limit{'s' if limits != 1 else ''} below advice"
        + (f", {unsafe} unsafe" if unsafe else "")
        + ("" if args.verbose else " (--verbose lists the ok ones too)")
    )
    return 1 if limits or unsafe else 0


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "doctor",
        help="check this host and a data dir against docs/deploy.md's advice",
        description="Check sysctls (vm.max_map_count, fs.file-max, swappiness, dirty ratios), "
        "the open-files limit and data dirs (filesystem, noatime, free space, "
        "segments against the limits, permissions: a data dir or the metadata file "
        "other users can read) against docs/deploy.md's advice, printing what to "
        "change. Exit 0: no limit below its advice and nothing unsafe (advice may "
        "remain); 1: a limit is below its advice, or something is unsafe; 2: bad "
        "usage.",
    )
    p.add_argument("--data-dir", action="append", metavar="DIR", help="a log dir to check (repeatable)")
    p.add_argument("--config", metavar="FILE", help="server.properties: check its log.dirs")
    p.add_argument(
        "--pid",
        type=int,
        metavar="PID",
        help="check the open-files limit of this running broker instead of this shell's",
    )
    p.add_argument("--proc", default="/proc", metavar="DIR", help="where /proc is (default /proc)")
    p.add_argument("--verbose", "-v", action="store_true", help="also list the checks that passed")
    p.set_defaults(func=cmd_doctor)
