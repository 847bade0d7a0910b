"""Network partitions on loopback: iptables DROP rules between 127.0.0.0/8 addresses.

    with NetFaults() as net:                      # rules removed at exit, whatever happens
        net.cut("127.0.0.11", "127.0.0.2")        # both directions (one: both=False)
        net.isolate("127.0.0.11", ["127.0.0.12", "127.0.0.13", "127.0.0.2"])
        net.heal("127.0.0.11", "127.0.0.2")       # that pair only
        net.heal()                                # every rule of this NetFaults

Linux routes all of 127/8 to the loopback device, so processes listening on (and, for
outgoing connections, bound to) distinct 127.0.0.x addresses can be cut from each other
while a client on 127.0.0.1 still reaches all of them (tests/support/cluster.py,
`distinct_hosts`). A DROP rule in the INPUT chain drops every packet from one address to
the other, established connections included (no conntrack match): the peer sees
silence, as on a real partition, not a reset.

Safety, since this changes the machine's firewall:
- Only addresses inside 127.0.0.0/8 are accepted (ValueError otherwise, before any
  iptables call); a rule always names both a source and a destination address.
- Every rule carries a comment `kbroker-netfault pid=<pid> <tag>`; heal() deletes exactly
  the rules this object added, and also every rule of this process found in the chain
  (`iptables -S`), so a rule whose bookkeeping was lost still goes. An atexit handler does
  the same for every NetFaults of the process, and a NetFaults being created first removes
  rules left by processes that no longer exist (a test run killed -9).
- iptables runs with `-w` (waits for the xtables lock: parallel runs do not collide).

Needs root and the iptables binary (Debian's `iptables`, installed by `make sysdeps`).
Debian 12's default is the nf_tables backend (`iptables-nft`); the legacy backend works
the same here, the rules are the same either way. `available()` says what is missing.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import shlex
import shutil
import subprocess
import threading
import weakref

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
CHAIN = "INPUT"
COMMENT_PREFIX = "kbroker-netfault"
IPTABLES_TIMEOUT = 30.0

_lock = threading.Lock()
_live: weakref.WeakSet[NetFaults] = weakref.WeakSet()


class NetFaultError(RuntimeError):
    """iptables refused or failed."""


def available() -> str | None:
    """None when rules can be added here, else what is missing."""
    if shutil.which("iptables") is None:
        return "iptables (apt-get install iptables, or run 'make sysdeps' as root)"
    if os.geteuid() != 0:
        return "root (iptables rules need CAP_NET_ADMIN: run the tests as root)"
    r = subprocess.run(["iptables", "-w", "5", "-S", CHAIN], capture_output=True, text=True, timeout=IPTABLES_TIMEOUT)
    if r.returncode != 0:
        return f"a working iptables ({r.stderr.strip()})"
    return None


def loopback(address: str) -> str:
    """The address as text if it lies in 127.0.0.0/8; ValueError otherwise."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise ValueError(f"not an IP address: {address!r} (netfault cuts loopback addresses only)") from None
    if ip.version != 4 or ip not in LOOPBACK:
        raise ValueError(f"{address} is outside 127.0.0.0/8: netfault cuts loopback addresses only")
    return str(ip)


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True, timeout=IPTABLES_TIMEOUT)
    if check and r.returncode != 0:
        raise NetFaultError(f"iptables {' '.join(args)}: {r.stderr.strip() or r.returncode}")
    return r


def _rule(src: str, dst: str, comment: str) -> list[str]:
    return ["-s", f"{src}/32", "-d", f"{dst}/32", "-m", "comment", "--comment", comment, "-j", "DROP"]


def _our_rules(pids: set[int] | None = None, dead_only: bool = False) -> list[list[str]]:
    """The rule specs in the chain carrying our comment (of `pids`, or of dead processes)."""
    out = _iptables("-S", CHAIN).stdout
    found = []
    for line in out.splitlines():
        if COMMENT_PREFIX not in line or not line.startswith(f"-A {CHAIN} "):
            continue
        spec = shlex.split(line)[2:]
        pid = _pid_of(spec)
        if pid is None:
            continue
        if dead_only and _alive(pid):
            continue
        if pids is not None and pid not in pids:
            continue
        found.append(spec)
    return found


