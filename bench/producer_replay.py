"""What rebuilding idempotent-producer state costs an unclean restart.

    .venv/bin/python bench/producer_replay.py [plain|idem]

Writes one ~1 GiB active segment of ~16 KB batches (140 records of 100 bytes; with
`idem`, all from one idempotent producer), closes it without a shutdown snapshot, then
times Log.load after a crash (recovery of the active segment included) and the producer
state replay alone (batch headers after the last snapshot: here the whole segment).
"""

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.config import BrokerConfig  # noqa: E402
from broker.log.checkpoints import TopicPartition  # noqa: E402
from broker.log.log import Log  # noqa: E402
from broker.native import BatchBuilder  # noqa: E402


def main() -> None:
    idem = len(sys.argv) > 1 and sys.argv[1] == "idem"
    d = tempfile.mkdtemp(prefix="kbroker-replay-", dir=str(Path(__file__).resolve().parents[1]))
    try:
        cfg = BrokerConfig({"log.dir": d}).log_config({"segment.bytes": 1 << 30})
        tp = TopicPartition("t", 0)
        lg = Log.load(d + "/t-0", tp, cfg)
        ts = int(time.time() * 1000)
        n = seq = 0
        while lg.active.size < (1 << 30) - (1 << 20):
            b = BatchBuilder(
                producer_id=7 if idem else -1, producer_epoch=0 if idem else -1, base_sequence=seq if idem else -1
            )
            b.append_repeated(b"x" * 100, 140, timestamp=ts)
            lg.append_as_leader(bytearray(b.build()), 0)
            seq += 140
            n += 1
        end, size = lg.log_end_offset, lg.active.size
        lg.flush()
        lg.close()
        t0 = time.perf_counter()
        lg2 = Log.load(d + "/t-0", tp, cfg, clean_shutdown=False, recovery_point=end)
        t1 = time.perf_counter()
        lg2.producer_state.load(lg2.segments, 0, lg2.log_end_offset, int(time.time() * 1000))
        t2 = time.perf_counter()
        print(
            f"{'idempotent' if idem else 'plain'}: {n} batches, {size / 2**20:.0f} MiB active segment: "
            f"unclean Log.load {1000 * (t1 - t0):.0f} ms, of which producer replay {1000 * (t2 - t1):.0f} ms"
        )
        lg2.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
