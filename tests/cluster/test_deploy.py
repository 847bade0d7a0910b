"""docs/deploy.md and deploy/ as a new operator would use them (issue 20, test 5):

- the units pass `systemd-analyze verify` and `systemd-analyze security --offline`, and
  carry what the guide promises (LimitNOFILE, ProtectSystem, the restart policy, a
  controlled shutdown by SIGTERM within a bounded TimeoutStopSec);
- every shell block of the guide runs, in order, in a scratch root (commands that would
  change this machine act on files under it; systemctl, journalctl, apt-get, pip, nc and
  the broker's client commands are checked, not run: see the guide's last section);
- each unit's ExecStart runs as systemd would run it: ZooKeeper, then the broker on it,
  then SIGTERM: the broker exits 0 well within TimeoutStopSec;
- `broker doctor` on this machine prints its findings and exits 1 exactly when a limit
  read from /proc is below its advice (and 0 / 1 on a /proc tree made to pass / fail).

Under CI=true a missing systemd-analyze, ZooKeeper or java fails the test.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.perf.zookeeper import serving_mode
from tests.support.deps import missing, require_binary
from tests.support.ports import free_port
from tests.support.zookeeper import available as zookeeper_available

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
GUIDE = REPO / "docs" / "deploy.md"
BROKER = shutil.which("broker", path=os.path.dirname(sys.executable)) or shutil.which("broker")


def unit(name: str) -> dict[str, list[str]]:
    """A unit file's directives (continuation lines joined): key -> values."""
    out: dict[str, list[str]] = {}
    text = (DEPLOY / name).read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            k, v = line.split("=", 1)
            out.setdefault(k.strip(), []).append(v.strip())
    return out


def exec_start(name: str) -> list[str]:
    return shlex.split(unit(name)["ExecStart"][0])


