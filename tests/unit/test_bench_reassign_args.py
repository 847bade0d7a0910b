"""bench/cluster/reassign.py's argument handling only (no cluster is started): --help, the
cases list, --set."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "cluster" / "reassign.py"


def load():
    spec = importlib.util.spec_from_file_location("bench_reassign", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_help_runs_and_names_the_options():
    r = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for option in ("--cases", "--trials", "--prefill-mb", "--probe-rate", "--json", "--set"):
        assert option in r.stdout


def test_cases_are_none_or_a_throttle_in_mb_per_s():
    m = load()
    args = m.parse_args([])
    assert args.case_list == [None, 5_000_000, 20_000_000] and args.trials == 3
    assert m.parse_args(["--cases", "off,0.5", "--set", "replica.fetch.max.bytes=4194304"]).case_list == [None, 500_000]
    assert m.parse_args(["--set", "a=b=c"]).broker_config == {"a": "b=c"}


@pytest.mark.parametrize(
    "argv", [["--cases", "none,-1"], ["--cases", "fast"], ["--cases", ","], ["--trials", "0"], ["--set", "novalue"]]
)
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        load().parse_args(argv)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err
