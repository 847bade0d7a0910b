"""kbroker topics as tables of Spark's catalog (issue 41, item 3): the scenario of
test_catalog.py, and a driver that runs it against a Hive metastore (its own process:
a Spark session's catalog implementation is fixed when its JVM starts):

    python -m tests.spark.catalog_driver WAREHOUSE_DIR BOOTSTRAP IN OUT create|read

`create` makes the tables in a Derby-backed Hive metastore under WAREHOUSE_DIR, writes and
reads them; `read`, in another process, finds them in the metastore and reads them.
Each prints one JSON line of what it saw.
"""

from __future__ import annotations

import json
import os
import sys


def create_tables(spark, bootstrap: str, topic_in: str, topic_out: str) -> None:
    spark.sql(
        f"CREATE TABLE clicks USING kbroker OPTIONS ('kafka.bootstrap.servers' '{bootstrap}', subscribe '{topic_in}')"
    )
    spark.sql(
        f"CREATE TABLE archive USING kbroker OPTIONS ('kafka.bootstrap.servers' '{bootstrap}', "
        f"topic '{topic_out}', 'kafka.acks' 'all')"
    )


def values(spark, sql: str) -> list[str]:
    return sorted(r[0] for r in spark.sql(sql).collect())


def write_and_read(spark) -> dict:
    """Writes into both tables and reads them back; what each statement gave."""
    out: dict = {}
    spark.sql(
        "INSERT INTO clicks (key, value) VALUES (CAST('k1' AS BINARY), CAST('v1' AS BINARY)), "
        "(CAST('k2' AS BINARY), CAST('v2' AS BINARY))"
    )
    out["clicks"] = values(spark, "SELECT CAST(value AS STRING) FROM clicks")
    spark.sql(
        "INSERT INTO archive (key, value, partition) SELECT key, CAST(upper(CAST(value AS STRING)) AS BINARY), 0 FROM clicks"
    )
    out["archive"] = values(spark, "SELECT CAST(value AS STRING) FROM archive")
    # rows of one kbroker table, all its columns as they are, into another: refused
    # (Spark would hand the sink the options of the table they come from)
    try:
        spark.sql("INSERT INTO archive SELECT * FROM clicks")
        out["copy_as_is"] = "written"
    except Exception as exc:  # noqa: BLE001 - the message is the result
        out["copy_as_is"] = str(exc)
    out["archive_after"] = values(spark, "SELECT CAST(value AS STRING) FROM archive")
    out["clicks_after"] = values(spark, "SELECT CAST(value AS STRING) FROM clicks")
    # options of the read add to the table's
    topic_in = spark.sql("SELECT topic FROM clicks LIMIT 1").collect()[0][0]
    out["from_offset_1"] = sorted(
        r[0]
        for r in spark.read.option("startingOffsets", json.dumps({topic_in: {"0": 1}}))
        .table("clicks")
        .selectExpr("CAST(value AS STRING)")
        .collect()
    )
    out["columns"] = spark.table("archive").columns
    return out


def main(warehouse: str, bootstrap: str, topic_in: str, topic_out: str, step: str) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("kbroker-catalog")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", f"{warehouse}/warehouse")
        .config("javax.jdo.option.ConnectionURL", f"jdbc:derby:;databaseName={warehouse}/metastore_db;create=true")
        .config("spark.driver.extraJavaOptions", f"-Dderby.stream.error.file={warehouse}/derby.log")
        .enableHiveSupport()
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from broker.spark import KBrokerDataSource

    spark.dataSource.register(KBrokerDataSource)
    result: dict = {"catalog": spark.conf.get("spark.sql.catalogImplementation")}
    if step == "create":
        create_tables(spark, bootstrap, topic_in, topic_out)
        result.update(write_and_read(spark))
    else:
        result["tables"] = sorted(r.tableName for r in spark.sql("SHOW TABLES").collect())
        result["clicks"] = values(spark, "SELECT CAST(value AS STRING) FROM clicks")
        result["archive"] = values(spark, "SELECT CAST(value AS STRING) FROM archive")
    print(json.dumps(result), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