def test_units_pass_systemd_analyze(tmp_path):
    analyze = require_binary("systemd-analyze", "systemd")
    assert BROKER is not None
    # the broker's ExecStart names /opt/kbroker (the guide's venv); here the test's own broker
    kb = (DEPLOY / "kbroker.service").read_text().replace("/opt/kbroker/venv/bin/broker", BROKER)
    (tmp_path / "kbroker.service").write_text(kb)
    shutil.copy(DEPLOY / "zookeeper.service", tmp_path / "zookeeper.service")
    units = [str(tmp_path / "kbroker.service"), str(tmp_path / "zookeeper.service")]
    r = subprocess.run([analyze, "verify", *units], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "kbroker.service" not in r.stderr and "zookeeper.service" not in r.stderr, r.stderr
    for u, at_most in (("kbroker.service", 2.5), ("zookeeper.service", 5.0)):
        r = subprocess.run(
            [analyze, "security", "--offline=yes", str(tmp_path / u)], capture_output=True, text=True, timeout=60
        )
        level = re.search(rf"Overall exposure level for {u}: ([0-9.]+) (\w+)", r.stdout)
        assert level and float(level.group(1)) <= at_most and level.group(2) == "OK", r.stdout[-500:]
    # what the guide promises of the broker's unit
    d = unit("kbroker.service")
    for key, value in (
        ("LimitNOFILE", "100000"),
        ("ProtectSystem", "strict"),
        ("Restart", "on-failure"),
        ("KillSignal", "SIGTERM"),
        ("User", "kbroker"),
        ("NoNewPrivileges", "yes"),
        ("ReadWritePaths", "/var/lib/kbroker"),
    ):
        assert d[key] == [value], key
    assert 0 < int(d["TimeoutStopSec"][0]) <= 300 and int(d["RestartSec"][0]) >= 18  # past the session timeout
    from broker.cli.main import build_parser

    args = build_parser().parse_args(exec_start("kbroker.service")[1:])
    assert args.command == "serve" and args.config == "/etc/kbroker/server.properties"
    # and the configuration it names is valid as shipped
    from broker.config import BrokerConfig

    cfg = BrokerConfig.from_sources(str(DEPLOY / "server.properties"), {})
    assert cfg["log.dirs"] == ["/var/lib/kbroker/data"] and cfg.warnings == []
    assert cfg["zookeeper.connect"].count(",") == 2 and cfg["min.insync.replicas"] == 2


# ---------------------------------------------------------------------- the guide's commands

PRELUDE = r"""
set -euo pipefail
_r() { case "$1" in /etc/*|/var/*|/opt/*|/root/*) printf '%s' "$ROOT$1";; /) printf '%s' "$ROOT/";; *) printf '%s' "$1";; esac; }
_call() { printf '%s\n' "$*" >> "$ROOT/.calls"; }
_uid() { awk -F: -v n="$1" '$1==n{print $3}' "$ROOT/etc/passwd"; }
_gid() { awk -F: -v n="$1" '$1==n{print $3}' "$ROOT/etc/group"; }
apt-get() { _call apt-get "$@"; case "$1" in update) ;; install) shift; for p in "$@"; do
    case "$p" in -*) ;; *) { apt-cache show "$p" || dpkg -s "$p"; } >/dev/null 2>&1 || { echo "no package $p" >&2; return 1; };; esac; done;;
    *) echo "apt-get $1?" >&2; return 1;; esac; }
useradd() { _call useradd "$@"; command useradd --prefix "$ROOT" "$@"; }
install() { _call install "$@"; local a=() o g; while [ $# -gt 0 ]; do case "$1" in
    -o) o=$(_uid "$2"); a+=(-o "$o"); shift 2;; -g) g=$(_gid "$2"); a+=(-g "$g"); shift 2;;
    *) a+=("$(_r "$1")"); shift;; esac; done; command install "${a[@]}"; }
chown() { _call chown "$@"; local u=${1%%:*} g=${1##*:}; shift; local a=(); for f in "$@"; do a+=("$(_r "$f")"); done
    command chown "$(_uid "$u"):$(_gid "$g")" "${a[@]}"; }
tee() { _call tee "$@"; local a=(); for f in "$@"; do a+=("$(_r "$f")"); done; command tee "${a[@]}" >/dev/null; }
tar() { _call tar "$@"; local a=(); for f in "$@"; do a+=("$(_r "$f")"); done; command tar "${a[@]}"; }
sysctl() { _call sysctl "$@"; [ "$1" = --system ] || { echo "sysctl $1?" >&2; return 1; }
    for f in "$ROOT"/etc/sysctl.d/*.conf; do grep -v '^\s*#' "$f" | grep '=' | while IFS='=' read -r k v; do
        k=$(echo $k); v=$(echo $v); [ -e "/proc/sys/${k//./\/}" ] || { echo "no sysctl $k" >&2; exit 1; }
        [[ "$v" =~ ^[0-9]+$ ]] || { echo "$k = $v?" >&2; exit 1; }; done; done; }
# the units are not started (no systemd here): what their first start leaves and the backup step
# archives (the broker's meta.properties, ZooKeeper's version-2/) is written in its place; test_the_units_commands... runs it for real
systemctl() { _call systemctl "$@"; local verb=$1; shift
    if [[ " $* " == *" kbroker "* && ( $verb == start || " $* " == *" --now "* ) ]]; then
        printf 'version=0\nbroker.id=1\ncluster.id=scratch\n' > "$ROOT/var/lib/kbroker/data/meta.properties"; fi
    if [[ " $* " == *" zookeeper "* && ( $verb == start || " $* " == *" --now "* ) ]]; then
        command mkdir -p "$ROOT/var/lib/zookeeper/version-2"; : > "$ROOT/var/lib/zookeeper/version-2/snapshot.0"; fi
    case "$verb" in
    daemon-reload) ;; enable|start|stop|status|restart) for u in "$@"; do case "$u" in --now) ;;
        *) [ -f "$ROOT/etc/systemd/system/$u.service" ] || { echo "no unit $u" >&2; return 1; };; esac; done;;
    show) ;; *) echo "systemctl $verb?" >&2; return 1;; esac; }
journalctl() { _call journalctl "$@"; [ "$1" = -u ] && [ -f "$ROOT/etc/systemd/system/$2.service" ]; }
systemd-analyze() { _call systemd-analyze "$@"; [ "$1" = verify ]; local f; f=$(_r "$2"); local t; t=$(mktemp -d)
    sed "s#/opt/kbroker/venv/bin/broker#$BROKER#" "$f" > "$t/$(basename "$f")"; command systemd-analyze verify "$t/$(basename "$f")"; }
nc() { _call nc "$@"; }
python3() { _call python3 "$@"; [ "$1 $2" = "-m venv" ] || return 1; command mkdir -p "$(_r "$3")/bin";
    ln -sf "$BROKER" "$(_r "$3")/bin/broker"; }
/opt/kbroker/venv/bin/pip() { _call pip "$@"; [ "$1" = install ] && { [ "$2" = . ] || [ "$2 $3" = "--upgrade ." ]; }; }
/opt/kbroker/venv/bin/broker() { _call broker "$@"; if [ "$1" = doctor ]; then
        local a=(); for f in "$@"; do a+=("$(_r "$f")"); done
        if [ "${a[1]}" = --config ]; then sed "s#=/var/#=$ROOT/var/#" "${a[2]}" > "$ROOT/.doctor.properties"; a[2]="$ROOT/.doctor.properties"; fi
        set +e; "$BROKER" "${a[@]}" > "$ROOT/.doctor.$#.out"; local rc=$?; set -e
        [ $rc -le 1 ] || { echo "doctor exit $rc" >&2; return 1; }
    else "$PY" -c 'import sys; from broker.cli.main import build_parser; build_parser().parse_args(sys.argv[1:])' "$@"; fi; }
"""


def shell_blocks(text: str) -> list[str]:
    return [textwrap_dedent(m.group(2)) for m in re.finditer(r"^( *)```sh\n(.*?)^\1```", text, re.M | re.S)]


def textwrap_dedent(block: str) -> str:
    import textwrap

    return textwrap.dedent(block)


def scratch_root(tmp_path: Path) -> Path:
    """A root as Debian leaves it with the zookeeper package installed."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    for f in ("passwd", "group", "shadow", "gshadow", "login.defs"):
        shutil.copy(f"/etc/{f}", root / "etc" / f)
    shutil.copytree("/etc/zookeeper/conf_example", root / "etc/zookeeper/conf_example")
    for d in ("var/lib/zookeeper", "etc/sysctl.d", "etc/systemd/system", "root"):
        (root / d).mkdir(parents=True)
    return root


def test_the_guides_commands_run_in_a_scratch_root(tmp_path):
    if os.geteuid() != 0:
        missing("root", "useradd --prefix and chown need root: run 'make test' as root")
    require_binary("systemd-analyze", "systemd")
    if zookeeper_available() is not None or not os.path.isdir("/etc/zookeeper/conf_example"):
        missing("ZooKeeper (Debian's zookeeper package)", "apt-get install zookeeper")
    if subprocess.run(["getent", "passwd", "kbroker"], capture_output=True).returncode == 0:
        pytest.skip("this machine has a kbroker user already: the scratch root would copy it")
    blocks = shell_blocks(GUIDE.read_text())
    assert len(blocks) >= 10
    for b in blocks:  # syntax, before anything runs
        assert subprocess.run(["bash", "-n"], input=b, text=True).returncode == 0, b
    root = scratch_root(tmp_path)
    script = PRELUDE + "\n".join(f"# --- block {i}\n{b}" for i, b in enumerate(blocks))
    r = subprocess.run(
        ["bash", "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ROOT": str(root), "BROKER": BROKER, "PY": sys.executable},
    )
    assert r.returncode == 0, f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    calls = (root / ".calls").read_text().splitlines()
    # every command word of the guide went through a function above (nothing reached this machine)
    assert len(calls) >= sum(len([line for line in b.splitlines() if line.strip()]) for b in blocks) - 2
    # what the commands did, in the scratch root
    user = next(line for line in (root / "etc/passwd").read_text().splitlines() if line.startswith("kbroker:"))
    uid = int(user.split(":")[2])
    assert user.endswith(":/var/lib/kbroker:/usr/sbin/nologin") and uid < 1000  # a system user
    data = root / "var/lib/kbroker/data"
    assert data.stat().st_uid == uid and oct(data.stat().st_mode & 0o777) == "0o750"
    props = root / "etc/kbroker/server.properties"
    assert (
        props.read_text() == (DEPLOY / "server.properties").read_text() and oct(props.stat().st_mode & 0o777) == "0o640"
    )
    assert (root / "etc/systemd/system/kbroker.service").read_text() == (DEPLOY / "kbroker.service").read_text()
    assert (root / "etc/zookeeper/kbroker/log4j.properties").is_file()
    assert (root / "var/lib/zookeeper/myid").read_text() == "1\n"
    assert (root / "etc/sysctl.d/60-kbroker.conf").read_text() == (DEPLOY / "60-kbroker.conf").read_text()
    listed = subprocess.run(
        ["tar", "-tzf", root / "root/kbroker-config.tar.gz"], capture_output=True, text=True
    ).stdout.split()
    assert "etc/kbroker/server.properties" in listed and "etc/systemd/system/kbroker.service" in listed
    # doctor ran on the scratch data dir and said something about each check
    doctor = "".join(p.read_text() for p in root.glob(".doctor.*.out"))
    assert "vm.max_map_count" in doctor and f"{data}" in doctor


# ---------------------------------------------------------------------- the units' commands


def test_the_units_commands_run_as_systemd_would(tmp_path):
    if zookeeper_available() is not None:
        missing(zookeeper_available(), "apt-get install zookeeper default-jre-headless")
    port, zk_port = free_port(), free_port()
    conf = tmp_path / "zkconf"
    conf.mkdir()
    shutil.copy(
        "/usr/share/zookeeper/conf/log4j.properties"
        if os.path.exists("/usr/share/zookeeper/conf/log4j.properties")
        else "/etc/zookeeper/conf_example/log4j.properties",
        conf,
    )
    # zoo.cfg as shipped, made a single server on loopback with scratch dirs
    cfg = (DEPLOY / "zoo.cfg").read_text()
    cfg = re.sub(r"^server\.\d+=.*\n", "", cfg, flags=re.M).replace(
        "dataDir=/var/lib/zookeeper", f"dataDir={tmp_path / 'zkdata'}"
    )
    cfg = cfg.replace("clientPort=2181", f"clientPort={zk_port}\nclientPortAddress=127.0.0.1")
    (conf / "zoo.cfg").write_text(cfg)
    zk_cmd = [
        a.replace("/etc/zookeeper/kbroker", str(conf)).replace("/var/log/zookeeper", str(tmp_path))
        for a in exec_start("zookeeper.service")
    ]
    zk = subprocess.Popen(zk_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    broker = None
    try:
        deadline = time.monotonic() + 60
        while serving_mode(zk_port) != "standalone":
            assert zk.poll() is None and time.monotonic() < deadline, (tmp_path / "zookeeper.log").read_text()[-2000:]
            time.sleep(0.2)
        # server.properties as shipped, edited as the guide says (addresses, here loopback)
        props = (DEPLOY / "server.properties").read_text()
        props = props.replace("PLAINTEXT://0.0.0.0:9092", f"PLAINTEXT://127.0.0.1:{port}")
        props = props.replace("PLAINTEXT://kb1:9092", f"PLAINTEXT://127.0.0.1:{port}")
        props = props.replace("zk1:2181,zk2:2181,zk3:2181/kbroker", f"127.0.0.1:{zk_port}/kbroker")
        props = props.replace("/var/lib/kbroker/data", str(tmp_path / "data"))
        props = props.replace("offsets.topic.replication.factor=3", "offsets.topic.replication.factor=1")
        (tmp_path / "server.properties").write_text(props)
        cmd = exec_start("kbroker.service")
        cmd = [BROKER if a == "/opt/kbroker/venv/bin/broker" else a for a in cmd]
        cmd = [str(tmp_path / "server.properties") if a == "/etc/kbroker/server.properties" else a for a in cmd]
        log = open(tmp_path / "broker.log", "wb")
        broker = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        from broker.client import Cluster

        deadline = time.monotonic() + 60
        while True:
            try:
                with Cluster(f"127.0.0.1:{port}", timeout=5) as c:
                    if c.describe_cluster().controller_id == 1:
                        break
            except Exception:
                pass
            assert broker.poll() is None and time.monotonic() < deadline, (tmp_path / "broker.log").read_text()[-2000:]
            time.sleep(0.2)
        t0 = time.monotonic()
        broker.send_signal(signal.SIGTERM)  # KillSignal=SIGTERM
        timeout_stop = int(unit("kbroker.service")["TimeoutStopSec"][0])
        assert broker.wait(timeout_stop) == 0
        took = time.monotonic() - t0
        assert took < timeout_stop / 4, f"SIGTERM to exit took {took:.1f} s"
        text = (tmp_path / "broker.log").read_text()
        assert "broker 1 stopped cleanly" in text and (tmp_path / "data" / "meta.properties").is_file()
    finally:
        for p in (broker, zk):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)


# ---------------------------------------------------------------------- broker doctor


def _proc_tree(root: Path, values: dict[str, int]) -> Path:
    for name, value in values.items():
        f = root / "sys" / name.replace(".", "/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"{value}\n")
    return root


def test_doctor_on_this_machine_and_on_made_up_hosts(tmp_path):
    import resource

    from broker.cli import doctor

    def read(name: str) -> int:
        return int(Path("/proc/sys", *name.split(".")).read_text().split()[0])

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    below = (
        read("vm.max_map_count") < doctor.MAX_MAP_COUNT
        or read("fs.file-max") < doctor.FILE_MAX
        or (soft != resource.RLIM_INFINITY and soft < doctor.NOFILE)
    )
    r = subprocess.run([BROKER, "doctor", "--data-dir", tmp_path], capture_output=True, text=True, timeout=60)
    assert r.returncode == (1 if below else 0), r.stdout
    assert r.stdout.startswith(f"kbroker doctor: this host, data dir {tmp_path}")
    assert re.search(r"^\d+ ok, \d+ advice, \d+ limits? below advice", r.stdout, re.M)
    if below:
        assert "[limit] " in r.stdout and "    fix: " in r.stdout
    verbose = subprocess.run([BROKER, "doctor", "-v"], capture_output=True, text=True, timeout=60).stdout
    assert all(f"{name} = {read(name)}" in verbose for name in ("vm.max_map_count", "vm.swappiness", "vm.dirty_ratio"))

    good = {
        "vm.max_map_count": 262144,
        "fs.file-max": 2000000,
        "vm.swappiness": 1,
        "vm.dirty_background_ratio": 5,
        "vm.dirty_ratio": 60,
    }

    # made-up hosts: a /proc tree, and a "broker" (--pid 4242) whose limits it holds
    def host(name: str, sysctls: dict[str, int], nofile: int) -> Path:
        proc = _proc_tree(tmp_path / name, sysctls)
        (proc / "4242").mkdir()
        (proc / "4242" / "limits").write_text(
            "Limit                     Soft Limit           Hard Limit           Units     \n"
            f"Max open files            {nofile}               {nofile}               files     \n"
        )
        return proc

    def doctor_on(proc: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [BROKER, "doctor", "--proc", proc, "--pid", "4242"], capture_output=True, text=True, timeout=60
        )

    r = doctor_on(host("good", good, 100000))
    assert r.returncode == 0 and "[limit]" not in r.stdout and "[advice]" not in r.stdout, r.stdout
    r = doctor_on(host("bad", {**good, "vm.max_map_count": 65530, "vm.swappiness": 60}, 100000))
    assert r.returncode == 1 and r.stdout.count("[limit] ") == 1 and r.stdout.count("[advice] ") == 1, r.stdout
    assert "[limit] vm.max_map_count = 65530 (advice: >= 262144)" in r.stdout
    r = doctor_on(host("few-files", good, 1024))
    assert r.returncode == 1 and "[limit] open files limit (process 4242) = 1024 (advice: >= 100000)" in r.stdout
    r = subprocess.run([BROKER, "doctor", "--data-dir", tmp_path / "nowhere"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "does not exist" in r.stderr


def test_doctor_reports_a_data_dir_or_metadata_file_others_can_read(tmp_path):
    """Issue 34: `[unsafe]` and exit 1 for a data dir other local users may list or enter
    (when every dir above it lets them through) and for a metadata file (the SCRAM
    credentials and ACLs) with more than 0600; on a host whose limits are all good."""
    import tempfile

    good = {
        "vm.max_map_count": 262144,
        "fs.file-max": 2000000,
        "vm.swappiness": 1,
        "vm.dirty_background_ratio": 5,
        "vm.dirty_ratio": 60,
    }
    proc = _proc_tree(tmp_path / "proc", good)
    (proc / "4242").mkdir()
    (proc / "4242" / "limits").write_text("Max open files            100000               100000               files\n")
    open_dir = Path(tempfile.mkdtemp(prefix="kbroker-doctor-"))  # under /tmp: others may pass
    open_dir.chmod(0o711)
    try:

        def doctor(d: Path) -> subprocess.CompletedProcess:
            return subprocess.run(
                [BROKER, "doctor", "--proc", proc, "--pid", "4242", "--data-dir", d, "-v"],
                capture_output=True,
                text=True,
                timeout=60,
            )

        data = open_dir / "data"
        data.mkdir(mode=0o700)
        (data / "clicks-0").mkdir(mode=0o700)
        meta = data / "__kbroker_metadata.json"
        meta.write_text("{}\n")
        meta.chmod(0o600)
        r = doctor(data)
        assert r.returncode == 0 and "[unsafe]" not in r.stdout, r.stdout
        assert f"[ok] permissions of {data} = 0700" in r.stdout
        assert f"[ok] permissions of {meta} = 0600" in r.stdout
        # what umask 022 used to leave: everything readable
        data.chmod(0o755)
        (data / "clicks-0").chmod(0o755)
        (data / "clicks-0" / "00000000000000000000.log").write_bytes(b"")
        (data / "clicks-0" / "00000000000000000000.log").chmod(0o644)
        meta.chmod(0o644)
        r = doctor(data)
        assert r.returncode == 1 and r.stdout.count("[unsafe] ") == 2, r.stdout
        assert (
            f"[unsafe] permissions of {data} = 0755 (others can list and enter it, and read 3 files and dirs "
            f"in it) (advice: 0700, or 0750 to let a group read)"
        ) in r.stdout
        assert f"    fix: chmod -R o-rwx {data}" in r.stdout
        assert f"[unsafe] permissions of {meta} = 0644 (advice: 0600)" in r.stdout
        assert f"    fix: chmod 600 {meta}" in r.stdout
        assert re.search(r"^\d+ ok, \d+ advice, 0 limits below advice, 2 unsafe$", r.stdout, re.M), r.stdout
        # the fixes it prints are enough
        subprocess.run(["chmod", "-R", "o-rwx", str(data)], check=True)
        subprocess.run(["chmod", "600", str(meta)], check=True)
        assert doctor(data).returncode == 0
        # a dir others may only enter; one they cannot reach (a dir above it is closed)
        data.chmod(0o711)
        assert f"[unsafe] permissions of {data} = 0711 (others can enter it)" in doctor(data).stdout
        data.chmod(0o755)
        open_dir.chmod(0o700)
        r = doctor(data)
        assert r.returncode == 0, r.stdout
        assert f"[ok] permissions of {data} = 0755 (others cannot reach it: {open_dir} is closed to them)" in r.stdout
    finally:
        shutil.rmtree(open_dir, ignore_errors=True)
