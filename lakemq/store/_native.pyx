# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The store's per-record loops in C: packing CommitLog records into the mapped file, parsing
them back into the columns dispatch needs, ConsumeQueue entries, IndexFile hashes and entries.

Why compiled: in CPython each record cost about 35 interpreter operations to encode and
several microseconds to dispatch, and put and dispatch share one GIL (docs/NATIVE.md). The
byte formats are :mod:`lakemq.common.record`'s, :mod:`lakemq.store.consume_queue`'s and
:mod:`lakemq.store.index_file`'s; Python keeps the per-run bookkeeping (files, locks,
tables), C the per-record work. The body CRC stays ISA-L's (called once per record).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.pythread cimport (
    NOWAIT_LOCK,
    PyThread_acquire_lock,
    PyThread_allocate_lock,
    PyThread_free_lock,
    PyThread_release_lock,
    PyThread_type_lock,
)
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

cdef extern from "<sched.h>" nogil:
    int sched_yield()

cdef extern from "Python.h":
    int PyUnicode_KIND(object)
    void *PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    Py_UCS4 PyUnicode_READ(int kind, void *data, Py_ssize_t index)
    bint PyBytes_CheckExact(object)
    object PyUnicode_DecodeASCII(const char *s, Py_ssize_t size, const char *errors)

from isal.isal_zlib import crc32 as _crc32

__all__ = ["DispatchBatch", "IndexKeys", "PutMessageSpinLock", "RecordEncoder", "Records", "java_hash",
           "put_index_keys", "scan_records"]

cdef uint32_t MESSAGE_MAGIC = 0xDAA320A7
cdef uint32_t BLANK_MAGIC = 0xCBD43194
cdef enum:
    HEAD_BODY_LEN = 88  # the fixed part and BODYLEN: everything before the body
    RECORD_FIXED = 91
    INDEX_HEADER = 40
    INDEX_ENTRY = 20
    CQ_UNIT = 20
    INT32_MAX = 0x7FFFFFFF


# -- big-endian helpers --------------------------------------------------------------------

cdef inline void _put32(uint8_t *p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v

cdef inline void _put64(uint8_t *p, uint64_t v) noexcept nogil:
    _put32(p, <uint32_t>(v >> 32))
    _put32(p + 4, <uint32_t>v)

cdef inline uint32_t _get32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]

cdef inline int64_t _get64(const uint8_t *p) noexcept nogil:
    return <int64_t>((<uint64_t>_get32(p) << 32) | <uint64_t>_get32(p + 4))


cdef int _copy_ip(uint8_t *to, bytes ip) except -1:
    if len(ip) != 4:
        raise ValueError(f"an IPv4 address is 4 bytes, not {len(ip)}")
    memcpy(to, PyBytes_AS_STRING(ip), 4)
    return 0


cdef int32_t _int32(object value, str name) except? -1:
    cdef long long v = value
    if v < -0x80000000 or v > INT32_MAX:
        raise OverflowError(f"{name} {v} is outside int32")
    return <int32_t>v


# -- Java String.hashCode -----------------------------------------------------------------

cdef inline uint32_t _hash_units(uint32_t h, object text):
    """Continue Java's hashCode over the UTF-16 code units of ``text`` (a str)."""
    cdef int kind = PyUnicode_KIND(text)
    cdef void *data = PyUnicode_DATA(text)
    cdef Py_ssize_t i, n = PyUnicode_GET_LENGTH(text)
    cdef uint32_t c
    for i in range(n):
        c = <uint32_t>PyUnicode_READ(kind, data, i)
        if c > 0xFFFF:  # a surrogate pair in UTF-16
            c -= 0x10000
            h = h * 31 + (0xD800 + (c >> 10))
            h = h * 31 + (0xDC00 + (c & 0x3FF))
        else:
            h = h * 31 + c
    return h


cdef inline uint32_t _hash_utf8(uint32_t h, const uint8_t *p, Py_ssize_t n) except? 0xFFFFFFFF:
    """Continue Java's hashCode over UTF-8 bytes decoded as Python does ("replace")."""
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] >= 0x80:
            return _hash_units(h, PyUnicode_DecodeUTF8(<const char *>p, n, "replace"))
    for i in range(n):
        h = h * 31 + p[i]
    return h


def java_hash(str text) -> int:
    """Java's ``String.hashCode()`` of ``text`` (signed 32 bits)."""
    return <int32_t>_hash_units(0, text)


cdef inline int32_t _index_hash(uint32_t h) noexcept nogil:
    """RocketMQ's indexKeyHashMethod: Math.abs of the hash, 0 for Integer.MIN_VALUE."""
    cdef int32_t s = <int32_t>h
    if s == <int32_t>0x80000000:
        return 0
    return -s if s < 0 else s


# -- the append lock ------------------------------------------------------------------------

cdef class PutMessageSpinLock:
    """The CommitLog's append lock, spinning like RocketMQ's default PutMessageSpinLock. Under
    the GIL a blocking lock forms a convoy: a holder preempted mid-append puts every other
    writer to sleep in the kernel, and each later put pays a futex wake-up. A waiter here
    instead lets go of the GIL and yields the CPU, so the holder finishes its few
    microseconds. Measured with 64 writer threads, async flush: 39k msg/s with
    threading.Lock, 130k spinning (in Python; in C the uncontended enter and exit cost
    0.1 instead of 0.4 us)."""

    cdef PyThread_type_lock lock

    def __cinit__(self):
        self.lock = PyThread_allocate_lock()
        if self.lock == NULL:
            raise MemoryError()

    def __dealloc__(self):
        if self.lock != NULL:
            PyThread_free_lock(self.lock)

    def __enter__(self):
        while not PyThread_acquire_lock(self.lock, NOWAIT_LOCK):
            with nogil:
                sched_yield()

    def __exit__(self, *exc):
        PyThread_release_lock(self.lock)


# -- encoding --------------------------------------------------------------------------------

