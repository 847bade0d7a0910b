"""CopyJob.failed (tests/pipelines/helpers.py): the pipeline tests' reading of the copy
job's output. PySpark's streaming source runner prints a traceback when a stopped query
closes its socket; that one, and what is chained to it, is no failure. Anything else is."""

from tests.pipelines.helpers import CopyJob

RUNNER = (
    "/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/sql/streaming/"
    "python_streaming_source_runner.py"
)
#: the output of a run whose query stopped cleanly (2026-11-28): the runner's EOFError, then
#: the traceback chained to it, cut short as the runner was killed
STOPPED = [
    "batch 21: 4496 records in 0.80 s",
    "Traceback (most recent call last):",
    f'  File "{RUNNER}", line 265, in main',
    '  File ".../pyspark/serializers.py", line 604, in read_int',
    "EOFError",
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File ".../pyspark/worker_util.py", line 253, in get_sock_file_to_executor',
    "stopped in 0.0 s",
    "0 task(s) failed",
]


def job(lines, stop_at):
    j = CopyJob("b:1", "s", "t", "/tmp/cp")
    j.lines = [(float(i), line) for i, line in enumerate(lines)]
    j.stop_requested = stop_at
    return j


def test_the_runners_traceback_at_stop_and_its_chain_are_no_failure():
    assert job(STOPPED, stop_at=0.5).failed() == []


def test_the_same_before_stop_was_asked_for_is_a_failure():
    assert job(STOPPED, stop_at=None).failed() == ["Traceback (most recent call last):"] * 2
    assert len(job(STOPPED, stop_at=5.0).failed()) == 2  # asked after they were printed


def test_a_traceback_that_is_not_chained_to_the_runners_counts():
    other = [
        "Traceback (most recent call last):",
        '  File "examples/copy/run.py", line 9, in <module>',
        "ValueError: boom",
    ]
    assert job(STOPPED[:5] + other, stop_at=0.5).failed() == ["Traceback (most recent call last):"]
    assert job(other, stop_at=0.0).failed() == ["Traceback (most recent call last):"]


def test_failed_tasks_and_a_failed_query_count():
    assert job(["query failed: x"], stop_at=None).failed() == ["query failed: x"]
    assert job(["2 task(s) failed"], stop_at=None).failed() == ["2 task(s) failed"]
    assert job(["0 task(s) failed"], stop_at=None).failed() == []
