"""A broker's copier alone, for the kill -9 test (not a test module):

    python -m tests.tier._copy_worker DIR

opens DIR/logs/tiered-0 (a log with remote storage), replays DIR/meta, cleans orphans
and copies every candidate to DIR/remote with a filesystem manager that pauses between
objects (so that a kill lands mid-copy), printing "copying N" as each upload starts."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from broker.config import BrokerConfig
from broker.tier.copier import LocalMetadataLog, RemoteLogManager
from broker.tier.storage import FileSystemStorageManager

from ._support import TIP, tiered_log


class SlowStorage(FileSystemStorageManager):
    def copy_log_segment_data(self, segment_id, start_offset, data):  # type: ignore[no-untyped-def]
        print(f"copying {start_offset}", flush=True)
        super().copy_log_segment_data(segment_id, start_offset, data)

    @staticmethod
    def _write_atomically(path: str, source: str | bytes) -> None:
        time.sleep(0.02)
        FileSystemStorageManager._write_atomically(path, source)


async def main(root: Path) -> None:
    lg = tiered_log(root / "logs" / "tiered-0")
    meta = LocalMetadataLog(str(root / "meta"), BrokerConfig({"log.dir": str(root)}))
    rlm = RemoteLogManager(0, SlowStorage(str(root / "remote")), meta)
    rlm.start()
    rlm.attach(lg, TIP)
    print(f"orphans {await rlm.clean_orphans()}", flush=True)
    print(f"copied {await rlm.copy(lg, TIP)}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
