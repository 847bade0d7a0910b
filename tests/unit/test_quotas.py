"""Client quotas' arithmetic (broker/server/quotas.py): Kafka's sampled Rate and its
window, the throttle time, the precedence of the 8 entity combinations and their metric
tags, the cache's DescribeClientQuotas filter, and AlterClientQuotas' checks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.protocol.errors import ErrorCode
from broker.server.handlers.alter_client_quotas import check_entity, check_value, format_value
from broker.server.quotas import (
    DEFAULT,
    FETCH,
    PRODUCE,
    REQUEST,
    ClientQuotas,
    Rate,
    entity_path,
    parse_entity_path,
    segment,
    throttle_time_ms,
)

W = 1000.0


def test_rate_counts_at_least_num_minus_one_windows():
    r = Rate(11, W)
    r.record(10_000, 0)
    # elapsed 0: measured over 10 full windows (num - 1), as Kafka's Rate.windowSize
    assert r.window_size_ms(0) == 10_000
    assert r.measure(0) == pytest.approx(1000.0)
    r.record(10_000, 5_500)
    assert r.window_size_ms(5_500) == 10_500  # 5 full windows elapsed: 5.5 s + 5 more
    assert r.measure(5_500) == pytest.approx(20_000 / 10.5)


def test_rate_spans_the_oldest_sample_once_past_the_minimum():
    r = Rate(11, W)
    for t in range(0, 15_000, 100):  # 1000 units every 100 ms: 10,000/s
        r.record(1000, t)
    now = 14_950
    window = r.window_size_ms(now)
    assert 10_000 <= window <= 11_000
    assert r.measure(now) == pytest.approx(10_000, rel=0.1)


def test_rate_forgets_samples_older_than_all_windows():
    r = Rate(11, W)
    r.record(1_000_000, 0)
    assert r.measure(11_000) == 0.0  # 11 windows later the sample is reset
    r.record(10, 11_000)
    assert r.measure(11_000) == pytest.approx(1.0)


def test_throttle_time_is_the_time_back_to_the_quota():
    # twice the quota over a 10 s window: 10 s more brings the rate down to the quota
    assert throttle_time_ms(2_000_000, 1_000_000, 10_000) == 10_000
    assert throttle_time_ms(1_100_000, 1_000_000, 10_000) == 1_000
    assert throttle_time_ms(1_000_000, 1_000_000, 10_000) == 0


def test_sensor_throttles_only_above_the_quota():
    q = ClientQuotas(11, 1.0)
    q.load({"clients/app": {PRODUCE: "1000"}})
    sensor = q.produce.sensor("ANONYMOUS", "app")
    assert sensor.record(9_000, 0) == 0  # 900/s over 10 s: within
    assert sensor.record(2_000, 0) == 1_000  # 1100/s: (1100-1000)/1000 x 10 s
    assert sensor.throttled == 1 and sensor.throttle_ms_total == 1_000


def test_nothing_enabled_without_quotas():
    q = ClientQuotas()
    q.load({"users/alice": {"SCRAM-SHA-256": "salt=x,stored_key=y,server_key=z,iterations=4096"}})
    assert not q.enabled and q.entities == {}
    assert q.sensors("alice", "app") == (None, None, None)


ALL8 = {
    "users/alice/clients/app": {PRODUCE: "1"},
    "users/alice/clients/<default>": {PRODUCE: "2"},
    "users/alice": {PRODUCE: "3"},
    "users/<default>/clients/app": {PRODUCE: "4"},
    "users/<default>/clients/<default>": {PRODUCE: "5"},
    "users/<default>": {PRODUCE: "6"},
    "clients/app": {PRODUCE: "7"},
    "clients/<default>": {PRODUCE: "8"},
}


@pytest.mark.parametrize(
    "drop, expected, tags",
    [
        (0, 1, ("alice", "app")),
        (1, 2, ("alice", "app")),
        (2, 3, ("alice", "")),
        (3, 4, ("alice", "app")),
        (4, 5, ("alice", "app")),
        (5, 6, ("alice", "")),
        (6, 7, ("", "app")),
        (7, 8, ("", "app")),
    ],
)
def test_precedence_of_the_eight_entities(drop, expected, tags):
    """Kafka's order: user+client, user+default client, user, default user+client, default
    user+default client, default user, client, default client; each level's tags."""
    q = ClientQuotas()
    q.load(dict(list(ALL8.items())[drop:]))
    assert q.produce.resolve("alice", "app") == (expected, tags)


