"""A read-process-write copier with confluent-kafka's transactions, run as its own
process by test_exactly_once.py (which kills it with SIGKILL mid-transaction).

    python -m tests.txn.eos_copier BOOTSTRAP INPUT OUTPUT GROUP TXN_ID PARTITIONS TOTAL PER_TXN PROGRESS

It assigns every partition of INPUT itself (no rebalance to wait for after a restart),
starts at the group's committed offsets, and per transaction copies up to PER_TXN records
(value upper-cased with a prefix), sends the consumed offsets to the transaction and
commits, appending a line to the file PROGRESS after each commit. It pauses a little
between producing and committing, so a kill soon after a line often lands inside an open
transaction. It exits once the group's committed offsets reach TOTAL records in all.
"""

from __future__ import annotations

import sys
import time


def main(
    bootstrap: str,
    src: str,
    dst: str,
    group: str,
    txn_id: str,
    partitions: int,
    total: int,
    per_txn: int,
    progress: str,
) -> int:
    import confluent_kafka as ck

    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
        }
    )
    p = ck.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, "transaction.timeout.ms": 10000}
    )
    p.init_transactions(60)
    tps = [ck.TopicPartition(src, i) for i in range(partitions)]
    committed = c.committed(tps, 30)
    c.assign(
        [ck.TopicPartition(src, t.partition, t.offset if t.offset >= 0 else ck.OFFSET_BEGINNING) for t in committed]
    )
    done = sum(max(t.offset, 0) for t in committed)
    print(f"copier: starting at {done} of {total}", flush=True)
    deadline = time.monotonic() + 300
    while done < total and time.monotonic() < deadline:
        msgs = [m for m in c.consume(per_txn, 0.5) if m.error() is None]
        if not msgs:
            continue
        p.begin_transaction()
        positions: dict[int, int] = {}
        for m in msgs:
            p.produce(dst, b"copy-" + m.value(), key=m.key(), partition=m.partition())
            positions[m.partition()] = m.offset() + 1
        p.flush(30)
        time.sleep(0.03)  # a window for a kill inside the transaction
        p.send_offsets_to_transaction(
            [ck.TopicPartition(src, k, v) for k, v in positions.items()], c.consumer_group_metadata(), 30
        )
        p.commit_transaction(30)
        done += len(msgs)
        with open(progress, "a") as f:
            f.write(f"{done}\n")
    c.close()
    print(f"copier: done ({done} of {total})", flush=True)
    return 0 if done >= total else 1


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(main(a[0], a[1], a[2], a[3], a[4], int(a[5]), int(a[6]), int(a[7]), a[8]))
