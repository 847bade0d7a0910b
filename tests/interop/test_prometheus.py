"""Issue 34, item 7: a real Prometheus (Debian's) scrapes a broker whose metrics listener
is behind TLS and basic authentication, configured with the web configuration file of
Prometheus' own exporters (metrics.listener.web.config.file), and the examples
docs/observability.md shows run as written: its web configuration, its server.properties
lines, its commands (hash a password, promtool, curl) and its scrape configuration.

The job with the documented credentials is up and its samples hold the broker's
metrics; a job without credentials and one with a wrong password are down, refused
with 401; plain HTTP to the TLS listener is down too."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import ssl
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from broker.config import parse_properties
from tests.support.broker_proc import BrokerProcess
from tests.support.certs import make_certs
from tests.support.deps import require_binary, require_module
from tests.support.ports import free_port
from tests.support.prometheus import Prometheus

pytestmark = pytest.mark.interop

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "observability.md"
#: the password whose hash docs/observability.md's web configuration shows
PASSWORD = "example-password"


def section() -> str:
    text = DOC.read_text()
    start = text.index("\n## TLS and basic authentication\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", section(), re.S)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A broker with the documented web configuration (certificates of the test's CA in
    place of metrics.crt and metrics.key) and the documented properties, on loopback."""
    bcrypt = require_module("bcrypt")
    d = tmp_path_factory.mktemp("metrics-tls")
    certs = make_certs(d / "certs")
    etc = d / "etc"
    etc.mkdir()
    web, scrape = blocks("yaml")
    assert "basic_auth_users" in web and "scrape_configs" in scrape
    shutil.copy(certs.broker_cert, etc / "metrics.crt")
    shutil.copy(certs.broker_key, etc / "metrics.key")
    (etc / "metrics-web.yml").write_text(web)
    # the hash shown is the stated password's
    assert bcrypt.checkpw(PASSWORD.encode(), yaml.safe_load(web)["basic_auth_users"]["prometheus"].encode())
    [props] = blocks("properties")
    config = parse_properties(props)
    assert config == {
        "metrics.listener": "0.0.0.0:9404",
        "metrics.listener.web.config.file": "/etc/kbroker/metrics-web.yml",
    }
    port = free_port()
    config = {"metrics.listener": f"127.0.0.1:{port}", "metrics.listener.web.config.file": str(etc / "metrics-web.yml")}
    with BrokerProcess(d / "data", config=config) as b:
        yield SimpleNamespace(broker=b, port=port, certs=certs, etc=etc, dir=d, scrape=yaml.safe_load(scrape))


def moved(text: str, s) -> str:
    """A documented path or address, as the test has it."""
    return (
        text.replace("/etc/kbroker/metrics-web.yml", str(s.etc / "metrics-web.yml"))
        .replace("/etc/kbroker/ca.crt", str(s.certs.ca))
        .replace("127.0.0.1:9404", f"127.0.0.1:{s.port}")
    )


