"""JSON Schemas: checked against their draft's meta-schema by the jsonschema library,
written in one canonical form.

The canonical form is the document re-serialized compactly (no whitespace, the
document's own order of keys), as Confluent's registry writes it (Jackson). The draft is
the document's `$schema` (draft 4, 6, 7, 2019-09, 2020-12), draft 7 when it names none.
A reference's name is the URI a `$ref` reaches it by; `JsonSchema.resolve(uri)` finds a
referenced document (for the compatibility rules, compat/jsonschema.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from broker.registry.formats import JSON, InvalidSchema, Resolved, flatten


class JsonSchema:
    schema_type = JSON

    def __init__(self, document: Any, documents: dict[str, Any], references: Sequence[Resolved]):
        self.document = document
        #: referenced documents by their reference name
        self.documents = documents
        self.references = tuple(references)
        self._canonical = json.dumps(document, separators=(",", ":"), ensure_ascii=False)

    @property
    def canonical(self) -> str:
        return self._canonical

    @property
    def text(self) -> str:
        return self._canonical

    def formatted(self, fmt: str) -> str:
        return self._canonical

    def validator(self) -> Any:
        """A jsonschema validator of the document, its references resolvable."""
        import jsonschema
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT7

        resources = [
            (name, Resource.from_contents(doc, default_specification=DRAFT7)) for name, doc in self.documents.items()
        ]
        cls = jsonschema.validators.validator_for(self.document, default=jsonschema.Draft7Validator)
        return cls(self.document, registry=Registry().with_resources(resources))


def parse_json(text: str, references: Sequence[Resolved] = ()) -> JsonSchema:
    documents: dict[str, Any] = {}
    for ref in flatten(references):
        if ref.schema_type != JSON:
            raise InvalidSchema(f"Invalid schema: reference {ref.name} is a {ref.schema_type} schema")
        documents[ref.name] = _check(_loads(ref.text, f"reference {ref.name}"))
    document = _check(_loads(text, "schema"))
    return JsonSchema(document, documents, references)


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidSchema(f"Invalid schema: the {what} is not JSON ({exc})") from None


def _check(document: Any) -> Any:
    import jsonschema

    if not isinstance(document, (dict, bool)):
        raise InvalidSchema("Invalid schema: a JSON schema is an object or a boolean")
    cls = (
        jsonschema.validators.validator_for(document, default=jsonschema.Draft7Validator)
        if isinstance(document, dict)
        else jsonschema.Draft7Validator
    )
    try:
        cls.check_schema(document)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        raise InvalidSchema(f"Invalid schema: {exc.message}" + (f" at /{where}" if where else "")) from None
    return document
