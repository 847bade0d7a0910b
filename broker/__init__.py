"""kbroker: a Kafka-compatible distributed log broker with a Cython native core."""

__version__ = "0.1.0"
