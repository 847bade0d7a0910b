"""A coordinator's internal topic on a real Log for unit tests of the coordinators
(broker/coordinator/, broker/txn/): what the coordinator runtime's partition writer does
(broker/coordinator/partition_writer.py), done directly on a Log this broker leads."""

from __future__ import annotations

from broker.log import Log
from broker.log.log import marker_batch


class Write:
    """A write's answer: its error code and last offset, already acknowledged."""

    def __init__(self, error=0, last=-1):
        self.error, self.error_message, self.last_offset = error, None, last

    async def wait(self):
        return self.error


class LogWriter:
    """The topic's partitions on one real Log, this broker its leader at `epoch`;
    `fail` (an error code) makes appends fail; `reads` counts the loader's reads."""

    def __init__(self, lg: Log, client: bool = True):
        self.log = lg
        self.client = client
        self.leader = True
        self.epoch = 3
        self.fail = 0
        self.reads = 0

    def is_leader(self, tp):
        return self.leader

    def leader_epoch(self, tp):
        return self.epoch

    def append(self, tp, records, timeout_ms):
        if self.fail:
            return Write(self.fail)
        info = self.log.append_as_leader(records, self.epoch, client=self.client)
        self.log.update_high_watermark(self.log.log_end_offset)
        return Write(0, info.last_offset)

    def marker(self, pid, epoch, commit):
        self.log.append_as_leader(marker_batch(pid, epoch, self.epoch, commit, 0), self.epoch, control=True)

    def loadable_range(self, tp):
        return self.log.log_start_offset, self.log.log_end_offset

    def read(self, tp, offset, max_bytes, end):
        self.reads += 1
        return self.log.read_bytes(offset, max_bytes, end)
