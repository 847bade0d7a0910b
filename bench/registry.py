"""The schema registry's speed: look-ups of schemas by id and registrations, per second,
with their latency, from 50 concurrent clients (issue 37's goal: an id look-up's p99 at
most 1 ms at 5,000 requests/s on one core).

    .venv/bin/python bench/registry.py [--clients 50] [--rates 1000,2500,5000,7500]
                                       [--seconds 10] [--register-seconds 10] [--schemas 200]

One `broker serve` with `schema.registry.listener`, pinned to core 0 (taskset; its every
thread), this load generator on core 1 (uvloop when installed). The registry holds
--schemas Avro schemas. Then:

- id look-ups, open loop: for each rate of --rates, --clients persistent HTTP/1.1
  connections each send GET /schemas/ids/<random id> on a fixed schedule (the rate spread
  over them), for --seconds; a request's latency runs from the moment it was due (not
  from when it was sent: a late request counts its wait — no coordinated omission) to its
  answer. Prints the rate achieved and p50, p99, p99.9 and the worst latency;
- id look-ups, closed loop: the clients send back to back: the most the broker's core
  answers;
- (with --nice N both run at niceness N: on a machine busy with other work, what the
  cores give them when they come first)
- registrations, closed loop: the clients register new schemas (each its own subject,
  a new version each time, BACKWARD-compatible), for --register-seconds: registrations/s
  and their latency (each is appended to `_schemas` with acks=all, fsync as the broker's
  defaults, and read back by the registry's view before it is answered).

The broker logs to a file beside its data; nothing is left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.ports import free_port, wait_port  # noqa: E402

BROKER_CORE, GENERATOR_CORE = 0, 1


class Conn(asyncio.Protocol):
    """One persistent connection: a request at a time, its answer's end found by
    Content-Length."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.waiter: asyncio.Future[int] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buf[:end]).lower()
        i = head.find(b"content-length:")
        length = int(head[i + 15 : head.find(b"\r\n", i) if head.find(b"\r\n", i) > 0 else None])
        if len(self.buf) < end + 4 + length:
            return
        status = int(self.buf[9:12])
        del self.buf[: end + 4 + length]
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(status)

    async def request(self, data: bytes) -> int:
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return await self.waiter


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: registry\r\n\r\n".encode()


