"""Schema validation on produce: the topic configs Confluent Server names
(`confluent.key.schema.validation`, `confluent.value.schema.validation`,
`confluent.key.subject.name.strategy`, `confluent.value.subject.name.strategy`) make a
topic refuse, with INVALID_RECORD and the index of each bad record (KIP-467's
record_errors), a produced batch holding a record whose key or value is not framed
(magic byte 0, a 4-byte big-endian schema id, the payload) or carries an id the
registry does not hold under the field's subject.

Every subject name strategy reduces to one set of allowed ids per (topic, key|value),
computed here from the registry's view and replaced whenever the view applies records
(RegistryState.listeners): so the check of each record is one C lookup
(broker._native.records check_schema_ids, against a SchemaIds), nothing per record in
Python.

    TopicNameStrategy         the ids of subject <topic>-key / <topic>-value
    RecordNameStrategy        the ids registered under the subject named as their own
                              schema's fully-qualified name (Avro: the record's full
                              name; Protobuf: the first message's; JSON Schema: title)
    TopicRecordNameStrategy   the same under <topic>-<full name>

The log asks its LogConfig (`schema_check`, set by the MetadataCache through
`SchemaValidation.check_for` when the topic's config asks for validation) and calls
TopicSchemaCheck.check after its own checks of the batches; a topic without validation
has None there and pays one attribute read per append.

A broker without a registry (no schema.registry.listener) refuses the configs (in
CreateTopics, AlterConfigs, IncrementalAlterConfigs: INVALID_CONFIG); a topic that asks
for validation anyway (set through another broker) is refused whole on this one
("this broker has no schema registry"), never let through unchecked.

Read-your-writes: a registration is answered once the view of the broker that took it
has read it back, so a producer that registered through the broker leading its
partition is validated against a view holding the new id. Another broker's view reads
it from `_schemas` as that broker fetches it (milliseconds); a produce that arrives
before is refused like any unknown id (INVALID_RECORD, docs/schema-registry.md).
"""

from __future__ import annotations

import json
import logging
import weakref
from typing import TYPE_CHECKING, Any

from broker.config import LogConfig, subject_name_strategy
from broker.native import FRAME_PROBLEMS, InvalidRecordError, SchemaIds, check_schema_ids

if TYPE_CHECKING:
    from typing_extensions import Buffer

    from broker.registry.service import RegistryService

log = logging.getLogger(__name__)

KEY, VALUE = 0, 1
_SIDES = ("key", "value")
#: record errors named per batch at most (Kafka's response lists every one; a bound keeps a
#: batch of a million bad records from a million-entry answer)
MAX_RECORD_ERRORS = 100


class RecordValidationError(InvalidRecordError):
    """A batch refused by schema validation: INVALID_RECORD, and `record_errors` [(the
    record's index in the batch, why)] for the Produce response (v8+)."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]]):
        super().__init__(message)
        self.record_errors = record_errors


class TopicSchemaCheck:
    """One topic's check: the ids each validated side allows (None: not validated),
    replaced as the registry's view changes."""

    __slots__ = ("topic", "strategies", "key_ids", "value_ids", "available", "__weakref__")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        #: (key strategy, value strategy), short names; None for a side not validated
        self.strategies: tuple[str | None, str | None] = (None, None)
        self.key_ids: SchemaIds | None = None
        self.value_ids: SchemaIds | None = None
        #: False on a broker without a registry: every batch is refused
        self.available = True

    def check(self, records: Buffer) -> None:
        """RecordValidationError naming every bad record (up to MAX_RECORD_ERRORS);
        CorruptRecordError for records that do not parse."""
        if not self.available:
            raise RecordValidationError(
                f"topic {self.topic} validates schemas, but this broker has no schema registry "
                "(schema.registry.listener)",
                [],
            )
        found = check_schema_ids(records, self.key_ids, self.value_ids, MAX_RECORD_ERRORS)
        if found is None:
            return
        errors = [(index, self._why(side, problem, schema_id)) for index, side, problem, schema_id in found]
        first = errors[0]
        raise RecordValidationError(
            f"schema validation of topic {self.topic} refused {len(errors)} record"
            f"{'s' if len(errors) > 1 else ''}; record {first[0]}: {first[1]}",
            errors,
        )

    def _why(self, side: int, problem: int, schema_id: int) -> str:
        name = _SIDES[side]
        what = FRAME_PROBLEMS[problem]
        if what == "short":
            return f"the {name} is not framed with a schema id (fewer than 5 bytes)"
        if what == "magic":
            return f"the {name} is not framed with a schema id (its first byte is not the magic byte 0)"
        strategy = self.strategies[side]
        if strategy == "TopicNameStrategy":
            where = f"subject {self.topic}-{name}"
        elif strategy == "RecordNameStrategy":
            where = "the subject of its record's full name (RecordNameStrategy)"
        else:
            where = f"the subject {self.topic}-<its record's full name> (TopicRecordNameStrategy)"
        return f"the {name}'s schema id {schema_id} is not registered under {where}"


