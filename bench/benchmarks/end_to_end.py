"""asv: end-to-end throughput against a broker on loopback (client and broker share this
machine's cores), 100-byte records, 3 partitions, acks=1.

Each measurement moves RECORDS records (4 GB), which takes 3 s or more here (about 10 M
msg/s at best), against a fresh broker (setup runs again before every timed call, so a
sample never reads or appends to another's log), and is repeated: at least 3 samples, at
most 5 (none started after 60 s). asv keeps every sample and reports their median and
spread, and `asv compare` judges a change against that spread. A figure of 2 M records
(about 0.1 s) swung from 3.6 M to 22 M msg/s between runs; throughput is RECORDS / the
time (the seed's target of 100K msg/s would be 400 s)."""

from broker.perf.consume import ConsumeOptions, run_consume
from broker.perf.local import LocalBroker
from broker.perf.produce import ProduceOptions, run_produce

RECORDS = 40_000_000
RECORD_SIZE = 100
PARTITIONS = 3


def produce(bootstrap: str) -> dict:
    r = run_produce(
        ProduceOptions(
            bootstrap, "asv", RECORDS, RECORD_SIZE, acks=1, batch_size=262144, partitions=PARTITIONS, progress=False
        )
    )
    assert r["records"] >= RECORDS, r
    return r


class _Measured:
    timeout = 900  # the whole benchmark process: setups, samples, teardowns
    number = 1  # one call a sample: the call is the measurement
    repeat = (3, 5, 60.0)  # min and max samples, no new sample after 60 s
    min_run_count = 3
    warmup_time = 0  # no untimed calls: each sample starts its own broker anyway
    rounds = 1

    def setup(self):
        self.broker = LocalBroker(config={"num.partitions": PARTITIONS})
        self.broker.start()

    def teardown(self):
        self.broker.stop()
        self.broker.cleanup()


class Produce(_Measured):
    def time_produce_40m_records(self):
        produce(self.broker.bootstrap)


class Consume(_Measured):
    def setup(self):
        super().setup()
        produce(self.broker.bootstrap)  # not timed

    def time_consume_40m_records(self):
        r = run_consume(ConsumeOptions(self.broker.bootstrap, "asv", RECORDS, RECORD_SIZE, progress=False))
        assert r["records"] >= RECORDS, r
