"""Reads of offsets held only in remote storage (Kafka's RemoteLogReader).

`RemoteLogReader.read(tp, offset, max_bytes)` answers what Log.read answers for local
offsets, as bytes: whole batches of the remote segment holding `offset`, from the batch
holding it, at most max_bytes (or one whole batch). The segment's offset index (fetched
once, kept for the last INDEX_CACHE_SEGMENTS segments) gives the position to start from;
the bytes come in chunks of `chunk_bytes` kept on local disk, least recently used first
evicted beyond `cache_bytes` (Kafka's remote.log.index.file.cache.total.size.bytes bounds
its index cache the same way), the last HOT_CHUNKS of them in memory too.

Nothing unverified is served: the stored segment's size must be the one its metadata
records, and every batch handed out is checked (CRC-32C, sizes, offsets within the
segment). A missing or damaged object raises RemoteStorageError, which a fetch answers
with KAFKA_STORAGE_ERROR: never wrong bytes, never a crash. Blocking: run it in a worker
thread.
"""

from __future__ import annotations

import bisect
import os
import shutil
import struct
import threading
import uuid
from collections import OrderedDict

from broker.log.log import OffsetOutOfRange
from broker.native import CorruptRecordError, iter_batches
from broker.tier.metadata import RemoteLogMetadataCache, SegmentMetadata
from broker.tier.storage import IndexType, RemoteStorageError, RemoteStorageManager, TopicIdPartition
from broker.uuids import uuid_text

BATCH_OVERHEAD = 12  # base offset and length, before the length counts
MIN_BATCH = 61
INDEX_CACHE_SEGMENTS = 64
HOT_CHUNKS = 4
_HEAD = struct.Struct(">qi")


