"""The broker binds its port before it registers (a taken port stops it first) but
answers nobody until it has registered: a broker that then refuses to start (its id
registered by another) never told a client it was ready. In-process, on the embedded
store, with registration held at a gate."""

import asyncio
import struct

from broker.cluster.store.file import FileMetadataStore
from broker.config import BrokerConfig
from broker.server.broker import Broker
from tests.support.ports import free_port


class GatedStore(FileMetadataStore):
    def __init__(self, path):
        super().__init__(path)
        self.registering = asyncio.Event()
        self.gate = asyncio.Event()

    async def register_broker(self, registration, holder_gone=None):
        self.registering.set()
        await self.gate.wait()
        return await super().register_broker(registration, holder_gone)


def api_versions_v0(correlation_id: int) -> bytes:
    client_id = b"t"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


async def answer(reader) -> int:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return struct.unpack(">i", (await reader.readexactly(size))[:4])[0]


def test_connections_wait_in_the_backlog_until_the_broker_has_registered(tmp_path):
    async def scenario():
        data = tmp_path / "data"
        data.mkdir()
        port = free_port()
        config = BrokerConfig({"broker.id": 1, "log.dirs": str(data), "listeners": f"PLAINTEXT://127.0.0.1:{port}"})
        store = GatedStore(str(data))
        broker = Broker(config, store)
        start = asyncio.create_task(broker.start())
        await asyncio.wait_for(store.registering.wait(), 30)
        # bound: the kernel completes the handshake, but the broker reads nothing yet
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(api_versions_v0(7))
        await writer.drain()
        early = asyncio.create_task(answer(reader))
        await asyncio.sleep(0.5)
        assert not early.done(), "the broker answered before it registered"
        store.gate.set()
        assert await asyncio.wait_for(early, 30) == 7  # the waiting request is served
        await asyncio.wait_for(start, 60)
        writer.close()
        await broker.shutdown()

    asyncio.run(scenario())