def test_prometheus_scrapes_with_credentials_and_is_refused_without(secured, tmp_path):
    [job] = secured.scrape["scrape_configs"]
    assert job["job_name"] == "kbroker" and job["scheme"] == "https" and job["basic_auth"]["username"] == "prometheus"
    password_file = tmp_path / "kbroker-metrics.password"
    password_file.write_text(PASSWORD + "\n")
    target = f"127.0.0.1:{secured.port}"
    job["tls_config"]["ca_file"] = str(secured.certs.ca)
    job["basic_auth"]["password_file"] = str(password_file)
    job["static_configs"] = [{"targets": [target]}]
    refused = [
        {
            "job_name": "no-credentials",
            "scheme": "https",
            "tls_config": {"ca_file": str(secured.certs.ca)},
            "static_configs": [{"targets": [target]}],
        },
        {
            "job_name": "wrong-password",
            "scheme": "https",
            "tls_config": {"ca_file": str(secured.certs.ca)},
            "basic_auth": {"username": "prometheus", "password": "not-the-password"},
            "static_configs": [{"targets": [target]}],
        },
        {
            "job_name": "plain-http",
            "scheme": "http",
            "basic_auth": {"username": "prometheus", "password": PASSWORD},
            "static_configs": [{"targets": [target]}],
        },
    ]
    with Prometheus(tmp_path / "prometheus", [job, *refused]) as prom:

        def every_job_scraped():
            up = {labels["job"]: value for labels, value in prom.query("up")}
            return up if len(up) == 4 else None

        up = prom.wait_for(every_job_scraped, "a scrape of every job")
        up = prom.wait_for(
            lambda: (lambda u: u if u["kbroker"] == 1 else None)(
                {labels["job"]: value for labels, value in prom.query("up")}
            ),
            "up{job=kbroker} == 1",
        )
        assert up == {"kbroker": 1, "no-credentials": 0, "wrong-password": 0, "plain-http": 0}
        # the broker's metrics, as Prometheus stored them from the authenticated scrape
        controllers = prom.wait_for(
            lambda: prom.query('kafka_controller_active_controller_count{job="kbroker"}'),
            "kafka_controller_active_controller_count from the job",
        )
        assert [value for _, value in controllers] == [1.0]
        assert prom.query('count({job=~"no-credentials|wrong-password|plain-http", __name__=~"kafka_.*"})') == []
        errors = {t["labels"]["job"]: t["lastError"] for t in prom.targets()}
        assert errors["kbroker"] == ""
        assert "401 Unauthorized" in errors["no-credentials"], errors
        assert "401 Unauthorized" in errors["wrong-password"], errors
        assert errors["plain-http"] and "401" not in errors["plain-http"], errors
    assert prom.proc.poll() is not None  # stopped, nothing left running
    log = secured.broker.log_path.read_text()
    assert "metrics listener: basic authentication failed (user 'prometheus') from 127.0.0.1" in log


def test_plain_http_to_the_tls_listener_gets_no_answer(secured):
    with socket.create_connection(("127.0.0.1", secured.port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        try:
            while chunk := s.recv(4096):
                answer += chunk
        except ConnectionResetError:
            pass
    assert not answer.startswith(b"HTTP/"), answer[:100]
    # and TLS without credentials is answered, refused
    ctx = ssl.create_default_context(cafile=str(secured.certs.ca))
    with (
        socket.create_connection(("127.0.0.1", secured.port), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s,
    ):
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        head = s.recv(4096)
    assert head.startswith(b"HTTP/1.1 401 Unauthorized\r\n") and b"\r\nWWW-Authenticate: Basic" in head


def test_the_documented_commands_run(secured):
    require_binary("curl")
    require_binary("promtool", "prometheus")
    bcrypt = require_module("bcrypt")
    [commands] = blocks("sh")
    hash_cmd, promtool, curl_refused, curl_status = [c for c in commands.splitlines() if c.strip()]
    # the hash: getpass reads the password from stdin when there is no terminal
    r = subprocess.run(
        hash_cmd,
        shell=True,
        cwd=ROOT,
        input="a password\n",
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    assert r.returncode == 0, r.stderr
    assert bcrypt.checkpw(b"a password", r.stdout.split()[-1].encode())
    r = subprocess.run(shlex.split(moved(promtool, secured)), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout + r.stderr, r.stdout + r.stderr
    r = subprocess.run(moved(curl_refused, secured), shell=True, capture_output=True, text=True, timeout=30)
    assert r.stdout == "401\n", (r.stdout, r.stderr)
    r = subprocess.run(
        moved(curl_status, secured),
        shell=True,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "METRICS_PASSWORD": PASSWORD},
    )
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    assert status["brokers"][0]["status"] == "up"
    assert (
        f"metrics at https://127.0.0.1:{secured.port}/metrics, status page at https://127.0.0.1:{secured.port}/"
        in secured.broker.log_path.read_text()
    )
