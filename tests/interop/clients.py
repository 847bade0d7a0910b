"""Adapters that drive each real client the same way: produce a list of messages to a
topic, consume a number of messages back. Every call is bounded in time.

A message is (key: bytes, value: bytes, headers: list[(str, bytes)]); a consumed message
is (partition, offset, key, value, headers).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
import time

CLIENTS = ("kcat", "confluent", "kafka-python", "aiokafka")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = (0, 1, -1)
TIMEOUT_S = 90


class Timeout(AssertionError):
    pass


# ---------------------------------------------------------------------- kcat


def kcat_produce(bootstrap, topic, messages, acks, codec):
    # kcat reads "key<TAB>value" lines; headers are per invocation, so all messages of a
    # kcat run carry the same headers (the first message's)
    with tempfile.NamedTemporaryFile("wb", delete=False, suffix=".txt") as f:
        for key, value, _ in messages:
            assert b"\t" not in key and b"\n" not in value
            f.write(key + b"\t" + value + b"\n")
        path = f.name
    cmd = [
        "kcat",
        "-P",
        "-b",
        bootstrap,
        "-t",
        topic,
        "-K",
        "\t",
        "-z",
        codec if codec != "none" else "none",
        "-X",
        f"acks={acks}",
        "-X",
        "linger.ms=5",
        "-l",
        path,
    ]
    for k, v in messages[0][2]:
        cmd += ["-H", f"{k}={v.decode()}"]
    try:
        subprocess.run(cmd, check=True, timeout=TIMEOUT_S, capture_output=True)
    finally:
        os.unlink(path)


def kcat_consume(bootstrap, topic, count):
    out = subprocess.run(
        [
            "kcat",
            "-C",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-o",
            "beginning",
            "-c",
            str(count),
            "-f",
            "%p\t%o\t%k\t%s\t%h\n",
            "-X",
            "fetch.wait.max.ms=100",
        ],
        check=True,
        timeout=TIMEOUT_S,
        capture_output=True,
    ).stdout
    got = []
    for line in out.split(b"\n"):
        if not line:
            continue
        p, o, k, v, h = line.split(b"\t", 4)
        headers = []
        if h:
            for item in h.split(b","):
                hk, _, hv = item.partition(b"=")
                headers.append((hk.decode(), hv))
        got.append((int(p), int(o), k, v, headers))
    return got


# ---------------------------------------------------------------------- confluent-kafka


def confluent_produce(bootstrap, topic, messages, acks, codec):
    import confluent_kafka as ck

    errors = []
    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "compression.type": codec,
            "linger.ms": 5,
            "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 1,
        }
    )

    def cb(err, _msg):
        if err is not None:
            errors.append(err)

    for key, value, headers in messages:
        while True:
            try:
                p.produce(topic, value=value, key=key, headers=headers, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    remaining = p.flush(TIMEOUT_S)
    assert remaining == 0, f"{remaining} messages not delivered"
    assert not errors, errors[:3]


def confluent_consume(bootstrap, topic, count, partitions):
    import confluent_kafka as ck

    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"interop-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in partitions])
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count:
            if time.monotonic() > deadline:
                raise Timeout(f"confluent consumed {len(got)} of {count}")
            for m in c.consume(1000, 0.5):
                if m.error():
                    raise AssertionError(str(m.error()))
                got.append((m.partition(), m.offset(), m.key(), m.value(), [(k, v) for k, v in (m.headers() or [])]))
        return got
    finally:
        c.close()


# ---------------------------------------------------------------------- kafka-python


def kafka_python_produce(bootstrap, topic, messages, acks, codec):
    import kafka

    p = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all" if acks == -1 else acks,
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
        max_in_flight_requests_per_connection=1,
        request_timeout_ms=30000,
    )
    try:
        futures = [p.send(topic, key=k, value=v, headers=h) for k, v, h in messages]
        p.flush(TIMEOUT_S)
        if acks != 0:
            for f in futures:
                f.get(timeout=TIMEOUT_S)
    finally:
        p.close(10)


def kafka_python_consume(bootstrap, topic, count, partitions):
    import kafka

    c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        c.assign([kafka.TopicPartition(topic, p) for p in partitions])
        c.seek_to_beginning()
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count:
            if time.monotonic() > deadline:
                raise Timeout(f"kafka-python consumed {len(got)} of {count}")
            for _tp, msgs in c.poll(500).items():
                for m in msgs:
                    got.append((m.partition, m.offset, m.key, m.value, list(m.headers)))
        return got
    finally:
        c.close()


# ---------------------------------------------------------------------- aiokafka


def aiokafka_produce(bootstrap, topic, messages, acks, codec):
    import aiokafka

    async def run():
        p = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all" if acks == -1 else acks,
            compression_type=None if codec == "none" else codec,
            linger_ms=5,
        )
        await p.start()
        try:
            futs = [await p.send(topic, key=k, value=v, headers=h) for k, v, h in messages]
            await p.flush()
            if acks != 0:
                await asyncio.gather(*futs)
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(run(), TIMEOUT_S))


def aiokafka_consume(bootstrap, topic, count, partitions):
    import aiokafka

    async def run():
        c = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100, auto_offset_reset="earliest"
        )
        await c.start()
        try:
            c.assign([aiokafka.TopicPartition(topic, p) for p in partitions])
            await c.seek_to_beginning()
            got = []
            while len(got) < count:
                batch = await c.getmany(timeout_ms=500)
                for _tp, msgs in batch.items():
                    for m in msgs:
                        got.append((m.partition, m.offset, m.key, m.value, list(m.headers)))
            return got
        finally:
            await c.stop()

    return asyncio.run(asyncio.wait_for(run(), TIMEOUT_S))


PRODUCE = {
    "kcat": kcat_produce,
    "confluent": confluent_produce,
    "kafka-python": kafka_python_produce,
    "aiokafka": aiokafka_produce,
}


def consume(client, bootstrap, topic, count, partitions):
    if client == "kcat":
        return kcat_consume(bootstrap, topic, count)
    return {"confluent": confluent_consume, "kafka-python": kafka_python_consume, "aiokafka": aiokafka_consume}[client](
        bootstrap, topic, count, partitions
    )