cdef struct Rec:
    const uint8_t *body
    Py_ssize_t body_len
    const uint8_t *topic_part  # the length byte and the topic
    Py_ssize_t topic_part_len
    const uint8_t *props
    Py_ssize_t props_len
    uint8_t born_ip[4]
    int32_t born_port
    int32_t crc
    int32_t size
    int32_t queue_id
    int32_t flag
    int32_t sys_flag
    int64_t born_ts
    int32_t reconsume
    int64_t prepared
    int64_t queue_offset  # set by Records.write


# A batch this large is packed with the GIL released (dispatch runs meanwhile on the other
# core); a single record is not worth the hand-off.
cdef Py_ssize_t _NOGIL_BYTES = 16 * 1024


cdef void _pack(uint8_t *p, const Rec *recs, Py_ssize_t n, int64_t phy, int64_t now, const uint8_t *store_ip,
                int32_t store_port) noexcept nogil:
    cdef const Rec *r
    cdef Py_ssize_t i
    for i in range(n):
        r = &recs[i]
        _put32(p, <uint32_t>r.size)
        _put32(p + 4, MESSAGE_MAGIC)
        _put32(p + 8, <uint32_t>r.crc)
        _put32(p + 12, <uint32_t>r.queue_id)
        _put32(p + 16, <uint32_t>r.flag)
        _put64(p + 20, <uint64_t>r.queue_offset)
        _put64(p + 28, <uint64_t>phy)
        _put32(p + 36, <uint32_t>r.sys_flag)
        _put64(p + 40, <uint64_t>r.born_ts)
        memcpy(p + 48, r.born_ip, 4)
        _put32(p + 52, <uint32_t>r.born_port)
        _put64(p + 56, <uint64_t>now)
        memcpy(p + 64, store_ip, 4)
        _put32(p + 68, <uint32_t>store_port)
        _put32(p + 72, <uint32_t>r.reconsume)
        _put64(p + 76, <uint64_t>r.prepared)
        _put32(p + 84, <uint32_t>r.body_len)
        p += HEAD_BODY_LEN
        memcpy(p, r.body, r.body_len)
        p += r.body_len
        memcpy(p, r.topic_part, r.topic_part_len)
        p += r.topic_part_len
        p[0] = <uint8_t>(r.props_len >> 8)
        p[1] = <uint8_t>r.props_len
        memcpy(p + 2, r.props, r.props_len)
        p += 2 + r.props_len
        phy += r.size


cdef class Records:
    """Messages checked and measured, ready to be written with their final offsets (:meth:`write`)."""

    cdef Rec *recs
    cdef readonly Py_ssize_t count
    cdef readonly Py_ssize_t total  # bytes of all records
    cdef readonly long long first_queue_offset
    cdef readonly Py_ssize_t body_bytes  # of all messages' bodies
    cdef list refs  # keeps every buffer a Rec points into alive
    cdef list keys  # (topic, queue id) per record, None for a record without a queue offset

    def __dealloc__(self):
        PyMem_Free(self.recs)

    def write(self, mm, Py_ssize_t pos, long long physical_offset, long long now, bytes store_ip,
              int store_port, dict table):
        """Pack every record into ``mm[pos:]`` (CommitLog offset ``physical_offset``) with its queue
        offset from ``table`` ((topic, queue id) -> next offset, advanced here) and store time ``now``."""
        cdef Py_buffer view
        cdef uint8_t *p
        cdef uint8_t ip[4]
        cdef Py_ssize_t i
        cdef long long queue_offset
        cdef object key, last_key = None
        cdef long long last_next = 0
        if len(store_ip) != 4:
            raise ValueError("store ip must be 4 bytes")
        memcpy(ip, PyBytes_AS_STRING(store_ip), 4)
        PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE)
        try:
            if pos < 0 or pos + self.total > view.len:
                raise ValueError(f"{self.total} bytes do not fit at {pos} of {view.len}")
            for i in range(self.count):  # queue offsets: consecutive per queue from the table
                key = self.keys[i]
                queue_offset = 0
                if key is not None:
                    if last_key is not None and key == last_key:
                        queue_offset = last_next
                    else:
                        if last_key is not None:
                            table[last_key] = last_next
                        queue_offset = table.get(key, 0)
                    last_key, last_next = key, queue_offset + 1
                self.recs[i].queue_offset = queue_offset
            if last_key is not None:
                table[last_key] = last_next
            self.first_queue_offset = self.recs[0].queue_offset if self.count else 0
            p = <uint8_t *>view.buf + pos
            if self.total >= _NOGIL_BYTES:
                with nogil:
                    _pack(p, self.recs, self.count, physical_offset, now, ip, store_port)
            else:
                _pack(p, self.recs, self.count, physical_offset, now, ip, store_port)
        finally:
            PyBuffer_Release(&view)

    def msg_ids(self, bytes prefix, long long physical_offset):
        """The offset message ids of the records written at ``physical_offset``, comma-separated:
        ``prefix`` (the store host's 16 hex digits) and each record's offset in 16 hex digits."""
        cdef Py_ssize_t i, j, n = self.count, width = len(prefix) + 16
        cdef bytearray out = bytearray(n * (width + 1) - 1 if n else 0)
        cdef char *o = out
        cdef unsigned long long phy = <unsigned long long>physical_offset
        cdef const char *digits = b"0123456789ABCDEF"
        for i in range(n):
            memcpy(o, PyBytes_AS_STRING(prefix), len(prefix))
            for j in range(16):
                o[len(prefix) + j] = digits[(phy >> (4 * (15 - j))) & 0xF]
            if i + 1 < n:
                o[width] = b','
            o += width + 1
            phy += <unsigned long long>self.recs[i].size
        return PyUnicode_DecodeASCII(out, len(out), NULL)


cdef enum:
    MAX_PAIRS = 64


