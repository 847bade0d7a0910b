"""Application logs into a Kafka topic: `KafkaLogHandler`, a `logging.Handler` in the
spirit of Kafka's log4j appender, on the project's own client (so any Kafka broker will
do, not only kbroker).

    logging.config.dictConfig({
        "version": 1,
        "handlers": {"kafka": {"class": "broker.applog.KafkaLogHandler",
                               "bootstrap_servers": "127.0.0.1:9092", "topic": "app-logs",
                               "layout": "json"}},
        "root": {"level": "INFO", "handlers": ["kafka"]},
    })

The application never waits for the broker. emit() is a bounded-queue put and nothing
else: the records are formatted, batched and produced by one background thread (started
at the first record, and again in a forked child). Invariants:

- the queue holds at most `queue_size` records: when it is full the oldest one is
  dropped and counted (`dropped`), so while the brokers are unreachable the newest
  `queue_size` records wait for them;
- the loss is reported once delivery works again: a WARNING record of logger
  `broker.applog` with a `dropped` field goes into the topic ahead of the records that
  survived, and the same line goes to stderr (at most once a second);
- a chunk of records sent when the connection fails goes back to the front of the queue
  and is sent again (at least once: after a failure a few records may appear twice; none
  is lost uncounted), so records of one key keep their order;
- records of the client's own loggers (`broker.client`, `broker.protocol`, ...) and any
  record logged from the sender thread itself are ignored: the handler never feeds on
  its own traffic;
- flush() waits until every record logged before it is acknowledged or counted as
  dropped, at most `close_timeout` s; close() does the same and stops the thread;
  logging.shutdown() (registered by `logging` at exit) calls both, and whatever is still
  undelivered then is said on stderr.

The record value is a text line (`layout="text"`: the handler's formatter, by default
DEFAULT_TEXT_FORMAT) or one JSON object (`layout="json"`: timestamp, level, logger,
message, exception, stack and the record's extra fields); its key is the logger name,
another field, or none; headers `host` and `process` (pid) on every record.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from broker.addresses import parse_bootstrap

if TYPE_CHECKING:
    from broker.client.producer import Producer

# The client (broker.client, broker.protocol: ~0.6 s of imports) is imported by the sender
# thread when it first connects, so that configuring logging stays quick.

__all__ = ["DEFAULT_TEXT_FORMAT", "EXCLUDED_LOGGERS", "KafkaLogHandler"]

DEFAULT_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: loggers whose records the handler never takes: the client it sends with, and its own
EXCLUDED_LOGGERS = ("broker.client", "broker.protocol", "broker.native", "broker.applog")

#: attributes every LogRecord has: the rest of a record's __dict__ is the caller's `extra`
_STANDARD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "taskName"}

CHUNK_RECORDS = 10000  # records formatted and sent before waiting for their acks
CHUNK_BYTES = 1 << 20
REPORT_INTERVAL_S = 1.0  # at most one loss report a second
IDLE_POLL_S = 1.0  # the sender looks at the queue every linger_ms for this long after its last record
BACKOFF_MIN_S = 0.1  # between connection attempts, doubling up to the max
BACKOFF_MAX_S = 1.0

#: (key, value, headers, timestamp ms): a record ready for the producer
_Encoded = tuple[bytes | None, bytes, list[tuple[str, bytes | None]], int]

_handlers: weakref.WeakSet[KafkaLogHandler] = weakref.WeakSet()
_get_ident = threading.get_ident


def _after_fork_in_child() -> None:
    for h in list(_handlers):
        h._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _check_bootstrap(bootstrap: str) -> None:
    """ValueError unless 'host:port[,host:port...]' (the client parses it when it connects)."""
    try:
        parse_bootstrap(bootstrap)
    except ValueError as e:
        raise ValueError(f"KafkaLogHandler: {e}") from None


def record_fields(record: logging.LogRecord, format_exception: Callable[[Any], str]) -> dict[str, object]:
    """A record as the JSON layout has it (the handler's and the broker's own log.format=json):
    timestamp (UTC, ms), level, logger, message, exception and stack when present, then the
    record's extra fields. `format_exception` formats exc_info once, kept in exc_text."""
    d: dict[str, object] = {
        "timestamp": _iso_utc(record.created),
        "level": record.levelname,
        "logger": record.name,
        "message": record.getMessage(),
    }
    if record.exc_info and not record.exc_text:
        record.exc_text = format_exception(record.exc_info)
    if record.exc_text:
        d["exception"] = record.exc_text
    if record.stack_info:
        d["stack"] = record.stack_info
    for k, v in record.__dict__.items():
        if k not in _STANDARD_ATTRS and k not in d:
            d[k] = v
    return d


