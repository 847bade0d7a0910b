"""Schema registry fixtures: a real broker serving the registry on its own loopback port,
one per test module (as `make serve` runs it, on free ports)."""

from __future__ import annotations

import itertools
import json
import urllib.error
import urllib.request

import pytest

from tests.support.broker_proc import BrokerProcess
from tests.support.ports import free_port

CT = "application/vnd.schemaregistry.v1+json"
_counter = itertools.count()


class Registry:
    """A registry's URL and a few plain HTTP calls (urllib: no client library between
    the test and the wire)."""

    def __init__(self, url: str, auth: str | None = None):
        self.url = url.rstrip("/")
        self.auth = auth

    def call(
        self,
        method: str,
        path: str,
        body=None,
        content_type: str = CT,
        headers: dict | None = None,
        raw: bytes | None = None,
    ) -> tuple[int, object]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        if self.auth:
            import base64

            req.add_header("Authorization", "Basic " + base64.b64encode(self.auth.encode()).decode())
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                text = resp.read()
                status = resp.status
        except urllib.error.HTTPError as exc:
            text = exc.read()
            status = exc.code
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def register(self, subject: str, schema: str, schema_type: str = "AVRO", references=None):
        body = {"schema": schema}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        if references:
            body["references"] = references
        return self.call("POST", f"/subjects/{subject}/versions", body)


def registry_broker(tmp_path_factory, config: dict | None = None, name: str = "registry") -> BrokerProcess:
    port = free_port()
    cfg = {"schema.registry.listener": f"127.0.0.1:{port}", **(config or {})}
    b = BrokerProcess(tmp_path_factory.mktemp(name) / "data", config=cfg)
    b.registry_port = port
    return b


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with registry_broker(tmp_path_factory) as b:
        yield b


@pytest.fixture(scope="module")
def registry(broker) -> Registry:
    return Registry(f"http://127.0.0.1:{broker.registry_port}")


@pytest.fixture
def subject(request):
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:100]
    return f"{base}-{next(_counter)}"


# a failed cluster test (test_cluster.py, on tests/cluster's make_cluster) shows the end of
# every broker's log, as in tests/cluster
from tests.cluster.conftest import pytest_runtest_makereport  # noqa: E402,F401
