from typing_extensions import Buffer

# A binary-like Arrow column: (validity bitmap or None, int32 offsets, data or None, array offset)
BinaryColumn = tuple[Buffer | None, Buffer, Buffer | None, int]
# list<struct<key: string, value: binary>>: (list validity or None, int32 list offsets,
# list array offset, key column, value column)
HeadersColumn = tuple[Buffer | None, Buffer, int, BinaryColumn, BinaryColumn]

def assign_partitions(
    n: int,
    num_partitions: int,
    key: BinaryColumn | None = None,
    explicit: tuple[Buffer | None, Buffer, int] | None = None,
    sticky: int = 0,
) -> bytes: ...
def encode_batches(
    n: int,
    partitions: Buffer,
    key: BinaryColumn | None,
    value: BinaryColumn | None,
    headers: HeadersColumn | None = None,
    timestamp_ms: int = 0,
    compression: str | int | None = None,
    batch_bytes: int = ...,
    *,
    compression_level: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    sequences: dict[int, int] | None = None,
    transactional: bool = False,
) -> list[tuple[int, bytes, int]]: ...
