"""The controller: one task on the broker's event loop that owns partition state.

Its decisions are pure functions of a snapshot (`assignment`, `election`, `decisions`);
the event loop, ZooKeeper writes and broker requests live around them.
"""
