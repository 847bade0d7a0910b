"""What security costs, kbroker beside Apache Kafka 4.x with the same TLS settings:

    .venv/bin/python bench/security/run.py [--rounds 3] [--records 3000000] [--size 1000]
        [--connect-seconds 10] [--json results.json] [--skip-acl]

Each broker (one node, the same PEM key store, TLS 1.3, OpenSSL's default suites on our
side and the JDK's on Kafka's) serves PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512)
listeners; the brokers run in turn, never together (Kafka, kbroker, Kafka ...: --rounds
of each). The broker is pinned to CPU 0 (taskset) and every load generator to CPU 1.

Per protocol: Kafka's ProducerPerformance writes --records records of --size bytes
(acks=1, one partition: a run of 10 s or more), then ConsumerPerformance reads them back;
the broker's CPU time (/proc) over both gives CPU seconds per GB moved. Connection set-up:
for --connect-seconds, new connections one after another, each ApiVersions (plus the TLS
handshake, plus SaslHandshake and SCRAM's two SaslAuthenticate round trips), by the
project's client. ACL check cost (kbroker alone): the authorizer's check with 10,000
ACLs against no authorizer, in process, and a Metadata request's round trip on a broker
with 10,000 ACLs against one without.

Output: medians over rounds, as Markdown tables (and --json with every run). Every phase
is bounded in time; brokers and tools are stopped at the end whatever happens.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.kafka_vs_kbroker import _PRODUCED, proc_cpu  # noqa: E402
from tests.support.broker_proc import BrokerProcess  # noqa: E402
from tests.support.certs import make_certs  # noqa: E402
from tests.support.kafka_broker import KAFKA_JVM_FLAGS, KafkaBroker  # noqa: E402
from tests.support.kafka_tools import kafka_tool, run_java, tool_command  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

PHASE_TIMEOUT = 600
CLIENT_JVM = ("-XX:+UseG1GC",)
USER, PASSWORD = "bench", "bench-secret"
SCRAM_JAAS = (
    f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{USER}" password="{PASSWORD}";'
)
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")


def pin(pid: int, cpu: int) -> None:
    subprocess.run(["taskset", "-a", "-c", "-p", str(cpu), str(pid)], check=True, capture_output=True)


def on_cpu1(cmd: list[str]) -> list[str]:
    return ["taskset", "-c", "1", *cmd]


class Listeners:
    def __init__(self):
        self.ports = {p: free_port() for p in PROTOCOLS}

    def spec(self) -> str:
        return ",".join(f"{p}://127.0.0.1:{port}" for p, port in self.ports.items())


def tls_settings(certs) -> dict:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.broker_pem),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "ssl.enabled.protocols": "TLSv1.3",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
        "offsets.topic.num.partitions": 4,
    }


class KafkaSide:
    name = "Apache Kafka"

    def __init__(self, root: Path, certs):
        self.listeners = Listeners()
        self.b = KafkaBroker(root, port=self.listeners.ports["PLAINTEXT"], jvm_flags=KAFKA_JVM_FLAGS)
        self.b.config.update(tls_settings(certs))
        self.b.config.update(
            {
                "listeners": self.listeners.spec() + f",CONTROLLER://127.0.0.1:{self.b.controller_port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
                "advertised.listeners": self.listeners.spec(),
            }
        )

    def start(self) -> None:
        self.b.start()
        pin(self.b.proc.pid, 0)
        kafka_tool(
            "kafka-configs",
            "--bootstrap-server",
            f"127.0.0.1:{self.listeners.ports['PLAINTEXT']}",
            "--alter",
            "--add-config",
            f"SCRAM-SHA-512=[password={PASSWORD}]",
            "--entity-type",
            "users",
            "--entity-name",
            USER,
        )

    def stop(self) -> None:
        self.b.stop()

    @property
    def pid(self) -> int:
        return self.b.proc.pid


class KbrokerSide:
    name = "kbroker"

    def __init__(self, root: Path, certs, extra: dict | None = None, scram_user: bool = True):
        self.scram_user = scram_user
        self.listeners = Listeners()
        self.b = BrokerProcess(
            root / "data",
            port=self.listeners.ports["PLAINTEXT"],
            event_loop="auto",
            config={**tls_settings(certs), "listeners": self.listeners.spec(), **(extra or {})},
        )

    def start(self) -> None:
        self.b.start()
        pin(self.b.proc.pid, 0)
        if not self.scram_user:
            return
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "broker.cli.main",
                "users",
                "add",
                USER,
                "--bootstrap",
                f"127.0.0.1:{self.listeners.ports['PLAINTEXT']}",
                "--password",
                PASSWORD,
            ],
            capture_output=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr

    def stop(self) -> None:
        self.b.stop()

    @property
    def pid(self) -> int:
        return self.b.proc.pid


def client_properties(d: Path, protocol: str, certs) -> Path:
    path = d / f"{protocol}.properties"
    text = f"security.protocol={protocol}\n"
    if protocol != "PLAINTEXT":
        text += f"ssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\nssl.enabled.protocols=TLSv1.3\n"
    if protocol == "SASL_SSL":
        text += f"sasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config={SCRAM_JAAS}\n"
    path.write_text(text)
    return path


def produce(side, protocol: str, topic: str, records: int, size: int, props: Path) -> dict:
    cmd = tool_command(
        "kafka-producer-perf-test",
        "--bootstrap-server",
        f"127.0.0.1:{side.listeners.ports[protocol]}",
        "--topic",
        topic,
        "--num-records",
        records,
        "--record-size",
        size,
        "--throughput",
        -1,
        "--producer.config",
        props,
        "--command-property",
        "acks=1",
        "linger.ms=5",
        "batch.size=131072",
        "--reporting-interval",
        3_600_000,
        heap="1g",
        quick=False,
        jvm_args=CLIENT_JVM,
    )
    out = run_java(on_cpu1(cmd), timeout=PHASE_TIMEOUT).lines
    m = _PRODUCED.match(out[-1])
    assert m, out[-3:]
    return {"mb_s": float(m.group(3)), "seconds": int(m.group(1)) / float(m.group(2))}


def consume(side, protocol: str, topic: str, records: int, props: Path) -> dict:
    cmd = tool_command(
        "kafka-consumer-perf-test",
        "--bootstrap-server",
        f"127.0.0.1:{side.listeners.ports[protocol]}",
        "--topic",
        topic,
        "--num-records",
        records,
        "--timeout",
        60000,
        "--group",
        f"{topic}-perf",
        "--consumer.config",
        props,
        heap="1g",
        quick=False,
        jvm_args=CLIENT_JVM,
    )
    out = run_java(on_cpu1(cmd), timeout=PHASE_TIMEOUT).lines
    head = next(i for i, line in enumerate(out) if line.startswith("start.time"))
    stats = dict(zip(out[head].split(", "), out[head + 1].split(", ")))
    assert int(stats["data.consumed.in.nMsg"]) >= records, stats
    return {"mb_s": float(stats["fetch.MB.sec"])}


def connect_rate(side, protocol: str, certs, seconds: float) -> float:
    """Connections per second, one after another, from CPU 1 (a child process)."""
    code = f"""
