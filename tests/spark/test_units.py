"""The data source's parts without Spark: options, planning, admission control, the
native sink encoder, discovery's precondition."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.deps import IN_CI

try:
    import pyspark  # noqa: F401
except ImportError:
    if IN_CI:  # under CI a missing dependency fails, never skips
        raise
    pytest.skip(
        "Python module pyspark is not available (pip install -e '.[test]', make test does it)", allow_module_level=True
    )

from broker._native.spark_encode import assign_partitions, encode_batches  # noqa: E402
from broker.native import batches_to_arrow, iter_batches, partition_for_key  # noqa: E402
from broker.spark.options import KBrokerOptionError, SinkOptions, SourceOptions  # noqa: E402
from broker.spark.reader import plan_partitions  # noqa: E402
from broker.spark.stream import rate_limit  # noqa: E402
from broker.spark.writer import _binary_desc, _headers_desc, _int32_desc  # noqa: E402

BS = {"kbroker.bootstrap.servers": "127.0.0.1:9092"}


# ---------------------------------------------------------------- options


def parse(streaming=False, **opts):
    return SourceOptions.parse({**BS, **opts}, streaming=streaming)


def option_error(streaming=False, **opts) -> KBrokerOptionError:
    with pytest.raises(KBrokerOptionError) as exc:
        parse(streaming, **opts)
    return exc.value


def test_options_defaults_as_sparks_kafka_source():
    b = parse(subscribe="a, b")
    assert b.subscription.topics == ("a", "b")
    assert (b.starting.kind, b.ending.kind) == ("earliest", "latest")
    assert b.fail_on_data_loss and not b.include_headers
    s = parse(True, subscribePattern="cl.*")
    assert s.starting.kind == "latest" and s.ending is None and s.subscription.pattern == "cl.*"


def test_options_arrive_lower_cased():
    o = SourceOptions.parse(
        {
            "KBROKER.BOOTSTRAP.SERVERS": "h:1",
            "SUBSCRIBE": "t",
            "startingoffsets": "latest",
            "maxoffsetspertrigger": "10",
        },
        streaming=True,
    )
    assert o.bootstrap == "h:1" and o.starting.kind == "latest" and o.max_offsets_per_trigger == 10


@pytest.mark.parametrize(
    "opts, option, words",
    [
        ({"subscribe": "t", "kbroker.bootstrap.servers": ""}, "kbroker.bootstrap.servers", "must be specified"),
        ({"subscribe": "t", "kbroker.bootstrap.servers": "nohost"}, "kbroker.bootstrap.servers", "not valid"),
        ({}, "subscribe", "must be specified"),
        ({"subscribe": "t", "assign": '{"t":[0]}'}, "subscribe", "cannot be combined"),
        ({"assign": '{"t":"0"}'}, "assign", "JSON like"),
        ({"subscribePattern": "("}, "subscribePattern", "regular expression"),
        ({"subscribe": "t", "startingOffsets": "{nope"}, "startingOffsets", "not valid JSON"),
        ({"subscribe": "t", "startingOffsets": '{"t":{"x":1}}'}, "startingOffsets", "not a number"),
        ({"subscribe": "t", "startingOffsets": '{"t":{"0":-3}}'}, "startingOffsets", "offsets are >= 0"),
        ({"subscribe": "t", "startingOffsets": "newest"}, "startingOffsets", "must be"),
        ({"subscribe": "t", "startingOffsets": "latest"}, "startingOffsets", "batch query"),
        ({"subscribe": "t", "endingOffsets": "earliest"}, "endingOffsets", "cannot be earliest"),
        ({"subscribe": "t", "startingTimestamp": "yesterday"}, "startingTimestamp", "milliseconds"),
        ({"subscribe": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss", "true or false"),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "5"}, "maxOffsetsPerTrigger", "streaming queries only"),
    ],
)
def test_bad_source_options_name_the_option(opts, option, words):
    err = option_error(**({**BS, **opts} if "kbroker.bootstrap.servers" not in opts else opts))
    assert err.option == option
    assert str(err).startswith(f"kbroker: option '{option}'") and words in str(err)


def test_streaming_only_and_batch_only_options():
    assert option_error(True, subscribe="t", endingOffsets="latest").option == "endingOffsets"
    assert option_error(True, subscribe="t", maxOffsetsPerTrigger="0").option == "maxOffsetsPerTrigger"
    err = option_error(True, subscribe="t", maxOffsetsPerTrigger="5", minOffsetsPerTrigger="6")
    assert err.option == "minOffsetsPerTrigger"
    assert parse(True, subscribe="t", maxTriggerDelay="2m").max_trigger_delay_ms == 120000


def test_sink_options():
    o = SinkOptions.parse({**BS, "topic": "out", "kbroker.acks": "1", "kbroker.compression.type": "lz4"})
    assert (o.topic, o.acks, o.compression) == ("out", 1, "lz4")
    with pytest.raises(KBrokerOptionError) as exc:
        SinkOptions.parse({**BS, "kbroker.acks": "2"})
    assert exc.value.option == "kbroker.acks"
    with pytest.raises(KBrokerOptionError) as exc:
        SinkOptions.parse({**BS, "deliveryGuarantee": "twice"})
    assert exc.value.option == "deliveryGuarantee"


def sink_error(**opts) -> KBrokerOptionError:
    with pytest.raises(KBrokerOptionError) as exc:
        SinkOptions.parse({**BS, "topic": "out", **opts})
    return exc.value


def test_sink_retries_as_kafkas_producer_defaults():
    """Kafka's producer: retries unbounded, bounded by delivery.timeout.ms (120 s), backoff
    100 ms up to 1 s; each can be set, and delivery.timeout.ms < request.timeout.ms is refused
    as Kafka's producer refuses it."""
    o = SinkOptions.parse({**BS, "topic": "out"})
    assert (o.retries, o.delivery_timeout_ms, o.retry_backoff_ms, o.retry_backoff_max_ms) == (
        2**31 - 1,
        120000,
        100,
        1000,
    )
    assert (o.buffer_memory, o.max_block_ms) == (32 << 20, 60000)
    o = SinkOptions.parse(
        {
            **BS,
            "topic": "out",
            "kafka.retries": "3",
            "kafka.delivery.timeout.ms": "40000",
            "kafka.retry.backoff.ms": "50",
            "kafka.retry.backoff.max.ms": "400",
        }
    )
    assert (o.retries, o.delivery_timeout_ms, o.retry_backoff_ms, o.retry_backoff_max_ms) == (3, 40000, 50, 400)
    err = sink_error(**{"kafka.delivery.timeout.ms": "1000"})
    assert err.option == "kafka.delivery.timeout.ms" and "request.timeout.ms" in str(err)


