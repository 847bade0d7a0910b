"""The native Avro decoder on its own (no Spark, no broker): nanoseconds per record of
`broker._native.avro.decode`, and of `Decoder.decode` (the same with the pyarrow arrays
assembled), on the 10-field records of bench/spark_avro.py.

    .venv/bin/python bench/avro_decode.py [--rows 10000] [--reps 300]

CPU time (time.process_time) of --reps decodes of one array of --rows framed records,
1,000 distinct ones repeated, as bench/spark_avro.py produces them.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import struct
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=300)
    args = ap.parse_args()

    import fastavro
    import pyarrow as pa
    from spark_avro import SCHEMA

    import broker._native.avro as native
    from broker.registry.formats.avro import parse_avro
    from broker.spark.avro import Decoder

    parsed = fastavro.parse_schema(SCHEMA)
    rng = random.Random(7)
    header = b"\x00" + struct.pack(">I", 1)
    pool = []
    for i in range(1000):
        buf = io.BytesIO()
        fastavro.schemaless_writer(
            buf,
            parsed,
            {
                "id": rng.randrange(2**40),
                "user": rng.randrange(10**6),
                "page": "/p/" + "x" * rng.randrange(5, 30),
                "referrer": "https://example.com/" + "r" * rng.randrange(0, 20),
                "score": rng.random() * 100,
                "ratio": rng.random(),
                "mobile": i % 2 == 0,
                "kind": ["VIEW", "CLICK", "BUY"][i % 3],
                "at": 1_700_000_000_000 + i,
                "note": None if i % 4 else f"note {i}",
            },
        )
        pool.append(header + buf.getvalue())
    arr = pa.array([pool[i % 1000] for i in range(args.rows)], pa.binary())
    writer = parse_avro(json.dumps(SCHEMA), ())
    dec = Decoder(json.dumps(SCHEMA), fetch_writer=lambda sid: (writer.parsed, writer.named), permissive=True)
    dec.decode(arr)  # learns the writer's program
    programs = list(dec.programs.values())
    n = args.rows * args.reps
    t = time.process_time()
    for _ in range(args.reps):
        native.decode(arr, dec.layout, programs, True)
    t_native = time.process_time() - t
    t = time.process_time()
    for _ in range(args.reps):
        dec.decode(arr)
    t_full = time.process_time() - t
    size = sum(map(len, pool)) / len(pool)
    print(
        f"{args.rows:,} records of {size:.0f} B x {args.reps}: native decode {t_native / n * 1e9:.0f} ns/record, "
        f"with the arrays assembled {t_full / n * 1e9:.0f} ns/record (CPU time, one core)"
    )


if __name__ == "__main__":
    main()
