"""`broker dump-log`: Kafka's DumpLogSegments (kafka-dump-log) on a data dir's files.

    broker dump-log --files DIR/t-0/00000000000000000000.log [--deep-iteration] [--print-data-log]
    broker dump-log DIR/t-0                      # every file of a partition dir, in order
    broker dump-log --index-sanity-check --files ...index,...timeindex
    broker dump-log --offsets-decoder --files DIR/__consumer_offsets-0/00000000000000000000.log
    broker dump-log --transaction-log-decoder --files DIR/__transaction_state-0/00000000000000000000.log

Each file is read with the project's own readers: batches and records with the native
core's iter_batches / RecordBatch (CRC checked per batch), indexes with OffsetIndex /
TimeIndex (their sanity_check is the one the broker runs at load), producer snapshots with
ProducerStateManager.read_snapshot, aborted-transaction indexes with
broker.log.txn_index, checkpoints with broker.log.checkpoints, __consumer_offsets records
with broker.group.records and __transaction_state records with broker.txn.records.

The output is Kafka's, line for line, for .log (batch lines; with --deep-iteration the
`| offset: ...` record lines; with --print-data-log their keys and payloads as UTF-8),
.index / .timeindex (entries, `passed sanity check.`, mismatches on stderr),
.snapshot (producer entries), .txnindex (aborted transactions), --offsets-decoder and
--transaction-log-decoder (keys and values as JSON). Kafka skips
checkpoint files; here they are printed as `topic partition offset` (offset checkpoints),
`epoch start-offset` (leader-epoch-checkpoint) and the topic id (partition.metadata).

Problems are said where they are: a batch whose CRC does not match prints `isvalid:
false`, a structurally corrupt batch stops that file with `corrupt at byte N: ...`, bytes
that hold no whole batch at the end are `Found N invalid bytes at the end of FILE`, index
entries that do not match the log are listed on stderr. Unlike Kafka's tool, the exit
code says whether any was found: 0 all files read clean, 1 a problem found in some file,
2 bad usage (a file that does not exist).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from broker.cli.errors import CliError

TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
INT32_MAX = 2**31 - 1
CHECKPOINTS = (
    "recovery-point-offset-checkpoint",
    "replication-offset-checkpoint",
    "log-start-offset-checkpoint",
    "cleaner-offset-checkpoint",
)
ORDER = {".log": 0, ".index": 1, ".timeindex": 2, ".snapshot": 3, ".txnindex": 4}


class Dumper:
    def __init__(self, args: argparse.Namespace, out=None, err=None):
        self.args = args
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.problems = 0
        #: stderr reports printed after every file, as Kafka does
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.non_consecutive: dict[str, list[tuple[int, int]]] = {}
        self.time_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_out_of_order: dict[str, list[tuple[int, int]]] = {}
        self.time_not_found: dict[str, list[tuple[int, int]]] = {}

    def p(self, line: str = "") -> None:
        self.out.write(line + "\n")

    def problem(self, line: str) -> None:
        self.problems += 1
        self.err.write(line + "\n")

    # ------------------------------------------------------------------ files

    def dump(self, path: Path) -> None:
        self.p(f"Dumping {path}")
        name = path.name
        suffix = path.suffix
        if name in CHECKPOINTS:
            self.dump_offset_checkpoint(path)
        elif name == "leader-epoch-checkpoint":
            self.dump_leader_epochs(path)
        elif name == "partition.metadata":
            self.dump_partition_metadata(path)
        elif suffix == ".log":
            self.dump_log(path)
        elif suffix == ".index":
            self.dump_index(path)
        elif suffix == ".timeindex":
            self.dump_time_index(path)
        elif suffix == ".snapshot":
            self.dump_producer_snapshot(path)
        elif suffix == ".txnindex":
            self.dump_txn_index(path)
        else:
            self.err.write(f"Ignoring unknown file {path}\n")

    def dump_log(self, path: Path) -> None:
        from broker.native import CorruptRecordError, iter_batches

        base = _base_offset(path)
        self.p(f"Log starting offset: {base}")
        data = _read(path)
        if self.args.max_bytes < len(data):
            data = data[: self.args.max_bytes]
        deep = (
            self.args.deep_iteration
            or self.args.print_data_log
            or self.args.offsets_decoder
            or self.args.transaction_log_decoder
        )
        last_offset = -1
        it = iter_batches(data)
        valid = 0
        try:
            for batch in it:
                self.batch_line(batch, valid)
                if deep:
                    last_offset = self.records(path, batch, last_offset)
                valid += batch.size
        except CorruptRecordError as exc:
            where = exc.position if exc.position is not None else valid
            self.problem(f"{path}: corrupt at byte {where}: {exc}")
            return
        trailing = len(data) - valid
        if trailing > 0 and self.args.max_bytes == INT32_MAX:
            self.p(f"Found {trailing} invalid bytes at the end of {path.name}")
            self.problems += 1

    def batch_line(self, batch, position: int) -> None:
        valid = batch.is_valid()
        if not valid:
            self.problems += 1
        last_seq = _sequence(batch.base_sequence, batch.last_offset_delta)
        horizon = f"OptionalLong[{batch.base_timestamp}]" if batch.has_delete_horizon else "OptionalLong.empty"
        self.p(
            f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {batch.record_count} "
            f"baseSequence: {batch.base_sequence} lastSequence: {last_seq} producerId: {batch.producer_id} "
            f"producerEpoch: {batch.producer_epoch} partitionLeaderEpoch: {batch.partition_leader_epoch} "
            f"isTransactional: {_bool(batch.is_transactional)} isControl: {_bool(batch.is_control)} "
            f"deleteHorizonMs: {horizon} position: {position} {TIMESTAMP_TYPES[batch.timestamp_type]}: "
            f"{batch.max_timestamp} size: {batch.size} magic: {batch.magic} "
            f"compresscodec: {batch.compression_name} crc: {batch.crc} isvalid: {_bool(valid)}"
        )

    def records(self, path: Path, batch, last_offset: int) -> int:
        from broker.native import CorruptRecordError

        ts_type = TIMESTAMP_TYPES[batch.timestamp_type]
        try:
            records = batch.records()
        except CorruptRecordError as exc:
            self.problem(
                f"{path}: batch at offset {batch.base_offset} (byte {batch.position}): "
                f"its records cannot be read: {exc}"
            )
            return last_offset
        for r in records:
            if r.offset != last_offset + 1:
                self.non_consecutive.setdefault(str(path.resolve()), []).append((last_offset, r.offset))
            last_offset = r.offset
            line = ""
            if not self.args.skip_record_metadata:
                seq = _sequence(batch.base_sequence, r.offset - batch.base_offset)
                line = (
                    f"| offset: {r.offset} {ts_type}: {r.timestamp} keySize: {_size(r.key)} "
                    f"valueSize: {_size(r.value)} sequence: {seq} "
                    f"headerKeys: [{','.join(k for k, _ in r.headers)}]"
                )
                if batch.is_control:
                    line += _control(r)
            printing = self.args.print_data_log or self.args.offsets_decoder or self.args.transaction_log_decoder
            if printing and not batch.is_control:
                prefix = "| " if self.args.skip_record_metadata else " "
                key, value = self.decode(r)
                if key is not None:
                    line += f"{prefix}key: {key}"
                    prefix = " "
                if value is not None:
                    line += f"{prefix}payload: {value}"
            self.p(line)
        return last_offset

    def decode(self, r) -> tuple[str | None, str | None]:
        if self.args.transaction_log_decoder:
            return decode_transaction_log_record(r.offset, r.key, r.value)
        if not self.args.offsets_decoder:
            return (_text(r.key), _text(r.value))
        return decode_offsets_record(r.offset, r.key, r.value)

    def dump_txn_index(self, path: Path) -> None:
        """Kafka's dumpTxnIndex: one line per aborted transaction."""
        from broker.log.txn_index import ENTRY_SIZE, read_txn_index

        try:
            entries = read_txn_index(str(path))
            size = path.stat().st_size
        except OSError as exc:
            self.problem(f"{path}: {exc}")
            return
        for e in entries:
            self.p(
                f"version: 0 producerId: {e.producer_id} firstOffset: {e.first_offset} "
                f"lastOffset: {e.last_offset} lastStableOffset: {e.last_stable_offset}"
            )
        if size != len(entries) * ENTRY_SIZE:
            self.problem(
                f"{path}: {size - len(entries) * ENTRY_SIZE} bytes after its {len(entries)} "
                f"whole entries (a torn entry or an unknown version)"
            )

    def dump_index(self, path: Path) -> None:
        from broker.native import CorruptIndexError, OffsetIndex, iter_batches

        base = _base_offset(path)
        log_data = _read(path.with_suffix(".log"))
        try:
            index = OffsetIndex(str(path), base, writable=False)
        except (CorruptIndexError, OSError, ValueError) as exc:
            self.problem(f"{path}: {exc}")
            return
        with index:
            if index.entries == 0:
                self.p(f"{path} is empty.")
                return
            if self.args.index_sanity_check:
                try:
                    index.sanity_check()
                except CorruptIndexError as exc:
                    self.problem(f"{path} failed sanity check: {exc}")
                    return
                self.p(f"{path} passed sanity check.")
                return
            for i in range(index.entries):
                offset, position = index.entry(i)
                if offset == base and i > 0:  # preallocated zeros after a crash
                    return
                found = _first_batch_last_offset(log_data, position, iter_batches)
                if found != offset:
                    self.index_mismatches.setdefault(str(path.resolve()), []).append((offset, found))
                if not self.args.verify_index_only:
                    self.p(f"offset: {offset} position: {position}")

    def dump_time_index(self, path: Path) -> None:
        from broker.native import CorruptIndexError, CorruptRecordError, OffsetIndex, TimeIndex, iter_batches

        base = _base_offset(path)
        log_data = _read(path.with_suffix(".log"))
        try:
            tindex = TimeIndex(str(path), base, writable=False)
            index = OffsetIndex(str(path.with_suffix(".index")), base, writable=False)
        except (CorruptIndexError, OSError, ValueError) as exc:
            self.problem(f"{path}: {exc}")
            return
        with tindex, index:
            if self.args.index_sanity_check:
                try:
                    tindex.sanity_check()
                except CorruptIndexError as exc:
                    self.problem(f"{path} failed sanity check: {exc}")
                    return
                self.p(f"{path} passed sanity check.")
                return
            key = str(path.resolve())
            prev = -1
            for i in range(tindex.entries):
                timestamp, offset = tindex.entry(i)
                if offset == base and i > 0:
                    return
                _, position = index.lookup(offset)
                match = None
                try:
                    for b in iter_batches(log_data, position):
                        if b.last_offset >= offset:
                            match = b
                            break
                except CorruptRecordError:
                    pass
                if match is None:
                    self.time_not_found.setdefault(key, []).append((offset, -1))
                elif match.last_offset != offset:
                    self.time_not_found.setdefault(key, []).append((offset, match.last_offset))
                else:
                    max_ts = max((r.timestamp for r in match.records()), default=-1)
                    if max_ts != timestamp:
                        self.time_mismatches.setdefault(key, []).append((timestamp, max_ts))
                    if prev >= timestamp:
                        self.time_out_of_order.setdefault(key, []).append((timestamp, prev))
                if not self.args.verify_index_only:
                    self.p(f"timestamp: {timestamp} offset: {offset}")
                prev = timestamp

    def dump_producer_snapshot(self, path: Path) -> None:
        from broker.log.producer_state import CorruptSnapshot, ProducerStateManager

        try:
            entries = ProducerStateManager.read_snapshot(str(path))
        except CorruptSnapshot as exc:
            self.problem(str(exc))
            return
        for pid, epoch, last_seq, last_offset, offset_delta, ts, coordinator_epoch, txn_first in entries:
            txn = "OptionalLong.empty" if txn_first < 0 else f"OptionalLong[{txn_first}]"
            self.p(
                f"producerId: {pid} producerEpoch: {epoch} coordinatorEpoch: {coordinator_epoch} "
                f"currentTxnFirstOffset: {txn} lastTimestamp: {ts} "
                f"firstSequence: {_sequence(last_seq, -offset_delta)} lastSequence: {last_seq} "
                f"lastOffset: {last_offset} offsetDelta: {offset_delta} timestamp: {ts}"
            )

    def dump_offset_checkpoint(self, path: Path) -> None:
        from broker.log.checkpoints import CheckpointError, OffsetCheckpoint

        try:
            entries = OffsetCheckpoint(str(path)).read()
        except CheckpointError as exc:
            self.problem(str(exc))
            return
        for tp, offset in sorted(entries.items()):
            self.p(f"{tp.topic} {tp.partition} {offset}")

    def dump_leader_epochs(self, path: Path) -> None:
        from broker.log.checkpoints import CheckpointError, LeaderEpochCheckpoint

        try:
            entries = LeaderEpochCheckpoint(str(path)).read()
        except CheckpointError as exc:
            self.problem(str(exc))
            return
        for epoch, start in entries:
            self.p(f"epoch: {epoch} startOffset: {start}")

    def dump_partition_metadata(self, path: Path) -> None:
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            self.problem(f"{path}: {exc}")
            return
        for line in text.splitlines():
            self.p(line)

    def report(self) -> None:
        """Kafka's stderr reports, after every file."""
        for name, pairs in self.index_mismatches.items():
            self.problem(f"Mismatches in :{name}")
            for idx, found in sorted(pairs, reverse=True):
                self.err.write(f"  Index offset: {idx}, log offset: {found}\n")
        for name, pairs in self.time_mismatches.items():
            self.problem(f"Found timestamp mismatch in :{name}")
            for a, b in pairs:
                self.err.write(f"  Index timestamp: {a}, log timestamp: {b}\n")
        for name, pairs in self.time_out_of_order.items():
            self.problem(f"Found out of order timestamp in :{name}")
            for a, b in pairs:
                self.err.write(f"  Index timestamp: {a}, Previously indexed timestamp: {b}\n")
        for pairs in self.time_not_found.values():
            self.problem("The following indexed offsets are not found in the log.")
            for a, b in pairs:
                self.err.write(f"Indexed offset: {a}, found log offset: {b}\n")
        for name, pairs in self.non_consecutive.items():
            # not a problem by itself: a segment not starting at 0, a compacted log
            self.err.write(f"Non-consecutive offsets in {name}\n")
            for a, b in sorted(pairs):
                self.err.write(f"  {a} is followed by {b}\n")


