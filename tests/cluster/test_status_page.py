"""Issue 19, test 2: the status page of a real 3-broker cluster in headless Chromium
(Debian's `chromium`), and the Grafana dashboard checked against the metrics exported.

The page is read as Chromium renders it (--dump-dom, with JavaScript on and off: the
figures are server-rendered) and photographed (--screenshot, a real PNG checked): the
real topic names, leaders and a group's lag appear; a killed broker shows as down on
the page within 5 s of its death (its ZooKeeper session has not even expired by then).
Every query of deploy/grafana/kbroker-dashboard.json names only metrics the brokers
export.
"""

from __future__ import annotations

import json
import re
import struct
import time
import urllib.request
import zlib
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.client import Cluster as Client, Producer
from broker.client.group import GroupConsumer
from tests.support.chromium import Chromium
from tests.support.deps import require_binary
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "kbroker-dashboard.json"
TOPICS = ("pageviews", "checkout")
RECORDS = 40
COMMITTED = 15


def page_text(dom: str) -> str:
    """The DOM's text, tags dropped, whitespace collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style)[^>]*>.*?</\1>", "", dom, flags=re.S)))


def status(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status.json", timeout=5) as r:
        return json.load(r)


def png_size(path: Path) -> tuple[int, int, bytes]:
    """(width, height, decompressed image data) of a PNG, checked to be one."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    idat = b""
    pos = 8
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return width, height, zlib.decompress(idat)


@pytest.fixture
def cluster_with_page(make_cluster):
    require_binary("chromium")
    ports = {i: free_port() for i in (1, 2, 3)}
    cluster = make_cluster(
        3,
        config={"offsets.topic.num.partitions": 1},
        per_broker={i: {"metrics.listener": f"127.0.0.1:{p}"} for i, p in ports.items()},
    )
    with Client(cluster.bootstrap) as c:
        for t in TOPICS:
            c.create_topic(t, 2, 3)
    for t in TOPICS:
        for p in (0, 1):
            cluster.wait_for_leader(t, p, everywhere=True)
    with Producer(cluster.bootstrap, acks=-1) as producer:
        for i in range(RECORDS):
            producer.send("pageviews", b"view-%d" % i, partition=0)
    with GroupConsumer(
        cluster.bootstrap, "dashboard-readers", ["pageviews"], auto_offset_reset="earliest", enable_auto_commit=False
    ) as group:
        group.poll(1.0)
        group.commit({("pageviews", 0): COMMITTED})
    return cluster, ports


