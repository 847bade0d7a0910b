"""A confluent-kafka consumer-group member run as its own process (so a test can kill -9
it). It subscribes to one topic, consumes in batches and commits each batch
synchronously (explicit offsets) before the next consume(). Its record goes to --out,
one flushed line per event:

    A p,p,...        partitions assigned (eager protocol: the full new assignment;
                     cooperative-sticky: the partitions added)
    R p,p,...        partitions revoked
    M p o value      a message handed to the application
    C p o            offset o of partition p committed (after the commit succeeded)
    F p first last   the commit of the batch's offsets first..last of partition p failed
    E text           an error (consume or commit)
    PAUSED           (--pause) the last batch was consumed and deliberately not committed
    DONE             closed cleanly (left the group) after --stop appeared

Every loop is bounded by --max-seconds.
"""

import argparse
import os
import sys
import time

import confluent_kafka as ck


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stop", required=True)
    ap.add_argument("--pause")
    ap.add_argument("--client-id", default="member")
    ap.add_argument("--session-timeout-ms", type=int, default=3000)
    ap.add_argument("--heartbeat-ms", type=int, default=500)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--max-seconds", type=float, default=120)
    ap.add_argument("--assignor", default="range,roundrobin", help="partition.assignment.strategy")
    ap.add_argument("--protocol", default="classic", help="group.protocol: classic, or consumer (KIP-848)")
    args = ap.parse_args()

    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    config = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.client_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 2000,
    }
    if args.protocol == "classic":
        config.update(
            {
                "session.timeout.ms": args.session_timeout_ms,
                "heartbeat.interval.ms": args.heartbeat_ms,
                "partition.assignment.strategy": args.assignor,
            }
        )
    else:  # KIP-848: the broker keeps the session and assigns
        config["group.protocol"] = args.protocol
    c = ck.Consumer(config)

    def on_assign(consumer, partitions):
        emit("A " + ",".join(str(p.partition) for p in partitions))

    def on_revoke(consumer, partitions):
        emit("R " + ",".join(str(p.partition) for p in partitions))

    c.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    deadline = time.monotonic() + args.max_seconds
    try:
        while time.monotonic() < deadline and not os.path.exists(args.stop):
            msgs = c.consume(args.batch, 0.2)
            last, first = {}, {}
            for m in msgs:
                if m.error():
                    emit(f"E consume {m.error().code()} {m.error()}".replace("\n", " "))
                    continue
                emit(f"M {m.partition()} {m.offset()} {m.value().decode()}")
                last[m.partition()] = m.offset() + 1
                first.setdefault(m.partition(), m.offset())
            if not last:
                continue
            if args.pause and os.path.exists(args.pause):
                emit("PAUSED")
                while time.monotonic() < deadline:  # heartbeats go on in librdkafka's thread
                    time.sleep(0.1)
                return 3
            tps = [ck.TopicPartition(args.topic, p, o) for p, o in sorted(last.items())]
            try:
                done = c.commit(offsets=tps, asynchronous=False)
            except ck.KafkaException as exc:
                emit(f"E commit {exc}".replace("\n", " "))
                for p, o in sorted(last.items()):
                    emit(f"F {p} {first[p]} {o - 1}")
                continue
            for tp in done:
                if tp.error is not None:
                    emit(f"E commit {tp.partition} {tp.error}".replace("\n", " "))
                    emit(f"F {tp.partition} {first[tp.partition]} {last[tp.partition] - 1}")
                else:
                    emit(f"C {tp.partition} {tp.offset}")
            if args.sleep:
                time.sleep(args.sleep)
        c.close()
        emit("DONE")
        return 0
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
