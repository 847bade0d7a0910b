"""Protobuf schemas: .proto text parsed by protoc itself, or a FileDescriptorProto; one
canonical text printed from the descriptor.

The parser. grpcio-tools ships protoc's parser (libprotoc) as a Python extension:
`grpc_tools._protoc_compiler.get_protos` parses a .proto file and its imports from disk
in this process (no protoc binary, no subprocess), answers errors as exceptions with
file, line and column, and returns the Python modules protoc generates — each of which
carries its file's FileDescriptorProto, serialized, as the one bytes literal handed to
`AddSerializedFile`; that literal is read back with `ast` (never executed). A schema and
its references are written for it into a private temporary directory, each under its
reference name; Google's well-known types (google/protobuf/*.proto) come with grpcio-tools
and need no reference, as in Confluent's registry. A pure-Python .proto parser would
give a syntax tree, not descriptors, and would have to be trusted to agree with protoc
on every rule protoc enforces (field numbers, names, imports, proto2/proto3/editions).

A schema may also be given as a base64-encoded FileDescriptorProto — what Confluent's
Python serializer registers — and is then checked by building it, with its references,
into a protobuf DescriptorPool.

The canonical text (what identical schemas share, and the text of a schema given as a
descriptor) is printed from the FileDescriptorProto: syntax, package, imports, options,
then each message, enum and service in the file's order, with fully-qualified type names
(".pkg.Msg"), one declaration per line, no comments. Custom options (extensions of
google.protobuf.*Options) are not printed. A schema given as text is stored and answered
as its author wrote it.

`ProtobufSchema.file` is the FileDescriptorProto, `.files` every file it needs (its
references', the well-known types'), by name, in dependency order: the compatibility
rules (compat/protobuf.py) and a decoder of framed records (message indexes) work from
them.
"""

from __future__ import annotations

import ast
import base64
import binascii
import os
import re
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

from broker.registry.formats import PROTOBUF, InvalidSchema, Resolved, flatten

#: the name the schema's own file has in its FileDescriptorProto (Confluent's DEFAULT_NAME)
DEFAULT_NAME = "default"
_MAIN = "__schema__.proto"
_lock = threading.Lock()  # protoc's parser keeps process-wide state: one parse at a time


class ProtobufSchema:
    schema_type = PROTOBUF

    def __init__(self, file: Any, files: dict[str, Any], text: str | None, references: Sequence[Resolved]):
        self.file = file
        self.files = files
        self.references = tuple(references)
        self._canonical = print_file(file)
        self._text = text if text is not None else self._canonical

    @property
    def canonical(self) -> str:
        return self._canonical

    @property
    def text(self) -> str:
        return self._text

    def formatted(self, fmt: str) -> str:
        if fmt == "serialized":
            out = type(self.file)()
            out.CopyFrom(self.file)
            out.name = DEFAULT_NAME
            return base64.standard_b64encode(out.SerializeToString()).decode("ascii")
        return self._text

    def message_names(self) -> list[str]:
        """The full names of the file's top-level messages, in order (message index 0 is
        the first)."""
        pkg = self.file.package
        return [f"{pkg}.{m.name}" if pkg else m.name for m in self.file.message_type]


def parse_protobuf(text: str, references: Sequence[Resolved] = ()) -> ProtobufSchema:
    refs = flatten(references)
    for ref in refs:
        if ref.schema_type != PROTOBUF:
            raise InvalidSchema(f"Invalid schema: reference {ref.name} is a {ref.schema_type} schema")
    descriptor = _descriptor_bytes(text)
    if descriptor is not None:
        try:
            return _from_descriptor(descriptor, refs, references)
        except InvalidSchema:
            if "\n" in text.strip() or " " in text.strip():
                raise
            # one word that happens to be base64: protoc says what is wrong with it as text
    files = _compile(text, refs)
    main = files.pop(_MAIN)
    main.name = DEFAULT_NAME
    return ProtobufSchema(main, files, text, references)


def _descriptor_bytes(text: str) -> bytes | None:
    """The bytes of a base64 FileDescriptorProto, None for anything else (.proto text)."""
    stripped = text.strip()
    if not stripped or re.search(r"[^A-Za-z0-9+/=\s]", stripped):
        return None
    try:
        return base64.b64decode(stripped, validate=False)
    except (binascii.Error, ValueError):
        return None