# ---------------------------------------------------------------------- helpers


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _base_offset(path: Path) -> int:
    stem = path.name.split(".", 1)[0]
    if not stem.isdigit():
        raise CliError(f"dump-log: {path}: the file name is no base offset (like 00000000000000000000.log)", 2)
    return int(stem)


def _bool(v: bool) -> str:
    return "true" if v else "false"


def _size(b: bytes | None) -> int:
    return -1 if b is None else len(b)


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


def _sequence(base: int, delta: int) -> int:
    """Kafka's sequence arithmetic: -1 stays -1, past INT32_MAX wraps to 0."""
    if base < 0:
        return base
    s = base + delta
    if s > INT32_MAX:
        s -= INT32_MAX + 1
    elif s < 0:
        s += INT32_MAX + 1
    return s


def _control(r) -> str:
    import struct

    key = r.key or b""
    if len(key) < 4:
        return " controlType: UNKNOWN(-1)"
    _version, ctype = struct.unpack_from(">hh", key)
    if ctype in (0, 1) and r.value is not None and len(r.value) >= 6:
        _v, coordinator_epoch = struct.unpack_from(">hi", r.value)
        return f" endTxnMarker: {'ABORT' if ctype == 0 else 'COMMIT'} coordinatorEpoch: {coordinator_epoch}"
    return f" controlType: UNKNOWN({ctype})"