def test_quota_types_resolve_separately():
    q = ClientQuotas()
    q.load({"users/alice": {PRODUCE: "100"}, "clients/<default>": {FETCH: "200", REQUEST: "50.0"}})
    assert q.produce.resolve("alice", "x") == (100, ("alice", ""))
    assert q.fetch.resolve("alice", "x") == (200, ("", "x"))
    assert q.request.resolve("bob", "y") == (50.0, ("", "y"))
    assert q.produce.resolve("bob", "y") == (None, ("bob", ""))  # only user quotas: by user


def test_a_default_is_per_entity_a_named_quota_shared():
    q = ClientQuotas()
    q.load({"users/<default>": {PRODUCE: "100"}, "users/alice": {PRODUCE: "50"}})
    a1, a2, b = q.produce.sensor("alice", "c1"), q.produce.sensor("alice", "c2"), q.produce.sensor("bob", "c1")
    assert a1 is a2  # every client of alice shares alice's quota
    assert b is not a1 and b.quota == 100


def test_a_client_named_default_is_not_the_default():
    assert segment(None) == DEFAULT and segment("<default>") == "%3Cdefault%3E"
    q = ClientQuotas()
    q.load({"clients/%3Cdefault%3E": {PRODUCE: "1"}})
    assert q.produce.resolve("u", "other")[0] is None
    assert q.produce.resolve("u", segment("<default>"))[0] == 1


def test_update_and_generation():
    q = ClientQuotas()
    g = q.generation
    q.update("clients/app", {PRODUCE: "10"})
    assert q.enabled and q.generation > g
    q.update("clients/app", {})
    assert not q.enabled and q.entities == {}
    q.update("topics/t", {"retention.ms": "1"})  # not a quota entity: ignored
    assert q.entities == {}


def test_connection_cache_follows_changes():
    q = ClientQuotas()
    q.load({"clients/app": {PRODUCE: "10"}})
    conn = SimpleNamespace(
        quota_generation=-1,
        quota_client_id=None,
        quota_sensors=(None, None, None),
        principal="User:alice",
        authenticator=None,
    )
    first = q.for_connection(conn, "app")
    assert first[0] is not None and first[0].quota == 10 and first[1] is None
    assert q.for_connection(conn, "app") is first
    q.update("clients/app", {PRODUCE: "20"})
    again = q.for_connection(conn, "app")
    assert again[0].quota == 20


def test_a_sasl_connection_has_its_users_quota_from_authentication_on():
    """Issue 34: ApiVersions comes before SASL authentication; the sensors are not picked
    then (no quota applies before authentication, as in Kafka), and once the connection
    has authenticated (Connection.authenticated() forgets the cached sensors) they are
    the user's, each user's own."""
    q = ClientQuotas()
    q.load({"users/bob": {FETCH: "1024"}, "users/<default>": {FETCH: "4096"}})
    auth = SimpleNamespace(authenticated=False)
    bob = SimpleNamespace(
        quota_generation=-1,
        quota_client_id=None,
        quota_sensors=(None, None, None),
        principal="User:ANONYMOUS",
        authenticator=auth,
    )
    assert q.for_connection(bob, "rdkafka") == (None, None, None)
    assert bob.quota_generation == -1  # nothing cached
    auth.authenticated, bob.principal, bob.quota_generation = True, "User:bob", -1  # authenticated()
    sensors = q.for_connection(bob, "rdkafka")
    assert sensors[1].quota == 1024 and q.fetch.sensors[("bob", "")] is sensors[1]
    carol = SimpleNamespace(
        quota_generation=-1,
        quota_client_id=None,
        quota_sensors=(None, None, None),
        principal="User:carol",
        authenticator=SimpleNamespace(authenticated=True),
    )
    other = q.for_connection(carol, "rdkafka")[1]
    assert other.quota == 4096 and other is not sensors[1] and q.fetch.sensors[("carol", "")] is other
    assert ("ANONYMOUS", "") not in q.fetch.sensors
    # re-authentication (KIP-368): looked up again, the same user's sensor
    bob.quota_generation = -1
    assert q.for_connection(bob, "rdkafka")[1] is sensors[1]


def test_entity_paths():
    for path, entity in [
        ("users/a", ("a", None)),
        ("clients/c", (None, "c")),
        ("users/<default>/clients/c", (DEFAULT, "c")),
    ]:
        assert parse_entity_path(path) == entity and entity_path(entity) == path
    assert parse_entity_path("topics/t") is None
    assert parse_entity_path("users/a/clients") is None


