"""The instruments the broker's components count with: plain counters and bucket arrays,
no locks.

Each component owns what it measures and offers it as its own attribute: the server its
requests (`Server.request_stats`, and `Server.connection_counts()`), the ReplicaManager
its topics' bytes and records (`ReplicaManager.topic_stats`), the LogManager its logs'
fsyncs (`LogManager.flush_times`), the ZooKeeper session its round trips
(`KafkaZkClient.request_latency`). They are Python ints and lists, updated per request or
per partition of a request (never per record) from the event loop thread; prometheus_client
only reads them when it is scraped, through the collectors of collectors.py. A
prometheus_client Histogram takes a lock and a label lookup per observation: several of
those per request cost more than the request's own bookkeeping, which is why the requests'
timings are kept here.

Every layer may count with these (this module imports nothing of the broker but the API
keys); the rest of broker/metrics sits above everything and only reads.
"""

from __future__ import annotations

import bisect

from broker.protocol.api import ApiKey

#: latency buckets in seconds (Kafka's request time histograms in ms span 0.1 ms .. 10 s)
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


#: the key followers' fetches are counted under (Kafka's RequestMetrics name them apart:
#: FetchFollower, and FetchConsumer for the others): the connection's timings and the
#: server's error counts use this one constant
FETCH_FOLLOWER = ApiKey.FETCH | 1 << 16


def stats_key(api_key: int, follower: bool) -> int:
    """The key a request is counted under: FETCH_FOLLOWER for a follower's Fetch, else its
    API key."""
    return FETCH_FOLLOWER if follower and api_key == ApiKey.FETCH else api_key


def api_name(api_key: int) -> str:
    """Kafka's request name (the `request` tag of kafka.network:RequestMetrics): Produce,
    ApiVersions ..., and FetchConsumer / FetchFollower for Fetch."""
    if api_key == ApiKey.FETCH:
        return "FetchConsumer"
    if api_key == FETCH_FOLLOWER:
        return "FetchFollower"
    try:
        return "".join(w.capitalize() for w in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)


class Histogram:
    """Bucket counts (not cumulative; the collector adds them up) and a sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        total = 0
        for bound, n in zip((*map(repr, self.bounds), "+Inf"), self.counts):
            total += n
            out.append((bound, float(total)))
        return out


#: TotalTimeMs's parts, in order, as (metric suffix, Kafka's name)
TIME_PARTS = (
    ("request_queue_time", "RequestQueueTimeMs"),
    ("local_time", "LocalTimeMs"),
    ("remote_time", "RemoteTimeMs"),
    ("response_send_time", "ResponseSendTimeMs"),
    ("total_time", "TotalTimeMs"),
)
_NB = len(LATENCY_BUCKETS) + 1


class ApiStats:
    """One API's requests: Kafka's RequestsPerSec and TotalTimeMs split as Kafka splits it,
    the five histograms of TIME_PARTS in one flat list of bucket counts (each _NB long)
    and their sums: one request's observation is a few list increments, no calls."""

    __slots__ = ("requests", "counts", "sums")

    def __init__(self) -> None:
        self.requests = 0
        self.counts = [0] * (len(TIME_PARTS) * _NB)
        self.sums = [0.0] * len(TIME_PARTS)

    @property
    def total_time(self) -> float:
        """The sum of the requests' total times (TotalTimeMs's sum, in seconds)."""
        return self.sums[len(TIME_PARTS) - 1]

    def histogram(self, part: int) -> Histogram:
        """A copy of one part's histogram (for the collectors)."""
        h = Histogram()
        h.counts = self.counts[part * _NB : (part + 1) * _NB]
        h.sum = self.sums[part]
        return h


class RequestStats:
    """Every API's counts and timings, and the error codes of the responses."""

    def __init__(self) -> None:
        self.apis: dict[int, ApiStats] = {}
        self.errors: dict[int, dict[int, int]] = {}  # api key -> error code -> count
        self._plans: dict[type, tuple[bool, tuple[str, ...]]] = {}

    def observe(self, api_key: int, queue: float, local: float, remote: float, send: float) -> None:
        """One request answered (or, without a response, handled): its time in each part."""
        s = self.apis.get(api_key)
        if s is None:
            s = self.apis[api_key] = ApiStats()
        s.requests += 1
        c = s.counts
        b = bisect.bisect_left
        bounds = LATENCY_BUCKETS
        total = queue + local + remote + send
        c[b(bounds, queue)] += 1
        c[_NB + b(bounds, local)] += 1
        c[2 * _NB + (b(bounds, remote) if remote else 0)] += 1
        c[3 * _NB + b(bounds, send)] += 1
        c[4 * _NB + b(bounds, total)] += 1
        sums = s.sums
        sums[0] += queue
        sums[1] += local
        sums[2] += remote
        sums[3] += send
        sums[4] += total

    def count_errors(self, api_key: int, response: object) -> None:
        """Kafka's ErrorsPerSec: every error code of a response (top level and per topic,
        partition, group ...) counted once each; NONE is not counted (Kafka counts it: here
        requests_total says how many were answered, and Produce and Fetch answers without
        an error are not looked through at all)."""
        errors = self.errors.get(api_key)
        if errors is None:
            errors = self.errors[api_key] = {}
        plans = self._plans
        stack = [response]
        pop, extend = stack.pop, stack.extend
        while stack:
            obj = pop()
            plan = plans.get(obj.__class__)
            if plan is None:
                plan = plans[obj.__class__] = _plan(obj)
            has_code, lists = plan
            if has_code:
                code = obj.error_code  # type: ignore[attr-defined]
                if code:
                    errors[code] = errors.get(code, 0) + 1
            for name in lists:
                items = getattr(obj, name)
                if items and items.__class__ is list:
                    extend(items)


def _plan(obj: object) -> tuple[bool, tuple[str, ...]]:
    """Which attributes of a message class hold an error code, which may hold arrays of
    structs (everything but scalars; a nullable array may be None in the first one seen).
    Anything without slots (the ints of an array of broker ids) has neither."""
    slots: list[str] = []
    for cls in type(obj).__mro__:
        slots.extend(getattr(cls, "__slots__", ()))
    lists = tuple(
        s
        for s in slots
        if s not in ("error_code", "error_message", "unknown_tagged_fields", "records")
        and not isinstance(getattr(obj, s, None), (int, str, bytes, float))
    )
    return "error_code" in slots and isinstance(getattr(obj, "error_code", None), int), lists


class TopicStats:
    """Kafka's BrokerTopicMetrics per topic: MessagesInPerSec, BytesInPerSec (client
    appends as leader), BytesOutPerSec (client fetches), and the bytes sent to followers
    of ReplicationBytesOutPerSec (all topics; the bytes a follower appends, Kafka's
    ReplicationBytesInPerSec, are the fetchers' own count)."""

    __slots__ = ("messages_in", "bytes_in", "bytes_out", "replication_bytes_out")

    def __init__(self) -> None:
        self.messages_in: dict[str, int] = {}
        self.bytes_in: dict[str, int] = {}
        self.bytes_out: dict[str, int] = {}
        self.replication_bytes_out = 0

    def appended(self, topic: str, records: int, size: int) -> None:
        self.messages_in[topic] = self.messages_in.get(topic, 0) + records
        self.bytes_in[topic] = self.bytes_in.get(topic, 0) + size

    def fetched(self, topic: str, size: int) -> None:
        self.bytes_out[topic] = self.bytes_out.get(topic, 0) + size
