"""JSON Schema compatibility: Confluent's JSON SchemaDiff of an original and an updated
schema, strict policy (Confluent's default).

The documents are first read into the schema tree Confluent's checker walks (everit's):
a `type` gives an object, array, string, number (integer: a number that requires
integers), boolean or null schema; several types an anyOf of them; `enum` and `const`
schemas of their own; allOf/anyOf/oneOf combined schemas, `not`; keywords of one kind
without a `type` that kind; `true` or `{}` the empty schema, `false` the false schema;
several of these in one object an allOf of them; `$ref` is followed (the reference's
documents included, resolved by the `referencing` library).

Differences are then found (types, properties against open and closed content models,
required, additionalProperties, items, bounds, enums, combined schemas matched one to
one) and a change is compatible when every difference is in COMPATIBLE (Confluent's
COMPATIBLE_CHANGES_STRICT). So, BACKWARD: a property may be added to a closed content
model (additionalProperties false) but not to an open one, unless its schema is empty;
removed from an open one; a bound may be relaxed, never tightened; an enum extended,
never narrowed; integer widened to number, never the reverse.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

COMPATIBLE = frozenset(
    {
        "ID_CHANGED",
        "DESCRIPTION_CHANGED",
        "TITLE_CHANGED",
        "DEFAULT_CHANGED",
        "SCHEMA_REMOVED",
        "TYPE_EXTENDED",
        "MAX_LENGTH_INCREASED",
        "MAX_LENGTH_REMOVED",
        "MIN_LENGTH_DECREASED",
        "MIN_LENGTH_REMOVED",
        "PATTERN_REMOVED",
        "MAXIMUM_INCREASED",
        "MAXIMUM_REMOVED",
        "MINIMUM_DECREASED",
        "MINIMUM_REMOVED",
        "EXCLUSIVE_MAXIMUM_INCREASED",
        "EXCLUSIVE_MAXIMUM_REMOVED",
        "EXCLUSIVE_MINIMUM_DECREASED",
        "EXCLUSIVE_MINIMUM_REMOVED",
        "MULTIPLE_OF_REDUCED",
        "MULTIPLE_OF_REMOVED",
        "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED",
        "REQUIRED_ATTRIBUTE_REMOVED",
        "DEPENDENCY_ARRAY_NARROWED",
        "DEPENDENCY_ARRAY_REMOVED",
        "DEPENDENCY_SCHEMA_REMOVED",
        "MAX_PROPERTIES_INCREASED",
        "MAX_PROPERTIES_REMOVED",
        "MIN_PROPERTIES_DECREASED",
        "MIN_PROPERTIES_REMOVED",
        "ADDITIONAL_PROPERTIES_ADDED",
        "ADDITIONAL_PROPERTIES_EXTENDED",
        "UNEVALUATED_PROPERTIES_ADDED",
        "UNEVALUATED_PROPERTIES_EXTENDED",
        "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
        "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL",
        "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL",
        "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
        "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL",
        "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "MAX_ITEMS_INCREASED",
        "MAX_ITEMS_REMOVED",
        "MIN_ITEMS_DECREASED",
        "MIN_ITEMS_REMOVED",
        "MAX_CONTAINS_INCREASED",
        "MAX_CONTAINS_REMOVED",
        "MIN_CONTAINS_DECREASED",
        "MIN_CONTAINS_REMOVED",
        "UNIQUE_ITEMS_REMOVED",
        "ADDITIONAL_ITEMS_ADDED",
        "ADDITIONAL_ITEMS_EXTENDED",
        "UNEVALUATED_ITEMS_ADDED",
        "UNEVALUATED_ITEMS_EXTENDED",
        "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
        "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL",
        "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
        "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL",
        "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "ENUM_ARRAY_EXTENDED",
        "COMBINED_TYPE_EXTENDED",
        "PRODUCT_TYPE_NARROWED",
        "SUM_TYPE_EXTENDED",
        "NOT_TYPE_NARROWED",
    }
)

_OBJECT_KEYS = (
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "minProperties",
    "maxProperties",
    "unevaluatedProperties",
    "propertyNames",
)
_ARRAY_KEYS = (
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "contains",
    "unevaluatedItems",
    "minContains",
    "maxContains",
)
_STRING_KEYS = ("minLength", "maxLength", "pattern", "format")
_NUMBER_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


class S:
    """A node of the schema tree: `kind` (object, array, string, number, boolean, null,
    enum, const, combined, not, empty, false) and the keywords of its kind."""

    __slots__ = ("kind", "raw", "a", "title", "description", "default", "has_default", "id")

    def __init__(self, kind: str, raw: Any, **a: Any):
        self.kind = kind
        self.raw = raw
        self.a = a
        node = raw if isinstance(raw, dict) else {}
        self.title = node.get("title")
        self.description = node.get("description")
        self.has_default = "default" in node
        self.default = node.get("default")
        self.id = node.get("$id", node.get("id")) if isinstance(node.get("$id", node.get("id")), str) else None


class _Ref:
    """A $ref, read when first compared (recursive schemas)."""

    __slots__ = ("target", "_load")

    def __init__(self, load: Callable[[], S]):
        self.target: S | None = None
        self._load = load

    def get(self) -> S:
        if self.target is None:
            self.target = self._load()
        return self.target


class Loader:
    def __init__(self, schema: Any):
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT7

        root = schema.document
        self.root_uri = root.get("$id", "urn:kbroker:schema") if isinstance(root, dict) else "urn:kbroker:schema"
        spec = DRAFT7
        resources = [
            (name, Resource.from_contents(doc, default_specification=spec)) for name, doc in schema.documents.items()
        ]
        resources.append((self.root_uri, Resource.from_contents(root, default_specification=spec)))
        self.registry = Registry().with_resources(resources)
        self._cache: dict[int, Any] = {}
        self.root = self.load(root, self.registry.resolver(base_uri=self.root_uri))

    def load(self, node: Any, resolver: Any) -> Any:
        key = id(node)
        got = self._cache.get(key)
        if got is not None and got[0] is node:
            return got[1]
        out = self._load(node, resolver)
        self._cache[key] = (node, out)
        return out

    def _load(self, node: Any, resolver: Any) -> Any:
        if node is True or node == {}:
            return S("empty", node)
        if node is False:
            return S("false", node)
        if not isinstance(node, dict):
            return S("empty", node)
        if isinstance(node.get("$id"), str):
            resolver = resolver.in_subresource(_resource(node))
        if isinstance(node.get("$ref"), str):
            ref = node["$ref"]

            def follow(ref: str = ref, resolver: Any = resolver) -> S:
                try:
                    resolved = resolver.lookup(ref)
                except Exception as exc:
                    raise ValueError(f"Unresolved $ref '{ref}'") from exc
                target = self.load(resolved.contents, resolved.resolver)
                return target.get() if isinstance(target, _Ref) else target

            return _Ref(follow)
        parts: list[Any] = []
        types = node.get("type")
        if isinstance(types, list):
            typed = [self._typed(t, node, resolver) for t in types]
            if len(typed) == 1:
                parts.append(typed[0])
            elif typed:
                parts.append(S("combined", node, criterion="anyOf", subschemas=typed))
        elif isinstance(types, str):
            parts.append(self._typed(types, node, resolver))
        else:
            for kind, keys in (
                ("object", _OBJECT_KEYS),
                ("array", _ARRAY_KEYS),
                ("string", _STRING_KEYS),
                ("number", _NUMBER_KEYS),
            ):
                if any(k in node for k in keys):
                    parts.append(self._typed(kind, node, resolver, inferred=True))
        if "enum" in node and isinstance(node["enum"], list):
            parts.append(S("enum", node, values=node["enum"]))
        if "const" in node:
            parts.append(S("const", node, value=node["const"]))
        for criterion in ("allOf", "anyOf", "oneOf"):
            if isinstance(node.get(criterion), list):
                parts.append(
                    S(
                        "combined",
                        node,
                        criterion=criterion,
                        subschemas=[self.load(x, resolver) for x in node[criterion]],
                    )
                )
        if "not" in node:
            parts.append(S("not", node, schema=self.load(node["not"], resolver)))
        if not parts:
            return S("empty", node)
        if len(parts) == 1:
            return parts[0]
        return S("combined", node, criterion="allOf", subschemas=parts)

    def _typed(self, kind: str, node: dict[str, Any], resolver: Any, inferred: bool = False) -> S:
        load = self.load
        if kind in ("integer", "number"):
            excl_max, excl_min = node.get("exclusiveMaximum"), node.get("exclusiveMinimum")
            return S(
                "number",
                node,
                integer=kind == "integer",
                maximum=node.get("maximum") if excl_max is not True else None,
                minimum=node.get("minimum") if excl_min is not True else None,
                exclusiveMaximum=node.get("maximum")
                if excl_max is True
                else excl_max
                if not isinstance(excl_max, bool)
                else None,
                exclusiveMinimum=node.get("minimum")
                if excl_min is True
                else excl_min
                if not isinstance(excl_min, bool)
                else None,
                multipleOf=node.get("multipleOf"),
            )
        if kind == "string":
            return S(
                "string",
                node,
                minLength=node.get("minLength"),
                maxLength=node.get("maxLength"),
                pattern=node.get("pattern"),
            )
        if kind == "object":
            additional = node.get("additionalProperties", True)
            deps = {
                **(node.get("dependencies") or {}),
                **(node.get("dependentRequired") or {}),
                **(node.get("dependentSchemas") or {}),
            }
            uneval = node.get("unevaluatedProperties")
            return S(
                "object",
                node,
                properties={k: load(v, resolver) for k, v in (node.get("properties") or {}).items()},
                required=set(node.get("required") or ()),
                permits_additional=additional is not False,
                additional=load(additional, resolver) if isinstance(additional, dict) and additional else None,
                pattern_properties=[(p, load(v, resolver)) for p, v in (node.get("patternProperties") or {}).items()],
                property_deps={k: set(v) for k, v in deps.items() if isinstance(v, list)},
                schema_deps={k: load(v, resolver) for k, v in deps.items() if not isinstance(v, list)},
                minProperties=node.get("minProperties"),
                maxProperties=node.get("maxProperties"),
                unevaluated=None if uneval is None else load(uneval, resolver),
            )
        if kind == "array":
            items, prefix = node.get("items"), node.get("prefixItems")
            tuple_items = prefix if isinstance(prefix, list) else items if isinstance(items, list) else None
            additional = items if isinstance(prefix, list) and "items" in node else node.get("additionalItems", True)
            uneval = node.get("unevaluatedItems")
            return S(
                "array",
                node,
                all_items=load(items, resolver) if isinstance(items, (dict, bool)) and tuple_items is None else None,
                item_schemas=None if tuple_items is None else [load(x, resolver) for x in tuple_items],
                permits_additional=additional is not False,
                additional=load(additional, resolver) if isinstance(additional, dict) and additional else None,
                minItems=node.get("minItems"),
                maxItems=node.get("maxItems"),
                unique=bool(node.get("uniqueItems")),
                minContains=node.get("minContains"),
                maxContains=node.get("maxContains"),
                unevaluated=None if uneval is None else load(uneval, resolver),
            )
        if kind in ("boolean", "null"):
            return S(kind, node)
        return S("empty", node)


def _resource(node: dict[str, Any]) -> Any:
    from referencing import Resource
    from referencing.jsonschema import DRAFT7

    return Resource.from_contents(node, default_specification=DRAFT7)


def check_refs(schema: Any) -> None:
    """Every $ref of the schema resolves (ValueError naming the first that does not)."""
    loader = Loader(schema)
    seen: set[int] = set()

    def walk(s: Any) -> None:
        if isinstance(s, _Ref):
            s = s.get()
        if id(s) in seen or not isinstance(s, S):
            return
        seen.add(id(s))
        for v in s.a.values():
            for x in v if isinstance(v, list) else v.values() if isinstance(v, dict) else [v]:
                if isinstance(x, tuple):
                    x = x[1]
                if isinstance(x, (S, _Ref)):
                    walk(x)

    walk(loader.root)


def compare(original: Any, update: Any, roles: tuple[str, str] = ("new", "old")) -> list[str]:
    """The refused differences of `update` against `original`, as Confluent's messages."""
    try:
        o, u = Loader(original).root, Loader(update).root
        ctx = _Context()
        ctx.compare(o, u)
    except ValueError as exc:
        return [str(exc)]
    new, old = roles
    return [
        f'{{errorType:"{kind}", description:"The {new} schema differs from the {old} schema at path '
        f"'{path}': {kind.lower().replace('_', ' ')}\"}}"
        for kind, path in ctx.differences
        if kind not in COMPATIBLE
    ]


