"""The SCRAM credentials a broker checks clients against: a cache of what the metadata
store holds under /config/users (Kafka's CredentialCache), loaded at start and kept
current by the users/<user> config change notifications — so a credential added or
removed on any broker (AlterUserScramCredentials, `broker users`, Kafka's kafka-configs)
is known everywhere within a notification. A lookup is a dict read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from broker.security.scram import MECHANISMS, ScramCredential

log = logging.getLogger(__name__)


class CredentialCache:
    def __init__(self) -> None:
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        creds = self._users.get(user)
        return None if creds is None else creds.get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return self._users

    def update(self, user: str, config: Mapping[str, str]) -> None:
        """A user's config as the store has it (SCRAM-SHA-256 / SCRAM-SHA-512 entries;
        others, such as quotas, are not credentials)."""
        creds = {}
        for mechanism in MECHANISMS:
            text = config.get(mechanism)
            if text is None:
                continue
            try:
                creds[mechanism] = ScramCredential.from_text(text)
            except ValueError as exc:
                log.warning("user %s: unreadable %s credential in the store (%s); ignored", user, mechanism, exc)
        if creds:
            self._users[user] = creds
        else:
            self._users.pop(user, None)

    def load(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        self._users = {}
        for user, config in configs.items():
            self.update(user, config)
