"""The registry behind TLS and HTTP basic authentication against the broker's own SCRAM
users, each request authorized by the broker's ACLs (a subject's rights are its topic's):
confluent-kafka's client over https with basic.auth.user.info; refusals with 401, 403
(40301) and the broker serving on; a changed password takes effect at once."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.support.broker_proc import BrokerProcess
from tests.support.ports import free_port

pytestmark = pytest.mark.interop

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret", "admin": "admin-secret"}
REC = '{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}'


def cli(*args):
    r = subprocess.run([sys.executable, "-m", "broker.cli.main", *map(str, args)], capture_output=True, timeout=60)
    assert r.returncode == 0, (args, r.stderr.decode(errors="replace"))
    return r


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    from tests.support.certs import make_certs

    d = tmp_path_factory.mktemp("secure-registry")
    certs = make_certs(d / "certs")
    port = free_port()
    config = {
        "schema.registry.listener": f"https://127.0.0.1:{port}",
        "schema.registry.authentication.method": "BASIC",
        "listener.name.schema_registry.ssl.keystore.type": "PEM",
        "listener.name.schema_registry.ssl.keystore.location": certs.broker_pem,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        # the Kafka listener's clients (this test's CLI, the broker's own fetches of _schemas) are
        # ANONYMOUS on plaintext; the registry's admin is a user of its own
        "super.users": "User:ANONYMOUS;User:admin",
    }
    with BrokerProcess(d / "data", config=config) as b:
        for user in PASSWORDS:
            cli(
                "users",
                "add",
                user,
                "--bootstrap",
                b.bootstrap,
                "--mechanism",
                "SCRAM-SHA-512",
                "--password",
                PASSWORDS[user],
            )
        cli(
            "acls",
            "add",
            "--bootstrap",
            b.bootstrap,
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--operation",
            "Write",
            "--operation",
            "Delete",
            "--operation",
            "AlterConfigs",
            "--topic",
            "orders",
        )
        cli(
            "acls",
            "add",
            "--bootstrap",
            b.bootstrap,
            "--allow-principal",
            "User:bob",
            "--operation",
            "Read",
            "--topic",
            "orders",
        )
        ctx = ssl.create_default_context(cafile=str(certs.ca))
        yield type(
            "Secure", (), {"broker": b, "url": f"https://127.0.0.1:{port}", "ctx": ctx, "certs": certs, "port": port}
        )


def call(secure, method, path, body=None, user=None, password=None):
    req = urllib.request.Request(
        secure.url + path, data=None if body is None else json.dumps(body).encode(), method=method
    )
    req.add_header("Content-Type", "application/vnd.schemaregistry.v1+json")
    if user is not None:
        token = base64.b64encode(f"{user}:{password or PASSWORDS[user]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=30, context=secure.ctx) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), dict(exc.headers)


def test_unauthenticated_requests_are_401(secure):
    for user, password in ((None, None), ("alice", "wrong"), ("mallory", "whatever")):
        status, out, headers = call(secure, "GET", "/subjects", user=user, password=password)
        assert (status, out) == (401, {"error_code": 401, "message": "Unauthorized"})
        assert headers["WWW-Authenticate"].startswith("Basic ")


def test_plaintext_http_to_the_tls_listener_gets_nothing(secure):
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://127.0.0.1:{secure.port}/subjects", timeout=10).read()
    assert call(secure, "GET", "/subjects", user="admin")[0] == 200


def test_subjects_are_authorized_by_their_topics_acls(secure):
    status, out, _ = call(secure, "POST", "/subjects/orders-value/versions", {"schema": REC}, "alice")
    assert status == 200, out
    schema_id = out["id"]
    # bob may read the subject, not write it; carol nothing
    status, out, _ = call(secure, "POST", "/subjects/orders-value/versions", {"schema": REC}, "bob")
    assert (status, out["error_code"]) == (403, 40301), out
    assert "WRITE" in out["message"] and "orders" in out["message"]
    assert call(secure, "GET", "/subjects/orders-value/versions", user="bob")[:2] == (200, [1])
    assert call(secure, "GET", "/subjects/orders-value/versions", user="carol")[0] == 403
    assert call(secure, "GET", f"/schemas/ids/{schema_id}", user="bob")[0] == 200
    assert call(secure, "GET", f"/schemas/ids/{schema_id}", user="carol")[0] == 403
    # the subject list shows what the principal may see
    assert call(secure, "GET", "/subjects", user="bob")[1] == ["orders-value"]
    assert call(secure, "GET", "/subjects", user="carol")[1] == []
    # another topic's subject: alice may not
    assert call(secure, "POST", "/subjects/payments-value/versions", {"schema": REC}, "alice")[0] == 403
    # the global config is the cluster's: only the admin (a super user)
    assert call(secure, "PUT", "/config", {"compatibility": "FULL"}, "alice")[0] == 403
    assert call(secure, "PUT", "/config/orders-value", {"compatibility": "FULL"}, "alice")[:2] == (
        200,
        {"compatibility": "FULL"},
    )
    assert call(secure, "PUT", "/config", {"compatibility": "BACKWARD"}, "admin")[0] == 200
    assert call(secure, "DELETE", "/subjects/orders-value", user="bob")[0] == 403


def test_confluent_client_over_tls_with_basic_auth(secure):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = SchemaRegistryClient(
        {
            "url": secure.url,
            "ssl.ca.location": str(secure.certs.ca),
            "basic.auth.user.info": f"alice:{PASSWORDS['alice']}",
        }
    )
    schema_id = client.register_schema("orders-key", Schema('"long"', "AVRO"))
    assert client.get_schema(schema_id).schema_str == '"long"'
    assert client.get_latest_version("orders-key").schema_id == schema_id
    denied = SchemaRegistryClient(
        {
            "url": secure.url,
            "ssl.ca.location": str(secure.certs.ca),
            "basic.auth.user.info": f"carol:{PASSWORDS['carol']}",
        }
    )
    with pytest.raises(SchemaRegistryError) as exc:
        denied.register_schema("orders-key", Schema('"long"', "AVRO"))
    assert exc.value.http_status_code == 403


def test_a_changed_password_takes_effect_at_once(secure):
    assert call(secure, "GET", "/subjects", user="bob")[0] == 200  # checked, and remembered
    cli(
        "users",
        "add",
        "bob",
        "--bootstrap",
        secure.broker.bootstrap,
        "--mechanism",
        "SCRAM-SHA-512",
        "--password",
        "bob-new",
    )
    assert call(secure, "GET", "/subjects", user="bob")[0] == 401
    assert call(secure, "GET", "/subjects", user="bob", password="bob-new")[0] == 200
    PASSWORDS["bob"] = "bob-new"
