"""One client phase (produce or consume N messages) against one server, run by run.py in
a subprocess so that every phase is bounded (run.py kills it past its time limit) and
the client's CPU is the worker's own:

    python worker.py '{"client": "redis-py", "phase": "produce", "n": 1000000, ...}'

The worker connects and prepares (topic/stream creation, consumer creation) first, then
measures: wall time, its own CPU time (/proc/self/stat: all threads, librdkafka's
included) and the CPU time of the server's process tree (/proc/<pid>/stat of the server
and its descendants), from just before the first message to the last acknowledgement
(produce) or the N-th message received (consume). It prints one JSON line:
{"count", "elapsed", "client_cpu", "server_cpu", "timeout", "error", "extra"}.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(os.path.dirname(HERE)))  # the project root, for `broker`

from common import cpu_delta, proc_cpu, tree_cpu  # noqa: E402

from tests.support.load import produce_n  # noqa: E402


class PhaseTimeout(Exception):
    pass


class Meter:
    def __init__(self, server_pid: int | None):
        self.server_pid = server_pid
        self.t0 = self.t1 = None
        self.count = 0
        self.extra: dict = {}

    def start(self) -> None:
        self.s0 = tree_cpu(self.server_pid) if self.server_pid else {}
        self.c0 = proc_cpu(os.getpid())
        self.t0 = time.perf_counter()

    def stop(self) -> None:
        if self.t0 is None or self.t1 is not None:
            return
        self.t1 = time.perf_counter()
        self.c1 = proc_cpu(os.getpid())
        self.s1 = tree_cpu(self.server_pid) if self.server_pid else {}

    def result(self) -> dict:
        if self.t0 is None:
            return {"count": self.count, "elapsed": 0.0, "client_cpu": 0.0, "server_cpu": 0.0}
        self.stop()
        return {
            "count": self.count,
            "elapsed": self.t1 - self.t0,
            "client_cpu": self.c1 - self.c0,
            "server_cpu": cpu_delta(self.s0, self.s1),
        }


def payload(size: int, seed: int = 42) -> bytes:
    """The perf tool's record value (broker.perf.produce.payload: random capital letters,
    the same for every record), repeated here so the peers' workers need not import
    `broker` (whose editable install checks the native build on import)."""
    import random

    rng = random.Random(seed)
    return bytes(rng.randrange(65, 91) for _ in range(size))


# ---- kbroker: the project's perf tool ------------------------------------------------------


def kbroker_perf_produce(s: dict, m: Meter, deadline: float) -> None:
    from broker.client import Cluster
    from broker.perf.produce import ProduceOptions, ensure_topic, run_produce

    c = Cluster(s["bootstrap"], client_id="peers-setup")
    try:
        ensure_topic(c, s["topic"], s["partitions"])
    finally:
        c.close()
    opts = ProduceOptions(
        s["bootstrap"],
        s["topic"],
        s["n"],
        s["size"],
        acks=s["acks"],
        batch_size=s["batch_size"],
        partitions=s["partitions"],
        max_inflight=s.get("max_inflight", 5),
        progress=False,
        timeout_s=max(1.0, deadline - time.monotonic()),
    )
    m.start()
    try:
        r = run_produce(opts, out=sys.stderr)
    except TimeoutError as exc:
        raise PhaseTimeout(str(exc)) from None
    m.stop()
    m.count = r["records"]
    m.extra = {"p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"]}


def kbroker_perf_consume(s: dict, m: Meter, deadline: float) -> None:
    from broker.perf.consume import ConsumeOptions, run_consume

    opts = ConsumeOptions(
        s["bootstrap"], s["topic"], s["n"], s["size"], progress=False, timeout_s=max(1.0, deadline - time.monotonic())
    )
    m.start()
    try:
        r = run_consume(opts, out=sys.stderr)
    except TimeoutError as exc:
        raise PhaseTimeout(str(exc)) from None
    m.stop()
    m.count = r["records"]


# ---- kbroker: confluent-kafka ----------------------------------------------------------------


def confluent_produce(s: dict, m: Meter, deadline: float) -> None:
    import confluent_kafka as ck

    from broker.client import Cluster
    from broker.perf.produce import ensure_topic

    c = Cluster(s["bootstrap"], client_id="peers-setup")
    try:
        ensure_topic(c, s["topic"], s["partitions"])
    finally:
        c.close()
    errors = []
    p = ck.Producer(
        {
            "bootstrap.servers": s["bootstrap"],
            "acks": s["acks"],
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2 << 20,
            "compression.type": "none",
            "delivery.report.only.error": True,
            "on_delivery": lambda err, msg: errors.append(err) if err else None,
        }
    )
    p.list_topics(s["topic"], timeout=30)  # connected before the clock starts
    value, topic, n = payload(s["size"]), s["topic"], s["n"]
    m.start()
    try:
        produce_n(p, topic, value, n, deadline)
    except TimeoutError as exc:
        raise PhaseTimeout(str(exc)) from None
    left = p.flush(max(0.1, deadline - time.monotonic()))
    m.stop()
    m.count = n - left - len(errors)
    if left:
        raise PhaseTimeout(f"{left} messages not delivered")
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")


def confluent_consume(s: dict, m: Meter, deadline: float) -> None:
    import confluent_kafka as ck

    c = ck.Consumer(
        {
            "bootstrap.servers": s["bootstrap"],
            "group.id": "peers-bench",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "max.partition.fetch.bytes": 1 << 20,
            "fetch.max.bytes": 64 << 20,
            "queued.min.messages": 1_000_000,
        }
    )
    try:
        c.assign([ck.TopicPartition(s["topic"], p, ck.OFFSET_BEGINNING) for p in range(s["partitions"])])
        n = s["n"]
        got = 0
        m.start()
        while got < n:
            if time.monotonic() > deadline:
                m.count = got
                raise PhaseTimeout(f"{got} consumed")
            for msg in c.consume(min(100_000, n - got), 1.0):  # a full count returns at once
                if not msg.error():
                    got += 1
        m.stop()
        m.count = got
    finally:
        c.close()


# ---- Redis Streams: redis-py (+ hiredis) ---------------------------------------------------------


def redis_produce(s: dict, m: Meter, deadline: float) -> None:
    import redis

    r = redis.Redis(host="127.0.0.1", port=s["port"], socket_timeout=60)
    r.ping()
    key, n, depth = s["stream"], s["n"], s["pipeline"]
    fields = {b"d": payload(s["size"])}
    m.start()
    sent = 0
    while sent < n:
        if time.monotonic() > deadline:
            raise PhaseTimeout(f"{sent} acknowledged")
        k = min(depth, n - sent)
        p = r.pipeline(transaction=False)
        for _ in range(k):
            p.xadd(key, fields)
        p.execute()  # raises on the first error reply
        sent += k
        m.count = sent
    m.stop()
    stored = r.xlen(key)
    if stored != n:
        raise RuntimeError(f"XLEN {stored} after {n} XADD")


def redis_consume(s: dict, m: Meter, deadline: float) -> None:
    import redis

    r = redis.Redis(host="127.0.0.1", port=s["port"], socket_timeout=60)
    r.ping()
    key, n, count = s["stream"], s["n"], s["count"]
    last = b"0-0"
    got = 0
    m.start()
    while got < n:
        if time.monotonic() > deadline:
            raise PhaseTimeout(f"{got} read")
        resp = r.xread({key: last}, count=min(count, n - got), block=1000)
        if not resp:
            continue
        entries = resp[0][1]
        got += len(entries)
        last = entries[-1][0]
        m.count = got
    m.stop()


# ---- NATS JetStream: nats-py ----------------------------------------------------------------


async def _nats_connect(s: dict):
    import nats

    return await nats.connect(
        f"nats://127.0.0.1:{s['port']}", pending_size=64 << 20, connect_timeout=10, allow_reconnect=False
    )


async def nats_produce(s: dict, m: Meter, deadline: float) -> None:
    """Publishes to the stream's subject with a reply subject, as js.publish does, but
    without awaiting each ack: acks (one per message, {"stream":..,"seq":..}) arrive on
    one inbox subscription and are counted; at most `window` messages are unacknowledged."""
    from nats.js.api import StorageType, StreamConfig

    nc = await _nats_connect(s)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=s["stream"], subjects=[s["stream"]], storage=StorageType.FILE))
        inbox = nc.new_inbox()
        n, window, subject, value = s["n"], s["window"], s["stream"], payload(s["size"])
        state = {"acked": 0, "errors": 0, "first_error": None}
        done = asyncio.Event()

        async def on_ack(msg):
            state["acked"] += 1
            if b'"error"' in msg.data or msg.header:
                state["errors"] += 1
                state["first_error"] = state["first_error"] or (msg.data[:200] or repr(msg.header))
            if state["acked"] >= n:
                done.set()

        await nc.subscribe(inbox, cb=on_ack, pending_msgs_limit=10 * n + 1000, pending_bytes_limit=1 << 30)
        await nc.flush()
        m.start()
        for i in range(n):
            await nc.publish(subject, value, reply=inbox)
            if i - state["acked"] >= window:
                while i - state["acked"] >= window // 2:
                    if time.monotonic() > deadline:
                        m.count = state["acked"]
                        raise PhaseTimeout(f"{state['acked']} acknowledged")
                    await asyncio.sleep(0.0005)
        try:
            await asyncio.wait_for(done.wait(), max(0.1, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            m.count = state["acked"]
            raise PhaseTimeout(f"{state['acked']} acknowledged") from None
        m.stop()
        m.count = state["acked"] - state["errors"]
        if state["errors"]:
            raise RuntimeError(f"{state['errors']} publish errors, first: {state['first_error']!r}")
        info = await js.stream_info(s["stream"])
        if info.state.messages != n:
            raise RuntimeError(f"stream holds {info.state.messages} after {n} acknowledged publishes")
    finally:
        await nc.close()


async def nats_consume(s: dict, m: Meter, deadline: float) -> None:
    """A durable pull consumer (AckPolicy none) read with pull requests of `batch`
    messages (two outstanding), as the JetStream API's fetch sends them, messages
    counted in a subscription callback."""
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    nc = await _nats_connect(s)
    try:
        js = nc.jetstream()
        name = "peers"
        await js.add_consumer(
            s["stream"], ConsumerConfig(durable_name=name, ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL)
        )
        inbox = nc.new_inbox()
        n, batch = s["n"], s["batch"]
        state = {"got": 0, "status": 0}

        async def on_msg(msg):
            if msg.header and not msg.data:  # 404 / 408 status messages
                state["status"] += 1
                return
            state["got"] += 1

        await nc.subscribe(inbox, cb=on_msg, pending_msgs_limit=4 * batch + 1000, pending_bytes_limit=1 << 30)
        req = json.dumps({"batch": batch, "expires": 5_000_000_000}).encode()
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{s['stream']}.{name}"
        requested = 0
        m.start()
        while state["got"] < n:
            if time.monotonic() > deadline:
                m.count = state["got"]
                raise PhaseTimeout(f"{state['got']} received")
            if state["status"]:  # an expired request: ask again
                requested = state["got"]
                state["status"] = 0
            while requested - state["got"] < 2 * batch and requested < n:
                await nc.publish(subject, req, reply=inbox)
                requested += batch
            await asyncio.sleep(0.001)
        m.stop()
        m.count = state["got"]
    finally:
        await nc.close()


# ---- RabbitMQ streams: rstream -----------------------------------------------------------------


async def rstream_produce(s: dict, m: Meter, deadline: float) -> None:
    from rstream import Producer

    n, batch, window, stream = s["n"], s["batch"], s["window"], s["stream"]
    value = payload(s["size"])
    state = {"confirmed": 0, "errors": 0, "first_error": None}
    async with Producer("127.0.0.1", s["port"], username="guest", password="guest") as p:
        await p.create_stream(stream, exists_ok=True)

        def on_confirm(status):
            if status.is_confirmed:
                state["confirmed"] += 1
            else:
                state["errors"] += 1
                state["first_error"] = state["first_error"] or status.response_code

        msgs = [value] * batch
        sent = 0
        m.start()
        while sent < n:
            k = min(batch, n - sent)
            await p.send_batch(stream, msgs if k == batch else msgs[:k], on_publish_confirm=on_confirm)
            sent += k
            while sent - state["confirmed"] - state["errors"] > window:
                if time.monotonic() > deadline:
                    m.count = state["confirmed"]
                    raise PhaseTimeout(f"{state['confirmed']} confirmed")
                await asyncio.sleep(0.0005)
        while state["confirmed"] + state["errors"] < n:
            if time.monotonic() > deadline:
                m.count = state["confirmed"]
                raise PhaseTimeout(f"{state['confirmed']} confirmed")
            await asyncio.sleep(0.0005)
        m.stop()
        m.count = state["confirmed"]
        if state["errors"]:
            raise RuntimeError(f"{state['errors']} publish errors, first code {state['first_error']}")


async def rstream_consume(s: dict, m: Meter, deadline: float) -> None:
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

    n, stream = s["n"], s["stream"]
    state = {"got": 0}
    done = asyncio.Event()

    def on_msg(msg, ctx):
        state["got"] += 1
        if state["got"] >= n:
            done.set()

    async with Consumer("127.0.0.1", s["port"], username="guest", password="guest") as c:
        m.start()
        await c.subscribe(
            stream,
            on_msg,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            initial_credit=s["credit"],
        )
        try:
            await asyncio.wait_for(done.wait(), max(0.1, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            m.count = state["got"]
            raise PhaseTimeout(f"{state['got']} received") from None
        m.stop()
        m.count = state["got"]


CLIENTS = {
    ("kbroker-perf", "produce"): kbroker_perf_produce,
    ("kbroker-perf", "consume"): kbroker_perf_consume,
    ("confluent", "produce"): confluent_produce,
    ("confluent", "consume"): confluent_consume,
    ("redis-py", "produce"): redis_produce,
    ("redis-py", "consume"): redis_consume,
    ("nats-py", "produce"): nats_produce,
    ("nats-py", "consume"): nats_consume,
    ("rstream", "produce"): rstream_produce,
    ("rstream", "consume"): rstream_consume,
}


def main() -> int:
    spec = json.loads(sys.argv[1])
    fn = CLIENTS[(spec["client"], spec["phase"])]
    deadline = time.monotonic() + spec["timeout_s"]
    m = Meter(spec.get("server_pid"))
    out = {"timeout": False, "error": None}
    try:
        if asyncio.iscoroutinefunction(fn):
            if spec.get("uvloop"):
                import uvloop

                uvloop.install()
            asyncio.run(asyncio.wait_for(fn(spec, m, deadline), spec["timeout_s"] + 5))
        else:
            fn(spec, m, deadline)
    except (PhaseTimeout, asyncio.TimeoutError) as exc:
        out["timeout"] = True
        out["error"] = (
            f"timeout after {spec['timeout_s']:.0f} s ({exc})"
            if str(exc)
            else f"timeout after {spec['timeout_s']:.0f} s"
        )
    except Exception as exc:  # noqa: BLE001 — reported in the table
        traceback.print_exc(file=sys.stderr)
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    out.update(m.result())
    out["extra"] = m.extra
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
