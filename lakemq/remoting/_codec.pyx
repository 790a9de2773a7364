# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The remoting frame codec's common path in C: splitting a byte stream into frames, reading
a JSON header into a RemotingCommand, and writing a command's JSON header and frame.

Why compiled: every request and response of broker and client crosses this code, and in
Python a frame's decoding cost several microseconds of interpreter work (a dict from orjson,
then a RemotingCommand from it) before any processor ran. What is compiled is the common
form only: JSON headers whose values are what Java, C++ and lakemq write (integers in
0 .. 2^31-1, text, extFields of text). Everything else, every ROCKETMQ-serialized header, and
every error goes to the Python codec (lakemq.remoting.codec), which is the definition: a
function here answers ``None`` (or hands the frame to Python) rather than guess, and
tests/remoting/test_compiled_codec.py checks with hypothesis that both give the same commands
and bytes. The frame's layout is named in _frame.pxd.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Next, PyDict_SetItem
from cpython.long cimport PyLong_AsLongLong
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.ref cimport PyObject
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.string cimport memcmp, memcpy

from lakemq.remoting._frame cimport *

cdef extern from "Python.h":
    bint PyBytes_CheckExact(object)
    bint PyByteArray_CheckExact(object)
    bint PyUnicode_CheckExact(object)
    bint PyLong_Check(object)
    bint PyBool_Check(object)
    bint PyDict_CheckExact(object)
    void PyErr_Clear()

from lakemq.common._slots cimport lakemq_alloc, lakemq_slot_get, lakemq_slot_offset, lakemq_slot_set

__all__ = ["bind", "decode_frames", "encode_frame", "encode_head", "layout"]

# -- RemotingCommand's slots, bound once by lakemq.remoting.codec ----------------------------

cdef object _command_type = None
cdef object _fallback = None  # the Python decoder: (buffer, start, end) -> RemotingCommand
cdef object _frame_error = None
cdef object _languages_by_name = None  # name -> LanguageCode
cdef object _language_other = None
cdef object _language_names = None  # tuple: LanguageCode value -> name
cdef object _json_type = None  # SerializeType.JSON
cdef object _default_language = None  # LanguageCode.PYTHON
cdef Py_ssize_t _o_code, _o_language, _o_version, _o_opaque, _o_flag, _o_remark, _o_ext, _o_body, _o_kind
cdef bint _bound = False

_FIELDS = ("code", "language", "version", "opaque", "flag", "remark", "ext_fields", "body", "serialize_type")


def bind(command_type, fallback, frame_error, languages_by_name, language_other, language_names, json_type):
    """Called once by lakemq.remoting.codec with its own definitions."""
    global _command_type, _fallback, _frame_error, _languages_by_name, _language_other, _language_names
    global _json_type, _bound
    global _o_code, _o_language, _o_version, _o_opaque, _o_flag, _o_remark, _o_ext, _o_body, _o_kind
    offsets = []
    for name in _FIELDS:
        offset = lakemq_slot_offset(command_type.__dict__[name])
        if offset < 0:
            raise TypeError(f"{command_type.__name__}.{name} is not a plain slot")
        offsets.append(offset)
    if len(command_type.__slots__) != len(_FIELDS):
        raise TypeError(f"{command_type.__name__} has slots {command_type.__slots__}, expected {_FIELDS}")
    _o_code, _o_language, _o_version, _o_opaque, _o_flag, _o_remark, _o_ext, _o_body, _o_kind = offsets
    _command_type, _fallback, _frame_error = command_type, fallback, frame_error
    _languages_by_name, _language_other = languages_by_name, language_other
    _language_names, _json_type = tuple(language_names), json_type
    _bound = True


