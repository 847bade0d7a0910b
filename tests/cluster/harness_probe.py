"""Run only by test_harness.py, in a pytest of its own (the name keeps it out of normal
collection): a test fails on purpose with a cluster up, one passes with another, and
each test checks that the brokers of the one before are gone already, so the fixture
killed them whatever the outcome; the outer test checks that the failure's report
carried the brokers' logs and that nothing is left once this pytest has exited."""

import os
from pathlib import Path


def _recorded() -> Path:
    out = os.environ.get("KBROKER_HARNESS_PROBE")
    assert out, "run by tests/cluster/test_harness.py only"
    return Path(out)


def _record(cluster, outcome: str) -> None:
    with _recorded().open("a") as f:
        f.write(" ".join([outcome, *(str(cluster.broker(i).pid) for i in cluster.ids)]) + "\n")


def _assert_previous_brokers_gone() -> None:
    lines = _recorded().read_text().splitlines() if _recorded().exists() else []
    assert lines, "the previous test recorded no brokers"
    left = [pid for pid in lines[-1].split()[1:] if Path(f"/proc/{pid}").exists()]
    assert not left, f"brokers of the previous test still running: {left}"


def test_fails_with_a_cluster_up(cluster3):
    _record(cluster3, "failed")
    raise AssertionError("failing on purpose: the harness must kill every broker and show their logs")


def test_passes_with_a_cluster_up(cluster3):
    _assert_previous_brokers_gone()
    _record(cluster3, "passed")
    assert cluster3.live_ids() == [1, 2, 3]


def test_nothing_left_by_the_previous_test():
    _assert_previous_brokers_gone()
