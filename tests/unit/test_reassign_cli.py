"""`broker topics reassign`'s plan files (broker/cli/reassign.py): Kafka's JSON read and
written, one-line errors for what Kafka's tool refuses."""

import json

import pytest

from broker.cli.errors import CliError
from broker.cli.reassign import listing, plan_json, read_plan


def write(tmp_path, data):
    p = tmp_path / "plan.json"
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(p)


def test_kafkas_plan_format_round_trips(tmp_path):
    plan = {("orders", 1): [4, 2, 3], ("orders", 0): [1, 4, 3]}
    text = plan_json(plan)
    assert json.loads(text) == {
        "version": 1,
        "partitions": [
            {"topic": "orders", "partition": 0, "replicas": [1, 4, 3], "log_dirs": ["any", "any", "any"]},
            {"topic": "orders", "partition": 1, "replicas": [4, 2, 3], "log_dirs": ["any", "any", "any"]},
        ],
    }
    assert read_plan(write(tmp_path, text)) == plan
    # log_dirs may be left out, as Kafka's tool allows
    assert read_plan(
        write(tmp_path, {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2]}]})
    ) == {("t", 0): [2]}


@pytest.mark.parametrize(
    "data, says",
    [
        ("{", "is not JSON"),
        ({"version": 1}, 'no "partitions"'),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}, "empty replica list"),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}, "duplicate replicas"),
        (
            {
                "partitions": [
                    {"topic": "t", "partition": 0, "replicas": [1]},
                    {"topic": "t", "partition": 0, "replicas": [2]},
                ]
            },
            "more than once",
        ),
        ({"partitions": [{"topic": "t", "partition": "0", "replicas": [1]}]}, 'needs "topic"'),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]}, "log_dirs"),
    ],
)
def test_plans_kafka_refuses_are_refused_in_one_line(tmp_path, data, says):
    with pytest.raises(CliError) as e:
        read_plan(write(tmp_path, data))
    assert says in str(e.value) and "\n" not in str(e.value) and e.value.code == 2


def test_list_in_kafkas_words():
    assert listing({}) == "No partition reassignments found."
    assert listing({("t", 1): ([4, 2, 3, 1], [4], [1]), ("t", 0): ([3, 1, 2], [], [])}).splitlines() == [
        "Current partition reassignments:",
        "t-0: replicas: 3,1,2.",
        "t-1: replicas: 4,2,3,1. adding: 4. removing: 1.",
    ]


class Recorder:
    """A client that records the config changes the throttles make."""

    def __init__(self, live=(1, 2, 3, 4)):
        self.calls = []
        self.live = live

    def alter_topic_configs(self, name, set_=None, delete=None):
        self.calls.append(("topic", name, set_ or {}, delete or []))

    def alter_broker_configs(self, broker_id, set_=None, delete=None):
        self.calls.append(("broker", broker_id, set_ or {}, delete or []))

    def describe_cluster(self):
        from types import SimpleNamespace

        return SimpleNamespace(brokers=[SimpleNamespace(broker_id=b) for b in self.live])


def test_execute_with_a_throttle_sets_kafkas_configs():
    from broker.cli.reassign import set_throttles

    c = Recorder()
    current = {("t", 0): [1, 2, 3], ("t", 1): [2, 3, 1], ("u", 0): [3]}
    plan = {("t", 0): [4, 2, 3], ("t", 1): [2, 3, 1], ("u", 0): [2]}
    set_throttles(c, current, plan, {}, 1_000_000)
    rate = {"leader.replication.throttled.rate": "1000000", "follower.replication.throttled.rate": "1000000"}
    # t-1 stays put and still gets leader throttles, as from Kafka's tool
    assert c.calls == [
        (
            "topic",
            "t",
            {
                "leader.replication.throttled.replicas": "0:1,0:2,0:3,1:1,1:2,1:3",
                "follower.replication.throttled.replicas": "0:4",
            },
            [],
        ),
        (
            "topic",
            "u",
            {"leader.replication.throttled.replicas": "0:3", "follower.replication.throttled.replicas": "0:2"},
            [],
        ),
        # every broker a move reads from or writes to
        ("broker", 1, rate, []),
        ("broker", 2, rate, []),
        ("broker", 3, rate, []),
        ("broker", 4, rate, []),
    ]


def test_verify_clears_every_live_brokers_rates_and_the_plans_topics(capsys):
    from broker.cli.reassign import clear_throttles

    c = Recorder(live=(1, 2, 4))
    clear_throttles(c, {("t", 0): [4, 2, 3], ("u", 0): [2]})
    rates = [
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second",
    ]
    lists = ["leader.replication.throttled.replicas", "follower.replication.throttled.replicas"]
    assert c.calls == [
        ("broker", 1, {}, rates),
        ("broker", 2, {}, rates),
        ("broker", 4, {}, rates),
        ("topic", "t", {}, lists),
        ("topic", "u", {}, lists),
    ]
    assert capsys.readouterr().out.splitlines() == [
        "Clearing broker-level throttles on brokers 1,2,4",
        "Clearing topic-level throttles on topics t,u",
    ]


def test_throttle_options_go_with_their_modes():
    import argparse

    from broker.cli.reassign import reassign

    base = dict(generate=False, balance=False, list=False, cancel=False, reassignment_json_file=None, additional=False)
    with pytest.raises(CliError, match="--throttle goes with --execute"):
        reassign(argparse.Namespace(**base, execute=False, verify=True, throttle=10, preserve_throttles=False))
    with pytest.raises(CliError, match="--preserve-throttles goes with --verify"):
        reassign(argparse.Namespace(**base, execute=True, verify=False, throttle=-1, preserve_throttles=True))
