from typing import Any

K_BOOL: int
K_I32: int
K_I64: int
K_F32: int
K_F64: int
K_BIN: int
K_DEC: int
K_STRUCT: int
K_LIST: int
K_MAP: int
OP_SKIP_NULL: int
OP_SKIP_BOOL: int
OP_SKIP_VARINT: int
OP_SKIP_FIXED: int
OP_SKIP_BYTES: int
OP_SKIP_RECORD: int
OP_SKIP_ARRAY: int
OP_SKIP_MAP: int
OP_SKIP_UNION: int
OP_NULL: int
OP_BOOL: int
OP_INT_I32: int
OP_INT_I64: int
OP_LONG_I64: int
OP_LONG_MS_US: int
OP_INT_F32: int
OP_INT_F64: int
OP_LONG_F32: int
OP_LONG_F64: int
OP_FLOAT_F32: int
OP_FLOAT_F64: int
OP_DOUBLE_F64: int
OP_BYTES_BIN: int
OP_FIXED_BIN: int
OP_ENUM: int
OP_DEC_BYTES: int
OP_DEC_FIXED: int
OP_RECORD: int
OP_ARRAY: int
OP_MAP: int
OP_UNION: int
OP_ERROR: int
OP_DEFAULT: int
OP_PB_MSG: int
OP_PB_VARINT_I32: int
OP_PB_VARINT_I64: int
OP_PB_ZIGZAG_I32: int
OP_PB_ZIGZAG_I64: int
OP_PB_BOOL: int
OP_PB_FIXED32: int
OP_PB_FIXED64: int
OP_PB_BYTES: int
OP_PB_ENUM: int
OP_PB_SUBMSG: int
OP_PB_TIMESTAMP: int
OP_PB_MAPENTRY: int
OP_JS_OBJECT: int
OP_JS_STRING: int
OP_JS_INT: int
OP_JS_NUMBER: int
OP_JS_BOOL: int
OP_JS_ARRAY: int
OP_JS_MAP: int
R_BAD_JSON: int
OP_LAST: int
PB_REPEATED: int
PB_PACKABLE: int
R_DUPLICATE: int
R_WIRE_TYPE: int
R_OK: int
R_NOT_FRAMED: int
R_UNKNOWN_ID: int
R_TRUNCATED: int
R_BAD_VARINT: int
R_BAD_LENGTH: int
R_BAD_UTF8: int
R_BAD_ENUM: int
R_BAD_BRANCH: int
R_BAD_DECIMAL: int
R_OVERFLOW: int
R_TOO_DEEP: int
R_NOMEM: int
REASONS: dict[int, str]

class Program:
    schema_id: int
    root: int
    fmt: int
    def __init__(
        self, schema_id: int, ops: bytes, kids: bytes, blob: bytes, root: int, ncols: int, fmt: int = 0
    ) -> None: ...

def scan_ids(values: Any) -> list[int]: ...
def decode(
    values: Any, layout: list[tuple[int, int, int, int]], programs: list[Program], permissive: bool
) -> tuple[list[tuple[int, int, Any, Any, Any]] | None, int, int, int]: ...

E_BOOL: int
E_INT: int
E_LONG32: int
E_LONG: int
E_FLOAT: int
E_DOUBLE: int
E_FLOAT_DOUBLE: int
E_BYTES: int
E_DEC_BYTES: int
E_RECORD: int
E_ARRAY: int
E_MAP: int
E_LAST: int

def encode(nodes: list[tuple[int, int, int, Any, int, int]], header: bytes) -> tuple[Any, Any, Any, int, int, int]: ...

PE_BOOL: int
PE_I32_VARINT: int
PE_I32_UVARINT: int
PE_I32_ZIGZAG: int
PE_I32_FIXED32: int
PE_I32_FIXED64: int
PE_I64_VARINT: int
PE_I64_ZIGZAG: int
PE_I64_FIXED64: int
PE_F32: int
PE_F32_F64: int
PE_F64: int
PE_BYTES: int
PE_ENUM: int
PE_MSG: int
PE_TIMESTAMP: int
PE_LIST: int
PE_MAP: int
PE_LAST: int
JE_BOOL: int
JE_I32: int
JE_I64: int
JE_F32: int
JE_F64: int
JE_STRING: int
JE_BASE64: int
JE_DECIMAL: int
JE_DATE: int
JE_TIMESTAMP: int
JE_TIMESTAMP_NTZ: int
JE_OBJECT: int
JE_ARRAY: int
JE_MAP: int
JE_LAST: int
X_PACKED: int
X_UTF8: int
X_NULLABLE: int
X_NULL: int
X_BAD_ENUM: int
X_BAD_UTF8: int
X_NOT_FINITE: int

def encode_schema(
    nodes: list[tuple[int, int, int, Any, int, int, bytes | None, bytes | None]], header: bytes, protobuf: bool
) -> tuple[Any, Any, Any, int, int, int, int]: ...