def _from_descriptor(data: bytes, refs: list[Resolved], references: Sequence[Resolved]) -> ProtobufSchema:
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message import DecodeError

    fdp = descriptor_pb2.FileDescriptorProto()
    try:
        fdp.ParseFromString(data)
    except DecodeError as exc:
        raise InvalidSchema(f"Invalid schema: not a FileDescriptorProto ({exc})") from None
    files: dict[str, Any] = {}
    for ref in refs:
        sub = parse_protobuf(ref.text, ref.references)
        for name, f in sub.files.items():
            files.setdefault(name, f)
        dep = descriptor_pb2.FileDescriptorProto()
        dep.CopyFrom(sub.file)
        dep.name = ref.name
        files[ref.name] = dep
    for dep_name in fdp.dependency:
        if dep_name not in files and dep_name.startswith("google/protobuf/"):
            files.update(_well_known(dep_name))
    if not fdp.name:
        fdp.name = DEFAULT_NAME
    pool = descriptor_pool.DescriptorPool()
    try:
        for f in files.values():
            pool.Add(f)
        pool.Add(fdp)
        pool.FindFileByName(fdp.name)
    except Exception as exc:  # the pool's own words: TypeError, KeyError ...
        raise InvalidSchema(f"Invalid schema: {exc}") from None
    fdp.name = DEFAULT_NAME
    return ProtobufSchema(fdp, files, None, references)


def _well_known(name: str) -> dict[str, Any]:
    """google/protobuf/<x>.proto and what it imports, as FileDescriptorProtos."""
    with tempfile.TemporaryDirectory(prefix="kbroker-proto-") as tmp:
        path = os.path.join(tmp, _MAIN)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(f'syntax = "proto3";\nimport "{name}";\n')
        files = _run_protoc(tmp)
    files.pop(_MAIN, None)
    return files


def _compile(text: str, refs: list[Resolved]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kbroker-proto-") as tmp:
        for ref in refs:
            _write(tmp, ref.name, ref.text)
        _write(tmp, _MAIN, text)
        return _run_protoc(tmp)


def _write(root: str, name: str, text: str) -> None:
    path = os.path.normpath(os.path.join(root, name))
    if not path.startswith(root + os.sep) or name.startswith("google/protobuf/"):
        raise InvalidSchema(f"Invalid schema: reference name {name!r} is not a relative .proto path")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _include_dir() -> str:
    import grpc_tools

    return os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")


def _run_protoc(root: str) -> dict[str, Any]:
    """Every file protoc parsed (the schema's and its imports'), by name, in dependency order."""
    from google.protobuf import descriptor_pb2
    from grpc_tools import _protoc_compiler

    with _lock:
        try:
            generated = _protoc_compiler.get_protos(_MAIN.encode(), [root.encode(), _include_dir().encode()])
        except _protoc_compiler.ProtocErrors as exc:
            raise InvalidSchema(f"Invalid schema: {_protoc_message(exc)}") from None
    out: dict[str, Any] = {}
    for module_name, code in generated:
        fdp = descriptor_pb2.FileDescriptorProto()
        fdp.ParseFromString(_serialized_file(code, module_name))
        out[fdp.name] = fdp
    return out


def _protoc_message(exc: Any) -> str:
    lines = []
    for err in exc.errors():
        where = err.filename.decode() if isinstance(err.filename, bytes) else str(err.filename)
        msg = err.message.decode() if isinstance(err.message, bytes) else str(err.message)
        if where == _MAIN:
            where = "schema"
        lines.append(f"{where}:{err.line + 1}:{err.column + 1}: {msg}")
    return "; ".join(lines) or str(exc)


def _serialized_file(code: bytes, module_name: bytes) -> bytes:
    """The FileDescriptorProto bytes in protoc's generated Python (the argument of its one
    AddSerializedFile call), read as a literal, never run."""
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and node.args
        ):
            value = ast.literal_eval(node.args[0])
            if isinstance(value, bytes):
                return value
    raise InvalidSchema(f"Invalid schema: protoc gave no descriptor for {module_name!r}")


# ---------------------------------------------------------------------------- printing

