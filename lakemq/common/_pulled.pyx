# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A pull response's records decoded in C into MessageExt objects (decode_pulled), as a
consumer wants them: bodies decompressed, the tag re-checked, MIN_OFFSET and MAX_OFFSET set and
the producer's id as the message id.

Why compiled: a record decoded in Python cost about 4 us (a 15-field unpack, slices, the
properties split, a 17-field dataclass), which bounded a consumer near 200,000 messages a
second before it did anything else. The definition is Python's (lakemq.common.record's
decode_record and iter_records, lakemq.client.pull_api.decode_pull_result): this answers None
for anything it does not take as those would (a malformed record, properties that are not
UTF-8), and Python decodes the response again and raises what it raises.
tests/common/test_pulled.py checks with hypothesis that both give the same messages. The
record layout is named in _record_layout.pxd.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.ref cimport PyObject
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memchr

from lakemq.common._record_layout cimport *

import dataclasses

cdef extern from "Python.h":
    bint PyBytes_CheckExact(object)

from lakemq.common._slots cimport lakemq_alloc, lakemq_slot_offset, lakemq_slot_set

__all__ = ["bind", "decode_pulled"]

# MessageExt's fields in its declared order (lakemq.common.message; Message's four first).
_FIELDS = ("topic", "body", "flag", "properties", "queue_id", "store_size", "queue_offset", "sys_flag",
           "born_timestamp", "born_host", "store_timestamp", "store_host", "msg_id", "commit_log_offset",
           "body_crc", "reconsume_times", "prepared_transaction_offset")
cdef Py_ssize_t _offsets[17]
cdef object _ext_type = None
cdef object _host_of = None  # the 8-byte host field (ip + port) -> "ip:port"
cdef object _decompress = None
cdef bint _bound = False
cdef dict _hosts = {}  # the host field as an int -> text
cdef dict _texts = {}  # topic and property names: bytes -> text
cdef str _uniq_key = "UNIQ_KEY"
cdef str _tags_key = "TAGS"
cdef Py_ssize_t _CACHE = 4096
cdef const char *_HEX = b"0123456789ABCDEF"


def bind(ext_type, host_of, decompress, str uniq_key, str tags_key):
    """Called once by lakemq.common.record with its own definitions."""
    global _ext_type, _host_of, _decompress, _bound, _uniq_key, _tags_key
    for i, name in enumerate(_FIELDS):
        offset = lakemq_slot_offset(getattr(ext_type, name))
        if offset < 0:
            raise TypeError(f"{ext_type.__name__}.{name} is not a plain slot")
        _offsets[i] = offset
    names = [f.name for f in dataclasses.fields(ext_type)]
    if tuple(names) != _FIELDS:
        raise TypeError(f"{ext_type.__name__} has fields {names}, expected {_FIELDS}")
    _ext_type, _host_of, _decompress, _uniq_key, _tags_key = ext_type, host_of, decompress, uniq_key, tags_key
    _bound = True


cdef inline uint32_t _u32(const uint8_t *p) noexcept nogil:
    return get32(p)


cdef inline int32_t _i32(const uint8_t *p) noexcept nogil:
    return <int32_t>get32(p)


cdef object _text(const uint8_t *p, Py_ssize_t n):
    """Cached text of a topic or property name (a pull's records share them)."""
    cdef object raw = PyBytes_FromStringAndSize(<const char *>p, n)
    cdef PyObject *found = PyDict_GetItem(_texts, raw)
    if found != NULL:
        return <object>found
    text = raw.decode("utf-8", "replace")
    if len(_texts) >= _CACHE:
        _texts.clear()
    _texts[raw] = text
    return text


cdef object _host(const uint8_t *p):
    cdef object key = <int64_t>get64(p)
    cdef PyObject *found = PyDict_GetItem(_hosts, key)
    if found != NULL:
        return <object>found
    host = _host_of(PyBytes_FromStringAndSize(<const char *>p, 8))
    if len(_hosts) >= _CACHE:
        _hosts.clear()
    _hosts[key] = host
    return host


cdef object _properties(const uint8_t *p, Py_ssize_t n):
    """string_to_properties of the UTF-8 text; None when it is not valid UTF-8."""
    cdef dict props = {}
    cdef const uint8_t *end = p + n
    cdef const uint8_t *item_end
    cdef const uint8_t *sep
    while p < end:
        item_end = <const uint8_t *>memchr(p, PROPERTY_SEPARATOR, end - p)
        if item_end == NULL:
            item_end = end
        sep = <const uint8_t *>memchr(p, NAME_VALUE_SEPARATOR, item_end - p)
        if sep != NULL:
            try:
                name = _strict(p, sep - p)
                value = (<bytes>PyBytes_FromStringAndSize(<const char *>sep + 1, item_end - sep - 1)).decode("utf-8")
            except UnicodeDecodeError:
                return None
            PyDict_SetItem(props, name, value)
        p = item_end + 1
    return props


cdef object _strict(const uint8_t *p, Py_ssize_t n):
    """A property name: cached when valid UTF-8 (UnicodeDecodeError otherwise)."""
    cdef object raw = PyBytes_FromStringAndSize(<const char *>p, n)
    cdef PyObject *found = PyDict_GetItem(_texts, raw)
    if found != NULL:
        return <object>found
    text = raw.decode("utf-8")
    if len(_texts) >= _CACHE:
        _texts.clear()
    _texts[raw] = text
    return text


