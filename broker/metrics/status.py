"""The status page and its JSON twin: what one broker knows of its cluster.

    snapshot(broker, history, down) -> dict     (/status.json, and what the page shows)
    render_html(snapshot) -> str                (/: server-rendered; works without JS)

The cluster is this broker's view (its metadata cache, kept by the controller's
UpdateMetadata), and whether each broker is up is checked when the page is asked for:
a TCP connect to its listener (StatusProbe), so a killed broker shows as down at once,
before its ZooKeeper session expires. Groups are those this broker coordinates, with
their lag from the high watermarks of the partitions hosted here.

The charts (in/out rates and request time over the last minutes) come from History, a
sample of the counters every SAMPLE_S kept for HISTORY_SAMPLES samples, drawn as inline
SVG by the server; the page's small script asks /status.json again every few seconds and
redraws them, the brokers' status and the groups' lag (every REFRESH_S). Nothing is loaded from anywhere else.
"""

from __future__ import annotations

import asyncio
import html
import json
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from broker import __version__
from broker.metrics.collectors import group_lag
from broker.metrics.stats import RequestStats, TopicStats
from broker.timeouts import wait_for

if TYPE_CHECKING:
    from broker.cluster.metadata import BrokerInfo
    from broker.metrics.exporter import BrokerMetrics
    from broker.server.broker import Broker

SAMPLE_S = 5.0
REFRESH_S = 2.0  # the page's script asks /status.json this often
HISTORY_SAMPLES = 72  # six minutes
PROBE_TIMEOUT_S = 0.5
_PRODUCE, _FETCH = 0, 1


class History:
    """Rates between samples of the counters: records and bytes in, bytes out, and the
    mean total time of Produce and Fetch requests."""

    def __init__(self, metrics: BrokerMetrics):
        self.metrics = metrics
        self.samples: deque[dict[str, float]] = deque(maxlen=HISTORY_SAMPLES)
        self._last: tuple[float, tuple[float, ...]] | None = None

    def _totals(self) -> tuple[float, ...]:
        broker = self.metrics.broker
        t = broker.replicas.topic_stats or TopicStats()
        req = (broker.server.request_stats or RequestStats()).apis
        out: list[float] = [sum(t.messages_in.values()), sum(t.bytes_in.values()), sum(t.bytes_out.values())]
        for key in (_PRODUCE, _FETCH):
            s = req.get(key)
            out += [0.0, 0.0] if s is None else [s.total_time, float(s.requests)]
        return tuple(out)

    def sample(self) -> None:
        now = time.time()
        totals = self._totals()
        if self._last is not None:
            then, before = self._last
            dt = max(now - then, 1e-6)
            d = [a - b for a, b in zip(totals, before)]
            self.samples.append(
                {
                    "t": round(now, 3),
                    "messages_in_per_s": round(d[0] / dt, 3),
                    "bytes_in_per_s": round(d[1] / dt, 3),
                    "bytes_out_per_s": round(d[2] / dt, 3),
                    "produce_ms": round(1000 * d[3] / d[4], 3) if d[4] else 0.0,
                    "fetch_ms": round(1000 * d[5] / d[6], 3) if d[6] else 0.0,
                }
            )
        self._last = (now, totals)

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(SAMPLE_S)


