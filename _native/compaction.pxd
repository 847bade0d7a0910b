# cython: language_level=3
# broker._native.compaction: the offset map and batch filter of log compaction. Its C-level
# state is private; use the Python API (OffsetMap, filter_batches).
