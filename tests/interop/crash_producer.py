"""A confluent-kafka producer run as its own process by test_durability: it produces
without pause until the broker dies (or a time limit), writing every acknowledged
message to a file the moment its delivery report arrives.

    python -m tests.interop.crash_producer BOOTSTRAP TOPIC ACKED_FILE MAX_SECONDS [RATE]

ACKED_FILE gets one line per acknowledged message, "partition offset index", flushed at
once; the last line is "# attempted N failed M". acks=all, no idempotence and no
retries, so nothing is ever sent twice: a value at two offsets is the broker's doing.
Message i has the value value_for(i) and the key key_for(i). RATE (messages per
second, default unlimited) keeps the amount to read back afterwards small.
"""

from __future__ import annotations

import sys
import time


def value_for(i: int) -> bytes:
    # recognisable and self-checking: the index, then filler derived from it
    return b"crash-%08d-" % i + (b"%08x" % (i * 2654435761 % 2**32)) * (1 + i % 7)


def key_for(i: int) -> bytes:
    return b"k%d" % (i % 97)


def main(bootstrap: str, topic: str, acked_path: str, max_seconds: float, rate: float = 0) -> int:
    import confluent_kafka as ck

    out = open(acked_path, "w", buffering=1)  # line-buffered: each line written at once
    state = {"failed": 0}

    def on_delivery(err, msg):
        if err is not None:
            state["failed"] += 1
            return
        i = int(msg.value()[6:14])
        out.write(f"{msg.partition()} {msg.offset()} {i}\n")

    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "message.send.max.retries": 0,
            "retry.backoff.ms": 100,
            "message.timeout.ms": 4000,
            "request.timeout.ms": 3000,
            "socket.timeout.ms": 3000,
            "linger.ms": 2,
            "batch.num.messages": 200,
            "queue.buffering.max.messages": 20000,
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500,
        }
    )
    i = 0
    t0 = time.monotonic()
    deadline = t0 + max_seconds
    while time.monotonic() < deadline and state["failed"] == 0:
        if rate and i > rate * (time.monotonic() - t0):
            p.poll(0.005)
            continue
        try:
            p.produce(topic, value=value_for(i), key=key_for(i), on_delivery=on_delivery)
            i += 1
        except BufferError:
            p.poll(0.01)
        if i % 100 == 0:
            p.poll(0)
    remaining = p.flush(10)
    out.write(f"# attempted {i} failed {state['failed']} undelivered {remaining}\n")
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(
        main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]) if len(sys.argv) > 5 else 0)
    )
