"""Every example under examples/ runs end to end as examples/README.md shows it, on small
data, against one broker (the broker of `make serve`, here on a free port), and its
output is checked: the click counts are the clicks' own counts, in the topic and in
Parquet; the copy holds every record upper-cased; the exactly-once counts pass the
example's own check (every closed window once and right, read_committed). (Against a
3-broker cluster on a Spark standalone cluster: test_docs.py.)"""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from tests.pipelines.conftest import require_spark
from tests.pipelines.helpers import ROOT, check_clickstream, compare_copy, read_topic, shell_commands, substitute

README = ROOT / "examples" / "README.md"
#: small data: 5 s of clicks at 200/s, 5 minutes of event time
SMALL = {
    "clickstream/run.py": "--duration 5 --rate 200 --speedup 60",
    "exactly_once/run.py": "--duration 6 --rate 200 --speedup 120",
}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_every_example_runs_as_its_readme_shows_against_one_broker(single_broker, tmp_path):
    require_spark()
    commands = shell_commands(README)
    examples = sorted(p.parent.name for p in (ROOT / "examples").glob("*/run.py"))
    assert examples == ["clickstream", "copy", "exactly_once"]
    for name in examples:  # every example is in the README
        assert any(f"examples/{name}/run.py" in c for c in commands), name
    bootstrap = single_broker.bootstrap
    ran = []
    for line in commands:
        if line.startswith("make serve"):
            continue  # single_broker is that broker, on another port
        cmd = substitute(line, {"127.0.0.1:9092": bootstrap})
        if "examples/" in cmd and "--bootstrap" not in cmd:
            cmd += f" --bootstrap {bootstrap}"
        for script, args in SMALL.items():
            if script in cmd:
                cmd += " " + args
        if "examples/clickstream/run.py" in cmd:
            cmd += f" --out {tmp_path / 'clickstream'}"
        if "examples/copy/run.py" in cmd:
            cmd += f" --checkpoint {tmp_path / 'copy'}"
        if "examples/exactly_once/run.py" in cmd:
            cmd += f" --checkpoint {tmp_path / 'exactly-once'}"
        t0 = time.monotonic()
        r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, capture_output=True, text=True, timeout=300)
        print(f"\n{time.monotonic() - t0:6.1f} s  {cmd}")
        assert r.returncode == 0, f"{cmd}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        ran.append((line, r.stdout))
    assert len(ran) == len(commands) - 1
    counts = check_clickstream(bootstrap, tmp_path / "clickstream")
    report = compare_copy(read_topic(bootstrap, "in"), read_topic(bootstrap, "out"))
    assert report["in"] == 1000 and report["duplicates"] == 0, report
    copied = next(out for line, out in ran if "examples/copy/run.py" in line)
    assert "batch 0: 1000 records" in copied and copied.splitlines()[-1] == "0 task(s) failed", copied
    counted = next(out for line, out in ran if "examples/exactly_once/run.py" in line)
    assert re.search(r"^checked: [1-9]\d* \(window, page\) rows, 0 written twice, 0 missing, 0 wrong", counted, re.M), (
        counted
    )
    consumed = next(out for line, out in ran if "consume --topic out" in line)
    assert consumed.splitlines() and all(v.startswith("RECORD ") for v in consumed.splitlines()), consumed
    print(f"\nclickstream: {counts} counts checked; copy: {report['out']} records")


def test_examples_import_the_installed_package_not_the_checkout():
    """A regular (non-editable) install must run them: nothing puts the checkout's root (an
    unbuilt source tree, without broker._native) on sys.path."""
    for script in sorted((ROOT / "examples").rglob("*.py")):
        assert "sys.path" not in script.read_text(), f"{script.relative_to(ROOT)} changes sys.path"
