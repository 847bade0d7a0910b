"""The metadata store's one error vocabulary (broker/cluster/store/errors.py) where no
ZooKeeper is needed: a broker alone catches the store's errors by class without ever
loading kazoo, the embedded store's unreadable file, the CLI's unreachable ZooKeeper.
Both stores raising the same classes for the same situations: tests/cluster/test_store_contract.py."""

import asyncio
import json
import subprocess
import sys
import tempfile
import uuid

import pytest

from broker.cli.errors import CliError
from broker.cluster.store import errors
from broker.cluster.store.file import FILE_NAME, FileMetadataStore
from tests.support.ports import free_port

BROKER_ALONE = """
import asyncio, json, sys, uuid
from broker.cluster.store.errors import BadVersion, NoSuchTopic, TopicExists
from broker.config import BrokerConfig
from broker.protocol.errors import KafkaProtocolError
from broker.server.broker import Broker

async def main(data, port):
    broker = Broker(BrokerConfig({"broker.id": 1, "log.dirs": data, "listeners": f"PLAINTEXT://127.0.0.1:{port}"}))
    await broker.start()
    seen = {}
    try:
        await broker.admin.create_topic("t", 1, 1)
        # created behind the cache's back: the admin's own check passes, the store refuses
        await broker.store.create_topic("raced", uuid.uuid4(), {0: [1]}, {})
        try:
            await broker.admin.create_topic("raced", 1, 1)
        except KafkaProtocolError as e:
            seen["admin"] = e.code.name
        for what, call in (("get", broker.store.get_topic("nope")),
                           ("assign", broker.store.set_topic_assignment("t", None, {0: [1]}, 7))):
            try:
                await call
            except (NoSuchTopic, BadVersion) as e:
                seen[what] = type(e).__name__
        try:
            await broker.store.create_topic("t", uuid.uuid4(), {0: [1]}, {})
        except TopicExists as e:
            seen["create"] = type(e).__name__
        seen["store"] = type(broker.store).__name__
    finally:
        await broker.shutdown()
    seen["kazoo"] = sorted(m for m in sys.modules if m.startswith("kazoo"))
    seen["errors loaded"] = "broker.cluster.store.errors" in sys.modules
    print(json.dumps(seen))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def test_a_broker_alone_catches_the_stores_errors_by_class_without_loading_kazoo(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", BROKER_ALONE, str(tmp_path / "data"), str(free_port())],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tempfile.gettempdir(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {
        "admin": "TOPIC_ALREADY_EXISTS",
        "get": "NoSuchTopic",
        "assign": "BadVersion",
        "create": "TopicExists",
        "store": "FileMetadataStore",
        "kazoo": [],
        "errors loaded": True,
    }


def test_every_store_error_is_a_store_error_and_imports_nothing():
    for cls in (
        errors.StoreUnavailable,
        errors.BrokerIdInUse,
        errors.TopicExists,
        errors.NoSuchTopic,
        errors.BadVersion,
        errors.ControllerMoved,
        errors.MetadataFileError,
    ):
        assert issubclass(cls, errors.StoreError) and cls is not errors.StoreError
    assert issubclass(errors.StoreError, Exception)
    code = (
        "import sys, broker.cluster.store.errors; "
        "assert not [m for m in sys.modules if m.startswith(('kazoo', 'broker.cluster.store.zk'))], sys.modules"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tempfile.gettempdir()
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("content", [b"{not json", b'{"topics": {"t": {"partitions": {"0": {}}}}}'])
def test_an_unreadable_metadata_file_is_a_metadata_file_error_naming_it(tmp_path, content):
    (tmp_path / FILE_NAME).write_bytes(content)
    with pytest.raises(errors.MetadataFileError) as e:
        FileMetadataStore(str(tmp_path))
    assert str(tmp_path / FILE_NAME) in str(e.value)
    assert (tmp_path / FILE_NAME).read_bytes() == content  # left as it was


def test_a_readable_metadata_file_is_loaded(tmp_path):
    """The other side of the test above: what it writes, a new store reads."""

    async def scenario():
        store = FileMetadataStore(str(tmp_path))
        topic_id = uuid.uuid4()
        await store.create_topic("t", topic_id, {0: [1]}, {"retention.ms": "5"})
        again = FileMetadataStore(str(tmp_path))
        assert await again.get_topic("t") == (topic_id, {0: [1]}, 0)
        assert json.loads((tmp_path / FILE_NAME).read_text())["version"] == 2

    asyncio.run(scenario())


def test_the_cli_names_an_unreachable_zookeeper(monkeypatch):
    """`broker cluster describe --zookeeper` catches the store's errors as StoreError."""
    from broker.cli import clients
    from broker.cluster.store import zkclient

    class Quick(zkclient.KafkaZkClient):
        def __init__(self, connect, **kwargs):
            super().__init__(connect, session_timeout_ms=500, connection_timeout_ms=500)

    monkeypatch.setattr(zkclient, "KafkaZkClient", Quick)
    connect = f"127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(CliError) as e:
        clients._controller_epoch(connect)
    assert str(e.value) == (
        f"cannot read the controller epoch: ZooKeeper at {connect} is unreachable: no connection within 500 ms"
    )