cdef bint _plain_pairs(const uint8_t *p, Py_ssize_t n, const uint8_t *suffix, Py_ssize_t suffix_key) noexcept:
    """True when ``p[:n]`` is what properties_to_string writes for distinct names: every
    pair ``name\\x01value\\x02`` with one \\x01, a non-empty name, none named DELAY or like
    ``suffix[:suffix_key]`` or TRAN_MSG, and no WAIT=false. Then appending the suffix equals setting that property."""
    cdef Py_ssize_t start = 0, i, k, sep, pairs = 0, key_len
    cdef Py_ssize_t key_at[MAX_PAIRS]
    cdef Py_ssize_t key_n[MAX_PAIRS]
    if n == 0:
        return True
    if p[n - 1] != 2:
        return False
    while start < n:
        sep = -1
        i = start
        while p[i] != 2:
            if p[i] == 1:
                if sep >= 0:
                    return False  # a second \x01: not a plain pair
                sep = i
            i += 1
        key_len = sep - start
        if sep < 0 or key_len == 0 or pairs == MAX_PAIRS:
            return False
        if key_len == 5 and memcmp(p + start, b"DELAY", 5) == 0:
            return False
        if key_len == 8 and memcmp(p + start, b"TRAN_MSG", 8) == 0:
            return False  # a transaction's half: the broker rewrites it
        # WAIT=false: the put would not wait for the flush; rare, left to the exact path
        if key_len == 4 and i - sep == 6 and memcmp(p + start, b"WAIT\x01false", 10) == 0:
            return False
        if key_len == suffix_key and memcmp(p + start, suffix, suffix_key) == 0:
            return False
        for k in range(pairs):
            if key_n[k] == key_len and memcmp(p + key_at[k], p + start, key_len) == 0:
                return False
        key_at[pairs] = start
        key_n[pairs] = key_len
        pairs += 1
        start = i + 1
    return True


cdef Py_ssize_t _suffix_key(bytes suffix) except -1:
    """The length of the name in ``suffix``, one ``name\\x01value\\x02`` pair."""
    cdef const uint8_t *sp = <const uint8_t *>PyBytes_AS_STRING(suffix)
    cdef Py_ssize_t n = 0, slen = PyBytes_GET_SIZE(suffix)
    while n < slen and sp[n] != 1:
        n += 1
    if n == 0 or n >= slen or sp[slen - 1] != 2:
        raise ValueError("suffix must be one name\\x01value\\x02 pair")
    return n


cdef Records _new_records(Py_ssize_t n, list refs):
    """Room for ``n`` records; ``refs`` keeps the buffers they will point into alive."""
    cdef Records out = Records.__new__(Records)
    out.refs = refs
    out.keys = []
    out.recs = <Rec *>PyMem_Malloc(max(n, 1) * sizeof(Rec))
    if out.recs == NULL:
        raise MemoryError()
    out.count = n
    out.total = 0
    out.body_bytes = 0
    return out


