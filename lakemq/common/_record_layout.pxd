# cython: language_level=3
"""The CommitLog record's layout as the compiled modules name it (store and common), and the
big-endian helpers they share (inline: no runtime import). The Python side names the same
positions in lakemq.common.record and the flag bits in lakemq.common.message;
tests/store/test_layout.py checks every name here against them (``lakemq.store._layout.layout()``,
which sees these names through lakemq/store/_layout.pxd)."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

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
    COMPRESSED_FLAG = 0x1
    TRANSACTION_MASK = 0xC
    TRANSACTION_PREPARED_TYPE = 0x4
    TRANSACTION_ROLLBACK_TYPE = 0xC

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
