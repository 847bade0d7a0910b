"""Client quotas (KIP-13, KIP-55, KIP-124), as Kafka's ClientQuotaManager and
ClientRequestQuotaManager measure and enforce them.

Three quota types, each its own manager: ``producer_byte_rate`` (the bytes of Produce
requests), ``consumer_byte_rate`` (the bytes of consumers' Fetch answers; followers are
never throttled) and ``request_percentage`` (the share of the request handling time, in
percent of one thread: 200 is two threads' worth). Each is configured per entity — a user,
a client id, or a (user, client id) pair, each name possibly ``<default>`` — as Kafka keeps
them in ZooKeeper: /config/users/<user>, /config/clients/<client-id>,
/config/users/<user>/clients/<client-id>, names sanitized (URL-encoded) except
``<default>``. The broker's cache is keyed by those path segments (a sanitized name never
equals ``<default>``), so a client named ``<default>`` is not the default.

A client's quota of one type is the first entity holding that type, in Kafka's order:

    1. users/<user>/clients/<client-id>     5. users/<default>/clients/<default>
    2. users/<user>/clients/<default>       6. users/<default>
    3. users/<user>                         7. clients/<client-id>
    4. users/<default>/clients/<client-id>  8. clients/<default>

and the quota is shared by every connection with the same metric tags (user, client-id):
a users/<user> quota by every client of that user, a default per user or client (not one
shared by all of them).

The rate is Kafka's sampled Rate: ``quota.window.num`` samples of
``quota.window.size.seconds``; a sample is reset once it is older than all of them; the
rate is the samples' total over the time they span, but never less than num - 1 full
windows. A request that takes the rate above the quota is still served (it was recorded),
and its answer says how long to wait: (rate - quota) / quota x the window the rate was
computed over — the time after which the rate is back at the quota if nothing else comes
(Kafka's QuotaUtils.throttleTime). The connection then reads nothing more for that long
(the server mutes it after queueing the answer).

Nothing is recorded while no quota of the type exists anywhere (Kafka's quotasEnabled),
so a broker without quotas pays one attribute read per request.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from broker.cluster.store.znodes import sanitize

if TYPE_CHECKING:
    from broker.server.connection import Connection

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
REQUEST = "request_percentage"
#: Kafka's fourth user/client quota (KIP-599): stored and described, not enforced here
CONTROLLER_MUTATION = "controller_mutation_rate"
ENFORCED = (PRODUCE, FETCH, REQUEST)
#: quota key -> whether its value must be a whole number (Kafka's LONG keys) or any double
QUOTA_KEYS: dict[str, bool] = {PRODUCE: True, FETCH: True, REQUEST: False, CONTROLLER_MUTATION: False}

DEFAULT = "<default>"  # ConfigEntityName.Default: stands for every user / client id
USER = "user"  # ClientQuotaEntity's entity types
CLIENT_ID = "client-id"
IP = "ip"

#: an entity as its path segments: (user, client id), each a sanitized name, DEFAULT, or
#: None when the entity has no such part
Entity = tuple[str | None, str | None]


def entity_path(entity: Entity) -> str:
    """users/<u>, clients/<c> or users/<u>/clients/<c> (the config change notification's
    entity path; /config/ + it is the znode)."""
    user, client = entity
    if user is None:
        return f"clients/{client}"
    if client is None:
        return f"users/{user}"
    return f"users/{user}/clients/{client}"


def parse_entity_path(path: str) -> Entity | None:
    """The inverse of entity_path; None for a path that is no quota entity (topics/...)."""
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "users" and parts[1]:
        return parts[1], None
    if len(parts) == 2 and parts[0] == "clients" and parts[1]:
        return None, parts[1]
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients" and parts[1] and parts[3]:
        return parts[1], parts[3]
    return None


def segment(name: str | None) -> str:
    """An entity name (None: the default) as its path segment."""
    return DEFAULT if name is None else sanitize(name)


def name_of(seg: str) -> str | None:
    """A path segment as the entity name of the protocol (None: the default)."""
    from broker.cluster.store.znodes import desanitize

    return None if seg == DEFAULT else desanitize(seg)


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of an entity's config map (a user's also holds SCRAM credentials)."""
    out = {}
    for k, v in config.items():
        if k in QUOTA_KEYS:
            try:
                out[k] = float(v)
            except ValueError:
                continue
    return out


