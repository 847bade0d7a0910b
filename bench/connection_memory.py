"""What clients pushing large requests behind their own long polls make a broker hold
(issue 34): its RSS growth, for N connections each sending a Fetch that waits
(max_wait_ms, min_bytes of 1 GiB) and then F frames of 20 MiB behind it.

    .venv/bin/python bench/connection_memory.py [--connections 100] [--frames 4]
                                                [--max-wait-ms 8000] [--set KEY=VALUE ...]

One `broker serve` per configuration (embedded store, the broker's defaults plus --set):
the defaults (queued.max.request.bytes.per.connection 4 MiB, queued.max.request.bytes
unbounded) and, unless --set is given, queued.max.request.bytes=256 MiB. Prints, per
configuration, the peak RSS growth while the long polls wait and what the configured
bounds allow (connections x per-connection bound, or the broker-wide bound). Every
request is then answered, in order, on its connection (checked).

Before the bound (main @3e67bd7) one such connection made the broker hold every frame
behind its long poll (20 frames of 20 MiB: +400 MiB, tests/interop/test_connection_limits.py);
a hundred would have taken tens of GB on this machine, so that run is not repeated here.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.broker_proc import BrokerProcess  # noqa: E402
from tests.support.long_poll_push import BIG, pushed_behind_long_polls  # noqa: E402

MiB = 1 << 20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=100)
    ap.add_argument("--frames", type=int, default=4, help="frames of 20 MiB behind each long poll")
    ap.add_argument("--max-wait-ms", type=int, default=8000)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings")
    args = ap.parse_args()
    if args.settings:
        configs = [dict(s.split("=", 1) for s in args.settings)]
    else:
        configs = [{}, {"queued.max.request.bytes": str(256 * MiB)}]
    print(
        f"{args.connections} connections, each a long poll of {args.max_wait_ms} ms and {args.frames} frames "
        f"of {BIG // MiB} MiB behind it ({args.connections * args.frames * BIG // MiB} MiB pushed in all)"
    )
    for i, config in enumerate(configs):
        with tempfile.TemporaryDirectory() as d, BrokerProcess(Path(d) / "data", config=config) as b:
            grew = pushed_behind_long_polls(b, f"pushed-{i}", args.connections, args.frames, args.max_wait_ms)
        per_conn = int(config.get("queued.max.request.bytes.per.connection", 4 * MiB))
        total = int(config.get("queued.max.request.bytes", -1))
        bound = min(args.connections * per_conn, total) if total > 0 else args.connections * per_conn
        label = ", ".join(f"{k}={v}" for k, v in config.items()) or "defaults"
        print(
            f"{label}: RSS grew {grew / MiB:.0f} MiB at its peak; the bounds allow {bound / MiB:.0f} MiB "
            f"of queued requests"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