_LABELS = {1: "optional", 2: "required", 3: "repeated"}
_SCALARS = {
    1: "double",
    2: "float",
    3: "int64",
    4: "uint64",
    5: "int32",
    6: "fixed64",
    7: "fixed32",
    8: "bool",
    9: "string",
    10: "group",
    12: "bytes",
    13: "uint32",
    15: "sfixed32",
    16: "sfixed64",
    17: "sint32",
    18: "sint64",
}
_TYPE_MESSAGE, _TYPE_ENUM, _TYPE_STRING, _TYPE_BYTES = 11, 14, 9, 12


def print_file(f: Any) -> str:
    out: list[str] = []
    if f.syntax == "editions":
        out.append(f'edition = "{_edition(f)}";')
    else:
        out.append(f'syntax = "{f.syntax or "proto2"}";')
    if f.package:
        out.append(f"package {f.package};")
    public, weak = set(f.public_dependency), set(f.weak_dependency)
    for i, dep in enumerate(f.dependency):
        kind = "public " if i in public else "weak " if i in weak else ""
        out.append(f'import {kind}"{dep}";')
    out.extend(_options(f.options, ""))
    proto3 = f.syntax == "proto3"
    for m in f.message_type:
        out.extend(_message(m, "", proto3))
    for e in f.enum_type:
        out.extend(_enum(e, ""))
    for s in f.service:
        out.extend(_service(s))
    for ext in _group_extensions(f.extension):
        out.extend(_extend(ext[0], ext[1], "", proto3))
    return "\n".join(out) + "\n"


def _edition(f: Any) -> str:
    name = type(f).DESCRIPTOR.fields_by_name["edition"].enum_type.values_by_number.get(f.edition)
    return name.name.removeprefix("EDITION_") if name is not None else str(f.edition)


def _message(m: Any, indent: str, proto3: bool) -> list[str]:
    inner = indent + "  "
    out = [f"{indent}message {m.name} {{"]
    out.extend(_options(m.options, inner))
    maps = {n.name: n for n in m.nested_type if n.options.map_entry}
    real_oneofs = [
        i
        for i, o in enumerate(m.oneof_decl)
        if not any(fd.HasField("oneof_index") and fd.oneof_index == i and fd.proto3_optional for fd in m.field)
    ]
    done_oneofs: set[int] = set()
    for fd in m.field:
        if fd.HasField("oneof_index") and fd.oneof_index in real_oneofs:
            if fd.oneof_index in done_oneofs:
                continue
            done_oneofs.add(fd.oneof_index)
            o = m.oneof_decl[fd.oneof_index]
            out.append(f"{inner}oneof {o.name} {{")
            out.extend(_options(o.options, inner + "  "))
            for member in m.field:
                if member.HasField("oneof_index") and member.oneof_index == fd.oneof_index:
                    out.append(inner + "  " + _field(member, maps, proto3, in_oneof=True))
            out.append(f"{inner}}}")
            continue
        out.append(inner + _field(fd, maps, proto3))
    for r in m.reserved_range:
        out.append(f"{inner}reserved {_range(r.start, r.end - 1)};")
    if m.reserved_name:
        out.append(f"{inner}reserved {', '.join(_quote(n) for n in m.reserved_name)};")
    for r in m.extension_range:
        out.append(f"{inner}extensions {_range(r.start, r.end - 1)};")
    for n in m.nested_type:
        if not n.options.map_entry:
            out.extend(_message(n, inner, proto3))
    for e in m.enum_type:
        out.extend(_enum(e, inner))
    for ext in _group_extensions(m.extension):
        out.extend(_extend(ext[0], ext[1], inner, proto3))
    out.append(f"{indent}}}")
    return out


def _range(start: int, end: int) -> str:
    if end >= 536870911:
        return f"{start} to max"
    return str(start) if start == end else f"{start} to {end}"


def _type_name(fd: Any) -> str:
    if fd.type in (_TYPE_MESSAGE, _TYPE_ENUM) or (fd.type == 10 and fd.type_name):
        return fd.type_name
    return _SCALARS.get(fd.type, "bytes")