def test_sparks_own_writer_options_pass_the_sink():
    """What Spark's writers hand the sink beside the user's options (queryName(),
    checkpointLocation, start(path) / save(path)) passes, lower-cased as Spark hands it
    over; so does another key far from every sink option. A misspelt sink or Spark option
    is still refused."""
    o = SinkOptions.parse(
        {
            **BS,
            "topic": "out",
            "queryname": "copy",
            "checkpointlocation": "/tmp/ck",
            "path": "/somewhere",
            "mergeSchema": "true",
        }
    )
    assert o.topic == "out" and o.no_effect == ()
    for given, near in [
        ("tpoic", "topic"),
        ("deliveryGuarantees", "deliveryGuarantee"),
        ("queryNmae", "queryName"),
        ("checkpointLocaton", "checkpointLocation"),
    ]:
        err = sink_error(**{given: "x"})
        assert err.option == given and f"did you mean '{near}'" in str(err), str(err)


def test_kafka_prefix_is_a_synonym_of_kbroker():
    """A job ported from Spark's Kafka connector keeps its kafka.* options."""
    o = SourceOptions.parse(
        {
            "kafka.bootstrap.servers": "h:1",
            "subscribe": "t",
            "kafka.fetch.max.bytes": "4096",
            "kafka.max.partition.fetch.bytes": "2048",
            "kafka.check.crcs": "false",
            "kafka.client.id": "etl",
        },
        streaming=False,
    )
    assert (o.bootstrap, o.fetch_max_bytes, o.partition_max_bytes, o.validate_crc, o.client_id) == (
        "h:1",
        4096,
        2048,
        False,
        "etl",
    )
    s = SinkOptions.parse(
        {
            "kafka.bootstrap.servers": "h:1",
            "kafka.acks": "1",
            "kafka.compression.type": "zstd",
            "kafka.batch.size": "65536",
            "kafka.client.id": "etl",
        }
    )
    assert (s.bootstrap, s.acks, s.compression, s.batch_bytes, s.client_id) == ("h:1", 1, "zstd", 65536, "etl")
    # the same value under both prefixes is fine; two different ones are refused
    assert parse(subscribe="t", **{"kafka.bootstrap.servers": BS["kbroker.bootstrap.servers"]}).bootstrap
    err = option_error(subscribe="t", **{"kafka.bootstrap.servers": "other:2"})
    assert err.option == "kafka.bootstrap.servers" and "kbroker.bootstrap.servers" in str(err)


