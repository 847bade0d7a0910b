"""kbroker topics as tables of Spark's catalog (issue 41, item 3): `CREATE TABLE ... USING
kbroker OPTIONS (...)`, then batch reads and writes through the table alone (SELECT,
INSERT INTO, spark.table, options of a read adding to the table's), in Spark's own
in-memory catalog (the session's) and in a Hive metastore (Derby-backed, in processes
of their own: the tables made by one are read by the next). A copy of one kbroker
table's rows into another as they are is refused, and writes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.spark import catalog_driver
from tests.spark.helpers import create_topic, read_topic

ROOT = Path(__file__).resolve().parents[2]


def check(result: dict, topic_in: str, topic_out: str, bootstrap: str) -> None:
    assert result["clicks"] == ["v1", "v2"], result
    assert result["archive"] == ["V1", "V2"], result
    assert (
        "rows read from a kbroker table cannot be inserted into a kbroker table as they are" in result["copy_as_is"]
    ), result["copy_as_is"]
    assert result["archive_after"] == ["V1", "V2"] and result["clicks_after"] == ["v1", "v2"], result
    # the read from offset 1 (an option of the read, beside the table's) has the row there
    at_1 = [v.decode() for _, off, _, v, _ in read_topic(bootstrap, topic_in) if off == 1]
    assert result["from_offset_1"] == at_1, (result, at_1)
    assert result["columns"] == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    # in the topics themselves (the project's consumer): the table named each topic once
    assert sorted(v for _, _, _, v, _ in read_topic(bootstrap, topic_in)) == [b"v1", b"v2"]
    # archive's rows in the partition the INSERT named
    assert sorted((p, v) for p, _, _, v, _ in read_topic(bootstrap, topic_out)) == [(0, b"V1"), (0, b"V2")]


def test_topics_as_tables_of_the_session_catalog(spark, broker, topic_name):
    topic_in, topic_out = topic_name + "-in", topic_name + "-out"
    create_topic(broker.bootstrap, topic_in, 1)
    create_topic(broker.bootstrap, topic_out, 2)
    assert spark.conf.get("spark.sql.catalogImplementation") == "in-memory"
    try:
        catalog_driver.create_tables(spark, broker.bootstrap, topic_in, topic_out)
        result = catalog_driver.write_and_read(spark)
    finally:
        spark.sql("DROP TABLE IF EXISTS clicks")
        spark.sql("DROP TABLE IF EXISTS archive")
    check(result, topic_in, topic_out, broker.bootstrap)


def test_topics_as_tables_of_a_hive_metastore(broker, topic_name, tmp_path):
    topic_in, topic_out = topic_name + "-in", topic_name + "-out"
    create_topic(broker.bootstrap, topic_in, 1)
    create_topic(broker.bootstrap, topic_out, 2)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    results = []
    for step in ("create", "read"):
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.spark.catalog_driver",
                str(tmp_path),
                broker.bootstrap,
                topic_in,
                topic_out,
                step,
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        results.append(json.loads(r.stdout.strip().splitlines()[-1]))
    created, read = results
    assert created["catalog"] == read["catalog"] == "hive"
    check(created, topic_in, topic_out, broker.bootstrap)
    # a later session finds the tables in the metastore, their options with them
    assert read["tables"] == ["archive", "clicks"]
    assert read["clicks"] == ["v1", "v2"] and read["archive"] == ["V1", "V2"], read
