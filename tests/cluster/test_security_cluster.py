"""A 3-broker cluster whose brokers reach each other on a SASL_SSL listener (SCRAM-SHA-512,
the inter-broker user written to ZooKeeper with `broker users add --zookeeper` before any
broker starts, as docs/security.md says) with ACLs on, while clients use a PLAINTEXT
listener: the controller's requests and the followers' fetches authenticate over TLS, a
replicated topic keeps its three replicas in sync, and a client's record written with
acks=all is read back; the client listener's Metadata names the client listener."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.cluster.conftest import CLUSTER_CONFIG, _chroot
from tests.support.certs import make_certs
from tests.support.cluster import Cluster
from tests.support.deps import require_module
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(240)


def broker_cli(*args) -> None:
    exe = shutil.which("broker", path=os.path.dirname(sys.executable)) or shutil.which("broker")
    cmd = [exe] if exe else [sys.executable, "-m", "broker.cli.main"]
    r = subprocess.run(cmd + [str(a) for a in args], capture_output=True, timeout=60)
    assert r.returncode == 0, (args, r.stderr.decode(errors="replace"))


def test_replication_over_a_sasl_ssl_inter_broker_listener(request, tmp_path, zookeeper):
    ck = require_module("confluent_kafka")
    certs = make_certs(tmp_path / "certs")
    jaas = (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="broker-secret";'
    )
    config = {
        **CLUSTER_CONFIG,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": certs.broker_pem,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": certs.ca,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker",
        "allow.everyone.if.no.acl.found": "false",
    }
    cluster = Cluster(tmp_path / "cluster", n=3, zookeeper=zookeeper, config=config, chroot=_chroot(request))
    request.node.kbroker_clusters = [cluster]
    internal = {}
    for i, b in cluster.brokers.items():
        internal[i] = free_port()
        b.config["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},INTERNAL://127.0.0.1:{internal[i]}"
    try:
        # the inter-broker user exists before any broker starts
        broker_cli("users", "add", "broker", "--zookeeper", cluster.zk_connect, "--password", "broker-secret")
        cluster.start()
        # clients (User:ANONYMOUS on the PLAINTEXT listener) get what they need from the broker user
        admin = tmp_path / "broker.properties"
        admin.write_text(
            f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nssl.truststore.type=PEM\n"
            f"ssl.truststore.location={certs.ca}\nsasl.jaas.config={jaas}\n"
        )
        boot = f"127.0.0.1:{internal[1]}"
        broker_cli(
            "acls",
            "add",
            "--bootstrap",
            boot,
            "--command-config",
            admin,
            "--allow-principal",
            "User:ANONYMOUS",
            "--operation",
            "All",
            "--topic",
            "replicated",
        )
        broker_cli(
            "acls",
            "add",
            "--bootstrap",
            boot,
            "--command-config",
            admin,
            "--allow-principal",
            "User:ANONYMOUS",
            "--operation",
            "All",
            "--group",
            "readers",
        )
        from confluent_kafka.admin import AdminClient, NewTopic

        plain = {"bootstrap.servers": cluster.bootstrap}
        admin_client = AdminClient(plain)
        admin_client.create_topics([NewTopic("replicated", 1, 3)])["replicated"].result(30)
        p = ck.Producer({**plain, "acks": "all", "message.timeout.ms": 30000})
        errors = []
        for i in range(20):
            p.produce("replicated", f"r-{i}".encode(), on_delivery=lambda e, m: errors.append(e) if e else None)
        assert p.flush(60) == 0 and errors == []

        def in_sync():
            meta = cluster.describe("replicated").partitions[0]
            return len(meta.isr) == 3

        deadline = time.monotonic() + 60
        while not in_sync():
            assert time.monotonic() < deadline, cluster.log_tails()
            time.sleep(0.5)
        c = ck.Consumer({**plain, "group.id": "readers", "auto.offset.reset": "earliest"})
        c.subscribe(["replicated"])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value().decode())
        c.close()
        assert got == [f"r-{i}" for i in range(20)]
        # the PLAINTEXT listener's Metadata names PLAINTEXT endpoints only
        _, md = cluster.metadata(["replicated"])
        assert sorted(b.port for b in md.brokers) == sorted(b.port for b in cluster.brokers.values())
        logs = cluster.log_tails(400)
        assert "SASL" not in logs or "authentication failed" not in logs
    finally:
        cluster.close()
