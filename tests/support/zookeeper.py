"""A real ZooKeeper for the tests (Debian's package): broker.perf.zookeeper, which
bench/cluster/run.py uses too, so that the script needs nothing from tests/.

    zk = ZooKeeperServer(tmp_path / "zk").start()
    zk.chroot("t1")            # "127.0.0.1:PORT/t1"
"""
from broker.perf.zookeeper import ZooKeeperServer, available, four_letter_word

__all__ = ["ZooKeeperServer", "available", "four_letter_word"]
