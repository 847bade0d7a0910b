"""KIP-932 share groups: the share-partitions' delivery state (partition.py, manager.py,
session.py), and where that state is kept — the share coordinator on
__share_group_state (coordinator.py, records.py) and the persister that reaches it from
any broker (persister.py)."""
