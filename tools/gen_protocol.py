#!/usr/bin/env python3
"""Generate kbroker's Kafka wire-protocol codecs from Kafka's JSON message definitions.

Usage::

    python tools/gen_protocol.py [SPEC_DIR] [--records-dir DIR] [--share-records-dir DIR]
                                 [--out ROOT] [--from-schema]

Two stages:

1. ``SPEC_DIR`` (default ``../shared/kafka-protocol`` relative to the repository
   root) holds Apache Kafka's client definitions, ``--records-dir`` its group
   coordinator's record definitions (the ``common/message/`` resources of the
   ``kafka-group-coordinator`` jar), ``--share-records-dir`` its share coordinator's
   (those of the ``kafka-share-coordinator`` jar); without them the checked-in records
   are kept.  For every file listed in ``APIS`` / ``DATA_FILES`` / ``RECORD_FILES`` /
   ``SHARE_RECORD_FILES`` the ``//`` comments
   are stripped by a small tokenizer that respects string literals, and the result is
   written as plain JSON to ``ROOT/broker/protocol/schema/``; the error table of
   ``ERRORS.md`` becomes ``schema/errors.json``.  A refresh that would drop a version
   the codecs have stops, unless ``schema/legacy/`` keeps it.  ``--from-schema`` skips
   this stage.
2. From ``ROOT/broker/protocol/schema/`` alone (each definition with the older versions
   of its ``schema/legacy/`` definition merged back in, see ``merge_legacy``), one module
   per API (plus the headers, the consumer-protocol data structs and the group
   coordinator's records) is written to ``ROOT/broker/protocol/messages/`` together with
   the registry ``messages/__init__.py``, ``ROOT/broker/protocol/errors.py`` and the C
   header of the native Produce codec, ``ROOT/_native/include/kb_messages.h``.

``ROOT`` defaults to the repository root; tests pass a temporary directory and
compare the result with the checked-in files.  The output depends only on the
input files (no timestamps, sorted where order is not given by the input).
"""

from __future__ import annotations

import argparse
import json
import keyword
import re
import sys
import textwrap
from dataclasses import dataclass, field as dc_field
from pathlib import Path

KAFKA_VERSION = "4.4.0"
# (schema/legacy/ keeps older definitions of the versions Kafka 4.0 removed: see
# "legacy versions" below and schema/legacy/README.md)

# The one list of included APIs: adding an API is adding its name here (Kafka's
# name without the Request/Response suffix) and re-running the generator.
APIS = (
    "Produce",  # 0
    "Fetch",  # 1
    "ListOffsets",  # 2
    "Metadata",  # 3
    "LeaderAndIsr",  # 4
    "StopReplica",  # 5
    "UpdateMetadata",  # 6
    "ControlledShutdown",  # 7
    "OffsetCommit",  # 8
    "OffsetFetch",  # 9
    "FindCoordinator",  # 10
    "JoinGroup",  # 11
    "Heartbeat",  # 12
    "LeaveGroup",  # 13
    "SyncGroup",  # 14
    "DescribeGroups",  # 15
    "ListGroups",  # 16
    "SaslHandshake",  # 17
    "ApiVersions",  # 18
    "CreateTopics",  # 19
    "DeleteTopics",  # 20
    "DeleteRecords",  # 21
    "InitProducerId",  # 22
    "OffsetForLeaderEpoch",  # 23
    "AddPartitionsToTxn",  # 24
    "AddOffsetsToTxn",  # 25
    "EndTxn",  # 26
    "WriteTxnMarkers",  # 27
    "TxnOffsetCommit",  # 28
    "DescribeAcls",  # 29
    "CreateAcls",  # 30
    "DeleteAcls",  # 31
    "DescribeConfigs",  # 32
    "AlterConfigs",  # 33
    "DescribeLogDirs",  # 35
    "SaslAuthenticate",  # 36
    "CreatePartitions",  # 37
    "DeleteGroups",  # 42
    "ElectLeaders",  # 43
    "IncrementalAlterConfigs",  # 44
    "AlterPartitionReassignments",  # 45
    "ListPartitionReassignments",  # 46
    "OffsetDelete",  # 47
    "DescribeClientQuotas",  # 48
    "AlterClientQuotas",  # 49
    "DescribeUserScramCredentials",  # 50
    "AlterUserScramCredentials",  # 51
    "AlterPartition",  # 56
    "DescribeCluster",  # 60
    "DescribeProducers",  # 61
    "DescribeTransactions",  # 65
    "ListTransactions",  # 66
    "ConsumerGroupHeartbeat",  # 68
    "ConsumerGroupDescribe",  # 69
    "ShareGroupHeartbeat",  # 76
    "ShareGroupDescribe",  # 77
    "ShareFetch",  # 78
    "ShareAcknowledge",  # 79
    "InitializeShareGroupState",  # 83
    "ReadShareGroupState",  # 84
    "WriteShareGroupState",  # 85
    "DeleteShareGroupState",  # 86
    "ReadShareGroupStateSummary",  # 87
    "DescribeShareGroupOffsets",  # 90
    "AlterShareGroupOffsets",  # 91
    "DeleteShareGroupOffsets",  # 92
)
# Headers and versioned data structs without an api key (one module each).
DATA_FILES = (
    "RequestHeader",
    "ResponseHeader",
    "ConsumerProtocolSubscription",
    "ConsumerProtocolAssignment",
)
# The records KIP-848's consumer groups and KIP-932's share groups write to __consumer_offsets
# (key and value, one module each). Kafka keeps them outside the client definitions, in the group coordinator's
# resources (group-coordinator/src/main/resources/common/message/, in the released
# org.apache.kafka:kafka-group-coordinator jar); stage 1 reads them from --records-dir.
RECORD_FILES = tuple(
    f"ConsumerGroup{record}{part}"
    for record in (
        "Metadata",
        "PartitionMetadata",
        "MemberMetadata",
        "TargetAssignmentMetadata",
        "TargetAssignmentMember",
        "CurrentMemberAssignment",
        "RegularExpression",
    )
    for part in ("Key", "Value")
) + tuple(
    f"ShareGroup{record}{part}"
    for record in (
        "Metadata",
        "MemberMetadata",
        "TargetAssignmentMetadata",
        "TargetAssignmentMember",
        "CurrentMemberAssignment",
        "StatePartitionMetadata",
    )
    for part in ("Key", "Value")
)
# The records KIP-932's share coordinator writes to __share_group_state (type 0 the
# snapshot, 1 the update): share-coordinator/src/main/resources/common/message/, in the
# released org.apache.kafka:kafka-share-coordinator jar; stage 1 reads them from
# --share-records-dir.
SHARE_RECORD_FILES = tuple(f"Share{record}{part}" for record in ("Snapshot", "Update") for part in ("Key", "Value"))

# What the hand-written native codec of Produce (_native/produce.pyx, the broker's hot
# path) reads and writes of each struct: the fields it reads or writes in every version it
# covers, then those it tests against their first version (together, in wire order). Stage 2
# writes the versions into NATIVE_REL (as Kafka's MessageGenerator bakes them into its
# generated classes), and stops when a struct has a field the C code does not know: a
# newer Produce means changing produce.pyx, then this table.
NATIVE_FIELDS = {
    "ProduceRequest": {
        "ProduceRequest": (("TransactionalId", "Acks", "TimeoutMs", "TopicData"), ()),
        "TopicProduceData": (("Name", "PartitionData"), ()),
        "PartitionProduceData": (("Index", "Records"), ()),
    },
    "ProduceResponse": {
        "ProduceResponse": (("Responses", "ThrottleTimeMs"), ("NodeEndpoints",)),
        "TopicProduceResponse": (("Name", "PartitionResponses"), ()),
        "PartitionProduceResponse": (
            ("Index", "ErrorCode", "BaseOffset", "LogAppendTimeMs"),
            ("LogStartOffset", "RecordErrors", "ErrorMessage", "CurrentLeader"),
        ),
    },
}

# The newest version of each API the native codec is written for: Produce v13 (KIP-516)
# names topics by id instead of by name, which produce.pyx does not read; the fields of
# newer versions are the generated Python codec's alone.
NATIVE_UP_TO = {"Produce": 12}

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_REL = Path("broker/protocol/schema")
MESSAGES_REL = Path("broker/protocol/messages")
ERRORS_REL = Path("broker/protocol/errors.py")
NATIVE_REL = Path("_native/include/kb_messages.h")
LEGACY_REL = SCHEMA_REL / "legacy"
HEADER = f"# generated by tools/gen_protocol.py from Kafka {KAFKA_VERSION} \u2014 do not edit"
INF = 0x7FFF
EMPTY = (0, -1)  # "none"


# =========================================================================== stage 1