import os, ssl, sys, time
os.sched_setaffinity(0, {{1}})
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from broker.client.connection import BrokerConnection
from broker.security.listener import ClientSecurity
protocol = {protocol!r}
ctx = None
if protocol != "PLAINTEXT":
    ctx = ssl.create_default_context(cafile={str(certs.ca)!r})
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
sec = None if protocol == "PLAINTEXT" else ClientSecurity(protocol, ctx, "SCRAM-SHA-512" if protocol == "SASL_SSL"
                                                            else None, {USER!r}, {PASSWORD!r})
n, end = 0, time.monotonic() + {seconds}
t0 = time.monotonic()
while time.monotonic() < end:
    BrokerConnection("127.0.0.1", {side.listeners.ports[protocol]}, security=sec).close()
    n += 1
print(n / (time.monotonic() - t0))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=seconds + 120)
    assert p.returncode == 0, p.stderr[-2000:]
    return float(p.stdout.strip().splitlines()[-1])


def run_side(side, args, certs, work: Path, round_no: int) -> list[dict]:
    rows = []
    side.start()
    try:
        for protocol in PROTOCOLS:
            props = client_properties(work, protocol, certs)
            topic = f"perf-{protocol.lower()}-{round_no}"
            # a short warm-up (the JIT of Kafka's broker; kbroker's caches alike)
            produce(side, protocol, topic + "-warm", 100_000, args.size, props)
            cpu0 = proc_cpu(side.pid)
            p = produce(side, protocol, topic, args.records, args.size, props)
            c = consume(side, protocol, topic, args.records, props)
            cpu = proc_cpu(side.pid) - cpu0
            gb = 2 * args.records * args.size / 1e9
            rate = connect_rate(side, protocol, certs, args.connect_seconds)
            row = {
                "broker": side.name,
                "protocol": protocol,
                "round": round_no,
                "produce_mb_s": p["mb_s"],
                "produce_s": p["seconds"],
                "consume_mb_s": c["mb_s"],
                "cpu_s_per_gb": cpu / gb,
                "connections_per_s": rate,
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        side.stop()
    return rows


def acl_costs(certs, work: Path) -> dict:
    """The authorizer's check with 10,000 ACLs (in process), and Metadata round trips on a
    broker with 10,000 ACLs against one without."""
    from broker.security.acl import AclBinding, Authorizer, Operation, PatternType, Permission, ResourceType

    acls = [
        AclBinding(
            ResourceType.TOPIC,
            f"topic-{i}",
            PatternType.LITERAL,
            f"User:u{i % 100}",
            "*",
            Operation.READ,
            Permission.ALLOW,
        )
        for i in range(9000)
    ]
    acls += [
        AclBinding(
            ResourceType.TOPIC, f"pfx-{i}-", PatternType.PREFIXED, "User:u1", "*", Operation.WRITE, Permission.ALLOW
        )
        for i in range(1000)
    ]
    a = Authorizer()
    a.load(acls)
    n = 1_000_000
    t0 = time.perf_counter()
    for _ in range(n):
        a.authorize("User:u7", "127.0.0.1", Operation.READ, ResourceType.TOPIC, "topic-107")
    cached_ns = (time.perf_counter() - t0) / n * 1e9
    t0 = time.perf_counter()
    for i in range(20000):
        a._decide("User:u7", "127.0.0.1", Operation.READ, ResourceType.TOPIC, f"topic-{i % 9000}")
    uncached_us = (time.perf_counter() - t0) / 20000 * 1e6
    out = {"check_cached_ns": cached_ns, "check_uncached_us": uncached_us}
    from broker.client.connection import BrokerConnection
    from broker.protocol.messages.create_acls import CreateAclsRequest as CA
    from broker.protocol.messages.metadata import MetadataRequest

    for label, extra in (
        ("no authorizer", {}),
        (
            "10,000 ACLs",
            {
                "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                "super.users": "User:admin",
                "allow.everyone.if.no.acl.found": "false",
                "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
                "listener.name.sasl_ssl.plain.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw";',
            },
        ),
    ):
        side = KbrokerSide(work / label.replace(" ", "-").replace(",", ""), certs, extra, scram_user=False)
        side.start()
        try:
            port = side.listeners.ports["PLAINTEXT"]
            import ssl

            from broker.security.listener import ClientSecurity

            admin = ClientSecurity(
                "SASL_SSL", ssl.create_default_context(cafile=str(certs.ca)), "PLAIN", "admin", "admin-pw"
            )
            if extra:
                with BrokerConnection("127.0.0.1", side.listeners.ports["SASL_SSL"], security=admin) as c:
                    # ANONYMOUS (PLAINTEXT) may describe the topic; 9,999 other ACLs beside
                    creations = [
                        CA.AclCreation(
                            resource_type=2,
                            resource_name=f"topic-{i}",
                            resource_pattern_type=3,
                            principal=f"User:u{i % 100}",
                            host="*",
                            operation=3,
                            permission_type=3,
                        )
                        for i in range(9999)
                    ]
                    creations.append(
                        CA.AclCreation(
                            resource_type=2,
                            resource_name="*",
                            resource_pattern_type=3,
                            principal="User:ANONYMOUS",
                            host="*",
                            operation=2,
                            permission_type=3,
                        )
                    )
                    creations.append(
                        CA.AclCreation(
                            resource_type=4,
                            resource_name="kafka-cluster",
                            resource_pattern_type=3,
                            principal="User:ANONYMOUS",
                            host="*",
                            operation=2,
                            permission_type=3,
                        )
                    )
                    resp = c.request(CA(creations=creations), timeout=120)
                    assert all(r.error_code == 0 for r in resp.results), resp.results[:3]
            with BrokerConnection("127.0.0.1", port) as c:
                from broker.client import Cluster

                with Cluster(f"127.0.0.1:{port}") as cl:
                    cl.create_topic("acl-bench", 1, 1)
                req = MetadataRequest(
                    topics=[MetadataRequest.MetadataRequestTopic(name="acl-bench")], allow_auto_topic_creation=False
                )
                for _ in range(2000):
                    c.request(req)
                samples = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    for _ in range(5000):
                        c.request(req)
                    samples.append((time.perf_counter() - t0) / 5000 * 1e6)
                out[f"metadata_rtt_us ({label})"] = statistics.median(samples)
        finally:
            side.stop()
    return out


def table(rows: list[dict]) -> str:
    keys = ("produce_mb_s", "consume_mb_s", "cpu_s_per_gb", "connections_per_s")
    lines = [
        "| broker | protocol | produce MB/s | consume MB/s | broker CPU s per GB | connections/s |",
        "|---|---|---|---|---|---|",
    ]
    for broker in ("Apache Kafka", "kbroker"):
        for protocol in PROTOCOLS:
            sel = [r for r in rows if r["broker"] == broker and r["protocol"] == protocol]
            if not sel:
                continue
            med = {k: statistics.median(r[k] for r in sel) for k in keys}
            lines.append(
                f"| {broker} | {protocol} | {med['produce_mb_s']:.1f} | {med['consume_mb_s']:.1f} | "
                f"{med['cpu_s_per_gb']:.2f} | {med['connections_per_s']:.0f} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--connect-seconds", type=float, default=10.0)
    ap.add_argument("--json", help="write every run here")
    ap.add_argument("--skip-acl", action="store_true", help="leave out the ACL check cost")
    args = ap.parse_args()
    if shutil.which("taskset") is None or os.cpu_count() < 2:
        sys.exit("needs taskset and two CPUs")
    work = Path(tempfile.mkdtemp(prefix="kbroker-sec-bench-"))
    rows: list[dict] = []
    try:
        certs = make_certs(work / "certs")
        for r in range(args.rounds):
            for side_cls in (KafkaSide, KbrokerSide):
                root = work / f"{side_cls.__name__}-{r}"
                rows += run_side(side_cls(root, certs), args, certs, work, r)
                shutil.rmtree(root, ignore_errors=True)
        print(table(rows))
        acl = None if args.skip_acl else acl_costs(certs, work)
        if acl:
            print(json.dumps(acl, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps({"runs": rows, "acl": acl}, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
