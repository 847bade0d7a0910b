"""The rows of the source, Spark's Kafka schema verbatim, and their Arrow form.

    key            binary
    value          binary
    topic          string
    partition      int
    offset         long
    timestamp      timestamp
    timestampType  int                (0 CreateTime, 1 LogAppendTime)
    headers        array<struct<key: string, value: binary>>   only with includeHeaders=true

All nullable, as Spark declares them. Spark checks that an Arrow batch a Python source
yields has exactly the Arrow schema it derives from this StructType (timestamps as
timestamp[us, tz=UTC], list items named "element"), so the batches are built to that.

No per-record Python: the native decoder (broker.native.batches_to_arrow) fills offset,
timestamp, key, value and headers from the record batch bytes; topic and partition are
constant arrays, timestampType comes from the batch headers (one value per batch, mapped
onto the rows with a vectorised search when a fetch mixes both types).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

# pyarrow is imported by the functions that build Arrow data (the executors'): the
# driver's Python workers that only ask the source for its schema never load it


def spark_schema(include_headers: bool):
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(
            StructField(
                "headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
            )
        )
    return StructType(fields)


@lru_cache(maxsize=2)
def arrow_schema(include_headers: bool) -> pa.Schema:
    """What Spark's to_arrow_schema(spark_schema(...), timezone="UTC") gives, built without
    a Spark context (the executors' Python workers call this)."""
    import pyarrow as pa

    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(
            pa.field(
                "headers",
                pa.list_(
                    pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
                ),
            )
        )
    return pa.schema(fields)


def to_spark_batch(
    rb: pa.RecordBatch, topic: str, partition: int, timestamp_types, include_headers: bool
) -> pa.RecordBatch:
    """batches_to_arrow's batch (offset, timestamp, key, value, headers) -> Spark's rows.

    timestamp_types: an int (every row the same) or a pair of int64 arrays
    (last offset of each batch, its timestamp type), sorted by offset."""
    import pyarrow as pa

    n = rb.num_rows
    schema = arrow_schema(include_headers)
    offsets = rb.column(0)
    if isinstance(timestamp_types, int):
        ttype = pa.repeat(pa.scalar(timestamp_types, pa.int32()), n)
    else:
        import numpy as np

        last_offsets, types = timestamp_types
        idx = np.searchsorted(last_offsets, offsets.to_numpy(zero_copy_only=True), side="left")
        ttype = pa.array(types[idx], type=pa.int32())
    columns = [
        rb.column(2),
        rb.column(3),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        offsets,
        rb.column(1).cast(schema.field("timestamp").type),
        ttype,
    ]
    if include_headers:
        columns.append(rb.column(4).view(schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
