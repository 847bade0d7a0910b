"""The embedded file store keeps a reassignment in progress (the topic node's
adding/removing replicas) across a restart, as ZooKeeper keeps the topic znode."""

import asyncio
import json
import uuid

from broker.cluster.store.file import FILE_NAME, FileMetadataStore
from broker.cluster.store.znodes import TopicAssignment


def test_a_reassignment_in_progress_survives_a_restart_and_its_end_clears_it(tmp_path):
    async def main():
        store = FileMetadataStore(str(tmp_path))
        _, fence = await store.try_elect_controller(1)
        tid = uuid.uuid4()
        await store.create_topic("t", tid, {0: [1, 2]}, {})
        moving = TopicAssignment(tid, {0: (3, 1, 2)}, {0: (3,)}, {0: (1, 2)})
        assert await store.set_topic_reassignment("t", moving, 0, fence) == 1
        data = json.loads((tmp_path / FILE_NAME).read_text())
        assert data["topics"]["t"]["adding_replicas"] == {"0": [3]}
        again = FileMetadataStore(str(tmp_path))
        assert await again.get_topic_assignment("t") == (moving, 1)
        _, fence = await again.try_elect_controller(1)
        done = TopicAssignment(tid, {0: (3,)})
        assert await again.set_topic_reassignment("t", done, 1, fence) == 2
        data = json.loads((tmp_path / FILE_NAME).read_text())
        assert "adding_replicas" not in data["topics"]["t"] and "removing_replicas" not in data["topics"]["t"]
        assert await FileMetadataStore(str(tmp_path)).get_topic_assignment("t") == (done, 2)

    asyncio.run(main())
