"""Protobuf compatibility: Confluent's SchemaDiff of an original and an updated schema,
on their FileDescriptorProtos.

Differences are found per message (fields by number), enum (constants by number) and
file (package, top-level types by name); a change is compatible when every difference
is in COMPATIBLE: adding or removing a field, message, enum, enum constant or oneof,
renaming a field or a constant, moving a message, a string field turned repeated (or
back), a oneof field moved to the top level. Refused: a field number reused with another
kind of type (scalar, message, map — FIELD_KIND_CHANGED), another scalar kind
(int32/int64/uint32/uint64/bool/enums are one kind, sint32/sint64 another,
string/bytes, fixed32/sfixed32, fixed64/sfixed64, float, double —
FIELD_SCALAR_KIND_CHANGED), another message type (FIELD_NAMED_TYPE_CHANGED), a numeric
field made repeated or not (FIELD_NUMERIC_LABEL_CHANGED), a required field added or
removed, a oneof field removed, fields of different origins moved into one oneof, a
message removed, the package changed. A label counts only where the source writes one
(proto2 fields, proto3 `optional` and `repeated`): a proto3 field without a label, a
oneof member and a map have none, as in Wire's syntax tree that Confluent compares.
A field whose message type is compared in depth is incompatible when that type's
changes are.
"""

from __future__ import annotations

from typing import Any

COMPATIBLE = frozenset(
    {
        "MESSAGE_ADDED",
        "MESSAGE_MOVED",
        "ENUM_ADDED",
        "ENUM_REMOVED",
        "ENUM_CONST_ADDED",
        "ENUM_CONST_CHANGED",
        "ENUM_CONST_REMOVED",
        "FIELD_ADDED",
        "FIELD_REMOVED",
        "FIELD_NAME_CHANGED",
        "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
        "ONEOF_ADDED",
        "ONEOF_REMOVED",
        "ONEOF_FIELD_ADDED",
        "ONEOF_FIELD_MOVED_TO_TOP_LEVEL",
    }
)

_DESCRIPTIONS = {
    "PACKAGE_CHANGED": "The package at '{path}' in the {new} schema does not match the package in the {old} schema",
    "MESSAGE_REMOVED": "The {new} schema is missing a MESSAGE type at path '{path}' in the {old} schema",
    "FIELD_KIND_CHANGED": "The type of a field at path '{path}' in the {new} schema does not match the {old} schema",
    "FIELD_SCALAR_KIND_CHANGED": "The kind of a SCALAR field at path '{path}' in the {new} schema does not match "
    "its kind in the {old} schema",
    "FIELD_NAMED_TYPE_CHANGED": "The type of a MESSAGE field at path '{path}' in the {new} schema does not match "
    "its type in the {old} schema",
    "FIELD_NUMERIC_LABEL_CHANGED": "The label for a NUMERIC field at path '{path}' in the {new} schema does not "
    "match its label in the {old} schema",
    "REQUIRED_FIELD_ADDED": "A required field  at path '{path}' in the {new} schema is missing in the {old} schema",
    "REQUIRED_FIELD_REMOVED": "The {new} schema is missing a required field at path: '{path}' in the {old} schema",
    "ONEOF_FIELD_REMOVED": "The {new} schema is missing a oneof field at path '{path}' in the {old} schema",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF": "Multiple fields in the oneof at path '{path}' in the {new} schema are "
    "outside a oneof in the {old} schema",
    "FIELD_MOVED_TO_EXISTING_ONEOF": "A field in the oneof at path '{path}' in the {new} schema is outside an "
    "existing oneof in the {old} schema",
}

_GENERAL = "GENERAL_NUMBER"
_SCALAR_KINDS = {
    5: _GENERAL,
    3: _GENERAL,
    13: _GENERAL,
    4: _GENERAL,
    8: _GENERAL,
    14: _GENERAL,
    17: "SIGNED_NUMBER",
    18: "SIGNED_NUMBER",
    9: "STRING_OR_BYTES",
    12: "STRING_OR_BYTES",
    7: "FIXED32",
    15: "FIXED32",
    6: "FIXED64",
    16: "FIXED64",
    2: "FLOAT",
    1: "DOUBLE",
}
_NUMERIC = {_GENERAL, "SIGNED_NUMBER", "FIXED32", "FIXED64", "FLOAT", "DOUBLE"}
_MESSAGE, _GROUP, _ENUM = 11, 10, 14


def compare(original: Any, update: Any, roles: tuple[str, str] = ("new", "old")) -> list[str]:
    """The refused differences of `update` against `original`, as Confluent's messages."""
    ctx = _Context(_types(original), _types(update))
    ctx.compare_files(original.file, update.file)
    new, old = roles
    return [
        f'{{errorType:"{kind}", description:"{_DESCRIPTIONS.get(kind, "").format(path=path, new=new, old=old)}"}}'
        for kind, path in ctx.differences
        if kind not in COMPATIBLE
    ]


_Types = dict[str, tuple[Any, str, bool, bool]]


