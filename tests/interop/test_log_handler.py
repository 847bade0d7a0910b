"""broker.applog.KafkaLogHandler and `broker logs tail` against a real kbroker process:
100 K lines from an application configured with dictConfig all delivered, in order per
key, at interpreter exit; with the broker down the queue keeps the newest records and
counts the rest, and the loss is reported into the topic and on stderr once the broker
is back; a chunk in flight when the broker is killed is sent again; no recursion from
the sender thread; a forked child sends its own records; the tail command prints what
was logged. The same application against Apache Kafka: tests/apache_kafka/test_log_handler.py."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from broker.applog import KafkaLogHandler
from broker.client import Cluster
from tests.support.broker_proc import BrokerProcess
from tests.support.log_app import check_delivered, read_topic

pytestmark = pytest.mark.interop

REPO = Path(__file__).resolve().parents[2]


def broker_cmd() -> list[str]:
    return [sys.executable, "-m", "broker.cli.main"]


def create(bootstrap: str, topic: str, partitions: int) -> None:
    with Cluster(bootstrap) as c:
        c.create_topic(topic, partitions, 1)


def logger_with(handler: logging.Handler, name: str) -> logging.Logger:
    lg = logging.getLogger(name)
    lg.handlers[:] = [handler]
    lg.propagate = False
    lg.setLevel(logging.INFO)
    return lg


def values(records) -> list[dict]:
    return [json.loads(r.value) for r in sorted(records, key=lambda r: (r.partition, r.offset))]


def test_100k_lines_through_dictconfig_all_delivered_in_order_per_key(broker, topic_name):
    n = 100_000
    create(broker.bootstrap, topic_name, 3)
    app = subprocess.Popen(
        [sys.executable, "-m", "tests.support.log_app", broker.bootstrap, topic_name, str(n)],
        cwd=REPO,
        stderr=subprocess.PIPE,
    )
    _, err = app.communicate(timeout=240)
    assert app.returncode == 0, err.decode()
    assert b"broker.applog" not in err  # nothing dropped, nothing undelivered
    check_delivered(read_topic(broker.bootstrap, topic_name, n), n, app.pid)


def test_broker_down_the_newest_records_wait_and_the_loss_is_reported(tmp_path, capfd):
    topic = "down"
    with BrokerProcess(tmp_path / "data") as b:
        create(b.bootstrap, topic, 1)
        b.stop()
        h = KafkaLogHandler(b.bootstrap, topic, layout="json", queue_size=1000, close_timeout=60)
        lg = logger_with(h, "app.down")
        try:
            for i in range(20_000):
                lg.info("line %d", i, extra={"seq": i})
                assert h.queued <= 1000
            # nothing could be sent: the queue holds the newest 1000, the rest is counted
            assert (h.queued, h.dropped, h.sent) == (1000, 19_000, 0)
            assert "cannot deliver to topic down" in capfd.readouterr().err
            b.start()
            h.flush()
            assert (h.queued, h.dropped, h.sent) == (0, 19_000, 1000)
        finally:
            h.close()
        records = read_topic(b.bootstrap, topic, 1001)
    got = values(records)
    assert len(got) == 1001
    report = got[0]  # ahead of the records that survived
    assert (report["level"], report["logger"], report["dropped"]) == ("WARNING", "broker.applog", 19_000)
    assert report["message"].startswith("19000 log record(s) dropped")
    assert [d["seq"] for d in got[1:]] == list(range(19_000, 20_000))
    err = capfd.readouterr().err
    assert "broker.applog: 19000 log record(s) dropped" in err
    assert re.search(r"delivering to topic down again after \d+\.\d s", err), err


def test_a_topic_that_does_not_exist_yet_is_waited_for(tmp_path, capfd):
    with BrokerProcess(tmp_path / "data", config={"auto.create.topics.enable": "false"}) as b:
        h = KafkaLogHandler(b.bootstrap, "later", close_timeout=30)
        h.setFormatter(logging.Formatter("%(message)s"))
        lg = logger_with(h, "app.later")
        try:
            for i in range(5):
                lg.info("line %d", i)
            deadline = time.monotonic() + 30
            err = ""
            while "UNKNOWN_TOPIC_OR_PARTITION" not in err and time.monotonic() < deadline:
                time.sleep(0.1)
                err += capfd.readouterr().err
            assert "cannot deliver to topic later" in err and "UNKNOWN_TOPIC_OR_PARTITION" in err, err
            assert (h.queued, h.sent) == (5, 0)
            create(b.bootstrap, "later", 1)
            h.flush()
            assert (h.sent, h.dropped) == (5, 0)
        finally:
            h.close()
        assert [r.value for r in read_topic(b.bootstrap, "later", 5)] == [f"line {i}".encode() for i in range(5)]


def test_a_chunk_in_flight_when_the_broker_is_killed_is_sent_again(tmp_path):
    topic = "killed"
    n = 30_000
    with BrokerProcess(tmp_path / "data") as b:
        create(b.bootstrap, topic, 2)
        h = KafkaLogHandler(b.bootstrap, topic, layout="json", queue_size=n, close_timeout=60)
        lg = logger_with(h, "app.killed")
        try:
            for i in range(n):
                lg.info("line %d", i, extra={"seq": i})
            deadline = time.monotonic() + 60
            while h.sent < 1000 and time.monotonic() < deadline:
                time.sleep(0.001)
            b.kill()
            assert h.sent < n, "all delivered before the kill: nothing tested"
            time.sleep(0.5)
            b.start()
            h.flush()
            assert (h.sent, h.dropped) == (n, 0)
        finally:
            h.close()
        records = read_topic(b.bootstrap, topic, n, timeout=30)
    seqs = [d["seq"] for d in values(records)]
    # at least once: every record is there, and the first time each appears is in order
    # (all share one key, so one partition); a chunk sent again may repeat some
    first = list(dict.fromkeys(seqs))
    assert first == list(range(n))
    assert len(seqs) >= n


def test_a_record_too_large_is_dropped_counted_and_reported(broker, topic_name, capfd):
    create(broker.bootstrap, topic_name, 1)
    h = KafkaLogHandler(broker.bootstrap, topic_name, layout="json", max_record_bytes=1000, close_timeout=30)
    lg = logger_with(h, "app.big")
    try:
        lg.info("small")
        lg.info("big %s", "x" * 2000)
        lg.info("small again")
        h.flush()
        assert (h.sent, h.dropped) == (2, 1)
    finally:
        h.close()  # the loss is reported before the handler stops
    got = values(read_topic(broker.bootstrap, topic_name, 3))
    assert [d["message"] for d in got[:2]] == ["small", "small again"]
    assert (got[2]["logger"], got[2]["dropped"]) == ("broker.applog", 1)
    assert got[2]["message"] == (
        "1 log record(s) dropped: refused by the broker, larger than max_record_bytes or failing to format"
    )
    assert "larger than max_record_bytes=1000: dropped" in capfd.readouterr().err


def test_records_logged_by_the_sender_thread_are_ignored(broker, topic_name):
    create(broker.bootstrap, topic_name, 1)
    nested: list[logging.LogRecord] = []

    class Chatty(logging.Formatter):
        """Logs while formatting, which the sender thread does: without the guard every
        record would queue another, forever."""

        def format(self, record):
            logging.getLogger("app.chatty.fmt").warning("formatting %s", record.getMessage())
            return super().format(record)

    class Keep(logging.Handler):
        def emit(self, record):
            nested.append(record)

    h = KafkaLogHandler(broker.bootstrap, topic_name, close_timeout=30)
    h.setFormatter(Chatty("%(message)s"))
    lg = logger_with(h, "app.chatty")
    lg.addHandler(Keep())
    try:
        for i in range(100):
            lg.info("line %d", i)
        h.flush()
        assert (h.sent, h.queued, h.dropped) == (100, 0, 0)
    finally:
        h.close()
    got = [r.value for r in read_topic(broker.bootstrap, topic_name, 100)]
    assert got == [f"line {i}".encode() for i in range(100)]
    # the nested records were logged (and reached the other handler), not sent
    assert sum(r.getMessage().startswith("formatting") for r in nested) == 100


def test_a_forked_child_sends_its_own_records(broker, topic_name):
    create(broker.bootstrap, topic_name, 1)
    code = textwrap.dedent(f"""
        import logging, os
        from broker.applog import KafkaLogHandler
        h = KafkaLogHandler("{broker.bootstrap}", "{topic_name}", layout="json", close_timeout=60)
        lg = logging.getLogger("app.fork")
        lg.addHandler(h)
        lg.setLevel(logging.INFO)
        lg.info("parent before fork")
        h.flush()
        pid = os.fork()
        if pid == 0:
            for i in range(10):
                lg.info("child %d", i)
            logging.shutdown()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        lg.info("parent after fork")
        print(pid, status)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr.decode()
    child, status = map(int, r.stdout.split())
    assert status == 0
    records = sorted(read_topic(broker.bootstrap, topic_name, 12), key=lambda r: r.offset)
    got = [(json.loads(r.value)["message"], int(dict(r.headers)["process"])) for r in records]
    parent = got[0][1]
    assert sorted(got) == sorted(
        [("parent before fork", parent), ("parent after fork", parent)] + [(f"child {i}", child) for i in range(10)]
    )
    assert [m for m, pid in got if pid == child] == [f"child {i}" for i in range(10)]


