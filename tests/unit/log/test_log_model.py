"""Random operation sequences against a simple model of a partition log: appends,
truncation, high watermark moves, DeleteRecords + retention, clean and unclean reopen,
crashes tearing the active segment."""

import os
import random

import pytest

from ._support import batch, batch_positions, read_all

OVERRIDES = {"segment.bytes": 700, "index.interval.bytes": 150, "segment.index.bytes": 64}


class Model:
    def __init__(self):
        self.batches: list[tuple[int, int]] = []  # (base, last) of every batch in the log
        self.start = 0
        self.hw = 0

    @property
    def end(self):
        return self.batches[-1][1] + 1 if self.batches else self.start

    def offsets(self):
        return [o for b, last in self.batches for o in range(b, last + 1) if o >= self.start]

    def truncate(self, offset):
        """Kafka: every batch holding an offset >= `offset` goes, so the log may end below
        `offset` (and below the log start offset, which follows it down)."""
        removed = [(b, last) for b, last in self.batches if last >= offset]
        if not removed:
            return
        end = min(offset, removed[0][0])
        self.batches = [(b, last) for b, last in self.batches if last < offset]
        self.hw = min(self.hw, end)
        self.start = min(self.start, end)


def _check(lg, m):
    assert lg.log_end_offset == m.end
    assert lg.log_start_offset == m.start
    assert lg.high_watermark == m.hw
    assert lg.log_start_offset <= lg.high_watermark <= lg.log_end_offset
    assert lg.recovery_point <= lg.log_end_offset
    for prev, seg in zip(lg.segments, lg.segments[1:]):
        assert seg.base_offset >= prev.next_offset
    assert lg.segments[0].base_offset <= lg.log_start_offset
    assert read_all(lg) == m.offsets()


# MODEL_SEEDS=400 for a longer hunt; the default keeps the suite quick
@pytest.mark.parametrize("seed", range(int(os.environ.get("MODEL_SEEDS", 12))))
def test_random_operations_match_the_model(make_log, seed):
    rng = random.Random(seed)
    m = Model()
    lg = make_log(OVERRIDES)
    history = []
    for step in range(150):
        op = rng.choices(
            ["append", "truncate", "hw", "delete", "reopen_clean", "reopen_unclean", "torn_tail"],
            weights=[10, 2, 3, 2, 1, 1, 1],
        )[0]
        history.append((op, m.start, m.hw, m.end))
        if op == "append":
            req = bytearray()
            counts = [rng.randint(1, 4) for _ in range(rng.randint(1, 3))]
            for n in counts:
                req += batch(n, ts=1_000 + step, value_size=rng.randint(0, 90))
            info = lg.append_as_leader(req, 0)
            assert info.base_offset == m.end
            base = m.end
            for n in counts:
                m.batches.append((base, base + n - 1))
                base += n
        elif op == "truncate":
            target = rng.randint(m.start, m.end)
            lg.truncate_to(target)
            m.truncate(target)
        elif op == "hw":
            m.hw = rng.randint(m.hw, m.end)
            lg.update_high_watermark(m.hw)
        elif op == "delete":
            target = rng.randint(m.start, m.hw)
            assert lg.delete_records(target) == max(target, m.start)
            m.start = max(target, m.start)
            for seg in lg.delete_old_segments(now_ms=0):
                seg.delete()
        elif op == "reopen_clean":
            lg.flush()
            lg.close()
            lg = make_log(OVERRIDES, clean_shutdown=True, log_start_offset=m.start, high_watermark=m.hw)
        elif op == "torn_tail":
            # a crash tearing the active segment at a random byte: whole batches survive
            rp = lg.recovery_point
            path = lg.active.log_path
            lg.close()
            layout = batch_positions(path)
            size = layout[-1][0] + layout[-1][1] if layout else 0
            cut = rng.randint(0, size)
            with open(path, "r+b") as f:
                f.truncate(cut)
            lost = [first for pos, sz, first, _ in layout if pos + sz > cut]
            if lost:
                m.truncate(lost[0])
            lg = make_log(
                OVERRIDES, clean_shutdown=False, recovery_point=rp, log_start_offset=m.start, high_watermark=m.hw
            )
        else:
            rp = lg.recovery_point
            lg.close()
            lg = make_log(
                OVERRIDES, clean_shutdown=False, recovery_point=rp, log_start_offset=m.start, high_watermark=m.hw
            )
        try:
            _check(lg, m)
        except AssertionError as exc:
            raise AssertionError(f"after {history[-8:]} (op, start, hw, end before it): {exc}") from None
