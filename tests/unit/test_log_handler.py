"""broker.applog.KafkaLogHandler without a broker: configuration through dictConfig, the
text and JSON layouts, keys and headers, the loggers it ignores, and what it does while
no broker answers (a free loopback port nobody listens on): a bounded queue keeping the
newest records, the drops counted, close() returning and saying what was not delivered.
Delivery to real brokers: tests/interop/test_log_handler.py and
tests/apache_kafka/test_log_handler.py."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
import textwrap

import pytest

from broker.applog import DEFAULT_TEXT_FORMAT, KafkaLogHandler
from tests.support.ports import free_port


def dead_bootstrap() -> str:
    return f"127.0.0.1:{free_port()}"  # nothing listens there: connections are refused


@pytest.fixture
def handlers():
    made: list[KafkaLogHandler] = []

    def make(**kw) -> KafkaLogHandler:
        kw.setdefault("close_timeout", 0.2)
        h = KafkaLogHandler(kw.pop("bootstrap_servers", dead_bootstrap()), kw.pop("topic", "logs"), **kw)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def logger_with(handler: logging.Handler, name: str = "app") -> logging.Logger:
    lg = logging.getLogger(f"{name}")
    lg.handlers[:] = [handler]
    lg.propagate = False
    lg.setLevel(logging.DEBUG)
    return lg


def record(
    msg: str = "hello %s",
    args: tuple = ("world",),
    name: str = "app.db",
    level: int = logging.INFO,
    extra: dict | None = None,
    exc_info=None,
) -> logging.LogRecord:
    lg = logging.getLogger(name)
    return lg.makeRecord(name, level, __file__, 42, msg, args, exc_info, extra=extra)


def run_python(code: str) -> subprocess.CompletedProcess:
    """dictConfig in a process of its own: in this one it would close every handler
    (pytest's too)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)


def test_dictconfig_builds_it_with_its_options_and_formatter():
    bootstrap = dead_bootstrap()
    r = run_python(f"""
        import json, logging, logging.config
        logging.config.dictConfig({{
            "version": 1,
            "formatters": {{"short": {{"format": "%(levelname)s %(name)s %(message)s"}}}},
            "handlers": {{"kafka": {{"class": "broker.applog.KafkaLogHandler", "level": "INFO",
                                    "formatter": "short", "bootstrap_servers": "{bootstrap}",
                                    "topic": "app-logs", "key": "level", "queue_size": 500, "acks": "all",
                                    "compression": "lz4", "headers": {{"app": "billing"}},
                                    "close_timeout": 0.2}}}},
            "root": {{"handlers": ["kafka"], "level": "DEBUG"}},
        }})
        h = logging.getLogger().handlers[0]
        rec = logging.getLogger("dc.pay").makeRecord("dc.pay", logging.WARNING, "f", 1, "paid %d", (3,), None)
        key, value, headers, _ = h.encode(rec)
        print(json.dumps([type(h).__name__, h.bootstrap_servers, h.topic, h.queue_size, h.acks, h.compression,
                          h.level, key.decode(), value.decode(), [[k, v.decode()] for k, v in headers]]))
    """)
    assert r.returncode == 0, r.stderr
    name, boot, topic, queue_size, acks, compression, level, key, value, headers = json.loads(r.stdout)
    assert (name, boot, topic, queue_size, acks, compression, level) == (
        "KafkaLogHandler",
        bootstrap,
        "app-logs",
        500,
        -1,
        "lz4",
        logging.INFO,
    )
    assert (key, value) == ("WARNING", "WARNING dc.pay paid 3")
    assert ["app", "billing"] in headers


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"layout": "xml"}, "layout"),
        ({"acks": 2}, "acks"),
        ({"bootstrap_servers": "localhost"}, "HOST:PORT"),
        ({"bootstrap_servers": ""}, "bootstrap"),
        ({"compression": "brotli"}, "compression"),
        ({"queue_size": 0}, "queue_size"),
        ({"topic": ""}, "topic"),
    ],
)
def test_bad_options_fail_when_configured(kw, words):
    args = {"bootstrap_servers": "127.0.0.1:9092", "topic": "t", **kw}
    with pytest.raises(ValueError, match=words):
        KafkaLogHandler(args.pop("bootstrap_servers"), args.pop("topic"), **args)


def test_dictconfig_names_the_handler_with_a_bad_option():
    r = run_python("""
        import logging.config
        logging.config.dictConfig({"version": 1, "handlers": {"kafka": {
            "class": "broker.applog.KafkaLogHandler", "bootstrap_servers": "127.0.0.1:9092", "topic": "t",
            "layout": "xml"}}})
    """)
    assert r.returncode == 1
    assert "ValueError: Unable to configure handler 'kafka'" in r.stderr and "layout must be" in r.stderr


