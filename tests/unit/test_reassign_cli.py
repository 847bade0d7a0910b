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
    assert json.loads(text) == {"version": 1, "partitions": [
        {"topic": "orders", "partition": 0, "replicas": [1, 4, 3], "log_dirs": ["any", "any", "any"]},
        {"topic": "orders", "partition": 1, "replicas": [4, 2, 3], "log_dirs": ["any", "any", "any"]}]}
    assert read_plan(write(tmp_path, text)) == plan
    # log_dirs may be left out, as Kafka's tool allows
    assert read_plan(write(tmp_path, {"version": 1, "partitions": [{"topic": "t", "partition": 0,
                                                                    "replicas": [2]}]})) == {("t", 0): [2]}


@pytest.mark.parametrize("data, says", [
    ("{", "is not JSON"),
    ({"version": 1}, "no \"partitions\""),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}, "empty replica list"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}, "duplicate replicas"),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1]},
                     {"topic": "t", "partition": 0, "replicas": [2]}]}, "more than once"),
    ({"partitions": [{"topic": "t", "partition": "0", "replicas": [1]}]}, "needs \"topic\""),
    ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]}, "log_dirs"),
])
def test_plans_kafka_refuses_are_refused_in_one_line(tmp_path, data, says):
    with pytest.raises(CliError) as e:
        read_plan(write(tmp_path, data))
    assert says in str(e.value) and "\n" not in str(e.value) and e.value.code == 2


def test_list_in_kafkas_words():
    assert listing({}) == "No partition reassignments found."
    assert listing({("t", 1): ([4, 2, 3, 1], [4], [1]), ("t", 0): ([3, 1, 2], [], [])}).splitlines() == [
        "Current partition reassignments:", "t-0: replicas: 3,1,2.", "t-1: replicas: 4,2,3,1. adding: 4. removing: 1."]
