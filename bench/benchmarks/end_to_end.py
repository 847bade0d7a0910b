"""asv: end-to-end throughput against a broker on loopback, tracked against the seed's
target of 100K msg/s (client and broker share this machine's cores)."""
from broker.perf.consume import ConsumeOptions, run_consume
from broker.perf.local import LocalBroker
from broker.perf.produce import ProduceOptions, run_produce

N = 2_000_000
TARGET = 100_000


class EndToEnd:
    timeout = 300
    number = 1
    repeat = 1

    def setup_cache(self):
        return None

    def setup(self, *args):
        self.broker = LocalBroker(config={"num.partitions": 3})
        self.broker.start()

    def teardown(self, *args):
        self.broker.stop()
        self.broker.cleanup()

    def track_produce_msgs_per_s(self, *args):
        r = run_produce(ProduceOptions(self.broker.bootstrap, "asv", N, 100, acks=1, batch_size=262144, partitions=3,
                                       progress=False))
        return r["records_per_sec"]
    track_produce_msgs_per_s.unit = "msg/s"

    def track_consume_msgs_per_s(self, *args):
        run_produce(ProduceOptions(self.broker.bootstrap, "asv", N, 100, acks=1, batch_size=262144, partitions=3,
                                   progress=False))
        r = run_consume(ConsumeOptions(self.broker.bootstrap, "asv", N, 100, progress=False))
        return r["records_per_sec"]
    track_consume_msgs_per_s.unit = "msg/s"

    def track_produce_times_target(self, *args):
        """Produce throughput as a multiple of the 100K msg/s seed target."""
        return self.track_produce_msgs_per_s() / TARGET
    track_produce_times_target.unit = "x target"