cdef object _offset_msg_id(const uint8_t *store_host, const uint8_t *physical):
    """create_message_id's text: the store host's 8 bytes and the CommitLog offset, in hex."""
    cdef char out[32]
    cdef int i
    for i in range(8):
        out[2 * i] = _HEX[store_host[i] >> 4]
        out[2 * i + 1] = _HEX[store_host[i] & 0xF]
        out[16 + 2 * i] = _HEX[physical[i] >> 4]
        out[16 + 2 * i + 1] = _HEX[physical[i] & 0xF]
    return (<bytes>PyBytes_FromStringAndSize(out, 32)).decode("ascii")


def decode_pulled(body, object tags, str min_offset, str max_offset, str min_key, str max_key):
    """The messages of a pull response's ``body`` (records up to a blank record or fewer than
    8 bytes), those whose TAGS are in ``tags`` (None: all); or None when a record is not in
    the form decode_record reads without error."""
    cdef const uint8_t *data
    cdef const uint8_t *r
    cdef const uint8_t *p
    cdef Py_ssize_t end, pos = 0, available, body_pos, topic_pos, props_pos
    cdef int32_t size, body_len, sys_flag
    cdef int16_t props_len
    cdef uint8_t topic_len
    cdef list out = []
    cdef object props, msg, payload, msg_id
    cdef PyObject *found
    if not _bound:
        raise RuntimeError("lakemq.common._pulled is not bound (import lakemq.common.record)")
    if not PyBytes_CheckExact(body):
        return None
    data = <const uint8_t *>PyBytes_AS_STRING(body)
    end = PyBytes_GET_SIZE(body)
    while pos + BLANK_HEAD_SIZE <= end:
        r = data + pos
        if _u32(r + MAGIC_CODE_POS) == BLANK_MAGIC_CODE:
            break
        available = end - pos
        if available < RECORD_FIXED_SIZE or _u32(r + MAGIC_CODE_POS) != MESSAGE_MAGIC_CODE:
            return None
        size = _i32(r + TOTAL_SIZE_POS)
        if size < RECORD_FIXED_SIZE or size > available:
            return None
        body_len = _i32(r + BODY_LEN_POS)
        body_pos = BODY_POS
        if body_len < 0 or body_pos + body_len + TOPIC_LEN_SIZE + PROPS_LEN_SIZE > size:
            return None
        topic_pos = body_pos + body_len + TOPIC_LEN_SIZE
        topic_len = r[topic_pos - TOPIC_LEN_SIZE]
        if topic_pos + topic_len + PROPS_LEN_SIZE > size:
            return None
        props_pos = topic_pos + topic_len + PROPS_LEN_SIZE
        props_len = <int16_t>((r[props_pos - 2] << 8) | r[props_pos - 1])
        if props_len < 0 or props_pos + props_len != size:
            return None
        props = _properties(r + props_pos, props_len) if props_len else {}
        if props is None:
            return None
        pos += size
        sys_flag = _i32(r + SYS_FLAG_POS)
        payload = PyBytes_FromStringAndSize(<const char *>r + body_pos, body_len)
        if sys_flag & COMPRESSED_FLAG:  # every record's, as iter_records decompresses before filtering
            try:
                payload = _decompress(payload, sys_flag)
            except Exception:  # noqa: BLE001 - Python decodes again and raises it
                return None
        if tags is not None:
            found = PyDict_GetItem(props, _tags_key)
            if found == NULL or <object>found not in tags:
                continue
        found = PyDict_GetItem(props, _uniq_key)
        if found != NULL and <object>found:
            msg_id = <object>found
        else:
            msg_id = _offset_msg_id(r + STORE_HOST_POS, r + PHYSICAL_OFFSET_POS)
        PyDict_SetItem(props, min_key, min_offset)
        PyDict_SetItem(props, max_key, max_offset)
        msg = lakemq_alloc(_ext_type)
        lakemq_slot_set(msg, _offsets[0], _text(r + topic_pos, topic_len))
        lakemq_slot_set(msg, _offsets[1], payload)
        lakemq_slot_set(msg, _offsets[2], _i32(r + FLAG_POS))
        lakemq_slot_set(msg, _offsets[3], props)
        lakemq_slot_set(msg, _offsets[4], _i32(r + QUEUE_ID_POS))
        lakemq_slot_set(msg, _offsets[5], size)
        lakemq_slot_set(msg, _offsets[6], <int64_t>get64(r + QUEUE_OFFSET_POS))
        lakemq_slot_set(msg, _offsets[7], sys_flag)
        lakemq_slot_set(msg, _offsets[8], <int64_t>get64(r + BORN_TIMESTAMP_POS))
        lakemq_slot_set(msg, _offsets[9], _host(r + BORN_HOST_POS))
        lakemq_slot_set(msg, _offsets[10], <int64_t>get64(r + STORE_TIMESTAMP_POS))
        lakemq_slot_set(msg, _offsets[11], _host(r + STORE_HOST_POS))
        lakemq_slot_set(msg, _offsets[12], msg_id)
        lakemq_slot_set(msg, _offsets[13], <int64_t>get64(r + PHYSICAL_OFFSET_POS))
        lakemq_slot_set(msg, _offsets[14], _i32(r + BODY_CRC_POS))
        lakemq_slot_set(msg, _offsets[15], _i32(r + RECONSUME_TIMES_POS))
        lakemq_slot_set(msg, _offsets[16], <int64_t>get64(r + PREPARED_TRANSACTION_OFFSET_POS))
        out.append(msg)
    return out
