"""The one mapping from append exceptions to Kafka error codes (broker/cluster/replica/append_errors.py), and
the group coordinator's answers built on it, with an in-memory partition writer."""

import asyncio
import errno

import pytest

from broker.cluster.replica.append_errors import APPEND_ERRORS, append_error
from broker.group.group import Group
from broker.group.records import OffsetAndMetadata
from broker.log import LogStorageError, RecordTooLarge
from broker.log.producer_state import InvalidProducerEpoch, OutOfOrderSequence
from broker.native import BatchBuilder, CorruptRecordError, InvalidRecordError, assign_offsets
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from tests.unit.group.test_coordinator import GROUP, MemoryWrite, MemoryWriter, make

E = ErrorCode


@pytest.mark.parametrize(
    "exc, code",
    [
        (InvalidRecordError("null key"), E.INVALID_RECORD),
        (CorruptRecordError("bad crc"), E.CORRUPT_MESSAGE),
        (RecordTooLarge("big"), E.MESSAGE_TOO_LARGE),
        (LogStorageError("disk"), E.KAFKA_STORAGE_ERROR),
        (OutOfOrderSequence("gap"), E.OUT_OF_ORDER_SEQUENCE_NUMBER),
        (InvalidProducerEpoch("fenced"), E.INVALID_PRODUCER_EPOCH),
        (ValueError("refused"), E.INVALID_RECORD),
        (OSError(errno.ENOSPC, "full"), E.KAFKA_STORAGE_ERROR),
    ],
)
def test_each_exception_has_its_code_and_message(exc, code):
    assert isinstance(exc, APPEND_ERRORS)
    assert append_error(exc) == (code, str(exc))


def test_a_protocol_error_keeps_its_code_and_message():
    assert append_error(KafkaProtocolError(E.NOT_LEADER_OR_FOLLOWER, "moved")) == (E.NOT_LEADER_OR_FOLLOWER, "moved")


def test_a_real_invalid_batch_maps_through_the_native_exception():
    b = BatchBuilder()
    b.append(None, None, b"v")
    data = bytearray(b.build())
    data[-1] ^= 0xFF  # the CRC no longer matches
    with pytest.raises(APPEND_ERRORS) as info:
        assign_offsets(data, 0)
    assert append_error(info.value)[0] == E.CORRUPT_MESSAGE


def test_anything_else_is_not_an_answer():
    assert not isinstance(KeyError("bug"), APPEND_ERRORS)
    with pytest.raises(TypeError):
        append_error(KeyError("bug"))


class FailingWriter(MemoryWriter):
    """Its append fails with `exc` (as ReplicaManager.append_records reports it: the code of
    broker/cluster/replica/append_errors.py), or its wait with the code `wait_error`."""

    def __init__(self, exc=None, wait_error=0):
        super().__init__()
        self.exc = exc
        self.wait_error = wait_error

    def append(self, tp, records, timeout_ms):
        if self.exc is not None:
            code, message = append_error(self.exc)
            return MemoryWrite(self, tp, -1, timeout_ms, code, message)
        write = super().append(tp, records, timeout_ms)
        if self.wait_error:

            async def wait():
                return self.wait_error

            write.wait = wait
        return write


@pytest.mark.parametrize(
    "exc, offsets, code",
    [
        (KafkaProtocolError(E.NOT_LEADER_OR_FOLLOWER), True, E.NOT_COORDINATOR),
        (KafkaProtocolError(E.NOT_ENOUGH_REPLICAS), True, E.COORDINATOR_NOT_AVAILABLE),
        (KafkaProtocolError(E.UNKNOWN_TOPIC_OR_PARTITION), False, E.COORDINATOR_NOT_AVAILABLE),
        (LogStorageError("disk"), True, E.NOT_COORDINATOR),
        (OSError(errno.EIO, "io"), False, E.NOT_COORDINATOR),
        (RecordTooLarge("big"), True, E.INVALID_COMMIT_OFFSET_SIZE),
        (RecordTooLarge("big"), False, E.UNKNOWN_SERVER_ERROR),
        (KafkaProtocolError(E.RECORD_LIST_TOO_LARGE), True, E.INVALID_COMMIT_OFFSET_SIZE),
    ],
)
def test_the_coordinator_maps_append_errors_as_kafka_does(exc, offsets, code):
    _, manager, _ = make(FailingWriter(exc))
    manager.load_all()
    assert manager.append(GROUP, [(b"k", b"v")], offsets) == (code, None)


@pytest.mark.parametrize(
    "wait_error, offsets, code",
    [
        (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, True, E.COORDINATOR_NOT_AVAILABLE),
        (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, False, E.COORDINATOR_NOT_AVAILABLE),
        (E.NOT_LEADER_OR_FOLLOWER, True, E.NOT_COORDINATOR),
        (E.KAFKA_STORAGE_ERROR, False, E.NOT_COORDINATOR),
        (E.REQUEST_TIMED_OUT, True, E.REQUEST_TIMED_OUT),
        (E.REQUEST_TIMED_OUT, False, E.REBALANCE_IN_PROGRESS),
    ],
)
def test_the_coordinator_maps_errors_of_the_wait_for_the_isr_as_kafka_does(wait_error, offsets, code):
    _, manager, _ = make(FailingWriter(wait_error=wait_error))
    manager.load_all()
    err, write = manager.append(GROUP, [(b"k", b"v")], offsets)
    assert err == 0 and write is not None
    assert asyncio.run(manager.await_durable(write, offsets)) == code


def test_a_failed_commit_is_answered_per_partition_and_not_applied():
    _, manager, _ = make(FailingWriter(LogStorageError("disk")))
    manager.load_all()
    g = manager.groups[GROUP] = Group(GROUP)
    got = asyncio.run(manager.store_offsets(g, {("t", 0): OffsetAndMetadata(5, -1, "", -1, -1)}))
    assert got == {("t", 0): E.NOT_COORDINATOR}
    assert ("t", 0) not in g.offsets
