"""The registry's view of `_schemas` (broker/registry/state.py) and Confluent's records
(records.py), without a broker: what each record does, the ids per subject kept for
validation on produce, corrupt records skipped, and ids never given again after the
topic is compacted."""

from __future__ import annotations

import pytest

from broker.registry import records as R
from broker.registry.registry import SchemaRegistry, SchemaRequest
from broker.registry.state import RegistryState

REC = '{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}'


class Log:
    """A `_schemas` partition in memory: the writer's records, applied by a view."""

    def __init__(self):
        self.records: list[tuple[bytes, bytes | None]] = []

    def append(self, records):
        self.records.extend(records)

    def compacted(self) -> list[tuple[int, bytes, bytes | None]]:
        """What log compaction keeps: the last record of each key (tombstones too, until
        delete.retention.ms — dropped here, the worst case)."""
        last = {k: i for i, (k, _) in enumerate(self.records)}
        return [(i, k, v) for i, (k, v) in enumerate(self.records) if last[k] == i and v is not None]

    def replay(self, entries=None) -> RegistryState:
        state = RegistryState()
        for offset, k, v in entries if entries is not None else [(i, k, v) for i, (k, v) in enumerate(self.records)]:
            state.apply(offset, k, v)
        state.applied(len(self.records))
        return state


def write(log: Log, state: RegistryState, records) -> None:
    start = len(log.records)
    log.append(records)
    for i, (k, v) in enumerate(records):
        state.apply(start + i, k, v)
    state.applied(len(log.records))


def register(log, state, subject, schema=REC):
    reg = SchemaRegistry(state)
    result, records = reg.plan_register(subject, SchemaRequest(schema, "AVRO", ()))
    write(log, state, records)
    return result


def test_records_are_confluents_json():
    assert R.schema_key("s", 3) == b'{"keytype":"SCHEMA","subject":"s","version":3,"magic":1}'
    assert R.subject_key("CONFIG", None) == b'{"keytype":"CONFIG","magic":0}'
    assert R.subject_key("MODE", "s") == b'{"keytype":"MODE","subject":"s","magic":0}'
    assert R.NOOP_KEY == b'{"keytype":"NOOP","magic":0}'
    v = R.SchemaValue("s", 1, 7, "PROTOBUF", (R.Reference("a.proto", "a", 1),), 'syntax = "proto3";')
    key = R.decode_key(R.schema_key("s", 1))
    assert R.decode_schema_value(key, R.schema_value(v)) == v
    assert b'"schemaType"' not in R.schema_value(R.SchemaValue("s", 1, 7, "AVRO", (), REC))


def test_ids_per_subject_follow_every_record():
    log, state = Log(), RegistryState()
    a = register(log, state, "t-value")["id"]
    assert state.ids_for("t-value") == {a} and state.has_id("t-value", a)
    assert not state.has_id("t-value", a + 1) and state.ids_for("other") == frozenset()
    b = register(log, state, "t-value", '{"type":"record","name":"R","fields":[]}')["id"]
    assert state.ids_for("t-value") == {a, b}
    reg = SchemaRegistry(state)
    _, records = reg.plan_delete_version("t-value", 1, permanent=False)
    write(log, state, records)
    assert state.ids_for("t-value") == {b}
    _, records = reg.plan_delete_subject("t-value", permanent=False)
    write(log, state, records)
    assert state.ids_for("t-value") == frozenset()
    # a view read from the start agrees
    assert log.replay().ids_for("t-value") == frozenset() and log.replay().max_id == b


def test_ids_are_never_given_again_after_compaction():
    log, state = Log(), RegistryState()
    register(log, state, "keep")
    gone = register(log, state, "gone", '{"type":"fixed","name":"F","size":4}')["id"]
    reg = SchemaRegistry(state)
    for permanent in (False, True):
        _, records = reg.plan_delete_subject("gone", permanent=permanent)
        write(log, state, records)
    # compaction removes the deleted schema's record and its tombstone; the last NOOP stays
    view = log.replay(log.compacted())
    assert view.max_id == gone
    assert SchemaRegistry(view).plan_register("new", SchemaRequest('"string"', "AVRO", ()))[0]["id"] == gone + 1


def test_without_the_noop_an_id_would_come_back():
    """What the NOOP of a permanent deletion prevents (the check above fails without it)."""
    log, state = Log(), RegistryState()
    register(log, state, "keep")
    gone = register(log, state, "gone", '{"type":"fixed","name":"F","size":4}')["id"]
    reg = SchemaRegistry(state)
    for permanent in (False, True):
        _, records = reg.plan_delete_subject("gone", permanent=permanent)
        write(log, state, [r for r in records if r[0] != R.NOOP_KEY])
    assert log.replay(log.compacted()).max_id == gone - 1


@pytest.mark.parametrize(
    "key, value",
    [
        (None, b"{}"),
        (b"\xff\xfe", b"{}"),
        (b"[]", b"{}"),
        (b'{"keytype":"SCHEMA"}', b"{}"),
        (b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":0}', b"{}"),
        (b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}', b'{"id": "x", "schema": "1"}'),
        (b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}', b'{"id": 1}'),
        (b'{"keytype":"MODE","magic":0}', b'{"mode": 5}'),
        (b'{"keytype":"NOOP","magic":0}', b"nope"),
    ],
)
def test_a_corrupt_record_is_skipped(key, value):
    state = RegistryState()
    state.apply(0, key, value)
    state.apply(1, R.schema_key("s", 1), R.schema_value(R.SchemaValue("s", 1, 1, "AVRO", (), REC)))
    state.applied(2)
    assert state.corrupt == 1 and state.ids_for("s") == {1} and state.next_offset == 2


def test_an_id_given_to_another_schema_is_refused():
    state = RegistryState()
    state.apply(0, R.schema_key("s", 1), R.schema_value(R.SchemaValue("s", 1, 1, "AVRO", (), REC)))
    state.apply(1, R.schema_key("t", 1), R.schema_value(R.SchemaValue("t", 1, 1, "AVRO", (), '"string"')))
    assert state.corrupt == 1 and state.schemas[1].text == REC and not state.has_subject("t")


def test_reads_wait_for_the_view_to_catch_up():
    """After a start, a read waits until the view has read `_schemas` (else a schema that
    exists would be answered 40403 for a moment)."""
    import asyncio

    from broker.registry.api import RegistryApi
    from broker.registry.http import Request

    async def scenario():
        state = RegistryState()
        api = RegistryApi(SchemaRegistry(state), None, None, lambda: None, None, timeout_s=5.0)
        pending = api.handle(Request("GET", "/schemas/ids/1", {}, b"", "127.0.0.1"))
        assert asyncio.iscoroutine(pending)
        task = asyncio.ensure_future(pending)
        await asyncio.sleep(0.05)
        assert not task.done()
        state.apply(0, R.schema_key("s", 1), R.schema_value(R.SchemaValue("s", 1, 1, "AVRO", (), REC)))
        state.applied(1)
        state.mark_caught_up()
        answer = await task
        assert answer.status == 200 and b"schema" in answer.body
        # once caught up, reads are answered in the callback, without waiting
        now = api.handle(Request("GET", "/schemas/ids/1", {}, b"", "127.0.0.1"))
        assert not asyncio.iscoroutine(now) and now.status == 200

    asyncio.run(scenario())
