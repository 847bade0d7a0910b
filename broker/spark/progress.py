"""How far a streaming query is behind its topics, from its progress.

Spark's Kafka source reports, in each source's `metrics` of a query's progress,
`minOffsetsBehindLatest`, `maxOffsetsBehindLatest` and `avgOffsetsBehindLatest`: per
partition, the latest offset it found minus the offset the batch read up to. PySpark's
Python Data Source API gives a source no way to report metrics (Spark's Python stream
wraps a source without ReportsSourceMetrics: `metrics` stays `{}`); what it does report
is each source's `startOffset`, `endOffset` and `latestOffset` (reportLatestOffset), and
the metrics follow from those:

    from broker.spark.progress import lag, with_lag_metrics
    lag(query.lastProgress["sources"][0])  # {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "12",
                                           #  "avgOffsetsBehindLatest": "2.0"}
    p = with_lag_metrics(query.lastProgress)   # the progress, kbroker sources' metrics filled in

Values are strings, as Spark's connector reports them. `latestOffset` is null, and there
is no lag to compute, in the progress of a batch Spark runs again after a restart (the
last batch of the offset log, not committed before the driver stopped): Spark replays
it without asking any source for its latest offsets, its own Kafka source included.
"""

from __future__ import annotations

import copy
import json

METRICS = ("minOffsetsBehindLatest", "maxOffsetsBehindLatest", "avgOffsetsBehindLatest")


def _offsets(value) -> dict[tuple[str, int], int] | None:
    """A source progress's offsets (JSON text or a dict) -> {(topic, partition): offset};
    None when there are none or they are not Kafka's {"topic": {"0": 23}}."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    out = {}
    for topic, parts in value.items():
        if not isinstance(parts, dict):
            return None
        for p, off in parts.items():
            try:
                out[(str(topic), int(p))] = int(off)
            except (TypeError, ValueError):
                return None
    return out


def lag(source: dict) -> dict[str, str]:
    """The offsets-behind-latest metrics of one source of a progress (a
    `progress["sources"][i]`), as Spark's Kafka source names them; {} when the progress
    has no latestOffset (a replayed batch) or its offsets are not Kafka's."""
    latest = _offsets(source.get("latestOffset"))
    consumed = _offsets(source.get("endOffset"))
    if not latest or consumed is None:
        return {}
    behind = [off - consumed.get(tp, 0) for tp, off in latest.items()]
    return {
        "minOffsetsBehindLatest": str(min(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "avgOffsetsBehindLatest": str(sum(behind) / len(behind)),
    }


def with_lag_metrics(progress) -> dict:
    """A copy of a query's progress (a dict, or PySpark's StreamingQueryProgress) in which
    every source whose `metrics` lack the offsets-behind-latest metrics and whose offsets
    are Kafka's (the kbroker source's) has them."""
    # PySpark's StreamingQueryProgress (a dict holding JVM objects too) as plain JSON
    out = copy.deepcopy(progress) if type(progress) is dict else json.loads(progress.json)
    for source in out.get("sources") or ():
        metrics = source.get("metrics") or {}
        if not any(m in metrics for m in METRICS):
            source["metrics"] = {**metrics, **lag(source)}
    return out