class RemoteLogReader:
    def __init__(
        self,
        rsm: RemoteStorageManager,
        cache: RemoteLogMetadataCache,
        cache_dir: str,
        cache_bytes: int = 1 << 30,
        chunk_bytes: int = 1 << 20,
    ):
        self.rsm = rsm
        self.metadata = cache
        self.cache_dir = cache_dir
        self.cache_bytes = cache_bytes
        self.chunk_bytes = chunk_bytes
        shutil.rmtree(cache_dir, ignore_errors=True)  # chunks of another run may be stale
        os.makedirs(cache_dir, exist_ok=True)
        self._lock = threading.Lock()
        self._chunks: OrderedDict[tuple[uuid.UUID, int], int] = OrderedDict()
        self._hot: OrderedDict[tuple[uuid.UUID, int], bytes] = OrderedDict()
        self._cached = 0
        self._indexes: OrderedDict[uuid.UUID, tuple[list[int], list[int]]] = OrderedDict()
        self._sizes_checked: set[uuid.UUID] = set()
        self.stats = {"fetched_bytes": 0, "chunk_hits": 0, "chunk_misses": 0, "errors": 0}

    @property
    def cached_bytes(self) -> int:
        return self._cached

    # ------------------------------------------------------------------ chunks

    def _chunk_path(self, sid: uuid.UUID, n: int) -> str:
        return os.path.join(self.cache_dir, f"{uuid_text(sid)}-{n}")

    def _chunk(self, seg: SegmentMetadata, n: int) -> bytes:
        key = (seg.segment_id.id, n)
        path = self._chunk_path(*key)
        with self._lock:
            hot = self._hot.get(key)
            if hot is not None:
                self._hot.move_to_end(key)
                self.stats["chunk_hits"] += 1
                return hot
            hit = key in self._chunks
            if hit:
                self._chunks.move_to_end(key)
        if hit:
            try:
                with open(path, "rb") as f:
                    data = f.read()
                self.stats["chunk_hits"] += 1
                self._keep_hot(key, data)
                return data
            except FileNotFoundError:
                pass  # evicted meanwhile
        start = n * self.chunk_bytes
        end = min(start + self.chunk_bytes, seg.segment_size) - 1
        data = self.rsm.fetch_log_segment(seg.segment_id, seg.start_offset, start, end)
        if len(data) != end - start + 1:
            raise RemoteStorageError(
                f"remote segment {seg.start_offset} of {seg.tp}: bytes {start}-{end} came back as {len(data)} bytes"
            )
        self.stats["chunk_misses"] += 1
        self.stats["fetched_bytes"] += len(data)
        self._store_chunk(key, path, data)
        self._keep_hot(key, data)
        return data

    def _keep_hot(self, key: tuple[uuid.UUID, int], data: bytes) -> None:
        """The last HOT_CHUNKS chunks stay in memory: a consumer reading on takes several
        fetches from each."""
        with self._lock:
            self._hot[key] = data
            while len(self._hot) > HOT_CHUNKS:
                self._hot.popitem(last=False)

    def _store_chunk(self, key: tuple[uuid.UUID, int], path: str, data: bytes) -> None:
        if len(data) > self.cache_bytes:
            return
        tmp = f"{path}.tmp-{threading.get_ident()}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError:
            return  # a cache that cannot be written only costs fetches
        with self._lock:
            if key not in self._chunks:
                self._chunks[key] = len(data)
                self._cached += len(data)
            while self._cached > self.cache_bytes and self._chunks:
                old, size = self._chunks.popitem(last=False)
                self._cached -= size
                try:
                    os.unlink(self._chunk_path(*old))
                except OSError:
                    pass

    def _bytes(self, seg: SegmentMetadata, position: int, length: int, memo: dict[int, bytes]) -> bytes:
        """Bytes [position, position + length) of the segment; `memo` keeps the chunks one
        read has in hand (a read takes many batches from the same chunk)."""
        out = bytearray()
        while length > 0:
            n, skip = divmod(position, self.chunk_bytes)
            chunk = memo.get(n)
            if chunk is None:
                chunk = memo[n] = self._chunk(seg, n)
            piece = chunk[skip : skip + length]
            if not piece:
                break
            out += piece
            position += len(piece)
            length -= len(piece)
        return bytes(out)

    # ------------------------------------------------------------------ index and checks

    def _index(self, seg: SegmentMetadata) -> tuple[list[int], list[int]]:
        sid = seg.segment_id.id
        with self._lock:
            found = self._indexes.get(sid)
            if found is not None:
                self._indexes.move_to_end(sid)
                return found
        raw = self.rsm.fetch_index(seg.segment_id, seg.start_offset, IndexType.OFFSET)
        if len(raw) % 8:
            raise RemoteStorageError(f"remote segment {seg.start_offset} of {seg.tp}: offset index of {len(raw)} bytes")
        offsets: list[int] = []
        positions: list[int] = []
        for rel, pos in struct.iter_unpack(">ii", raw):
            if (offsets and rel <= offsets[-1]) or not 0 <= pos < seg.segment_size:
                raise RemoteStorageError(f"remote segment {seg.start_offset} of {seg.tp}: offset index is damaged")
            offsets.append(rel)
            positions.append(pos)
        with self._lock:
            self._indexes[sid] = (offsets, positions)
            while len(self._indexes) > INDEX_CACHE_SEGMENTS:
                self._indexes.popitem(last=False)
        return offsets, positions

    def _check_size(self, seg: SegmentMetadata) -> None:
        sid = seg.segment_id.id
        if sid in self._sizes_checked:
            return
        stored = self.rsm.segment_size(seg.segment_id, seg.start_offset)
        if stored != seg.segment_size:
            raise RemoteStorageError(
                f"remote segment {seg.start_offset} of {seg.tp} holds {stored} bytes, its metadata {seg.segment_size}"
            )
        self._sizes_checked.add(sid)

    # ------------------------------------------------------------------ read

    def read(
        self,
        tp: TopicIdPartition,
        offset: int,
        max_bytes: int,
        min_one_batch: bool = True,
        max_offset: int | None = None,
    ) -> bytes:
        """Whole batches from the one holding `offset`, up to max_bytes (one whole batch
        at least when min_one_batch), none starting at or after max_offset. Raises
        OffsetOutOfRange when no copied segment holds `offset`, RemoteStorageError when
        the store fails or holds something damaged."""
        seg = self.metadata.segment_for(tp, offset)
        if seg is None:
            raise OffsetOutOfRange(f"{tp}: no remote segment holds offset {offset}")
        try:
            return self._read(seg, offset, max_bytes, min_one_batch, max_offset)
        except RemoteStorageError:
            self.stats["errors"] += 1
            raise

    def _read(
        self, seg: SegmentMetadata, offset: int, max_bytes: int, min_one_batch: bool, max_offset: int | None
    ) -> bytes:
        self._check_size(seg)
        offsets, positions = self._index(seg)
        i = bisect.bisect_right(offsets, offset - seg.start_offset) - 1
        position = positions[i] if i >= 0 else 0
        out = bytearray()
        memo: dict[int, bytes] = {}
        where = f"remote segment {seg.start_offset} of {seg.tp}"
        while position < seg.segment_size:
            head = self._bytes(seg, position, BATCH_OVERHEAD, memo)
            if len(head) < BATCH_OVERHEAD:
                raise RemoteStorageError(f"{where}: truncated batch header at byte {position}")
            base, length = _HEAD.unpack(head)
            size = BATCH_OVERHEAD + length
            if size < MIN_BATCH or position + size > seg.segment_size:
                raise RemoteStorageError(f"{where}: bad batch length {length} at byte {position}")
            if max_offset is not None and base >= max_offset:
                break
            if out and len(out) + size > max_bytes:
                break
            if not out and size > max_bytes and not min_one_batch:
                break
            data = self._bytes(seg, position, size, memo)
            try:
                batch = next(iter_batches(data, validate=True))
            except (CorruptRecordError, StopIteration) as exc:
                raise RemoteStorageError(f"{where}: corrupt batch at byte {position}: {exc}") from None
            if not seg.start_offset <= batch.base_offset <= batch.last_offset <= seg.end_offset:
                raise RemoteStorageError(
                    f"{where}: batch {batch.base_offset}-{batch.last_offset} at byte {position} is outside "
                    f"the segment's offsets {seg.start_offset}-{seg.end_offset}"
                )
            position += size
            if batch.last_offset < offset:
                continue  # before the fetch offset (the index points at or below it)
            out += data
            if len(out) >= max_bytes:
                break
        return bytes(out)
