# cython: language_level=3
# broker._native.avro: registry-framed Avro -> Arrow buffers for the Spark source. Its C-level
# state is private; use the Python API (Program, scan_ids, decode).
