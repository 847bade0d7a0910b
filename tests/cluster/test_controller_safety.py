"""The controller's safety paths against a real ZooKeeper (issue 16): what the unit tests
(tests/unit/cluster/test_controller.py) drive with fakes, here the store operations they
rely on, on the session's ZooKeeper server.

- sync(): a broker checks a new controller's claim after syncing its ZooKeeper server
  with the leader (a lagging server would refuse the new controller's requests);
- a partition state write sent twice at one expected version (what a multi-op sent
  again after a connection loss is): the second answers BadVersion while ZooKeeper holds
  what was written, the case the controller recognises as written.

A lagging ZooKeeper server itself needs an ensemble; that is left to the fault suite."""

from __future__ import annotations

import asyncio
import functools
import uuid

import pytest

from broker.cluster.store.errors import BadVersion
from broker.cluster.store.zkclient import KafkaZkClient
from broker.cluster.store.znodes import LeaderIsrState

pytestmark = pytest.mark.timeout(60)


def run(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 30))

    return wrapper


@run
async def test_sync_then_read_sees_another_clients_election(zk_connect):
    a = KafkaZkClient(zk_connect, session_timeout_ms=4000)
    b = KafkaZkClient(zk_connect, session_timeout_ms=4000)
    await a.start()
    await b.start()
    try:
        won = await a.try_elect_controller(1)
        assert won is not None
        await b.sync()
        assert await b.get_controller_id() == 1
        assert (await b.get_controller_epoch())[0] == won[0]
    finally:
        await a.close()
        await b.close()


@run
async def test_a_state_write_sent_again_at_the_same_version_answers_bad_version_with_the_state_written(zk_connect):
    zk = KafkaZkClient(zk_connect, session_timeout_ms=4000)
    await zk.start()
    try:
        epoch, epoch_version = await zk.try_elect_controller(1)
        await zk.create_topic("t", uuid.uuid4(), {0: [1, 2, 3]}, {})
        created = await zk.create_partition_states("t", {0: LeaderIsrState(1, 0, (1, 2, 3), epoch)}, epoch_version)
        assert created == {0: 0}
        shrink = LeaderIsrState(1, 0, (1, 2), epoch)
        first = await zk.update_partition_states({("t", 0): (shrink, 0)}, epoch_version)
        again = await zk.update_partition_states({("t", 0): (shrink, 0)}, epoch_version)
        assert first == {("t", 0): 1}
        assert isinstance(again[("t", 0)], BadVersion)
        state, version = (await zk.get_partition_states("t"))[0]
        assert (state.leader, state.isr, state.leader_epoch, version) == (1, (1, 2), 0, 1)
    finally:
        await zk.close()
