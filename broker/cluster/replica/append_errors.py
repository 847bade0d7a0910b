"""The one mapping from the exceptions of the append path to Kafka error codes (what
Kafka's Errors.forException does), applied by ReplicaManager.append_records: the error a
produce answers for a partition, and the error the group coordinator starts from when its
append to __consumer_offsets fails (it then maps that code as Kafka's
GroupMetadataManager does).

Invariants:
- the most specific class wins: an InvalidRecordError (a CorruptRecordError) is
  INVALID_RECORD, any other CorruptRecordError CORRUPT_MESSAGE, any other ValueError
  (a batch the log refuses for its content) INVALID_RECORD;
- a KafkaProtocolError carries its own code and message;
- exceptions outside APPEND_ERRORS are bugs, not answers: callers let them propagate.
"""

from __future__ import annotations

from broker.log import LogStorageError, RecordTooLarge
from broker.log.producer_state import CoordinatorFenced, InvalidProducerEpoch, InvalidTxnState, OutOfOrderSequence
from broker.native import CorruptRecordError, InvalidRecordError
from broker.protocol.errors import ErrorCode, KafkaProtocolError

_CODES: dict[type[BaseException], int] = {
    InvalidRecordError: ErrorCode.INVALID_RECORD,
    CorruptRecordError: ErrorCode.CORRUPT_MESSAGE,
    RecordTooLarge: ErrorCode.MESSAGE_TOO_LARGE,
    LogStorageError: ErrorCode.KAFKA_STORAGE_ERROR,
    OutOfOrderSequence: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    InvalidProducerEpoch: ErrorCode.INVALID_PRODUCER_EPOCH,
    InvalidTxnState: ErrorCode.INVALID_TXN_STATE,
    CoordinatorFenced: ErrorCode.TRANSACTION_COORDINATOR_FENCED,
    ValueError: ErrorCode.INVALID_RECORD,
    OSError: ErrorCode.KAFKA_STORAGE_ERROR,
}

#: what an append may raise that is an answer to the client (`except APPEND_ERRORS`)
APPEND_ERRORS: tuple[type[BaseException], ...] = (KafkaProtocolError, *_CODES)


def append_error(exc: BaseException) -> tuple[int, str | None]:
    """(Kafka error code, message) for an exception of APPEND_ERRORS."""
    if isinstance(exc, KafkaProtocolError):
        return exc.code, exc.message
    for cls in type(exc).__mro__:
        code = _CODES.get(cls)
        if code is not None:
            return code, str(exc)
    raise TypeError(f"{type(exc).__name__} is not an append error") from exc