def precedence(user: str, client: str) -> Iterator[tuple[Entity, tuple[str, str]]]:
    """The entities that may hold a quota for (sanitized user, sanitized client id), first
    match wins, each with the metric tags (user, client-id) the quota is shared under."""
    d = DEFAULT
    yield (user, client), (user, client)
    yield (user, d), (user, client)
    yield (user, None), (user, "")
    yield (d, client), (user, client)
    yield (d, d), (user, client)
    yield (d, None), (user, "")
    yield (None, client), ("", client)
    yield (None, d), ("", client)


class Rate:
    """Kafka's Rate over a SampledStat of `num` samples of `window_ms` (times in ms)."""

    __slots__ = ("num", "window_ms", "starts", "values", "current")

    def __init__(self, num: int, window_ms: float):
        self.num = num
        self.window_ms = window_ms
        self.starts: list[float] = []
        self.values: list[float] = []
        self.current = 0

    def record(self, value: float, now_ms: float) -> None:
        if not self.starts:
            self.starts.append(now_ms)
            self.values.append(0.0)
        elif now_ms - self.starts[self.current] >= self.window_ms:  # the sample is complete
            self.current = (self.current + 1) % self.num
            if self.current >= len(self.starts):
                self.starts.append(now_ms)
                self.values.append(0.0)
            else:
                self.starts[self.current] = now_ms
                self.values[self.current] = 0.0
        self.values[self.current] += value

    def _purge(self, now_ms: float) -> None:
        expire = self.num * self.window_ms
        starts = self.starts
        for i, start in enumerate(starts):
            if now_ms - start >= expire:
                starts[i] = now_ms
                self.values[i] = 0.0

    def window_size_ms(self, now_ms: float) -> float:
        """The time the rate is measured over: since the oldest sample, but at least
        num - 1 full windows (Rate.windowSize)."""
        self._purge(now_ms)
        elapsed = now_ms - (min(self.starts) if self.starts else now_ms)
        full = int(elapsed // self.window_ms)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now_ms: float) -> float:
        """Units per second."""
        window = self.window_size_ms(now_ms)
        return sum(self.values) / (window / 1000.0)


def throttle_time_ms(value: float, bound: float, window_ms: float) -> int:
    """How long a client whose rate is `value` (over a window of `window_ms`) waits to be
    back at `bound` (QuotaUtils.throttleTime)."""
    if bound <= 0:
        return int(window_ms)
    return round((value - bound) / bound * window_ms)


class Sensor:
    """One quota's usage (a tag group's): the rate, its quota, and the throttle times
    answered (cumulative, for the metrics)."""

    __slots__ = ("rate", "quota", "max_throttle_ms", "throttle_ms_total", "throttled", "recorded", "last_ms")

    def __init__(self, num: int, window_ms: float, quota: float | None, max_throttle_ms: float | None = None):
        self.rate = Rate(num, window_ms)
        self.quota = quota
        #: the request quota's throttle is at most one window (ClientRequestQuotaManager)
        self.max_throttle_ms = max_throttle_ms
        self.throttle_ms_total = 0
        self.throttled = 0
        self.recorded = 0.0
        #: when last recorded into (time.monotonic() in ms, the clock record() is given):
        #: from its creation, so a new sensor is not taken for one idle since the clock's start
        self.last_ms = time.monotonic() * 1000

    def record(self, value: float, now_ms: float) -> int:
        """Records and answers the throttle time (0: within the quota)."""
        rate = self.rate
        rate.record(value, now_ms)
        self.recorded += value
        self.last_ms = now_ms
        quota = self.quota
        if quota is None:
            return 0
        window = rate.window_size_ms(now_ms)
        measured = sum(rate.values) / (window / 1000.0)
        if measured <= quota:
            return 0
        ms = throttle_time_ms(measured, quota, window)
        if self.max_throttle_ms is not None:
            ms = min(ms, int(self.max_throttle_ms))
        if ms > 0:
            self.throttle_ms_total += ms
            self.throttled += 1
        return ms

    def unrecord(self, value: float, now_ms: float) -> None:
        """Takes back what was recorded (a throttled Fetch answer sends nothing)."""
        self.rate.record(-value, now_ms)
        self.recorded -= value


class QuotaManager:
    """One quota type's quotas and sensors (Kafka's ClientQuotaManager for one type)."""

    def __init__(self, key: str, num: int, window_ms: float, max_throttle_ms: float | None = None):
        self.key = key
        self.num = num
        self.window_ms = window_ms
        self.max_throttle_ms = max_throttle_ms
        #: the tags of a client no quota applies to, as Kafka's DefaultQuotaCallback gives
        #: them: by user when only user quotas exist, by both when only (user, client id) ones
        self._untagged = "client"
        #: entity -> quota value, only entities that hold this type
        self.quotas: dict[Entity, float] = {}
        #: metric tags (user, client-id) -> sensor; tags without a quota get one too (usage)
        self.sensors: dict[tuple[str, str], Sensor] = {}
        self.enabled = False

    def set_quotas(self, quotas: Mapping[Entity, float]) -> None:
        """A sensor keeps the quota it was found with until a connection looks it up
        again, which every connection does after a change (the generation moved)."""
        self.quotas = dict(quotas)
        self.enabled = bool(self.quotas)
        kinds = {(u is not None, c is not None) for u, c in self.quotas}
        self._untagged = "user" if kinds == {(True, False)} else "both" if kinds == {(True, True)} else "client"

    def resolve(self, user: str, client: str) -> tuple[float | None, tuple[str, str]]:
        """(quota or None, metric tags) for a sanitized user and client id."""
        quotas = self.quotas
        for entity, tags in precedence(user, client):
            q = quotas.get(entity)
            if q is not None:
                return q, tags
        untagged = self._untagged
        return None, (("", client) if untagged == "client" else (user, "") if untagged == "user" else (user, client))

    def sensor(self, user: str, client: str) -> Sensor:
        quota, tags = self.resolve(user, client)
        s = self.sensors.get(tags)
        if s is None:
            s = self.sensors[tags] = Sensor(self.num, self.window_ms, quota, self.max_throttle_ms)
        else:
            s.quota = quota
        return s

    def expire(self, now_ms: float, idle_ms: float) -> None:
        """Drops sensors unused for idle_ms (Kafka expires them after an hour)."""
        for tags in [t for t, s in self.sensors.items() if now_ms - s.last_ms > idle_ms]:
            del self.sensors[tags]


SENSOR_EXPIRY_MS = 3600 * 1000


class ClientQuotas:
    """The broker's three quota managers and the cache of every quota entity (from the
    metadata store; kept current by the config change notifications)."""

    def __init__(self, num: int = 11, window_s: float = 1.0):
        window_ms = window_s * 1000.0
        self.window_ms = window_ms
        self.num = num
        self.produce = QuotaManager(PRODUCE, num, window_ms)
        self.fetch = QuotaManager(FETCH, num, window_ms)
        self.request = QuotaManager(REQUEST, num, window_ms, max_throttle_ms=window_ms)
        self.managers = {PRODUCE: self.produce, FETCH: self.fetch, REQUEST: self.request}
        #: every entity holding some quota key, with its quota values (for Describe)
        self.entities: dict[Entity, dict[str, float]] = {}
        #: whether any enforced quota exists (one read on the hot path)
        self.enabled = False
        #: bumped on every quota change: connections' cached sensors are looked up again
        self.generation = 0
        self._last_expiry = 0.0

    def load(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """Every entity's config, by entity path (the store's get_client_quota_configs)."""
        self.entities = {}
        for path, config in configs.items():
            entity = parse_entity_path(path)
            if entity is not None:
                values = quota_values(config)
                if values:
                    self.entities[entity] = values
        self._apply()

    def update(self, path: str, config: Mapping[str, str]) -> None:
        """One entity's config as the store now has it."""
        entity = parse_entity_path(path)
        if entity is None:
            return
        values = quota_values(config)
        if values:
            self.entities[entity] = values
        else:
            self.entities.pop(entity, None)
        self._apply()

    def _apply(self) -> None:
        for key, manager in self.managers.items():
            manager.set_quotas({e: v[key] for e, v in self.entities.items() if key in v})
        self.enabled = any(m.enabled for m in self.managers.values())
        self.generation += 1

    def for_connection(
        self, conn: Connection, client_id: str | None
    ) -> tuple[Sensor | None, Sensor | None, Sensor | None]:
        """The connection's sensors, looked up again only when the quotas, its client id or
        its principal changed (cached on the connection: quota_generation, quota_client_id,
        quota_sensors; Connection.authenticated() forgets them, so from SASL authentication
        on, and after each re-authentication, the quota is the user's).

        Before a SASL connection has authenticated (its ApiVersions) no quota applies: the
        principal is not known yet, and Kafka's authenticator answers those requests
        outside its quotas. Nothing is cached then."""
        client_id = client_id or ""
        if conn.quota_generation != self.generation or conn.quota_client_id != client_id:
            auth = conn.authenticator
            if auth is not None and not auth.authenticated:
                conn.quota_sensors = (None, None, None)
                return conn.quota_sensors
            conn.quota_generation = self.generation
            conn.quota_client_id = client_id
            conn.quota_sensors = self.sensors(sanitize(conn.principal.partition(":")[2]), sanitize(client_id))
            self.expire()
        sensors: tuple[Sensor | None, Sensor | None, Sensor | None] = conn.quota_sensors
        return sensors

    def sensors(self, user: str, client: str) -> tuple[Sensor | None, Sensor | None, Sensor | None]:
        """The produce, fetch and request sensors of a (sanitized) user and client id
        (None: no quota of that type anywhere)."""
        return tuple(
            m.sensor(user, client) if m.enabled else None  # type: ignore[return-value]
            for m in (self.produce, self.fetch, self.request)
        )

    def expire(self) -> None:
        now = time.monotonic() * 1000
        if now - self._last_expiry < 60_000:
            return
        self._last_expiry = now
        for m in self.managers.values():
            m.expire(now, SENSOR_EXPIRY_MS)

    # ---------------------------------------------------------------- describe

    def describe(
        self, components: Iterable[tuple[str, int, str | None]], strict: bool
    ) -> dict[Entity, dict[str, float]]:
        """The entities matching a DescribeClientQuotas filter: components of (entity
        type, match type 0 exact / 1 default / 2 any specified, name), already checked
        (one per type, user and client-id only). Without a component for a type, an
        entity matches whether it has that part or not, unless `strict`."""
        wanted: dict[str, tuple[int, str | None]] = {t: (m, n) for t, m, n in components}

        def matches(etype: str, seg: str | None) -> bool:
            w = wanted.get(etype)
            if w is None:
                return seg is None or not strict
            match_type, name = w
            if seg is None:
                return False
            if match_type == 0:
                return seg != DEFAULT and name is not None and seg == sanitize(name)
            if match_type == 1:
                return seg == DEFAULT
            return True

        return {e: dict(v) for e, v in self.entities.items() if matches(USER, e[0]) and matches(CLIENT_ID, e[1])}


def is_whole(value: float) -> bool:
    return math.isfinite(value) and abs(value - round(value)) <= 1e-6
