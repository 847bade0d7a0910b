"""Tiered storage's parts on their own, without a broker (issue 39): copy throughput of the
copier to the filesystem storage manager, and read throughput of the remote reader
against the local log's reads of the same bytes.

    .venv/bin/python bench/tier.py [--mb 256] [--record-bytes 1024] [--segment-mb 64]
        [--chunk-mb 4] [--fetch-kb 1024] [--dir /tmp]

A log of --mb MB (batches of 100 uncompressed records of --record-bytes) is written,
flushed, and its pages dropped from the page cache where the kernel lets us
(posix_fadvise DONTNEED), then:

    copy         every rolled segment copied (STARTED, objects, FINISHED records, each
                 fsynced): MB/s of wall time and MB per CPU second of this process
    local read   the whole log read back with Log.read_bytes in --fetch-kb fetches
    remote cold  the same offsets read through RemoteLogReader, its chunk cache empty
    remote warm  again, every chunk cached on local disk

The store is a directory on the same disk: the figures are this code's cost, not a
network's. Output: one JSON line, then a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from broker.config import BrokerConfig  # noqa: E402
from broker.log.checkpoints import TopicPartition  # noqa: E402
from broker.log.log import Log  # noqa: E402
from broker.native import BatchBuilder, iter_batches  # noqa: E402
from broker.tier.copier import LocalMetadataLog, RemoteLogManager  # noqa: E402
from broker.tier.reader import RemoteLogReader  # noqa: E402
from broker.tier.storage import FileSystemStorageManager, TopicIdPartition  # noqa: E402

TIP = TopicIdPartition(uuid.UUID(int=405), "bench", 0)


def drop_cache(path: Path) -> None:
    for f in path.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def timed(fn):  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def read_all(read, end: int, fetch: int) -> int:  # type: ignore[no-untyped-def]
    """Bytes of whole batches read (a local read may end in part of a batch, read again
    by the next fetch, as a consumer does)."""
    offset, total = 0, 0
    while offset < end:
        data = read(offset, fetch)
        batches = list(iter_batches(data))
        total += sum(len(b) for b in batches)
        offset = batches[-1].last_offset + 1
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--segment-mb", type=int, default=64)
    ap.add_argument("--chunk-mb", type=int, default=4)
    ap.add_argument("--fetch-kb", type=int, default=1024)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kbroker-bench-tier-", dir=args.dir))
    try:
        broker = BrokerConfig({"log.dir": str(root)})
        cfg = broker.log_config(
            {"segment.bytes": args.segment_mb << 20, "retention.ms": -1, "remote.storage.enable": True}
        )
        lg = Log.load(
            str(root / "logs" / "bench-0"),
            TopicPartition("bench", 0),
            cfg,
            topic_id=TIP.topic_id,
            remote_log_enabled=True,
        )
        rsm = FileSystemStorageManager(str(root / "remote"))
        meta = LocalMetadataLog(str(root / "meta"), broker)
        rlm = RemoteLogManager(0, rsm, meta)
        rlm.start()
        rlm.attach(lg, TIP)  # as a leader does before its appends (snapshots are kept for the copies)
        value = os.urandom(args.record_bytes)
        b = BatchBuilder()
        for i in range(100):
            b.append(1_700_000_000_000 + i, None, value)
        one = bytes(b.build())
        while lg.size < args.mb << 20:
            lg.append_as_leader(bytearray(one), 0)
        lg.roll()
        lg.high_watermark = lg.log_end_offset
        lg.flush()
        end, size = lg.log_end_offset, lg.size
        drop_cache(root / "logs")
        copied, copy_wall, copy_cpu = timed(lambda: asyncio.run(rlm.copy(lg, TIP)))
        copied_bytes = rlm.stats["copied_bytes"]
        drop_cache(root / "logs")
        fetch = args.fetch_kb << 10
        local, local_wall, local_cpu = timed(lambda: read_all(lambda o, n: lg.read_bytes(o, n), end, fetch))
        drop_cache(root / "remote")
        reader = RemoteLogReader(
            rsm, rlm.cache, str(root / "chunks"), cache_bytes=2 * size, chunk_bytes=args.chunk_mb << 20
        )
        cold, cold_wall, cold_cpu = timed(lambda: read_all(lambda o, n: reader.read(TIP, o, n), end, fetch))
        warm, warm_wall, warm_cpu = timed(lambda: read_all(lambda o, n: reader.read(TIP, o, n), end, fetch))
        assert local == cold == warm == size, (local, cold, warm, size)
        mb = size / 1e6
        out = {
            "mb": round(mb, 1),
            "segments_copied": copied,
            "copied_mb": round(copied_bytes / 1e6, 1),
            "copy_mb_s": round(copied_bytes / 1e6 / copy_wall, 1),
            "copy_mb_per_cpu_s": round(copied_bytes / 1e6 / copy_cpu, 1),
            "local_read_mb_s": round(mb / local_wall, 1),
            "local_read_mb_per_cpu_s": round(mb / local_cpu, 1),
            "remote_cold_mb_s": round(mb / cold_wall, 1),
            "remote_cold_mb_per_cpu_s": round(mb / cold_cpu, 1),
            "remote_warm_mb_s": round(mb / warm_wall, 1),
            "remote_warm_mb_per_cpu_s": round(mb / warm_cpu, 1),
            "load_average": os.getloadavg()[0],
        }
        print(json.dumps(out))
        print(f"{'':14} {'MB/s':>8} {'MB/CPU s':>9}")
        for name, key in (
            ("copy", "copy"),
            ("local read", "local_read"),
            ("remote cold", "remote_cold"),
            ("remote warm", "remote_warm"),
        ):
            print(f"{name:14} {out[key + '_mb_s']:>8} {out[key + '_mb_per_cpu_s']:>9}")
        rlm.close()
        meta.close()
        lg.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