cdef class RecordEncoder:
    """Checks and measures messages for one CommitLog. The common case (known topic and born
    host, known sys flag bits, within the limits) is done here; anything else goes through
    ``slow(msg)``, which returns the record's parts or a refusal (a PutMessageResult)."""

    cdef set valid_topics
    cdef dict topic_parts, born_hosts
    cdef Py_ssize_t max_body, max_props, max_size
    cdef object properties_to_string

    def __init__(self, set valid_topics, dict topic_parts, dict born_hosts, Py_ssize_t max_body,
                 Py_ssize_t max_props, Py_ssize_t max_size, properties_to_string):
        self.valid_topics = valid_topics
        self.topic_parts = topic_parts
        self.born_hosts = born_hosts
        self.max_body = max_body
        self.max_props = max_props
        self.max_size = max_size
        self.properties_to_string = properties_to_string

    def gather(self, msgs, slow, long long refused_bits, bint check_delay):
        """Records for ``msgs`` or the first refusal ``slow`` returned. Messages with any of
        ``refused_bits`` in their sys flag, and with ``check_delay`` those with a DELAY
        property, go to ``slow`` too. Raises OverflowError for a field outside its slot."""
        cdef Py_ssize_t n = len(msgs), i
        cdef Records out = _new_records(n, [])
        cdef Rec *r
        cdef object msg, topic, body, props, born, topic_part, parts
        cdef const char *props_ptr
        cdef Py_ssize_t props_len, size
        cdef object queue_id
        cdef int sys_flag
        for i in range(n):
            msg = msgs[i]
            r = &out.recs[i]
            topic = msg.topic
            sys_flag = _int32(msg.sys_flag, "sys flag")
            body = msg.body
            queue_id = msg.queue_id
            size = props_len = 0
            props_ptr = NULL
            props = born = topic_part = None
            if (topic in self.valid_topics and not (sys_flag & refused_bits)
                    and (not check_delay or "DELAY" not in msg.properties) and PyBytes_CheckExact(body)):
                props = msg.properties_string or self.properties_to_string(msg.properties)
                props_ptr = PyUnicode_AsUTF8AndSize(props, &props_len)
                born = self.born_hosts.get(msg.born_host)
                topic_part = self.topic_parts.get(topic)
                if (born is not None and topic_part is not None and PyBytes_GET_SIZE(body) <= self.max_body
                        and props_len <= self.max_props and 0 <= queue_id <= INT32_MAX):
                    size = (RECORD_FIXED - 1 + PyBytes_GET_SIZE(body) + PyBytes_GET_SIZE(topic_part)
                            + props_len)
                    if size > self.max_size:
                        size = 0
            if size:
                r.crc = <int32_t>(<uint32_t>_crc32(body) & INT32_MAX)
                _copy_ip(r.born_ip, born[0])
                r.born_port = _int32(born[1], "born port")
                out.refs.append(props)
                out.refs.append(body)
            else:  # the exact answer off the common path (a new topic or born host, a limit)
                parts = slow(msg)
                if type(parts) is not tuple:  # a refusal (PutMessageResult, a NamedTuple)
                    return parts
                size = parts[0]
                r.crc = parts[1]
                _copy_ip(r.born_ip, parts[2])
                r.born_port = _int32(parts[3], "born port")
                body, topic_part, props = parts[4], parts[5], parts[7]
                if not PyBytes_CheckExact(body):
                    body = bytes(body)
                    parts = (parts, body)
                props_ptr = PyBytes_AS_STRING(props)
                props_len = PyBytes_GET_SIZE(props)
                queue_id = msg.queue_id
                sys_flag = _int32(msg.sys_flag, "sys flag")
                out.refs.append(parts)
            out.refs.append(topic_part)
            r.size = <int32_t>size
            r.body = <const uint8_t *>PyBytes_AS_STRING(body)
            r.body_len = PyBytes_GET_SIZE(body)
            r.topic_part = <const uint8_t *>PyBytes_AS_STRING(topic_part)
            r.topic_part_len = PyBytes_GET_SIZE(topic_part)
            r.props = <const uint8_t *>props_ptr
            r.props_len = props_len
            r.queue_id = <int32_t>queue_id
            r.flag = _int32(msg.flag, "flag")
            r.sys_flag = sys_flag
            r.born_ts = msg.born_timestamp
            r.reconsume = _int32(msg.reconsume_times, "reconsume times")
            r.prepared = msg.prepared_transaction_offset
            # prepared and rollback records take no queue offset (they get no ConsumeQueue entry)
            out.keys.append((topic, queue_id) if (sys_flag & 0xC) != 0x4 and (sys_flag & 0xC) != 0xC else None)
            out.total += size
            out.body_bytes += r.body_len
        return out

    def gather_batch(self, bytes data, str topic, int queue_id, int sys_flag, long long born_ts, str born_host,
                     int reconsume, bytes suffix):
        """Records straight from a SEND_BATCH_MESSAGE body as the producer encoded it
        (MessageDecoder.encodeMessages: TOTALSIZE 4, MAGIC 4, CRC 4, FLAG 4, BODYLEN 4, BODY,
        PROPLEN 2, PROPERTIES per message), every record's properties followed by ``suffix``
        (one ``name\\x01value\\x02`` pair): no message objects, as RocketMQ's batch encoder.
        Returns None for anything off the common path: an unknown topic or born host, a
        malformed entry, a limit, properties that are not plain distinct name/value pairs in
        UTF-8, a DELAY, TRAN_MSG or WAIT=false property, or the suffix's name already present.
        The caller then takes the path through message objects, which refuses or handles each
        of those exactly."""
        cdef const uint8_t *b = <const uint8_t *>PyBytes_AS_STRING(data)
        cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
        cdef Py_ssize_t pos = 0, n = 0, i, total, body_len, plen, suffix_key
        cdef Records out
        cdef Rec head
        cdef object topic_part = self._plain_head(topic, queue_id, sys_flag, born_ts, born_host, reconsume, &head)
        if topic_part is None:
            return None
        suffix_key = _suffix_key(suffix)
        while pos < size:  # count and check the framing
            if size - pos < 22:
                return None
            total = <int32_t>_get32(b + pos)
            body_len = <int32_t>_get32(b + pos + 16)
            if total < 22 or total > size - pos or body_len < 0 or 22 + body_len > total:
                return None
            plen = (b[pos + 20 + body_len] << 8) | b[pos + 21 + body_len]
            if 22 + body_len + plen != total:  # also a negative (high bit set) length
                return None
            pos += total
            n += 1
        if n == 0:
            return None
        out = _new_records(n, [data, topic_part])
        key = (topic, queue_id)
        pos = 0
        for i in range(n):
            total = <int32_t>_get32(b + pos)
            body_len = <int32_t>_get32(b + pos + 16)
            if not self._plain_record(out, &out.recs[i], &head, <int32_t>_get32(b + pos + 12), b + pos + 20, body_len,
                                      b + pos + 22 + body_len, total - 22 - body_len, True, suffix, suffix_key,
                                      topic_part, key):
                return None
            pos += total
        return out

    def gather_one(self, bytes body, str properties, str topic, int queue_id, int flag, int sys_flag,
                   long long born_ts, str born_host, int reconsume, bytes suffix, long long refused_bits):
        """One plain message as a send request carries it (body, properties text), stored with
        ``suffix`` appended to its properties and no message object: gather_batch's rules
        for one message (None for anything off the common path; the caller then builds the
        message), and None for a sys flag with any of ``refused_bits``."""
        cdef Records out
        cdef Py_ssize_t plen
        cdef const char *pp
        cdef Rec head
        cdef object topic_part
        if sys_flag & refused_bits:
            return None
        topic_part = self._plain_head(topic, queue_id, sys_flag, born_ts, born_host, reconsume, &head)
        if topic_part is None:
            return None
        try:
            pp = PyUnicode_AsUTF8AndSize(properties, &plen)
        except UnicodeEncodeError:
            return None
        out = _new_records(1, [body, properties, topic_part])
        if not self._plain_record(out, &out.recs[0], &head, flag, <const uint8_t *>PyBytes_AS_STRING(body),
                                  PyBytes_GET_SIZE(body), <const uint8_t *>pp, plen, False, suffix,
                                  _suffix_key(suffix), topic_part, (topic, queue_id)):
            return None
        return out

    cdef object _plain_head(self, str topic, int queue_id, int sys_flag, long long born_ts, str born_host,
                            int reconsume, Rec *head):
        """What the messages of one request share, into ``head``; returns the topic's encoded
        part, or None when the topic, the born host or the queue is off the plain path."""
        if topic not in self.valid_topics or queue_id < 0:
            return None
        born = self.born_hosts.get(born_host)
        topic_part = self.topic_parts.get(topic)
        if born is None or topic_part is None:
            return None
        _copy_ip(head.born_ip, born[0])
        head.born_port = _int32(born[1], "born port")
        head.queue_id = queue_id
        head.sys_flag = sys_flag
        head.born_ts = born_ts
        head.reconsume = reconsume
        head.prepared = 0
        return topic_part

    cdef int _plain_record(self, Records out, Rec *r, const Rec *head, int32_t flag, const uint8_t *body,
                           Py_ssize_t body_len, const uint8_t *pp, Py_ssize_t plen, bint check_utf8, bytes suffix,
                           Py_ssize_t suffix_key, bytes topic_part, tuple key) except -1:
        """``r`` = ``head`` with this message's flag, size, body, CRC, topic and properties
        (``pp[:plen]`` + ``suffix``), counted in ``out``; 0 when the message is off the plain path."""
        cdef Py_ssize_t slen = PyBytes_GET_SIZE(suffix), rec_size
        cdef object props
        if body_len > self.max_body or plen + slen > self.max_props:
            return 0
        if not _plain_pairs(pp, plen, <const uint8_t *>PyBytes_AS_STRING(suffix), suffix_key):
            return 0
        if check_utf8:
            try:
                PyUnicode_DecodeUTF8(<const char *>pp, plen, NULL)
            except UnicodeDecodeError:
                return 0
        rec_size = RECORD_FIXED - 1 + body_len + PyBytes_GET_SIZE(topic_part) + plen + slen
        if rec_size > self.max_size:
            return 0
        props = PyBytes_FromStringAndSize(NULL, plen + slen)
        memcpy(PyBytes_AS_STRING(props), pp, plen)
        memcpy(PyBytes_AS_STRING(props) + plen, PyBytes_AS_STRING(suffix), slen)
        out.refs.append(props)
        r[0] = head[0]
        r.flag = flag
        r.size = <int32_t>rec_size
        r.body = body
        r.body_len = body_len
        r.crc = <int32_t>(<uint32_t>_crc32(PyMemoryView_FromMemory(<char *>body, body_len, 0x100)) & INT32_MAX)
        r.topic_part = <const uint8_t *>PyBytes_AS_STRING(topic_part)
        r.topic_part_len = PyBytes_GET_SIZE(topic_part)
        r.props = <const uint8_t *>PyBytes_AS_STRING(props)
        r.props_len = plen + slen
        out.keys.append(key)
        out.total += rec_size
        out.body_bytes += body_len
        return 1


