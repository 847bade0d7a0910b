# cython: language_level=3
"""Produce (api key 0) in C: the request body decoded into the generated message classes
(broker/protocol/messages/produce.py), and the response encoded with its header and size
prefix, byte for byte what the generated codec writes.

The versions come from Kafka's message definitions, as the generated codec's do:
tools/gen_protocol.py writes include/kb_messages.h (`make protocol`), the versions this
code covers (VERSIONS: 3-12 today, those in which every field it always reads or writes
exists) and the first version of each field it tests, and stops when Produce has a field
this code does not know.

The broker's hot path: a Produce is one request per batch or so (~7,800 per GB of 1 KiB
records from librdkafka), and decoding and encoding it in Python were ~15 us of it.

Both hand back what they do not cover to the generated codec:
- decode_request returns None when a struct carries tagged fields (unknown to Produce
  v9-12: kept by the generated decoder in unknown_tagged_fields);
- encode_response returns None when a partition has record errors, a current leader, or
  any message unknown tagged fields, or the response node endpoints.
decode_request raises ValueError(reason, position, field) on malformed input; the caller
(broker.protocol.codec) turns it into a ProtocolDecodeError.

The direct path of Produce (broker/server/handlers/produce.py direct) reads a request's
header with decode_header, asks first_batch_transactional of each partition's records
(the batch attributes' bit, records.pxd's), and answers appends that all succeeded with
encode_appended, without the generated classes of the response.
"""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int16_t, int32_t, int64_t
from libc.string cimport memcpy
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytearray cimport PyByteArray_FromStringAndSize, PyByteArray_AS_STRING
from cpython.unicode cimport PyUnicode_DecodeUTF8

from broker._native.buffer cimport kb_load_be16, kb_load_be32, kb_read_uvarint, kb_store_be16, \
    kb_store_be32, kb_store_be64, kb_write_uvarint
from broker._native.records cimport ATTR_TRANSACTIONAL, OFF_ATTRIBUTES

cdef extern from "kb_messages.h":
    enum:
        KB_PRODUCE_API_KEY
        KB_PRODUCE_FIRST_FLEXIBLE
        KB_PRODUCE_NATIVE_LOWEST
        KB_PRODUCE_NATIVE_HIGHEST
        KB_PRODUCE_RESPONSE_LOG_START_OFFSET
        KB_PRODUCE_RESPONSE_RECORD_ERRORS
        KB_PRODUCE_RESPONSE_ERROR_MESSAGE
        KB_PRODUCE_RESPONSE_CURRENT_LEADER
        KB_PRODUCE_RESPONSE_NODE_ENDPOINTS

#: the Produce versions this module decodes and encodes (from include/kb_messages.h)
VERSIONS = (KB_PRODUCE_NATIVE_LOWEST, KB_PRODUCE_NATIVE_HIGHEST)

cdef object _Request = None
cdef object _Topic = None
cdef object _Partition = None
cdef object _new = object.__new__


def setup(request_cls, topic_cls, partition_cls):
    """The generated classes decode_request builds (ProduceRequest, its TopicProduceData
    and PartitionProduceData)."""
    global _Request, _Topic, _Partition
    _Request, _Topic, _Partition = request_cls, topic_cls, partition_cls


cdef object _err(str field, Py_ssize_t pos, str reason):
    """ValueError(reason, position, field): broker.protocol.codec makes it a ProtocolDecodeError."""
    return ValueError(reason, pos, field)


cdef class _Reader:
    cdef const uint8_t *p
    cdef Py_ssize_t pos, end

    cdef inline int need(self, Py_ssize_t n, str what) except -1:
        if self.end - self.pos < n:
            raise _err(what, self.pos, f"needs {n} bytes, {self.end - self.pos} left")
        return 0

    cdef int16_t i16(self, str what) except? -1:
        self.need(2, what)
        cdef int16_t v = <int16_t>kb_load_be16(self.p + self.pos)
        self.pos += 2
        return v

    cdef int32_t i32(self, str what) except? -1:
        self.need(4, what)
        cdef int32_t v = <int32_t>kb_load_be32(self.p + self.pos)
        self.pos += 4
        return v

    cdef int64_t length(self, str what) except -2:
        """A length prefix: int16/int32 as the caller says (non-flexible), or a compact
        uvarint minus one (flexible); -1 is null."""
        cdef uint64_t u
        cdef int n
        n = kb_read_uvarint(self.p + self.pos, self.p + self.end, 5, &u)
        if n == 0:
            raise _err(what, self.pos, "truncated or overlong length varint")
        if u > 0x7FFFFFFF:
            raise _err(what, self.pos, f"length {u} is out of range")
        self.pos += n
        return <int64_t>u - 1

    cdef object string(self, int64_t n, str what, bint nullable):
        if n < 0:
            if nullable:                    # any negative length is null (as Kafka reads it)
                return None
            raise _err(what, self.pos, f"null or negative length {n}")
        if n > self.end - self.pos:
            raise _err(what, self.pos, f"string of {n} bytes overruns the frame ({self.end - self.pos} left)")
        try:
            s = PyUnicode_DecodeUTF8(<const char *>(self.p + self.pos), n, NULL)
        except UnicodeDecodeError as exc:
            raise _err(what, self.pos, f"invalid UTF-8: {exc.reason}") from None
        self.pos += n
        return s

    cdef bint no_tags(self, str what) except -1:
        """Flexible versions: True when the tagged-field section is empty (consumed)."""
        cdef int64_t n = self.length(what) + 1
        return n == 0