_iso_second: tuple[int, str] = (-1, "")


def _iso_utc(created: float) -> str:
    """2026-11-22T10:15:42.123Z (the second's text reused while it lasts: strftime is
    dear at tens of thousands of records a second)."""
    global _iso_second
    ms = int(created * 1000)
    sec, text = _iso_second
    if ms // 1000 != sec:
        sec = ms // 1000
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        _iso_second = (sec, text)
    return f"{text}.{ms % 1000:03d}Z"


class _Formatter(logging.Formatter):
    """logging.Formatter whose asctime formats each second once (the default text
    layout's: strftime per record was a sixth of the sender thread's time)."""

    _second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None or self.default_msec_format is None:
            return super().formatTime(record, datefmt)
        sec = int(record.created)
        cached, text = self._second
        if sec != cached:
            text = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = (sec, text)
        return self.default_msec_format % (text, record.msecs)


class _Unreachable(Exception):
    """The brokers cannot take the records now: keep them and try again."""


class _Refused(Exception):
    """The broker refused the records (a non-retriable error): sending again cannot help."""


class KafkaLogHandler(logging.Handler):
    """A logging.Handler that produces every record to `topic` without ever blocking the
    caller (see the module's docstring for the guarantees, docs/logging.md for a guide).

    bootstrap_servers  "host:port[,host:port...]" of any Kafka brokers
    topic              where the records go (auto-created where the broker allows it)
    layout             "text" (the formatter's line; DEFAULT_TEXT_FORMAT unless one is
                       set) or "json" (one object per record)
    key                "logger" (default), "level", any other record attribute or extra
                       field (records without it get no key), or None: no key
    queue_size         records waiting at most; beyond it the oldest are dropped, counted
    acks               0, 1 (default) or -1 / "all"
    compression        None, "gzip", "snappy", "lz4" or "zstd"
    batch_size         largest record batch per partition, bytes (default 65536)
    linger_ms          how often the sender thread looks at the queue while records come
                       (after a second without any, the next record wakes it)
    headers            static headers added to every record, e.g. {"app": "billing"}
    exclude_loggers    more logger names (with their children) to ignore
    request_timeout    seconds: connecting and waiting for an acknowledgement
    close_timeout      seconds flush() and close() wait for the delivery at most
    max_record_bytes   a record whose value is larger is dropped (and counted)
    client_id          the client id the brokers see
    """

    # close() delivers what is queued itself: logging.shutdown() need not flush() first
    flushOnClose = False

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        layout: str = "text",
        key: str | None = "logger",
        queue_size: int = 10000,
        acks: int | str = 1,
        compression: str | None = None,
        batch_size: int = 65536,
        linger_ms: float = 5.0,
        headers: Mapping[str, str] | None = None,
        exclude_loggers: Iterable[str] = (),
        request_timeout: float = 10.0,
        close_timeout: float = 5.0,
        max_record_bytes: int = 1000000,
        client_id: str = "kbroker-log-handler",
        level: int | str = logging.NOTSET,
    ) -> None:
        super().__init__(level)
        _check_bootstrap(bootstrap_servers)  # ValueError now, not in the sender thread
        if not topic:
            raise ValueError("KafkaLogHandler: topic must be given")
        if layout not in ("text", "json"):
            raise ValueError(f"KafkaLogHandler: layout must be 'text' or 'json', not {layout!r}")
        if acks == "all":
            acks = -1
        if acks not in (0, 1, -1):
            raise ValueError(f"KafkaLogHandler: acks must be 0, 1, -1 or 'all', not {acks!r}")
        if queue_size < 1:
            raise ValueError("KafkaLogHandler: queue_size must be at least 1")
        from broker.native import compression_code

        compression_code(compression)  # ValueError for an unknown codec
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.layout = layout
        self.key = key
        self.queue_size = queue_size
        self.acks = int(acks)
        self.compression = compression
        self.batch_size = batch_size
        self.linger_s = linger_ms / 1000
        self.request_timeout = request_timeout
        self.close_timeout = close_timeout
        self.max_record_bytes = max_record_bytes
        self.client_id = client_id
        self.host = socket.gethostname()
        self._static_headers: list[tuple[str, bytes | None]] = [
            (str(k), str(v).encode()) for k, v in (headers or {}).items()
        ]
        self._headers_cache: tuple[int | None, list[tuple[str, bytes | None]]] = (-1, [])
        names = tuple(EXCLUDED_LOGGERS) + tuple(exclude_loggers)
        self._excluded_names = frozenset(names)
        self._excluded_prefixes = tuple(n + "." for n in names)
        self._json_encoder = json.JSONEncoder(ensure_ascii=False, default=str)
        self.setFormatter(_Formatter(DEFAULT_TEXT_FORMAT))
        self._init_state()
        _handlers.add(self)

    def _init_state(self) -> None:
        self._queue: deque[logging.LogRecord | _Encoded] = deque()
        # written by the application's threads (under the handler's lock)
        self._enqueued = 0
        self._dropped_full = 0
        # written by the sender thread only
        self._sent = 0
        self._dropped_sender = 0  # the oldest again, when a failed chunk came back
        self._refused = 0  # refused by the broker, too large, unformattable
        self._reported_full = 0  # of the drops above, those the topic was told of
        self._reported_refused = 0
        self._inflight = 0
        self._idle = False
        self._closing = False
        self._closed = False
        self._deadline = float("inf")  # when closing: give up delivering then
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._progress = threading.Event()
        self._thread: threading.Thread | None = None
        self._sender_ident: int | None = None
        self._start_lock = threading.Lock()

    def _reset_after_fork(self) -> None:
        """In a forked child: the parent's sender thread is not here; its queue is the
        parent's to send. Start afresh (the thread starts at the first record)."""
        closed = self._closed
        self._init_state()
        self._closed = self._closing = closed

    # ------------------------------------------------------------------ the caller's side

    def emit(self, record: logging.LogRecord) -> None:
        """A queue put (runs under the handler's lock, as Handler.handle() calls it)."""
        try:
            if self._closed:
                return
            name = record.name
            if name in self._excluded_names or name.startswith(self._excluded_prefixes):
                return
            if _get_ident() == self._sender_ident:
                return
            if self._thread is None:
                self._start()
            q = self._queue
            if len(q) >= self.queue_size:
                try:
                    q.popleft()
                    self._dropped_full += 1
                except IndexError:
                    pass
            q.append(record)
            self._enqueued += 1
            if self._idle:
                self._wake.set()
        except Exception:
            self.handleError(record)

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                t = threading.Thread(target=self._run, name=f"KafkaLogHandler({self.topic})", daemon=True)
                t.start()
                self._thread = t

    @property
    def dropped(self) -> int:
        """Records lost so far: the oldest when the queue was full, and those refused by the
        broker, larger than max_record_bytes or failing to format."""
        return self._dropped_full + self._dropped_sender + self._refused

    @property
    def sent(self) -> int:
        """Records the broker acknowledged (acks=0: records written to the socket)."""
        return self._sent

    @property
    def queued(self) -> int:
        """Records waiting: in the queue and in the chunk being sent."""
        return len(self._queue) + self._inflight

    def flush(self) -> None:
        """Waits until every record logged before the call is acknowledged or counted as
        dropped, or close_timeout s have passed."""
        if self._thread is None or not self._thread.is_alive():
            return
        target = self._enqueued
        deadline = time.monotonic() + self.close_timeout
        self._wake.set()
        while self._sent + self.dropped < target and time.monotonic() < deadline:
            self._progress.clear()
            if self._sent + self.dropped >= target:
                break
            self._progress.wait(0.05)

    def close(self) -> None:
        """Delivers what is queued (at most close_timeout s), stops the sender thread and
        says on stderr how many records were not delivered, if any."""
        if not self._closed:
            self._deadline = time.monotonic() + self.close_timeout
            self._closing = True
            self._closed = True
            t = self._thread
            if t is not None and t.is_alive() and t is not threading.current_thread():
                self._wake.set()
                self._stop.set()
                t.join(self.close_timeout + 1.0)
            left = self._enqueued - self._sent - self.dropped
            if left > 0:
                self._say(
                    f"{left} log record(s) not delivered to topic {self.topic} at "
                    f"{self.bootstrap_servers} when the handler closed"
                )
        super().close()

    # ------------------------------------------------------------------ encoding

    def encode(self, record: logging.LogRecord) -> _Encoded:
        """What the handler produces for a record: (key, value, headers, timestamp ms)."""
        if self.layout == "json":
            value = self.format_json(record).encode("utf-8", "replace")
        else:
            value = self.format(record).encode("utf-8", "replace")
        key: bytes | None
        if self.key is None:
            key = None
        elif self.key == "logger":
            key = record.name.encode()
        elif self.key == "level":
            key = record.levelname.encode()
        else:
            k = getattr(record, self.key, None)
            key = None if k is None else str(k).encode()
        pid = record.process
        cached_pid, headers = self._headers_cache
        if cached_pid != pid:
            headers = [("host", self.host.encode()), ("process", str(pid).encode()), *self._static_headers]
            self._headers_cache = (pid, headers)
        return key, value, headers, int(record.created * 1000)

    def format_json(self, record: logging.LogRecord) -> str:
        """One JSON object: record_fields() of the record."""
        fmt = self.formatter or logging.Formatter()
        return self._json_encoder.encode(record_fields(record, fmt.formatException))

    # ------------------------------------------------------------------ the sender thread

    def _say(self, line: str) -> None:
        """One line on stderr, never through logging (which may lead back here)."""
        try:
            stream = sys.stderr
            if stream is not None:
                stream.write(f"broker.applog: {line}\n")
                stream.flush()
        except Exception:
            pass

    def _run(self) -> None:
        self._sender_ident = _get_ident()
        producer: Producer | None = None
        backoff = BACKOFF_MIN_S
        down_since: float | None = None
        last_report = 0.0
        idle_since: float | None = None
        try:
            while True:
                now = time.monotonic()
                unreported = self.dropped > self._reported_full + self._reported_refused
                report_due = unreported and (self._closing or now - last_report >= REPORT_INTERVAL_S)
                if not self._queue and not report_due:
                    if self._closing:
                        break
                    if idle_since is None:
                        idle_since = now
                    if self.linger_s > 0 and now - idle_since < IDLE_POLL_S:
                        # lately busy: look again after linger_ms, so that a logging call
                        # need not wake this thread (a wake-up costs the caller a switch)
                        self._stop.wait(self.linger_s)
                        continue
                    self._idle = True  # idle for a while: the next record wakes it
                    if not self._queue and not self._closing:
                        self._wake.wait(last_report + REPORT_INTERVAL_S - now if unreported else 1.0)
                    self._wake.clear()
                    self._idle = False
                    if self.linger_s > 0 and not self._closing:
                        self._stop.wait(self.linger_s)
                    continue
                idle_since = None
                if self._closing and now > self._deadline:
                    break
                if producer is None:
                    try:
                        producer = self._connect()
                    except _Unreachable as exc:
                        if down_since is None:
                            down_since = time.monotonic()
                            self._say_down(exc)
                        self._pause(backoff)
                        backoff = min(backoff * 2, BACKOFF_MAX_S)
                        continue
                report = self._loss_report() if report_due else None
                chunk = self._take()
                try:
                    self._send(producer, report, chunk)
                except Exception as exc:
                    self._disconnect(producer)
                    producer = None
                    if report is not None:  # to be reported again
                        self._reported_full -= report[1][0]
                        self._reported_refused -= report[1][1]
                    if isinstance(exc, _Unreachable):
                        self._put_back(chunk)
                        if down_since is None:
                            down_since = time.monotonic()
                            self._say_down(exc)
                    else:
                        self._refused += len(chunk)
                        self._inflight = 0
                        why = str(exc) if isinstance(exc, _Refused) else traceback.format_exc().rstrip()
                        self._say(
                            f"{len(chunk)} log record(s) dropped, refused by the broker or failing to send: {why}"
                        )
                    continue
                if down_since is not None:
                    self._say(f"delivering to topic {self.topic} again after {time.monotonic() - down_since:.1f} s")
                    down_since = None
                if report is not None:
                    last_report = time.monotonic()
                    self._say(report[2])
                backoff = BACKOFF_MIN_S
        except Exception:
            self._say("the sender thread failed:\n" + traceback.format_exc().rstrip())
        finally:
            self._inflight = 0
            self._disconnect(producer)
            self._progress.set()

    def _say_down(self, exc: Exception) -> None:
        self._say(
            f"cannot deliver to topic {self.topic} at {self.bootstrap_servers} ({exc}); "
            f"keeping the newest {self.queue_size} records, dropping older ones"
        )

    def _connect(self) -> Producer:
        from broker.client.cluster import Cluster
        from broker.client.connection import ClientError
        from broker.client.producer import Producer
        from broker.protocol.errors import KafkaProtocolError

        cluster = Cluster(self.bootstrap_servers, client_id=self.client_id, timeout=self.request_timeout)
        try:
            # a chunk waits for its acknowledgements request_timeout at most (the producer's
            # own default would retry for Kafka's delivery.timeout.ms, 120 s): then this
            # handler's reconnection and queue take over
            producer = Producer(
                cluster,
                acks=self.acks,
                compression=self.compression,
                batch_size=self.batch_size,
                linger_ms=3600_000,
                timeout_ms=int(self.request_timeout * 1000),
                delivery_timeout_ms=int(self.request_timeout * 1000),
            )
            producer.partitions_of(self.topic)  # metadata (auto-creates where the broker does)
            return producer
        except (ClientError, OSError, KafkaProtocolError) as exc:
            cluster.close()
            raise _Unreachable(str(exc)) from None

    def _disconnect(self, producer: Producer | None) -> None:
        if producer is not None:
            try:
                producer.cluster.close()
            except Exception:
                pass

    def _pause(self, seconds: float) -> None:
        """Waits between connection attempts; close() cuts the wait short, but while
        closing the attempts go on (spaced) until the close deadline."""
        if self._closing:
            time.sleep(max(0.0, min(seconds, self._deadline - time.monotonic())))
        else:
            self._stop.wait(seconds)

    def _take(self) -> list[_Encoded]:
        """Up to CHUNK_RECORDS records (CHUNK_BYTES of values) from the queue, encoded."""
        chunk: list[_Encoded] = []
        size = 0
        q = self._queue
        while len(chunk) < CHUNK_RECORDS and size < CHUNK_BYTES:
            try:
                item = q.popleft()
            except IndexError:
                break
            self._inflight = len(chunk) + 1
            if isinstance(item, tuple):  # encoded already: a chunk that came back
                enc = item
            else:
                try:
                    enc = self.encode(item)
                except Exception:
                    self._refused += 1
                    self.handleError(item)
                    continue
            if len(enc[1]) > self.max_record_bytes:
                self._refused += 1
                self._say(
                    f"a log record of {len(enc[1])} bytes (logger {enc[0]!r}) is larger than "
                    f"max_record_bytes={self.max_record_bytes}: dropped"
                )
                continue
            chunk.append(enc)
            size += len(enc[1])
        self._inflight = len(chunk)
        self._progress.set()
        return chunk

    def _loss_report(self) -> tuple[_Encoded, tuple[int, int], str] | None:
        """The WARNING record that tells the topic how many records were lost since the
        last report, with the counts it covers (queue full, refused) and its message (for
        stderr once it is sent)."""
        full = self._dropped_full + self._dropped_sender - self._reported_full
        refused = self._refused - self._reported_refused
        if full + refused <= 0:
            return None
        self._reported_full += full
        self._reported_refused += refused
        why_full = (
            f"the queue (queue_size={self.queue_size}) was full while the brokers were unreachable or "
            f"slower than the application"
        )
        why_refused = "refused by the broker, larger than max_record_bytes or failing to format"
        if full and refused:
            why = f"{full} because {why_full}, {refused} {why_refused}"
        else:
            why = why_full if full else why_refused
        msg = f"{full + refused} log record(s) dropped: {why}"
        rec = logging.LogRecord("broker.applog", logging.WARNING, __file__, 0, msg, (), None)
        rec.__dict__["dropped"] = full + refused
        return self.encode(rec), (full, refused), msg

    def _send(
        self, producer: Producer, report: tuple[_Encoded, tuple[int, int], str] | None, chunk: list[_Encoded]
    ) -> None:
        """Sends a chunk (after the loss report, if any) and waits for its acknowledgements:
        _Unreachable when the brokers cannot take it now, _Refused when they refuse it."""
        from broker.client.connection import ClientError
        from broker.protocol.errors import KafkaProtocolError
        from broker.protocol.retriable import RETRIABLE

        try:
            if report is not None:
                k, v, h, ts = report[0]
                producer.send(self.topic, v, key=k, headers=h, timestamp=ts)
            for k, v, h, ts in chunk:
                producer.send(self.topic, v, key=k, headers=h, timestamp=ts)
            producer.flush()
        except (ClientError, OSError) as exc:
            raise _Unreachable(str(exc)) from None
        except KafkaProtocolError as exc:
            if exc.code in RETRIABLE:
                raise _Unreachable(str(exc)) from None
            raise _Refused(str(exc)) from None
        self._sent += len(chunk)
        self._inflight = 0
        self._progress.set()

    def _put_back(self, chunk: list[_Encoded]) -> None:
        """A chunk whose delivery failed goes back to the front of the queue; the queue
        then keeps its newest queue_size records."""
        q = self._queue
        q.extendleft(reversed(chunk))
        self._inflight = 0
        while len(q) > self.queue_size:
            try:
                q.popleft()
            except IndexError:
                break
            self._dropped_sender += 1
        self._progress.set()