cdef class IndexKeys:
    """IndexFile keys to add, in CommitLog order: hash, CommitLog offset, store time."""

    cdef int32_t *hashes
    cdef int64_t *phys
    cdef int64_t *timestamps
    cdef readonly Py_ssize_t count

    def __dealloc__(self):
        PyMem_Free(self.hashes)
        PyMem_Free(self.phys)
        PyMem_Free(self.timestamps)

    cdef int _reserve(self, Py_ssize_t n) except -1:
        n = max(n, 1)
        self.hashes = <int32_t *>PyMem_Malloc(n * sizeof(int32_t))
        self.phys = <int64_t *>PyMem_Malloc(n * sizeof(int64_t))
        self.timestamps = <int64_t *>PyMem_Malloc(n * sizeof(int64_t))
        if self.hashes == NULL or self.phys == NULL or self.timestamps == NULL:
            raise MemoryError()
        return 0

    @staticmethod
    def of(list keys, list phys, list timestamps):
        """Keys (strs) hashed here, with their CommitLog offsets and store times."""
        cdef IndexKeys out = IndexKeys.__new__(IndexKeys)
        cdef Py_ssize_t i, n = len(keys)
        if len(phys) != n or len(timestamps) != n:
            raise ValueError("keys, offsets and timestamps differ in length")
        out._reserve(n)
        for i in range(n):
            out.hashes[i] = _index_hash(_hash_units(0, <str?>keys[i]))
            out.phys[i] = phys[i]
            out.timestamps[i] = timestamps[i]
        out.count = n
        return out

    def __len__(self):
        return self.count

    def phy(self, Py_ssize_t i):
        return self.phys[i]

    def timestamp(self, Py_ssize_t i):
        return self.timestamps[i]


# -- dispatch: parsing records -------------------------------------------------------------

cdef struct Parsed:
    int64_t phy
    int32_t size
    int32_t queue_id
    int64_t queue_offset
    int64_t tags_code
    int64_t store_ts
    int64_t born_ts
    int32_t sys_flag
    int64_t prepared
    Py_ssize_t topic  # index into DispatchBatch.topics
    Py_ssize_t props_pos  # into the scanned buffer
    Py_ssize_t props_len
    Py_ssize_t keys_pos  # the KEYS value, -1 when absent
    Py_ssize_t keys_len
    Py_ssize_t uniq_pos  # the UNIQ_KEY value, -1 when absent
    Py_ssize_t uniq_len
    Py_ssize_t first_key  # this record's index keys are keys[first_key:first_key + key_count]
    Py_ssize_t key_count


cdef struct Prop:
    Py_ssize_t pos
    Py_ssize_t length


cdef struct Group:  # one queue's state while its ConsumeQueue runs are formed
    uint64_t key
    Py_ssize_t run
    int64_t last_queue_offset
    int64_t last_end


cdef struct Run:
    Py_ssize_t topic
    int32_t queue_id
    int64_t first_queue_offset
    Py_ssize_t count
    uint8_t *cursor


cdef inline bint _name_is(const uint8_t *p, Py_ssize_t n, const char *name,
                          Py_ssize_t name_len) noexcept nogil:
    return n == name_len and memcmp(p, name, n) == 0


cdef dict _topic_cache = {}
cdef Py_ssize_t _CACHE_MAX = 65_536


