"""README's "What is implemented" table names the API versions the broker serves: every
API of the handler registry, each with the range ApiVersions advertises (a version below
an API's range may be named only as one answered UNSUPPORTED_VERSION)."""

from __future__ import annotations

import re
from pathlib import Path

from broker.protocol.api import ApiKey
from broker.server.handlers import supported_versions

README = Path(__file__).resolve().parents[2] / "README.md"
MENTION = re.compile(r"\b([A-Z][a-z]+(?:[A-Z][a-z]*)+|Produce|Fetch|Metadata|Heartbeat) (\d+)(?:–(\d+))?\b")


def _table() -> str:
    text = README.read_text()
    start = text.index("## What is implemented")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _api(name: str) -> ApiKey | None:
    try:
        return ApiKey[re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()]
    except KeyError:
        return None


def test_readme_names_every_api_with_the_versions_it_serves():
    mentions: dict[ApiKey, set[tuple[int, int]]] = {}
    for name, lo, hi in MENTION.findall(_table()):
        key = _api(name)
        if key is not None:
            mentions.setdefault(key, set()).add((int(lo), int(hi or lo)))
    served = {ApiKey(k): (lo, hi) for k, lo, hi in supported_versions()}
    missing = sorted(k.name for k in served if k not in mentions)
    assert not missing, f"README does not name {missing}"
    for key, ranges in mentions.items():
        assert key in served, f"README names {key.name}, which no handler serves"
        lo, hi = served[key]
        assert (lo, hi) in ranges, f"README: {key.name} {sorted(ranges)}, the broker serves {lo}–{hi}"
        stray = [r for r in ranges if r != (lo, hi) and r[1] >= lo]
        assert not stray, f"README: {key.name} {stray} besides the {lo}–{hi} served"
