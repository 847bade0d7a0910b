"""Share sessions (session.py): keyed by group and member, one per member on a broker, at
most max_sessions, ended with the connection that opened them."""

from broker.share.session import ShareSessionCache, next_epoch


def test_sessions_are_replaced_limited_and_end_with_their_connection():
    cache = ShareSessionCache(2)
    c1, c2 = object(), object()
    a = cache.open("g", "a", c1)
    assert a is not None and a.epoch == 1
    a.partitions[("t", 0)] = None
    # the member opening again replaces its session (even when the cache is full)
    assert cache.open("g", "b", c1) is not None
    a2 = cache.open("g", "a", c2)
    assert a2 is not None and a2 is not a and not a2.partitions and len(cache) == 2
    # a third member: no room
    assert cache.open("g", "c", c2) is None
    assert cache.get("g", "c") is None
    # c1's connection closes: only b's session was still its own
    assert [s.member_id for s in cache.of_connection(c1)] == ["b"]
    assert [s.member_id for s in cache.of_connection(c2)] == ["a"]
    cache.remove("g", "b")
    assert cache.of_connection(c1) == [] and cache.open("g", "c", c2) is not None
    assert sorted(s.member_id for s in cache.of_group("g")) == ["a", "c"]


def test_epochs_wrap_past_int32_max_to_one():
    assert next_epoch(1) == 2
    assert next_epoch(0x7FFFFFFF) == 1
