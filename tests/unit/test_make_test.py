"""`make test` as the README tells it: the suite in two pytest-xdist workers, or in one
(TEST_WORKERS=0), with PYTEST_ARGS passed on; and the groups tests/conftest.py gives the
tests (a file's tests on one worker; tests/spark and tests/apache_kafka whole)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

sys.path.insert(0, str(ROOT))
from tests.conftest import work_unit  # noqa: E402


def _make_n(*args: str) -> str:
    # the defaults, not what this run was given (`make test TEST_WORKERS=0` passes its
    # variables down through MAKEFLAGS)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TEST_WORKERS", "PYTEST_ARGS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    }
    r = subprocess.run(["make", "-n", "test", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_make_test_runs_two_workers_or_one_and_passes_pytest_args():
    text = " ".join(README.read_text().split())
    assert "`make test TEST_WORKERS=0`" in text and '`make test PYTEST_ARGS="tests/unit -x"`' in text
    assert ".venv/bin/python -m pytest -n 2 --dist loadfile \n" in _make_n() + "\n"
    assert ".venv/bin/python -m pytest -n 0 --dist loadfile \n" in _make_n("TEST_WORKERS=0") + "\n"
    assert ".venv/bin/python -m pytest -n 2 --dist loadfile tests/unit -x\n" in _make_n("PYTEST_ARGS=tests/unit -x")


def _workers(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    """Runs `files` (paths under tests/, beside this suite's own conftest.py) in two
    workers as `make test` does; which workers ran each file's tests."""
    (tmp_path / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    for rel, text in files.items():
        (tmp_path / "tests" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tests" / rel).write_text(text)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile", "tests"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    workers: dict[str, set[str]] = {}
    for m in re.finditer(r"\[(gw\d)\] .*?PASSED tests/(\S+?)::", r.stdout):
        workers.setdefault(m.group(2), set()).add(m.group(1))
    assert set(workers) == set(files), r.stdout[-3000:]
    return workers


# three tests a file, each a tenth of a second: both workers get work at once
_TESTS = "import time\n" + "".join(f"def test_{i}():\n    time.sleep(0.1)\n" for i in range(3))


def test_a_files_tests_share_a_worker(tmp_path):
    workers = _workers(tmp_path, {f"unit/test_{n}.py": _TESTS for n in "abcd"})
    assert all(len(w) == 1 for w in workers.values()), workers
    assert set().union(*workers.values()) == {"gw0", "gw1"}, workers


def test_spark_and_apache_kafka_files_share_a_worker_each(tmp_path):
    files = {f"{d}/test_{d}_{n}.py": _TESTS for d in ("spark", "apache_kafka") for n in "ab"}
    workers = _workers(tmp_path, files)
    for d in ("spark", "apache_kafka"):
        assert len(workers[f"{d}/test_{d}_a.py"] | workers[f"{d}/test_{d}_b.py"]) == 1, workers
    assert work_unit("tests/spark/test_write.py::test_x[a/b]") == "tests/spark"
    assert work_unit("tests/cluster/test_failover.py::test_y") == "tests/cluster/test_failover.py"