def _comment(spec: list[str]) -> str:
    try:
        return spec[spec.index("--comment") + 1]
    except (ValueError, IndexError):
        return ""


def _pid_of(spec: list[str]) -> int | None:
    for word in _comment(spec).split():
        if word.startswith("pid="):
            try:
                return int(word[4:])
            except ValueError:
                return None
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> int:
    """Removes the rules of processes that no longer exist; how many."""
    n = 0
    for spec in _our_rules(dead_only=True):
        if _iptables("-D", CHAIN, *spec, check=False).returncode == 0:
            n += 1
    return n


class NetFaults:
    """See the module docstring. `tag` names the owner in the rules' comments."""

    def __init__(self, tag: str = "test"):
        if any(c.isspace() or c in "\"'" for c in tag):
            raise ValueError(f"tag {tag!r}: no spaces or quotes")
        self.tag = tag
        self.comment = f"{COMMENT_PREFIX} pid={os.getpid()} {tag}"
        self._rules: list[tuple[str, str]] = []  # (src, dst), in the order added
        with _lock:
            if not _live:
                sweep_stale()
            _live.add(self)

    def __repr__(self) -> str:
        return f"NetFaults({self.tag}, {len(self._rules)} rules)"

    @property
    def cuts(self) -> list[tuple[str, str]]:
        """(source, destination) of every DROP rule this object holds."""
        return list(self._rules)

    def cut(self, a: str, b: str, both: bool = True) -> None:
        """Drops every packet from a to b (and from b to a, with both)."""
        a, b = loopback(a), loopback(b)
        if a == b:
            raise ValueError(f"cut {a} from itself?")
        for src, dst in ((a, b), (b, a)) if both else ((a, b),):
            if (src, dst) in self._rules:
                continue
            with _lock:
                _iptables("-I", CHAIN, "1", *_rule(src, dst, self.comment))
                self._rules.append((src, dst))

    def isolate(self, node: str, others, both: bool = True) -> None:
        """Cuts `node` from each of `others`."""
        for other in others:
            self.cut(node, other, both)

    def partition(self, *groups) -> None:
        """Cuts every address of each group from every address of the other groups."""
        groups = [list(g) for g in groups]
        for i, g in enumerate(groups):
            for h in groups[i + 1 :]:
                for a in g:
                    for b in h:
                        self.cut(a, b)

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        """Removes the rules between a and b (both directions), or every rule of this
        object (no arguments) together with any rule of this process still in the chain
        under this object's tag."""
        if (a is None) != (b is None):
            raise ValueError("heal(a, b) or heal()")
        if a is not None and b is not None:
            pair = {loopback(a), loopback(b)}
            doomed = [r for r in self._rules if set(r) == pair]
        else:
            doomed = list(self._rules)
        errors = []
        with _lock:
            for src, dst in doomed:
                r = _iptables("-D", CHAIN, *_rule(src, dst, self.comment), check=False)
                self._rules.remove((src, dst))
                if r.returncode != 0:
                    errors.append(r.stderr.strip())
            if a is None:
                for spec in _our_rules({os.getpid()}):
                    if _comment(spec) == self.comment:
                        _iptables("-D", CHAIN, *spec, check=False)
        if errors:
            raise NetFaultError(f"could not remove rules: {errors}")

    def close(self) -> None:
        self.heal()

    def __enter__(self) -> NetFaults:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def rules_of_this_process() -> list[list[str]]:
    """Every rule of this process still in the chain (for tests of the cleanup)."""
    return _our_rules({os.getpid()})


@atexit.register
def _heal_all() -> None:
    """Every rule of this process goes at exit, whatever happened."""
    for net in list(_live):
        try:
            net.heal()
        except Exception:
            pass
    try:
        for spec in _our_rules({os.getpid()}):
            _iptables("-D", CHAIN, *spec, check=False)
    except Exception:
        pass