def decode_request(frame, Py_ssize_t pos, int version):
    """The ProduceRequest (VERSIONS) whose body starts at `pos` of `frame` (the request
    without its size prefix), or None when it carries tagged fields (the generated
    decoder keeps them). Raises ValueError(reason, position, field) when malformed. Records
    are views of `frame`. Bytes after the body are ignored, as the generated decoder does."""
    cdef _Reader r = _Reader()
    cdef Py_buffer view
    cdef int64_t n, nt, nparts, nrec, _i, _j
    cdef bint flex = version >= KB_PRODUCE_FIRST_FLEXIBLE
    if version < KB_PRODUCE_NATIVE_LOWEST or version > KB_PRODUCE_NATIVE_HIGHEST:
        raise _err("ProduceRequest", 0, f"version {version} is not decoded here")
    mv = frame if isinstance(frame, memoryview) else memoryview(frame)
    PyObject_GetBuffer(mv, &view, PyBUF_SIMPLE)
    try:
        r.p = <const uint8_t *>view.buf
        r.end = view.len
        r.pos = pos
        if pos < 0 or pos > r.end:
            raise _err("ProduceRequest", 0, f"body offset {pos} outside a frame of {r.end} bytes")
        o = _new(_Request)
        n = r.length("ProduceRequest.transactional_id") if flex else r.i16("ProduceRequest.transactional_id")
        o.transactional_id = r.string(n, "ProduceRequest.transactional_id", True)
        o.acks = r.i16("ProduceRequest.acks")
        o.timeout_ms = r.i32("ProduceRequest.timeout_ms")
        nt = r.length("ProduceRequest.topic_data") if flex else r.i32("ProduceRequest.topic_data")
        if nt < 0:
            raise _err("ProduceRequest.topic_data", r.pos - 1, "null array")
        if nt * (3 if flex else 6) > r.end - r.pos:        # the least a topic takes
            raise _err("ProduceRequest.topic_data", r.pos, f"{nt} topics overrun the frame")
        topics = []
        for _i in range(nt):
            t = _new(_Topic)
            n = r.length("TopicProduceData.name") if flex else r.i16("TopicProduceData.name")
            t.name = r.string(n, "TopicProduceData.name", False)
            nparts = r.length("TopicProduceData.partition_data") if flex else r.i32("TopicProduceData.partition_data")
            if nparts < 0:
                raise _err("TopicProduceData.partition_data", r.pos - 1, "null array")
            if nparts * (6 if flex else 8) > r.end - r.pos:        # the least a partition takes
                raise _err("TopicProduceData.partition_data", r.pos, f"{nparts} partitions overrun the frame")
            parts = []
            for _j in range(nparts):
                pd = _new(_Partition)
                pd.index = r.i32("PartitionProduceData.index")
                nrec = r.length("PartitionProduceData.records") if flex else r.i32("PartitionProduceData.records")
                if nrec < 0:                # null: any negative length
                    pd.records = None
                else:
                    if nrec > r.end - r.pos:
                        raise _err("PartitionProduceData.records", r.pos,
                                   f"{nrec} bytes overrun the frame ({r.end - r.pos} left)")
                    pd.records = mv[r.pos:r.pos + nrec]
                    r.pos += nrec
                if flex and not r.no_tags("PartitionProduceData._tagged_fields"):
                    return None
                pd.unknown_tagged_fields = []
                parts.append(pd)
            t.partition_data = parts
            if flex and not r.no_tags("TopicProduceData._tagged_fields"):
                return None
            t.unknown_tagged_fields = []
            topics.append(t)
        o.topic_data = topics
        if flex and not r.no_tags("ProduceRequest._tagged_fields"):
            return None
        o.unknown_tagged_fields = []
        return o
    finally:
        PyBuffer_Release(&view)