def post(path: str, body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: registry\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode() + data


def schema(name: str, fields: int) -> str:
    return json.dumps(
        {
            "type": "record",
            "name": name,
            "fields": [{"name": f"f{i}", "type": "long", **({"default": 0} if i else {})} for i in range(fields)],
        }
    )


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


async def connect(port: int, n: int) -> list[Conn]:
    loop = asyncio.get_running_loop()
    out = []
    for _ in range(n):
        _t, proto = await loop.create_connection(Conn, "127.0.0.1", port)
        out.append(proto)
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (every thread), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def open_loop(
    conns: list[Conn], ids: list[int], rate: float, seconds: float
) -> tuple[float, list[float], list[float]]:
    """Requests due at a fixed rate, spread over the connections: (rate achieved, latency
    from the moment each was due, latency from the moment each was sent)."""
    clock = time.perf_counter
    due_lat: list[float] = []
    sent_lat: list[float] = []
    per_conn = rate / len(conns)
    start = clock() + 0.05
    end = start + seconds
    rng = random.Random(1)

    async def run(c: Conn, offset: float) -> None:
        due = start + offset
        while due < end:
            now = clock()
            if due - now > 0.0005:
                await asyncio.sleep(due - now - 0.0005)  # the loop's timers are ms-grained
            while clock() < due:
                await asyncio.sleep(0)
            sent = clock()
            status = await c.request(get(f"/schemas/ids/{rng.choice(ids)}"))
            assert status == 200, status
            t = clock()
            due_lat.append(t - due)
            sent_lat.append(t - sent)
            due += 1 / per_conn

    await asyncio.gather(*(run(c, i / rate) for i, c in enumerate(conns)))
    return len(sent_lat) / (clock() - start), due_lat, sent_lat


async def closed_loop(conns: list[Conn], make, seconds: float) -> tuple[float, list[float]]:
    clock = time.perf_counter
    lat: list[float] = []
    start = clock()
    end = start + seconds

    async def run(i: int, c: Conn) -> None:
        n = 0
        while clock() < end:
            t = clock()
            status = await c.request(make(i, n))
            assert status == 200, status
            lat.append(clock() - t)
            n += 1

    await asyncio.gather(*(run(i, c) for i, c in enumerate(conns)))
    return len(lat) / (clock() - start), lat


def line(what: str, rate: float, lat: list[float], cpu: float) -> str:
    ms = [x * 1000 for x in lat]
    return (
        f"{what:<38} {rate:7.0f}/s  p50 {pct(ms, 0.5):6.3f}  p99 {pct(ms, 0.99):7.3f}  "
        f"p99.9 {pct(ms, 0.999):7.3f}  max {max(ms):7.2f} ms   broker {cpu * 1e6 / max(len(lat), 1):4.0f} "
        f"us CPU/request"
    )


async def main_async(args, port: int, broker_pid: int) -> None:
    setup = (await connect(port, 1))[0]
    ids = []
    for i in range(args.schemas):
        status = await setup.request(post(f"/subjects/bench-{i}-value/versions", {"schema": schema(f"S{i}", 3)}))
        assert status == 200
    for i in range(args.schemas):
        ids.append(i + 1)
    conns = await connect(port, args.clients)
    print(
        f"{args.clients} clients, {args.schemas} schemas; broker on core {BROKER_CORE}, generator on core "
        f"{GENERATOR_CORE}"
    )
    print(f"load average before: {os.getloadavg()}")
    print("latencies in ms; open loop: from when each request was due / from when it was sent")
    await open_loop(conns, ids, 500, 2.0)  # warm up
    for rate in args.rates:
        cpu = cpu_seconds(broker_pid)
        achieved, due_lat, sent_lat = await open_loop(conns, ids, rate, args.seconds)
        cpu = cpu_seconds(broker_pid) - cpu
        print(line(f"GET /schemas/ids/N at {rate:.0f}/s, due", achieved, due_lat, cpu), flush=True)
        print(line(f"GET /schemas/ids/N at {rate:.0f}/s, sent", achieved, sent_lat, cpu), flush=True)
    rng = random.Random(2)
    cpu = cpu_seconds(broker_pid)
    achieved, lat = await closed_loop(conns, lambda i, n: get(f"/schemas/ids/{rng.choice(ids)}"), args.seconds)
    print(line("GET /schemas/ids/N, back to back", achieved, lat, cpu_seconds(broker_pid) - cpu), flush=True)
    cpu = cpu_seconds(broker_pid)
    achieved, lat = await closed_loop(
        conns,
        lambda i, n: post(f"/subjects/reg-{i}-value/versions", {"schema": schema(f"R{i}", n + 1)}),
        args.register_seconds,
    )
    print(line("POST /subjects/S/versions", achieved, lat, cpu_seconds(broker_pid) - cpu), flush=True)
    print(f"load average after: {os.getloadavg()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rates", default="1000,2500,5000,7500")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--register-seconds", type=float, default=10.0)
    ap.add_argument("--schemas", type=int, default=200)
    ap.add_argument(
        "--nice",
        type=int,
        default=0,
        help="run the broker and the generator at this niceness (e.g. -10, as root: ahead of other work on the cores)",
    )
    args = ap.parse_args()
    args.rates = [float(r) for r in args.rates.split(",")]
    if shutil.which("taskset") is None:
        sys.exit("taskset is needed (util-linux)")
    d = tempfile.mkdtemp(prefix="kbroker-registry-bench-")
    kafka, registry = free_port(), free_port()
    log = open(os.path.join(d, "broker.log"), "wb")
    nice = ["nice", "-n", str(args.nice)] if args.nice else []
    if args.nice:
        os.nice(args.nice)
    broker = subprocess.Popen(
        [
            *nice,
            "taskset",
            "-c",
            str(BROKER_CORE),
            sys.executable,
            "-m",
            "broker.cli.main",
            "serve",
            "--data-dir",
            os.path.join(d, "data"),
            "--listen",
            f"127.0.0.1:{kafka}",
            "--set",
            f"schema.registry.listener=127.0.0.1:{registry}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        if not wait_port("127.0.0.1", registry, 60):
            sys.exit("the broker did not start")
        os.sched_setaffinity(0, {GENERATOR_CORE})
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
        asyncio.run(main_async(args, registry, broker.pid))
    finally:
        broker.terminate()
        broker.wait(30)
        log.close()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
