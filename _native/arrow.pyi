import pyarrow
from typing_extensions import Buffer

def arrow_schema() -> pyarrow.Schema: ...
def batches_to_arrow(
    data: Buffer,
    start_offset: int | None = None,
    end_offset: int | None = None,
    *,
    validate: bool = True,
    skip_control: bool = True,
    decompress_limit: int = ...,
    check_utf8: bool = True,
) -> pyarrow.RecordBatch: ...
