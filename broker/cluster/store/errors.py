"""The metadata store's errors: one vocabulary for both implementations, KafkaZkClient
(zkclient.py, ZooKeeper) and FileMetadataStore (file.py, a broker alone), so that their
callers (the broker, topic administration, the controller, the CLI) catch classes, the
same ones whichever store is configured.

Every error either store raises on purpose is a StoreError; a caller catches the
subclass it handles and lets the rest propagate. StoreError itself (no subclass) is what
has no caller-specific meaning: the ZooKeeper client closed or not started, a
preferred replica election already pending, producer ids exhausted, any other
ZooKeeper error. Not StoreErrors: znodes.ZNodeDataError (a znode whose data cannot be
decoded, a ValueError) and the OSError of a file store that cannot write its file.

`update_partition_states` and `create_partition_states` return BadVersion / NoSuchTopic
instances as per-partition results instead of raising them.

This module imports nothing: a broker alone imports it without loading kazoo.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every error of the metadata store (either implementation)."""


class StoreUnavailable(StoreError):
    """ZooKeeper unreachable: no connection within the connection timeout (the message
    names the connect string and the timeout)."""


class BrokerIdInUse(StoreError):
    """Another session has registered this broker id: a live broker's (`live`), or one
    that did not expire within the time a starting broker waited for it."""

    def __init__(self, message: str, live: bool = True):
        super().__init__(message)
        self.live = live


class TopicExists(StoreError):
    """The topic exists (also while it is being deleted)."""


class NoSuchTopic(StoreError):
    """The topic, or the partition state written to, does not exist."""


class BadVersion(StoreError):
    """A conditional write found another version (someone else wrote first, or the node
    to create exists): read and decide again."""


class ControllerMoved(StoreError):
    """A write fenced by a controller epoch that is no longer the current one: a newer
    controller was elected, and nothing was written."""


class MetadataFileError(StoreError):
    """The embedded store's metadata file cannot be read (the message names it)."""
