"""Disk faults under load: one broker's data dir on a small tmpfs of its own
(tests/support/small_fs.py; root), filled up (ENOSPC) while it follows or leads, then
freed; checked as the other schedules are (tests/faults/test_schedules.py).

What this machine allows: tmpfs mounts (root, CAP_SYS_ADMIN), so a real ENOSPC without a
loop device. A read-only log dir is not made here: remounting the tmpfs read-only is
refused while the broker holds segments open for writing (EBUSY), and a read-only bind
mount would not reach the descriptors already open.
"""
from __future__ import annotations

import pytest

from tests.faults.test_schedules import run_schedule
from tests.support.cluster import poll_until
from tests.support.small_fs import small_tmpfs

pytestmark = pytest.mark.slow

VICTIM = 2          # the broker whose data dir is on the small file system


def test_follower_disk_full_then_freed(tmp_path, fault_cluster, net):
    with small_tmpfs(tmp_path / "cluster0" / f"broker-{VICTIM}", mib=64) as fs:
        c = fault_cluster(3)

        def fault(n, topic: str) -> None:
            fs.fill()
            poll_until(f"broker {VICTIM} out of the ISR (its disk full)",
                       lambda: (VICTIM not in (isr := c.isr_of(topic, 0, via=1)), isr, f"ISR {isr}"), timeout=20)
        r = run_schedule(c, net, "follower-disk-full", 1611, fault, hold_s=2,
                         assignment=[[1, VICTIM, 3], [3, VICTIM, 1]], heal=fs.free)
        c.close()
    assert r.ok, r.summary()


def test_leader_disk_full_then_freed(tmp_path, fault_cluster, net):
    with small_tmpfs(tmp_path / "cluster0" / f"broker-{VICTIM}", mib=64) as fs:
        c = fault_cluster(3)
        r = run_schedule(c, net, "leader-disk-full", 1612, lambda n, t: fs.fill(), hold_s=6,
                         assignment=[[VICTIM, 1, 3], [1, VICTIM, 3]], heal=fs.free)
        c.close()
    assert r.ok, r.summary()