cdef class _Writer:
    cdef bytearray out
    cdef uint8_t *p
    cdef Py_ssize_t pos, cap

    cdef int reserve(self, Py_ssize_t n) except -1:
        cdef Py_ssize_t cap
        if self.pos + n <= self.cap:
            return 0
        cap = self.cap * 2
        while cap < self.pos + n:
            cap *= 2
        self.out[self.pos:] = b"\0" * (cap - self.pos)     # grows the bytearray (moves it)
        self.p = <uint8_t *>PyByteArray_AS_STRING(self.out)
        self.cap = cap
        return 0

    cdef inline int i16(self, int16_t v) except -1:
        self.reserve(2)
        kb_store_be16(self.p + self.pos, <uint16_t>v)
        self.pos += 2
        return 0

    cdef inline int i32(self, int32_t v) except -1:
        self.reserve(4)
        kb_store_be32(self.p + self.pos, <uint32_t>v)
        self.pos += 4
        return 0

    cdef inline int i64(self, int64_t v) except -1:
        self.reserve(8)
        kb_store_be64(self.p + self.pos, <uint64_t>v)
        self.pos += 8
        return 0

    cdef inline int uvarint(self, uint64_t v) except -1:
        self.reserve(10)
        self.pos += kb_write_uvarint(self.p + self.pos, v)
        return 0

    cdef inline int array(self, Py_ssize_t n, bint flex) except -1:
        """An array's length: int32, or compact (uvarint length + 1)."""
        if flex:
            return self.uvarint(n + 1)
        return self.i32(<int32_t>n)

    cdef int partition(self, int version, int32_t index, int16_t error_code, int64_t base_offset,
                       int64_t log_append_time, int64_t log_start_offset, object error_message) except -1:
        """One PartitionProduceResponse without record errors or a current leader."""
        cdef bint flex = version >= KB_PRODUCE_FIRST_FLEXIBLE
        self.i32(index)
        self.i16(error_code)
        self.i64(base_offset)
        self.i64(log_append_time)
        if version >= KB_PRODUCE_RESPONSE_LOG_START_OFFSET:
            self.i64(log_start_offset)
        if version >= KB_PRODUCE_RESPONSE_RECORD_ERRORS:
            self.array(0, flex)         # no record errors
        if version >= KB_PRODUCE_RESPONSE_ERROR_MESSAGE:
            self.string(error_message, flex)
        if flex:
            self.uvarint(0)
        return 0

    cdef int string(self, object s, bint flex) except -1:
        """A (nullable) string: int16 length, or compact (uvarint length + 1)."""
        cdef bytes b
        cdef Py_ssize_t n
        if s is None:
            if flex:
                return self.uvarint(0)
            return self.i16(-1)
        b = (<str?>s).encode("utf-8")
        n = len(b)
        if flex:
            self.uvarint(n + 1)
        else:
            if n > 0x7FFF:
                raise ValueError(f"string of {n} bytes does not fit an int16 length")
            self.i16(<int16_t>n)
        self.reserve(n)
        memcpy(self.p + self.pos, <const char *>b, n)
        self.pos += n
        return 0


def encode_response(int32_t correlation_id, int version, response):
    """[frame]: `response` (a ProduceResponse, VERSIONS) with its response header and int32
    size prefix, as broker.protocol.codec.encode_response writes it; None when it holds
    what only the generated encoder writes (record errors, a current leader, node
    endpoints, unknown tagged fields)."""
    cdef _Writer w
    cdef bint flex = version >= KB_PRODUCE_FIRST_FLEXIBLE
    if version < KB_PRODUCE_NATIVE_LOWEST or version > KB_PRODUCE_NATIVE_HIGHEST:
        return None
    if response.unknown_tagged_fields or (version >= KB_PRODUCE_RESPONSE_NODE_ENDPOINTS and response.node_endpoints):
        return None
    responses = response.responses
    w = _response_start(correlation_id, flex, len(responses))
    for t in responses:
        if t.unknown_tagged_fields:
            return None
        w.string(t.name, flex)
        parts = t.partition_responses
        w.array(len(parts), flex)
        for pr in parts:
            if pr.unknown_tagged_fields or (version >= KB_PRODUCE_RESPONSE_RECORD_ERRORS and pr.record_errors):
                return None
            if version >= KB_PRODUCE_RESPONSE_CURRENT_LEADER:
                cl = pr.current_leader
                if cl is None or cl.leader_id != -1 or cl.leader_epoch != -1 or cl.unknown_tagged_fields:
                    return None
            w.partition(version, pr.index, pr.error_code, pr.base_offset, pr.log_append_time_ms,
                        pr.log_start_offset, pr.error_message)
        if flex:
            w.uvarint(0)
    return _response_end(w, response.throttle_time_ms, flex)


