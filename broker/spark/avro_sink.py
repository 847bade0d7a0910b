"""The sink's valueFormat=avro / keyFormat=avro: rows' columns encoded natively into
registry-framed Avro (a 0 byte, the schema id, the datum) before they are written.

The writer schema is the explicit valueAvroSchema, or derived from the column's type as
Spark's to_avro derives it (SchemaConverters.toAvroType: a struct is a record named
topLevelRecord, a nested struct a record named after its field, a nullable type the
union [T, "null"], timestamp -> timestamp-micros, timestamp_ntz ->
local-timestamp-micros, date -> date, decimal -> bytes decimal). It is registered under
the subject (valueSubject, else as value.subject.name.strategy names it: <topic>-value by
default, Confluent's TopicNameStrategy) with auto.register.schemas=true (the default, as
Confluent's serializers), or looked up with false, or the subject's latest version is
taken with use.latest.version=true; once per (subject, schema) per Python worker. The
same registry steps serve valueFormat=protobuf / json-schema, whose encoding is
broker.spark.schema_sink's.

The encoding is broker._native.avro.encode: per batch, nodes describe the Arrow arrays
and the Avro types they are written as; no Python object per row.
"""

from __future__ import annotations

import json
import struct
import threading
from typing import Any

from broker._native import avro as _n

_ids: dict[tuple, tuple[int, str, tuple]] = {}
_lock = threading.Lock()


class AvroEncodeError(ValueError):
    """Rows that cannot be written with the writer schema."""


