from collections.abc import Iterable, Iterator

from typing_extensions import Buffer

DEFAULT_DECOMPRESS_LIMIT: int

class CorruptRecordError(ValueError):
    position: int | None
    def __init__(self, message: str, position: int | None = ...) -> None: ...

def decompress_block(codec: int, data: Buffer, limit: int = ...) -> bytes: ...

class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    attributes: int

class RecordBatch:
    position: int
    def __init__(self, buffer: Buffer, position: int = 0) -> None: ...
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    compression: int
    compression_name: str
    timestamp_type: int
    is_transactional: bool
    is_control: bool
    has_delete_horizon: bool
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    last_offset: int
    next_offset: int
    size: int
    writable: bool
    def __len__(self) -> int: ...
    def compute_crc(self) -> int: ...
    def is_valid(self) -> bool: ...
    def validate(self) -> None: ...
    def set_base_offset(self, base_offset: int) -> None: ...
    def set_partition_leader_epoch(self, epoch: int) -> None: ...
    def set_log_append_time(self, timestamp: int) -> None: ...
    def tobytes(self) -> bytes: ...
    def memoryview(self) -> memoryview: ...
    def records(self, decompress_limit: int = ..., max_records: int = -1) -> list[Record]: ...
    def __iter__(self) -> Iterator[Record]: ...

class BatchIterator(Iterator[RecordBatch]):
    position: int
    validate: bool
    partial: bool
    bytes_consumed: int
    def __init__(self, buffer: Buffer, position: int = 0, validate: bool = False) -> None: ...
    def __next__(self) -> RecordBatch: ...

def iter_batches(buffer: Buffer, position: int = 0, *, validate: bool = False) -> BatchIterator: ...

class InvalidRecordError(CorruptRecordError): ...

def require_keys(buffer: Buffer, decompress_limit: int = ...) -> None: ...
def assign_offsets(
    buffer: Buffer,
    base_offset: int,
    partition_leader_epoch: int = -1,
    validate: bool = True,
    producer_checks: bool = False,
) -> tuple[int, int, int, int, int]: ...

class SchemaIds:
    def __init__(self, ids: Iterable[int] = ...) -> None: ...
    def __contains__(self, value: object) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[int]: ...

FRAME_PROBLEMS: dict[int, str]

def check_schema_ids(
    buffer: Buffer,
    key_ids: SchemaIds | None,
    value_ids: SchemaIds | None,
    max_errors: int = ...,
    decompress_limit: int = ...,
) -> list[tuple[int, int, int, int]] | None: ...