cdef class DispatchBatch:
    """Consecutive CommitLog records read by :func:`scan_records`, as columns. ``stop`` says why
    the scan ended: 1 count or data exhausted, 0 a blank record (the file's end), -1 a bad one."""

    cdef Parsed *recs
    cdef Py_ssize_t cap
    cdef readonly Py_ssize_t count
    cdef readonly Py_ssize_t end_pos
    cdef readonly int stop
    cdef readonly list topics
    cdef int32_t *key_hashes  # IndexFile hash of topic#key for every index key, records in order
    cdef Py_ssize_t key_count, key_cap
    cdef object buf  # the scanned bytes, for requests()

    def __dealloc__(self):
        PyMem_Free(self.recs)
        PyMem_Free(self.key_hashes)

    cdef int _add_key(self, int32_t h) except -1:
        cdef void *grown
        if self.key_count == self.key_cap:
            self.key_cap = max(64, self.key_cap * 2)
            grown = PyMem_Realloc(self.key_hashes, self.key_cap * sizeof(int32_t))
            if grown == NULL:
                raise MemoryError()
            self.key_hashes = <int32_t *>grown
        self.key_hashes[self.key_count] = h
        self.key_count += 1
        return 0

    def __len__(self):
        return self.count

    def consume_queue_runs(self):
        """The ConsumeQueue entries of the records that get one (neither prepared nor rolled
        back), as runs: (topic, queue id, first queue offset, packed 20-byte entries), each
        run one queue's entries with consecutive queue offsets and rising CommitLog offsets,
        in CommitLog order within a queue. Also the store time of the last such record (None: none)."""
        cdef Py_ssize_t i, g, run, n_runs = 0, n_groups = 0, mask = 1
        cdef Parsed *r
        cdef uint64_t key
        cdef Group *grp
        cdef list out = [], packed = []
        cdef Py_ssize_t last = -1  # the last record given an entry
        while mask < 2 * self.count:
            mask <<= 1
        cdef Py_ssize_t *slots = <Py_ssize_t *>PyMem_Malloc(mask * sizeof(Py_ssize_t))
        cdef Group *groups = <Group *>PyMem_Malloc(max(self.count, 1) * sizeof(Group))
        cdef Run *runs = <Run *>PyMem_Malloc(max(self.count, 1) * sizeof(Run))
        cdef Py_ssize_t *rec_run = <Py_ssize_t *>PyMem_Malloc(max(self.count, 1) * sizeof(Py_ssize_t))
        mask -= 1
        try:
            if slots == NULL or groups == NULL or runs == NULL or rec_run == NULL:
                raise MemoryError()
            for i in range(mask + 1):
                slots[i] = -1
            for i in range(self.count):
                r = &self.recs[i]
                rec_run[i] = -1
                if (r.sys_flag & 0xC) == 0x4 or (r.sys_flag & 0xC) == 0xC:
                    continue
                last = i
                # the record's queue: open addressing over (topic index, queue id)
                key = (<uint64_t>r.topic << 32) | <uint32_t>r.queue_id  # a damaged record's id may be < 0
                g = <Py_ssize_t>((key * 0x9E3779B97F4A7C15) >> 40) & mask
                while slots[g] >= 0 and groups[slots[g]].key != key:
                    g = (g + 1) & mask
                if slots[g] < 0:
                    slots[g] = n_groups
                    groups[n_groups].key = key
                    groups[n_groups].run = -1
                    n_groups += 1
                grp = &groups[slots[g]]
                if grp.run < 0 or r.queue_offset != grp.last_queue_offset + 1 or r.phy + r.size <= grp.last_end:
                    grp.run = n_runs
                    runs[n_runs].topic = r.topic
                    runs[n_runs].queue_id = r.queue_id
                    runs[n_runs].first_queue_offset = r.queue_offset
                    runs[n_runs].count = 0
                    n_runs += 1
                grp.last_queue_offset = r.queue_offset
                grp.last_end = r.phy + r.size
                rec_run[i] = grp.run
                runs[grp.run].count += 1
            for run in range(n_runs):
                units = PyBytes_FromStringAndSize(NULL, runs[run].count * CQ_UNIT)
                packed.append(units)
                runs[run].cursor = <uint8_t *>PyBytes_AS_STRING(units)
            for i in range(self.count):
                run = rec_run[i]
                if run >= 0:
                    r = &self.recs[i]
                    _put64(runs[run].cursor, <uint64_t>r.phy)
                    _put32(runs[run].cursor + 8, <uint32_t>r.size)
                    _put64(runs[run].cursor + 12, <uint64_t>r.tags_code)
                    runs[run].cursor += CQ_UNIT
            for run in range(n_runs):
                out.append((self.topics[runs[run].topic], runs[run].queue_id, runs[run].first_queue_offset,
                            packed[run]))
        finally:
            PyMem_Free(slots)
            PyMem_Free(groups)
            PyMem_Free(runs)
            PyMem_Free(rec_run)
        return out, self.recs[last].store_ts if last >= 0 else None

    def index_keys(self, long long last_indexed):
        """The IndexFile keys (UNIQ_KEY first, then each of KEYS) of the records after
        CommitLog offset ``last_indexed`` that are not rolled back."""
        cdef IndexKeys keys = IndexKeys.__new__(IndexKeys)
        cdef Py_ssize_t i, j, n = 0
        cdef Parsed *r
        keys._reserve(self.key_count)
        for i in range(self.count):
            r = &self.recs[i]
            if (r.sys_flag & 0xC) == 0xC or r.phy <= last_indexed:
                continue
            for j in range(r.first_key, r.first_key + r.key_count):
                keys.hashes[n] = self.key_hashes[j]
                keys.phys[n] = r.phy
                keys.timestamps[n] = r.store_ts
                n += 1
        keys.count = n
        return keys

    def arrivals(self):
        """(topic, queue id, queue offset after the record, tags code, store time) of every
        record that gets a ConsumeQueue entry, in CommitLog order: what long polling is told,
        with no properties parsed."""
        cdef Py_ssize_t i
        cdef Parsed *r
        cdef list out = []
        for i in range(self.count):
            r = &self.recs[i]
            if (r.sys_flag & 0xC) == 0x4 or (r.sys_flag & 0xC) == 0xC:
                continue
            out.append((self.topics[r.topic], r.queue_id, r.queue_offset + 1, r.tags_code, r.store_ts))
        return out

    def requests(self, request_type, properties_of):
        """One ``request_type`` (DispatchRequest) per record, with its properties parsed by
        ``properties_of(text)``; for dispatchers that take records one at a time."""
        cdef Py_buffer view
        cdef Parsed *r
        cdef Py_ssize_t i
        cdef list out = []
        cdef const char *base
        PyObject_GetBuffer(self.buf, &view, PyBUF_SIMPLE)
        try:
            base = <const char *>view.buf
            for i in range(self.count):
                r = &self.recs[i]
                props = properties_of(PyUnicode_DecodeUTF8(base + r.props_pos, r.props_len, "replace"))
                keys = (PyUnicode_DecodeUTF8(base + r.keys_pos, r.keys_len, "replace")
                        if r.keys_pos >= 0 else "")
                uniq = (PyUnicode_DecodeUTF8(base + r.uniq_pos, r.uniq_len, "replace")
                        if r.uniq_pos >= 0 else None)
                out.append(request_type(r.size, True, self.topics[r.topic], r.queue_id, r.phy, r.tags_code,
                                        r.store_ts, r.queue_offset, keys, uniq, r.sys_flag, r.prepared,
                                        r.born_ts, props))
        finally:
            PyBuffer_Release(&view)
        return out


