# cython: language_level=3
"""The store's byte layouts as the compiled modules name them, and the Java-hash helpers they
share (inline: no runtime import): the batch entry, ConsumeQueue and IndexFile entries here,
the CommitLog record and the big-endian helpers from lakemq/common/_record_layout.pxd. The
Python side names the same positions (lakemq.common.record, lakemq.common.message, lakemq.common.message_batch,
lakemq.store.consume_queue, lakemq.store.index_file); tests/store/test_layout.py checks every
name against them (``_layout.layout()``)."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

cdef extern from "Python.h":
    int PyUnicode_KIND(object)
    void *PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    Py_UCS4 PyUnicode_READ(int kind, void *data, Py_ssize_t index)
    object PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)

from lakemq.common._record_layout cimport *

# -- a SEND_BATCH_MESSAGE entry (lakemq.common.message_batch) ----------------------------------
cdef enum:
    BATCH_FLAG_POS = 12
    BATCH_BODY_LEN_POS = 16
    BATCH_BODY_POS = 20
    BATCH_ENTRY_FIXED_SIZE = 22  # the 20-byte head and PROPLEN (2)

# -- a ConsumeQueue entry (lakemq.store.consume_queue) ----------------------------------------
cdef enum:
    CQ_OFFSET_POS = 0
    CQ_SIZE_POS = 8
    CQ_TAGS_CODE_POS = 12
    CQ_STORE_UNIT_SIZE = 20
    CQ_BLANK_UNIT_SIZE = 0x7FFFFFFF  # the size of a blank entry (no message)

# -- an IndexFile (lakemq.store.index_file) ---------------------------------------------------
cdef enum:
    INDEX_HEADER_SIZE = 40
    INDEX_SLOT_SIZE = 4
    INDEX_ENTRY_SIZE = 20
    INDEX_ENTRY_PHY_POS = 4
    INDEX_ENTRY_TIME_DIFF_POS = 12
    INDEX_ENTRY_PREV_POS = 16


# -- sys flag ------------------------------------------------------------------------------------

cdef inline bint gets_queue_entry(int32_t sys_flag) noexcept nogil:
    """Prepared and rolled-back transaction records get no ConsumeQueue entry (nor queue offset)."""
    cdef int32_t t = sys_flag & TRANSACTION_MASK
    return t != TRANSACTION_PREPARED_TYPE and t != TRANSACTION_ROLLBACK_TYPE

cdef inline bint is_rolled_back(int32_t sys_flag) noexcept nogil:
    return (sys_flag & TRANSACTION_MASK) == TRANSACTION_ROLLBACK_TYPE


# -- Java String.hashCode -----------------------------------------------------------------------

cdef inline uint32_t hash_units(uint32_t h, object text):
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

cdef inline uint32_t hash_utf8(uint32_t h, const uint8_t *p, Py_ssize_t n) except? 0xFFFFFFFF:
    """Continue Java's hashCode over UTF-8 bytes decoded as Python does ("replace")."""
    cdef Py_ssize_t i
    for i in range(n):
        if p[i] >= 0x80:
            return hash_units(h, PyUnicode_DecodeUTF8(<const char *>p, n, "replace"))
    for i in range(n):
        h = h * 31 + p[i]
    return h

cdef inline int32_t index_hash(uint32_t h) noexcept nogil:
    """RocketMQ's indexKeyHashMethod: Math.abs of the hash, 0 for Integer.MIN_VALUE."""
    cdef int32_t s = <int32_t>h
    if s == <int32_t>0x80000000:
        return 0
    return -s if s < 0 else s
