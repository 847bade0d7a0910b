"""`broker topics reassign --balance`'s plan (broker/cli/balance.py): replicas and
preferred leaders evened out across brokers with few moves, racks never made to share."""

from hypothesis import given, settings, strategies as st

from broker.cli.balance import balance


def counts(plan_or_current, brokers):
    c = {b: 0 for b in brokers}
    for r in plan_or_current.values():
        for b in r:
            c[b] += 1
    return c


def leaders(assignment, brokers):
    c = {b: 0 for b in brokers}
    for r in assignment.values():
        c[r[0]] += 1
    return c


def test_a_new_broker_gets_its_share_with_the_fewest_moves():
    current = {("t", p): [(p + i) % 3 + 1 for i in range(3)] for p in range(6)}  # 18 replicas on 1..3
    plan = balance(current, {1: None, 2: None, 3: None, 4: None})
    after = {**current, **plan}
    c = counts(after, (1, 2, 3, 4))
    assert max(c.values()) - min(c.values()) <= 1 and c[4] == 4
    moved = sum(len(set(r) - set(current[tp])) for tp, r in plan.items())
    assert moved == 4  # each move is one replica to broker 4
    assert all(len(set(r)) == 3 for r in after.values())
    lc = leaders(after, (1, 2, 3, 4))
    assert max(lc.values()) - min(lc.values()) <= 1


def test_a_balanced_cluster_needs_no_plan():
    current = {("t", p): [(p + i) % 3 + 1 for i in range(3)] for p in range(6)}
    assert balance(current, {1: None, 2: None, 3: None}) == {}


def test_racks_are_not_made_to_share():
    racks = {1: "a", 2: "b", 3: "c", 4: "a"}
    current = {("t", p): [(p + i) % 3 + 1 for i in range(3)] for p in range(6)}
    plan = balance(current, racks)
    for tp, r in {**current, **plan}.items():
        assert len({racks[b] for b in r}) == 3, (tp, r)
    # 4 may only take 1's place (same rack): it takes some
    assert all(1 not in r for tp, r in plan.items() if 4 in r)
    assert any(4 in r for r in plan.values())


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 6), st.integers(1, 3), st.integers(1, 12), st.data())
def test_any_cluster_ends_even(n_brokers, rf, n_parts, data):
    brokers = list(range(1, n_brokers + 1))
    rf = min(rf, n_brokers)
    current = {("t", p): data.draw(st.permutations(brokers))[:rf] for p in range(n_parts)}
    plan = balance(current, {b: None for b in brokers})
    after = {**current, **plan}
    c = counts(after, brokers)
    assert max(c.values()) - min(c.values()) <= 1
    assert all(len(set(r)) == len(r) == rf for r in after.values())
    assert sum(c.values()) == n_parts * rf
    # moves are no more than the excess above the largest shares
    before = counts(current, brokers)
    share = -(-n_parts * rf // n_brokers)
    moved = sum(len(set(r) - set(current[tp])) for tp, r in plan.items())
    assert moved <= sum(max(0, v - share) for v in before.values()) + n_brokers
