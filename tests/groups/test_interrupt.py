"""Ctrl-C (KeyboardInterrupt, and the CLI's SIGTERM) can land in the middle of a request
of the project's group member (broker/client/group.py): waiting for a heartbeat's answer,
say. That connection is then dropped (an answer still on its way would be taken for the
next request's), and close() commits and leaves the group over a new one, at once."""

from __future__ import annotations

import time

from broker.client.group import GroupConsumer
from broker.protocol.messages.heartbeat import HeartbeatRequest
from tests.groups.helpers import committed, create_topic, describe, produce


class _Interrupted(Exception):
    pass


def test_an_interrupt_while_waiting_for_an_answer_drops_the_connection_and_close_still_leaves(broker, name):
    topic, group = name, name
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, 10, 1)
    c = GroupConsumer(broker.bootstrap, group, [topic], auto_offset_reset="earliest")
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 10:
        assert time.monotonic() < deadline, f"only {len(got)} records"
        got += c.poll(0.5)
    conn = c.coordinator()
    # a heartbeat is sent, and Ctrl-C arrives while its answer is awaited
    conn.send(
        HeartbeatRequest(group_id=group, generation_id=c.generation_id, member_id=c.member_id, group_instance_id=None)
    )
    real_read = conn._read_frame

    def interrupted(timeout):
        raise KeyboardInterrupt

    conn._read_frame = interrupted
    try:
        conn.receive()
        raise _Interrupted("no interrupt")
    except KeyboardInterrupt:
        pass
    conn._read_frame = real_read
    assert conn.closed, "a connection interrupted mid-request must not be reused"
    t0 = time.monotonic()
    c.close()  # commits and leaves over a new connection
    assert time.monotonic() - t0 < 10
    d = describe(broker.bootstrap, group)
    assert (d["state"], d["members"]) == ("Empty", {}), "the member did not leave the group"
    assert committed(broker.bootstrap, group, {topic: 1}) == {(topic, 0): 10}
