"""The registry on the 3-broker ZooKeeper cluster: writes through any broker reach the
one writer (the leader of `_schemas`' partition), reads are served by every broker, a
client reads its own writes from the broker it wrote through — and registrations go on
through every broker while the `_schemas` leader is killed -9 (bounded, seeded: every
acknowledged registration readable from every broker afterwards, each schema one id,
no id given to two schemas, none given again after the restart, no registration
acknowledged under two ids)."""

from __future__ import annotations

import json
import os
import random
import threading
import time
import urllib.error
import urllib.request

import pytest

from broker.client import Cluster as ClientCluster
from tests.cluster.conftest import make_cluster, zookeeper  # noqa: F401  (fixtures)
from tests.support.ports import free_port

pytestmark = [pytest.mark.interop, pytest.mark.slow]

CT = "application/vnd.schemaregistry.v1+json"


def http(url: str, method: str, path: str, body=None, timeout: float = 20.0):
    req = urllib.request.Request(
        url + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": CT},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def schema(tag: str) -> str:
    return json.dumps({"type": "record", "name": "R", "namespace": "t", "fields": [{"name": tag, "type": "long"}]})


def start(make_cluster, **config):  # noqa: F811
    ports = {i: free_port() for i in (1, 2, 3)}
    c = make_cluster(
        3,
        config={"schema.registry.request.timeout.ms": 10000, **config},
        per_broker={i: {"schema.registry.listener": f"127.0.0.1:{p}"} for i, p in ports.items()},
    )
    urls = {i: f"http://127.0.0.1:{p}" for i, p in ports.items()}
    return c, urls


def test_writes_through_any_broker_reads_everywhere(make_cluster):  # noqa: F811
    c, urls = start(make_cluster)
    status, first = http(urls[2], "POST", "/subjects/a-value/versions", {"schema": schema("x")})
    assert status == 200, first
    assert sorted(c.replicas_of("_schemas", 0)) == [1, 2, 3]
    leader = c.wait_for_leader("_schemas", 0)
    ids = {}
    for i in (1, 2, 3):
        # through every broker, whichever leads: read at once from the same broker (read-your-writes)
        status, out = http(urls[i], "POST", f"/subjects/b{i}-value/versions", {"schema": schema(f"f{i}")})
        assert status == 200, out
        ids[i] = out["id"]
        assert http(urls[i], "GET", f"/subjects/b{i}-value/versions/latest")[1]["id"] == out["id"]
    assert len(set(ids.values()) | {first["id"]}) == 4
    for i in (1, 2, 3):
        deadline = time.monotonic() + 10
        while http(urls[i], "GET", "/subjects")[1] != ["a-value", "b1-value", "b2-value", "b3-value"]:
            assert time.monotonic() < deadline, (i, http(urls[i], "GET", "/subjects"))
            time.sleep(0.1)
    assert leader in (1, 2, 3)
    # validation on produce: an id registered through another broker becomes valid on the
    # partition's leader once its view reads it from _schemas (fetched, not forwarded)
    from tests.registry.test_validation import ORDER, VALIDATE_VALUES, batch, framed, produce

    with ClientCluster(c.bootstrap) as admin:
        admin.create_topic("checked", 1, 1, VALIDATE_VALUES)
        admin.topic("checked", wait_s=10)
    owner = c.wait_for_leader("checked", 0)
    other = next(i for i in (1, 2, 3) if i != owner)
    status, out = http(urls[other], "POST", "/subjects/checked-value/versions", {"schema": ORDER})
    assert status == 200, out
    deadline = time.monotonic() + 10
    while (r := produce(c.broker(owner), "checked", batch([framed(out["id"])]))).error_code:
        assert r.error_code == 87 and time.monotonic() < deadline, r
        time.sleep(0.05)
    assert produce(c.broker(owner), "checked", batch([framed(first["id"])])).error_code == 87  # a-value's id


class Client(threading.Thread):
    """Registers schemas through one broker until told to stop; remembers every answer."""

    def __init__(self, broker_id: int, url: str, rng: random.Random, stop: threading.Event):
        super().__init__(daemon=True)
        self.broker_id, self.url, self.rng, self.stop = broker_id, url, rng, stop
        self.acked: dict[tuple[str, str], set[int]] = {}  # (subject, schema) -> ids answered
        self.pending: list[tuple[str, str]] = []  # not acknowledged yet: retried
        self.failures: dict[int, int] = {}  # status (-1: no answer) -> count

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            if self.pending and self.rng.random() < 0.5:
                key = self.pending.pop(0)
            elif self.acked and self.rng.random() < 0.1:
                key = self.rng.choice(list(self.acked))  # again: must get the same id
            else:
                n += 1
                key = (f"b{self.broker_id}-s{n % 7}-value", schema(f"f{self.broker_id}_{n}"))
            try:
                status, out = http(self.url, "POST", f"/subjects/{key[0]}/versions", {"schema": key[1]}, 15)
            except (OSError, urllib.error.URLError, ValueError):
                status, out = -1, None
            if status == 200:
                self.acked.setdefault(key, set()).add(out["id"])
            else:
                self.failures[status] = self.failures.get(status, 0) + 1
                if status != 409:
                    self.pending.append(key)
                time.sleep(0.05)


def test_registrations_through_every_broker_while_the_leader_is_killed(make_cluster):  # noqa: F811
    seed = int(os.environ.get("REGISTRY_FAULT_SEED", random.randrange(1 << 30)))
    print(f"registry fault test seed {seed} (REGISTRY_FAULT_SEED={seed} repeats it)")
    rng = random.Random(seed)
    c, urls = start(make_cluster)
    # every schema of a subject replaces the last (another field): no compatibility asked
    assert http(urls[1], "PUT", "/config", {"compatibility": "NONE"})[0] == 200
    c.wait_for_isr("_schemas", 0, {1, 2, 3})
    stop = threading.Event()
    clients = [Client(i, urls[i], random.Random(rng.random()), stop) for i in (1, 2, 3)]
    for cl in clients:
        cl.start()
    killed = []
    deadline = time.monotonic() + 120  # the whole run is bounded
    try:
        for _round in range(2):
            time.sleep(rng.uniform(1.0, 3.0))
            leader = c.wait_for_leader("_schemas", 0)
            c.kill(leader)
            killed.append(leader)
            c.wait_for_leader("_schemas", 0, not_in={leader})
            time.sleep(rng.uniform(1.0, 3.0))  # registrations go on without it
            c.start(leader)
            c.wait_for_isr("_schemas", 0, {1, 2, 3})
            assert time.monotonic() < deadline
        time.sleep(1.0)
    finally:
        stop.set()
        for cl in clients:
            cl.join(30)
    assert all(not cl.is_alive() for cl in clients)
    # what was acknowledged: each (subject, schema) under one id, each schema one id, ids unique
    acked: dict[tuple[str, str], int] = {}
    for cl in clients:
        for key, ids in cl.acked.items():
            assert len(ids) == 1, (key, ids)  # never acknowledged under two ids
            acked[key] = next(iter(ids))
    assert len(acked) > 20, f"too few registrations acknowledged: {len(acked)}"
    by_schema: dict[str, int] = {}
    for (subject, text), schema_id in acked.items():
        assert by_schema.setdefault(text, schema_id) == schema_id, (subject, text)
    assert len(set(by_schema.values())) == len(by_schema), "one id given to two schemas"
    # every acknowledged registration is readable from every broker
    for i, url in urls.items():
        end = time.monotonic() + 30
        for (subject, text), schema_id in acked.items():
            while True:
                status, out = http(url, "GET", f"/schemas/ids/{schema_id}")
                if status == 200 or time.monotonic() > end:
                    break
                time.sleep(0.1)
            assert (status, json.loads(out["schema"])) == (200, json.loads(text)), (i, schema_id, out)
            status, versions = http(url, "GET", f"/schemas/ids/{schema_id}/versions")
            assert {"subject": subject} in [{"subject": v["subject"]} for v in versions], (i, subject, versions)
    # no id given again after the restarts: new schemas get new ids, through every broker
    top = max(acked.values())
    for i, url in urls.items():
        status, out = http(url, "POST", f"/subjects/after-{i}-value/versions", {"schema": schema(f"after{i}")})
        assert status == 200 and out["id"] > top, (i, out)
        top = out["id"]
    failures: dict[int, int] = {}
    for cl in clients:
        for status, n in cl.failures.items():
            failures[status] = failures.get(status, 0) + n
    print(
        f"{len(acked)} registrations acknowledged, failed by status (-1: no answer): {failures}, "
        f"leaders killed: {killed}"
    )
    assert 409 not in failures


def test_forwarded_writes_over_tls_with_basic_auth(make_cluster, tmp_path):  # noqa: F811
    """A write sent to a broker that does not lead `_schemas` is forwarded to the writer
    over TLS (the writer's certificate checked against the registry's trust store) with
    the client's credentials, which the writer checks again."""
    import base64
    import ssl
    import subprocess
    import sys

    from tests.support.certs import make_certs

    certs = make_certs(tmp_path / "certs")
    ports = {i: free_port() for i in (1, 2)}
    tls = {
        "listener.name.schema_registry.ssl.keystore.type": "PEM",
        "listener.name.schema_registry.ssl.keystore.location": certs.broker_pem,
        "listener.name.schema_registry.ssl.truststore.type": "PEM",
        "listener.name.schema_registry.ssl.truststore.location": certs.ca,
        "schema.registry.authentication.method": "BASIC",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
        "schema.registry.topic.replication.factor": 2,
        "default.replication.factor": 2,
        "offsets.topic.replication.factor": 2,
    }
    c = make_cluster(
        2, config=tls, per_broker={i: {"schema.registry.listener": f"https://127.0.0.1:{p}"} for i, p in ports.items()}
    )
    cli = [sys.executable, "-m", "broker.cli.main"]
    boot = c.bootstrap.split(",")[0]
    for args in (
        ["users", "add", "dora", "--bootstrap", boot, "--mechanism", "SCRAM-SHA-256", "--password", "pw"],
        [
            "acls",
            "add",
            "--bootstrap",
            boot,
            "--allow-principal",
            "User:dora",
            "--operation",
            "Write",
            "--operation",
            "Read",
            "--topic",
            "tls",
        ],
    ):
        r = subprocess.run(cli + args, capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr.decode()
    ctx = ssl.create_default_context(cafile=str(certs.ca))

    def call(i, method, path, body=None, password="pw"):
        req = urllib.request.Request(
            f"https://127.0.0.1:{ports[i]}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Content-Type": CT,
                "Authorization": "Basic " + base64.b64encode(f"dora:{password}".encode()).decode(),
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    deadline = time.monotonic() + 30
    while call(1, "GET", "/subjects")[0] != 200:  # the user reached every broker's credentials
        assert time.monotonic() < deadline
        time.sleep(0.2)
    status, out = call(1, "POST", "/subjects/tls-value/versions", {"schema": schema("t")})
    assert status == 200, out
    leader = c.wait_for_leader("_schemas", 0)
    other = 2 if leader == 1 else 1
    status, out2 = call(other, "POST", "/subjects/tls-value/versions", {"schema": schema("t")})
    assert (status, out2["id"]) == (200, out["id"])  # forwarded: the same registration
    status, out3 = call(other, "POST", "/subjects/tls-key/versions", {"schema": '"string"'})
    assert status == 200 and out3["id"] != out["id"]
    assert call(other, "GET", "/subjects/tls-key/versions")[1] == [1]  # read at once where it was written
    assert call(other, "POST", "/subjects/tls-key/versions", {"schema": '"long"'}, password="bad")[0] == 401
    assert call(other, "POST", "/subjects/other-value/versions", {"schema": '"long"'})[0] == 403
