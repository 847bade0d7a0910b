"""The sink's native Protobuf and JSON encoders on one core, without Spark or a broker:
records/s of broker.spark.schema_sink.encode_column over an Arrow column of a 10-field
struct, against what a Python UDF would do per row (protobuf's runtime filling and
serializing a message; json.dumps), on the same rows.

    .venv/bin/python bench/schema_encode.py [--rows 1000000] [--rounds 5]

Fields: long, int, two strings, double, float, boolean, a timestamp, a nullable string,
an array of 3 longs. Medians of --rounds; the encoded bytes are checked to parse back
(protobuf's runtime; json.loads) on a sample first.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    import pyarrow as pa

    from broker.spark import schema_sink as ss
    from tests.spark.test_schema_encoders import message_class

    utc = datetime.timezone.utc
    t = pa.struct(
        [
            pa.field("id", pa.int64(), False),
            pa.field("user", pa.int32(), False),
            pa.field("page", pa.string(), False),
            pa.field("referrer", pa.string(), False),
            pa.field("score", pa.float64(), False),
            pa.field("ratio", pa.float32(), False),
            pa.field("mobile", pa.bool_(), False),
            pa.field("at", pa.timestamp("us", "UTC"), False),
            pa.field("note", pa.string(), True),
            pa.field("parts", pa.list_(pa.int64()), False),
        ]
    )
    base = datetime.datetime(2026, 1, 2, tzinfo=utc)
    pool = [
        {
            "id": i * 7919,
            "user": i % 100_000,
            "page": "/p/" + "x" * (5 + i % 25),
            "referrer": "https://example.com/" + "r" * (i % 20),
            "score": i * 0.37,
            "ratio": (i % 100) / 100,
            "mobile": i % 2 == 0,
            "at": base + datetime.timedelta(microseconds=i * 1001),
            "note": None if i % 4 else f"note {i}",
            "parts": [i, i + 1, i + 2],
        }
        for i in range(1000)
    ]
    rows = (pool * (args.rows // 1000 + 1))[: args.rows]
    arr = pa.array(rows, t)
    text = ss.proto_for(t)
    pw = ss.writer_for("protobuf", text)
    jw = ss.writer_for("json-schema", json.dumps(ss.json_schema_for(t)))
    Msg = message_class(text, "topLevelRecord")

    # the bytes parse back (a sample)
    sample = ss.encode_column(arr.slice(0, 1000), pw, 1, "value", "protobuf").to_pylist()
    for enc, row in zip(sample, pool, strict=True):
        m = Msg()
        m.ParseFromString(enc[6:])
        assert m.id == row["id"] and m.page == row["page"] and list(m.parts) == row["parts"]
    for enc, row in zip(
        ss.encode_column(arr.slice(0, 1000), jw, 1, "value", "json-schema").to_pylist(), pool, strict=True
    ):
        assert json.loads(enc[5:])["page"] == row["page"]

    def native_pb():
        ss.encode_column(arr, pw, 1, "value", "protobuf")

    def native_json():
        ss.encode_column(arr, jw, 1, "value", "json-schema")

    def python_pb():
        out = []
        for r in rows:
            m = Msg(
                id=r["id"], user=r["user"], page=r["page"], referrer=r["referrer"], score=r["score"],
                ratio=r["ratio"], mobile=r["mobile"], parts=r["parts"],
            )  # fmt: skip
            m.at.FromDatetime(r["at"])
            if r["note"] is not None:
                m.note = r["note"]
            out.append(b"\x00\x00\x00\x00\x01\x00" + m.SerializeToString())

    def python_json():
        out = []
        for r in rows:
            d = dict(r)
            d["at"] = r["at"].isoformat().replace("+00:00", "Z")
            out.append(b"\x00\x00\x00\x00\x01" + json.dumps(d, separators=(",", ":")).encode())

    sides = {"native Protobuf": native_pb, "Python Protobuf": python_pb, "native JSON": native_json}
    sides["Python json.dumps"] = python_json
    times: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(args.rounds):
        for name, fn in sides.items():
            t0 = time.process_time()
            fn()
            times[name].append(time.process_time() - t0)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), flush=True)
    print("\n| encoder | CPU s (median) | rows/s per core |\n|---|---|---|")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"| {name} | {med:.3f} | {args.rows / med:,.0f} |")


if __name__ == "__main__":
    main()