def layout():
    """The frame layout as this module sees it (tests compare it with the Python side's)."""
    return {"FRAME_LENGTH_SIZE": FRAME_LENGTH_SIZE, "HEADER_MARK_SIZE": HEADER_MARK_SIZE,
            "SERIALIZE_TYPE_SHIFT": SERIALIZE_TYPE_SHIFT, "HEADER_LENGTH_MASK": HEADER_LENGTH_MASK,
            "SERIALIZE_JSON": SERIALIZE_JSON, "SERIALIZE_ROCKETMQ": SERIALIZE_ROCKETMQ,
            "FLAG_RESPONSE": FLAG_RESPONSE, "FLAG_ONEWAY": FLAG_ONEWAY, "INT32_MAX": INT32_MAX}


cdef inline uint32_t _be32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline void _put_be32(uint8_t *p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


# -- reading a JSON header --------------------------------------------------------------------
# Return codes of the readers: 0 done, 1 not the common form (the Python codec decides), -1 a
# Python error is set.

cdef struct Cursor:
    const uint8_t *p
    const uint8_t *end


cdef inline void _ws(Cursor *c) noexcept nogil:
    while c.p < c.end and (c.p[0] == 0x20 or c.p[0] == 0x0A or c.p[0] == 0x0D or c.p[0] == 0x09):
        c.p += 1


cdef inline bint _take(Cursor *c, uint8_t ch) noexcept nogil:
    _ws(c)
    if c.p < c.end and c.p[0] == ch:
        c.p += 1
        return True
    return False


cdef inline int _hex4(const uint8_t *p, uint32_t *out) noexcept nogil:
    cdef uint32_t v = 0
    cdef int i
    cdef uint8_t ch
    for i in range(4):
        ch = p[i]
        if 0x30 <= ch <= 0x39:
            v = (v << 4) | (ch - 0x30)
        elif 0x61 <= ch <= 0x66:
            v = (v << 4) | (ch - 0x61 + 10)
        elif 0x41 <= ch <= 0x46:
            v = (v << 4) | (ch - 0x41 + 10)
        else:
            return 1
    out[0] = v
    return 0


cdef inline Py_ssize_t _utf8(uint8_t *to, uint32_t cp) noexcept nogil:
    if cp < 0x80:
        to[0] = <uint8_t>cp
        return 1
    if cp < 0x800:
        to[0] = <uint8_t>(0xC0 | (cp >> 6))
        to[1] = <uint8_t>(0x80 | (cp & 0x3F))
        return 2
    if cp < 0x10000:
        to[0] = <uint8_t>(0xE0 | (cp >> 12))
        to[1] = <uint8_t>(0x80 | ((cp >> 6) & 0x3F))
        to[2] = <uint8_t>(0x80 | (cp & 0x3F))
        return 3
    to[0] = <uint8_t>(0xF0 | (cp >> 18))
    to[1] = <uint8_t>(0x80 | ((cp >> 12) & 0x3F))
    to[2] = <uint8_t>(0x80 | ((cp >> 6) & 0x3F))
    to[3] = <uint8_t>(0x80 | (cp & 0x3F))
    return 4


cdef object _NOT = object()  # a reader's answer when the input is not in the common form


cdef object _decoded(const uint8_t *text, Py_ssize_t n):
    try:
        return PyUnicode_DecodeUTF8(<const char *>text, n, NULL)
    except UnicodeDecodeError:
        return _NOT


cdef object _string(Cursor *c):
    """The JSON string at the cursor (after whitespace), or _NOT if there is none or it holds
    what the Python codec should judge (raw control characters, lone surrogates, bad UTF-8)."""
    cdef const uint8_t *start
    cdef const uint8_t *p
    cdef const uint8_t *end
    cdef uint8_t *buf
    cdef uint8_t ch
    cdef Py_ssize_t n = 0
    cdef uint32_t cp, low
    cdef bint escaped = False
    _ws(c)
    if c.p >= c.end or c.p[0] != 0x22:
        return _NOT
    start = c.p + 1
    p = start
    while p < c.end:
        ch = p[0]
        if ch == 0x22:
            break
        if ch < 0x20:
            return _NOT
        if ch == 0x5C:
            escaped = True
            p += 2
            continue
        p += 1
    if p >= c.end:
        return _NOT
    c.p = p + 1
    if not escaped:
        return _decoded(start, p - start)
    # Unescaped text is never longer than its escaped form.
    end = p
    buf = <uint8_t *>PyMem_Malloc(end - start + 1)
    if buf == NULL:
        raise MemoryError()
    try:
        p = start
        while p < end:
            ch = p[0]
            if ch != 0x5C:
                buf[n] = ch
                n += 1
                p += 1
                continue
            if p + 1 >= end:
                return _NOT
            ch = p[1]
            p += 2
            if ch == 0x22 or ch == 0x5C or ch == 0x2F:
                buf[n] = ch
            elif ch == 0x62:
                buf[n] = 0x08
            elif ch == 0x66:
                buf[n] = 0x0C
            elif ch == 0x6E:
                buf[n] = 0x0A
            elif ch == 0x72:
                buf[n] = 0x0D
            elif ch == 0x74:
                buf[n] = 0x09
            elif ch == 0x75:
                if p + 4 > end or _hex4(p, &cp):
                    return _NOT
                p += 4
                if 0xD800 <= cp <= 0xDBFF:
                    if p + 6 > end or p[0] != 0x5C or p[1] != 0x75 or _hex4(p + 2, &low):
                        return _NOT
                    if not 0xDC00 <= low <= 0xDFFF:
                        return _NOT
                    p += 6
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
                elif 0xDC00 <= cp <= 0xDFFF:
                    return _NOT
                n += _utf8(buf + n, cp)
                continue
            else:
                return _NOT
            n += 1
        return _decoded(buf, n)
    finally:
        PyMem_Free(buf)


cdef int _int(Cursor *c, int64_t *out) noexcept nogil:
    """A non-negative JSON integer within int32 (what every client writes); 1 otherwise."""
    cdef int64_t v = 0
    cdef const uint8_t *start
    _ws(c)
    start = c.p
    while c.p < c.end and 0x30 <= c.p[0] <= 0x39:
        v = v * 10 + (c.p[0] - 0x30)
        if v > INT32_MAX:
            return 1
        c.p += 1
    if c.p == start or (c.p - start > 1 and start[0] == 0x30):
        return 1
    if c.p < c.end and (c.p[0] == 0x2E or c.p[0] == 0x65 or c.p[0] == 0x45):
        return 1
    out[0] = v
    return 0


cdef inline bint _literal(Cursor *c, const char *word, Py_ssize_t n) noexcept nogil:
    _ws(c)
    if c.end - c.p >= n and memcmp(c.p, word, n) == 0:
        c.p += n
        return True
    return False


cdef int _scalar(Cursor *c) except -1:
    """Skip a value of a key the codec does not use: text, a number, true, false or null."""
    cdef int64_t number
    _ws(c)
    if c.p >= c.end:
        return 1
    if c.p[0] == 0x22:
        return _string(c) is _NOT
    if _literal(c, "null", 4) or _literal(c, "true", 4) or _literal(c, "false", 5):
        return 0
    return _int(c, &number)


cdef int _ext_fields(Cursor *c, dict ext) except -1:
    cdef object key, value
    if not _take(c, 0x7B):
        return 1
    if _take(c, 0x7D):
        return 0
    while True:
        key = _string(c)
        if key is _NOT or not _take(c, 0x3A):
            return 1
        value = _string(c)
        if value is _NOT:
            return 1  # a null or non-text value: the Python codec drops or converts it
        PyDict_SetItem(ext, key, value)
        if _take(c, 0x2C):
            continue
        if _take(c, 0x7D):
            return 0
        return 1


cdef inline bint _is(const uint8_t *key, Py_ssize_t n, const char *name, Py_ssize_t name_len) noexcept nogil:
    return n == name_len and memcmp(key, name, n) == 0


cdef object _command(const uint8_t *header, Py_ssize_t header_len, object body):
    """The command of a JSON header in the common form, else None."""
    cdef Cursor c
    cdef const uint8_t *key
    cdef Py_ssize_t key_len
    cdef int64_t code = -1, flag = 0, opaque = 0, version = 0
    cdef object remark = None, language = None, language_name = None
    cdef dict ext = None
    cdef int r
    c.p = header
    c.end = header + header_len
    if not _take(&c, 0x7B):
        return None
    if not _take(&c, 0x7D):
        while True:
            _ws(&c)
            if c.p >= c.end or c.p[0] != 0x22:
                return None
            key = c.p + 1
            c.p = key
            while c.p < c.end and c.p[0] != 0x22:
                if c.p[0] == 0x5C or c.p[0] < 0x20:
                    return None  # an escaped key: no key of ours is one
                c.p += 1
            if c.p >= c.end:
                return None
            key_len = c.p - key
            c.p += 1
            if not _take(&c, 0x3A):
                return None
            if _is(key, key_len, "code", 4):
                r = _int(&c, &code)
            elif _is(key, key_len, "extFields", 9):
                if _literal(&c, "null", 4):
                    ext, r = None, 0
                else:
                    ext = {}
                    r = _ext_fields(&c, ext)
            elif _is(key, key_len, "flag", 4):
                r = _int(&c, &flag)
            elif _is(key, key_len, "language", 8):
                language_name = _string(&c)
                r = language_name is _NOT
            elif _is(key, key_len, "opaque", 6):
                r = _int(&c, &opaque)
            elif _is(key, key_len, "remark", 6):
                if _literal(&c, "null", 4):
                    remark, r = None, 0
                else:
                    remark = _string(&c)
                    r = remark is _NOT
            elif _is(key, key_len, "version", 7):
                r = _int(&c, &version)
            else:
                r = _scalar(&c)
            if r:
                return None
            if _take(&c, 0x2C):
                continue
            if _take(&c, 0x7D):
                break
            return None
    _ws(&c)
    if c.p != c.end or code < 0:
        return None
    if language_name is None:
        language = _language_other
    else:
        language = _languages_by_name.get(language_name, _language_other)
    command = lakemq_alloc(_command_type)
    lakemq_slot_set(command, _o_code, code)
    lakemq_slot_set(command, _o_language, language)
    lakemq_slot_set(command, _o_version, version)
    lakemq_slot_set(command, _o_opaque, opaque)
    lakemq_slot_set(command, _o_flag, flag)
    lakemq_slot_set(command, _o_remark, remark)
    lakemq_slot_set(command, _o_ext, {} if ext is None else ext)
    lakemq_slot_set(command, _o_body, body)
    lakemq_slot_set(command, _o_kind, _json_type)
    return command


def decode_frames(source, Py_ssize_t pos, Py_ssize_t max_frame_length):
    """Every whole frame of ``source`` (bytes or bytearray) from ``pos``: (commands, the
    position after the last). A frame not in the common form is decoded by the Python codec;
    a bad length raises FrameError."""
    cdef const uint8_t *data
    cdef Py_ssize_t size, length, header_len, header_end, start, end
    cdef uint32_t mark
    cdef list commands = []
    if not _bound:
        raise RuntimeError("lakemq.remoting._codec is not bound (import lakemq.remoting.codec)")
    if PyBytes_CheckExact(source):
        data = <const uint8_t *>PyBytes_AS_STRING(source)
        size = PyBytes_GET_SIZE(source)
    elif PyByteArray_CheckExact(source):
        data = <const uint8_t *>PyByteArray_AS_STRING(source)
        size = PyByteArray_GET_SIZE(source)
    else:
        raise TypeError("decode_frames takes bytes or a bytearray")
    while size - pos >= FRAME_LENGTH_SIZE:
        length = _be32(data + pos)
        if length < HEADER_MARK_SIZE:
            raise _frame_error(f"frame length {length} is shorter than its header length")
        if length + FRAME_LENGTH_SIZE > max_frame_length:
            raise _frame_error(f"frame of {length + FRAME_LENGTH_SIZE} bytes exceeds the limit of "
                               f"{max_frame_length}")
        if size - pos < FRAME_LENGTH_SIZE + length:
            break
        start = pos + FRAME_LENGTH_SIZE
        end = start + length
        mark = _be32(data + start)
        header_len = mark & HEADER_LENGTH_MASK
        header_end = start + HEADER_MARK_SIZE + header_len
        command = None
        if (mark >> SERIALIZE_TYPE_SHIFT) == SERIALIZE_JSON and header_end <= end:
            body = (PyBytes_FromStringAndSize(<const char *>data + header_end, end - header_end)
                    if header_end < end else b"")
            command = _command(data + start + HEADER_MARK_SIZE, header_len, body)
            # ``data`` may have moved if the command's building ran Python code that resized
            # ``source``; nothing here does, and the buffer is the caller's own.
        if command is None:
            command = _fallback(source, start, end)
        commands.append(command)
        pos = end
    return commands, pos


# -- writing a JSON header --------------------------------------------------------------------

cdef struct Out:
    uint8_t *buf
    Py_ssize_t len
    Py_ssize_t cap


cdef int _grow(Out *o, Py_ssize_t extra) except -1:
    cdef Py_ssize_t cap = o.cap
    cdef uint8_t *buf
    while cap < o.len + extra:
        cap *= 2
    buf = <uint8_t *>PyMem_Realloc(o.buf, cap)
    if buf == NULL:
        raise MemoryError()
    o.buf, o.cap = buf, cap
    return 0


cdef inline int _raw(Out *o, const char *text, Py_ssize_t n) except -1:
    if o.len + n > o.cap:
        _grow(o, n)
    memcpy(o.buf + o.len, text, n)
    o.len += n
    return 0


cdef int _write_int(Out *o, object value) except -1:
    """An int as orjson writes it; 1 if it is not a plain int in 64 bits."""
    cdef long long v
    cdef unsigned long long u
    cdef char digits[24]
    cdef int i = 24
    if not PyLong_Check(value) or PyBool_Check(value):
        return 1
    try:
        v = PyLong_AsLongLong(value)
    except OverflowError:
        return 1
    u = <unsigned long long>(-v) if v < 0 else <unsigned long long>v
    while True:
        i -= 1
        digits[i] = <char>(0x30 + u % 10)
        u //= 10
        if u == 0:
            break
    if v < 0:
        i -= 1
        digits[i] = b'-'
    _raw(o, digits + i, 24 - i)
    return 0


cdef const char *_HEX = b"0123456789abcdef"


cdef int _write_str(Out *o, object value) except -1:
    """Text as orjson writes it (UTF-8; quote, backslash and control characters escaped, the
    common ones short); 1 if it is not text or not encodable (a lone surrogate)."""
    cdef const char *text
    cdef Py_ssize_t n, i
    cdef uint8_t ch
    cdef uint8_t *w
    if not PyUnicode_CheckExact(value):
        return 1
    try:
        text = PyUnicode_AsUTF8AndSize(value, &n)
    except UnicodeEncodeError:
        return 1
    if o.len + 6 * n + 2 > o.cap:
        _grow(o, 6 * n + 2)
    w = o.buf + o.len
    w[0] = 0x22
    w += 1
    for i in range(n):
        ch = <uint8_t>text[i]
        if ch >= 0x20 and ch != 0x22 and ch != 0x5C:
            w[0] = ch
            w += 1
            continue
        w[0] = 0x5C
        if ch == 0x22 or ch == 0x5C:
            w[1] = ch
            w += 2
        elif ch == 0x08:
            w[1] = 0x62
            w += 2
        elif ch == 0x09:
            w[1] = 0x74
            w += 2
        elif ch == 0x0A:
            w[1] = 0x6E
            w += 2
        elif ch == 0x0C:
            w[1] = 0x66
            w += 2
        elif ch == 0x0D:
            w[1] = 0x72
            w += 2
        else:
            w[1] = 0x75
            w[2] = 0x30
            w[3] = 0x30
            w[4] = _HEX[ch >> 4]
            w[5] = _HEX[ch & 0xF]
            w += 6
    w[0] = 0x22
    o.len = (w + 1) - o.buf
    return 0


cdef int _write_header(Out *o, object command) except -1:
    """fastjson's RemotingCommand JSON (keys sorted), as lakemq.remoting.codec writes it."""
    cdef PyObject *key
    cdef PyObject *value
    cdef Py_ssize_t i = 0
    cdef object language, remark, ext
    cdef long long language_value
    code = lakemq_slot_get(command, _o_code)
    _raw(o, b'{"code":', 8)
    if _write_int(o, code):
        return 1
    ext = lakemq_slot_get(command, _o_ext)
    if not PyDict_CheckExact(ext):
        return 1
    if ext:
        _raw(o, b',"extFields":{', 14)
        first = True
        while PyDict_Next(ext, &i, &key, &value):
            if not first:
                _raw(o, b",", 1)
            first = False
            if _write_str(o, <object>key):
                return 1
            _raw(o, b":", 1)
            if _write_str(o, <object>value):
                return 1
        _raw(o, b"}", 1)
    _raw(o, b',"flag":', 8)
    if _write_int(o, lakemq_slot_get(command, _o_flag)):
        return 1
    language = lakemq_slot_get(command, _o_language)
    if not PyLong_Check(language) or PyBool_Check(language):
        return 1
    language_value = language
    if not 0 <= language_value < len(_language_names):
        return 1
    _raw(o, b',"language":', 12)
    _write_str(o, _language_names[language_value])
    _raw(o, b',"opaque":', 10)
    if _write_int(o, lakemq_slot_get(command, _o_opaque)):
        return 1
    remark = lakemq_slot_get(command, _o_remark)
    if remark is not None:
        _raw(o, b',"remark":', 10)
        if _write_str(o, remark):
            return 1
    _raw(o, b',"serializeTypeCurrentRPC":"JSON","version":', 44)
    if _write_int(o, lakemq_slot_get(command, _o_version)):
        return 1
    _raw(o, b"}", 1)
    return 0


cdef object _encode(object command, bint with_body):
    cdef Out o
    cdef object body
    cdef Py_ssize_t body_len = 0, header_len
    if not _bound or type(command) is not _command_type:
        return None
    if lakemq_slot_get(command, _o_kind) is not _json_type:
        return None
    body = lakemq_slot_get(command, _o_body)
    if not PyBytes_CheckExact(body):
        return None
    if with_body:
        body_len = PyBytes_GET_SIZE(body)
    o.cap = 256 + body_len
    o.len = FRAME_LENGTH_SIZE + HEADER_MARK_SIZE
    o.buf = <uint8_t *>PyMem_Malloc(o.cap)
    if o.buf == NULL:
        raise MemoryError()
    try:
        if _write_header(&o, command):
            return None
        header_len = o.len - FRAME_LENGTH_SIZE - HEADER_MARK_SIZE
        if header_len > HEADER_LENGTH_MASK:
            return None
        if with_body and body_len:
            _raw(&o, PyBytes_AS_STRING(body), body_len)
        body_len = PyBytes_GET_SIZE(body)
        if HEADER_MARK_SIZE + header_len + body_len > 0xFFFFFFFF:
            return None
        _put_be32(o.buf, <uint32_t>(HEADER_MARK_SIZE + header_len + body_len))
        _put_be32(o.buf + FRAME_LENGTH_SIZE, (<uint32_t>SERIALIZE_JSON << SERIALIZE_TYPE_SHIFT) | <uint32_t>header_len)
        return PyBytes_FromStringAndSize(<const char *>o.buf, o.len)
    finally:
        PyMem_Free(o.buf)


def encode_frame(command):
    """The whole frame of a JSON command in the common form, body included; else None."""
    return _encode(command, True)


def encode_head(command):
    """The frame's length prefix and JSON header (the body follows as it is); else None."""
    return _encode(command, False)
