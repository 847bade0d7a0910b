"""Registry-framed keys and values as typed columns (valueFormat / keyFormat = avro).

The driver, when the source is asked for its schema, settles each decoded column's
reader schema (the explicit valueAvroSchema, else the subject's version: latest by
default) and puts its text in the column's metadata (READER_KEY), so the readers of the
query, on the driver and on the executors, decode with that one reader schema even if a
newer version is registered meanwhile. A task fetches each writer schema it meets by id
from the registry once per Python worker (cached), compiles it against the reader schema
(broker.spark.avro) and decodes natively.

Options (documented in docs/pipelines.md): valueFormat / keyFormat (raw | avro | protobuf |
json-schema),
schema.registry.url, schema.registry.basic.auth.user.info, valueSubject / keySubject
(default <topic>-value / <topic>-key: Confluent's TopicNameStrategy),
valueSchemaVersion / keySchemaVersion (latest | n), valueAvroSchema / keyAvroSchema (an
explicit reader schema), valueProtobufMessage / keyProtobufMessage (the reader message),
mode (FAILFAST | PERMISSIVE, as Spark's from_avro).
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

READER_KEY = "kbroker.avro.reader"
CT = "application/vnd.schemaregistry.v1+json"


class RegistryError(RuntimeError):
    """The schema registry could not answer (or answered an error)."""


class RegistryClient:
    """Confluent's REST API v1, the few calls the source and sink make (urllib)."""

    def __init__(self, url: str, user_info: str | None = None, timeout_s: float = 30.0):
        self.url = url.rstrip("/")
        self.auth = "Basic " + base64.b64encode(user_info.encode()).decode() if user_info else None
        self.timeout_s = timeout_s

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", CT)
        if data is not None:
            req.add_header("Content-Type", CT)
        if self.auth:
            req.add_header("Authorization", self.auth)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, json.loads(exc.read() or b"null")
            except ValueError:
                return exc.code, None
        except (OSError, ValueError) as exc:
            raise RegistryError(f"kbroker: the schema registry at {self.url} cannot be reached: {exc}") from None

    def _ok(self, status: int, body: Any, what: str) -> Any:
        if status != 200:
            msg = body.get("message") if isinstance(body, dict) else body
            raise RegistryError(f"kbroker: schema registry {self.url}: {what}: HTTP {status}: {msg}")
        return body

    def schema_by_id(self, schema_id: int) -> dict | None:
        """{"schema", "schemaType", "references"} or None for an id the registry does not have."""
        status, body = self.call("GET", f"/schemas/ids/{schema_id}")
        if status == 404:
            return None
        return self._ok(status, body, f"schema id {schema_id}")

    def version(self, subject: str, version: str) -> dict:
        q = urllib.parse.quote(subject, safe="")
        status, body = self.call("GET", f"/subjects/{q}/versions/{version}")
        return self._ok(status, body, f"subject {subject!r} version {version}")

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        q = urllib.parse.quote(subject, safe="")
        payload: dict[str, Any] = {"schema": schema}
        if schema_type != "AVRO":
            payload["schemaType"] = schema_type
        status, body = self.call("POST", f"/subjects/{q}/versions", payload)
        return int(self._ok(status, body, f"registering a schema under {subject!r}")["id"])

    def lookup(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        q = urllib.parse.quote(subject, safe="")
        payload: dict[str, Any] = {"schema": schema}
        if schema_type != "AVRO":
            payload["schemaType"] = schema_type
        status, body = self.call("POST", f"/subjects/{q}", payload)
        return int(self._ok(status, body, f"looking up the schema under {subject!r}")["id"])

    def references(self, refs) -> tuple:
        """Confluent's [{"name", "subject", "version"}] -> broker.registry's Resolved, each
        after what it references."""
        from broker.registry.formats import Resolved

        out = []
        for ref in refs or ():
            v = self.version(ref["subject"], str(ref["version"]))
            out.append(
                Resolved(ref["name"], v.get("schemaType", "AVRO"), v["schema"], self.references(v.get("references")))
            )
        return tuple(out)


@dataclass(frozen=True)
class ColumnFormat:
    """How one column (key or value) is decoded: picklable, sent to the executors."""

    column: str  # "key" | "value"
    fmt: str  # "avro"
    registry_url: str
    user_info: str | None
    subject: str | None
    version: str  # "latest" | "<n>"
    explicit_schema: str | None
    permissive: bool
    timeout_s: float = 30.0
    message: str | None = None  # protobuf: the reader message (default: the file's first)

    def client(self) -> RegistryClient:
        return RegistryClient(self.registry_url, self.user_info, self.timeout_s)

    def reader_schema(self) -> dict:
        """{"schema": text, "references": [Resolved...] as JSON-able triples}: what the
        driver settles once per query."""
        if self.explicit_schema is not None:
            return {"schema": self.explicit_schema, "references": []}
        if self.subject is None:
            raise RegistryError(f"kbroker: no subject to take the {self.column}'s reader schema from")
        v = self.client().version(self.subject, self.version)
        want = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}[self.fmt]
        if v.get("schemaType", "AVRO") != want:
            raise RegistryError(
                f"kbroker: subject {self.subject!r} version {v.get('version')} is a {v.get('schemaType', 'AVRO')} "
                f"schema, not {want} ({self.column}Format={self.fmt})"
            )
        return {"schema": v["schema"], "references": v.get("references") or [], "id": v.get("id")}


