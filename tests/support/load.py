"""Load generation shared by the benchmarks (bench/) and the tests that push volume."""

from __future__ import annotations

import time


def produce_n(producer, topic: str, value: bytes, n: int, deadline: float | None = None) -> None:
    """Queues `n` records of `value` to `topic` on a confluent-kafka Producer as fast as
    librdkafka takes them: a full queue (BufferError) is drained by poll(), and delivery
    callbacks are served every 65,536 records. TimeoutError (saying how many were queued)
    once time.monotonic() passes `deadline`. The caller flushes."""
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"{i} of {n} records queued") from None
        if i & 0xFFFF == 0:
            producer.poll(0)
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{i} of {n} records queued")