def _first_batch_last_offset(data: bytes, position: int, iter_batches) -> int:
    if position >= len(data):
        return -1
    try:
        return next(iter(iter_batches(data, position))).last_offset
    except Exception:
        return -1


def _json(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _b64(b: bytes | None) -> str | None:
    import base64

    return None if b is None else base64.b64encode(b).decode()


def _partitions_json(tps) -> list[dict[str, object]]:
    return [{"topic": tp.topic, "partitions": list(tp.partitions)} for tp in tps]


def _subscription_json(data: bytes) -> dict[str, object] | None:
    """A consumer member's subscription as Kafka's ConsumerProtocolSubscriptionJsonConverter
    writes it (None when it does not decode: then the bytes are shown, as Kafka does)."""
    from broker.protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription

    try:
        s, version = ConsumerProtocolSubscription.decode_versioned(data)
    except Exception:
        return None
    out: dict[str, object] = {"topics": list(s.topics), "userData": _b64(s.user_data)}
    if version >= 1:
        out["ownedPartitions"] = _partitions_json(s.owned_partitions)
    if version >= 2:
        out["generationId"] = s.generation_id
    if version >= 3:
        out["rackId"] = s.rack_id
    return out


def _assignment_json(data: bytes) -> dict[str, object] | None:
    from broker.protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment

    try:
        a, _version = ConsumerProtocolAssignment.decode_versioned(data)
    except Exception:
        return None
    return {"assignedPartitions": _partitions_json(a.assigned_partitions), "userData": _b64(a.user_data)}


def decode_offsets_record(offset: int, key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
    """A __consumer_offsets record as Kafka's --offsets-decoder prints it:
    ('{"type":"1","data":{...}}', '{"version":"3","data":{...}}' or '<DELETE>')."""
    import struct

    from broker.group.records import decode_group_value, decode_key, decode_offset_value

    if key is None:
        return (
            f"Error at offset {offset}, skipping. Failed to decode message at offset {offset} "
            f"using the specified decoder (message had a missing key)",
            None,
        )
    try:
        k = decode_key(key)
        if len(k) == 4:
            key_text = _json({"type": "1", "data": {"group": k[1], "topic": k[2], "partition": k[3]}})
        else:
            key_text = _json({"type": "2", "data": {"group": k[1]}})
        if value is None:
            return key_text, "<DELETE>"
        (version,) = struct.unpack_from(">h", value)
        if len(k) == 4:
            o = decode_offset_value(value)
            data: dict[str, object] = {"offset": o.offset}
            if version >= 3:
                data["leaderEpoch"] = o.leader_epoch
            data.update({"metadata": o.metadata, "commitTimestamp": o.commit_timestamp})
            if version == 1:
                data["expireTimestamp"] = o.expire_timestamp
        else:
            g = decode_group_value(value)
            data = {
                "protocolType": g.protocol_type,
                "generation": g.generation,
                "protocol": g.protocol,
                "leader": g.leader,
            }
            if version >= 2:
                data["currentStateTimestamp"] = g.current_state_timestamp
            consumer = g.protocol_type == "consumer"
            data["members"] = [
                {
                    "memberId": m.member_id,
                    **({"groupInstanceId": m.group_instance_id} if version >= 3 else {}),
                    "clientId": m.client_id,
                    "clientHost": m.client_host,
                    **({"rebalanceTimeout": m.rebalance_timeout} if version >= 1 else {}),
                    "sessionTimeout": m.session_timeout,
                    "subscription": (consumer and _subscription_json(m.subscription)) or _b64(m.subscription),
                    "assignment": (consumer and _assignment_json(m.assignment)) or _b64(m.assignment),
                }
                for m in g.members
            ]
        return key_text, _json({"version": str(version), "data": data})
    except (ValueError, struct.error) as exc:
        return f"Error at offset {offset}, skipping. {exc}", None


#: Kafka's TransactionState names by id (what its dump prints for transactionStatus)
_TXN_STATE_NAMES = {
    0: "Empty",
    1: "Ongoing",
    2: "PrepareCommit",
    3: "PrepareAbort",
    4: "CompleteCommit",
    5: "CompleteAbort",
    6: "Dead",
    7: "PrepareEpochFence",
}


def decode_transaction_log_record(offset: int, key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
    """A __transaction_state record as Kafka's --transaction-log-decoder prints it:
    ('{"type":"0","data":{"transactionalId":...}}', '{"version":"0","data":{...}}' or '<DELETE>')."""
    import struct

    from broker.txn.records import decode_key, value_fields

    if key is None:
        return (
            f"Failed to decode message at offset {offset} using the specified decoder (message had a missing key)",
            None,
        )
    try:
        (key_version,) = struct.unpack_from(">h", key)
        if key_version != 0:
            return f"Unknown record type {key_version} at offset {offset}, skipping.", None
        key_text = _json({"type": "0", "data": {"transactionalId": decode_key(key)}})
        if value is None:
            return key_text, "<DELETE>"
        version, data = value_fields(value)
        # Kafka 4.4's parser prints the state's name ("CompleteCommit"), its id as a string
        # when it knows no such state (4.3 printed the number)
        status = data["transactionStatus"]
        data["transactionStatus"] = _TXN_STATE_NAMES.get(status, str(status))
        return key_text, _json({"version": str(version), "data": data})
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        return f"Error at offset {offset}, skipping. {exc}", None


def _expand(paths: list[str]) -> list[Path]:
    """Files as given; a directory stands for its files (segments in offset order, each
    .log before its indexes and snapshot, then the checkpoints)."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files = [f for f in path.iterdir() if f.is_file() and not f.name.endswith((".tmp", ".deleted"))]
            out += sorted(
                files, key=lambda f: (not f.name[:1].isdigit(), f.name.split(".", 1)[0], ORDER.get(f.suffix, 9), f.name)
            )
        elif path.exists():
            out.append(path)
        else:
            raise CliError(f"dump-log: {p}: no such file or directory", 2)
    return out


def cmd_dump_log(args: argparse.Namespace) -> int:
    paths = [f for item in (args.files or []) for f in item.split(",") if f] + (args.paths or [])
    if not paths:
        raise CliError("dump-log: give the files (--files F1,F2 or as arguments)", 2)
    files = _expand(paths)
    d = Dumper(args)
    for f in files:
        d.dump(f)
    d.out.flush()
    d.report()
    return 1 if d.problems else 0


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "dump-log",
        help="print segments, indexes, producer snapshots and checkpoints (Kafka's kafka-dump-log)",
        description="Print the files of a data dir as Kafka's DumpLogSegments "
        "(kafka-dump-log) does: .log batches (and records with --deep-iteration), "
        ".index and .timeindex entries (checked against the log), producer "
        ".snapshot entries, .txnindex aborted transactions, and offset/leader-epoch "
        "checkpoints. A directory "
        "stands for its files. Exit 0: every file read clean; 1: a corrupt batch, "
        "trailing bytes, an index mismatch or a failed sanity check was found "
        "(said where, on stderr or as Kafka prints it); 2: bad usage.",
    )
    p.add_argument("paths", nargs="*", metavar="PATH", help="files or partition directories")
    p.add_argument(
        "--files",
        action="append",
        metavar="F1,F2",
        help="comma-separated files, as Kafka's tool takes them (repeatable)",
    )
    p.add_argument("--deep-iteration", action="store_true", help="print every record, not only the batches")
    p.add_argument(
        "--print-data-log",
        action="store_true",
        help="print each record's key and payload as UTF-8 (implies --deep-iteration)",
    )
    p.add_argument(
        "--skip-record-metadata",
        action="store_true",
        help="with --print-data-log: the key and payload without the record's metadata",
    )
    p.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="decode __consumer_offsets records (keys and values as JSON; implies --print-data-log)",
    )
    p.add_argument(
        "--transaction-log-decoder",
        action="store_true",
        help="decode __transaction_state records (keys and values as JSON; implies --print-data-log)",
    )
    p.add_argument(
        "--index-sanity-check", action="store_true", help="only run the sanity check the broker runs on indexes at load"
    )
    p.add_argument(
        "--verify-index-only", action="store_true", help="check index entries against the log without printing them"
    )
    p.add_argument(
        "--max-bytes", type=int, default=INT32_MAX, metavar="N", help="read only the first N bytes of each .log file"
    )
    p.set_defaults(func=cmd_dump_log)