def log_sample(bootstrap: str, topic: str) -> None:
    """Two JSON records (one with an exception) and one text record."""
    h = KafkaLogHandler(bootstrap, topic, layout="json", close_timeout=30)
    lg = logger_with(h, "shop.orders")
    try:
        lg.info("order %s placed", "o-1", extra={"order_id": "o-1", "amount": 12.5})
        try:
            raise ZeroDivisionError("division by zero")
        except ZeroDivisionError:
            lg.exception("order %s failed", "o-2")
        h.flush()
    finally:
        h.close()
    t = KafkaLogHandler(bootstrap, topic, close_timeout=30)
    t.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    lg = logger_with(t, "shop.text")
    try:
        lg.warning("plain text line")
        t.flush()
    finally:
        t.close()


def test_logs_tail_prints_what_was_logged(broker, topic_name):
    create(broker.bootstrap, topic_name, 1)
    log_sample(broker.bootstrap, topic_name)
    r = subprocess.run(
        broker_cmd()
        + [
            "logs",
            "tail",
            "--bootstrap-server",
            broker.bootstrap,
            "--topic",
            topic_name,
            "--from-beginning",
            "--no-follow",
        ],
        capture_output=True,
        timeout=60,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stdout.decode().splitlines()
    ts = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    assert re.fullmatch(ts + r" INFO shop\.orders: order o-1 placed  order_id=o-1 amount=12\.5", lines[0]), lines
    assert re.fullmatch(ts + r" ERROR shop\.orders: order o-2 failed", lines[1]), lines
    assert lines[2] == "Traceback (most recent call last):"
    assert lines[-2] == "ZeroDivisionError: division by zero"
    assert lines[-1] == "WARNING shop.text: plain text line"

    raw = subprocess.run(
        broker_cmd()
        + ["logs", "tail", "-b", broker.bootstrap, "-t", topic_name, "--from-beginning", "--no-follow", "--raw"],
        capture_output=True,
        timeout=60,
        cwd=REPO,
    )
    assert raw.returncode == 0, raw.stderr.decode()
    out = raw.stdout.decode().splitlines()
    first, second = json.loads(out[0]), json.loads(out[1])  # JSON lines parse as they are
    assert (first["message"], first["order_id"], first["amount"]) == ("order o-1 placed", "o-1", 12.5)
    assert "ZeroDivisionError" in second["exception"]
    assert out[-1] == "WARNING shop.text: plain text line"


def test_logs_tail_follows_new_records(broker, topic_name):
    create(broker.bootstrap, topic_name, 2)
    tail = subprocess.Popen(
        broker_cmd() + ["logs", "tail", "-b", broker.bootstrap, "-t", topic_name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    h = KafkaLogHandler(broker.bootstrap, topic_name, close_timeout=30)
    h.setFormatter(logging.Formatter("%(message)s"))
    lg = logger_with(h, "app.follow")
    try:
        os.set_blocking(tail.stdout.fileno(), False)
        seen = b""
        deadline = time.monotonic() + 60
        i = 0
        # it starts at the end of the topic: log until it shows that it is following
        while b"ping" not in seen and time.monotonic() < deadline:
            lg.info("ping %d", i)
            i += 1
            time.sleep(0.2)
            seen += tail.stdout.read() or b""
        assert b"ping" in seen, tail.stderr.read()
        lg.info("the line to see")
        while b"the line to see\n" not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
            seen += tail.stdout.read() or b""
        assert b"the line to see\n" in seen
    finally:
        h.close()
        tail.terminate()
        code = tail.wait(30)
    assert code == 143  # SIGTERM taken as Ctrl-C, as every client command does


DOC = REPO / "docs" / "logging.md"


def doc_blocks(lang: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    return [m.group(1) for m in re.finditer(rf"^```{lang}[ \t]*\n(.*?)^```[ \t]*$", text, re.S | re.M)]


def test_docs_examples_run_as_written(broker):
    """docs/logging.md: the dictConfig example runs as written (the broker's address put in
    for 127.0.0.1:9092) in an interpreter of its own, and delivers at exit; the tail
    command shown prints the output shown; the JSON shown is what the handler sent."""
    [example] = doc_blocks("python")
    [command] = doc_blocks("sh")
    [shown_json] = doc_blocks("json")
    [shown_output] = doc_blocks("text")
    assert "127.0.0.1:9092" in example and "127.0.0.1:9092" in command
    app = subprocess.run(
        [sys.executable, "-c", example.replace("127.0.0.1:9092", broker.bootstrap)],
        capture_output=True,
        timeout=120,
        cwd=REPO,
    )
    assert app.returncode == 0, app.stderr.decode()
    assert b"INFO shop.orders: order o-1 placed" in app.stderr  # the console handler beside it

    args = command.split()
    assert args[:3] == ["broker", "logs", "tail"]
    args = [a.replace("127.0.0.1:9092", broker.bootstrap) for a in args[1:]]
    tail = subprocess.Popen(broker_cmd() + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    try:
        os.set_blocking(tail.stdout.fileno(), False)
        seen = b""
        deadline = time.monotonic() + 60
        while b"ZeroDivisionError: division by zero\n" not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
            seen += tail.stdout.read() or b""
    finally:
        tail.terminate()
        tail.wait(30)
    got = seen.decode().splitlines()
    want = shown_output.splitlines()
    ts = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
    assert [ts.sub("T", line) for line in got[:3]] == [ts.sub("T", line) for line in want[:3]]
    assert want[3] == "  ..." and got[3:-1] and all(line.startswith("  ") for line in got[3:-1])  # the frames
    assert got[-1] == want[-1]

    records = read_topic(broker.bootstrap, "app-logs", 2)
    assert len({r.partition for r in records}) == 1  # one key: one partition, in order
    first = min(records, key=lambda r: r.offset)
    sent, shown = json.loads(first.value), json.loads(shown_json)
    assert list(sent) == list(shown)
    assert {k: v for k, v in sent.items() if k != "timestamp"} == {k: v for k, v in shown.items() if k != "timestamp"}
