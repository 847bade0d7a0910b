"""asv: native core micro benchmarks (time_*) and their throughputs (track_*)."""

import os
import tempfile
import time
import zlib

from broker.native import BatchBuilder, OffsetIndex, Segment, assign_offsets, batches_to_arrow, crc32c

MIB = 1 << 20


def _batches(count, batch_bytes, value_size=100):
    b = BatchBuilder()
    b.append_repeated(os.urandom(value_size), max(1, (batch_bytes - 61) // (value_size + 12)), 1_700_000_000_000)
    return bytearray(b.build() * count)


def _best(fn, rounds=20):
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


class CRC32C:
    def setup(self):
        self.buf = os.urandom(MIB)

    def time_crc32c_1mib(self):
        crc32c(self.buf)

    def time_zlib_crc32_1mib(self):
        zlib.crc32(self.buf)

    def track_crc32c_gb_per_s(self):
        return MIB / _best(lambda: crc32c(self.buf), 50) / 1e9

    track_crc32c_gb_per_s.unit = "GB/s"


class Batches:
    def setup(self):
        self.data = _batches(64, 16384)

    def time_validate_assign_64x16k(self):
        assign_offsets(self.data, 0, 0)

    def track_validate_assign_gb_per_s(self):
        return len(self.data) / _best(lambda: assign_offsets(self.data, 0, 0), 50) / 1e9

    track_validate_assign_gb_per_s.unit = "GB/s"

    def track_build_records_per_s(self):
        b = BatchBuilder()
        value = os.urandom(100)

        def run():
            for _ in range(100):
                b.reset()
                b.append_repeated(value, 150)
                b.build()

        return 15_000 / _best(run, 10)

    track_build_records_per_s.unit = "records/s"


class Index:
    def setup(self):
        self.dir = tempfile.mkdtemp()
        self.ix = OffsetIndex(os.path.join(self.dir, "0.index"), 0, 10 * MIB)
        for i in range(100_000):
            self.ix.append(i * 10, i * 4096 % (1 << 30))

    def teardown(self):
        self.ix.close()

    def time_lookup(self):
        self.ix.lookup(555_555)


class SegmentAppend:
    def setup(self):
        self.dir = tempfile.mkdtemp()
        self.seg = Segment(self.dir, 0)
        self.data = _batches(64, 16384)
        self.next = 0

    def teardown(self):
        self.seg.delete()

    def time_append_1mib(self):
        buf = bytearray(self.data)
        self.next = assign_offsets(buf, self.next, 0)[0]
        self.seg.append(buf)


class Arrow:
    def setup(self):
        self.data = _batches(160, 16384)
        assign_offsets(self.data, 0, 0)
        self.rows = batches_to_arrow(self.data).num_rows

    def time_decode(self):
        batches_to_arrow(self.data)

    def track_decode_records_per_s(self):
        return self.rows / _best(lambda: batches_to_arrow(self.data), 20)

    track_decode_records_per_s.unit = "records/s"
