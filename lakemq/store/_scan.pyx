# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Dispatch in C: walking CommitLog records (scan_records) into the columns the ConsumeQueue,
the IndexFile and long polling need (DispatchBatch), with no object per record.

Why compiled: dispatching a record cost several microseconds in CPython, with a
DispatchRequest per record, and put and dispatch share one GIL (docs/NATIVE.md). The record
layout is lakemq.common.record's, named in _layout.pxd; the checks are those of
lakemq.common.record.check_record. _cq_runs and _index read the batch's columns.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.memoryview cimport PyMemoryView_FromMemory
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcmp

from lakemq.store._layout cimport *

cdef extern from "Python.h":
    enum: PyBUF_READ

from isal.isal_zlib import crc32 as _crc32

__all__ = ["DispatchBatch", "scan_records"]

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # lakemq.store.delay_levels.SCHEDULE_TOPIC


cdef struct Prop:
    Py_ssize_t pos
    Py_ssize_t length


cdef inline bint _name_is(const uint8_t *p, Py_ssize_t n, const char *name,
                          Py_ssize_t name_len) noexcept nogil:
    return n == name_len and memcmp(p, name, n) == 0


cdef dict _topic_cache = {}
cdef Py_ssize_t _CACHE_MAX = 65_536


cdef class DispatchBatch:
    """Consecutive CommitLog records read by :func:`scan_records`, as columns. ``stop`` says why
    the scan ended: 1 count or data exhausted, 0 a blank record (the file's end), -1 a bad one."""

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

    def arrivals(self):
        """(topic, queue id, queue offset after the record, tags code, store time) of every
        record that gets a ConsumeQueue entry, in CommitLog order: what long polling is told,
        with no properties parsed."""
        cdef Py_ssize_t i
        cdef Parsed *r
        cdef list out = []
        for i in range(self.count):
            r = &self.recs[i]
            if not gets_queue_entry(r.sys_flag):
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
    return 0 if get32(p + MAGIC_CODE_POS) == BLANK_MAGIC_CODE and <int32_t>get32(p + TOTAL_SIZE_POS) > 0 else -1


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
            if pos + BODY_POS > end:  # too short for a message: a blank record, or the data's end
                if pos + BLANK_HEAD_SIZE <= end:
                    out.stop = _blank_or_bad(b + pos)
                break
            q = b + pos
            if get32(q + MAGIC_CODE_POS) != MESSAGE_MAGIC_CODE:
                out.stop = _blank_or_bad(q)
                break
            size = <int32_t>get32(q + TOTAL_SIZE_POS)
            body_len = <int32_t>get32(q + BODY_LEN_POS)
            record_end = pos + size
            topic_pos = pos + BODY_POS + body_len
            if (size < RECORD_FIXED_SIZE or record_end > end or body_len < 0 or topic_pos + TOPIC_LEN_SIZE + PROPS_LEN_SIZE > record_end
                    or get64(q + PHYSICAL_OFFSET_POS) != base + pos):
                out.stop = -1
                break
            topic_len = b[topic_pos]
            props_pos = topic_pos + TOPIC_LEN_SIZE + topic_len
            if props_pos + PROPS_LEN_SIZE > record_end:
                out.stop = -1
                break
            props_len = (<Py_ssize_t>b[props_pos] << 8) | b[props_pos + 1]
            if props_len > MAX_PROPERTIES_LEN or props_pos + PROPS_LEN_SIZE + props_len != record_end:
                out.stop = -1
                break
            if check_crc and (<uint32_t>_crc32(PyMemoryView_FromMemory(<char *>q + BODY_POS, body_len, PyBUF_READ))
                              & INT32_MAX) != get32(q + BODY_CRC_POS):
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
                    topic_hashes.append(hash_units(hash_units(0, topic), "#"))
                last_topic_idx = idx
                last_topic = b + topic_pos + 1
                last_topic_len = topic_len
            r.topic = last_topic_idx
            r.phy = base + pos
            r.size = <int32_t>size
            r.queue_id = <int32_t>get32(q + QUEUE_ID_POS)
            r.queue_offset = get64(q + QUEUE_OFFSET_POS)
            r.sys_flag = <int32_t>get32(q + SYS_FLAG_POS)
            r.born_ts = get64(q + BORN_TIMESTAMP_POS)
            r.store_ts = get64(q + STORE_TIMESTAMP_POS)
            r.prepared = get64(q + PREPARED_TRANSACTION_OFFSET_POS)
            r.props_pos = props_pos + PROPS_LEN_SIZE
            r.props_len = props_len
            # the properties: name \x01 value \x02 ...; a later duplicate wins, as in a dict
            tags.pos = keys.pos = uniq.pos = delay.pos = -1
            item = props_pos + PROPS_LEN_SIZE
            while item < record_end:
                stop_at = item
                while stop_at < record_end and b[stop_at] != PROPERTY_SEPARATOR:
                    stop_at += 1
                sep = item
                while sep < stop_at and b[sep] != NAME_VALUE_SEPARATOR:
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
            r.tags_code = (<int32_t>hash_utf8(0, b + tags.pos, tags.length)) if tags.pos >= 0 else 0
            if (delay.pos >= 0 and delay_tags_code is not None
                    and out.topics[r.topic] == SCHEDULE_TOPIC):
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
                out._add_key(index_hash(hash_utf8(prefix, b + uniq.pos, uniq.length)))
            if keys.pos >= 0:
                key_start = keys.pos
                for k in range(keys.pos, keys.pos + keys.length + 1):
                    if k == keys.pos + keys.length or b[k] == KEY_SEPARATOR:
                        if k > key_start:
                            out._add_key(index_hash(hash_utf8(prefix, b + key_start, k - key_start)))
                        key_start = k + 1
            r.key_count = out.key_count - r.first_key
            out.count += 1
            pos = record_end
    finally:
        PyBuffer_Release(&view)
    out.end_pos = pos
    return out