cdef inline int _blank_or_bad(const uint8_t *p) noexcept nogil:
    return 0 if _get32(p + 4) == BLANK_MAGIC and <int32_t>_get32(p) > 0 else -1


def scan_records(buf, Py_ssize_t pos, long long physical_offset, Py_ssize_t max_count, *,
                 bint check_crc=False, delay_tags_code=None):
    """Up to ``max_count`` consecutive good records from ``buf[pos]`` (at CommitLog offset
    ``physical_offset``), checked as :func:`lakemq.common.record.check_record` checks them.
    ``delay_tags_code(level, store_timestamp)`` gives the tags code of a SCHEDULE_TOPIC_XXXX
    record with a DELAY property (None: its TAGS hash stays)."""
    cdef DispatchBatch out = DispatchBatch.__new__(DispatchBatch)
    cdef Py_buffer view
    cdef const uint8_t *b
    cdef const uint8_t *q
    cdef Py_ssize_t end, size, body_len, topic_pos, topic_len, props_pos, props_len, record_end
    cdef Py_ssize_t k, item, sep, stop_at, key_start
    cdef long long base = physical_offset - pos
    cdef Parsed *r
    cdef Prop tags, keys, uniq, delay
    cdef uint32_t prefix
    cdef object topic, raw, code
    cdef list topic_hashes = []  # Java hash state after "topic#", per topic index
    cdef dict topic_index = {}
    cdef const uint8_t *last_topic = NULL
    cdef Py_ssize_t last_topic_len = -1, last_topic_idx = -1
    cdef void *grown
    out.buf = buf
    out.topics = []
    out.stop = 1
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <const uint8_t *>view.buf
        end = view.len
        out.recs = <Parsed *>PyMem_Malloc(max(min(max_count, 4096), 1) * sizeof(Parsed))
        if out.recs == NULL:
            raise MemoryError()
        out.cap = max(min(max_count, 4096), 1)
        while out.count < max_count:
            if pos + HEAD_BODY_LEN > end:  # too short for a message: a blank record, or the data's end
                if pos + 8 <= end:
                    out.stop = _blank_or_bad(b + pos)
                break
            q = b + pos
            if _get32(q + 4) != MESSAGE_MAGIC:
                out.stop = _blank_or_bad(q)
                break
            size = <int32_t>_get32(q)
            body_len = <int32_t>_get32(q + 84)
            record_end = pos + size
            topic_pos = pos + HEAD_BODY_LEN + body_len
            if (size < RECORD_FIXED or record_end > end or body_len < 0 or topic_pos + 3 > record_end
                    or _get64(q + 28) != base + pos):
                out.stop = -1
                break
            topic_len = b[topic_pos]
            props_pos = topic_pos + 1 + topic_len
            if props_pos + 2 > record_end:
                out.stop = -1
                break
            props_len = (<Py_ssize_t>b[props_pos] << 8) | b[props_pos + 1]
            if props_len >= 0x8000 or props_pos + 2 + props_len != record_end:
                out.stop = -1
                break
            if check_crc and (<uint32_t>_crc32(PyMemoryView_FromMemory(<char *>q + HEAD_BODY_LEN, body_len,
                                                                        0x100)) & INT32_MAX) != _get32(q + 8):
                out.stop = -1
                break
            if out.count == out.cap:
                out.cap *= 2
                grown = PyMem_Realloc(out.recs, out.cap * sizeof(Parsed))
                if grown == NULL:
                    raise MemoryError()
                out.recs = <Parsed *>grown
            r = &out.recs[out.count]
            # the topic: its index among this batch's topics (decoded once per batch)
            if (last_topic == NULL or topic_len != last_topic_len
                    or memcmp(last_topic, b + topic_pos + 1, topic_len)):
                raw = PyBytes_FromStringAndSize(<const char *>b + topic_pos + 1, topic_len)
                idx = topic_index.get(raw)
                if idx is None:
                    topic = _topic_cache.get(raw)
                    if topic is None:
                        if len(_topic_cache) > _CACHE_MAX:
                            _topic_cache.clear()
                        topic = PyUnicode_DecodeUTF8(<const char *>b + topic_pos + 1, topic_len, "replace")
                        _topic_cache[raw] = topic
                    idx = topic_index[raw] = len(out.topics)
                    out.topics.append(topic)
                    topic_hashes.append(_hash_units(_hash_units(0, topic), "#"))
                last_topic_idx = idx
                last_topic = b + topic_pos + 1
                last_topic_len = topic_len
            r.topic = last_topic_idx
            r.phy = base + pos
            r.size = <int32_t>size
            r.queue_id = <int32_t>_get32(q + 12)
            r.queue_offset = _get64(q + 20)
            r.sys_flag = <int32_t>_get32(q + 36)
            r.born_ts = _get64(q + 40)
            r.store_ts = _get64(q + 56)
            r.prepared = _get64(q + 76)
            r.props_pos = props_pos + 2
            r.props_len = props_len
            # the properties: name \x01 value \x02 ...; a later duplicate wins, as in a dict
            tags.pos = keys.pos = uniq.pos = delay.pos = -1
            item = props_pos + 2
            while item < record_end:
                stop_at = item
                while stop_at < record_end and b[stop_at] != 2:
                    stop_at += 1
                sep = item
                while sep < stop_at and b[sep] != 1:
                    sep += 1
                if sep < stop_at:
                    if _name_is(b + item, sep - item, b"TAGS", 4):
                        tags.pos, tags.length = sep + 1, stop_at - sep - 1
                    elif _name_is(b + item, sep - item, b"KEYS", 4):
                        keys.pos, keys.length = sep + 1, stop_at - sep - 1
                    elif _name_is(b + item, sep - item, b"UNIQ_KEY", 8):
                        uniq.pos, uniq.length = sep + 1, stop_at - sep - 1
                    elif _name_is(b + item, sep - item, b"DELAY", 5):
                        delay.pos, delay.length = sep + 1, stop_at - sep - 1
                item = stop_at + 1
            r.tags_code = (<int32_t>_hash_utf8(0, b + tags.pos, tags.length)) if tags.pos >= 0 else 0
            if (delay.pos >= 0 and delay_tags_code is not None
                    and out.topics[r.topic] == "SCHEDULE_TOPIC_XXXX"):
                code = delay_tags_code(
                    PyUnicode_DecodeUTF8(<const char *>b + delay.pos, delay.length, "replace"), r.store_ts)
                if code is not None:
                    r.tags_code = code
            r.keys_pos, r.keys_len = keys.pos, keys.length
            r.uniq_pos, r.uniq_len = uniq.pos, uniq.length
            # index keys: topic#UNIQ_KEY, then topic#k for every non-empty space-separated k of KEYS
            r.first_key = out.key_count
            prefix = topic_hashes[r.topic]
            if uniq.pos >= 0 and uniq.length > 0:
                out._add_key(_index_hash(_hash_utf8(prefix, b + uniq.pos, uniq.length)))
            if keys.pos >= 0:
                key_start = keys.pos
                for k in range(keys.pos, keys.pos + keys.length + 1):
                    if k == keys.pos + keys.length or b[k] == 0x20:
                        if k > key_start:
                            out._add_key(_index_hash(_hash_utf8(prefix, b + key_start, k - key_start)))
                        key_start = k + 1
            r.key_count = out.key_count - r.first_key
            out.count += 1
            pos = record_end
    finally:
        PyBuffer_Release(&view)
    out.end_pos = pos
    return out


