"""The former name of broker.applog (KafkaLogHandler: Python's logging into a Kafka
topic), kept so that configurations naming ``broker.logging.KafkaLogHandler`` go on
working. It is named like the standard library's module; use ``broker.applog``."""

from __future__ import annotations

import warnings

from broker.applog import DEFAULT_TEXT_FORMAT, EXCLUDED_LOGGERS, KafkaLogHandler

__all__ = ["DEFAULT_TEXT_FORMAT", "EXCLUDED_LOGGERS", "KafkaLogHandler"]

warnings.warn("broker.logging is now broker.applog (broker.applog.KafkaLogHandler)", DeprecationWarning, stacklevel=2)