@pytest.mark.parametrize(
    "opts, option, words",
    [
        ({"startingOffset": "earliest"}, "startingOffset", "did you mean 'startingOffsets'"),
        ({"failOnDataLos": "false"}, "failOnDataLos", "did you mean 'failOnDataLoss'"),
        ({"topic": "t"}, "topic", "sink option"),
        ({"kafka.fetch.max.byte": "1"}, "kafka.fetch.max.byte", "did you mean 'kafka.fetch.max.bytes'"),
        ({"kbroker.no.such.setting": "1"}, "kbroker.no.such.setting", "not a Kafka consumer setting"),
        ({"kafka.linger.ms": "5"}, "kafka.linger.ms", "not a Kafka consumer setting"),
        ({"kafka.fetch.max.bytes": "lots"}, "kafka.fetch.max.bytes", "must be an integer"),
        ({"kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset", "startingOffsets"),
        ({"kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit", "checkpoint"),
        ({"kafka.value.deserializer": "x"}, "kafka.value.deserializer", "binary"),
        ({"kafka.security.protocol": "SSL"}, "kafka.security.protocol", "PLAINTEXT only"),
        ({"kafka.ssl.truststore.location": "/x"}, "kafka.ssl.truststore.location", "no TLS"),
        ({"kafka.sasl.mechanism": "PLAIN"}, "kafka.sasl.mechanism", "no SASL"),
        ({"kafka.isolation.level": "serializable"}, "kafka.isolation.level", "read_committed"),
        ({"fetchOffset.numRetries": "-1"}, "fetchOffset.numRetries", ">= 0"),
        ({"fetchOffset.retryIntervalMs": "soon"}, "fetchOffset.retryIntervalMs", "integer"),
    ],
)
def test_unknown_and_invalid_source_options_are_refused(opts, option, words):
    err = option_error(subscribe="t", **opts)
    assert err.option == option
    assert str(err).startswith(f"kbroker: option '{option}'") and words in str(err), str(err)


@pytest.mark.parametrize(
    "opts, option, words",
    [
        ({"kafka.acks": "banana"}, "kafka.acks", "must be all, -1, 1 or 0"),
        ({"kafka.compression.type": "brotli"}, "kafka.compression.type", "gzip"),
        ({"kafka.batch.size": "big"}, "kafka.batch.size", "integer"),
        ({"kafka.retries": "-2"}, "kafka.retries", ">= 0"),
        ({"subscribe": "t"}, "subscribe", "source option"),
        ({"startingOffsets": "earliest"}, "startingOffsets", "source option"),
        ({"kafka.fetch.max.bytes": "1"}, "kafka.fetch.max.bytes", "not a Kafka producer setting"),
        ({"kafka.value.serializer": "x"}, "kafka.value.serializer", "as it is"),
        ({"kafka.transactional.id": "x"}, "kafka.transactional.id", "deliveryGuarantee"),
        ({"kafka.security.protocol": "SASL_SSL"}, "kafka.security.protocol", "PLAINTEXT only"),
        ({"tpoic": "x"}, "tpoic", "did you mean 'topic'"),
    ],
)
def test_unknown_and_invalid_sink_options_are_refused(opts, option, words):
    err = sink_error(**opts)
    assert err.option == option
    assert str(err).startswith(f"kbroker: option '{option}'") and words in str(err), str(err)


def test_settings_without_effect_are_accepted_and_said(caplog):
    """Kafka client settings that mean nothing here (no consumer group, no linger) and
    Spark's groupIdPrefix are accepted, as Spark's connector accepts them, with one
    warning naming them."""
    caplog.set_level("WARNING", logger="broker.spark")
    o = parse(
        subscribe="t",
        groupIdPrefix="etl",
        **{"kafka.group.id": "g", "kafka.session.timeout.ms": "10000", "kafka.security.protocol": "PLAINTEXT"},
    )
    assert o.no_effect == ("groupIdPrefix", "kafka.group.id", "kafka.session.timeout.ms")
    s = SinkOptions.parse(
        {
            **BS,
            "topic": "t",
            "kafka.linger.ms": "5",
            "kafka.enable.idempotence": "true",
            "checkpointLocation": "/tmp/ck",
        }
    )
    assert s.no_effect == ("kafka.enable.idempotence", "kafka.linger.ms")
    warned = [r.getMessage() for r in caplog.records]
    assert any("'kafka.group.id'" in m and "no effect" in m for m in warned), warned
    assert any("'kafka.linger.ms'" in m and "no effect" in m for m in warned), warned


def test_fetch_offset_retries_and_mode_free_parsing():
    o = parse(subscribe="t", **{"fetchOffset.numRetries": "5", "fetchOffset.retryIntervalMs": "50"})
    assert (o.fetch_offset_retries, o.fetch_offset_retry_interval_ms) == (5, 50)
    assert (parse(subscribe="t").fetch_offset_retries, parse(subscribe="t").fetch_offset_retry_interval_ms) == (3, 10)
    # at load() the source does not know batch from streaming: only the rules of one mode wait
    o = SourceOptions.parse(
        {**BS, "subscribe": "t", "endingOffsets": "latest", "maxOffsetsPerTrigger": "5"}, streaming=None
    )
    assert o.max_offsets_per_trigger == 5
    with pytest.raises(KBrokerOptionError):
        SourceOptions.parse({**BS, "subscribe": "t", "startingOffset": "x"}, streaming=None)


# ---------------------------------------------------------------- planning and admission control


def test_plan_partitions_one_per_topic_partition_and_splits_large_ranges():
    parts = plan_partitions({("t", 0): (0, 10), ("t", 1): (5, 5), ("u", 0): (100, 350)}, max_records=100)
    got = [(p.topic, p.partition, p.start, p.end) for p in parts]
    assert got == [("t", 0, 0, 10), ("u", 0, 100, 183), ("u", 0, 183, 266), ("u", 0, 266, 350)]
    # minPartitions cuts in proportion to the ranges' sizes; ranges stay contiguous
    parts = plan_partitions({("t", 0): (0, 900), ("t", 1): (0, 100)}, min_partitions=10)
    by_tp = {}
    for p in parts:
        by_tp.setdefault(p.partition, []).append((p.start, p.end))
    assert len(parts) >= 10 and len(by_tp[0]) == 9 and len(by_tp[1]) == 1
    for ranges in by_tp.values():
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_rate_limit_in_proportion_to_lag_never_starving():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 10}
    latest = {("t", 0): 900, ("t", 1): 100, ("t", 2): 11, ("t", 3): 50}
    end = rate_limit(100, start, {("t", 3): 0}, latest)
    lags = {tp: end[tp] - start.get(tp, 0) for tp in end}
    # 1051 waiting; shares of 100: 85.6, 9.5, 0.095 (-> 1, not starved), 4.75
    assert lags == {("t", 0): 85, ("t", 1): 9, ("t", 2): 1, ("t", 3): 4}
    assert rate_limit(10_000, start, {("t", 3): 0}, latest) == latest


# ---------------------------------------------------------------- the native sink encoder


def test_encode_arrow_columns_into_batches():
    n = 1000
    keys = pa.array([None if i % 9 == 0 else f"k{i}".encode() for i in range(n + 3)], pa.binary()).slice(3)
    values = pa.array([None if i % 17 == 0 else f"value-{i}" for i in range(n + 3)], pa.string()).slice(3)
    htype = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    headers = pa.array(
        [
            None if i % 5 == 0 else [{"key": "i", "value": str(i).encode()}, {"key": "z", "value": None}]
            for i in range(n + 3)
        ],
        htype,
    ).slice(3)
    explicit = pa.array([2 if i % 4 == 0 else None for i in range(n)], pa.int32())
    parts = assign_partitions(n, 3, _binary_desc(keys), _int32_desc(explicit), 1)
    batches = encode_batches(
        n, parts, _binary_desc(keys), _binary_desc(values), _headers_desc(headers), 1234, "lz4", 2048
    )
    assert len(batches) > 3
    got = {}
    for p, data, count in batches:
        (b,) = list(iter_batches(data, validate=True))
        assert b.record_count == count and b.compression_name == "lz4" and b.base_timestamp == 1234
        rb = batches_to_arrow(data)
        got.setdefault(p, []).extend(zip(rb.column(2).to_pylist(), rb.column(3).to_pylist(), rb.column(4).to_pylist()))
    expected = {}
    for i in range(n):
        key = keys[i].as_py()
        p = 2 if i % 4 == 0 else (partition_for_key(key, 3) if key is not None else 1)
        v = values[i].as_py()
        h = headers[i].as_py()
        expected.setdefault(p, []).append(
            (
                key,
                None if v is None else v.encode(),
                [] if h is None else [{"key": "i", "value": str(i + 3).encode()}, {"key": "z", "value": None}],
            )
        )
    assert got == expected


def test_explicit_partition_out_of_range_is_refused():
    part = pa.array([0, 7], pa.int32())
    with pytest.raises(ValueError, match="row 1: partition 7 is out of range"):
        assign_partitions(2, 3, None, _int32_desc(part), 0)


def test_sequences_for_an_idempotent_producer_advance_per_partition():
    values = pa.array([b"x" * 100] * 50)
    parts = assign_partitions(50, 2, None, _int32_desc(pa.array([i % 2 for i in range(50)], pa.int32())), 0)
    seqs = {}
    batches = encode_batches(
        50,
        parts,
        None,
        _binary_desc(values),
        None,
        1,
        None,
        1024,
        producer_id=42,
        producer_epoch=3,
        sequences=seqs,
        transactional=True,
    )
    by_p = {}
    for p, data, count in batches:
        (b,) = list(iter_batches(data, validate=True))
        assert (b.producer_id, b.producer_epoch, b.is_transactional) == (42, 3, True)
        by_p.setdefault(p, []).append((b.base_sequence, count))
    for seq in by_p.values():
        assert [s for s, _ in seq] == [sum(c for _, c in seq[:k]) for k in range(len(seq))]
    assert seqs == {0: 25, 1: 25}


# ---------------------------------------------------------------- discovery's precondition


def test_discovery_precondition_iter_modules_lists_pyspark_kbroker():
    """Spark lists top-level pyspark_* modules with pkgutil.iter_modules(), which walks the
    sys.path directories. A regular install puts pyspark_kbroker.py in site-packages; the
    meson-python editable install makes it importable but not listed (its finder has no
    sys.path entry), so `make install` / `make install-test` give the venv a directory
    holding only pyspark_kbroker.py (.venv/spark-discovery, named by a .pth file): listed
    in a plain interpreter of the venv, from anywhere, without PYTHONPATH."""
    code = (
        "import pkgutil, pyspark_kbroker; "
        "print(pyspark_kbroker.DefaultSource.name(), "
        "'pyspark_kbroker' in {m.name for m in pkgutil.iter_modules()})"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    alone = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True, timeout=60)
    assert alone.stdout.split() == ["kbroker", "True"], (
        f"{alone.stdout}{alone.stderr} (a venv made without `make install-test`?)"
    )


# ---------------------------------------------------------------- the stream reader's offsets


class FakeBroker:
    """Stands in for the broker behind broker.spark.offsets: partitions and their
    log start / high watermark."""

    def __init__(self, earliest: dict, latest: dict):
        self.earliest, self.latest = earliest, latest

    def install(self, monkeypatch):
        from broker.spark import offsets as o

        monkeypatch.setattr(o, "connect", lambda *a, **k: self)
        monkeypatch.setattr(o, "topic_partitions", lambda c, sub, must_exist=True: sorted(self.latest))
        monkeypatch.setattr(
            o,
            "list_offsets",
            lambda c, tps, ts, isolation_level=0: {tp: (self.earliest if ts == -2 else self.latest)[tp] for tp in tps},
        )

    def close(self):
        pass


def stream_reader(**opts):
    from broker.spark.stream import KBrokerStreamReader

    return KBrokerStreamReader(SourceOptions.parse({**BS, "subscribe": "t", **opts}, streaming=True))


def test_stream_offsets_admission_control_and_new_partitions(monkeypatch):
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    fake = FakeBroker({("t", 0): 0, ("t", 1): 0}, {("t", 0): 300, ("t", 1): 100})
    fake.install(monkeypatch)
    r = stream_reader(startingOffsets="earliest", maxOffsetsPerTrigger="100")
    assert r.getDefaultReadLimit() == ReadMaxRows(100)
    start = r.initialOffset()
    assert start == {"t": {"0": 0, "1": 0}}
    end = r.latestOffset(start, ReadMaxRows(100))
    assert end == {"t": {"0": 75, "1": 25}}  # in proportion to the lag
    # a new partition appears: it starts at its log start offset (earliest)
    fake.earliest[("t", 2)], fake.latest[("t", 2)] = 10, 20
    end2 = r.latestOffset(end, ReadAllAvailable())
    assert end2 == {"t": {"0": 300, "1": 100, "2": 20}}
    parts = r.partitions(end, end2)
    assert [(p.partition, p.start, p.end) for p in parts] == [(0, 75, 300), (1, 25, 100), (2, 10, 20)]
    # JSON key order is canonical (Spark compares offsets as JSON)
    assert json.dumps(r.latestOffset(end2, ReadAllAvailable())) == json.dumps(end2)


def test_stream_available_now_stops_at_the_target(monkeypatch):
    from pyspark.sql.streaming.datasource import ReadMaxRows

    fake = FakeBroker({("t", 0): 0}, {("t", 0): 250})
    fake.install(monkeypatch)
    r = stream_reader(startingOffsets="earliest", maxOffsetsPerTrigger="100", minOffsetsPerTrigger="50")
    r.prepareForTriggerAvailableNow()
    fake.latest[("t", 0)] = 1000  # arrives after the start: not read
    pos, ends = r.initialOffset(), []
    for _ in range(10):
        nxt = r.latestOffset(pos, ReadMaxRows(100))
        if nxt == pos:
            break
        ends.append(nxt["t"]["0"])
        pos = nxt
    # min offsets are ignored under availableNow (it must finish): 100, 200, then the 50 left
    assert ends == [100, 200, 250]


def test_stream_min_offsets_wait_for_data_or_delay(monkeypatch):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    fake = FakeBroker({("t", 0): 0}, {("t", 0): 10})
    fake.install(monkeypatch)
    r = stream_reader(startingOffsets="earliest", minOffsetsPerTrigger="50", maxTriggerDelay="1h")
    start = r.initialOffset()
    assert r.latestOffset(start, ReadAllAvailable()) == start  # 10 < 50: wait
    fake.latest[("t", 0)] = 60
    assert r.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 60}}
    r._last_trigger_ms -= 2 * 3600 * 1000  # the delay passed
    fake.latest[("t", 0)] = 61
    assert r.latestOffset({"t": {"0": 60}}, ReadAllAvailable()) == {"t": {"0": 61}}