def _types(schema: Any) -> _Types:
    """full name -> (DescriptorProto or EnumDescriptorProto, its file's package, is a map
    entry, its file is proto3)"""
    out: _Types = {}
    for f in [*schema.files.values(), schema.file]:
        prefix = f".{f.package}" if f.package else ""
        proto3 = f.syntax == "proto3"

        def walk(messages: Any, enums: Any, scope: str, package: str, proto3: bool = proto3) -> None:
            for m in messages:
                name = f"{scope}.{m.name}"
                out[name] = (m, package, m.options.map_entry, proto3)
                walk(m.nested_type, m.enum_type, name, package)
            for e in enums:
                out[f"{scope}.{e.name}"] = (e, package, False, proto3)

        walk(f.message_type, f.enum_type, prefix, f.package)
    return out


class _Context:
    def __init__(self, original: _Types, update: _Types):
        self.original = original
        self.update = update
        self.differences: list[tuple[str, str]] = []
        self.path: list[str] = []
        self._visited: set[tuple[str, str]] = set()

    def add(self, kind: str, *extra: str) -> None:
        self.differences.append((kind, "#/" + "/".join([*self.path, *extra])))

    def compare_files(self, original: Any, update: Any) -> None:
        if original.package != update.package:
            self.add("PACKAGE_CHANGED")
        o_scope = f".{original.package}" if original.package else ""
        u_scope = f".{update.package}" if update.package else ""
        self.compare_types(
            original.message_type, original.enum_type, o_scope, update.message_type, update.enum_type, u_scope
        )

    def compare_types(self, o_msgs: Any, o_enums: Any, o_scope: str, u_msgs: Any, u_enums: Any, u_scope: str) -> None:
        o_list = [m for m in o_msgs if not m.options.map_entry]
        u_list = [m for m in u_msgs if not m.options.map_entry]
        o_by = {m.name: (i, m) for i, m in enumerate(o_list)}
        u_by = {m.name: (i, m) for i, m in enumerate(u_list)}
        for name in sorted(set(o_by) | set(u_by)):
            self.path.append(name)
            if name not in u_by:
                self.add("MESSAGE_REMOVED")
            elif name not in o_by:
                self.add("MESSAGE_ADDED")
            else:
                (oi, om), (ui, um) = o_by[name], u_by[name]
                self.compare_messages(om, f"{o_scope}.{name}", um, f"{u_scope}.{name}")
                if oi != ui:
                    self.add("MESSAGE_MOVED")
            self.path.pop()
        o_en = {e.name: e for e in o_enums}
        u_en = {e.name: e for e in u_enums}
        for name in sorted(set(o_en) | set(u_en)):
            self.path.append(name)
            if name not in u_en:
                self.add("ENUM_REMOVED")
            elif name not in o_en:
                self.add("ENUM_ADDED")
            else:
                self.compare_enums(o_en[name], u_en[name])
            self.path.pop()

    def compare_enums(self, o: Any, u: Any) -> None:
        o_by = {v.number: v for v in o.value}
        u_by = {v.number: v for v in u.value}
        for number in sorted(set(o_by) | set(u_by)):
            if number not in u_by:
                self.add("ENUM_CONST_REMOVED", str(number))
            elif number not in o_by:
                self.add("ENUM_CONST_ADDED", str(number))
            elif o_by[number].name != u_by[number].name:
                self.add("ENUM_CONST_CHANGED", str(number))

    def compare_messages(self, o: Any, o_name: str, u: Any, u_name: str) -> None:
        key = (o_name, u_name)
        if key not in self._visited:
            self._visited.add(key)
            self._compare_fields(o, u, _proto3(self.original, o_name), _proto3(self.update, u_name))
        self.compare_types(o.nested_type, o.enum_type, o_name, u.nested_type, u.enum_type, u_name)

    def _compare_fields(self, o: Any, u: Any, o_proto3: bool, u_proto3: bool) -> None:
        o_by, o_oneof, o_oneofs = _collect(o)
        u_by, u_oneof, u_oneofs = _collect(u)
        deleted = {name for name, tags in o_oneofs.items() if name not in u_oneofs and not any(t in u_by for t in tags)}
        for name, tags in u_oneofs.items():
            origins = set()
            moved_in = 0
            for t in tags:
                if t in o_oneof:
                    origins.add("oneof:" + o_oneof[t])
                elif t in o_by:
                    origins.add(f"field:{t}")
                    moved_in += 1
            if len(origins) > 1:
                self.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else "FIELD_MOVED_TO_EXISTING_ONEOF", name)
        for name in sorted(set(o_oneofs) | set(u_oneofs)):
            if name not in u_oneofs:
                self.add("ONEOF_REMOVED", name)
            elif name not in o_oneofs:
                self.add("ONEOF_ADDED", name)
        for tag in sorted(set(o_by) | set(u_by)):
            of, uf = o_by.get(tag), u_by.get(tag)
            if uf is None:
                if tag in o_oneof:
                    if o_oneof[tag] not in deleted:
                        self.add("ONEOF_FIELD_REMOVED", o_oneof[tag], str(tag))
                else:
                    self.add(
                        "REQUIRED_FIELD_REMOVED" if of is not None and of.label == 2 else "FIELD_REMOVED", str(tag)
                    )
            elif of is None:
                if tag in u_oneof:
                    self.add("ONEOF_FIELD_ADDED", u_oneof[tag], str(tag))
                else:
                    self.add("REQUIRED_FIELD_ADDED" if uf.label == 2 else "FIELD_ADDED", str(tag))
            else:
                if tag in o_oneof and tag not in u_oneof:
                    self.add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL", str(tag))
                extra = [u_oneof[tag], str(tag)] if tag in u_oneof else [str(tag)]
                self.path.extend(extra)
                if of.name != uf.name:
                    self.add("FIELD_NAME_CHANGED")
                self._labels_and_types(
                    _label(of, tag in o_oneof, o_proto3, self.original),
                    _label(uf, tag in u_oneof, u_proto3, self.update),
                    of,
                    uf,
                )
                del self.path[-len(extra) :]

    def _labels_and_types(self, o_label: int | None, u_label: int | None, o: Any, u: Any) -> None:
        o_kind, u_kind = self._kind(o, self.original), self._kind(u, self.update)
        if o_kind != u_kind:
            self.add("FIELD_KIND_CHANGED")
            return
        if o_kind == "SCALAR":
            ok, uk = self._scalar_kind(o, self.original), self._scalar_kind(u, self.update)
            if ok != uk:
                self.add("FIELD_SCALAR_KIND_CHANGED")
            elif o_label is not None and u_label is not None and o_label != u_label:
                if ok in _NUMERIC:
                    self.add("FIELD_NUMERIC_LABEL_CHANGED")
                elif ok == "STRING_OR_BYTES":
                    self.add("FIELD_STRING_OR_BYTES_LABEL_CHANGED")
        elif o_kind == "MAP":
            o_entry, u_entry = self.original[o.type_name][0], self.update[u.type_name][0]
            self._labels_and_types(None, None, o_entry.field[0], u_entry.field[0])
            self._labels_and_types(None, None, o_entry.field[1], u_entry.field[1])
        else:
            self._message_types(o.type_name, u.type_name)

    def _message_types(self, o_name: str, u_name: str) -> None:
        o_info, u_info = self.original.get(o_name), self.update.get(u_name)
        if o_info is None or u_info is None:
            if o_name != u_name:
                self.add("FIELD_NAMED_TYPE_CHANGED")
            return
        o_local = _local(o_name, o_info[1])
        u_local = _local(u_name, u_info[1])
        if o_local != u_local:
            self.add("FIELD_NAMED_TYPE_CHANGED")
            return
        if (o_name, u_name) in self._visited:
            return
        sub = _Context(self.original, self.update)
        sub._visited = self._visited
        sub.path = [o_local.lstrip(".")]
        sub.compare_messages(o_info[0], o_name, u_info[0], u_name)
        self.differences.extend(sub.differences)
        if any(kind not in COMPATIBLE for kind, _ in sub.differences):
            self.add("FIELD_NAMED_TYPE_CHANGED")

    def _kind(self, fd: Any, types: _Types) -> str:
        if fd.type in (_MESSAGE, _GROUP):
            info = types.get(fd.type_name)
            return "MAP" if info is not None and info[2] else "MESSAGE"
        return "SCALAR"

    def _scalar_kind(self, fd: Any, types: _Types) -> str:
        return _SCALAR_KINDS.get(fd.type, _GENERAL)


