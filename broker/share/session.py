"""Share sessions (KIP-932; Kafka's ShareSessionCache): what a share consumer fetches from
one broker, kept between its ShareFetch requests.

A session is keyed by (group id, member id). ShareFetch with epoch 0 opens one (replacing
the member's previous session on this broker) and names the partitions it fetches; each
later ShareFetch or ShareAcknowledge carries the session's current epoch, which the broker
then moves on by one (wrapping from 2^31-1 to 1), adds the partitions it names and drops
the ones it forgets; epoch -1 closes the session. A request with an epoch other than the
session's is answered INVALID_SHARE_SESSION_EPOCH, one for a session that does not exist
(or was closed, or evicted) SHARE_SESSION_NOT_FOUND. At most `max_sessions` sessions are
open on a broker (group.share.max.share.sessions): a new one beyond that is refused with
SHARE_SESSION_LIMIT_REACHED.

A session belongs to the connection that opened it: when that connection closes, the
session goes and the member's acquired records are released (the manager's
`connection_closed`), as Kafka 4.x does; a member that leaves its group loses its sessions
(the manager's membership listener).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

TopicIdPartition = tuple[uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


@dataclass(eq=False)
class ShareSession:
    group_id: str
    member_id: str
    connection: object  # the connection that opened it (its identity only)
    epoch: int = 1  # what the next request must carry
    #: the partitions it fetches, in the order first named
    partitions: dict[TopicIdPartition, None] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.group_id, self.member_id)


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        #: id(connection) -> the sessions it opened
        self._by_connection: dict[int, dict[tuple[str, str], ShareSession]] = {}

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def open(self, group_id: str, member_id: str, connection: object) -> ShareSession | None:
        """A new session (the member's previous one on this broker replaced); None when
        the cache is full."""
        old = self.remove(group_id, member_id)
        if old is None and len(self.sessions) >= self.max_sessions:
            return None
        s = ShareSession(group_id, member_id, connection)
        self.sessions[s.key] = s
        self._by_connection.setdefault(id(connection), {})[s.key] = s
        return s

    def remove(self, group_id: str, member_id: str) -> ShareSession | None:
        s = self.sessions.pop((group_id, member_id), None)
        if s is not None:
            mine = self._by_connection.get(id(s.connection))
            if mine is not None:
                mine.pop(s.key, None)
                if not mine:
                    del self._by_connection[id(s.connection)]
        return s

    def of_connection(self, connection: object) -> list[ShareSession]:
        return list(self._by_connection.get(id(connection), {}).values())

    def of_group(self, group_id: str) -> list[ShareSession]:
        return [s for s in self.sessions.values() if s.group_id == group_id]