def test_describe_filters():
    q = ClientQuotas()
    q.load(ALL8)
    users = {e for e in q.describe([("user", 2, None)], strict=True)}
    assert users == {("alice", None), (DEFAULT, None)}
    assert set(q.describe([("user", 0, "alice")], strict=False)) == {
        ("alice", "app"),
        ("alice", DEFAULT),
        ("alice", None),
    }
    assert set(q.describe([("user", 1, None), ("client-id", 1, None)], strict=True)) == {(DEFAULT, DEFAULT)}
    assert len(q.describe([], strict=False)) == 8
    assert q.describe([], strict=True) == {}


def _entity(*pairs):
    return [SimpleNamespace(entity_type=t, entity_name=n) for t, n in pairs]


def test_alter_checks_entities_as_kafka():
    assert check_entity(_entity(("user", "alice"))) == ("users/alice", "")
    assert check_entity(_entity(("user", None), ("client-id", "a b"))) == ("users/<default>/clients/a%20b", "")
    bad = ErrorCode.INVALID_REQUEST
    assert check_entity([]) == (bad, "Invalid empty client quota entity")
    assert check_entity(_entity(("group", "g"))) == (bad, "Unhandled client quota entity type: group")
    assert check_entity(_entity(("user", ""))) == (bad, "Empty user not supported")
    assert check_entity(_entity(("user", "a"), ("user", "b"))) == (
        bad,
        "Invalid client quota entity, duplicate entity entry user",
    )
    assert check_entity(_entity(("ip", "1.2.3.4"), ("user", "b")))[0] == bad


def test_alter_checks_values_as_kafka():
    assert check_value(PRODUCE, 1048576.0) is None
    assert check_value("producer_bytes_rate", 1.0) == "Invalid configuration key producer_bytes_rate"
    assert check_value(PRODUCE, -1.0) == "Quota producer_byte_rate must be greater than 0"
    assert check_value(FETCH, 0.0) == "Quota consumer_byte_rate must be greater than 0"
    assert check_value(PRODUCE, 1.5) == "producer_byte_rate cannot be a fractional value."
    assert check_value(REQUEST, 12.5) is None
    assert format_value(PRODUCE, 1048576.0) == "1048576" and format_value(REQUEST, 200.0) == "200.0"


def test_request_quota_throttle_is_at_most_one_window():
    q = ClientQuotas(11, 1.0)
    q.load({"clients/<default>": {REQUEST: "10"}})  # 10% of one thread
    sensor = q.request.sensor("u", "c")
    assert sensor.record(500.0, 0) == 1000  # 5 thread-seconds at once: 50%/s, bounded to 1 s
    p = ClientQuotas(11, 1.0)
    p.load({"clients/<default>": {PRODUCE: "10"}})
    assert p.produce.sensor("u", "c").record(500.0, 0) == 40_000


def test_tags_of_clients_without_a_quota_follow_kafkas_modes():
    q = ClientQuotas()
    q.load({"users/alice": {PRODUCE: "1"}})
    assert q.produce.resolve("bob", "c") == (None, ("bob", ""))
    q.load({"users/alice/clients/x": {PRODUCE: "1"}})
    assert q.produce.resolve("bob", "c") == (None, ("bob", "c"))
    q.load({"users/alice": {PRODUCE: "1"}, "clients/x": {PRODUCE: "1"}})
    assert q.produce.resolve("bob", "c") == (None, ("", "c"))


def test_a_new_sensor_is_not_expired_however_long_the_machine_is_up(monkeypatch):
    """Sensors unused for an hour are dropped; a new one was taken for one unused since the
    monotonic clock's start, and dropped at once on a machine up for over an hour (its
    connection then held a sensor the metrics no longer saw)."""
    import broker.server.quotas as quotas_mod

    monkeypatch.setattr(quotas_mod.time, "monotonic", lambda: 5 * 3600.0)
    q = ClientQuotas()
    q.load({"users/bob": {FETCH: "1024"}})
    conn = SimpleNamespace(
        quota_generation=-1,
        quota_client_id=None,
        quota_sensors=(None, None, None),
        principal="User:bob",
        authenticator=None,
    )
    sensors = q.for_connection(conn, "app")
    assert q.fetch.sensors[("bob", "")] is sensors[1]
    monkeypatch.setattr(quotas_mod.time, "monotonic", lambda: 5 * 3600.0 + 3599)
    q._last_expiry = 0.0
    q.expire()
    assert ("bob", "") in q.fetch.sensors
    monkeypatch.setattr(quotas_mod.time, "monotonic", lambda: 5 * 3600.0 + 3601)
    q._last_expiry = 0.0
    q.expire()
    assert ("bob", "") not in q.fetch.sensors  # unused for an hour: dropped
