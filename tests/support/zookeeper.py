"""A real ZooKeeper for the tests (Debian's package): broker.perf.zookeeper, which
bench/cluster/run.py uses too, so that the script needs nothing from tests/.

    zk = ZooKeeperServer(tmp_path / "zk").start()
    zk.chroot("t1")            # "127.0.0.1:PORT/t1"
    ens = ZooKeeperEnsemble(tmp_path / "zk", hosts=["127.0.0.2", "127.0.0.3", "127.0.0.4"]).start()
    ens.leader().kill()        # a quorum of three: each member a ZooKeeperServer
"""

from broker.perf.zookeeper import ZooKeeperEnsemble, ZooKeeperServer, available, four_letter_word

__all__ = ["ZooKeeperEnsemble", "ZooKeeperServer", "available", "four_letter_word"]