cdef _Writer _response_start(int32_t correlation_id, bint flex, Py_ssize_t topics):
    """A ProduceResponse's writer, past its size prefix, header and topic count."""
    cdef _Writer w = _Writer()
    w.cap = 64 + 48 * topics
    w.out = PyByteArray_FromStringAndSize(NULL, w.cap)
    w.p = <uint8_t *>PyByteArray_AS_STRING(w.out)
    w.pos = 4
    w.i32(correlation_id)
    if flex:
        w.uvarint(0)                    # response header v1: no tagged fields
    w.array(topics, flex)
    return w


cdef list _response_end(_Writer w, int32_t throttle_time_ms, bint flex):
    """[frame]: the response, its throttle time and tags written, its size prefix set."""
    cdef Py_ssize_t n
    w.i32(throttle_time_ms)
    if flex:
        w.uvarint(0)
    n = w.pos
    kb_store_be32(w.p, <uint32_t>(n - 4))
    del w.out[n:]
    return [w.out]


# ---------------------------------------------------------------------- the direct path
# (broker/server/handlers/produce.py direct): a Produce the broker answers without the
# generic request objects reads its header here and is answered by encode_appended.

def decode_header(frame):
    """The request header of a Produce of VERSIONS (header v1; v2 from the first flexible
    version, whose tagged-field section must be empty): (version, correlation_id,
    client_id, body_offset). None for anything else — another api key or version, tagged
    fields, a short header, a client id that is no UTF-8: the generic decoder reads those,
    and says what is wrong."""
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t n, pos
    cdef int version
    cdef int16_t clen
    PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t *>view.buf
        n = view.len
        if n < 10 or kb_load_be16(p) != KB_PRODUCE_API_KEY:
            return None
        version = kb_load_be16(p + 2)
        if version < KB_PRODUCE_NATIVE_LOWEST or version > KB_PRODUCE_NATIVE_HIGHEST:
            return None
        correlation_id = <int32_t>kb_load_be32(p + 4)
        clen = <int16_t>kb_load_be16(p + 8)
        pos = 10
        if clen == -1:
            client_id = None
        elif clen < 0 or clen > n - pos:
            return None
        else:
            try:
                client_id = PyUnicode_DecodeUTF8(<const char *>(p + pos), clen, NULL)
            except UnicodeDecodeError:
                return None
            pos += clen
        if version >= KB_PRODUCE_FIRST_FLEXIBLE:
            if pos >= n or p[pos] != 0:
                return None
            pos += 1
        return version, correlation_id, client_id, pos
    finally:
        PyBuffer_Release(&view)


def first_batch_transactional(records):
    """Does the first batch of `records` (a partition's records in a Produce) say it is
    transactional? False when they are too short to say (the append refuses them). What
    the produce handler checks of a request without a transactional id, as Kafka's
    RequestUtils.flags: the attributes of the first batch only, nothing decoded."""
    cdef Py_buffer view
    PyObject_GetBuffer(records, &view, PyBUF_SIMPLE)
    try:
        return (view.len >= OFF_ATTRIBUTES + 2
                and (kb_load_be16(<const uint8_t *>view.buf + OFF_ATTRIBUTES) & ATTR_TRANSACTIONAL) != 0)
    finally:
        PyBuffer_Release(&view)


def encode_appended(int32_t correlation_id, int version, list topics, list results):
    """[frame]: the ProduceResponse (VERSIONS) of appends that all succeeded, with its
    response header and int32 size prefix — byte for byte what encode_response writes for
    that response (error code 0, no error message or record errors, no current leader,
    throttle time 0). `topics`: the request's topic_data (each topic's name and its
    partition_data's indexes, in order); `results`: one per partition, in the same order,
    with its base_offset, log_append_time and log_start_offset (ReplicaManager's
    PartitionResult)."""
    cdef _Writer w
    cdef bint flex = version >= KB_PRODUCE_FIRST_FLEXIBLE
    cdef list parts
    cdef Py_ssize_t i = 0, n = len(results)
    if version < KB_PRODUCE_NATIVE_LOWEST or version > KB_PRODUCE_NATIVE_HIGHEST:
        raise ValueError(f"Produce v{version} is not encoded here")
    w = _response_start(correlation_id, flex, len(topics))
    for t in topics:
        w.string(t.name, flex)
        parts = t.partition_data
        w.array(len(parts), flex)
        for p in parts:
            if i >= n:
                raise ValueError(f"{n} results for more partitions")
            r = results[i]
            i += 1
            w.partition(version, p.index, 0, r.base_offset, r.log_append_time, r.log_start_offset, None)
        if flex:
            w.uvarint(0)
    if i != n:
        raise ValueError(f"{n} results for {i} partitions")
    return _response_end(w, 0, flex)