class SchemaValidation:
    """The broker's schema checks, one TopicSchemaCheck per topic with validation on,
    kept current with the registry's view (`registry` None: a broker without one). A
    check lives as long as a LogConfig holds it (`checks` holds it weakly): a topic whose
    validation was turned off, or that was deleted, drops out once its logs follow their
    new config."""

    def __init__(self, registry: RegistryService | None) -> None:
        self.registry = registry
        self.checks: weakref.WeakValueDictionary[str, TopicSchemaCheck] = weakref.WeakValueDictionary()
        #: schema id -> its record's full name (None: it has none); ids never change schema
        self._names: dict[int, str | None] = {}
        if registry is not None:
            registry.state.listeners.append(self.refresh)

    def check_for(self, topic: str, config: LogConfig) -> TopicSchemaCheck | None:
        """The topic's check under `config` (the MetadataCache's hook): None when the
        config validates nothing."""
        key_on = bool(config["confluent.key.schema.validation"])
        value_on = bool(config["confluent.value.schema.validation"])
        if not key_on and not value_on:
            return None
        chk = self.checks.get(topic)
        if chk is None:
            chk = self.checks[topic] = TopicSchemaCheck(topic)
        chk.strategies = (
            subject_name_strategy(config["confluent.key.subject.name.strategy"]) if key_on else None,
            subject_name_strategy(config["confluent.value.subject.name.strategy"]) if value_on else None,
        )
        self._compute(chk)
        return chk

    def refresh(self) -> None:
        """The registry's view applied records: every topic's allowed ids again."""
        for chk in list(self.checks.values()):
            self._compute(chk)

    def _compute(self, chk: TopicSchemaCheck) -> None:
        if self.registry is None:
            chk.available = False
            return
        key_strategy, value_strategy = chk.strategies
        chk.key_ids = None if key_strategy is None else SchemaIds(self.allowed(chk.topic, "key", key_strategy))
        chk.value_ids = None if value_strategy is None else SchemaIds(self.allowed(chk.topic, "value", value_strategy))

    def allowed(self, topic: str, side: str, strategy: str) -> set[int]:
        """The ids a record's `side` may carry on `topic` under `strategy` (a short name)."""
        assert self.registry is not None
        state = self.registry.state
        if strategy == "TopicNameStrategy":
            return set(state.ids_for(f"{topic}-{side}"))
        prefix = "" if strategy == "RecordNameStrategy" else f"{topic}-"
        out = set()
        for subject in state.subject_names():
            if not subject.startswith(prefix):
                continue
            for schema_id in state.ids_for(subject):
                if self.record_name(schema_id) == subject[len(prefix) :]:
                    out.add(schema_id)
        return out

    def record_name(self, schema_id: int) -> str | None:
        """The fully-qualified name of schema `schema_id`'s record, as Confluent's
        RecordNameStrategy names it: Avro's named type's full name, Protobuf's first
        message's full name, JSON Schema's title. None: it has none (or is unknown)."""
        if schema_id in self._names:
            return self._names[schema_id]
        assert self.registry is not None
        schema = self.registry.state.schemas.get(schema_id)
        if schema is None:
            return None
        name = None
        try:
            name = _record_name(self.registry, schema.schema_type, schema.text, schema.references)
        except Exception as exc:  # a schema the registry took but this cannot name: no record name
            log.warning("schema id %d: no record name for RecordNameStrategy: %s", schema_id, exc)
        self._names[schema_id] = name
        return name


def _record_name(registry: RegistryService, schema_type: str, text: str, references: Any) -> str | None:
    if schema_type == "JSON":
        doc = json.loads(text)
        title = doc.get("title") if isinstance(doc, dict) else None
        return title if isinstance(title, str) else None
    parsed = registry.registry.parse(schema_type, text, references)
    if schema_type == "PROTOBUF":
        names: list[str] = parsed.message_names()
        return names[0] if names else None
    name: str | None = parsed.name()
    return name