def test_text_layout_is_the_formatters_line(handlers):
    h = handlers()
    key, value, headers, ts = h.encode(record())
    assert h.formatter is not None and h.formatter._fmt == DEFAULT_TEXT_FORMAT
    assert re.fullmatch(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO app\.db: hello world", value), value
    assert key == b"app.db"
    assert headers == [("host", socket.gethostname().encode()), ("process", str(os.getpid()).encode())]
    h.setFormatter(logging.Formatter("%(message)s"))
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        rec = record("failed", (), exc_info=sys.exc_info())
    value = h.encode(rec)[1].decode()
    assert value.startswith("failed\nTraceback (most recent call last):") and "RuntimeError: boom" in value


def test_json_layout_has_the_fields_extras_and_exception(handlers):
    h = handlers(layout="json")
    try:
        raise KeyError("missing")
    except KeyError:
        rec = record(
            "order %s failed",
            ("o-7",),
            extra={"order_id": "o-7", "amount": 12.5, "obj": object()},
            exc_info=sys.exc_info(),
            level=logging.ERROR,
        )
    key, value, headers, ts = h.encode(rec)
    d = json.loads(value)
    assert d["message"] == "order o-7 failed"
    assert (d["level"], d["logger"], d["order_id"], d["amount"]) == ("ERROR", "app.db", "o-7", 12.5)
    assert d["obj"].startswith("<object object at")  # what JSON cannot hold, as str()
    assert "KeyError: 'missing'" in d["exception"] and d["exception"].startswith("Traceback")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", d["timestamp"]), d["timestamp"]
    assert ts == int(rec.created * 1000)
    # none of LogRecord's own attributes leak in as extras
    assert set(d) == {"timestamp", "level", "logger", "message", "exception", "order_id", "amount", "obj"}


@pytest.mark.parametrize(
    "key, extra, expected",
    [
        ("logger", None, b"app.db"),
        ("level", None, b"INFO"),
        ("user", {"user": "u-1"}, b"u-1"),
        ("user", None, None),  # a record without the field has no key
        (None, {"user": "u-1"}, None),
        ("funcName", None, None),  # a LogRecord attribute (None: record() made no call site)
    ],
)
def test_record_key(handlers, key, extra, expected):
    assert handlers(key=key).encode(record(extra=extra))[0] == expected


def test_static_headers_follow_host_and_process(handlers):
    h = handlers(headers={"app": "billing", "env": "test"})
    assert [k for k, _ in h.encode(record())[2]] == ["host", "process", "app", "env"]


def test_client_loggers_and_excluded_ones_are_ignored(handlers):
    h = handlers(exclude_loggers=["noisy"])
    for name in (
        "broker.client.sender",
        "broker.client",
        "broker.protocol.codec",
        "broker.applog",
        "noisy",
        "noisy.sub",
    ):
        h.handle(record(name=name))
    assert h.queued == 0
    for name in ("noisyfoo", "broker.clients", "broker.server", "app"):
        h.handle(record(name=name))
    assert h.queued == 4


def test_broker_unreachable_keeps_the_newest_records_and_counts_the_rest(handlers, capfd):
    h = handlers(queue_size=100)
    lg = logger_with(h)
    sizes = set()
    for i in range(10000):
        lg.info("line %d", i)
        sizes.add(h.queued)
    # the queue never held more than queue_size; every record is queued or counted
    assert max(sizes) == 100
    assert (h.queued, h.dropped, h.sent) == (100, 9900, 0)
    assert [r.getMessage() for r in h._queue] == [f"line {i}" for i in range(9900, 10000)]
    h.close()
    err = capfd.readouterr().err
    assert f"cannot deliver to topic logs at {h.bootstrap_servers}" in err
    assert "100 log record(s) not delivered to topic logs" in err
    # after close() records are ignored
    lg.info("late")
    assert h.queued == 100 and h.dropped == 9900


def test_flush_and_close_are_bounded_with_the_broker_down(handlers):
    h = handlers(close_timeout=0.3)
    logger_with(h).info("x")
    h.flush()  # returns (after close_timeout) though nothing could be sent
    assert (h.queued, h.sent) == (1, 0)
    h.close()
    assert not h._thread.is_alive()


def test_tail_renders_json_records_as_lines_and_text_as_is():
    from broker.cli.logs import render

    d = {
        "timestamp": "2026-11-22T10:15:42.123Z",
        "level": "ERROR",
        "logger": "shop",
        "message": "failed",
        "exception": "Traceback (most recent call last):\nKeyError: 'x'\n",
        "user": "u 1",
        "n": 3,
        "ok": True,
    }
    assert render(json.dumps(d).encode()) == (
        '2026-11-22T10:15:42.123Z ERROR shop: failed  user="u 1" n=3 ok=true\n'
        "Traceback (most recent call last):\nKeyError: 'x'"
    )
    assert render(json.dumps(d).encode(), raw=True) == json.dumps(d)
    assert render(b"2026-11-22 10:15:42,123 INFO app: plain") == "2026-11-22 10:15:42,123 INFO app: plain"
    assert render(b'{"no": "message field"}') == '{"no": "message field"}'
    assert render(b"{not json") == "{not json"
    assert render(None) == "null"


def test_default_text_line_is_what_logging_formatter_writes(handlers):
    """The default formatter formats each second's time once: the lines stay logging's own."""
    h = handlers()
    plain = logging.Formatter(DEFAULT_TEXT_FORMAT)
    for created in (1795730778.001, 1795730778.999, 1795730779.5, 1795730778.25, 1795730900.0):
        rec = record()
        rec.created, rec.msecs = created, (created - int(created)) * 1000
        assert h.encode(rec)[1].decode() == plain.format(rec)


def test_the_former_module_name_still_works_and_says_so():
    import importlib
    import sys

    sys.modules.pop("broker.logging", None)
    with pytest.warns(DeprecationWarning, match="broker.applog"):
        old = importlib.import_module("broker.logging")
    from broker.applog import KafkaLogHandler

    assert old.KafkaLogHandler is KafkaLogHandler