def test_stream_data_loss_when_the_high_watermark_goes_back(monkeypatch):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from broker.spark import KBrokerDataLossError

    fake = FakeBroker({("t", 0): 0}, {("t", 0): 10})
    fake.install(monkeypatch)
    with pytest.raises(KBrokerDataLossError, match="went back from 50 to 10"):
        stream_reader().latestOffset({"t": {"0": 50}}, ReadAllAvailable())
    assert stream_reader(failOnDataLoss="false").latestOffset({"t": {"0": 50}}, ReadAllAvailable()) == {"t": {"0": 10}}
    # planning a range that starts below the log start offset
    fake.earliest[("t", 0)] = 5
    with pytest.raises(KBrokerDataLossError, match="offsets 2..4 of t-0 are gone"):
        stream_reader().partitions({"t": {"0": 2}}, {"t": {"0": 10}})
    parts = stream_reader(failOnDataLoss="false").partitions({"t": {"0": 2}}, {"t": {"0": 10}})
    assert [(p.start, p.end) for p in parts] == [(5, 10)]


# ---------------------------------------------------------------- issue 41


def test_options_take_the_clients_producer_defaults():
    """options.py keeps its own copy of Kafka's producer defaults (it must not import the
    client): the same as the client's. (The bootstrap rules are one function for both,
    broker.addresses.parse_bootstrap.)"""
    from broker.client import sender
    from broker.spark import options

    for name in ("DELIVERY_TIMEOUT_MS", "RETRIES_MAX", "RETRY_BACKOFF_MS", "RETRY_BACKOFF_MAX_MS", "BUFFER_MEMORY"):
        assert getattr(options, name) == getattr(sender, name), name


