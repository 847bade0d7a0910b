"""The broker's own logs, as `broker serve` sets them up from server.properties keys.

log.format=text|json           stderr (and log.file): text lines, or one JSON object a
                               line (timestamp, level, logger, message, exception,
                               stack, extra fields: the layout of broker.applog's
                               KafkaLogHandler)
log.file=PATH                  also written there, rotated by size (logging.handlers'
log.file.max.bytes=N           RotatingFileHandler: maxBytes, backupCount)
log.file.backup.count=N
log.state.change.file=PATH     Kafka's state-change.log: logger state.change.logger
                               (every leadership and ISR change the controller writes
                               and each broker applies, with the controller epoch),
                               there only, rotated as log.file; unset: in the main log
log.request.api=NAME           every request of that API and its answer at DEBUG on
                               logger broker.request (Kafka's kafka.request.logger)
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys

from broker.applog import record_fields
from broker.config import BrokerConfig

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
STATE_CHANGE_LOGGER = "state.change.logger"
REQUEST_LOGGER = "broker.request"


class JsonFormatter(logging.Formatter):
    """One JSON object a line: timestamp (UTC, ms), level, logger, message, exception and
    stack when present, then the record's extra fields (as str() when JSON has no type)."""

    def __init__(self) -> None:
        super().__init__()
        self._encoder = json.JSONEncoder(ensure_ascii=False, default=str)

    def format(self, record: logging.LogRecord) -> str:
        return self._encoder.encode(record_fields(record, self.formatException))


def formatter(config: BrokerConfig) -> logging.Formatter:
    return JsonFormatter() if config["log.format"] == "json" else logging.Formatter(TEXT_FORMAT)


def _rotating(path: str, config: BrokerConfig) -> logging.Handler:
    return logging.handlers.RotatingFileHandler(
        path, maxBytes=config["log.file.max.bytes"], backupCount=config["log.file.backup.count"], encoding="utf-8"
    )


def configure(config: BrokerConfig, level: int) -> None:
    """Sets up the root logger (stderr, and log.file), the state-change log and the
    request log. OSError naming the file that cannot be opened."""
    fmt = formatter(config)
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(fmt)
    root.addHandler(stderr)
    root.setLevel(level)
    if config["log.file"]:
        handler = _open(config["log.file"], config, "log.file")
        handler.setFormatter(fmt)
        root.addHandler(handler)
    state = logging.getLogger(STATE_CHANGE_LOGGER)
    if config["log.state.change.file"]:
        handler = _open(config["log.state.change.file"], config, "log.state.change.file")
        handler.setFormatter(fmt)
        state.addHandler(handler)
        state.propagate = False  # there only, as Kafka's log4j additivity=false
        state.setLevel(logging.INFO)
    if config["log.request.api"]:
        logging.getLogger(REQUEST_LOGGER).setLevel(logging.DEBUG)


def _open(path: str, config: BrokerConfig, key: str) -> logging.Handler:
    try:
        return _rotating(path, config)
    except OSError as exc:
        raise OSError(f"{key}: cannot open {path}: {exc.strerror or exc}") from None


def request_log_api(config: BrokerConfig) -> int:
    """The api key of log.request.api, -1 when unset."""
    name = config["log.request.api"]
    if not name:
        return -1
    if name.isdigit():
        return int(name)
    from broker.protocol.api import ApiKey

    for key in ApiKey:
        if "".join(w.capitalize() for w in key.name.split("_")).lower() == name.lower():
            return int(key)
    return -1