def schema_for(arrow_type, name: str = "topLevelRecord", nullable: bool = False) -> Any:
    """The Avro schema of an Arrow type (Spark's to_avro's choices)."""
    import pyarrow as pa

    t = arrow_type
    if pa.types.is_struct(t):
        out: Any = {
            "type": "record",
            "name": name,
            "fields": [
                {"name": t.field(i).name, "type": schema_for(t.field(i).type, t.field(i).name, t.field(i).nullable)}
                for i in range(t.num_fields)
            ],
        }
    elif pa.types.is_map(t):
        if not pa.types.is_string(t.key_type):
            raise AvroEncodeError(f"Avro maps have string keys, not {t.key_type}")
        out = {"type": "map", "values": schema_for(t.item_type, name, t.item_field.nullable)}
    elif pa.types.is_list(t):
        out = {"type": "array", "items": schema_for(t.value_type, name, t.value_field.nullable)}
    elif pa.types.is_boolean(t):
        out = "boolean"
    elif pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        out = "int"
    elif pa.types.is_int64(t):
        out = "long"
    elif pa.types.is_float32(t):
        out = "float"
    elif pa.types.is_float64(t):
        out = "double"
    elif pa.types.is_string(t):
        out = "string"
    elif pa.types.is_binary(t):
        out = "bytes"
    elif pa.types.is_date32(t):
        out = {"type": "int", "logicalType": "date"}
    elif pa.types.is_timestamp(t):
        out = {"type": "long", "logicalType": "timestamp-micros" if t.tz else "local-timestamp-micros"}
    elif pa.types.is_decimal(t):
        out = {"type": "bytes", "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
    else:
        raise AvroEncodeError(f"the kbroker sink cannot write {t} as Avro")
    return [out, "null"] if nullable else out


def _resolve(t: Any, named: dict) -> Any:
    if isinstance(t, str):
        if t in named:
            return named[t]
        return {"type": t}
    if isinstance(t, dict) and isinstance(t.get("type"), (dict, list)):
        return _resolve(t["type"], named)
    if isinstance(t, dict) and isinstance(t.get("type"), str) and t["type"] in named:
        return named[t["type"]]
    return t


def nodes_for(schema: Any, named: dict, arr, where: str = "value") -> list:
    """[(kind, null_branch, value_branch, array, kid0, nkids)] for encode(): `arr` written as
    `schema`, each node's kids in consecutive slots after it; AvroEncodeError when a
    column's type does not fit the schema's."""
    import pyarrow as pa

    nodes: list = [None]

    def reserve(n: int) -> int:
        nodes.extend([None] * n)
        return len(nodes) - n

    def fill(slot: int, s: Any, a, where: str) -> None:
        s = _resolve(s, named)
        null_branch = value_branch = -1
        if isinstance(s, list):
            branches = [_resolve(b, named) for b in s]
            nulls = [i for i, b in enumerate(branches) if b.get("type") == "null"]
            others = [i for i, b in enumerate(branches) if b.get("type") != "null"]
            if len(others) != 1 or len(nulls) > 1:
                raise AvroEncodeError(f"{where}: the sink writes unions of null and one type only")
            null_branch = nulls[0] if nulls else -1
            value_branch = others[0]
            s = branches[value_branch]
        k = s["type"]
        t = a.type
        kid0 = nkids = 0
        logical = s.get("logicalType")
        wrong = AvroEncodeError(f"{where}: a column of type {t} cannot be written as Avro {k}")
        if k in ("record", "error"):
            if not pa.types.is_struct(t):
                raise wrong
            names = [t.field(j).name for j in range(t.num_fields)]
            fields = s["fields"]
            kind, nkids = _n.E_RECORD, len(fields)
            kid0 = reserve(nkids)
            for j, f in enumerate(fields):
                if f["name"] not in names:
                    raise AvroEncodeError(f"{where}: the data has no field {f['name']!r} the schema writes")
                fill(kid0 + j, f["type"], a.field(names.index(f["name"])), f"{where}.{f['name']}")
        elif k == "array":
            if not pa.types.is_list(t):
                raise wrong
            kind, nkids = _n.E_ARRAY, 1
            kid0 = reserve(1)
            fill(kid0, s["items"], a.values, f"{where}[]")
        elif k == "map":
            if not pa.types.is_map(t):
                raise wrong
            kind, nkids = _n.E_MAP, 2
            kid0 = reserve(2)
            fill(kid0, "string", a.keys, f"{where}{{key}}")
            fill(kid0 + 1, s["values"], a.items, f"{where}{{}}")
        elif k == "boolean" and pa.types.is_boolean(t):
            kind = _n.E_BOOL
        elif k == "int" and (pa.types.is_int32(t) or pa.types.is_date32(t)):
            kind = _n.E_INT
        elif k == "long" and pa.types.is_int32(t):
            kind = _n.E_LONG32
        elif k == "long" and (pa.types.is_int64(t) or pa.types.is_timestamp(t)):
            if pa.types.is_timestamp(t) and (t.unit != "us" or "millis" in str(logical)):
                raise AvroEncodeError(f"{where}: timestamps are written as timestamp-micros, not {logical}")
            kind = _n.E_LONG
        elif k == "float" and pa.types.is_float32(t):
            kind = _n.E_FLOAT
        elif k == "double" and pa.types.is_float64(t):
            kind = _n.E_DOUBLE
        elif k == "double" and pa.types.is_float32(t):
            kind = _n.E_FLOAT_DOUBLE
        elif k in ("string", "bytes") and (pa.types.is_string(t) or pa.types.is_binary(t)):
            kind = _n.E_BYTES
        elif k == "bytes" and logical == "decimal" and pa.types.is_decimal128(t):
            if int(s.get("scale", 0)) != t.scale:
                raise AvroEncodeError(f"{where}: decimal scale {t.scale} is not the schema's {s.get('scale', 0)}")
            kind = _n.E_DEC_BYTES
        else:
            raise wrong
        nodes[slot] = (kind, null_branch, value_branch, a, kid0, nkids)

    fill(0, schema, arr, where)
    return nodes


def encode_column(arr, schema: Any, named: dict, schema_id: int, where: str):
    """A pyarrow array -> a binary array of registry-framed Avro values."""
    import pyarrow as pa

    from broker.spark.schema_sink import normalize

    arr = normalize(arr)  # byte and short columns as int32, timestamps in microseconds
    nodes = nodes_for(schema, named, arr, where)
    offsets, data, validity, nulls, bad_row, bad_node = _n.encode(nodes, b"\x00" + struct.pack(">I", schema_id))
    if bad_row >= 0:
        raise AvroEncodeError(
            f"kbroker sink: row {bad_row} of the batch has a null in {where} where the Avro schema takes none"
        )
    return pa.Array.from_buffers(
        pa.binary(),
        len(arr),
        [pa.py_buffer(validity) if validity is not None else None, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls,
    )


def encode_rows(rb, formats, topic: str):
    """The batch with its key/value columns (per `formats`, SinkFormat) encoded: Avro
    here, Protobuf and JSON Schema by broker.spark.schema_sink."""
    import pyarrow as pa

    names = [n.lower() for n in rb.schema.names]
    columns = list(rb.columns)
    fields = list(rb.schema)
    for fmt in formats:
        if fmt.column not in names:
            continue
        i = names.index(fmt.column)
        arr = columns[i]
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        columns[i] = _encode(fmt, arr, topic)
        fields[i] = pa.field(fields[i].name, pa.binary())
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}


def _encode(fmt, arr, topic: str):
    if fmt.fmt == "avro":
        from broker.registry.formats.avro import parse_avro

        text = fmt.explicit_schema if fmt.explicit_schema is not None else json.dumps(schema_for(arr.type))
        parsed = parse_avro(text)
        name = parsed.parsed.get("name") if isinstance(parsed.parsed, dict) else None
        sid, text, refs = writer_schema(fmt, topic, text, name)
        if refs or fmt.use_latest:
            parsed = parse_avro(text, _references(fmt, refs))
        return encode_column(arr, parsed.parsed, parsed.named, sid, fmt.column)
    from broker.spark import schema_sink

    if fmt.explicit_schema is not None:
        text = fmt.explicit_schema
    elif fmt.fmt == "protobuf":
        text = schema_sink.proto_for(schema_sink.normal_type(arr.type), where=fmt.column)
    else:
        text = json.dumps(schema_sink.json_schema_for(arr.type, where=fmt.column))
    # valueProtobufMessage names a message of the user's schema (or of the latest version)
    writer = schema_sink.writer_for(fmt.fmt, text, fmt.message if fmt.explicit_schema is not None else None)
    sid, text, refs = writer_schema(fmt, topic, text, writer.record_name)
    if refs or fmt.use_latest:
        writer = schema_sink.writer_for(fmt.fmt, text, fmt.message, refs, lambda: _references(fmt, refs))
    return schema_sink.encode_column(arr, writer, sid, fmt.column, fmt.fmt)


def subject_for(fmt, topic: str, record_name: str | None) -> str:
    """The subject, as Confluent's subject name strategies name it."""
    if fmt.subject:
        return fmt.subject
    if fmt.strategy == "TopicNameStrategy":
        return f"{topic}-{fmt.column}"
    if not record_name:
        raise AvroEncodeError(
            f"{fmt.column}.subject.name.strategy={fmt.strategy} needs a record name, and the {fmt.column}'s schema "
            "has none (a JSON schema names its record with a title)"
        )
    return record_name if fmt.strategy == "RecordNameStrategy" else f"{topic}-{record_name}"


def _references(fmt, refs) -> tuple:
    if not refs:
        return ()
    from broker.spark.formats import RegistryClient

    return RegistryClient(fmt.registry_url, fmt.user_info).references([dict(r) for r in refs])


def writer_schema(fmt, topic: str, text: str, record_name: str | None) -> tuple[int, str, tuple]:
    """(id, schema text, references as JSON triples) of the schema the rows are written
    with: `text` registered (auto.register.schemas) or looked up under the subject, or
    the subject's latest version (use.latest.version); once per Python worker."""
    subject = subject_for(fmt, topic, record_name)
    key = (fmt.registry_url, subject, fmt.fmt, text, fmt.auto_register, fmt.use_latest)
    with _lock:
        if key in _ids:
            return _ids[key]
    from broker.spark.formats import RegistryClient

    client = RegistryClient(fmt.registry_url, fmt.user_info)
    schema_type = SCHEMA_TYPES[fmt.fmt]
    if fmt.use_latest:
        v = client.version(subject, "latest")
        if v.get("schemaType", "AVRO") != schema_type:
            raise AvroEncodeError(
                f"kbroker sink: the latest version of subject {subject!r} is a {v.get('schemaType', 'AVRO')} schema, "
                f"not {schema_type} ({fmt.column}Format={fmt.fmt})"
            )
        got = (int(v["id"]), v["schema"], tuple(tuple(sorted(r.items())) for r in v.get("references") or ()))
    elif fmt.auto_register:
        got = (client.register(subject, text, schema_type), text, ())
    else:
        got = (client.lookup(subject, text, schema_type), text, ())
    with _lock:
        _ids[key] = got
    return got
