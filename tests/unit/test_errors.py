"""The one mapping from append exceptions to Kafka error codes (broker/errors.py), and
the group coordinator's answers built on it, with an in-memory partition writer."""
import asyncio
import errno

import pytest

from broker.errors import APPEND_ERRORS, append_error
from broker.group.group import Group
from broker.group.records import OffsetAndMetadata
from broker.log import LogStorageError, RecordTooLarge
from broker.log.producer_state import InvalidProducerEpoch, OutOfOrderSequence
from broker.native import BatchBuilder, CorruptRecordError, InvalidRecordError, assign_offsets
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from tests.unit.group.test_coordinator import GROUP, MemoryWriter, make

E = ErrorCode


@pytest.mark.parametrize("exc, code", [
    (InvalidRecordError("null key"), E.INVALID_RECORD),
    (CorruptRecordError("bad crc"), E.CORRUPT_MESSAGE),
    (RecordTooLarge("big"), E.MESSAGE_TOO_LARGE),
    (LogStorageError("disk"), E.KAFKA_STORAGE_ERROR),
    (OutOfOrderSequence("gap"), E.OUT_OF_ORDER_SEQUENCE_NUMBER),
    (InvalidProducerEpoch("fenced"), E.INVALID_PRODUCER_EPOCH),
    (ValueError("refused"), E.INVALID_RECORD),
    (OSError(errno.ENOSPC, "full"), E.KAFKA_STORAGE_ERROR),
])
def test_each_exception_has_its_code_and_message(exc, code):
    assert isinstance(exc, APPEND_ERRORS)
    assert append_error(exc) == (code, str(exc))


def test_a_protocol_error_keeps_its_code_and_message():
    assert append_error(KafkaProtocolError(E.NOT_LEADER_OR_FOLLOWER, "moved")) == (E.NOT_LEADER_OR_FOLLOWER, "moved")


def test_a_real_invalid_batch_maps_through_the_native_exception():
    b = BatchBuilder()
    b.append(None, None, b"v")
    data = bytearray(b.build())
    data[-1] ^= 0xFF                                   # the CRC no longer matches
    with pytest.raises(APPEND_ERRORS) as info:
        assign_offsets(data, 0)
    assert append_error(info.value)[0] == E.CORRUPT_MESSAGE


def test_anything_else_is_not_an_answer():
    assert not isinstance(KeyError("bug"), APPEND_ERRORS)
    with pytest.raises(TypeError):
        append_error(KeyError("bug"))


class FailingWriter(MemoryWriter):
    def __init__(self, exc):
        super().__init__()
        self.exc = exc

    def append(self, tp, records):
        raise self.exc


@pytest.mark.parametrize("exc, offsets, code", [
    (KafkaProtocolError(E.NOT_LEADER_OR_FOLLOWER), True, E.NOT_COORDINATOR),
    (KafkaProtocolError(E.NOT_ENOUGH_REPLICAS), True, E.COORDINATOR_NOT_AVAILABLE),
    (LogStorageError("disk"), True, E.NOT_COORDINATOR),
    (OSError(errno.EIO, "io"), False, E.NOT_COORDINATOR),
    (RecordTooLarge("big"), True, E.INVALID_COMMIT_OFFSET_SIZE),
    (RecordTooLarge("big"), False, E.UNKNOWN_SERVER_ERROR),
    (KafkaProtocolError(E.RECORD_LIST_TOO_LARGE), True, E.INVALID_COMMIT_OFFSET_SIZE),
])
def test_the_coordinator_maps_append_errors_as_kafka_does(exc, offsets, code):
    _, manager, _ = make(FailingWriter(exc))
    manager.load_all()
    err, tp, last = manager.append(GROUP, [(b"k", b"v")], offsets)
    assert (err, tp, last) == (code, None, -1)


def test_a_failed_commit_is_answered_per_partition_and_not_applied():
    _, manager, _ = make(FailingWriter(LogStorageError("disk")))
    manager.load_all()
    g = manager.groups[GROUP] = Group(GROUP)
    got = asyncio.run(manager.store_offsets(g, {("t", 0): OffsetAndMetadata(5, -1, "", -1, -1)}))
    assert got == {("t", 0): E.NOT_COORDINATOR}
    assert ("t", 0) not in g.offsets
