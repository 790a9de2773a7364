# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""CommitLog records in C: checking and measuring messages, and packing them into the mapped
file with their final offsets (RecordEncoder, Records).

Why compiled: in CPython each record cost about 35 interpreter operations to encode, and put
and dispatch share one GIL (docs/NATIVE.md). The layout is lakemq.common.record's, named in
_layout.pxd. Python keeps the per-batch bookkeeping (files, locks, tables), C the per-record
work. The body CRC stays ISA-L's (called once per record).
"""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

from lakemq.store._layout cimport *

cdef extern from "Python.h":
    enum: PyBUF_READ
    bint PyBytes_CheckExact(object)
    object PyUnicode_DecodeASCII(const char *s, Py_ssize_t size, const char *errors)

from isal.isal_zlib import crc32 as _crc32

__all__ = ["RecordEncoder", "Records"]


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
        put32(p + TOTAL_SIZE_POS, <uint32_t>r.size)
        put32(p + MAGIC_CODE_POS, MESSAGE_MAGIC_CODE)
        put32(p + BODY_CRC_POS, <uint32_t>r.crc)
        put32(p + QUEUE_ID_POS, <uint32_t>r.queue_id)
        put32(p + FLAG_POS, <uint32_t>r.flag)
        put64(p + QUEUE_OFFSET_POS, <uint64_t>r.queue_offset)
        put64(p + PHYSICAL_OFFSET_POS, <uint64_t>phy)
        put32(p + SYS_FLAG_POS, <uint32_t>r.sys_flag)
        put64(p + BORN_TIMESTAMP_POS, <uint64_t>r.born_ts)
        memcpy(p + BORN_HOST_POS, r.born_ip, 4)
        put32(p + BORN_PORT_POS, <uint32_t>r.born_port)
        put64(p + STORE_TIMESTAMP_POS, <uint64_t>now)
        memcpy(p + STORE_HOST_POS, store_ip, 4)
        put32(p + STORE_PORT_POS, <uint32_t>store_port)
        put32(p + RECONSUME_TIMES_POS, <uint32_t>r.reconsume)
        put64(p + PREPARED_TRANSACTION_OFFSET_POS, <uint64_t>r.prepared)
        put32(p + BODY_LEN_POS, <uint32_t>r.body_len)
        p += BODY_POS
        memcpy(p, r.body, r.body_len)
        p += r.body_len
        memcpy(p, r.topic_part, r.topic_part_len)
        p += r.topic_part_len
        p[0] = <uint8_t>(r.props_len >> 8)
        p[1] = <uint8_t>r.props_len
        memcpy(p + PROPS_LEN_SIZE, r.props, r.props_len)
        p += PROPS_LEN_SIZE + r.props_len
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
    if p[n - 1] != PROPERTY_SEPARATOR:
        return False
    while start < n:
        sep = -1
        i = start
        while p[i] != PROPERTY_SEPARATOR:
            if p[i] == NAME_VALUE_SEPARATOR:
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
    while n < slen and sp[n] != NAME_VALUE_SEPARATOR:
        n += 1
    if n == 0 or n >= slen or sp[slen - 1] != PROPERTY_SEPARATOR:
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
                    size = (RECORD_FIXED_SIZE - 1 + PyBytes_GET_SIZE(body) + PyBytes_GET_SIZE(topic_part)
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
            out.keys.append((topic, queue_id) if gets_queue_entry(sys_flag) else None)
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
            if size - pos < BATCH_ENTRY_FIXED_SIZE:
                return None
            total = <int32_t>get32(b + pos)
            body_len = <int32_t>get32(b + pos + BATCH_BODY_LEN_POS)
            if (total < BATCH_ENTRY_FIXED_SIZE or total > size - pos or body_len < 0
                    or BATCH_ENTRY_FIXED_SIZE + body_len > total):
                return None
            plen = (b[pos + BATCH_BODY_POS + body_len] << 8) | b[pos + BATCH_BODY_POS + 1 + body_len]
            if BATCH_ENTRY_FIXED_SIZE + body_len + plen != total:  # also a negative (high bit set) length
                return None
            pos += total
            n += 1
        if n == 0:
            return None
        out = _new_records(n, [data, topic_part])
        key = (topic, queue_id)
        pos = 0
        for i in range(n):
            total = <int32_t>get32(b + pos)
            body_len = <int32_t>get32(b + pos + BATCH_BODY_LEN_POS)
            if not self._plain_record(out, &out.recs[i], &head, <int32_t>get32(b + pos + BATCH_FLAG_POS),
                                      b + pos + BATCH_BODY_POS, body_len,
                                      b + pos + BATCH_ENTRY_FIXED_SIZE + body_len,
                                      total - BATCH_ENTRY_FIXED_SIZE - body_len, True, suffix, suffix_key,
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
        rec_size = RECORD_FIXED_SIZE - 1 + body_len + PyBytes_GET_SIZE(topic_part) + plen + slen
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
        r.crc = <int32_t>(<uint32_t>_crc32(PyMemoryView_FromMemory(<char *>body, body_len, PyBUF_READ)) & INT32_MAX)
        r.topic_part = <const uint8_t *>PyBytes_AS_STRING(topic_part)
        r.topic_part_len = PyBytes_GET_SIZE(topic_part)
        r.props = <const uint8_t *>PyBytes_AS_STRING(props)
        r.props_len = plen + slen
        out.keys.append(key)
        out.total += rec_size
        out.body_bytes += body_len
        return 1


