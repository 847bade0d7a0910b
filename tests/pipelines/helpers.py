"""The pieces of the pipeline tests: the copy example (examples/copy/run.py) as a driver
process, a producer of numbered records, reading a topic back, and the checks."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from broker.client import Cluster, Consumer, Producer

ROOT = Path(__file__).resolve().parents[2]
COPY = ROOT / "examples" / "copy" / "run.py"
#: the line the examples print per micro-batch: "batch 7: 1523 records in 0.84 s",
#: "batch 7: 1523 views in, ..."
BATCH = re.compile(r"^batch (\d+): (\d+) ")
#: what Python prints between an exception and the one raised while handling it
_CHAINED = "During handling of the above exception"


class JobProcess:
    """A Spark driver (an example's run.py) in a process group of its own (python, its
    Spark JVM and, in local mode, its Python workers), its output lines timed: kill9()
    is the driver's kill -9; stop() is SIGTERM."""

    def __init__(self, cmd: list[str], env: dict | None = None, log_path=None):
        self.cmd = cmd
        self.env = dict(env or os.environ)
        self.lines: list[tuple[float, str]] = []  # (monotonic, line)
        self.batches: list[tuple[float, int, int]] = []  # (monotonic, batch id, records)
        self.proc: subprocess.Popen | None = None
        self.log_path = log_path
        self.stop_requested: float | None = None  # monotonic time of stop()

    def start(self):
        self.proc = subprocess.Popen(
            self.cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
            cwd=ROOT,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        log = open(self.log_path, "a") if self.log_path else None
        try:
            for line in self.proc.stdout:
                now = time.monotonic()
                line = line.rstrip("\n")
                self.lines.append((now, line))
                if log:
                    log.write(line + "\n")
                    log.flush()
                m = BATCH.match(line)
                if m:
                    self.batches.append((now, int(m.group(1)), int(m.group(2))))
        finally:
            if log:
                log.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self, last: int = 60) -> str:
        return "\n".join(line for _, line in self.lines[-last:])

    def failed(self) -> list[str]:
        """What says the query or one of its tasks failed.

        One traceback is not a failure: PySpark's streaming source runner (the Python
        process holding a stream reader for the driver) loops reading the next call until
        its socket ends, so when a stopped query closes that socket before killing the
        process, the runner prints EOFError, and the traceback chained to it ("During
        handling of the above exception ...": BrokenPipeError answering it, or its socket's
        close in worker_util, often cut short as the process is killed). Tracebacks from
        that runner after stop() was asked for, and those chained to them, are left out;
        any other one counts."""
        found = []
        skipping = False  # inside a left-out runner traceback and its chain
        for i, (t, line) in enumerate(self.lines):
            if "Traceback" in line:
                chained = any(_CHAINED in earlier for _, earlier in self.lines[max(0, i - 2) : i])
                if skipping and chained:
                    continue
                skipping = (
                    self.stop_requested is not None
                    and t >= self.stop_requested
                    and any("python_streaming_source_runner.py" in later for _, later in self.lines[i + 1 : i + 8])
                )
                if skipping:
                    continue
            if (
                "query failed" in line
                or "Traceback" in line
                or "failed so far" in line
                or (line.endswith("task(s) failed") and not line.startswith("0 "))
            ):
                found.append(line)
        return found

    def tasks_failed(self) -> int | None:
        """The count the job prints when it stops (None before)."""
        for _, line in self.lines:
            m = re.match(r"^(\d+) task\(s\) failed$", line)
            if m:
                return int(m.group(1))
        return None

    def wait_for_batches(self, n: int = 1, timeout: float = 180.0, records: bool = False) -> None:
        """Until n batches ran (with records, if asked); the job must stay up."""
        deadline = time.monotonic() + timeout
        while len([b for b in self.batches if b[2] or not records]) < n:
            assert self.alive, f"the copy job exited ({self.proc.returncode}):\n{self.output()}"
            assert time.monotonic() < deadline, f"no {n} batches within {timeout} s:\n{self.output()}"
            time.sleep(0.2)

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout: float = 120.0) -> int:
        """SIGTERM to the driver (the example stops its query cleanly); its exit code."""
        self.stop_requested = time.monotonic()
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"the copy job did not stop within {timeout} s:\n{self.output()}") from None

    def close(self) -> None:
        if self.alive:
            self.kill9()

    def wait_for_line(self, pattern: str, timeout: float = 300.0) -> re.Match:
        """The first output line matching `pattern` (a regex); the job must stay up."""
        deadline = time.monotonic() + timeout
        while True:
            for _, line in list(self.lines):
                m = re.search(pattern, line)
                if m:
                    return m
            assert self.alive, f"the job exited ({self.proc.returncode}):\n{self.output()}"
            assert time.monotonic() < deadline, f"no {pattern!r} within {timeout} s:\n{self.output()}"
            time.sleep(0.2)


class CopyJob(JobProcess):
    """examples/copy/run.py."""

    def __init__(
        self,
        bootstrap: str,
        source: str,
        sink: str,
        checkpoint,
        master: str = "local[2]",
        env: dict | None = None,
        extra: list[str] | None = None,
        log_path=None,
    ):
        super().__init__(
            [
                sys.executable,
                str(COPY),
                "--bootstrap",
                bootstrap,
                "--source",
                source,
                "--sink",
                sink,
                "--checkpoint",
                str(checkpoint),
                "--master",
                master,
                *(extra or []),
            ],
            env,
            log_path,
        )


def value(partition: int, seq: int) -> bytes:
    return b"p%d-%07d-record" % (partition, seq)


