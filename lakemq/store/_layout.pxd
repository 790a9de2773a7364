# cython: language_level=3
"""The store's byte layouts as the compiled modules name them, and the big-endian and Java-hash
helpers they share (inline: no runtime import). The Python side names the same positions
(lakemq.common.record, lakemq.store.consume_queue, lakemq.store.index_file);
tests/store/test_layout.py checks every name here against them (``_layout.layout()``)."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

cdef extern from "Python.h":
    int PyUnicode_KIND(object)
    void *PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    Py_UCS4 PyUnicode_READ(int kind, void *data, Py_ssize_t index)
    object PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)

# -- the CommitLog record (lakemq.common.record) ---------------------------------------------
cdef enum:
    TOTAL_SIZE_POS = 0
    MAGIC_CODE_POS = 4
    BODY_CRC_POS = 8
    QUEUE_ID_POS = 12
    FLAG_POS = 16
    QUEUE_OFFSET_POS = 20
    PHYSICAL_OFFSET_POS = 28
    SYS_FLAG_POS = 36
    BORN_TIMESTAMP_POS = 40
    BORN_HOST_POS = 48
    BORN_PORT_POS = 52
    STORE_TIMESTAMP_POS = 56
    STORE_HOST_POS = 64
    STORE_PORT_POS = 68
    RECONSUME_TIMES_POS = 72
    PREPARED_TRANSACTION_OFFSET_POS = 76
    BODY_LEN_POS = 84
    BODY_POS = 88  # the fixed part and BODYLEN: everything before the body
    TOPIC_LEN_SIZE = 1  # TOPICLEN, after the body
    PROPS_LEN_SIZE = 2  # PROPLEN, after the topic
    RECORD_FIXED_SIZE = 91  # BODY_POS, TOPICLEN and PROPLEN
    BLANK_HEAD_SIZE = 8  # a blank record's TOTALSIZE and MAGICCODE
    MAX_PROPERTIES_LEN = 0x7FFF  # PROPLEN is a signed short
    INT32_MAX = 0x7FFFFFFF

cdef extern from *:
    """
    #define LAKEMQ_MESSAGE_MAGIC_CODE 0xDAA320A7u
    #define LAKEMQ_BLANK_MAGIC_CODE 0xCBD43194u
    """
    const uint32_t MESSAGE_MAGIC_CODE "LAKEMQ_MESSAGE_MAGIC_CODE"
    const uint32_t BLANK_MAGIC_CODE "LAKEMQ_BLANK_MAGIC_CODE"

# -- properties text (lakemq.common.message) ---------------------------------------------------
cdef enum:
    NAME_VALUE_SEPARATOR = 0x01
    PROPERTY_SEPARATOR = 0x02
    KEY_SEPARATOR = 0x20  # between the keys of KEYS

# -- sys flag bits (lakemq.common.message.MessageSysFlag) -------------------------------------
cdef enum:
    TRANSACTION_MASK = 0xC
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_ROLLBACK_TYPE = 0xC

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


# -- big-endian fields ------------------------------------------------------------------------

cdef inline void put32(uint8_t *p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v

cdef inline void put64(uint8_t *p, uint64_t v) noexcept nogil:
    put32(p, <uint32_t>(v >> 32))
    put32(p + 4, <uint32_t>v)

cdef inline uint32_t get32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]

cdef inline int64_t get64(const uint8_t *p) noexcept nogil:
    return <int64_t>((<uint64_t>get32(p) << 32) | <uint64_t>get32(p + 4))


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
