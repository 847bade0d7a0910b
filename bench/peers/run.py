"""Peer comparison: the same workload (N messages of S bytes, produced then consumed) on
kbroker and on Redis Streams, NATS JetStream and RabbitMQ streams, next to the machine's
disk and loopback limits. One run, one table.

    .venv/bin/python bench/peers/run.py                      # 1,000,000 x 100 B, everything
    .venv/bin/python bench/peers/run.py --messages 100000    # quick check
    .venv/bin/python bench/peers/run.py --only kbroker,redis --no-install --out /tmp/x

Each system: install what is missing (Debian packages when root, PyPI client libraries
into this interpreter's environment), start the server on free loopback ports with its
data in a temp dir, run every client phase in a subprocess (worker.py) bounded in time,
stop the server and everything it spawned, delete the temp dir. A system that cannot be
installed or started is reported as "unavailable: <reason>" and the run goes on.

Writes the Markdown table to OUT/peers.md and one CSV row per phase to OUT/peers.csv
(OUT defaults to bench/results), and prints the table.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib.metadata
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(1, ROOT)

from common import RssSampler, machine_info  # noqa: E402
from servers import NatsServer, RabbitServer, RedisServer  # noqa: E402

NOT_RUN = {"ok": False, "count": 0, "error": "not run (produce failed)"}

SYSTEMS = ["kbroker", "kbroker-durable", "redis", "nats", "rabbitmq", "limits"]

APT = {  # system -> [(binary, Debian package)]
    "redis": [("redis-server", "redis-server"), ("redis-benchmark", "redis-tools")],
    "nats": [("nats-server", "nats-server")],
    "rabbitmq": [("/usr/lib/rabbitmq/bin/rabbitmq-server", "rabbitmq-server")],
    "limits": [("fio", "fio"), ("iperf3", "iperf3")],
}
PIP = {  # system -> [(module, requirement)]; the same as the `peers` extra
    "kbroker": [("confluent_kafka", "confluent-kafka>=2.3,<3")],
    "redis": [("redis", "redis>=5,<9"), ("hiredis", "hiredis>=2,<4")],
    "nats": [("nats", "nats-py>=2.6,<3")],
    "rabbitmq": [("rstream", "rstream>=0.20,<2")],
}


def log(msg: str) -> None:
    print(f"[peers {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- installation -------------------------------------------------------------------------------


def _have(binary: str) -> bool:
    return os.path.exists(binary) if binary.startswith("/") else shutil.which(binary) is not None


def install(systems: list[str], allow: bool) -> dict[str, str]:
    """Installs what the selected systems miss; returns {system: reason} for those that
    still miss something."""
    missing_apt = {s: [pkg for binary, pkg in APT.get(s, []) if not _have(binary)] for s in systems}
    pkgs = sorted({p for ps in missing_apt.values() for p in ps})
    problems: dict[str, str] = {}
    if pkgs and allow and os.geteuid() == 0 and shutil.which("apt-get"):
        log(f"apt-get install {' '.join(pkgs)}")
        err = _apt_install(pkgs)
        if err:
            log(f"apt-get failed: {err}")
    for s in systems:
        still = [pkg for binary, pkg in APT.get(s, []) if not _have(binary)]
        if still:
            why = (
                "not installed"
                if allow and os.geteuid() == 0
                else "not installed (apt-get needs root)"
                if allow
                else "not installed (--no-install)"
            )
            problems[s] = f"{', '.join(still)} {why}"
    missing_pip = sorted({req for s in systems for mod, req in PIP.get(s, []) if importlib.util.find_spec(mod) is None})
    if missing_pip and allow:
        log(f"pip install {' '.join(missing_pip)}")
        try:
            out = subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", *missing_pip],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if out.returncode != 0:
                log(f"pip failed: {out.stderr.strip()[-300:]}")
        except subprocess.TimeoutExpired:
            log("pip install timed out")
        importlib.invalidate_caches()
    for s in systems:
        still = [req.split(">")[0] for mod, req in PIP.get(s, []) if importlib.util.find_spec(mod) is None]
        if still:
            why = "" if allow else " (--no-install)"
            problems[s] = "; ".join(
                filter(None, [problems.get(s), f"Python package {', '.join(still)} not installed{why}"])
            )
    return problems


def _apt_install(pkgs: list[str]) -> str | None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # no service may start on its own during the install (a package's postinst would start
    # redis/rabbitmq on their default ports): deny it unless a policy already exists
    policy = "/usr/sbin/policy-rc.d"
    made_policy = False
    if not os.path.exists(policy):
        with open(policy, "w") as f:
            f.write("#!/bin/sh\nexit 101\n")
        os.chmod(policy, 0o755)
        made_policy = True
    try:
        cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *pkgs]
        for attempt in range(2):
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
            except subprocess.TimeoutExpired:
                return "timed out"
            if out.returncode == 0:
                return None
            if attempt == 0:  # stale package lists: update once, retry
                subprocess.run(["apt-get", "update", "-q"], capture_output=True, timeout=600, env=env)
        return out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"
    finally:
        if made_policy:
            os.unlink(policy)


def _pkg_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


# ---- phases ---------------------------------------------------------------------------------


class Runner:
    def __init__(self, args, tmp: str):
        self.args = args
        self.tmp = tmp
        self.rows: list[dict] = []

    def worker(self, spec: dict, server_pid: int | None) -> dict:
        """Runs one client phase in worker.py; kills it if it outlives the phase limit."""
        a = self.args
        spec = {
            "n": a.messages,
            "size": a.size,
            "timeout_s": a.phase_timeout,
            "server_pid": server_pid,
            "uvloop": a.uvloop,
            **spec,
        }
        cmd = [sys.executable, os.path.join(HERE, "worker.py"), json.dumps(spec)]
        errpath = os.path.join(self.tmp, "worker.err")
        with open(errpath, "w") as err, RssSampler(server_pid) as rss:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT)
            try:
                out, _ = p.communicate(timeout=a.phase_timeout + 60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate(timeout=30)
                return {
                    "count": 0,
                    "elapsed": 0.0,
                    "client_cpu": 0.0,
                    "server_cpu": 0.0,
                    "timeout": True,
                    "error": f"timeout: worker killed after {a.phase_timeout + 60:.0f} s",
                    "peak_rss_mb": rss.peak_mb,
                }
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if not lines:
            with open(errpath, errors="replace") as f:
                tail = f.read().strip().splitlines()[-1:] or [f"exit {p.returncode}"]
            return {
                "count": 0,
                "elapsed": 0.0,
                "client_cpu": 0.0,
                "server_cpu": 0.0,
                "timeout": False,
                "error": f"worker failed: {tail[0][:300]}",
                "peak_rss_mb": rss.peak_mb,
            }
        r = json.loads(lines[-1])
        r["peak_rss_mb"] = rss.peak_mb
        if r.get("error"):
            with open(errpath, errors="replace") as f:
                tail = f.read().strip()
            if tail:
                log("worker stderr: " + tail[-1500:])
        return r

    def phase(self, label: str, phase: str, r: dict) -> dict:
        n = self.args.messages
        r = dict(r)
        r["phase"] = phase
        el = r.get("elapsed") or 0.0
        if el > 0 and r.get("count"):
            r["msg_s"] = r["count"] / el
            r["mb_s"] = r["msg_s"] * self.args.size / 1e6
            r["client_frac"] = r.get("client_cpu", 0.0) / el
            r["server_frac"] = r.get("server_cpu", 0.0) / el
        ok = not r.get("error") and r.get("count", 0) >= n
        r["ok"] = ok
        if ok:
            log(
                f"{label} {phase}: {r['msg_s']:,.0f} msg/s, {r['mb_s']:.1f} MB/s in {el:.2f} s "
                f"(client {100 * r['client_frac']:.0f}%, server {100 * r['server_frac']:.0f}% of a core)"
            )
        else:
            log(f"{label} {phase}: FAILED {r.get('error') or 'short count'} ({r.get('count', 0):,} of {n:,})")
        return r

    def add(
        self,
        system: str,
        client: str,
        durability: str,
        produce: dict | None = None,
        consume: dict | None = None,
        unavailable: str | None = None,
        kind: str = "broker",
        key: str = "",
        note: str = "",
    ) -> None:
        self.rows.append(
            {
                "system": system,
                "client": client,
                "durability": durability,
                "produce": produce,
                "consume": consume,
                "unavailable": unavailable,
                "kind": kind,
                "key": key,
                "note": note,
            }
        )

    # -- kbroker

    def kbroker(self, durable: bool) -> None:
        from broker.perf.local import LocalBroker

        a = self.args
        version = _pkg_version("kbroker")
        config = {"num.partitions": a.partitions}
        if durable:
            config["log.flush.interval.messages"] = 1
        name = f"kbroker {version}"
        bs = a.perf_batch_size
        size = f"{bs >> 20} MiB" if bs % (1 << 20) == 0 else f"{bs / 1024:g} KiB"
        perf_client = (
            f"broker perf (batches of {size}, 5 in flight, {a.partitions} partition{'s' if a.partitions > 1 else ''})"
        )
        dur = (
            "acks=all; fsync before the ack (log.flush.interval.messages=1, group commit)"
            if durable
            else "acks=1; page cache, fsync only when a segment rolls (Kafka defaults)"
        )
        kb_tmp = tempfile.mkdtemp(prefix="kbroker-", dir=self.tmp)
        try:
            with LocalBroker(config=config, data_dir=os.path.join(kb_tmp, "data")) as b:
                pid = b.pid
                base = {"bootstrap": b.bootstrap, "partitions": a.partitions}
                acks = -1 if durable else 1
                prod = self.phase(
                    name,
                    "produce",
                    self.worker(
                        {
                            **base,
                            "client": "kbroker-perf",
                            "phase": "produce",
                            "topic": "perf",
                            "acks": acks,
                            "batch_size": bs,
                        },
                        pid,
                    ),
                )
                cons = (
                    self.phase(
                        name,
                        "consume",
                        self.worker({**base, "client": "kbroker-perf", "phase": "consume", "topic": "perf"}, pid),
                    )
                    if prod["ok"]
                    else dict(NOT_RUN)
                )
                self.add(
                    name,
                    perf_client + (", acks=all" if durable else ", acks=1"),
                    dur,
                    prod,
                    cons,
                    key="kbroker-durable" if durable else "kbroker-perf",
                )
                if durable:
                    return
                ck = f"confluent-kafka {_pkg_version('confluent-kafka')}"
                prod = self.phase(
                    name,
                    "produce (confluent)",
                    self.worker(
                        {**base, "client": "confluent", "phase": "produce", "topic": "confluent", "acks": 1}, pid
                    ),
                )
                cons = (
                    self.phase(
                        name,
                        "consume (confluent)",
                        self.worker({**base, "client": "confluent", "phase": "consume", "topic": "confluent"}, pid),
                    )
                    if prod["ok"]
                    else dict(NOT_RUN)
                )
                self.add(
                    name,
                    f"{ck} (acks=1, linger.ms=5, batch.size=1 MiB; one produce()/message)",
                    dur,
                    prod,
                    cons,
                    key="kbroker-confluent",
                )
        except Exception as exc:  # noqa: BLE001
            self.add(
                name,
                perf_client,
                dur,
                unavailable=f"{type(exc).__name__}: {exc}"[:200],
                key="kbroker-durable" if durable else "kbroker-perf",
            )
        finally:
            shutil.rmtree(kb_tmp, ignore_errors=True)

    # -- Redis

    def redis(self) -> None:
        a = self.args
        dur = "AOF, appendfsync everysec (fsync ≤ 1 s after the reply)"
        client = (
            f"redis-py {_pkg_version('redis')} + hiredis: XADD in pipelines of {a.redis_pipeline:,}, "
            f"XREAD COUNT {a.redis_count:,}"
        )
        try:
            with RedisServer(self.tmp) as s:
                name = f"Redis {s.version} Streams"
                base = {"port": s.port, "stream": "bench"}
                prod = self.phase(
                    name,
                    "produce",
                    self.worker(
                        {**base, "client": "redis-py", "phase": "produce", "pipeline": a.redis_pipeline}, s.pid
                    ),
                )
                cons = (
                    self.phase(
                        name,
                        "consume",
                        self.worker({**base, "client": "redis-py", "phase": "consume", "count": a.redis_count}, s.pid),
                    )
                    if prod["ok"]
                    else dict(NOT_RUN)
                )
                self.add(name, client, dur, prod, cons, key="redis")
                if a.no_redis_benchmark:
                    return
                from limits import redis_benchmark
                from worker import payload

                try:
                    rb = redis_benchmark(
                        s.port, a.messages, payload(a.size), s.pid, a.phase_timeout, 1000, a.redis_count
                    )
                    self.add(
                        name,
                        f"redis-benchmark (C, 1 connection): XADD -P 1000; "
                        f"XRANGE - + COUNT {a.redis_count:,} -P 4 (re-reads the head)",
                        dur,
                        self.phase(name + " redis-benchmark", "produce", rb["produce"]),
                        self.phase(name + " redis-benchmark", "consume", rb["consume"]),
                        key="redis-benchmark",
                    )
                except RuntimeError as exc:
                    self.add(name, "redis-benchmark", dur, unavailable=str(exc), key="redis-benchmark")
        except Exception as exc:  # noqa: BLE001
            self.add("Redis Streams", client, dur, unavailable=f"{exc}"[:200], key="redis")

    # -- NATS

    def nats(self) -> None:
        a = self.args
        dur = "JetStream file store; ack after the write to the OS, fsync every 2 min (default)"
        client = (
            f"nats-py {_pkg_version('nats-py')}: publish with reply inbox, {a.nats_window:,} acks "
            f"outstanding; pull requests of {a.nats_batch:,} (AckNone)" + (", uvloop" if a.uvloop else "")
        )
        try:
            with NatsServer(self.tmp) as s:
                name = f"NATS {s.version} JetStream"
                base = {"port": s.port, "stream": "bench"}
                prod = self.phase(
                    name,
                    "produce",
                    self.worker({**base, "client": "nats-py", "phase": "produce", "window": a.nats_window}, s.pid),
                )
                cons = (
                    self.phase(
                        name,
                        "consume",
                        self.worker({**base, "client": "nats-py", "phase": "consume", "batch": a.nats_batch}, s.pid),
                    )
                    if prod["ok"]
                    else dict(NOT_RUN)
                )
                self.add(name, client, dur, prod, cons, key="nats")
        except Exception as exc:  # noqa: BLE001
            self.add("NATS JetStream", client, dur, unavailable=f"{exc}"[:200], key="nats")

    # -- RabbitMQ

    def rabbitmq(self) -> None:
        a = self.args
        dur = "stream, single node; confirm after the chunk is written to the segment file, no fsync"
        client = (
            f"rstream {_pkg_version('rstream')}: send_batch of {a.rabbit_batch:,}, "
            f"{a.rabbit_window:,} unconfirmed; subscribe, credit {a.rabbit_credit}" + (", uvloop" if a.uvloop else "")
        )
        try:
            with RabbitServer(self.tmp) as s:
                name = f"RabbitMQ {s.version} streams"
                log(f"{name} (Erlang {s.erlang}) up after {s.startup_s:.1f} s")
                base = {"port": s.port, "stream": "bench"}
                prod = self.phase(
                    name,
                    "produce",
                    self.worker(
                        {
                            **base,
                            "client": "rstream",
                            "phase": "produce",
                            "batch": a.rabbit_batch,
                            "window": a.rabbit_window,
                        },
                        s.pid,
                    ),
                )
                cons = (
                    self.phase(
                        name,
                        "consume",
                        self.worker(
                            {**base, "client": "rstream", "phase": "consume", "credit": a.rabbit_credit}, s.pid
                        ),
                    )
                    if prod["ok"]
                    else dict(NOT_RUN)
                )
                self.add(name, client, dur, prod, cons, key="rabbitmq")
        except Exception as exc:  # noqa: BLE001
            self.add("RabbitMQ streams", client, dur, unavailable=f"{exc}"[:200], key="rabbitmq")

    # -- physical limits

    def limits(self) -> None:
        from limits import disk_write, loopback

        a = self.args
        try:
            r = loopback(a.iperf_seconds, a.phase_timeout, self.tmp)
            log(
                f"loopback: {r['mb_s']:,.0f} MB/s (client {100 * r['client_frac']:.0f}%, "
                f"server {100 * r['server_frac']:.0f}%)"
            )
            self.add(
                "loopback TCP (limit)",
                f"{r['tool']}, 1 stream, {a.iperf_seconds} s",
                "—",
                {
                    "phase": "produce",
                    "ok": True,
                    "mb_s": r["mb_s"],
                    "msg_s": r["mb_s"] * 1e6 / a.size,
                    "elapsed": r["elapsed"],
                    "client_frac": r["client_frac"],
                    "server_frac": r["server_frac"],
                    "count": 0,
                },
                kind="limit",
                key="loopback",
                note="MB/s of TCP payload; msg/s = the same bytes in 100-byte messages",
            )
        except Exception as exc:  # noqa: BLE001
            self.add("loopback TCP (limit)", "iperf3", "—", unavailable=str(exc)[:200], kind="limit", key="loopback")
        try:
            r = disk_write(self.tmp, a.disk_mb, a.phase_timeout)
            log(f"disk: {r['mb_s']:,.0f} MB/s, fdatasync {r['sync_lat_ms']:.2f} ms avg ({r['tool']})")
            per_block = (
                "fdatasync after each 1 MiB write" if r["tool"].startswith("fio") else "one fdatasync at the end"
            )
            self.add(
                "disk sequential write (limit)",
                f"{r['tool']}, {r['io_mb']:,.0f} MB in 1 MiB writes, {per_block}"
                + (
                    f"; fdatasync {r['sync_lat_ms']:.2f} ms avg, p99 {r['sync_p99_ms']:.2f} ms"
                    if r["sync_lat_ms"]
                    else ""
                ),
                "every block synced",
                {
                    "phase": "produce",
                    "ok": True,
                    "mb_s": r["mb_s"],
                    "msg_s": r["mb_s"] * 1e6 / a.size,
                    "elapsed": r["elapsed"],
                    "client_frac": r["client_cpu"] / max(r["wall"], 1e-9),
                    "server_frac": None,
                    "count": 0,
                    "sync_lat_ms": r["sync_lat_ms"],
                },
                kind="limit",
                key="disk",
                note="temp dir on the same file system as the servers' data",
            )
        except Exception as exc:  # noqa: BLE001
            self.add(
                "disk sequential write (limit)", "fio / dd", "—", unavailable=str(exc)[:200], kind="limit", key="disk"
            )


# ---- report ---------------------------------------------------------------------------------


def _num(x: float | None, digits: int = 0) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def _bound(r: dict | None) -> str:
    if not r or not r.get("ok") or r.get("client_frac") is None:
        return "—"
    c, s = r["client_frac"], r.get("server_frac")
    if s is None:
        return f"disk (writer {100 * c:.0f}% CPU)"
    side = "client" if c >= s else "server"
    tail = "; neither near a core" if max(c, s) < 0.6 else ""
    return f"{side} ({100 * c:.0f}% / {100 * s:.0f}%{tail})"


def _cells(r: dict | None) -> tuple[str, str]:
    if r is None:
        return "—", "—"
    if not r.get("ok"):
        err = r.get("error") or f"{r.get('count', 0):,} of N"
        return err.replace("|", "/")[:120], "—"
    return _num(r.get("msg_s")), _num(r.get("mb_s"), 1)


def render(rows: list[dict], args, info: dict, started: str, wall: float) -> str:
    ref = next((r for r in rows if r["key"] == "kbroker-perf" and not r["unavailable"]), None)

    def ratio(row, phase):
        r, base = row.get(phase), (ref or {}).get(phase)
        if not r or not base or not r.get("ok") or not base.get("ok") or not r.get("mb_s") or not base.get("mb_s"):
            return "—"
        return f"{r['mb_s'] / base['mb_s']:.2f}×"

    out = []
    out.append(
        f"Workload: {args.messages:,} messages of {args.size} bytes, produced then consumed, one stream/topic "
        f"({args.partitions} partition{'s' if args.partitions > 1 else ''} for kbroker), one producer and "
        f"one consumer connection, every server on 127.0.0.1 started by the script. Run {started}, "
        f"{wall / 60:.1f} min.\n"
    )
    out.append(
        "| system | client | durability | produce msg/s | produce MB/s | consume msg/s | consume MB/s "
        "| vs kbroker perf acks=1 (produce / consume) | CPU-bound, produce (client % / server % of a core) "
        "| CPU-bound, consume |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        if row["unavailable"]:
            out.append(
                f"| {row['system']} | {row['client']} | {row['durability']} | "
                f"unavailable: {row['unavailable'].replace('|', '/')} | — | — | — | — | — | — |"
            )
            continue
        pm, pb = _cells(row["produce"])
        cm, cb = _cells(row["consume"])
        if row["kind"] == "limit":
            pm = f"≈ {pm} (100 B equiv.)" if pm != "—" else pm
        out.append(
            f"| {row['system']} | {row['client']} | {row['durability']} | {pm} | {pb} | {cm} | {cb} | "
            f"{ratio(row, 'produce')} / {ratio(row, 'consume')} | {_bound(row['produce'])} | "
            f"{_bound(row['consume'])} |"
        )
    cores = info["cores"]
    out.append("")
    out.append(
        f"Machine: {cores} cores ({info['cpu_model']}{', ' + info['cpu_flags'] if info['cpu_flags'] else ''}), "
        f"{info['ram_gib']} GiB RAM, kernel {info['kernel']}, {info['distro']}, Python {info['python']}; "
        f"load average at start {info['loadavg']}. **Client and server share the same {cores} cores** "
        f"(nothing is pinned), so a side that uses a whole core leaves one core for the other and "
        f"for everything else on the machine."
    )
    out.append("")
    out.append(
        f"MB/s = message payload only (msg/s × {args.size} bytes). Ratios are MB/s over kbroker's perf-tool row "
        "(acks=1). CPU-bound: which of client and server used more of a core over the phase (CPU time from "
        "/proc/<pid>/stat: the worker process for the client, the server's process tree for the server, "
        'divided by the phase\'s wall time); "neither near a core" means both stayed under 60%, i.e. the '
        "phase waited (disk sync, round trips, the other tenants of the machine)."
    )
    notes = [r for r in rows if r.get("note") and not r["unavailable"]]
    for r in notes:
        out.append(f"- {r['system']}: {r['note']}")
    return "\n".join(out) + "\n"


CSV_FIELDS = [
    "system",
    "client",
    "durability",
    "phase",
    "status",
    "messages",
    "elapsed_s",
    "msg_per_s",
    "mb_per_s",
    "client_cpu_s",
    "server_cpu_s",
    "client_cores",
    "server_cores",
    "cpu_bound",
    "server_peak_rss_mb",
    "ratio_to_kbroker_perf",
    "error",
    "extra",
]


def write_csv(path: str, rows: list[dict]) -> None:
    ref = next((r for r in rows if r["key"] == "kbroker-perf" and not r["unavailable"]), None)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for row in rows:
            base = {"system": row["system"], "client": row["client"], "durability": row["durability"]}
            if row["unavailable"]:
                w.writerow({**base, "status": "unavailable", "error": row["unavailable"]})
                continue
            for phase in ("produce", "consume"):
                r = row.get(phase)
                if r is None:
                    continue
                refp = (ref or {}).get(phase) or {}
                ratio = (r["mb_s"] / refp["mb_s"]) if r.get("ok") and r.get("mb_s") and refp.get("mb_s") else ""
                w.writerow(
                    {
                        **base,
                        "phase": phase,
                        "status": "ok" if r.get("ok") else ("timeout" if r.get("timeout") else "failed"),
                        "messages": r.get("count", ""),
                        "elapsed_s": _r(r.get("elapsed"), 4),
                        "msg_per_s": _r(r.get("msg_s"), 1),
                        "mb_per_s": _r(r.get("mb_s"), 3),
                        "client_cpu_s": _r(r.get("client_cpu"), 3),
                        "server_cpu_s": _r(r.get("server_cpu"), 3),
                        "client_cores": _r(r.get("client_frac"), 3),
                        "server_cores": _r(r.get("server_frac"), 3),
                        "cpu_bound": _bound(r).split(" ")[0] if r.get("ok") else "",
                        "server_peak_rss_mb": _r(r.get("peak_rss_mb"), 1),
                        "ratio_to_kbroker_perf": _r(ratio, 4),
                        "error": r.get("error") or "",
                        "extra": json.dumps({k: v for k, v in (r.get("extra") or {}).items()})
                        if r.get("extra")
                        else "",
                    }
                )


def _r(x, digits):
    return "" if x is None or x == "" else round(x, digits)


# ---- main ---------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", "-n", type=int, default=1_000_000, help="messages per run (default 1,000,000)")
    ap.add_argument("--size", type=int, default=100, help="message payload bytes (default 100)")
    ap.add_argument(
        "--quick", action="store_true", help="a quick check: 100,000 messages, 256 MB disk write, 2 s of iperf3"
    )
    ap.add_argument("--only", help=f"comma-separated subset of {','.join(SYSTEMS)}")
    ap.add_argument("--skip", help="comma-separated systems to leave out")
    ap.add_argument("--partitions", type=int, default=1, help="kbroker topic partitions (default 1, as one stream)")
    ap.add_argument("--perf-batch-size", type=int, default=1 << 20, help="broker perf batch bytes (default 1 MiB)")
    ap.add_argument("--redis-pipeline", type=int, default=5000, help="XADDs per pipeline (default 5,000)")
    ap.add_argument("--redis-count", type=int, default=10000, help="XREAD COUNT (default 10,000)")
    ap.add_argument("--no-redis-benchmark", action="store_true", help="leave out the redis-benchmark row")
    ap.add_argument("--nats-window", type=int, default=20000, help="unacknowledged publishes (default 20,000)")
    ap.add_argument("--nats-batch", type=int, default=10000, help="messages per pull request (default 10,000)")
    ap.add_argument("--rabbit-batch", type=int, default=5000, help="messages per send_batch (default 5,000)")
    ap.add_argument("--rabbit-window", type=int, default=50000, help="unconfirmed messages (default 50,000)")
    ap.add_argument("--rabbit-credit", type=int, default=50, help="stream subscription credit (default 50)")
    ap.add_argument("--uvloop", action="store_true", help="run the asyncio clients (nats-py, rstream) on uvloop")
    ap.add_argument("--disk-mb", type=int, default=1024, help="fio/dd write size in MiB (default 1024)")
    ap.add_argument("--iperf-seconds", type=int, default=5, help="iperf3 duration (default 5)")
    ap.add_argument("--phase-timeout", type=float, default=300.0, help="limit per phase in seconds (default 300)")
    ap.add_argument("--no-install", action="store_true", help="install nothing; missing systems are unavailable")
    ap.add_argument("--tmpdir", help="where the servers' temp dirs go (default: the system temp dir)")
    ap.add_argument(
        "--out",
        default=os.path.join(ROOT, "bench", "results"),
        help="directory for peers.md and peers.csv (default bench/results)",
    )
    args = ap.parse_args()
    if args.quick:
        args.messages = min(args.messages, 100_000)
        args.disk_mb = min(args.disk_mb, 256)
        args.iperf_seconds = min(args.iperf_seconds, 2)
    if args.messages <= 0 or args.size <= 0:
        ap.error("--messages and --size must be > 0")
    systems = SYSTEMS if not args.only else [s.strip() for s in args.only.split(",") if s.strip()]
    skip = {s.strip() for s in (args.skip or "").split(",") if s.strip()}
    unknown = [s for s in systems + sorted(skip) if s not in SYSTEMS]
    if unknown:
        ap.error(f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
    systems = [s for s in systems if s not in skip]

    def on_term(signum, frame):
        raise SystemExit(128 + signum)  # so every finally below runs (servers stopped)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    info = machine_info()
    started = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    t0 = time.monotonic()
    problems = install(systems + (["kbroker"] if "kbroker-durable" in systems else []), not args.no_install)
    tmp = tempfile.mkdtemp(prefix="kbroker-peers-", dir=args.tmpdir)
    runner = Runner(args, tmp)
    try:
        for s in systems:
            log(f"== {s}")
            if s in problems and s in ("redis", "nats", "rabbitmq"):
                name = {"redis": "Redis Streams", "nats": "NATS JetStream", "rabbitmq": "RabbitMQ streams"}[s]
                runner.add(name, "—", "—", unavailable=problems[s], key=s)
                log(f"{s}: unavailable: {problems[s]}")
            elif s in ("kbroker", "kbroker-durable"):
                runner.kbroker(durable=s == "kbroker-durable")  # confluent-kafka missing: that row fails alone
            else:
                getattr(runner, s)()  # limits: whatever of fio/dd/iperf3 is there
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wall = time.monotonic() - t0
    table = render(runner.rows, args, info, started, wall)
    versions = _versions(runner.rows)
    md = table + f"\nVersions: {versions}\n\nCommand: `.venv/bin/python bench/peers/run.py {' '.join(sys.argv[1:])}`\n"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "peers.md"), "w") as f:
        f.write(md)
    write_csv(os.path.join(args.out, "peers.csv"), runner.rows)
    print(md)
    log(f"wrote {os.path.join(args.out, 'peers.md')} and peers.csv")
    return 0


def _versions(rows) -> str:
    parts = [f"confluent-kafka {_pkg_version('confluent-kafka')}"]
    try:
        import confluent_kafka

        parts[0] += f" (librdkafka {confluent_kafka.libversion()[0]})"
    except ImportError:
        pass
    for mod in ("redis", "hiredis", "nats-py", "rstream"):
        parts.append(f"{mod} {_pkg_version(mod)}")
    return ", ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
