"""Avro compatibility: can a reader schema read what a writer schema wrote? Avro's schema
resolution (the specification's "Schema Resolution"), as Avro's Java
SchemaCompatibility.checkReaderWriterCompatibility applies it — which is what
Confluent's registry runs:

- same primitive type, or a promotion: int -> long, float, double; long -> float,
  double; float -> double; string <-> bytes;
- records, enums, fixed: the reader's unqualified name equals the writer's, or one of the
  reader's aliases is the writer's full name (NAME_MISMATCH);
- a reader record's field is found in the writer by name or by one of the field's
  aliases and must resolve; a field the writer lacks must have a default
  (READER_FIELD_MISSING_DEFAULT_VALUE); a writer's field the reader lacks is skipped;
- an enum reader must have every writer symbol, unless it has a default symbol
  (MISSING_ENUM_SYMBOLS); fixed sizes must be equal (FIXED_SIZE_MISMATCH);
- arrays by their items, maps by their values;
- a writer union: each of its branches must resolve against the reader; a reader union:
  some branch must resolve against the writer (MISSING_UNION_BRANCH);
- anything else: TYPE_MISMATCH. Logical types are not compared (as Avro).

Messages are Confluent's: {errorType:'...', description:'...', additionalInfo:'...'}.
"""

from __future__ import annotations

from typing import Any

_PROMOTIONS = {
    "long": ("int",),
    "float": ("int", "long"),
    "double": ("int", "long", "float"),
    "string": ("bytes",),
    "bytes": ("string",),
}
_NAMED = ("record", "error", "enum", "fixed")


def reader_writer(reader: Any, writer: Any, roles: tuple[str, str] = ("new", "old")) -> list[str]:
    checker = _Checker(reader.named, writer.named, roles)
    checker.check(reader.parsed, writer.parsed, "")
    return checker.problems


class _Checker:
    def __init__(self, reader_names: dict[str, Any], writer_names: dict[str, Any], roles: tuple[str, str]):
        self.rn = reader_names
        self.wn = writer_names
        self.roles = roles
        self.problems: list[str] = []
        self._seen: set[tuple[str, str]] = set()

    def check(self, r: Any, w: Any, path: str) -> None:
        r, w = _resolve(r, self.rn), _resolve(w, self.wn)
        rt, wt = _kind(r), _kind(w)
        if rt in _NAMED and wt == rt:
            pair = (r["name"], w["name"])
            if pair in self._seen:  # a recursive type: its pair is being checked already
                return
            self._seen.add(pair)
        if wt == "union":
            if rt == "union":
                for i, branch in enumerate(w):
                    self._union_branch(r, branch, f"{path}/{i}")
                return
            for i, branch in enumerate(w):
                self.check(r, branch, f"{path}/{i}")
            return
        if rt == "union":
            self._union_branch(r, w, path)
            return
        if rt != wt:
            if wt in _PROMOTIONS.get(rt, ()):
                return
            self._add("TYPE_MISMATCH", path, f"reader type: {rt.upper()} not compatible with writer type: {wt.upper()}")
            return
        if rt in _NAMED and not _names_match(r, w):
            self._add("NAME_MISMATCH", f"{path}/name", f"expected: {w['name']}")
            return
        if rt in ("record", "error"):
            self._record(r, w, path)
        elif rt == "enum":
            missing = [s for s in w.get("symbols", []) if s not in set(r.get("symbols", []))]
            if missing and r.get("default") is None:
                self._add("MISSING_ENUM_SYMBOLS", f"{path}/symbols", "[" + ", ".join(missing) + "]")
        elif rt == "fixed":
            if r.get("size") != w.get("size"):
                self._add("FIXED_SIZE_MISMATCH", f"{path}/size", f"expected: {w.get('size')}, found: {r.get('size')}")
        elif rt == "array":
            self.check(r["items"], w["items"], f"{path}/items")
        elif rt == "map":
            self.check(r["values"], w["values"], f"{path}/values")

    def _union_branch(self, reader_union: list[Any], w: Any, path: str) -> None:
        for branch in reader_union:
            probe = _Checker(self.rn, self.wn, self.roles)
            probe._seen = set(self._seen)
            probe.check(branch, w, path)
            if not probe.problems:
                return
        self._add(
            "MISSING_UNION_BRANCH", path, f"reader union lacking writer type: {_kind(_resolve(w, self.wn)).upper()}"
        )

    def _record(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        writer_fields = {f["name"]: f for f in w.get("fields", [])}
        for i, f in enumerate(r.get("fields", [])):
            wf = writer_fields.get(f["name"])
            if wf is None:
                wf = next((writer_fields[a] for a in f.get("aliases", []) if a in writer_fields), None)
            if wf is None:
                if "default" not in f:
                    self._add("READER_FIELD_MISSING_DEFAULT_VALUE", f"{path}/fields/{i}", f["name"])
                continue
            self.check(f["type"], wf["type"], f"{path}/fields/{i}/type")

    def _add(self, kind: str, path: str, info: str) -> None:
        path = path or "/"
        new, old = self.roles
        descriptions = {
            "FIXED_SIZE_MISMATCH": f"The size of FIXED type field at path '{path}' in the {new} schema does not "
            f"match with the {old} schema",
            "TYPE_MISMATCH": f"The type (path '{path}') of a field in the {new} schema does not match with the "
            f"{old} schema",
            "NAME_MISMATCH": f"The name of the schema has changed (path '{path}')",
            "MISSING_ENUM_SYMBOLS": f"The {new} schema is missing enum symbols '{info}' at path '{path}' in the "
            f"{old} schema",
            "MISSING_UNION_BRANCH": f"The {new} schema is missing a type inside a union field at path '{path}' in "
            f"the {old} schema",
            "READER_FIELD_MISSING_DEFAULT_VALUE": f"The field '{info}' at path '{path}' in the {new} schema has no "
            f"default value and is missing in the {old} schema",
        }
        self.problems.append(f"{{errorType:'{kind}', description:'{descriptions[kind]}', additionalInfo:'{info}'}}")


def _resolve(s: Any, names: dict[str, Any]) -> Any:
    while isinstance(s, str) and s in names:
        s = names[s]
    if isinstance(s, dict) and s.get("type") not in _NAMED + ("array", "map") and "type" in s:
        return _resolve(s["type"], names)  # a primitive with properties (logical types)
    return s


def _kind(s: Any) -> str:
    if isinstance(s, list):
        return "union"
    if isinstance(s, dict):
        return str(s.get("type"))
    return str(s)


def _names_match(r: dict[str, Any], w: dict[str, Any]) -> bool:
    if r["name"].rsplit(".", 1)[-1] == w["name"].rsplit(".", 1)[-1]:
        return True
    namespace = r["name"].rsplit(".", 1)[0] if "." in r["name"] else ""
    aliases = {a if "." in a or not namespace else f"{namespace}.{a}" for a in r.get("aliases", [])}
    return w["name"] in aliases
