"""Spark fixtures: one local SparkSession for every Spark test (local[2], UI off), one real
broker process, a fresh topic per test.

Discovery: Spark looks for top-level `pyspark_*` modules with pkgutil.iter_modules() in
a Python worker, once per session, the first time a Python data source is looked up. A
regular install puts pyspark_kbroker.py in site-packages, where iter_modules() lists it;
the editable install of `make install-test` makes it importable but not listed, so the
Makefile gives the venv a directory holding it (.venv/spark-discovery, on the path
through a .pth file). The session is started as a user starts one, nothing added to the
workers' path, and records, before anything is registered, whether Spark discovered the
source (test_source_discovered_without_registration asserts it). It then registers the
source explicitly too (the documented alternative; it replaces the discovered one), so
the other tests do not depend on discovery.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_binary, require_module

_counter = itertools.count()


class SparkContextInfo:
    discovered: bool = False
    discovery_path: str = ""


SPARK_INFO = SparkContextInfo()


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    require_module("pyspark")
    require_binary("java", "openjdk-17-jre-headless")
    from pyspark.sql import SparkSession

    import pyspark_kbroker

    module_dir = str(Path(pyspark_kbroker.__file__).resolve().parent)
    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.pop("PYTHONPATH", None)
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    try:
        session = (
            SparkSession.builder.master("local[2]")
            .appName("kbroker-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.warehouse.dir", str(warehouse))
            .config("spark.driver.memory", "1g")
            .config("spark.sql.streaming.stopTimeout", "60s")
            .getOrCreate()
        )
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    session.sparkContext.setLogLevel("ERROR")
    # before any registration: did Spark find the source by itself?
    SPARK_INFO.discovered = bool(session._jsparkSession.sessionState().dataSourceManager().dataSourceExists("kbroker"))
    SPARK_INFO.discovery_path = module_dir
    from broker.spark import KBrokerDataSource

    session.dataSource.register(KBrokerDataSource)
    yield session
    for q in session.streams.active:
        try:
            q.stop()
        except Exception:
            pass
    session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("spark-broker") / "data"
    with BrokerProcess(data, config={"log.retention.check.interval.ms": 200, "num.partitions": 1}) as b:
        yield b


@pytest.fixture
def topic_name(request):
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:100]
    return f"{base}-{next(_counter)}"


@pytest.fixture
def spark_info():
    return SPARK_INFO
