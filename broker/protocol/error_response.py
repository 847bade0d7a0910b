"""The answer to a request the broker could not handle: the response of the request's
API and version with every error code set (Kafka's AbstractRequest.getErrorResponse,
written once for every API instead of once per request class).

The response mirrors the request: each array of structs in the response is filled with
one element per element of the request's array that stands in its place — the array of
the same name, else the request's array of structs at the same position (Produce's
``topic_data`` answered in ``responses``, CreatePartitions' ``topics`` in ``results``)
— and each element takes the identifying fields of its request element (names, topic
ids, partition indexes, resource types; ``partition`` and ``index`` are Kafka's other
spellings of ``partition_index``); a request array of plain values (OffsetFetch's
partition indexes, DeleteTopics' topic names) gives one element per value. Every
error code (``error_code``, ``partition_error_code`` ...) is `code`, every nullable
``error_message`` in the version is `message`, a records field that may not be null is
empty; everything else keeps the spec's default.
"""

from __future__ import annotations

from typing import Any

from broker.protocol._runtime import Field, Message
from broker.protocol.api import API_SPECS

__all__ = ["error_response"]

#: a response field -> the request fields it may copy its value from, in order of preference
_IDENTITY = {
    "name": ("name", "topic", "topic_name", "group_id", "transactional_id"),
    "topic": ("topic", "name"),
    "topic_name": ("topic_name", "name", "topic"),
    "topic_id": ("topic_id",),
    "partition_index": ("partition_index", "partition", "index"),
    "partition": ("partition", "partition_index", "index"),
    "index": ("index", "partition_index", "partition"),
    "group_id": ("group_id",),
    "member_id": ("member_id",),
    "group_instance_id": ("group_instance_id",),
    "transactional_id": ("transactional_id",),
    "producer_id": ("producer_id",),
    "resource_type": ("resource_type",),
    "resource_name": ("resource_name",),
    "key": ("key",),
    "entity_type": ("entity_type",),
    "entity_name": ("entity_name",),
    "user": ("user", "name"),
    "path": ("path",),
    "log_dir": ("log_dir", "path"),
}


def _in(field: Field, version: int) -> bool:
    lo, hi = field.versions
    return lo <= version <= hi


def _struct_arrays(cls: Any, version: int) -> list[Field]:
    return [f for f in cls._FIELDS if f.struct is not None and f.type.startswith("[]") and _in(f, version)]


def _mirror(request: Any, cls: Any, version: int, code: int, message: str | None) -> Any:
    out = cls()
    req_fields = {f.name: f for f in type(request)._FIELDS if _in(f, version)} if request is not None else {}
    req_arrays = _struct_arrays(type(request), version) if request is not None else []
    resp_arrays = _struct_arrays(cls, version)
    for f in cls._FIELDS:
        if not _in(f, version):
            continue
        if f.name.endswith("error_code") and f.type == "int16":
            setattr(out, f.name, code)
        elif f.name == "error_message":
            nullable = f.nullable is not None and f.nullable[0] <= version <= f.nullable[1]
            out.error_message = message if message is not None or nullable else ""
        elif f.type == "records":
            nullable = f.nullable is not None and f.nullable[0] <= version <= f.nullable[1]
            if getattr(out, f.name) is None and not nullable:
                setattr(out, f.name, b"")  # no records (ShareFetch v1+'s are not nullable)
        elif f.struct is not None and f.type.startswith("[]"):
            source = req_fields.get(f.name)
            if source is None or source.struct is None or not source.type.startswith("[]"):
                position = resp_arrays.index(f)
                source = req_arrays[position] if position < len(req_arrays) else None
            if source is not None:
                items = getattr(request, source.name) or ()
                setattr(out, f.name, [_mirror(item, f.struct, version, code, message) for item in items])
            else:
                setattr(out, f.name, _from_values(request, req_fields, f.struct, version, code, message))
        elif f.name in _IDENTITY and request is not None:
            for name in _IDENTITY[f.name]:
                src = req_fields.get(name)
                if src is not None and src.type == f.type:
                    setattr(out, f.name, getattr(request, name))
                    break
    return out


#: arrays of plain values a request names its partitions or topics in (OffsetFetch's
#: partition_indexes, DeleteTopics' topic_names): the response's element field they fill
_VALUE_ARRAYS = {
    "[]int32": ("partition_index", "partition", "index", "partition_id"),
    "[]string": ("name", "topic", "topic_name", "group_id", "key", "transactional_id"),
}
#: what the name of such an array says it holds (not, say, DescribeConfigs' configuration_keys)
_VALUE_NAMES = ("partition", "topic", "group", "coordinator_key", "transactional_id")


def _from_values(
    request: Any, req_fields: dict[str, Field], cls: Any, version: int, code: int, message: str | None
) -> list[Any]:
    """The elements answering a request array of plain values (one per value), or []."""
    for src in req_fields.values():
        targets = _VALUE_ARRAYS.get(src.type)
        if (
            targets is None
            or (src.type == "[]int32") != ("partition" in src.name)
            or not any(n in src.name for n in _VALUE_NAMES)
        ):
            continue
        target = next((f for f in cls._FIELDS if f.name in targets and _in(f, version)), None)
        if target is None:
            continue
        out = []
        for value in getattr(request, src.name) or ():
            item = _mirror(None, cls, version, code, message)
            setattr(item, target.name, value)
            out.append(item)
        return out
    return []


def error_response(api_key: int, version: int, request: Any, code: int, message: str | None = None) -> Message:
    """The response of `api_key` at `version` answering `request` (its decoded request)
    with `code` in every error code and `message` in every error message there is."""
    cls = API_SPECS[api_key].response
    response: Message = _mirror(request, cls, version, code, message)
    return response
