# cython: language_level=3
# broker._native.spark_encode: Arrow columns -> record batches for the Spark sink. Its C-level
# state is private; use the Python API (assign_partitions, encode_batches).
