"""File modes of what a broker writes (issue 34, item 5), on real broker processes started
under umask 022, as a shell's default leaves it.

The metadata file of a broker alone holds every user's SCRAM salt and keys and the ACLs;
under umask 022 it was 0644, and so were the segments, in log dirs of 0755: any local user
could read them (a dictionary found a password in the file in half a second). Now the
log dirs the broker creates get log.dirs.mode (default 0700) and everything in them the
same without the execute bits (0600), the metadata file 0600 whatever log.dirs.mode and
the umask say, and `broker doctor` reports a data dir or metadata file others can read.

The log dirs are made in a dir of their own under /tmp that every user may pass through
(pytest's tmp_path is in a dir of 0700): as root, user nobody then tries to read them."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from broker.client import Cluster
from broker.protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest as S
from broker.security.scram import salted_password
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import missing, require_module

pytestmark = pytest.mark.interop

METADATA = "__kbroker_metadata.json"
BROKER = shutil.which("broker", path=os.path.dirname(sys.executable)) or shutil.which("broker")
NOBODY = 65534


@pytest.fixture
def open_tmp():
    """A dir under /tmp that every user may enter (0711), removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="kbroker-modes-"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def exercise(b: BrokerProcess, topic: str) -> None:
    """What makes a broker write each kind of file: a SCRAM user (the metadata file), a
    topic with records (segments, indexes, checkpoints, the producer snapshot at stop)."""
    with Cluster(b.bootstrap) as c:
        r = c.any_connection().request(
            S(
                deletions=[],
                upsertions=[
                    S.ScramCredentialUpsertion(
                        name="alice",
                        mechanism=1,
                        iterations=4096,
                        salt=b"s" * 16,
                        salted_password=salted_password("SCRAM-SHA-256", "alice-secret", b"s" * 16, 4096),
                    )
                ],
            )
        )
        assert r.results[0].error_code == 0
        c.create_topic(topic, 2, 1)
        c.topic(topic, wait_s=10)
    # idempotent: the producer's state is snapshotted at stop
    p = require_module("confluent_kafka").Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
    for i in range(100):
        p.produce(topic, f"v{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0


def modes(root: Path) -> dict[str, int]:
    """Every dir and file under root (root included, as '.'): its permission bits."""
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for p in root.rglob("*"):
        out[str(p.relative_to(root))] = stat.S_IMODE(p.lstat().st_mode)
    return out


def run_broker(tmp_path: Path, logs: Path, **config) -> BrokerProcess:
    b = BrokerProcess(tmp_path / "run", config={"log.dirs": str(logs), **config}, umask=0o022)
    return b


def test_under_umask_022_the_metadata_file_segments_and_dirs_are_the_brokers_alone(tmp_path, open_tmp):
    logs = open_tmp / "logs"
    with run_broker(tmp_path, logs) as b:
        exercise(b, "modes")
    found = modes(logs)
    kinds = {Path(p).name for p in found} | {Path(p).suffix for p in found}
    # every kind of file a broker writes is there to be checked
    assert {
        METADATA,
        ".log",
        ".index",
        ".timeindex",
        ".snapshot",
        "leader-epoch-checkpoint",
        "partition.metadata",
        "meta.properties",
        "recovery-point-offset-checkpoint",
        "replication-offset-checkpoint",
        ".lock",
    } <= kinds, sorted(kinds)
    wrong = {p: f"{m:04o}" for p, m in found.items() if m != (0o700 if (logs / p).is_dir() else 0o600)}
    assert wrong == {}, wrong
    # the broker's doctor agrees
    r = subprocess.run([BROKER, "doctor", "--data-dir", logs, "-v"], capture_output=True, text=True, timeout=60)
    assert f"[ok] permissions of {logs} = 0700" in r.stdout
    assert f"[ok] permissions of {logs / METADATA} = 0600" in r.stdout
    assert "[unsafe]" not in r.stdout


def test_a_metadata_file_others_may_read_is_tightened_at_start_and_doctor_reports_it(tmp_path, open_tmp):
    """An earlier release left the file 0644 in a dir of 0755: doctor says both are unsafe
    (exit 1); the next start makes the file 0600 before anything else."""
    logs = open_tmp / "logs"
    b = run_broker(tmp_path, logs)
    with b:
        exercise(b, "tighten")
    logs.chmod(0o755)
    (logs / METADATA).chmod(0o644)
    r = subprocess.run([BROKER, "doctor", "--data-dir", logs], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stdout
    assert f"[unsafe] permissions of {logs} = 0755 (others can list and enter it" in r.stdout
    assert f"[unsafe] permissions of {logs / METADATA} = 0644 (advice: 0600)" in r.stdout
    assert f"    fix: chmod 600 {logs / METADATA}" in r.stdout
    assert ", 2 unsafe" in r.stdout
    b.start()
    try:
        assert stat.S_IMODE((logs / METADATA).stat().st_mode) == 0o600
        assert "was mode 0644, readable by others" in b.log_path.read_text()
    finally:
        b.stop()
    assert stat.S_IMODE(logs.stat().st_mode) == 0o755  # the operator's dir is left as it is


def test_log_dirs_mode_opens_the_log_dirs_to_a_group_but_not_the_metadata_file(tmp_path, open_tmp):
    logs = open_tmp / "logs"
    with run_broker(tmp_path, logs, **{"log.dirs.mode": "0750"}) as b:
        exercise(b, "group")
    found = modes(logs)
    assert found.pop(METADATA) == 0o600
    wrong = {p: f"{m:04o}" for p, m in found.items() if m != (0o750 if (logs / p).is_dir() else 0o640)}
    assert wrong == {}, wrong


def test_a_bad_log_dirs_mode_is_refused_at_start(tmp_path):
    r = subprocess.run(
        [BROKER, "serve", "--data-dir", tmp_path / "d", "--set", "log.dirs.mode=0644"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr == (
        "broker: configuration error: log.dirs.mode: invalid value '0644': the broker's own "
        "user needs rwx (0700 at least)\n"
    )


def test_user_nobody_cannot_read_the_credentials_or_the_records(tmp_path, open_tmp):
    """The issue's reproduction: as `nobody`, read the metadata file and a segment."""
    if os.geteuid() != 0:
        missing("root", "reading as user nobody needs root to switch users: run 'make test' as root")
    logs = open_tmp / "logs"
    with run_broker(tmp_path, logs) as b:
        exercise(b, "nobody")
    segment = next(logs.glob("nobody-0/*.log"))
    for path in (logs / METADATA, segment):
        r = subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "cat", path],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode != 0 and "Permission denied" in r.stderr, (path, r.stdout[:200])
    # and it could have, had the files been left open (the check itself works)
    logs.chmod(0o755)
    (logs / METADATA).chmod(0o644)
    r = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "cat", logs / METADATA],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0 and "SCRAM-SHA-256" in r.stdout