class StatusProbe:
    """Which brokers are down: every broker this one has known (live in its metadata,
    or named as a replica) gets a TCP connect to its listener, all at once, bounded by
    PROBE_TIMEOUT_S."""

    def __init__(self, broker: Broker):
        self.broker = broker
        self.known: dict[int, BrokerInfo] = {}

    async def down_brokers(self) -> dict[int, str]:
        """broker id -> why it is down ("unreachable", "not registered", "address unknown")."""
        live = self.broker.metadata.brokers()
        self.known.update(live)
        ids = set(self.known) | {
            r for t in self.broker.metadata.topics().values() for p in t.partitions.values() for r in p.replicas
        }
        ids.discard(self.broker.broker_id)
        checks = {i: self._reachable(self.known[i]) for i in ids if i in self.known}
        results = await asyncio.gather(*checks.values()) if checks else []
        down: dict[int, str] = {i: "address unknown" for i in ids if i not in self.known}
        for i, ok in zip(checks, results):
            if not ok:
                down[i] = "unreachable"
            elif i not in live:
                down[i] = "not registered"
        return down

    async def _reachable(self, info: BrokerInfo) -> bool:
        try:
            _reader, writer = await wait_for(asyncio.open_connection(info.host, info.port), PROBE_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            return False
        writer.close()
        return True


def snapshot(broker: Broker, history: History | None = None, down: dict[int, str] | None = None) -> dict[str, Any]:
    down = down or {}
    metadata = broker.metadata
    live = metadata.brokers()
    known: dict[int, dict[str, Any]] = {}
    for i, b_info in live.items():
        known[i] = {"id": i, "host": b_info.host, "port": b_info.port, "rack": b_info.rack}
    topics = []
    for name, info in sorted(metadata.topics().items()):
        parts: list[dict[str, Any]] = []
        for index, s in sorted(info.partitions.items()):
            for r in s.replicas:
                known.setdefault(r, {"id": r, "host": None, "port": None, "rack": None})
            offline = s.leader < 0 or s.leader in down or s.leader not in live
            parts.append(
                {
                    "partition": index,
                    "leader": s.leader,
                    "leader_epoch": s.leader_epoch,
                    "replicas": list(s.replicas),
                    "isr": list(s.isr),
                    "offline_replicas": list(s.offline_replicas),
                    "under_replicated": len(s.isr) < len(s.replicas),
                    "offline": offline,
                }
            )
        topics.append(
            {
                "name": name,
                "internal": info.internal,
                "partitions": parts,
                "under_replicated": sum(1 for p in parts if p["under_replicated"]),
                "offline": sum(1 for p in parts if p["offline"]),
            }
        )
    brokers = []
    for i in sorted(known):
        b = dict(known[i])
        b["self"] = i == broker.broker_id
        b["controller"] = i == metadata.controller_id
        b["status"] = "up" if i not in down and (i in live or b["self"]) else "down"
        b["why"] = down.get(i, "" if b["status"] == "up" else "not registered")
        brokers.append(b)
    groups = []
    for g in broker.coordinator.list_groups():
        lag = group_lag(broker, g)
        groups.append(
            {
                "group": g.group_id,
                "state": g.state.value,
                "generation": g.generation_id,
                "protocol": g.protocol_name,
                "members": [
                    {"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host}
                    for m in g.members.values()
                ],
                "lag": [
                    {"topic": t, "partition": p, "committed": g.offsets[(t, p)].offset, "lag": n}
                    for (t, p), n in sorted(lag.items())
                ],
                "total_lag": sum(lag.values()),
            }
        )
    logs = broker.logs
    log_dirs: list[dict[str, Any]] = []
    for d in logs.dirs:
        health = logs.health[d]
        err = health.error
        why = (err.strerror or str(err)) if err is not None else ""
        if d in logs.offline_dirs:
            log_dirs.append(
                {
                    "path": d,
                    "status": "offline",
                    "error": why,
                    "partitions": [f"{tp.topic}-{tp.partition}" for tp in logs.offline_dirs[d]],
                }
            )
        else:
            log_dirs.append(
                {
                    "path": d,
                    "status": "online" if err is None else "writes failing",
                    "error": why,
                    "partitions": logs.partition_count(d),
                }
            )
    zk = None
    if broker.in_cluster:
        zk = {"connect": broker.config["zookeeper.connect"], "connected": broker.store.connected}
    return {
        "version": __version__,
        "time": round(time.time(), 3),
        "broker_id": broker.broker_id,
        "uptime_s": round(time.time() - broker.started_at, 1) if broker.started_at else 0.0,
        "cluster": {
            "cluster_id": metadata.cluster_id,
            "controller_id": metadata.controller_id,
            "controller_epoch": metadata.controller_epoch,
            "zookeeper": zk,
        },
        "brokers": brokers,
        "topics": topics,
        "groups": groups,
        "log_dirs": log_dirs,
        "history": list(history.samples) if history is not None else [],
    }


# ---------------------------------------------------------------------- HTML


def _e(value: object) -> str:
    return html.escape(str(value))


def _ids(values: list[int], down: set[int]) -> str:
    return ", ".join(f'<span class="down">{v}</span>' if v in down else str(v) for v in values)


CHARTS = (
    ("messages_in_per_s", "records in /s"),
    ("bytes_in_per_s", "bytes in /s"),
    ("bytes_out_per_s", "bytes out /s"),
    ("produce_ms", "Produce ms (mean total time)"),
    ("fetch_ms", "FetchConsumer ms (mean total time, long polls included)"),
)
CHART_W, CHART_H = 300, 60


def _chart(key: str, samples: list[dict[str, float]]) -> str:
    values = [s[key] for s in samples]
    top = max(values, default=0.0) or 1.0
    n = max(len(values) - 1, 1)
    points = " ".join(f"{i * CHART_W / n:.1f},{CHART_H - v * CHART_H / top:.1f}" for i, v in enumerate(values))
    last = values[-1] if values else 0.0
    return (
        f'<svg id="chart-{key}" width="{CHART_W}" height="{CHART_H}" viewBox="0 0 {CHART_W} {CHART_H}">'
        f'<polyline fill="none" stroke="#1b6ac9" stroke-width="1.5" points="{points}"/></svg>'
        f'<div class="fig">now <b id="last-{key}">{last:g}</b>, peak <span id="peak-{key}">{top:g}</span></div>'
    )


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.2em;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.4em}
table{border-collapse:collapse;margin:.3em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}
th{background:#f2f2f2}.down,.offline{color:#fff;background:#c62828;padding:0 3px}
.urp{background:#ffe0a0}.charts{display:flex;flex-wrap:wrap;gap:1em}.chart{border:1px solid #ddd;padding:4px}
.fig{font-size:12px;color:#555}
"""

_SCRIPT = """
(function(){
 var W=%d,H=%d,keys=%s;
 function draw(h){keys.forEach(function(k){
  var v=h.map(function(s){return s[k]}),top=Math.max.apply(null,v.concat([0]))||1,n=Math.max(v.length-1,1);
  var p=v.map(function(x,i){return (i*W/n).toFixed(1)+','+(H-x*H/top).toFixed(1)}).join(' ');
  var svg=document.getElementById('chart-'+k);if(!svg)return;
  svg.firstChild.setAttribute('points',p);
  document.getElementById('last-'+k).textContent=v.length?v[v.length-1]:0;
  document.getElementById('peak-'+k).textContent=top;});}
 function tick(){var r=new XMLHttpRequest();r.open('GET','/status.json');
  r.onload=function(){if(r.status!==200)return;var d=JSON.parse(r.responseText);draw(d.history);
   d.brokers.forEach(function(b){var c=document.getElementById('broker-'+b.id);
    if(c){c.textContent=b.status+(b.why?' ('+b.why+')':'');c.className=b.status==='up'?'':'down';}});
   d.groups.forEach(function(g){var c=document.getElementById('lag-'+g.group);if(c)c.textContent=g.total_lag;});
   document.getElementById('updated').textContent=new Date(d.time*1000).toISOString();};
  r.send();}
 setInterval(tick,%d);
})();
"""


def render_html(data: dict[str, Any]) -> str:
    down = {b["id"] for b in data["brokers"] if b["status"] != "up"}
    c = data["cluster"]
    zk = c["zookeeper"]
    out = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>kbroker {data['broker_id']}: status</title>"
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>kbroker broker {data['broker_id']} — status</h1>",
        f"<p>cluster <b>{_e(c['cluster_id'])}</b>, controller <b id='controller'>{c['controller_id']}</b> "
        f"(epoch <b>{c['controller_epoch']}</b>), ZooKeeper "
        + (
            f"<b>{_e(zk['connect'])}</b> ({'connected' if zk['connected'] else 'DISCONNECTED'})"
            if zk
            else "none (a broker alone)"
        )
        + f"; kbroker {_e(data['version'])}, up {data['uptime_s']:.0f} s; as of <span id='updated'>"
        f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(data['time']))}</span>. "
        "<a href='/status.json'>status.json</a>, <a href='/metrics'>metrics</a></p>",
        "<h2>Brokers</h2><table><tr><th>id</th><th>address</th><th>rack</th><th>role</th><th>status</th></tr>",
    ]
    for b in data["brokers"]:
        addr = f"{b['host']}:{b['port']}" if b["host"] else "?"
        role = ", ".join(r for r, on in (("controller", b["controller"]), ("this broker", b["self"])) if on)
        status = b["status"] + (f" ({b['why']})" if b["why"] else "")
        cls = "" if b["status"] == "up" else " class='down'"
        out.append(
            f"<tr><td>{b['id']}</td><td>{_e(addr)}</td><td>{_e(b['rack'] or '')}</td><td>{role}</td>"
            f"<td id='broker-{b['id']}'{cls}>{_e(status)}</td></tr>"
        )
    out.append(
        "</table><h2>Log directories (this broker)</h2><table><tr><th>path</th><th>status</th><th>partitions</th></tr>"
    )
    for d in data["log_dirs"]:
        status = d["status"] + (f" ({d['error']})" if d["error"] else "")
        cls = " class='offline'" if d["status"] == "offline" else " class='urp'" if d["status"] != "online" else ""
        held = d["partitions"]
        count = (f"{len(held)} offline: {', '.join(held)}" if held else "none") if isinstance(held, list) else held
        out.append(f"<tr><td>{_e(d['path'])}</td><td{cls}>{_e(status)}</td><td>{_e(count)}</td></tr>")
    out.append("</table><h2>Rates and request time (last minutes)</h2><div class='charts'>")
    for key, label in CHARTS:
        out.append(f"<div class='chart'><div>{_e(label)}</div>{_chart(key, data['history'])}</div>")
    out.append(
        "</div><h2>Topics</h2><table><tr><th>topic</th><th>partition</th><th>leader</th><th>replicas</th>"
        "<th>ISR</th><th>state</th></tr>"
    )
    for t in data["topics"]:
        for p in t["partitions"]:
            state = "offline" if p["offline"] else "under-replicated" if p["under_replicated"] else "ok"
            cls = " class='offline'" if p["offline"] else " class='urp'" if p["under_replicated"] else ""
            leader = "none" if p["leader"] < 0 else _ids([p["leader"]], down)
            gone = down | set(p.get("offline_replicas", ()))
            out.append(
                f"<tr{cls}><td>{_e(t['name'])}</td><td>{p['partition']}</td><td>{leader}</td>"
                f"<td>{_ids(p['replicas'], gone)}</td><td>{_ids(p['isr'], down)}</td><td>{state}</td></tr>"
            )
    out.append("</table><h2>Consumer groups (coordinated by this broker)</h2>")
    if not data["groups"]:
        out.append("<p>none</p>")
    for g in data["groups"]:
        members = ", ".join(f"{m['client_id']} ({m['host']})" for m in g["members"]) or "none"
        out.append(
            f"<h3>{_e(g['group'])}: {_e(g['state'])}, generation {g['generation']}, total lag "
            f"<span id='lag-{_e(g['group'])}'>{g['total_lag']}</span></h3><p>members: {_e(members)}</p>"
            "<table><tr><th>topic</th><th>partition</th><th>committed</th><th>lag</th></tr>"
        )
        for row in g["lag"]:
            out.append(
                f"<tr><td>{_e(row['topic'])}</td><td>{row['partition']}</td><td>{row['committed']}</td>"
                f"<td>{row['lag']}</td></tr>"
            )
        out.append("</table>")
    script = _SCRIPT % (CHART_W, CHART_H, json.dumps([k for k, _ in CHARTS]), int(REFRESH_S * 1000))
    out.append(f"<script>{script}</script></body></html>")
    return "".join(out)