@dataclass(frozen=True)
class SinkFormat:
    """How the sink encodes one column (key or value): picklable."""

    column: str  # "key" | "value"
    registry_url: str
    user_info: str | None
    subject: str | None  # None: as `strategy` names it
    explicit_schema: str | None
    auto_register: bool = True
    fmt: str = "avro"  # "avro" | "protobuf" | "json-schema"
    message: str | None = None  # protobuf: the message written (default: the file's first)
    use_latest: bool = False  # use.latest.version: the subject's latest version is the writer schema
    strategy: str = "TopicNameStrategy"  # or RecordNameStrategy, TopicRecordNameStrategy


def spark_type(fmt: ColumnFormat):
    """(the column's Spark type, the metadata that pins its reader schema)."""
    settled = fmt.reader_schema()
    refs = fmt.client().references(settled["references"]) if settled["references"] else ()
    if fmt.fmt == "protobuf":
        from broker.spark.protobuf import ProtoDecoder

        proto = ProtoDecoder(
            settled["schema"], refs, message=fmt.message, fetch_type=lambda _id: None, permissive=fmt.permissive
        )
        return proto.reader.spark_type, {READER_KEY: json.dumps(settled)}
    if fmt.fmt == "json-schema":
        from broker.spark.jsonschema import JsonDecoder

        js = JsonDecoder(settled["schema"], refs, fetch_type=lambda _id: None, permissive=fmt.permissive)
        return js.reader.spark_type, {READER_KEY: json.dumps(settled)}
    from broker.spark.avro import Decoder

    dec = Decoder(settled["schema"], refs, fetch_writer=lambda _id: None, permissive=fmt.permissive)
    return dec.reader.spark_type, {READER_KEY: json.dumps(settled)}


def typed_schema(schema, o):
    """Spark's Kafka rows with the key and/or value column decoded (their reader schemas
    settled now and pinned in the columns' metadata)."""
    from pyspark.sql.types import StructField, StructType

    fields = []
    for f in schema.fields:
        fmt = {"key": o.key_format, "value": o.value_format}.get(f.name)
        if fmt is None:
            fields.append(f)
            continue
        typ, meta = spark_type(fmt)
        fields.append(StructField(f.name, typ, True, meta))
    return StructType(fields)


def with_decoders(o, schema):
    """SourceOptions with `decoders` set: each decoded column's format and the reader
    schema from the schema's metadata (settled afresh when the schema has none, e.g. one
    the user gave)."""
    import dataclasses

    decoders = []
    for fmt in (o.key_format, o.value_format):
        if fmt is None:
            continue
        settled = settled_from(schema, fmt.column) or fmt.reader_schema()
        decoders.append((fmt, json.dumps(settled, sort_keys=True)))
    return dataclasses.replace(o, decoders=tuple(decoders))


def decode_batch(rb, decoders, topic: str, partition: int):
    """A Spark rows batch (schema.to_spark_batch) with its key/value decoded."""
    import pyarrow as pa

    columns = list(rb.columns)
    fields = list(rb.schema)
    offsets = rb.column(4)
    for fmt, settled in decoders:
        dec = decoder(fmt, json.loads(settled))
        i = 0 if fmt.column == "key" else 1

        def row_name(r: int) -> str:
            return f"offset {offsets[r].as_py()} of {topic}-{partition}"

        columns[i] = dec.decode(rb.column(i), row_name)
        fields[i] = pa.field(fmt.column, columns[i].type)
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def settled_from(schema, column: str) -> dict | None:
    for f in getattr(schema, "fields", None) or ():
        if f.name == column and f.metadata and READER_KEY in f.metadata:
            return json.loads(f.metadata[READER_KEY])
    return None


# one decoder per (format, reader schema) per Python worker: writer schemas are fetched
# and compiled once per worker, not per task
_decoders: dict[tuple, Any] = {}
_lock = threading.Lock()


def decoder(fmt: ColumnFormat, settled: dict):
    from broker.registry.formats.avro import parse_avro

    key = (fmt, json.dumps(settled, sort_keys=True))
    with _lock:
        dec = _decoders.get(key)
        if dec is not None:
            return dec
    client = fmt.client()
    refs = client.references(settled["references"]) if settled["references"] else ()

    def fetch_type(schema_id: int):
        got = client.schema_by_id(schema_id)
        return None if got is None else got.get("schemaType", "AVRO")

    if fmt.fmt == "json-schema":
        from broker.spark.jsonschema import JsonDecoder

        js = JsonDecoder(settled["schema"], refs, fetch_type=fetch_type, permissive=fmt.permissive, what=fmt.column)
        with _lock:
            _decoders[key] = js
        return js
    if fmt.fmt == "protobuf":
        from broker.spark.protobuf import ProtoDecoder

        proto = ProtoDecoder(
            settled["schema"],
            refs,
            message=fmt.message,
            fetch_type=fetch_type,
            permissive=fmt.permissive,
            what=fmt.column,
        )
        with _lock:
            _decoders[key] = proto
        return proto
    from broker.spark.avro import Decoder

    def fetch_writer(schema_id: int):
        got = client.schema_by_id(schema_id)
        if got is None:
            return None
        if got.get("schemaType", "AVRO") != "AVRO":
            return f"schema id {schema_id} is a {got.get('schemaType')} schema, not Avro ({fmt.column}Format=avro)"
        parsed = parse_avro(got["schema"], client.references(got.get("references")))
        return parsed.parsed, parsed.named

    dec = Decoder(settled["schema"], refs, fetch_writer=fetch_writer, permissive=fmt.permissive, what=fmt.column)
    with _lock:
        _decoders[key] = dec
    return dec