def test_what_spark_imports_to_look_the_source_up_is_light():
    """The Python workers that look the source up and ask it for its schema (Spark starts
    them at each query's start) import pyspark_kbroker and the source's options, and the
    one that plans a stream's reads the stream reader: none of them the client, the
    protocol codecs, the native core or pyarrow."""
    code = (
        "import sys, pyspark_kbroker, broker.spark.stream\n"
        "pyspark_kbroker.DefaultSource({'kafka.bootstrap.servers': 'h:1', 'subscribe': 't'}).schema()\n"
        "from broker.spark.options import SourceOptions\n"
        "from broker.spark.stream import KBrokerStreamReader\n"
        "import pickle\n"
        "pickle.dumps(KBrokerStreamReader(SourceOptions.parse({'kafka.bootstrap.servers': 'h:1', "
        "'subscribe': 't'}, streaming=True)))\n"
        "print(sorted(m for m in sys.modules if m.startswith(('broker.client', 'broker.protocol', "
        "'broker._native', 'broker.native', 'pyarrow'))))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout


def test_what_spark_imports_to_plan_and_commit_a_write_is_light():
    """The Python workers that plan a micro-batch's write and commit it (Spark creates the
    stream writer again in both, at every micro-batch) import the sink's options and
    checks; pickling the writer to the tasks takes none of what the tasks run (pyarrow,
    the native encoder, the sender, the protocol codecs). The brokers' capabilities are
    checked once per process: marked checked here, as after a first micro-batch."""
    code = (
        "import sys, pickle, pyspark_kbroker\n"
        "from pyspark.sql.types import StructType, StructField, BinaryType\n"
        "from broker.spark import sink\n"
        "from broker.spark.options import SinkOptions\n"
        "opts = SinkOptions.parse({'kafka.bootstrap.servers': 'h:1', 'topic': 't', "
        "'deliveryGuarantee': 'exactly-once'})\n"
        "sink._checked.add((opts.bootstrap, opts.delivery, opts.client_id))\n"
        "schema = StructType([StructField('value', BinaryType())])\n"
        "w = pyspark_kbroker.DefaultSource({'kafka.bootstrap.servers': 'h:1', 'topic': 't', "
        "'deliveryGuarantee': 'exactly-once'}).streamWriter(schema, False)\n"
        "assert type(w).__name__ == 'KBrokerStreamWriter', w\n"
        "pickle.dumps(w)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('broker.spark.writer', 'broker.client.sender', "
        "'broker.protocol.messages', 'broker._native', 'broker.native', 'pyarrow'))))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout


def test_a_pickled_writer_makes_its_delivery_where_it_runs():
    """The writer pickled to the tasks carries the options and the run's name, not a
    delivery; unpickled, it makes the delivery its options ask for."""
    import pickle

    from pyspark.sql.types import BinaryType, StructField, StructType

    from broker.spark import sink
    from broker.spark.options import SinkOptions
    from broker.spark.writer import Delivery, TransactionalDelivery

    schema = StructType([StructField("value", BinaryType())])
    for guarantee, kind in (("exactly-once", TransactionalDelivery), ("at-least-once", Delivery)):
        opts = SinkOptions.parse({"kafka.bootstrap.servers": "h:1", "topic": "t", "deliveryGuarantee": guarantee})
        sink._checked.add((opts.bootstrap, opts.delivery, opts.client_id))
        w = sink.KBrokerStreamWriter(opts, schema)
        assert w._delivery is None
        copy = pickle.loads(pickle.dumps(w))
        assert copy._delivery is None and copy.run_id == w.run_id
        assert type(copy.delivery) is kind
        if kind is TransactionalDelivery:
            assert copy.delivery.run_id == w.run_id
        assert pickle.loads(pickle.dumps(copy))._delivery is None  # a delivery is never pickled


CATALOG = {
    "provider": "kbroker",
    "owner": "me",
    "option.kafka.bootstrap.servers": "127.0.0.1:9092",
    "option.subscribe": "clicks",
    "kafka.bootstrap.servers": "127.0.0.1:9092",
    "subscribe": "clicks",
    "option.kafka.acks": "all",
    "kafka.acks": "all",
    "comment": "the clicks",
}


def test_a_catalog_tables_options_serve_both_sides():
    """Spark's catalogs hand a table's OPTIONS over as `option.*` beside the table's own
    properties (provider, owner ...): the options are the `option.*` entries, and the
    other side's options pass (a table is read and written); `subscribe` of one topic is
    where writes go, `topic` alone where reads come from."""
    from broker.spark.options import options_for, with_table_options
    from broker.spark.schema import spark_schema

    o = SourceOptions.parse(CATALOG, streaming=False)
    assert o.subscription.topics == ("clicks",) and o.bootstrap == "127.0.0.1:9092"
    s = SinkOptions.parse(CATALOG)
    assert s.topic == "clicks" and s.table
    by_topic = {"option.kafka.bootstrap.servers": "h:1", "option.topic": "out", "option.startingOffsets": "earliest"}
    assert SourceOptions.parse(by_topic, streaming=False).subscription.topics == ("out",)
    assert SinkOptions.parse(by_topic).topic == "out"
    # outside a table the other side's options are still refused
    with pytest.raises(KBrokerOptionError):
        SourceOptions.parse({**BS, "subscribe": "t", "topic": "x"}, streaming=False)
    # the table's schema carries its options; a reader or writer given only that schema
    # (Spark hands them no options) finds them, options of the read adding to them
    schema = with_table_options(spark_schema(False), CATALOG)
    assert with_table_options(spark_schema(False), BS) == spark_schema(False)
    found = options_for({}, schema)
    assert SourceOptions.parse(found, streaming=False).subscription.topics == ("clicks",)
    found = options_for({"startingOffsets": '{"clicks":{"0":5}}'}, schema)
    assert SourceOptions.parse(found, streaming=False).starting.offsets == {"clicks": {0: 5}}
    # a format("kbroker") read or write naming its servers ignores what the columns carry
    assert options_for({**BS, "topic": "elsewhere"}, schema) == {**BS, "topic": "elsewhere"}
    other = with_table_options(spark_schema(False), {**CATALOG, "option.subscribe": "other"})
    mixed = type(schema)(schema.fields[:3] + other.fields[3:])
    with pytest.raises(KBrokerOptionError) as exc:
        options_for({}, mixed)
    assert "more than one kbroker table" in str(exc.value)


def test_a_table_write_refuses_rows_read_from_a_topic():
    from broker.spark.writer import _not_read_rows

    rows = pa.RecordBatch.from_pydict({"value": [b"a", b"b"], "offset": pa.array([None, None], pa.int64())})
    _not_read_rows(rows)
    read = pa.RecordBatch.from_pydict({"value": [b"a", b"b"], "offset": pa.array([None, 7], pa.int64())})
    with pytest.raises(ValueError) as exc:
        _not_read_rows(read)
    assert "INSERT INTO t (key, value) SELECT key, value" in str(exc.value)


def test_commit_offsets_to_group_option():
    assert parse(True, subscribe="t").commit_group is None
    assert parse(True, subscribe="t", commitOffsetsToGroup="job-lag").commit_group == "job-lag"
    assert parse(None, subscribe="t", commitoffsetstogroup="job-lag").commit_group == "job-lag"
    err = option_error(True, subscribe="t", commitOffsetsToGroup=" ")
    assert err.option == "commitOffsetsToGroup" and "names no group" in str(err)
    err = option_error(False, subscribe="t", commitOffsetsToGroup="g")
    assert "for streaming queries only" in str(err)


def test_lag_as_sparks_kafka_source_reports_it():
    from broker.spark.progress import lag, with_lag_metrics

    source = {
        "startOffset": '{"t":{"0":0,"1":0}}',
        "endOffset": '{"t":{"0":10,"1":4}}',
        "latestOffset": '{"t":{"0":12,"1":4,"2":3}}',
        "metrics": {},
    }
    # per partition latest - consumed: 2, 0 and 3 (a partition the batch did not read yet)
    assert lag(source) == {
        "minOffsetsBehindLatest": "0",
        "maxOffsetsBehindLatest": "3",
        "avgOffsetsBehindLatest": str(5 / 3),
    }
    assert lag({**source, "latestOffset": None}) == {}  # a replayed batch
    assert lag({"endOffset": "12", "latestOffset": "12"}) == {}  # not Kafka's offsets
    progress = {"batchId": 3, "sources": [source, {"description": "rate", "metrics": {"x": "1"}}]}
    filled = with_lag_metrics(progress)
    assert filled["sources"][0]["metrics"] == lag(source) and filled["sources"][1]["metrics"] == {"x": "1"}
    assert progress["sources"][0]["metrics"] == {}  # a copy


def test_stream_reader_reports_the_latest_offsets_its_planning_found(monkeypatch):
    """reportLatestOffset (the progress's latestOffset) answers what latestOffset() found,
    before the read limit cut it, without asking the broker again; initialOffset is
    resolved once."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    fake = FakeBroker({("t", 0): 0, ("t", 1): 0}, {("t", 0): 100, ("t", 1): 50})
    fake.install(monkeypatch)
    calls = []
    from broker.spark import offsets as o

    real = o.list_offsets
    monkeypatch.setattr(o, "list_offsets", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    r = stream_reader(startingOffsets="latest")
    assert r.initialOffset() == r.initialOffset() == {"t": {"0": 100, "1": 50}} and calls == [-1]
    fake.latest = {("t", 0): 400, ("t", 1): 50}
    end = r.latestOffset({"t": {"0": 100, "1": 50}}, ReadMaxRows(30))
    assert end == {"t": {"0": 130, "1": 50}}
    calls.clear()
    assert r.reportLatestOffset() == {"t": {"0": 400, "1": 50}} and calls == []


def test_exactly_once_capability_is_the_brokers_api_versions():
    """The exactly-once sink needs InitProducerId, AddPartitionsToTxn, EndTxn and
    FindCoordinator for transactional ids: read from a broker's ApiVersions answer, never
    from a coordinator (which may be down)."""
    from broker.protocol.api import ApiKey
    from broker.spark.sink import transactions_missing

    class Conn:
        versions = {
            ApiKey.INIT_PRODUCER_ID: (0, 5),
            ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
            ApiKey.END_TXN: (0, 5),
            ApiKey.FIND_COORDINATOR: (0, 6),
        }

    assert transactions_missing(Conn()) is None
    Conn.versions = {ApiKey.INIT_PRODUCER_ID: (0, 5), ApiKey.FIND_COORDINATOR: (0, 0)}
    assert transactions_missing(Conn()) == "ADD_PARTITIONS_TO_TXN, END_TXN, FIND_COORDINATOR"


def test_spark_workers_import_pyspark_compiled_in_this_venv():
    """Spark puts $SPARK_HOME/python/lib/pyspark.zip and py4j's zip first on its Python
    workers' path; with PySpark installed by pip those are the files of the pyspark
    package in site-packages, uncompiled (a zip has no bytecode cache). The venv's
    kbroker-spark-discovery.pth (make install-test) moves them after site-packages: a
    worker imports the same pyspark, compiled."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = sorted(str(z) for z in lib.glob("*.zip"))
    assert any("pyspark.zip" in z for z in zips), zips
    code = "import pyspark, py4j; print(pyspark.__file__); print(py4j.__file__)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(zips)}
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert [".zip" in line for line in r.stdout.split()] == [False, False], (
        f"{r.stdout} (a venv made without `make install-test`?)"
    )
