"""A real broker in this process, on an event loop thread of its own: clients connect to
it over TCP as to any broker, and a test looks at its share partitions and reads back the
share-partition state it wrote to __share_group_state (through its share persister, as a
new leader reads it)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

from broker.client.connection import BrokerConnection
from broker.config import BrokerConfig
from broker.server.broker import Broker
from broker.share.coordinator import ShareState
from tests.support.ports import free_port


class Running:
    def __init__(self, broker: Broker, loop: asyncio.AbstractEventLoop, thread: threading.Thread, port: int):
        self.broker, self.loop, self.thread, self.port = broker, loop, thread, port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def call(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def conn(self) -> BrokerConnection:
        return BrokerConnection("127.0.0.1", self.port, timeout=20)

    def state(self, group: str, topic_id: uuid.UUID, partition: int = 0) -> ShareState:
        """The share-partition state as persisted (ReadShareGroupState at the partition's
        current leader epoch: no fencing, nothing written)."""
        name = self.broker.metadata.topic_name(topic_id)
        assert name is not None
        epoch = self.broker.replicas.leader_partition(name, partition).state.leader_epoch
        st = self.call(self.broker.share_persister.read(group, topic_id, partition, epoch))
        assert st.error == 0, st
        return st

    def stop(self) -> None:
        try:
            self.call(self.broker.shutdown(), 60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


def start_broker(data: Path, config: dict[str, str]) -> Running:
    port = free_port()
    cfg = BrokerConfig(
        {
            "broker.id": 1,
            "log.dirs": str(data),
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            **config,
        }
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True, name="in-process broker")
    thread.start()
    broker = Broker(cfg)
    try:
        asyncio.run_coroutine_threadsafe(broker.start(), loop).result(60)
    except BaseException:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        raise
    return Running(broker, loop, thread, port)