def strip_comments(text: str) -> str:
    """Remove ``//`` line comments outside JSON string literals."""
    out = []
    i = 0
    n = len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
        elif c == '"':
            in_string = True
            out.append(c)
            i += 1
        elif c == "/" and i + 1 < n and text[i + 1] == "/":
            while i < n and text[i] != "\n":
                i += 1
        else:
            out.append(c)
            i += 1
    if in_string:
        raise ValueError("unterminated string literal")
    return "".join(out)


def schema_file_names() -> list[str]:
    names = []
    for api in APIS:
        names += [f"{api}Request", f"{api}Response"]
    names += list(DATA_FILES)
    return names


def dump_json(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def parse_errors_md(text: str) -> list[list]:
    rows = []
    for line in text.splitlines():
        m = re.match(r"^\|\s*(-?\d+)\s*\|\s*([A-Z0-9_]+)\s*\|", line)  # code | name | (exception | message)
        if m:
            rows.append([int(m.group(1)), m.group(2)])
    if not rows:
        raise ValueError("no error codes found in ERRORS.md")
    return rows


def write_if_changed(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def version_set(obj: dict) -> set:
    """The valid versions of a definition, as a set."""
    lo, hi = parse_versions(obj["validVersions"])
    return set(range(lo, hi + 1))


def stage_schema(
    spec_dir: Path, root: Path, records_dir: Path | None = None, share_records_dir: Path | None = None
) -> None:
    readme = (spec_dir / "README.md").read_text(encoding="utf-8")
    if f"Apache Kafka **{KAFKA_VERSION}**" not in readme:
        raise SystemExit(f"{spec_dir}/README.md does not name Apache Kafka {KAFKA_VERSION}; update KAFKA_VERSION")
    out_dir = root / SCHEMA_REL
    legacy_dir = root / LEGACY_REL
    wanted = set()
    sources = [(name, spec_dir) for name in schema_file_names()]
    sources += [(name, records_dir) for name in RECORD_FILES]
    sources += [(name, share_records_dir) for name in SHARE_RECORD_FILES]
    for name, src_dir in sources:
        path = out_dir / f"{name}.json"
        wanted.add(path.name)
        if src_dir is None:  # the records, without --records-dir: keep the checked-in ones
            if not path.exists():
                raise SystemExit(
                    f"{path} is missing: pass --records-dir / --share-records-dir "
                    "(Kafka's group- and share-coordinator definitions)"
                )
            continue
        obj = json.loads(strip_comments((src_dir / f"{name}.json").read_text(encoding="utf-8")))
        if obj.get("name") != name:
            raise SystemExit(f"{name}.json declares name {obj.get('name')!r}")
        # a refresh never drops a version the codecs had: what the new definition no longer
        # has must be in schema/legacy/ (the generator merges it back in stage 2)
        legacy_path = legacy_dir / path.name
        kept = version_set(json.loads(legacy_path.read_text(encoding="utf-8"))) if legacy_path.exists() else set()
        if path.exists():
            lost = version_set(json.loads(path.read_text(encoding="utf-8"))) - version_set(obj) - kept
            if lost:
                raise SystemExit(
                    f"{name}: the new definition drops versions {fmt_set(lost)} that the codecs have; "
                    f"keep the current definition in {LEGACY_REL}/ (naming its source in its README.md) "
                    "or remove it first to drop them on purpose"
                )
        write_if_changed(path, dump_json(obj))
    errors = parse_errors_md((spec_dir / "ERRORS.md").read_text(encoding="utf-8"))
    write_if_changed(
        out_dir / "errors.json",
        dump_json({"source": f"Apache Kafka {KAFKA_VERSION}, ERRORS.md (Errors.java)", "errors": errors}),
    )
    wanted.add("errors.json")
    write_if_changed(out_dir / "README.md", SCHEMA_README)
    wanted.add("README.md")
    for p in sorted(out_dir.iterdir()):
        if p.is_file() and p.name not in wanted:
            p.unlink()


SCHEMA_README = f"""\
# Kafka message definitions (data)

Apache Kafka's JSON message definitions, licensed under the Apache License 2.0 (see the
NOTICE file at the repository root), from Apache Kafka {KAFKA_VERSION}:

- the requests, responses, headers and consumer-protocol structs: the `common/message/`
  resources of the released `org.apache.kafka:kafka-clients:{KAFKA_VERSION}` jar, which are the
  apache/kafka repository's `clients/src/main/resources/common/message/` at that release;
- the `ConsumerGroup*Key` / `ConsumerGroup*Value` and `ShareGroup*Key` /
  `ShareGroup*Value` records (what KIP-848's and KIP-932's group coordinator writes to
  `__consumer_offsets`): the `common/message/` resources of the
  released `org.apache.kafka:kafka-group-coordinator:{KAFKA_VERSION}` jar, the repository's
  `group-coordinator/src/main/resources/common/message/`;
- the `ShareSnapshot*` / `ShareUpdate*` records (what KIP-932's share coordinator writes
  to `__share_group_state`): the `common/message/` resources of the released
  `org.apache.kafka:kafka-share-coordinator:{KAFKA_VERSION}` jar, the repository's
  `share-coordinator/src/main/resources/common/message/`.

The `//` comments (licence header and prose) were stripped and the JSON re-serialised;
the data is otherwise unchanged. `errors.json` is the error-code table (code, name).
`legacy/` holds older definitions of versions Kafka has since removed (its README says
which and why); the generator merges them back in.

Written by `tools/gen_protocol.py`; do not edit (`legacy/` excepted).
"""


# =========================================================================== model


def parse_versions(s: str | None) -> tuple | None:
    if s is None:
        return None
    s = s.strip()
    if s == "none":
        return EMPTY
    if s.endswith("+"):
        return (int(s[:-1]), INF)
    if "-" in s:
        lo, hi = s.split("-")
        return (int(lo), int(hi))
    return (int(s), int(s))


def inr(rng: tuple | None, v: int) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def upper_snake(name: str) -> str:
    return snake(name).upper()


FIXED = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
    "bool": ("?", 1),
    "uuid": ("16s", 16),
}
PRIMITIVES = set(FIXED) | {"string", "bytes", "records"}
INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


@dataclass
class FieldDef:
    kafka_name: str
    attr: str
    type: str
    versions: tuple
    nullable: tuple | None
    tagged: tuple | None
    tag: int | None
    flex_override: tuple | None
    default_raw: object
    about: str
    struct: StructDef | None = None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def elem(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.elem not in PRIMITIVES


@dataclass
class StructDef:
    name: str
    fields: list
    msg: MessageDef
    is_top: bool = False
    versions: set = dc_field(default_factory=set)

    @property
    def qualname(self) -> str:
        return self.name if self.is_top else f"{self.msg.name}.{self.name}"

    @property
    def alias(self) -> str:
        return f"_C_{self.msg.name}" if self.is_top else f"_C_{self.msg.name}_{self.name}"


@dataclass
class MessageDef:
    name: str
    type: str
    api_key: int | None
    valid: tuple
    flexible: tuple
    top: StructDef = None  # type: ignore[assignment]
    structs: dict = dc_field(default_factory=dict)
    latest_unstable: bool = False
    deprecated: tuple | None = None

    def is_flexible(self, v: int) -> bool:
        return inr(self.flexible, v)

    @property
    def first_flexible(self) -> int | None:
        return None if self.flexible == EMPTY else self.flexible[0]


def load_message(obj: dict) -> MessageDef:
    msg = MessageDef(
        name=obj["name"],
        type=obj["type"],
        api_key=obj.get("apiKey"),
        valid=parse_versions(obj["validVersions"]),
        flexible=parse_versions(obj["flexibleVersions"]),
        latest_unstable=bool(obj.get("latestVersionUnstable", False)),
        deprecated=parse_versions(obj.get("deprecatedVersions")),
    )
    if msg.flexible != EMPTY and msg.flexible[1] != INF:
        raise SystemExit(f"{msg.name}: flexibleVersions must be 'N+' or 'none'")
    pending_refs: list[FieldDef] = []

    def parse_fields(jfields: list, owner: str) -> list:
        out = []
        for jf in jfields:
            t = jf["type"]
            f = FieldDef(
                kafka_name=jf["name"],
                attr=snake(jf["name"]),
                type=t,
                versions=parse_versions(jf["versions"]),
                nullable=parse_versions(jf.get("nullableVersions")),
                tagged=parse_versions(jf.get("taggedVersions")),
                tag=jf.get("tag"),
                flex_override=parse_versions(jf.get("flexibleVersions")),
                default_raw=jf.get("default"),
                about=jf.get("about", ""),
            )
            if keyword.iskeyword(f.attr) or f.attr == "unknown_tagged_fields":
                raise SystemExit(f"{msg.name}.{owner}: field name {f.attr!r} is reserved")
            if (f.tag is None) != (f.tagged is None):
                raise SystemExit(f"{msg.name}.{owner}.{f.kafka_name}: tag and taggedVersions go together")
            if f.is_struct:
                if "fields" in jf:
                    if f.elem in msg.structs:
                        raise SystemExit(f"{msg.name}: struct {f.elem} defined twice")
                    sd = StructDef(f.elem, [], msg)
                    msg.structs[f.elem] = sd
                    sd.fields = parse_fields(jf["fields"], f.elem)
                    f.struct = sd
                else:
                    pending_refs.append(f)
            elif "fields" in jf:
                raise SystemExit(f"{msg.name}.{owner}.{f.kafka_name}: primitive with fields")
            out.append(f)
        return out

    for cs in obj.get("commonStructs", []):
        if cs["name"] in msg.structs:
            raise SystemExit(f"{msg.name}: struct {cs['name']} defined twice")
        sd = StructDef(cs["name"], [], msg)
        msg.structs[cs["name"]] = sd
        sd.fields = parse_fields(cs["fields"], cs["name"])
    top = StructDef(msg.name, [], msg, is_top=True)
    top.fields = parse_fields(obj["fields"], msg.name)
    msg.top = top
    for f in pending_refs:
        if f.elem not in msg.structs:
            raise SystemExit(f"{msg.name}: unknown struct type {f.elem}")
        f.struct = msg.structs[f.elem]
    # versions in which each struct is reachable
    for v in range(msg.valid[0], msg.valid[1] + 1):
        mark_versions(top, v)
    return msg


def mark_versions(sd: StructDef, v: int) -> None:
    if v in sd.versions:
        return
    sd.versions.add(v)
    for f in sd.fields:
        if f.struct is not None and inr(f.versions, v):
            mark_versions(f.struct, v)


# ----------------------------------------------------------------- defaults


def default_value(f: FieldDef):
    """The Python default value (``list``/``StructDef`` markers for mutable ones)."""
    d = f.default_raw
    if f.is_array:
        if d in (None, ""):
            return []
        if d == "null":
            return None
        raise SystemExit(f"{f.kafka_name}: unsupported array default {d!r}")
    if f.is_struct:
        if d == "null":
            return None
        if d not in (None, ""):
            raise SystemExit(f"{f.kafka_name}: unsupported struct default {d!r}")
        return f.struct
    t = f.type
    if t in INT_RANGES or t == "uint16":
        if d is None or d == "":
            return 0
        val = d if isinstance(d, int) else int(str(d), 0)
        if t == "uint16":
            assert 0 <= val < 1 << 16
        else:
            bits = INT_RANGES[t]
            assert -(1 << (bits - 1)) <= val < 1 << (bits - 1), (f.kafka_name, val)
        return val
    if t == "float64":
        return 0.0 if d in (None, "") else float(d)
    if t == "bool":
        if d in (None, "", False, "false"):
            return False
        if d in (True, "true"):
            return True
        raise SystemExit(f"{f.kafka_name}: bad bool default {d!r}")
    if t == "string":
        if d == "null":
            if f.nullable is None:
                raise SystemExit(f"{f.kafka_name}: null default for a non-nullable string")
            return None
        return "" if d is None else str(d)
    if t == "bytes":
        if d == "null":
            return None
        assert d in (None, ""), f.kafka_name
        return b""
    if t == "records":
        assert d in (None, "", "null"), f.kafka_name
        return None
    if t == "uuid":
        assert d in (None, ""), f.kafka_name
        return "ZERO_UUID"
    raise SystemExit(f"unknown type {t}")


def default_expr(f: FieldDef) -> str:
    d = default_value(f)
    if isinstance(d, list):
        return "[]"
    if isinstance(d, StructDef):
        return f"{d.alias}()"
    if d == "ZERO_UUID":
        return "_ZERO_UUID"
    return repr(d)


def default_is_mutable(f: FieldDef) -> bool:
    d = default_value(f)
    return isinstance(d, (list, StructDef))


def isdefault_expr(f: FieldDef, var: str, gen: ModuleGen) -> str:
    d = default_value(f)
    if d is None:
        return f"{var} is None"
    if isinstance(d, list):
        return f"({var} is not None and len({var}) == 0)"
    if isinstance(d, StructDef):
        if all(f2.struct is None for f2 in d.fields):  # small struct: compare inline
            conds = [isdefault_expr(f2, f"{var}.{f2.attr}", gen) for f2 in d.fields]
            conds.append(f"not {var}.unknown_tagged_fields")
            return f"({var} is not None and " + " and ".join(conds) + ")"
        return f"({var} is not None and {gen.isdef_func(d)}({var}))"
    if d == "ZERO_UUID":
        return f"{var} == _ZERO_UUID"
    if isinstance(d, bytes):
        return f"({var} is not None and len({var}) == 0)"
    return f"{var} == {d!r}"


# =========================================================================== stage 2


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.level = 1
        self.counter = 0

    def add(self, s: str) -> None:
        self.lines.append("    " * self.level + s)

    def tmp(self, base: str) -> str:
        self.counter += 1
        return f"{base}{self.counter}"

    def indent(self) -> Lines:
        self.level += 1
        return self

    def dedent(self) -> None:
        self.level -= 1

    def text(self) -> str:
        return "\n".join(self.lines)


class ModuleGen:
    """Generates one module (one API's request+response, or one data file)."""

    def __init__(self, messages: list[MessageDef]) -> None:
        self.messages = messages
        self.structs_fmt: dict[str, str] = {}
        self.funcs: list[str] = []
        self.bodies: dict[tuple, str] = {}
        # codec functions are named after the versions they serve, known only once every
        # version is generated: until then a placeholder stands for each name
        self.func_names: dict[str, tuple[str, set[int]]] = {}
        self.dec_names: dict[tuple, str] = {}
        self.enc_names: dict[tuple, str] = {}
        self.isdef_names: dict[str, str] = {}
        self.known_tables: list[str] = []
        self.array_codes: set[str] = set()
        self.counter = 0

    # ------------------------------------------------------------ helpers
    def fmt_struct(self, fmt: str) -> str:
        if fmt not in self.structs_fmt:
            self.structs_fmt[fmt] = f"_S{len(self.structs_fmt)}"
        return self.structs_fmt[fmt]

    def add_func(self, kind: str, prefix: str, sig: str, body: str, v: int) -> str:
        """The function with this body (one per distinct body, shared by the versions
        whose wire format is the same); its name is a placeholder until `resolve_names`."""
        key = (kind, sig, body)
        name = self.bodies.get(key)
        if name is None:
            self.counter += 1
            name = f"\x00F{self.counter}\x00"
            self.bodies[key] = name
            self.func_names[name] = (f"_{kind}_{prefix}", set())
            self.funcs.append(f"def {name}({sig}):\n{body}\n")
        self.func_names[name][1].add(v)
        return name

    def resolve_names(self, text: str) -> str:
        """`text` with each placeholder replaced by its function's name: the kind, the
        struct and the versions it serves (`_d_FetchRequest_v4_to_11`), so a traceback
        says which version failed."""
        names: dict[str, str] = {}
        taken: set[str] = set()
        for ph, (base, versions) in self.func_names.items():
            name = f"{base}_{version_label(versions)}"
            n = 2
            while name in taken:
                name, n = f"{base}_{version_label(versions)}_{n}", n + 1
            taken.add(name)
            names[ph] = name
        return re.sub("\x00F\\d+\x00", lambda m: names[m.group(0)], text)

    def array_alias(self, code: str) -> str:
        self.array_codes.add(code)
        return "_A_" + {"?": "bool"}.get(code, code)

    def isdef_func(self, sd: StructDef) -> str:
        key = sd.alias
        if key in self.isdef_names:
            return self.isdef_names[key]
        name = f"_isdef_{sd.msg.name}_{sd.name}"
        self.isdef_names[key] = name
        conds = [isdefault_expr(f, f"o.{f.attr}", self) for f in sd.fields]
        conds.append("not o.unknown_tagged_fields")
        body = "    return (" + "\n            and ".join(conds) + ")"
        self.funcs.append(f"def {name}(o):\n{body}\n")
        return name

    @staticmethod
    def prefix(sd: StructDef) -> str:
        return sd.msg.name if sd.is_top else f"{sd.msg.name}_{sd.name}"

    @staticmethod
    def compact(msg: MessageDef, f: FieldDef, v: int) -> bool:
        if f.flex_override is not None:
            return inr(f.flex_override, v)
        return msg.is_flexible(v)

    # ------------------------------------------------------------ decoding
    def dec_struct(self, sd: StructDef, v: int) -> str:
        key = (sd.alias, v)
        if key in self.dec_names:
            return self.dec_names[key]
        msg = sd.msg
        flexible = msg.is_flexible(v)
        L = Lines()
        L.add(f"o = _new({sd.alias})")
        present = [f for f in sd.fields if inr(f.versions, v)]
        for f in sd.fields:
            if not inr(f.versions, v):
                L.add(f"o.{f.attr} = {default_expr(f)}")
        tagged = sorted((f for f in present if inr(f.tagged, v)), key=lambda f: f.tag)
        untagged = [f for f in present if not inr(f.tagged, v)]
        if tagged and not flexible:
            raise SystemExit(f"{sd.qualname}: tagged field in non-flexible version {v}")
        group: list[FieldDef] = []
        for f in untagged:
            if not f.is_array and f.type in FIXED:
                group.append(f)
                continue
            self.dec_group(L, sd, group, "end")
            group = []
            self.dec_value(L, sd, f, v, f"o.{f.attr}", "end")
        self.dec_group(L, sd, group, "end")
        if flexible:
            where = f"{sd.name}._tagged_fields"
            for f in tagged:
                L.add(f"o.{f.attr} = {default_expr(f)}")
            n = L.tmp("n")
            self.dec_uvarint(L, n, where, "end")
            L.add(f"if {n}:")
            if tagged:
                entries = []
                for f in tagged:
                    TL = Lines()
                    self.dec_value(TL, sd, f, v, f"o.{f.attr}", "end")
                    TL.add("return pos")
                    fname = self.add_func("dt", f"{self.prefix(sd)}_{f.attr}", "o, buf, pos, end", TL.text(), v)
                    entries.append(f"{f.tag}: {fname}")
                table = "{" + ", ".join(entries) + "}"
                tname = self.add_table(table)
                L.add(f"    pos = _rt.read_tags(o, buf, pos, end, {n}, {where!r}, {tname})")
            else:
                L.add(f"    pos = _rt.read_tags(o, buf, pos, end, {n}, {where!r})")
            L.add("else:")
            L.add("    o.unknown_tagged_fields = []")
        else:
            L.add("o.unknown_tagged_fields = []")
        L.add("return o, pos")
        name = self.add_func("d", self.prefix(sd), "buf, pos, end", L.text(), v)
        self.dec_names[key] = name
        return name

    def add_table(self, table: str) -> str:
        for line in self.known_tables:
            if line.split(" = ", 1)[1] == table:
                return line.split(" = ", 1)[0]
        name = f"_K{len(self.known_tables)}"
        self.known_tables.append(f"{name} = {table}")
        return name

    def dec_group(self, L: Lines, sd: StructDef, group: list, endv: str) -> None:
        if not group:
            return
        fmt = ">" + "".join(FIXED[f.type][0] for f in group)
        size = sum(FIXED[f.type][1] for f in group)
        sname = self.fmt_struct(fmt)
        spec = tuple((f.attr, FIXED[f.type][1]) for f in group)
        L.add(f"if {endv} - pos < {size}:")
        L.add(f"    raise _rt.group_eof({sd.name!r}, {spec!r}, pos, {endv})")
        targets = []
        post = []
        for f in group:
            if f.type == "uuid":
                t = L.tmp("u")
                targets.append(t)
                post.append(f"o.{f.attr} = _uuid({t})")
            else:
                targets.append(f"o.{f.attr}")
        L.add(f"{', '.join(targets)}, = {sname}.unpack_from(buf, pos)")
        L.add(f"pos += {size}")
        for p in post:
            L.add(p)

    def dec_uvarint(self, L: Lines, var: str, where: str, endv: str) -> None:
        L.add(f"if pos >= {endv}:")
        L.add(f"    raise _rt.eof({where!r}, pos, {endv}, 1)")
        L.add(f"{var} = buf[pos]")
        L.add("pos += 1")
        L.add(f"if {var} > 127:")
        L.add(f"    {var}, pos = _rt.uvarint_tail(buf, pos, {endv}, {var}, {where!r})")

    def dec_length(
        self, L: Lines, var: str, where: str, endv: str, compact: bool, width: int, nullable: bool, target: str
    ) -> None:
        """Read a length into ``var``; emits the null branch and leaves an open
        ``else:`` (indented) for the non-null case."""
        if compact:
            self.dec_uvarint(L, var, where, endv)
            L.add(f"if {var} == 0:")
        else:
            fmt = "h" if width == 2 else "i"
            L.add(f"if {endv} - pos < {width}:")
            L.add(f"    raise _rt.eof({where!r}, pos, {endv}, {width})")
            L.add(f"{var}, = {self.fmt_struct('>' + fmt)}.unpack_from(buf, pos)")
            L.add(f"pos += {width}")
            L.add(f"if {var} < 0:")
        if nullable:
            L.add(f"    {target} = None")
        else:
            L.add(f"    raise _rt.null_error({where!r}, pos - 1)")
        L.add("else:")
        L.indent()
        if compact:
            L.add(f"{var} -= 1")

    def dec_value(self, L: Lines, sd: StructDef, f: FieldDef, v: int, target: str, endv: str) -> None:
        msg = sd.msg
        where = f"{sd.name}.{f.attr}"
        nullable = inr(f.nullable, v)
        compact = self.compact(msg, f, v)
        if f.is_array:
            n = L.tmp("n")
            self.dec_length(L, n, where, endv, compact, 4, nullable, target)
            elem = f.elem
            if f.struct is not None:
                minsize = self.min_size(f.struct, v)
            elif elem in FIXED:
                minsize = FIXED[elem][1]
            else:
                minsize = 2 if not compact else 1
            check = f"{n} > {endv} - pos" if minsize <= 1 else f"{n} * {minsize} > {endv} - pos"
            L.add(f"if {check}:")
            L.add(f"    raise _rt.overrun({where!r}, pos, {n}, {endv} - pos, 'array length')")
            if elem in FIXED and elem != "uuid":
                code, size = FIXED[elem]
                arr = self.array_alias(code)
                L.add(
                    f"{target} = list(({arr}[{n}] if {n} < 32 else _rt.array_struct({code!r}, {n}))"
                    f".unpack_from(buf, pos))"
                )
                L.add(f"pos += {n} * {size}" if size > 1 else f"pos += {n}")
            else:
                a = L.tmp("a")
                L.add(f"{a} = []")
                L.add(f"for _ in range({n}):")
                L.indent()
                x = L.tmp("x")
                if f.struct is not None:
                    L.add(f"{x}, pos = {self.dec_struct(f.struct, v)}(buf, pos, {endv})")
                elif elem == "uuid":
                    L.add(f"if {endv} - pos < 16:")
                    L.add(f"    raise _rt.eof({where!r}, pos, {endv}, 16)")
                    L.add(f"{x} = _uuid(bytes(buf[pos:pos + 16]))")
                    L.add("pos += 16")
                else:
                    self.dec_lenval(L, where, elem, compact, False, x, endv)
                L.add(f"{a}.append({x})")
                L.dedent()
                L.add(f"{target} = {a}")
            L.dedent()
        elif f.struct is not None:
            dname = self.dec_struct(f.struct, v)
            if nullable:
                L.add(f"if pos >= {endv}:")
                L.add(f"    raise _rt.eof({where!r}, pos, {endv}, 1)")
                L.add("pos += 1")
                L.add("if buf[pos - 1] > 127:")
                L.add(f"    {target} = None")
                L.add("else:")
                L.add(f"    {target}, pos = {dname}(buf, pos, {endv})")
            else:
                L.add(f"{target}, pos = {dname}(buf, pos, {endv})")
        elif f.type in FIXED:
            code, size = FIXED[f.type]
            L.add(f"if {endv} - pos < {size}:")
            L.add(f"    raise _rt.eof({where!r}, pos, {endv}, {size})")
            if f.type == "uuid":
                L.add(f"{target} = _uuid(bytes(buf[pos:pos + 16]))")
            else:
                L.add(f"{target}, = {self.fmt_struct('>' + code)}.unpack_from(buf, pos)")
            L.add(f"pos += {size}")
        else:
            self.dec_lenval(L, where, f.type, compact, nullable, target, endv)

    def dec_lenval(self, L: Lines, where: str, t: str, compact: bool, nullable: bool, target: str, endv: str) -> None:
        n = L.tmp("n")
        self.dec_length(L, n, where, endv, compact, 2 if t == "string" else 4, nullable, target)
        L.add(f"if {n} > {endv} - pos:")
        L.add(f"    raise _rt.overrun({where!r}, pos, {n}, {endv} - pos, '{t} length')")
        if t == "string":
            L.add("try:")
            L.add(f"    {target} = str(buf[pos:pos + {n}], 'utf-8')")
            L.add("except UnicodeDecodeError as e:")
            L.add(f"    raise _rt.utf8_error({where!r}, pos, e) from None")
        elif t == "bytes":
            L.add(f"{target} = bytes(buf[pos:pos + {n}])")
        elif t == "records":
            L.add(f"{target} = buf[pos:pos + {n}]")
        else:
            raise AssertionError(t)
        L.add(f"pos += {n}")
        L.dedent()

    def min_size(self, sd: StructDef, v: int) -> int:
        msg = sd.msg
        total = 0
        for f in sd.fields:
            if not inr(f.versions, v) or inr(f.tagged, v):
                continue
            compact = self.compact(msg, f, v)
            if f.is_array:
                total += 1 if compact else 4
            elif f.struct is not None:
                total += 1 if inr(f.nullable, v) else self.min_size(f.struct, v)
            elif f.type in FIXED:
                total += FIXED[f.type][1]
            else:
                total += 1 if compact else (2 if f.type == "string" else 4)
        if msg.is_flexible(v):
            total += 1
        return total

    # ------------------------------------------------------------ encoding
    def enc_struct(self, sd: StructDef, v: int) -> str:
        key = (sd.alias, v)
        if key in self.enc_names:
            return self.enc_names[key]
        msg = sd.msg
        flexible = msg.is_flexible(v)
        L = Lines()
        present = [f for f in sd.fields if inr(f.versions, v)]
        tagged = sorted((f for f in present if inr(f.tagged, v)), key=lambda f: f.tag)
        untagged = [f for f in present if not inr(f.tagged, v)]
        group: list[FieldDef] = []
        for f in untagged:
            if not f.is_array and f.type in FIXED:
                group.append(f)
                continue
            self.enc_group(L, group, "out")
            group = []
            self.enc_value(L, sd, f, v, f"o.{f.attr}", "out", "sp")
        self.enc_group(L, group, "out")
        if flexible:
            if tagged:
                L.add("t = []")
                for f in tagged:
                    x = L.tmp("v")
                    L.add(f"{x} = o.{f.attr}")
                    L.add(f"if not ({isdefault_expr(f, x, self)}):")
                    L.indent()
                    tb = L.tmp("tb")
                    L.add(f"{tb} = bytearray()")
                    if f.type == "records":
                        raise SystemExit("records in a tagged field are not supported")
                    self.enc_value(L, sd, f, v, x, tb, "None")
                    L.add(f"t.append(({f.tag}, {tb}))")
                    L.dedent()
                L.add("u = o.unknown_tagged_fields")
                L.add("if t or u:")
                L.add("    _rt.put_tags(out, t, u)")
                L.add("else:")
                L.add("    out.append(0)")
            else:
                L.add("u = o.unknown_tagged_fields")
                L.add("if u:")
                L.add("    _rt.put_tags(out, [], u)")
                L.add("else:")
                L.add("    out.append(0)")
        if not L.lines:
            L.add("pass")
        name = self.add_func("e", self.prefix(sd), "o, out, sp", L.text(), v)
        self.enc_names[key] = name
        return name

    def enc_group(self, L: Lines, group: list, outv: str) -> None:
        if not group:
            return
        fmt = ">" + "".join(FIXED[f.type][0] for f in group)
        sname = self.fmt_struct(fmt)
        args = ", ".join(f"o.{f.attr}.bytes" if f.type == "uuid" else f"o.{f.attr}" for f in group)
        L.add(f"{outv} += {sname}.pack({args})")

    def enc_uvarint_len(self, L: Lines, expr: str, outv: str) -> None:
        n = L.tmp("n")
        L.add(f"{n} = {expr}")
        L.add(f"if {n} < 128:")
        L.add(f"    {outv}.append({n})")
        L.add("else:")
        L.add(f"    _rt.put_uvarint({outv}, {n})")

    def enc_value(self, L: Lines, sd: StructDef, f: FieldDef, v: int, val: str, outv: str, spv: str) -> None:
        msg = sd.msg
        nullable = inr(f.nullable, v)
        compact = self.compact(msg, f, v)
        if f.type == "records":
            L.add(f"_rt.put_records({outv}, {spv}, {val}, {compact}, {nullable})")
            return
        if f.type == "bytes":
            L.add(f"_rt.put_bytes({outv}, {val}, {compact}, {nullable})")
            return
        if f.is_array or f.struct is not None or f.type == "string":
            x = val
            if not re.fullmatch(r"[a-z]+\d+", val):
                x = L.tmp("v")
                L.add(f"{x} = {val}")
            if nullable:
                L.add(f"if {x} is None:")
                if f.struct is not None and not f.is_array:
                    L.add(f"    {outv} += b'\\xff'")
                elif compact:
                    L.add(f"    {outv}.append(0)")
                else:
                    L.add(
                        f"    {outv} += b'\\xff\\xff'"
                        if f.type == "string"
                        else f"    {outv} += b'\\xff\\xff\\xff\\xff'"
                    )
                L.add("else:")
                L.indent()
            if f.is_array:
                if compact:
                    self.enc_uvarint_len(L, f"len({x}) + 1", outv)
                else:
                    L.add(f"{outv} += _S_I32.pack(len({x}))")
                elem = f.elem
                if f.struct is not None:
                    ename = self.enc_struct(f.struct, v)
                    e = L.tmp("e")
                    L.add(f"for {e} in {x}:")
                    L.add(f"    {ename}({e}, {outv}, {spv})")
                elif elem == "uuid":
                    e = L.tmp("e")
                    L.add(f"for {e} in {x}:")
                    L.add(f"    {outv} += {e}.bytes")
                elif elem in FIXED:
                    code = FIXED[elem][0]
                    arr = self.array_alias(code)
                    k = L.tmp("k")
                    L.add(f"{k} = len({x})")
                    L.add(f"{outv} += ({arr}[{k}] if {k} < 32 else _rt.array_struct({code!r}, {k})).pack(*{x})")
                elif elem == "string":
                    e = L.tmp("e")
                    L.add(f"for {e} in {x}:")
                    L.indent()
                    self.enc_string(L, e, compact, outv)
                    L.dedent()
                else:
                    raise SystemExit(f"unsupported array element {elem}")
            elif f.struct is not None:
                if nullable:
                    L.add(f"{outv}.append(1)")
                L.add(f"{self.enc_struct(f.struct, v)}({x}, {outv}, {spv})")
            else:
                self.enc_string(L, x, compact, outv)
            if nullable:
                L.dedent()
            return
        if f.type in FIXED:
            code = FIXED[f.type][0]
            arg = f"{val}.bytes" if f.type == "uuid" else val
            L.add(f"{outv} += {self.fmt_struct('>' + code)}.pack({arg})")
            return
        raise SystemExit(f"unsupported type {f.type}")

    def enc_string(self, L: Lines, x: str, compact: bool, outv: str) -> None:
        b = L.tmp("b")
        L.add(f"{b} = {x}.encode()")
        if compact:
            self.enc_uvarint_len(L, f"len({b}) + 1", outv)
        else:
            L.add(f"{outv} += _S_I16.pack(len({b}))")
        L.add(f"{outv} += {b}")

    # ------------------------------------------------------------ classes
    def class_source(self, sd: StructDef, indent: str) -> str:
        msg = sd.msg
        base = "_rt.Struct"
        if sd.is_top:
            base = "_rt.DataMessage" if msg.type == "data" else "_rt.Message"
        attrs = [f.attr for f in sd.fields] + ["unknown_tagged_fields"]
        out = [f"class {sd.name}({base}):"]
        out.append(f'    """{self.docstring(sd)}"""')
        out.append("")
        out.append(f"    __slots__ = {tuple(attrs)!r}")
        if sd.is_top:
            out.append(f"    NAME = {msg.name!r}")
            out.append(f"    API_KEY = {msg.api_key!r}")
            out.append(f"    MIN_VERSION = {msg.valid[0]}")
            out.append(f"    MAX_VERSION = {msg.valid[1]}")
            out.append(f"    FLEXIBLE_VERSION = {msg.first_flexible!r}")
            nested = [s for s in msg.structs.values()]
            for s in sorted(nested, key=lambda s: s.name):
                out.append("")
                out.append(textwrap.indent(self.class_source(s, ""), "    "))
        # __init__
        params = []
        body = []
        for f in sd.fields:
            if default_is_mutable(f):
                params.append(f"{f.attr}=_MISSING")
                body.append(f"self.{f.attr} = {default_expr(f)} if {f.attr} is _MISSING else {f.attr}")
            else:
                params.append(f"{f.attr}={default_expr(f)}")
                body.append(f"self.{f.attr} = {f.attr}")
        params.append("unknown_tagged_fields=_MISSING")
        body.append("self.unknown_tagged_fields = [] if unknown_tagged_fields is _MISSING else unknown_tagged_fields")
        out.append("")
        out.append("    def __init__(self, *, " + ", ".join(params) + "):")
        for b in body:
            out.append("        " + b)
        # __eq__
        out.append("")
        out.append("    def __eq__(self, other):")
        out.append("        if other.__class__ is not self.__class__:")
        out.append("            return NotImplemented")
        conds = [f"self.{a} == other.{a}" for a in attrs]
        out.append("        return (" + "\n                and ".join(conds) + ")")
        # __repr__
        out.append("")
        out.append("    def __repr__(self):")
        parts = ", ".join(f"{f.attr}={{self.{f.attr}!r}}" for f in sd.fields)
        out.append(f"        r = f'{sd.qualname}({parts}'")
        out.append("        if self.unknown_tagged_fields:")
        out.append("            r += f', unknown_tagged_fields={self.unknown_tagged_fields!r}'")
        out.append("        return r + ')'")
        late = native_late_fields(sd)
        if late:
            api = msg.name.removesuffix("Request").removesuffix("Response")
            out.append("")
            out.append("    def __getattr__(self, name):")
            out.append(
                f"        # the native {api} codec (written for versions up to {NATIVE_UP_TO[api]}, NATIVE_UP_TO) builds"
            )
            out.append("        # this class without the fields of newer versions: they read as their defaults")
            for f in late:
                out.append(f"        if name == {f.attr!r}:")
                out.append(f"            return {default_expr(f)}")
            out.append("        raise AttributeError(name)")
        return "\n".join(out)

    def docstring(self, sd: StructDef) -> str:
        msg = sd.msg
        if sd.is_top:
            if msg.api_key is not None:
                head = f"Kafka {msg.name} (api key {msg.api_key}), versions {fmt_range(msg.valid)}"
            else:
                head = f"Kafka {msg.name} ({msg.type}), versions {fmt_range(msg.valid)}"
            head += f", flexible {fmt_range(msg.flexible)}."
        else:
            head = f"{sd.qualname}: struct of {msg.name}, used in versions {fmt_set(sd.versions)}."
        lines = [head, "", "Fields (Kafka name, type, versions):", ""]
        for f in sd.fields:
            desc = f"{f.attr} ({f.kafka_name}, {f.type}, v{fmt_range(f.versions)}"
            if f.nullable:
                desc += f", nullable v{fmt_range(f.nullable)}"
            if f.tagged:
                desc += f", tag {f.tag} v{fmt_range(f.tagged)}"
            desc += ")"
            if f.about:
                desc += ": " + f.about
            wrapped = textwrap.wrap(desc, 88, subsequent_indent="    ")
            lines += wrapped
        text = "\n".join(lines)
        text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
        return textwrap.indent(text, "    ").lstrip() + "\n    "

    def fields_source(self, sd: StructDef) -> str:
        items = []
        for f in sd.fields:
            struct = f.struct.alias if f.struct is not None else "None"
            items.append(
                f"    _rt.Field({f.attr!r}, {f.kafka_name!r}, {f.type!r}, {f.versions!r}, "
                f"{f.nullable!r}, {f.tagged!r}, {f.tag!r}, {struct}, {f.flex_override!r}),"
            )
        return f"{sd.alias}._FIELDS = (\n" + "\n".join(items) + "\n)" if items else f"{sd.alias}._FIELDS = ()"

    def module_source(self, module_doc: str) -> str:
        # functions first (so struct formats and names are known)
        tables = []
        for msg in self.messages:
            decs, encs = [], []
            for v in range(0, msg.valid[1] + 1):
                if v < msg.valid[0]:
                    decs.append("None")
                    encs.append("None")
                else:
                    decs.append(self.dec_struct(msg.top, v))
                    encs.append(self.enc_struct(msg.top, v))
            tables.append(f"{msg.name}._DECODERS = ({', '.join(decs)},)")
            tables.append(f"{msg.name}._ENCODERS = ({', '.join(encs)},)")
        out = [HEADER, f'"""{module_doc}"""', "", "import struct as _struct", "", "from .. import _runtime as _rt", ""]
        out.append("_new = object.__new__")
        out.append("_MISSING = _rt.MISSING")
        out.append("_ZERO_UUID = _rt.ZERO_UUID")
        out.append("_uuid = _rt.uuid_from")
        out.append("_S_I16 = _rt.S_INT16")
        out.append("_S_I32 = _rt.S_INT32")
        for code in sorted(self.array_codes):
            out.append(f"{self.array_alias(code)} = _rt.ARRAY_STRUCTS[{code!r}]")
        for fmt, name in sorted(self.structs_fmt.items(), key=lambda kv: int(kv[1][2:])):
            out.append(f"{name} = _struct.Struct({fmt!r})")
        out.append("")
        for msg in self.messages:
            out.append("")
            out.append(self.class_source(msg.top, ""))
            out.append("")
        out.append("")
        for msg in self.messages:
            out.append(f"{msg.top.alias} = {msg.name}")
            for s in sorted(msg.structs.values(), key=lambda s: s.name):
                out.append(f"{s.alias} = {s.qualname}")
        out.append("")
        for msg in self.messages:
            for s in [msg.top] + sorted(msg.structs.values(), key=lambda s: s.name):
                out.append(self.fields_source(s))
        out.append("")
        out.append("")
        out.append("\n\n".join(self.funcs))
        out.append("")
        out += self.known_tables
        out.append("")
        out += tables
        out.append("")
        out.append(f"__all__ = {[m.name for m in self.messages]!r}")
        return self.resolve_names("\n".join(out) + "\n")


def version_label(versions: set[int]) -> str:
    """{4, 5, 6} -> 'v4_to_6'; {0, 1, 3} -> 'v0_to_1_v3'; {2} -> 'v2'."""
    runs: list[list[int]] = []
    for v in sorted(versions):
        if runs and runs[-1][1] == v - 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return "_".join(f"v{lo}" if lo == hi else f"v{lo}_to_{hi}" for lo, hi in runs)


def fmt_range(r: tuple | None) -> str:
    if r is None or r == EMPTY:
        return "none"
    if r[1] == INF:
        return f"{r[0]}+"
    if r[0] == r[1]:
        return str(r[0])
    return f"{r[0]}-{r[1]}"


def fmt_set(vs: set) -> str:
    if not vs:
        return "none"
    vs = sorted(vs)
    return fmt_range((vs[0], vs[-1])) if vs == list(range(vs[0], vs[-1] + 1)) else ",".join(map(str, vs))


MODULE_DOC = """Kafka {what}: generated message classes and per-version codecs.

Every class has ``__slots__``, a keyword-only constructor whose defaults are the
spec's defaults, ``__eq__`` (field by field, including ``unknown_tagged_fields``)
and ``__repr__``.  Field names are Kafka's in snake_case; nested structs are
nested classes of the message class, as in Kafka's generated Java.

Codecs (one straight-line function per struct and version, shared between
versions whose wire format is identical, named after the versions it serves:
``_d_<Struct>_v3_to_5`` decodes, ``_e_...`` encodes):

* ``Cls.decode(data, version)`` / ``obj.encode(version)`` work on a body without
  header or size prefix; ``broker.protocol.codec`` frames requests/responses.
* A field that does not exist in the version being encoded is silently not
  written; when decoding, it is set to its default.
* Known tagged fields are decoded into their attributes and written only when
  different from their default; unknown tags are kept, in input order, in
  ``unknown_tagged_fields`` (list of ``(tag, bytes)``) and re-emitted on encode.
* ``records`` fields decode to a zero-copy ``memoryview`` slice of the input (or
  ``None``); on encode they accept bytes-like values, ``None`` or a file region
  (``broker.protocol.types.FileRegion``, encode_response only).
* Malformed input raises ``broker.protocol.types.ProtocolDecodeError``.
"""


# =========================================================================== legacy versions
#
# Kafka 4.0 removed old versions of many APIs from its definitions (KIP-896), and the
# inter-broker APIs of ZooKeeper mode altogether (LeaderAndIsr, StopReplica, UpdateMetadata,
# ControlledShutdown). kbroker still serves them, so schema/legacy/ keeps the definitions
# the codecs were first generated from, and a message's definition is the new one with the
# legacy one's older versions merged back in: the versions below the new definition's
# first come from the legacy definition, the rest from the new. Every version of the
# result is then checked, field by field, against the definition it must equal.


def _restrict(rng: tuple | None, below: int) -> tuple | None:
    if rng is None or rng == EMPTY or rng[0] >= below:
        return None
    return (rng[0], min(rng[1], below - 1))


def _union(a: tuple | None, b: tuple | None, what: str) -> tuple | None:
    if a is None or a == EMPTY:
        return b
    if b is None or b == EMPTY:
        return a
    if max(a[0], b[0]) > min(a[1], b[1]) + 1:
        raise SystemExit(f"{what}: versions {fmt_range(a)} and {fmt_range(b)} do not join")
    return (min(a[0], b[0]), max(a[1], b[1]))


_VERSION_KEYS = ("versions", "nullableVersions", "taggedVersions", "flexibleVersions")


def _merge_fields(old: list, new: list, below: int, what: str) -> list:
    old_names = [f["name"] for f in old]
    new_names = [f["name"] for f in new]
    common = [n for n in old_names if n in new_names]
    if common != [n for n in new_names if n in old_names]:
        raise SystemExit(f"{what}: the legacy and new definitions order fields differently")
    by_old = {f["name"]: f for f in old}
    out = []
    for f in new:
        merged = dict(f)
        lf = by_old.get(f["name"])
        if lf is not None:
            if lf["type"] != f["type"]:
                raise SystemExit(f"{what}.{f['name']}: type {lf['type']} became {f['type']}")
            if lf.get("tag", f.get("tag")) != f.get("tag", lf.get("tag")):
                raise SystemExit(f"{what}.{f['name']}: tag changed")
            for key in _VERSION_KEYS:
                rng = _union(
                    _restrict(parse_versions(lf.get(key)), below), parse_versions(f.get(key)), f"{what}.{f['name']}"
                )
                if rng is None:
                    merged.pop(key, None)
                else:
                    merged[key] = fmt_range(rng)
            if "tag" in lf:
                merged["tag"] = lf["tag"]
            if "fields" in lf and "fields" in f:
                merged["fields"] = _merge_fields(lf["fields"], f["fields"], below, f"{what}.{f['name']}")
            elif "fields" in lf or "fields" in f:
                raise SystemExit(f"{what}.{f['name']}: struct defined in one definition only")
        out.append(merged)
    # fields only the legacy definition has, each after the field it follows there
    for i, lf in enumerate(old):
        if lf["name"] in new_names:
            continue
        rng = parse_versions(lf["versions"])
        if _restrict(rng, below) != rng:
            raise SystemExit(f"{what}.{lf['name']}: gone from versions the new definition still has")
        pos = 0
        for prev in reversed(old[:i]):
            names = [f["name"] for f in out]
            if prev["name"] in names:
                pos = names.index(prev["name"]) + 1
                break
        out.insert(pos, lf)
    return out


def merge_legacy(old: dict, new: dict) -> dict:
    """`new` with the versions of `old` below its first valid version merged back in."""
    name = new["name"]
    new_valid = parse_versions(new["validVersions"])
    below = INF + 1 if new_valid == EMPTY else new_valid[0]
    merged = dict(new)
    merged["validVersions"] = fmt_range(_union(_restrict(parse_versions(old["validVersions"]), below), new_valid, name))
    if new_valid == EMPTY:  # removed altogether: the legacy definition is the whole of it
        for key in ("flexibleVersions", "fields", "commonStructs", "listeners"):
            if key in old:
                merged[key] = old[key]
        merged.pop("deprecatedVersions", None)
        merged.pop("latestVersionUnstable", None)
    else:
        merged["fields"] = _merge_fields(old.get("fields", []), new.get("fields", []), below, name)
        old_common = {c["name"]: c for c in old.get("commonStructs", [])}
        commons = []
        for c in new.get("commonStructs", []):
            lc = old_common.pop(c["name"], None)
            if lc is None:
                commons.append(c)
            else:
                commons.append(dict(c, fields=_merge_fields(lc["fields"], c["fields"], below, f"{name}.{c['name']}")))
        commons += old_common.values()
        if commons:
            merged["commonStructs"] = commons
    for v in range(*_span(old, new)):
        source = old if v < below else new
        if _layout(merged, v) != _layout(source, v):
            raise SystemExit(
                f"{name}: the merged definition's v{v} differs from the {'legacy' if v < below else 'new'} one"
            )
    return merged


def _span(old: dict, new: dict) -> tuple:
    lo, hi = parse_versions(old["validVersions"])
    nv = parse_versions(new["validVersions"])
    if nv != EMPTY:
        lo, hi = min(lo, nv[0]), max(hi, nv[1])
    return (lo, hi + 1)


def _layout(obj: dict, v: int) -> tuple:
    """What decides the wire format and the generated classes of `obj` at version `v`."""
    structs: dict = {}

    def collect(fields: list) -> None:
        for f in fields:
            if "fields" in f:
                structs[f["type"].removeprefix("[]")] = f["fields"]
                collect(f["fields"])

    for c in obj.get("commonStructs", []):
        structs[c["name"]] = c["fields"]
        collect(c["fields"])
    collect(obj.get("fields", []))

    def lay(fields: list) -> list:
        out = []
        for f in fields:
            if not inr(parse_versions(f["versions"]), v):
                continue
            elem = f["type"].removeprefix("[]")
            out.append(
                (
                    f["name"],
                    f["type"],
                    f.get("default"),
                    f.get("tag") if inr(parse_versions(f.get("taggedVersions")), v) else None,
                    tuple(inr(parse_versions(f.get(k)), v) for k in _VERSION_KEYS[1:]),
                    lay(structs[elem]) if elem in structs else None,
                )
            )
        return out

    return (inr(parse_versions(obj.get("flexibleVersions", "none")), v), lay(obj.get("fields", [])))


def module_name(name: str) -> str:
    return snake(name)


def generate_code(root: Path) -> dict[Path, str]:
    schema_dir = root / SCHEMA_REL
    files: dict[Path, str] = {}

    def load(name: str) -> MessageDef:
        obj = json.loads((schema_dir / f"{name}.json").read_text(encoding="utf-8"))
        legacy = root / LEGACY_REL / f"{name}.json"
        if legacy.exists():
            obj = merge_legacy(json.loads(legacy.read_text(encoding="utf-8")), obj)
        return load_message(obj)

    registry = []
    for api in APIS:
        req, resp = load(f"{api}Request"), load(f"{api}Response")
        if req.api_key is None or req.api_key != resp.api_key:
            raise SystemExit(f"{api}: api keys differ")
        if req.valid != resp.valid or req.flexible != resp.flexible:
            raise SystemExit(f"{api}: request and response versions differ")
        gen = ModuleGen([req, resp])
        mod = module_name(api)
        files[MESSAGES_REL / f"{mod}.py"] = gen.module_source(
            MODULE_DOC.format(what=f"{api} (api key {req.api_key}) request and response")
        )
        registry.append((req.api_key, api, mod, req, resp))
    for name in DATA_FILES + RECORD_FILES + SHARE_RECORD_FILES:
        msg = load(name)
        gen = ModuleGen([msg])
        files[MESSAGES_REL / f"{module_name(name)}.py"] = gen.module_source(
            MODULE_DOC.format(what=f"{name} ({msg.type})")
        )
    files[MESSAGES_REL / "__init__.py"] = registry_source(sorted(registry, key=lambda r: r[0]))
    files[NATIVE_REL] = native_source([load(name) for name in NATIVE_FIELDS])
    errors = json.loads((schema_dir / "errors.json").read_text(encoding="utf-8"))["errors"]
    files[ERRORS_REL] = errors_source(errors)
    return files


def registry_source(registry: list) -> str:
    out = [
        HEADER,
        '''"""Generated message modules and the registry of the included APIs.

``ApiKey`` enumerates the included APIs; ``API_MESSAGES`` maps each to
``(request class, response class, (min, max) valid versions, first flexible
version or None, latest version unstable)``.  Import these through
``broker.protocol.api``, which adds the header-version rules.
"""''',
        "",
        "from enum import IntEnum",
        "",
    ]
    for _key, _api, mod, req, resp in registry:
        out.append(f"from .{mod} import {req.name}, {resp.name}")
    for name in DATA_FILES + RECORD_FILES + SHARE_RECORD_FILES:
        out.append(f"from .{module_name(name)} import {name}")
    out += [
        "",
        "",
        "class ApiKey(IntEnum):",
        '    """The api keys of the included APIs (Kafka\'s ApiKeys names)."""',
        "",
    ]
    for key, api, _mod, _req, _resp in registry:
        out.append(f"    {upper_snake(api)} = {key}")
    out += ["", "", "API_MESSAGES = {"]
    for _key, api, _mod, req, resp in registry:
        out.append(
            f"    ApiKey.{upper_snake(api)}: ({req.name}, {resp.name}, ({req.valid[0]}, {req.valid[1]}), "
            f"{req.first_flexible!r}, {req.latest_unstable!r}),"
        )
    out.append("}")
    out += ["", "#: The header and data classes (no api key).", f"OTHER_CLASSES = ({', '.join(DATA_FILES)},)"]
    out += [
        "",
        "#: The records of KIP-848's group coordinator in __consumer_offsets (key, value).",
        "COORDINATOR_RECORDS = (",
        *(f"    ({RECORD_FILES[i]}, {RECORD_FILES[i + 1]})," for i in range(0, len(RECORD_FILES), 2)),
        ")",
        "",
        "#: The records of KIP-932's share coordinator in __share_group_state (key, value).",
        "SHARE_COORDINATOR_RECORDS = (",
        *(f"    ({SHARE_RECORD_FILES[i]}, {SHARE_RECORD_FILES[i + 1]})," for i in range(0, len(SHARE_RECORD_FILES), 2)),
        ")",
    ]
    names = (
        ["ApiKey", "API_MESSAGES", "OTHER_CLASSES", "COORDINATOR_RECORDS", "SHARE_COORDINATOR_RECORDS"]
        + [n for r in registry for n in (r[3].name, r[4].name)]
        + list(DATA_FILES + RECORD_FILES + SHARE_RECORD_FILES)
    )
    out += ["", f"__all__ = {names!r}"]
    return "\n".join(out) + "\n"


def native_late_fields(sd: StructDef) -> list[FieldDef]:
    """The fields of a struct the native codec builds that start after the newest version it
    is written for (NATIVE_UP_TO)."""
    structs = NATIVE_FIELDS.get(sd.msg.name)
    if structs is None or sd.name not in structs:
        return []
    ceiling = NATIVE_UP_TO[sd.msg.name.removesuffix("Request").removesuffix("Response")]
    return [f for f in sd.fields if f.versions[0] > ceiling]


def native_source(messages: list[MessageDef]) -> str:
    """The C header of what the native codec needs of `messages` (NATIVE_FIELDS): per API
    its api key, its first flexible version and the versions the codec covers (those in
    which every field it always reads or writes exists, and no field it does not know);
    per field it tests, its first version."""
    out = [
        f"/* {HEADER[2:]} */",
        "/*",
        " * Kafka's message definitions as the hand-written native codec of Produce",
        " * (_native/produce.pyx) reads and writes them: tools/gen_protocol.py's NATIVE_FIELDS",
        " * names the fields it knows. */",
        "#ifndef KB_MESSAGES_H",
        "#define KB_MESSAGES_H",
    ]
    apis: dict[int, list[MessageDef]] = {}
    for msg in messages:
        apis.setdefault(msg.api_key, []).append(msg)
    for api_key, msgs in sorted(apis.items()):
        api = msgs[0].name.removesuffix("Request").removesuffix("Response")
        prefix = f"KB_{upper_snake(api)}"
        ceiling = NATIVE_UP_TO[api]
        covered = set(range(msgs[0].valid[0], min(msgs[0].valid[1], ceiling) + 1))
        tested = []
        for msg in msgs:
            if (msg.api_key, msg.valid, msg.flexible) != (api_key, msgs[0].valid, msgs[0].flexible):
                raise SystemExit(f"{msg.name}: versions differ from {msgs[0].name}'s")
            for struct, (always, by_version) in NATIVE_FIELDS[msg.name].items():
                sd = msg.top if struct == msg.name else msg.structs.get(struct)
                if sd is None:
                    raise SystemExit(f"{msg.name}: no struct {struct} (NATIVE_FIELDS)")
                fields = [f for f in sd.fields if f.versions[0] <= ceiling]
                names = [f.kafka_name for f in fields]
                if names != list(always + by_version):
                    raise SystemExit(
                        f"{msg.name}.{struct} has fields {names}; the native codec "
                        f"(_native/produce.pyx) knows {list(always + by_version)}: "
                        f"update it, then NATIVE_FIELDS"
                    )
                for f in fields:
                    if f.kafka_name in always:
                        covered &= {v for v in covered if inr(f.versions, v)}
                    else:
                        tested.append((msg, f))
        if not covered or sorted(covered) != list(range(min(covered), max(covered) + 1)):
            raise SystemExit(f"{api}: the native codec covers no run of versions ({fmt_set(covered)})")
        first_flexible = msgs[0].first_flexible
        out += [
            "",
            f"/* {api} (api key {api_key}): valid versions {fmt_range(msgs[0].valid)}, "
            f"flexible {fmt_range(msgs[0].flexible)} */",
            f"/* the native codec is written for versions up to {ceiling} (tools/gen_protocol.py's NATIVE_UP_TO) */",
            f"#define {prefix}_API_KEY {api_key}",
            f"#define {prefix}_FIRST_FLEXIBLE {first_flexible if first_flexible is not None else INF}",
            "/* the versions in which every field the native codec always reads or writes exists */",
            f"#define {prefix}_NATIVE_LOWEST {min(covered)}",
            f"#define {prefix}_NATIVE_HIGHEST {max(covered)}",
            "/* the first version of each field it reads or writes only from some version on */",
        ]
        for msg, f in tested:
            if f.versions[1] != INF:
                raise SystemExit(
                    f"{msg.name}.{f.kafka_name}: versions {fmt_range(f.versions)} end; "
                    "the native codec tests only where a field starts"
                )
            tag = f", tagged {fmt_range(f.tagged)}" if f.tagged is not None else ""
            out.append(
                f"#define KB_{upper_snake(msg.name)}_{upper_snake(f.kafka_name)} {f.versions[0]}"
                f"  /* {f.kafka_name}: {fmt_range(f.versions)}{tag} */"
            )
    out += ["", "#endif"]
    return "\n".join(out) + "\n"


def errors_source(errors: list) -> str:
    out = [
        HEADER,
        '''"""Kafka's error codes (``ErrorCode``) and an exception carrying one.

``ErrorCode`` has Kafka's names (``ErrorCode.OFFSET_OUT_OF_RANGE == 1``); the wire
carries the int16 value.  ``KafkaProtocolError(code, message=None)`` is raised by
broker code that wants to answer a request with an error code.
"""''',
        "",
        "from enum import IntEnum",
        "",
        "",
        "class ErrorCode(IntEnum):",
        '    """Kafka protocol error codes (Errors.java)."""',
        "",
    ]
    seen = set()
    for code, name in errors:
        if name in seen:
            raise SystemExit(f"duplicate error name {name}")
        seen.add(name)
        out.append(f"    {name} = {code}")
    out += [
        "",
        "",
        '''class KafkaProtocolError(Exception):
    """An error to be reported to the client as a Kafka error code."""

    def __init__(self, code: int, message: str | None = None) -> None:
        try:
            self.code: int = ErrorCode(code)
        except ValueError:
            self.code = int(code)
        self.message = message
        name = self.code.name if isinstance(self.code, ErrorCode) else f"error {self.code}"
        super().__init__(f"{name}: {message}" if message else name)

    @property
    def name(self) -> str | None:
        return self.code.name if isinstance(self.code, ErrorCode) else None
''',
        "",
        "__all__ = ['ErrorCode', 'KafkaProtocolError']",
    ]
    return "\n".join(out) + "\n"


def stage_code(root: Path) -> None:
    files = generate_code(root)
    for rel, text in files.items():
        write_if_changed(root / rel, text)
    # remove stale generated modules
    mdir = root / MESSAGES_REL
    for p in sorted(mdir.glob("*.py")):
        if p.relative_to(root) not in files and p.read_text(encoding="utf-8").startswith(HEADER.split(" from ")[0]):
            p.unlink()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "spec_dir",
        nargs="?",
        default=str(REPO_ROOT.parent / "shared" / "kafka-protocol"),
        help="directory of Kafka's JSON definitions (default: ../shared/kafka-protocol)",
    )
    ap.add_argument("--out", default=str(REPO_ROOT), help="root to write into (default: the repository)")
    ap.add_argument(
        "--records-dir",
        help="directory of Kafka's group-coordinator record definitions (the common/message/ resources "
        "of the kafka-group-coordinator jar); without it the checked-in ones are kept",
    )
    ap.add_argument(
        "--share-records-dir",
        help="directory of Kafka's share-coordinator record definitions (the common/message/ resources "
        "of the kafka-share-coordinator jar); without it the checked-in ones are kept",
    )
    ap.add_argument(
        "--from-schema",
        action="store_true",
        help="skip stage 1; generate code from the schema files already under --out",
    )
    args = ap.parse_args(argv)
    root = Path(args.out)
    if not args.from_schema:
        stage_schema(
            Path(args.spec_dir),
            root,
            Path(args.records_dir) if args.records_dir else None,
            Path(args.share_records_dir) if args.share_records_dir else None,
        )
    stage_code(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
