"""The broker's own log setup (broker/server/logsetup.py) and the observability keys'
validation: log.file rotates at log.file.max.bytes keeping log.file.backup.count files,
JSON lines carry exceptions and extra fields, and a bad value of any new key stops
`broker serve` with one line (exit 2)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from broker.config import BrokerConfig
from broker.server import logsetup


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    state = logging.getLogger(logsetup.STATE_CHANGE_LOGGER)
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
        if h not in handlers:
            h.close()
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)
    for h in list(state.handlers):
        state.removeHandler(h)
        h.close()
    state.propagate = True
    logging.getLogger(logsetup.REQUEST_LOGGER).setLevel(logging.NOTSET)


def test_log_file_rotates_and_json_lines_parse(tmp_path, restore_logging):
    path = tmp_path / "broker.log"
    state = tmp_path / "state-change.log"
    config = BrokerConfig(
        {
            "log.format": "json",
            "log.file": str(path),
            "log.file.max.bytes": "2000",
            "log.file.backup.count": "2",
            "log.state.change.file": str(state),
            "log.request.api": "Metadata",
        }
    )
    logsetup.configure(config, logging.INFO)
    log = logging.getLogger("broker.test")
    for i in range(200):
        log.info("line %d", i, extra={"partition": i % 3})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    logging.getLogger(logsetup.STATE_CHANGE_LOGGER).info("[Controller id=1 epoch=3] partition t-0: leader 1 -> 2")
    logging.getLogger(logsetup.REQUEST_LOGGER).debug("completed Metadata v12")
    logging.getLogger("broker.other").debug("not at info")
    for h in logging.getLogger().handlers:
        h.flush()
    files = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("broker.log"))
    assert files == ["broker.log", "broker.log.1", "broker.log.2"]  # rotated, two kept
    assert all((tmp_path / f).stat().st_size <= 2000 for f in files)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[-1]["message"] == "completed Metadata v12" and records[-1]["level"] == "DEBUG"
    failed = next(r for r in records if r["message"] == "failed")
    assert "ValueError: boom" in failed["exception"] and failed["level"] == "ERROR"
    assert all("partition" in r for r in records if r["message"].startswith("line "))
    assert not any(r["message"] == "not at info" for r in records)
    changes = [json.loads(line) for line in state.read_text().splitlines()]
    assert [r["message"] for r in changes] == ["[Controller id=1 epoch=3] partition t-0: leader 1 -> 2"]
    assert not any(r["logger"] == logsetup.STATE_CHANGE_LOGGER for r in records)  # its own file only


@pytest.mark.parametrize(
    "setting, words",
    [
        ("metrics.listener=localhost", "metrics.listener: invalid value 'localhost': 'localhost' is not HOST:PORT"),
        ("metrics.listener=127.0.0.1:99999", "is not HOST:PORT"),
        ("log.format=xml", "log.format: invalid value 'xml' (expected one of: text, json)"),
        ("log.file.max.bytes=-1", "log.file.max.bytes: invalid value '-1': must be at least 0"),
        ("log.file.backup.count=many", "log.file.backup.count: invalid value 'many' (expected int)"),
        ("log.request.api=Produse", "log.request.api: invalid value 'Produse': not a Kafka API name"),
    ],
)
def test_bad_observability_settings_stop_serve_with_one_line(tmp_path, setting, words):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli.main",
            "serve",
            "--data-dir",
            str(tmp_path),
            "--listen",
            "127.0.0.1:0",
            "--set",
            setting,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert words in r.stderr


def test_an_unwritable_log_file_is_one_line(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli.main",
            "serve",
            "--data-dir",
            str(tmp_path),
            "--listen",
            "127.0.0.1:0",
            "--set",
            f"log.file={tmp_path}/no/such/dir/broker.log",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"broker: configuration error: log.file: cannot open {tmp_path}/no/such/dir/broker.log: "
        "No such file or directory"
    ]