class NumberedProducer(threading.Thread):
    """Produces value(p, seq) for seq 0..per_partition-1 to every partition of `topic`, at
    about `rate` records/s in all, with the project's producer at its defaults (acks=all,
    Kafka's retries): it rides through the same faults as the pipeline."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, per_partition: int, rate: float, start_seq: int = 0
    ):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.per_partition, self.rate, self.start_seq = per_partition, rate, start_seq
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            t0 = time.monotonic()
            with Producer(self.bootstrap, linger_ms=20) as p:
                for seq in range(self.start_seq, self.start_seq + self.per_partition):
                    for part in range(self.partitions):
                        p.send(self.topic, value(part, seq), key=b"k%d" % seq, partition=part)
                        self.sent += 1
                    p.poll()
                    ahead = self.sent / self.rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
                p.flush()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def create_topic(bootstrap: str, topic: str, partitions: int, rf: int, configs: dict | None = None) -> None:
    with Cluster(bootstrap) as c:
        c.create_topic(topic, partitions, rf, configs)
        c.topic(topic, wait_s=20.0)


def read_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> dict[int, list[bytes]]:
    """Every record's value of every partition, in offset order (the project's consumer)."""
    with Cluster(bootstrap) as c:
        parts = sorted(c.topic(topic, wait_s=10.0).partitions)
        ends = {p: off for p, (off, _) in c.list_offsets(topic, parts, -1).items()}
    out: dict[int, list[bytes]] = {p: [] for p in parts}
    with Consumer(bootstrap, max_wait_ms=200) as consumer:
        consumer.assign(topic, parts, "earliest")
        deadline = time.monotonic() + timeout
        while any(consumer.positions[(topic, p)] < ends[p] for p in parts):
            assert time.monotonic() < deadline, f"{topic} not read within {timeout} s"
            for r in consumer.poll(0.5):
                out[r.partition].append(r.value)
    return out


def first_occurrences(values: list[bytes]) -> list[bytes]:
    seen, out = set(), []
    for v in values:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def compare_copy(source: dict[int, list[bytes]], sink: dict[int, list[bytes]]) -> dict:
    """The sink must hold every source record upper-cased, in the same partition, its
    first occurrences in the source's order. Returns figures (duplicates) to report."""
    report = {"in": 0, "in_distinct": 0, "out": 0, "out_distinct": 0, "duplicates": 0}
    for p, values in source.items():
        want = first_occurrences([v.upper() for v in values])
        got = sink.get(p, [])
        got_first = first_occurrences(got)
        missing = set(want) - set(got_first)
        assert not missing, f"partition {p}: {len(missing)} record(s) lost, e.g. {sorted(missing)[:5]}"
        stray = set(got_first) - set(want)
        assert not stray, f"partition {p}: records that are not in the source, e.g. {sorted(stray)[:5]}"
        assert got_first == want, f"partition {p}: the first occurrences are out of order"
        report["in"] += len(values)
        report["in_distinct"] += len(want)
        report["out"] += len(got)
        report["out_distinct"] += len(got_first)
    report["duplicates"] = report["out"] - report["out_distinct"]
    return report


# ---------------------------------------------------------------- commands shown in the docs


def fenced_blocks(markdown: Path, lang: str) -> list[list[str]]:
    """The lines of every ```lang block of a Markdown file, in order."""
    blocks, current, inside = [], [], None
    for line in markdown.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            if inside is None:
                inside = stripped[3:].strip()
                current = []
            else:
                if inside == lang:
                    blocks.append(current)
                inside = None
            continue
        if inside is not None:
            current.append(line)
    return blocks


def shell_commands(markdown: Path) -> list[str]:
    """Every command line of the ```sh blocks (a `  # comment` at the end removed)."""
    out = []
    for block in fenced_blocks(markdown, "sh"):
        for line in block:
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def substitute(line: str, mapping: dict[str, str]) -> str:
    """The line with each key of `mapping` replaced (longest keys first)."""
    for k in sorted(mapping, key=len, reverse=True):
        line = line.replace(k, mapping[k])
    return line


# ---------------------------------------------------------------- the examples' output


def minute_of(ms: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M")


def check_clickstream(bootstrap: str, out_dir: Path, clicks: str = "clicks", counts: str = "click-counts") -> int:
    """examples/clickstream's output against the clicks themselves: every count in the
    counts topic is the number of clicks on its page in its minute (read independently
    with the project's consumer), each (minute, page) once, and the Parquet output holds
    the same rows. Returns how many counts."""
    import json
    from collections import Counter

    import pyarrow.parquet as pq

    truth: Counter = Counter()
    for values in read_topic(bootstrap, clicks).values():
        for v in values:
            e = json.loads(v)
            truth[(minute_of(e["ms"]), e["page"])] += 1
    rows = [json.loads(v) for values in read_topic(bootstrap, counts).values() for v in values]
    keyed = [(r["minute"], r["page"]) for r in rows]
    assert len(rows) >= 8, f"only {len(rows)} counts (a closed minute has up to 8 pages)"
    assert len(set(keyed)) == len(keyed), "a (minute, page) counted twice"
    wrong = [(r, truth[(r["minute"], r["page"])]) for r in rows if r["count"] != truth[(r["minute"], r["page"])]]
    assert not wrong, f"counts that are not the clicks': {wrong[:5]}"
    runs = sorted(out_dir.glob("run-*/counts"))
    assert len(runs) == 1, runs
    table = pq.read_table(str(runs[0]))
    parquet = sorted(
        zip(table.column("minute").to_pylist(), table.column("page").to_pylist(), table.column("count").to_pylist())
    )
    assert parquet == sorted((r["minute"], r["page"], r["count"]) for r in rows)
    return len(rows)