def _field(fd: Any, maps: dict[str, Any], proto3: bool, in_oneof: bool = False) -> str:
    entry = maps.get(fd.type_name.rsplit(".", 1)[-1]) if fd.type == _TYPE_MESSAGE and fd.label == 3 else None
    if entry is not None and fd.type_name.endswith("." + entry.name):
        key, value = entry.field[0], entry.field[1]
        head = f"map<{_type_name(key)}, {_type_name(value)}>"
    else:
        label = "" if in_oneof else _LABELS.get(fd.label, "")
        if proto3 and fd.label == 1 and not fd.proto3_optional:
            label = ""
        head = f"{label} {_type_name(fd)}".strip()
    opts = []
    if fd.HasField("default_value"):
        opts.append(f"default = {_default(fd)}")
    if fd.HasField("json_name") and fd.json_name != _json_name(fd.name):
        opts.append(f"json_name = {_quote(fd.json_name)}")
    opts.extend(_option_items(fd.options))
    suffix = f" [{', '.join(opts)}]" if opts else ""
    return f"{head} {fd.name} = {fd.number}{suffix};"


def _json_name(name: str) -> str:
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def _default(fd: Any) -> str:
    v = fd.default_value
    if fd.type == _TYPE_STRING:
        return _quote(v)
    if fd.type == _TYPE_BYTES:
        return '"' + v + '"'  # already C-escaped by protoc
    return v


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _enum(e: Any, indent: str) -> list[str]:
    inner = indent + "  "
    out = [f"{indent}enum {e.name} {{"]
    out.extend(_options(e.options, inner))
    for v in e.value:
        opts = _option_items(v.options)
        suffix = f" [{', '.join(opts)}]" if opts else ""
        out.append(f"{inner}{v.name} = {v.number}{suffix};")
    for r in e.reserved_range:
        out.append(f"{inner}reserved {_range(r.start, r.end)};")
    if e.reserved_name:
        out.append(f"{inner}reserved {', '.join(_quote(n) for n in e.reserved_name)};")
    out.append(f"{indent}}}")
    return out


def _service(s: Any) -> list[str]:
    out = [f"service {s.name} {{"]
    out.extend(_options(s.options, "  "))
    for m in s.method:
        cs = "stream " if m.client_streaming else ""
        ss = "stream " if m.server_streaming else ""
        opts = _options(m.options, "    ")
        head = f"  rpc {m.name}({cs}{m.input_type}) returns ({ss}{m.output_type})"
        out.extend([head + " {", *opts, "  }"] if opts else [head + ";"])
    out.append("}")
    return out


def _group_extensions(extensions: Any) -> list[tuple[str, list[Any]]]:
    groups: dict[str, list[Any]] = {}
    for fd in extensions:
        groups.setdefault(fd.extendee, []).append(fd)
    return list(groups.items())


def _extend(extendee: str, fields: list[Any], indent: str, proto3: bool) -> list[str]:
    return [f"{indent}extend {extendee} {{", *(indent + "  " + _field(fd, {}, proto3) for fd in fields), f"{indent}}}"]


def _options(options: Any, indent: str) -> list[str]:
    return [f"{indent}option {item};" for item in _option_items(options)]


def _option_items(options: Any) -> list[str]:
    """The options message's own (non-custom) fields that are set, as `name = value`."""
    out = []
    for fd, value in options.ListFields():
        if fd.is_extension or fd.name == "features" or _repeated(fd):
            continue
        if fd.name == "map_entry":
            continue
        if fd.type == fd.TYPE_ENUM:
            text = fd.enum_type.values_by_number[value].name if value in fd.enum_type.values_by_number else str(value)
        elif fd.type == fd.TYPE_BOOL:
            text = "true" if value else "false"
        elif fd.type in (fd.TYPE_STRING, fd.TYPE_BYTES):
            text = _quote(value.decode("latin-1") if isinstance(value, bytes) else value)
        elif fd.type == fd.TYPE_MESSAGE:
            continue
        else:
            text = str(value)
        out.append(f"{fd.name} = {text}")
    return out


def _repeated(fd: Any) -> bool:
    is_repeated = getattr(fd, "is_repeated", None)  # protobuf >= 6: a property; older: label
    if is_repeated is not None:
        return bool(is_repeated)
    return bool(fd.label == fd.LABEL_REPEATED)
