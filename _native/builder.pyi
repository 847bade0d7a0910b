from collections.abc import Sequence

from typing_extensions import Buffer

class BatchBuilder:
    compression: int
    base_offset: int
    partition_leader_epoch: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    is_control: bool
    timestamp_type: int
    record_count: int
    size_in_bytes: int
    def __init__(
        self,
        compression: str | int | None = None,
        *,
        base_offset: int = 0,
        partition_leader_epoch: int = -1,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        timestamp_type: int = 0,
        compression_level: int | None = None,
    ) -> None: ...
    def __len__(self) -> int: ...
    def append(
        self,
        timestamp: int | None,
        key: Buffer | None,
        value: Buffer | None,
        headers: Sequence[tuple[str | bytes, Buffer | None]] | None = None,
    ) -> int: ...
    def append_repeated(
        self, value: Buffer, count: int, timestamp: int | None = None, key: Buffer | None = None
    ) -> int: ...
    def build(self) -> bytes: ...
    def view(self) -> memoryview: ...
    def reset(self) -> None: ...
