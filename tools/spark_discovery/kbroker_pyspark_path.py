"""Imported at the start of every Python of a checkout's .venv, by the last line of its
kbroker-spark-discovery.pth (the Makefile writes it): Spark's Python workers import
pyspark from site-packages, compiled once, instead of from pyspark.zip.

Spark puts $SPARK_HOME/python/lib/pyspark.zip and its py4j zip at the head of its Python
workers' PYTHONPATH. With PySpark installed by pip, SPARK_HOME is the pyspark package in
site-packages, the zips hold the same files as the package beside them, and a zip has
no bytecode cache: every worker Spark starts (the data source's lookup, schema, planning
and commit workers, the executors') compiled pyspark from source again, 0.7 s of CPU
against 0.2 s. When the zips on sys.path are those inside this venv's own pyspark
package, they go after site-packages: the same code, found compiled. Anything else (a
SPARK_HOME of its own) is left as it is.
"""

import os
import sys
import sysconfig


def _after_site_packages() -> None:
    own = os.path.join(sysconfig.get_paths()["purelib"], "pyspark", "python", "lib") + os.sep
    zips = [p for p in sys.path if p.startswith(own) and p.endswith(".zip")]
    if zips:
        sys.path[:] = [p for p in sys.path if p not in zips] + zips


_after_site_packages()
