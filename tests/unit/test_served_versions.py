"""What the broker serves is its handlers' business, never the codecs': a regenerated codec
(Kafka 4.4's definitions reach further than kbroker serves) changes no advertised range,
every served version has a codec, an API with a codec but no handler is not advertised,
and kbroker's own requests stay at the versions their code fills in."""

from __future__ import annotations

from broker.protocol.api import API_SPECS, CLIENT_MAX_VERSIONS, ApiKey, client_versions
from broker.server.handlers import HANDLERS, supported_versions

#: ApiVersions as the broker answers it (api key, min, max at transaction.version 2): as
#: before the codecs were regenerated from Kafka 4.4.0, but for KIP-848's APIs,
#: OffsetCommit/OffsetFetch v9, ListOffsets v9-10 (KIP-1005, KIP-1075), and KIP-932's
#: ShareGroupHeartbeat/ShareGroupDescribe v1, ShareFetch/ShareAcknowledge v1-2, its
#: share-group state APIs with FindCoordinator v6 (its key type 2) and offset admin APIs. A
#: handler that starts serving a new version changes this table in the same commit.
ADVERTISED = [
    (0, 3, 12), (1, 4, 16), (2, 1, 10), (3, 0, 12), (4, 5, 7), (5, 3, 4), (6, 7, 8), (7, 0, 3),
    (8, 0, 9), (9, 0, 9), (10, 0, 6), (11, 0, 9), (12, 0, 4), (13, 0, 5), (14, 0, 5), (15, 0, 5),
    (16, 0, 5), (17, 1, 1), (18, 0, 4), (19, 0, 7), (20, 0, 6), (21, 0, 2), (22, 0, 5), (23, 0, 4),
    (24, 0, 5), (25, 0, 4), (26, 0, 5), (27, 0, 2), (28, 0, 5), (29, 0, 3), (30, 0, 3), (31, 0, 3),
    (32, 0, 4), (33, 0, 2), (35, 1, 4), (36, 0, 2), (37, 0, 3), (42, 0, 2), (43, 0, 2), (44, 0, 1),
    (45, 0, 0), (46, 0, 0), (47, 0, 0), (48, 0, 1), (49, 0, 1), (50, 0, 0), (51, 0, 0), (56, 0, 3),
    (60, 0, 1), (61, 0, 0), (65, 0, 0), (66, 0, 1), (68, 0, 1), (69, 0, 1), (76, 1, 1), (77, 1, 1),
    (78, 1, 2), (79, 1, 2), (83, 0, 0), (84, 0, 0), (85, 0, 1), (86, 0, 0), (87, 0, 1), (90, 0, 1),
    (91, 0, 0), (92, 0, 0),
]  # fmt: skip

#: APIs whose codecs exist (Kafka 4.4.0) but that no handler serves yet: KIP-932's. Each
#: leaves this list when its handler lands.
NOT_SERVED = []


def test_the_advertised_ranges_are_the_handlers_unchanged():
    assert supported_versions(2) == ADVERTISED


def test_every_served_version_has_a_codec():
    for key, handler in HANDLERS.items():
        lo, hi = API_SPECS[key].versions
        assert lo <= handler.MIN_VERSION <= handler.MAX_VERSION <= hi, ApiKey(key).name


def test_apis_with_a_codec_and_no_handler_are_not_advertised():
    advertised = {k for k, _, _ in supported_versions()}
    for key in NOT_SERVED:
        assert key in API_SPECS and key not in HANDLERS and key not in advertised, key.name
    assert set(API_SPECS) - set(HANDLERS) == set(NOT_SERVED)


def test_kbrokers_own_requests_stay_at_the_versions_they_are_written_for():
    assert client_versions(ApiKey.PRODUCE) == (0, 12)  # v13 names topics by id
    assert client_versions(ApiKey.FETCH) == (0, 17)
    assert client_versions(ApiKey.METADATA) == (0, 12)
    assert client_versions(ApiKey.DESCRIBE_GROUPS) == (0, 5)
    for key, hi in CLIENT_MAX_VERSIONS.items():
        assert hi < API_SPECS[key].versions[1], f"{ApiKey(key).name}: the cap no longer caps anything"
    assert client_versions(ApiKey.JOIN_GROUP) == API_SPECS[ApiKey.JOIN_GROUP].versions
