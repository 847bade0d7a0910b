"""Hypothesis strategies for the generated protocol classes, driven by their ``_FIELDS``.

Only fields that exist in the requested version are drawn; the others keep their
defaults (the encoder does not write them and the decoder restores the defaults).
"""

from __future__ import annotations

import functools
import uuid

from hypothesis import strategies as st

from broker.protocol.messages import API_MESSAGES, COORDINATOR_RECORDS, OTHER_CLASSES, SHARE_COORDINATOR_RECORDS

INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}


def in_range(rng, v: int) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


def all_message_versions():
    """(class, version) for every request, response, header, data class and coordinator record."""
    out = []
    for _key, (req, resp, (lo, hi), _flex, _unstable) in sorted(API_MESSAGES.items()):
        for cls in (req, resp):
            for v in range(lo, hi + 1):
                out.append((cls, v))
    records = COORDINATOR_RECORDS + SHARE_COORDINATOR_RECORDS
    for cls in OTHER_CLASSES + tuple(c for pair in records for c in pair):
        for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
            out.append((cls, v))
    return out


text = st.text(alphabet=st.sampled_from("ab-_.Z09\u00e9\u4e2d\U0001f600\x00"), max_size=12)
uuids = st.one_of(st.just(uuid.UUID(int=0)), st.builds(uuid.UUID, int=st.integers(0, (1 << 128) - 1)))


def scalar(t: str):
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]))
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "bool":
        return st.booleans()
    if t == "string":
        return text
    if t == "bytes":
        return st.binary(max_size=16)
    if t == "records":
        return st.binary(max_size=40)
    if t == "uuid":
        return uuids
    raise AssertionError(t)


def field_strategy(f, version: int, flexible_version, unknown_tags: bool, depth: int):
    nullable = in_range(f.nullable, version)
    if f.type.startswith("[]"):
        if f.struct is not None:
            elem = struct_strategy(f.struct, version, flexible_version, unknown_tags, depth + 1)
        else:
            elem = scalar(f.type[2:])
        base = st.lists(elem, max_size=(3, 2, 2, 1)[min(depth, 3)])
    elif f.struct is not None:
        base = struct_strategy(f.struct, version, flexible_version, unknown_tags, depth + 1)
    else:
        base = scalar(f.type)
    if nullable:
        return st.one_of(st.none(), base)
    return base


def unknown_tags_strategy(known: set):
    tags = st.lists(st.integers(0, 300).filter(lambda t: t not in known), unique=True, max_size=2)
    return tags.flatmap(
        lambda ts: st.tuples(*[st.tuples(st.just(t), st.binary(max_size=6)) for t in sorted(ts)]).map(list)
    )


@functools.cache
def struct_strategy(cls, version: int, flexible_version, unknown_tags: bool = True, depth: int = 0):
    kwargs = {}
    for f in cls._FIELDS:
        if in_range(f.versions, version):
            kwargs[f.name] = field_strategy(f, version, flexible_version, unknown_tags, depth)
    flexible = flexible_version is not None and version >= flexible_version
    if flexible and unknown_tags:
        known = {f.tag for f in cls._FIELDS if in_range(f.tagged, version)}
        kwargs["unknown_tagged_fields"] = unknown_tags_strategy(known)
    return st.builds(cls, **kwargs)


@functools.cache
def message_strategy(cls, version: int, unknown_tags: bool = True):
    return struct_strategy(cls, version, cls.FLEXIBLE_VERSION, unknown_tags)


# ---------------------------------------------------------------- fast non-hypothesis builder


def random_instance(cls, version: int, rng, flexible_version=None, depth: int = 0):
    """A random instance (plain ``random.Random``; for fuzzing loops that need speed)."""
    if flexible_version is None and hasattr(cls, "FLEXIBLE_VERSION"):
        flexible_version = cls.FLEXIBLE_VERSION
    kwargs = {}
    for f in cls._FIELDS:
        if not in_range(f.versions, version):
            continue
        if in_range(f.nullable, version) and rng.random() < 0.2:
            kwargs[f.name] = None
            continue
        if f.type.startswith("[]"):
            n = rng.randint(0, 3 if depth < 2 else 1)
            if f.struct is not None:
                kwargs[f.name] = [
                    random_instance(f.struct, version, rng, flexible_version, depth + 1) for _ in range(n)
                ]
            else:
                kwargs[f.name] = [_random_scalar(f.type[2:], rng) for _ in range(n)]
        elif f.struct is not None:
            kwargs[f.name] = random_instance(f.struct, version, rng, flexible_version, depth + 1)
        else:
            kwargs[f.name] = _random_scalar(f.type, rng)
    if flexible_version is not None and version >= flexible_version and rng.random() < 0.3:
        known = {f.tag for f in cls._FIELDS if in_range(f.tagged, version)}
        tag = rng.choice([t for t in range(20, 40) if t not in known])
        kwargs["unknown_tagged_fields"] = [(tag, rng.randbytes(rng.randint(0, 4)))]
    return cls(**kwargs)


def _random_scalar(t: str, rng):
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return rng.choice([lo, hi, 0, 1, rng.randint(lo, hi)])
    if t == "float64":
        return rng.uniform(-1e9, 1e9)
    if t == "bool":
        return rng.random() < 0.5
    if t == "string":
        return rng.choice(["", "a", "topic-1", "\u00e9\u4e2d", "x" * rng.randint(0, 200)])
    if t in ("bytes", "records"):
        return rng.randbytes(rng.choice([0, 1, 5, 130]))
    if t == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    raise AssertionError(t)
