"""broker.applog.KafkaLogHandler against Apache Kafka: the handler needs no kbroker. The
same application as tests/interop/test_log_handler.py (tests/support/log_app.py: 100 K
lines through dictConfig, four loggers, no explicit close) delivers every line, each
logger's in order and in one partition, to a real Apache Kafka 4.x broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from broker.client import Cluster
from tests.support.log_app import check_delivered, read_topic

pytestmark = pytest.mark.interop

REPO = Path(__file__).resolve().parents[2]


def test_100k_lines_through_dictconfig_reach_apache_kafka_in_order_per_key(apache_kafka, topic):
    n = 100_000
    with Cluster(apache_kafka.bootstrap) as c:
        c.create_topic(topic, 3, 1)
        c.topic(topic, wait_s=10)
    app = subprocess.Popen(
        [sys.executable, "-m", "tests.support.log_app", apache_kafka.bootstrap, topic, str(n)],
        cwd=REPO,
        stderr=subprocess.PIPE,
    )
    _, err = app.communicate(timeout=240)
    assert app.returncode == 0, err.decode()
    assert b"broker.applog" not in err  # nothing dropped, nothing undelivered
    check_delivered(read_topic(apache_kafka.bootstrap, topic, n), n, app.pid)
