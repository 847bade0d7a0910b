"""`make faults` (bench/faults/run.py), the long randomized run that docs/cluster.md and
bench/RESULTS.md quote, run here for one short schedule: the command works as documented,
reports its seed and a summary, leaves no iptables rule behind, and finds nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import netfault
from tests.support.deps import missing
from tests.support.zookeeper import available as zookeeper_available

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_make_faults_runs_a_schedule_and_reports_it(tmp_path):
    for what in (netfault.available(), zookeeper_available()):
        if what is not None:
            missing(what, "make faults needs root, iptables, ZooKeeper and java")
    out = tmp_path / "faults.json"
    args = f"--schedules 1 --duration 4 --seed 5 --disk-mib 64 --out {out}"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    r = subprocess.run(
        ["make", "-s", "faults", f"FAULTS_ARGS={args}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    print(r.stdout[-3000:], r.stderr[-2000:])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "base seed 5" in r.stdout and "[1/1] seed 5000 ok" in r.stdout
    summary = json.loads(out.read_text())["summary"]
    assert summary["schedules"] == 1 and summary["stuck"] == [] and summary["anomalies"] == 0, summary
    assert summary["acked"] > 0 and summary["faults"] >= 1, summary
    # the run's process is gone: any rule of a dead process with its tag was left behind
    left = [spec for spec in netfault._our_rules(dead_only=True) if "bench-faults" in " ".join(spec)]
    assert not left, f"iptables rules left behind: {left}"