class _Context:
    def __init__(self, path: tuple[str, ...] = (), in_progress: set[tuple[int, int]] | None = None):
        self.path = path
        self.differences: list[tuple[str, str]] = []
        self.in_progress = set() if in_progress is None else in_progress

    def sub(self, *extra: str) -> _Context:
        return _Context(self.path + extra, self.in_progress)

    @property
    def compatible(self) -> bool:
        return all(kind in COMPATIBLE for kind, _ in self.differences)

    def add(self, kind: str, *extra: str) -> None:
        self.differences.append((kind, "#/" + "/".join(self.path + extra)))

    def extend(self, other: _Context) -> None:
        self.differences.extend(other.differences)

    def at(self, *extra: str) -> _Context:
        c = self.sub(*extra)
        c.differences = self.differences
        return c

    def compare(self, o: Any, u: Any) -> None:
        if o is None and u is None:
            return
        if o is None:
            self.add("SCHEMA_ADDED")
            return
        if u is None:
            self.add("SCHEMA_REMOVED")
            return
        if isinstance(o, _Ref):
            o = o.get()
        if isinstance(u, _Ref):
            u = u.get()
        key = (id(o), id(u))
        if key in self.in_progress:  # a recursive pair: assumed compatible while it is compared
            return
        self.in_progress.add(key)
        try:
            self._types(o, u)
        finally:
            self.in_progress.discard(key)

    def _types(self, o: S, u: S) -> None:
        if o.kind != "combined" and u.kind == "combined":
            subs = u.a["subschemas"]
            if len(subs) == 1:
                c = self.sub()
                c.compare(o, subs[0])
                if c.compatible:
                    self.extend(c)
                    return
            elif u.a["criterion"] in ("anyOf", "oneOf"):
                for s in subs:
                    c = self.sub()
                    c.compare(o, s)
                    if c.compatible:
                        self.extend(c)
                        self.add("SUM_TYPE_EXTENDED")
                        return
        elif o.kind == "combined" and u.kind != "combined":
            subs = o.a["subschemas"]
            if len(subs) == 1:
                c = self.sub()
                c.compare(subs[0], u)
                if c.compatible:
                    self.extend(c)
                    return
            elif o.a["criterion"] == "allOf":
                for s in subs:
                    c = self.sub()
                    c.compare(s, u)
                    if c.compatible:
                        self.extend(c)
                        self.add("PRODUCT_TYPE_NARROWED")
                        return
        if o.kind != u.kind:
            if o.kind == "false" or u.kind == "empty":
                return
            self.add("TYPE_CHANGED")
            return
        if o.id != u.id:
            self.add("ID_CHANGED")
        if o.title != u.title:
            self.add("TITLE_CHANGED")
        if o.description != u.description:
            self.add("DESCRIPTION_CHANGED")
        if o.default != u.default:
            self.add("DEFAULT_CHANGED")
        getattr(self, "_" + o.kind, _nothing)(o.a, u.a)

    # ---------------------------------------------------------------- kinds

    def _bound(self, name: str, o: Any, u: Any, up: str, down: str) -> None:
        """A bound's change: added, removed, or moved up or down (NAME_ADDED ...)."""
        if o == u:
            return
        if o is None:
            self.add(f"{name}_ADDED", _camel(name))
        elif u is None:
            self.add(f"{name}_REMOVED", _camel(name))
        elif u > o:
            self.add(f"{name}_{up}", _camel(name))
        elif u < o:
            self.add(f"{name}_{down}", _camel(name))

    def _string(self, o: dict[str, Any], u: dict[str, Any]) -> None:
        self._bound("MAX_LENGTH", o["maxLength"], u["maxLength"], "INCREASED", "DECREASED")
        self._bound("MIN_LENGTH", o["minLength"], u["minLength"], "INCREASED", "DECREASED")
        if o["pattern"] is None and u["pattern"] is not None:
            self.add("PATTERN_ADDED", "pattern")
        elif o["pattern"] is not None and u["pattern"] is None:
            self.add("PATTERN_REMOVED", "pattern")
        elif o["pattern"] != u["pattern"]:
            self.add("PATTERN_CHANGED", "pattern")

    def _number(self, o: dict[str, Any], u: dict[str, Any]) -> None:
        self._bound("MAXIMUM", o["maximum"], u["maximum"], "INCREASED", "DECREASED")
        self._bound("MINIMUM", o["minimum"], u["minimum"], "INCREASED", "DECREASED")
        self._bound("EXCLUSIVE_MAXIMUM", o["exclusiveMaximum"], u["exclusiveMaximum"], "INCREASED", "DECREASED")
        self._bound("EXCLUSIVE_MINIMUM", o["exclusiveMinimum"], u["exclusiveMinimum"], "INCREASED", "DECREASED")
        om, um = o["multipleOf"], u["multipleOf"]
        if om != um:
            if om is None:
                self.add("MULTIPLE_OF_ADDED", "multipleOf")
            elif um is None:
                self.add("MULTIPLE_OF_REMOVED", "multipleOf")
            elif om and _multiple(um, om):
                self.add("MULTIPLE_OF_EXPANDED", "multipleOf")
            elif um and _multiple(om, um):
                self.add("MULTIPLE_OF_REDUCED", "multipleOf")
            else:
                self.add("MULTIPLE_OF_CHANGED", "multipleOf")
        if o["integer"] != u["integer"]:
            self.add("TYPE_EXTENDED" if o["integer"] else "TYPE_NARROWED")

    def _enum(self, o: dict[str, Any], u: dict[str, Any]) -> None:
        ov, uv = _keys(o["values"]), _keys(u["values"])
        if ov != uv:
            self.add(
                "ENUM_ARRAY_EXTENDED" if uv >= ov else "ENUM_ARRAY_NARROWED" if ov >= uv else "ENUM_ARRAY_CHANGED",
                "enum",
            )

    def _const(self, o: dict[str, Any], u: dict[str, Any]) -> None:
        if _key(o["value"]) != _key(u["value"]):
            self.add("ENUM_ARRAY_CHANGED", "const")

    def _not(self, o: dict[str, Any], u: dict[str, Any]) -> None:
        c = self.sub("not")
        c.compare(u["schema"], o["schema"])
        self.at("not").add("NOT_TYPE_NARROWED" if c.compatible else "NOT_TYPE_EXTENDED")

    def _combined(self, o: dict[str, Any], u: dict[str, Any]) -> None:
        oc, uc = o["criterion"], u["criterion"]
        o_subs, u_subs = _dedupe(o["subschemas"]), _dedupe(u["subschemas"])
        if oc != uc:
            if (
                uc == "anyOf"
                or (len(o_subs) == 1 and len(u_subs) == 1)
                or (len(o_subs) == 1 and uc == "oneOf")
                or (len(u_subs) == 1 and oc == "allOf")
            ):
                self.add("COMBINED_TYPE_EXTENDED")
            else:
                self.add("COMBINED_TYPE_CHANGED")
                return
        if len(o_subs) < len(u_subs):
            self.add("PRODUCT_TYPE_EXTENDED" if uc == "allOf" else "SUM_TYPE_EXTENDED")
        elif len(o_subs) > len(u_subs):
            self.add("SUM_TYPE_NARROWED" if oc in ("anyOf", "oneOf") else "PRODUCT_TYPE_NARROWED")
        edges: dict[int, dict[int, _Context]] = {}
        for i, os_ in enumerate(o_subs):
            for j, us in enumerate(u_subs):
                c = self.sub(f"{oc}/{i}")
                c.compare(os_, us)
                if c.compatible:
                    edges.setdefault(i, {})[j] = c
        matching = _max_matching(edges, len(u_subs))
        for i, j in matching.items():
            self.extend(edges[i][j])
        if len(matching) < min(len(o_subs), len(u_subs)):
            self.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")

    def _object(self, o: dict[str, Any], u: dict[str, Any]) -> None:
        for name in o["properties"]:
            if name in u["properties"]:
                was, now = name in o["required"], name in u["required"]
                if was and not now:
                    self.add("REQUIRED_ATTRIBUTE_REMOVED", "required", name)
                elif now and not was:
                    self.add(
                        "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED"
                        if _has_default(u["properties"][name])
                        else "REQUIRED_ATTRIBUTE_ADDED",
                        "required",
                        name,
                    )
        for name in sorted(set(o["properties"]) | set(u["properties"])):
            here = self.at("properties", name)
            os_, us = o["properties"].get(name), u["properties"].get(name)
            if us is None:
                if _open(u):
                    here.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
                else:
                    partial = _partial(u, name)
                    if partial is not None:
                        c = self.sub("properties", name)
                        c.compare(os_, partial)
                        self.extend(c)
                        here.add(
                            "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                            if c.compatible
                            else "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                        )
                    else:
                        here.add(
                            "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL"
                            if _kind(os_) == "false"
                            else "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"
                        )
            elif os_ is None:
                required = name in u["required"]
                if _open(o):
                    if _kind(us) == "empty":
                        here.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
                    elif required:
                        here.add(
                            "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL"
                            if _has_default(us)
                            else "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"
                        )
                    else:
                        here.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
                else:
                    partial = _partial(o, name)
                    if partial is not None:
                        c = self.sub("properties", name)
                        c.compare(partial, us)
                        self.extend(c)
                        here.add(
                            "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                            if c.compatible
                            else "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                        )
                    if required:
                        here.add(
                            "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL"
                            if _has_default(us)
                            else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"
                        )
                    else:
                        here.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
            else:
                here.compare(os_, us)
        deps = self.at("dependencies")
        for name in sorted(set(o["property_deps"]) | set(u["property_deps"])):
            od, ud = o["property_deps"].get(name), u["property_deps"].get(name)
            if ud is None:
                deps.add("DEPENDENCY_ARRAY_REMOVED", name)
            elif od is None:
                deps.add("DEPENDENCY_ARRAY_ADDED", name)
            elif od != ud:
                deps.add(
                    "DEPENDENCY_ARRAY_EXTENDED"
                    if ud >= od
                    else "DEPENDENCY_ARRAY_NARROWED"
                    if od >= ud
                    else "DEPENDENCY_ARRAY_CHANGED",
                    name,
                )
        for name in sorted(set(o["schema_deps"]) | set(u["schema_deps"])):
            od, ud = o["schema_deps"].get(name), u["schema_deps"].get(name)
            if ud is None:
                deps.add("DEPENDENCY_SCHEMA_REMOVED", name)
            elif od is None:
                deps.add("DEPENDENCY_SCHEMA_ADDED", name)
            else:
                deps.at(name).compare(od, ud)
        self._additional("PROPERTIES", o, u, "additionalProperties")
        self._unevaluated("PROPERTIES", o["unevaluated"], u["unevaluated"], "unevaluatedProperties")
        self._bound("MAX_PROPERTIES", o["maxProperties"], u["maxProperties"], "INCREASED", "DECREASED")
        self._bound("MIN_PROPERTIES", o["minProperties"], u["minProperties"], "INCREASED", "DECREASED")

    def _additional(self, what: str, o: Any, u: Any, path: str) -> None:
        """additionalProperties / additionalItems: allowed or not, and the schema they follow."""
        add = self.at(path)
        if o["permits_additional"] != u["permits_additional"]:
            add.add(f"ADDITIONAL_{what}_ADDED" if u["permits_additional"] else f"ADDITIONAL_{what}_REMOVED")
        elif o["additional"] is None and u["additional"] is not None:
            add.add(f"ADDITIONAL_{what}_NARROWED")
        elif u["additional"] is None and o["additional"] is not None:
            add.add(f"ADDITIONAL_{what}_EXTENDED")
        else:
            add.compare(o["additional"], u["additional"])

    def _unevaluated(self, what: str, o: Any, u: Any, path: str) -> None:
        if o is None and u is None:
            return
        here = self.at(path)
        ok, uk = _kind(o), _kind(u)
        if o is None:
            here.add(f"UNEVALUATED_{what}_REMOVED" if uk == "false" else f"UNEVALUATED_{what}_NARROWED")
        elif u is None:
            here.add(f"UNEVALUATED_{what}_ADDED" if ok == "false" else f"UNEVALUATED_{what}_EXTENDED")
        elif ok == "false" and uk != "false":
            here.add(f"UNEVALUATED_{what}_ADDED")
        elif ok != "false" and uk == "false":
            here.add(f"UNEVALUATED_{what}_REMOVED")
        elif ok == "empty" and uk != "empty":
            here.add(f"UNEVALUATED_{what}_NARROWED")
        elif ok != "empty" and uk == "empty":
            here.add(f"UNEVALUATED_{what}_EXTENDED")
        else:
            here.compare(o, u)

    def _array(self, o: dict[str, Any], u: dict[str, Any]) -> None:
        self.at("items").compare(o["all_items"], u["all_items"])
        o_items, u_items = o["item_schemas"] or [], u["item_schemas"] or []
        for i in range(max(len(o_items), len(u_items))):
            here = self.at(f"items/{i}")
            if i < len(o_items) and i < len(u_items):
                here.compare(o_items[i], u_items[i])
            elif i < len(o_items):
                if _open_items(u):
                    here.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
                elif u["additional"] is not None:
                    c = self.sub(f"items/{i}")
                    c.compare(o_items[i], u["additional"])
                    self.extend(c)
                    here.add(
                        "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                        if c.compatible
                        else "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                    )
                else:
                    here.add(
                        "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL"
                        if _kind(o_items[i]) == "false"
                        else "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"
                    )
            else:
                if _open_items(o):
                    here.add(
                        "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL"
                        if _kind(u_items[i]) == "empty"
                        else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL"
                    )
                elif o["additional"] is not None:
                    c = self.sub(f"items/{i}")
                    c.compare(o["additional"], u_items[i])
                    self.extend(c)
                    here.add(
                        "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                        if c.compatible
                        else "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                    )
                else:
                    here.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")
        self._additional("ITEMS", o, u, "additionalItems")
        self._unevaluated("ITEMS", o["unevaluated"], u["unevaluated"], "unevaluatedItems")
        self._bound("MAX_ITEMS", o["maxItems"], u["maxItems"], "INCREASED", "DECREASED")
        self._bound("MIN_ITEMS", o["minItems"], u["minItems"], "INCREASED", "DECREASED")
        if o["unique"] != u["unique"]:
            self.add("UNIQUE_ITEMS_REMOVED" if o["unique"] else "UNIQUE_ITEMS_ADDED", "uniqueItems")
        self._bound("MAX_CONTAINS", o["maxContains"], u["maxContains"], "INCREASED", "DECREASED")
        self._bound("MIN_CONTAINS", o["minContains"], u["minContains"], "INCREASED", "DECREASED")


def _nothing(o: dict[str, Any], u: dict[str, Any]) -> None:
    return None


def _kind(s: Any) -> str | None:
    if isinstance(s, _Ref):
        s = s.get()
    return s.kind if isinstance(s, S) else None


def _has_default(s: Any) -> bool:
    if isinstance(s, _Ref):
        s = s.get()
    return isinstance(s, S) and s.has_default


def _open(a: dict[str, Any]) -> bool:
    """An open content model: any other property allowed, with any value."""
    if not a["permits_additional"] or a["additional"] is not None or a["pattern_properties"]:
        return False
    return a["unevaluated"] is None or _kind(a["unevaluated"]) == "empty"


def _partial(a: dict[str, Any], name: str) -> Any:
    """The schema a property outside `properties` gets from patternProperties,
    additionalProperties or unevaluatedProperties (None: none)."""
    for pattern, schema in a["pattern_properties"]:
        try:
            if re.search(pattern, name):
                return schema
        except re.error:
            continue
    if a["additional"] is not None:
        return a["additional"]
    if a["permits_additional"] and a["unevaluated"] is not None and _kind(a["unevaluated"]) not in ("false", "empty"):
        return a["unevaluated"]
    return None


def _open_items(a: dict[str, Any]) -> bool:
    if not a["permits_additional"] or a["additional"] is not None:
        return False
    return a["unevaluated"] is None or _kind(a["unevaluated"]) == "empty"


def _multiple(a: Any, b: Any) -> bool:
    from decimal import Decimal, InvalidOperation

    try:
        return Decimal(str(a)) % Decimal(str(b)) == 0
    except (InvalidOperation, ZeroDivisionError):
        return False


def _camel(name: str) -> str:
    first, *rest = name.lower().split("_")
    return first + "".join(p.capitalize() for p in rest)


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _keys(values: list[Any]) -> set[str]:
    return {_key(v) for v in values}


def _dedupe(subs: list[Any]) -> list[Any]:
    out, seen = [], set()
    for s in subs:
        raw = s.get().raw if isinstance(s, _Ref) else s.raw
        k = _key(raw)
        if k not in seen:
            seen.add(k)
            out.append(s)
    return out


def _max_matching(edges: dict[int, dict[int, Any]], n_right: int) -> dict[int, int]:
    """A maximum one-to-one matching of left to right (augmenting paths)."""
    right_of: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges.get(i, {}):
            if j in seen:
                continue
            seen.add(j)
            if j not in right_of or augment(right_of[j], seen):
                right_of[j] = i
                return True
        return False

    for i in edges:
        augment(i, set())
    return {i: j for j, i in right_of.items()}