# -- IndexFile -------------------------------------------------------------------------------

cdef long long _put_index_entries(uint8_t *b, long long hash_slot_num, long long index, long long *begin,
                                  long long *first_phy, bint *has_first, const int32_t *hashes,
                                  const int64_t *phys, const int64_t *timestamps, Py_ssize_t start,
                                  Py_ssize_t count) noexcept nogil:
    """The IndexFile entries and slots of keys[start:start + count]; returns the slots newly used."""
    cdef Py_ssize_t i
    cdef long long new_slots = 0, entries_pos = INDEX_HEADER + hash_slot_num * 4, slot_pos, diff
    cdef int32_t slot_value, h
    cdef uint8_t *e
    for i in range(start, start + count):
        h = hashes[i]
        slot_pos = INDEX_HEADER + (h % hash_slot_num) * 4
        slot_value = <int32_t>_get32(b + slot_pos)
        if slot_value <= 0 or slot_value >= index:
            slot_value = 0
            new_slots += 1
        if begin[0] <= 0:
            diff = 0
        else:
            diff = (timestamps[i] - begin[0]) // 1000
            diff = 0 if diff < 0 else (INT32_MAX if diff > INT32_MAX else diff)
        e = b + entries_pos + index * INDEX_ENTRY
        _put32(e, <uint32_t>h)
        _put64(e + 4, <uint64_t>phys[i])
        _put32(e + 12, <uint32_t>diff)
        _put32(e + 16, <uint32_t>slot_value)
        _put32(b + slot_pos, <uint32_t>index)
        if index <= 1:  # the first entry's diff is taken before the file's begin is set
            first_phy[0] = phys[i]
            has_first[0] = True
            begin[0] = timestamps[i]
        index += 1
    return new_slots


def put_index_keys(mm, long long hash_slot_num, long long index_num, long long index_count,
                   long long begin_timestamp, IndexKeys keys, Py_ssize_t start):
    """Add ``keys[start:]`` to an IndexFile mapping (as many as fit) after ``index_count - 1``
    entries. Returns (how many were added, slots newly used, begin timestamp, begin offset:
    the file's, set by its first entry; None when it already had one)."""
    cdef Py_buffer view
    cdef Py_ssize_t count
    cdef long long begin = begin_timestamp, new_slots, entries_pos = INDEX_HEADER + hash_slot_num * 4
    cdef long long first_phy = 0
    cdef bint has_first = False
    count = min(keys.count - start, index_num - index_count)
    if count <= 0:
        return 0, 0, begin_timestamp, None
    PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE)
    try:
        if view.len < entries_pos + index_num * INDEX_ENTRY or hash_slot_num <= 0:
            raise ValueError("the mapping is smaller than the index file")
        with nogil:  # entries and slots land all over the file: page and cache misses, no Python
            new_slots = _put_index_entries(<uint8_t *>view.buf, hash_slot_num, index_count, &begin, &first_phy,
                                           &has_first, keys.hashes, keys.phys, keys.timestamps, start, count)
    finally:
        PyBuffer_Release(&view)
    return count, new_slots, begin, first_phy if has_first else None
