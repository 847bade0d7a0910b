"""A broker restarted soon after its kill -9, while ZooKeeper still holds its dead
session's /brokers/ids/N, waits for that session to expire (one log line saying so) and
then starts, rather than exit; a broker started with the id of a live one is refused at
once. Real brokers and ZooKeeper (tests/support/cluster.py)."""

from __future__ import annotations

import time

from tests.support.broker_proc import BrokerProcess
from tests.support.ports import free_port

#: long enough that a broker started 2 s after the kill (its process takes a few seconds to
#: reach ZooKeeper on a busy machine) still finds the dead session's registration
SESSION_MS = 12000
WAIT_LINE = "of a broker that is gone"


def waiting_lines(b: BrokerProcess) -> list[str]:
    return [line for line in b.log_path.read_text(errors="replace").splitlines() if WAIT_LINE in line]


def test_a_broker_restarted_after_kill_9_waits_for_its_old_session_a_live_ones_id_is_refused(make_cluster, tmp_path):
    cluster = make_cluster(3, config={"zookeeper.session.timeout.ms": SESSION_MS})
    controller = cluster.controller_id()
    same, moved = [i for i in cluster.ids if i != controller]
    cluster.kill(same)
    cluster.kill(moved)
    killed_at = time.monotonic()
    assert {same, moved} <= set(cluster.registered_in_zookeeper())  # the dead sessions hold them
    time.sleep(2)
    # `same` on its own address (the registration names the port it binds again), `moved`
    # on a new port (the registration names a port where nothing listens any more)
    cluster.broker(same).start(wait=False)
    old = cluster.broker(moved)
    cluster.brokers[moved] = BrokerProcess(
        old.data_dir, config=dict(old.config), broker_id=moved, port=free_port(), host=old.host
    )
    cluster.broker(moved).start(wait=False)
    for i in (same, moved):
        cluster.broker(i).wait_ready(timeout=SESSION_MS / 1000 + 30)
    started = time.monotonic() - killed_at
    cluster.wait_for_brokers([1, 2, 3])
    for i, why in ((same, "the address this broker has just bound"), (moved, "connection refused")):
        lines = waiting_lines(cluster.broker(i))
        assert len(lines) == 1, (i, lines)
        assert f"broker {i}: /brokers/ids/{i} is still registered" in lines[0] and why in lines[0], lines[0]
        assert f"waiting up to {SESSION_MS + 2000} ms" in lines[0], lines[0]
        # registered (and served) only after the wait, in this run of its log
        log = cluster.broker(i).log_path.read_text(errors="replace").splitlines()
        started_at = max(n for n, line in enumerate(log) if "connecting to ZooKeeper" in line)
        waited_at = max(n for n, line in enumerate(log) if WAIT_LINE in line)
        assert not any(
            f"registered broker {i} at" in line or "listening on" in line for line in log[started_at:waited_at]
        ), log[started_at:waited_at]
        assert any(f"registered broker {i} at" in line for line in log[waited_at:]), log[waited_at:]
    # and started soon after the old session expired
    assert started < SESSION_MS / 1000 + 2 + 20, started
    meta = cluster.metadata([])[1]
    assert {b.node_id: b.port for b in meta.brokers}[moved] == cluster.broker(moved).port

    # a second broker with the id of a live one: refused at once, no wait for a session
    twin = BrokerProcess(tmp_path / "twin", config=dict(cluster.config), broker_id=2)
    t0 = time.monotonic()
    try:
        twin.start(timeout=30)
        raise AssertionError("a second broker 2 started")
    except RuntimeError as e:
        text = str(e)
    refused_in = time.monotonic() - t0
    assert "broker.id 2 is already registered by a running broker" in text and "refusing to start" in text, text
    assert not waiting_lines(twin)
    assert refused_in < SESSION_MS / 1000, refused_in
    assert twin.proc.returncode == 1
    assert cluster.registered_ids() == [1, 2, 3]
