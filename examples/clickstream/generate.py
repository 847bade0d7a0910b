"""Click events into a topic, as a web front end would send them.

    python examples/clickstream/generate.py [--bootstrap 127.0.0.1:9092] [--topic clicks]
                                            [--rate 500] [--duration 40] [--speedup 20]

Each event is a JSON value {"user": "u17", "page": "/pricing", "ms": 1700000000000}, keyed
by user (so one user's clicks stay in order in one partition), with the click time as
the record timestamp. The event clock runs --speedup times faster than the wall clock
and ends at "now", so a short run covers many minutes of clicks: with the defaults, 40 s
of generation are 13 minutes of event time. Pages follow a skewed popularity, so the
per-minute counts differ from page to page.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from broker.client import Producer

PAGES = ["/", "/pricing", "/docs", "/docs/spark", "/blog", "/signup", "/login", "/careers"]
WEIGHTS = [30, 12, 18, 9, 8, 5, 15, 3]


def generate(bootstrap: str, topic: str, rate: int, duration: float, speedup: float, seed: int = 1, stop=None) -> int:
    """Produces for `duration` seconds at about `rate` events/s; returns how many."""
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(200)]
    wall0 = time.time()
    event0_ms = int((wall0 - duration * speedup) * 1000)  # the event clock ends at "now"
    sent = 0
    with Producer(bootstrap, acks=-1, linger_ms=50) as producer:
        while True:
            elapsed = time.time() - wall0
            if elapsed >= duration or (stop is not None and stop.is_set()):
                break
            due = int(elapsed * rate)
            while sent < due:
                ms = event0_ms + int((time.time() - wall0) * speedup * 1000)
                user = rng.choice(users)
                event = {"user": user, "page": rng.choices(PAGES, WEIGHTS)[0], "ms": ms}
                producer.send(topic, json.dumps(event).encode(), key=user.encode(), timestamp=ms)
                sent += 1
            producer.poll()
            time.sleep(0.01)
        producer.flush()
    return sent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="clicks")
    ap.add_argument("--rate", type=int, default=500, help="events per second")
    ap.add_argument("--duration", type=float, default=40, help="seconds")
    ap.add_argument("--speedup", type=float, default=20, help="event-time seconds per wall-clock second")
    args = ap.parse_args()
    n = generate(args.bootstrap, args.topic, args.rate, args.duration, args.speedup)
    print(f"produced {n} click events to {args.topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