def _collect(m: Any) -> tuple[dict[int, Any], dict[int, str], dict[str, list[int]]]:
    """Fields by number, the oneof of each oneof member, each (real) oneof's members."""
    by_tag = {fd.number: fd for fd in m.field}
    synthetic = {fd.oneof_index for fd in m.field if fd.HasField("oneof_index") and fd.proto3_optional}
    tag_oneof: dict[int, str] = {}
    oneofs: dict[str, list[int]] = {}
    for i, o in enumerate(m.oneof_decl):
        if i in synthetic:
            continue
        oneofs[o.name] = []
    for fd in m.field:
        if fd.HasField("oneof_index") and fd.oneof_index not in synthetic:
            name = m.oneof_decl[fd.oneof_index].name
            tag_oneof[fd.number] = name
            oneofs[name].append(fd.number)
    return by_tag, tag_oneof, oneofs


def _proto3(types: _Types, name: str) -> bool:
    info = types.get(name)
    return bool(info is not None and info[3])


def _label(fd: Any, in_oneof: bool, proto3: bool, types: _Types) -> int | None:
    """The label the source writes (None: none written — see the module doc)."""
    if in_oneof:
        return None
    if fd.type == _MESSAGE and fd.label == 3:
        info = types.get(fd.type_name)
        if info is not None and info[2]:
            return None  # a map
    if fd.label == 1 and not fd.proto3_optional and proto3:
        return None
    return int(fd.label)


def _local(full: str, package: str) -> str:
    prefix = f".{package}." if package else "."
    return full[len(prefix) :] if full.startswith(prefix) else full.lstrip(".")
