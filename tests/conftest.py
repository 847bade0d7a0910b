"""Settings shared by the whole test suite (keep this minimal and general)."""

import signal

from hypothesis import HealthCheck, settings

# No timing assertions anywhere: hypothesis' per-example deadline is one, so it is off.
# Speed is measured by the benchmarks, not by the tests.
settings.register_profile(
    "kbroker",
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("kbroker")

# A suite started in the background by a non-interactive shell (`make test &` in a script)
# inherits SIGINT ignored, and so would every process the tests start: a test sending
# Ctrl-C to a command it started would wait for nothing. Python's own handler again (the
# processes the tests start then get SIGINT's default disposition).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# `make test` runs the suite in two workers (pytest-xdist, `--dist loadfile`): most tests
# wait on brokers, ZooKeeper and JVMs rather than on the CPU. A file's tests stay on one
# worker (its module fixtures start once), and so do all of tests/spark and of
# tests/apache_kafka (the Spark session and the Kafka broker their files share would
# otherwise start in each worker). Tests that run side by side stay apart by
# construction: ports are reserved (tests/support/ports.py), distinct-host clusters and
# their iptables rules use a block of loopback addresses of their worker's own
# (tests/support/cluster.py, netfault.py), and temporary directories are per worker.
SHARED_SESSION_DIRS = ("spark", "apache_kafka")


def work_unit(nodeid: str) -> str:
    """What runs on one worker: the test's file, or its directory if tests/spark or
    tests/apache_kafka."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in SHARED_SESSION_DIRS:
        return "/".join(parts[:2])
    return path


try:
    from xdist.scheduler import LoadFileScheduling
except ImportError:  # without pytest-xdist the suite runs in one process
    pass
else:

    class _LoadWorkUnits(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    def pytest_xdist_make_scheduler(config, log):
        """`--dist loadfile`, with tests/spark and tests/apache_kafka one unit each (a hook
        of the scheduler, not xdist_group marks: pytest 9.2 drops the node id suffix
        those travel in, pytest-xdist issue 1386)."""
        if config.getvalue("dist") == "loadfile":
            return _LoadWorkUnits(config, log)
        return None