def test_status_page_in_chromium(cluster_with_page, tmp_path):
    cluster, ports = cluster_with_page
    # the broker coordinating the group shows it, with its lag once its high watermark is in
    coordinator = None
    deadline = time.monotonic() + 30
    while coordinator is None and time.monotonic() < deadline:
        for i, p in ports.items():
            groups = {g["group"]: g for g in status(p)["groups"]}
            g = groups.get("dashboard-readers")
            if g and g["total_lag"] == RECORDS - COMMITTED:
                coordinator = i
        time.sleep(0.3)
    assert coordinator is not None, "no broker reports the group with its lag"
    url = f"http://127.0.0.1:{ports[coordinator]}/"
    leaders = {(t, p): cluster.leader_of(t, p) for t in TOPICS for p in (0, 1)}
    controller = cluster.controller_id()

    with Chromium(tmp_path) as chromium:
        pages = {js: chromium.open(url, javascript=js) for js in (True, False)}
        # JavaScript on and off: the same server-rendered figures
        for page in pages.values():
            dom = page.html()
            text = page_text(dom)
            assert f"kbroker broker {coordinator} — status" in text
            for (t, p), leader in leaders.items():
                # a partition's row: topic, partition, leader, replicas, ISR, state
                assert re.search(rf"\b{t} {p} {leader} [123], [123], [123] [123], [123], [123] ok\b", text), (t, p)
            assert f"controller {controller} (epoch" in text
            assert "dashboard-readers: Stable" in text or "dashboard-readers: Empty" in text
            assert re.search(rf"\bpageviews 0 {COMMITTED} {RECORDS - COMMITTED}\b", text), text
            assert f"total lag {RECORDS - COMMITTED}" in text
            assert "<script>" in dom and "/status.json" in dom  # the live refresh, inline
            assert "http://" not in re.sub(r"http://127\.0\.0\.1:\d+", "", dom) and "https://" not in dom
        shot = tmp_path / "status.png"
        pages[True].screenshot(shot)
        width, height, pixels = png_size(shot)
        assert (width, height) == (1280, 1600)
        # text, tables and charts down the page, not a blank one: a scanline holding anything but
        # its background has more than two byte values once filtered (a PNG's filters turn a
        # uniform line into one repeated byte), so count those lines
        stride = 1 + 4 * width if len(pixels) == height * (1 + 4 * width) else 1 + 3 * width
        drawn = sum(len(set(pixels[y * stride + 1 : (y + 1) * stride])) > 2 for y in range(height))
        print(f"screenshot: {shot.stat().st_size} bytes, {drawn} of {height} scanlines drawn")
        assert drawn > 300, drawn  # the whole page draws 369-373
        assert len(set(pixels[::97])) > 8  # many colours, not one

        # the script refreshes the page with JavaScript on, and only then
        stamp = {js: re.search(r'id="updated">([^<]+)<', page.html()).group(1) for js, page in pages.items()}
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            now = re.search(r'id="updated">([^<]+)<', pages[True].html()).group(1)
            if now != stamp[True]:
                break
            time.sleep(0.3)
        assert now != stamp[True], "the live script did not refresh the page"
        assert re.search(r'id="updated">([^<]+)<', pages[False].html()).group(1) == stamp[False]

        # a killed broker is down on the live page within 5 s (the probe: its ZooKeeper
        # session, 6 s, has not even expired by then)
        victim = next(i for i in ports if i not in (coordinator, controller))
        cluster.kill(victim)
        killed = time.monotonic()
        cell = re.compile(rf'id="broker-{victim}" class="down">down \(unreachable\)<')
        while not cell.search(pages[True].html()):
            assert time.monotonic() - killed < 5, "the killed broker is not shown down within 5 s"
            time.sleep(0.2)
        shown = time.monotonic() - killed
        assert shown < 5
        pages[False].reload()  # without JavaScript: on the next load
        text = page_text(pages[False].html())
        assert re.search(rf"\b{victim} 127\.0\.0\.1:\d+ +down \(unreachable\)", text), text
        pages[True].screenshot(tmp_path / "down.png")
        assert png_size(tmp_path / "down.png")[:2] == (1280, 1600)
        print(f"killed broker {victim} shown down on the live page after {shown:.2f} s; screenshots in {tmp_path}")

    # the Grafana dashboard asks only for metrics the brokers export
    with urllib.request.urlopen(f"http://127.0.0.1:{ports[coordinator]}/metrics", timeout=5) as r:
        exported = set()
        for family in text_string_to_metric_families(r.read().decode()):
            exported.add(family.name)
            exported.update(
                {
                    "counter": [f"{family.name}_total"],
                    "histogram": [f"{family.name}_{s}" for s in ("bucket", "count", "sum")],
                }.get(family.type, [])
            )
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    assert len(exprs) >= 25
    named = set()
    for expr in exprs:
        names = set(re.findall(r"\b((?:kafka|kbroker|process)_[a-z_]+)\b", expr))
        assert names, expr
        named |= names
    assert not named - exported, f"dashboard queries name metrics not exported: {sorted(named - exported)}"
    for wanted in (
        "kafka_server_under_replicated_partitions",
        "kafka_controller_active_controller_count",
        "kafka_consumer_group_lag",
        "kafka_network_total_time_seconds_bucket",
    ):
        assert wanted in named
