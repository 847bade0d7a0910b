"""Who may use the registry: HTTP basic authentication against the broker's own SCRAM
users, and each request authorized by the broker's ACL authorizer.

Authentication (schema.registry.authentication.method=BASIC): the password of a request's
`Authorization: Basic` header is checked against the user's SCRAM credential (the one the
broker's clients authenticate with: SCRAM-SHA-512, else SCRAM-SHA-256), as SCRAM's own
proof is built: PBKDF2 of the password with the credential's salt and iterations, then
H(HMAC(salted, "Client Key")) must equal the stored key. PBKDF2 is slow on purpose, so a
check runs in a worker thread (hashlib releases the GIL) and a successful one is
remembered (by an HMAC of user and password under a key of this process) for as long as
the user's credential stays the same object in the broker's credential cache — a changed
or removed user is checked afresh. A failed check is not remembered. At most
MAX_WAITING checks wait at once; past that the answer is 429. The principal is
User:<name>.

Authorization (the broker's authorizer.class.name; none: everything allowed): registry
requests are checked with Kafka's ACLs, so `kafka-acls`, `broker acls` and Kafka's
AdminClient manage them, and nothing is stored anywhere but where the broker keeps its
ACLs. A subject's rights are those of a TOPIC resource: the topic the subject belongs to
under Confluent's TopicNameStrategy (subject "orders-value" and "orders-key": topic
"orders"), any other subject the topic of its own name (a RecordNameStrategy subject
"com.acme.Order": topic "com.acme.Order", so a PREFIXED ACL "com.acme." covers a
namespace). Like Redpanda's registry ACLs, operations are Kafka's:

    GET    /subjects/S/..., POST /subjects/S (look up),
           POST /compatibility/subjects/S/...         READ on S's topic
    POST   /subjects/S/versions (register)            WRITE on S's topic
    DELETE /subjects/S[/versions/V]                   DELETE on S's topic
    GET    /config/S, /mode/S                         DESCRIBE_CONFIGS on S's topic
    PUT|DELETE /config/S, /mode/S                     ALTER_CONFIGS on S's topic
    GET    /config, /mode                             DESCRIBE_CONFIGS on the CLUSTER
    PUT    /config, /mode                             ALTER_CONFIGS on the CLUSTER
    GET    /subjects                                  lists the subjects whose topic the
                                                      principal may DESCRIBE (READ implies it)
    GET    /schemas/ids/N[/...]                       READ on the topic of one of the
                                                      subjects the schema is registered under
    GET    /, /schemas/types, /contexts               any authenticated principal
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import hashlib
import hmac
import os
from collections.abc import Callable
from typing import Any

from broker.security.scram import MECHANISMS

MAX_WAITING = 16
MAX_REMEMBERED = 10000
ANONYMOUS = "User:ANONYMOUS"


def topic_of(subject: str) -> str:
    for suffix in ("-value", "-key"):
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[: -len(suffix)]
    return subject


def basic_credentials(header: str) -> tuple[str, str] | None:
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, ValueError):
        return None
    return (user, password) if sep and user else None


class BasicAuthenticator:
    def __init__(self, credential: Callable[[str, str], Any]):
        #: credential(user, mechanism) -> ScramCredential | None (the broker's CredentialCache.get)
        self.credential = credential
        self._key = os.urandom(32)
        self._passed: collections.OrderedDict[bytes, tuple[str, Any]] = collections.OrderedDict()
        self._waiting = 0
        #: PBKDF2 checks made (the cache spares the rest)
        self.verifications = 0

    def _current(self, user: str) -> tuple[str, Any] | None:
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            cred = self.credential(user, mechanism)
            if cred is not None:
                return mechanism, cred
        return None

    def _digest(self, user: str, password: str) -> bytes:
        data = user.encode() + b"\0" + password.encode()
        return hmac.new(self._key, data, hashlib.sha256).digest()

    def cached(self, header: str) -> str | None:
        """The principal when these credentials passed before and the user's credential
        is unchanged; None when a check is needed (or the header is no basic credentials)."""
        creds = basic_credentials(header)
        if creds is None:
            return None
        got = self._passed.get(self._digest(*creds))
        if got is None:
            return None
        current = self._current(creds[0])
        if current is None or current[1] is not got[1]:
            return None
        return f"User:{creds[0]}"

    async def check(self, header: str) -> str | None | bool:
        """The principal, None when refused, False when too many checks wait (429)."""
        creds = basic_credentials(header)
        if creds is None:
            return None
        user, password = creds
        current = self._current(user)
        if current is None:
            return None
        if self._waiting >= MAX_WAITING:
            return False
        mechanism, cred = current
        self._waiting += 1
        try:
            ok = await asyncio.get_running_loop().run_in_executor(None, _verify, mechanism, cred, password)
        finally:
            self._waiting -= 1
        self.verifications += 1
        if not ok:
            return None
        self._passed[self._digest(user, password)] = (mechanism, cred)
        if len(self._passed) > MAX_REMEMBERED:
            self._passed.popitem(last=False)
        return f"User:{user}"


def _verify(mechanism: str, cred: Any, password: str) -> bool:
    algorithm = MECHANISMS[mechanism]
    salted = hashlib.pbkdf2_hmac(algorithm, password.encode("utf-8"), cred.salt, cred.iterations)
    client_key = hmac.new(salted, b"Client Key", algorithm).digest()
    return hmac.compare_digest(hashlib.new(algorithm, client_key).digest(), cred.stored_key)
