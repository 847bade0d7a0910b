"""The public, stable face of kbroker's native core.

Other projects import this module, and only this module, to use the Cython core:

    from broker.native import crc32c, BatchBuilder, RecordBatch, iter_batches, Segment

It imports nothing but the compiled extension modules (pyarrow and the compression
codecs load lazily, on first use): no asyncio server, ZooKeeper client or Spark.
Documented with runnable examples in docs/native.md.
"""

from broker._native.arrow import arrow_schema, batches_to_arrow
from broker._native.buffer import (
    read_unsigned_varint,
    read_varint,
    read_varlong,
    write_unsigned_varint,
    write_varint,
    write_varlong,
)
from broker._native.builder import BatchBuilder
from broker._native.codecs import COMPRESSION_NAMES, compress_block, compression_code
from broker._native.crc32c import (
    crc32c,
    crc32c_hardware,
    crc32c_software,
    hardware_available as crc32c_hardware_available,
    implementation as crc32c_implementation,
)
from broker._native.index import CorruptIndexError, OffsetIndex, TimeIndex
from broker._native.partitioner import murmur2, partition_for_key
from broker._native.records import (
    FRAME_PROBLEMS,
    BatchIterator,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    RecordBatch,
    SchemaIds,
    assign_offsets,
    check_schema_ids,
    decompress_block,
    iter_batches,
    require_keys,
)
from broker._native.segment import (
    ALLOCATE_AHEAD as SEGMENT_ALLOCATE_AHEAD,
    Segment,
    file_name as segment_file_name,
    open_inactive_segments,
    open_segment_limit,
    parse_base_offset,
    set_allocate_ahead as set_segment_allocate_ahead,
    set_open_segment_limit,
)
from broker._native.sendfile import sendfile

__all__ = [
    "COMPRESSION_NAMES",
    "BatchBuilder",
    "BatchIterator",
    "CorruptIndexError",
    "CorruptRecordError",
    "FRAME_PROBLEMS",
    "InvalidRecordError",
    "OffsetIndex",
    "Record",
    "RecordBatch",
    "SchemaIds",
    "SEGMENT_ALLOCATE_AHEAD",
    "Segment",
    "TimeIndex",
    "arrow_schema",
    "assign_offsets",
    "batches_to_arrow",
    "check_schema_ids",
    "compress_block",
    "compression_code",
    "crc32c",
    "crc32c_hardware",
    "crc32c_hardware_available",
    "crc32c_implementation",
    "crc32c_software",
    "decompress_block",
    "iter_batches",
    "open_inactive_segments",
    "murmur2",
    "open_segment_limit",
    "parse_base_offset",
    "partition_for_key",
    "read_unsigned_varint",
    "read_varint",
    "read_varlong",
    "require_keys",
    "segment_file_name",
    "sendfile",
    "set_open_segment_limit",
    "set_segment_allocate_ahead",
    "write_unsigned_varint",
    "write_varint",
    "write_varlong",
]
