# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A remoting frame's JSON header read into a RemotingCommand, in C, for the frame codec
(lakemq/remoting/_codec.pyx).

The common form only: the headers Java, C++ and lakemq write (integers in 0 .. 2^31-1, text,
extFields of text, keys unescaped). For anything else the reader answers None rather than
guess, and the frame goes to the Python codec (lakemq.remoting.codec), which is the definition.
"""

from cpython.dict cimport PyDict_SetItem
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.string cimport memcmp

from lakemq.common._slots cimport lakemq_alloc, lakemq_slot_set
from lakemq.remoting._command cimport CommandSlots, command_slots
from lakemq.remoting._frame cimport INT32_MAX

# -- bound once, through _codec.bind ----------------------------------------------------------

cdef object _command_type = None
cdef object _languages_by_name = None  # name -> LanguageCode
cdef object _language_other = None
cdef object _json_type = None  # SerializeType.JSON
cdef CommandSlots _o


cdef int bind_reader(object command_type, object languages_by_name, object language_other,
                     object json_type) except -1:
    global _command_type, _languages_by_name, _language_other, _json_type, _o
    _o = command_slots(command_type)
    _command_type, _languages_by_name, _language_other = command_type, languages_by_name, language_other
    _json_type = json_type
    return 0


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


cdef object read_command(const uint8_t *header, Py_ssize_t header_len, object body):
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
    lakemq_slot_set(command, _o.code, code)
    lakemq_slot_set(command, _o.language, language)
    lakemq_slot_set(command, _o.version, version)
    lakemq_slot_set(command, _o.opaque, opaque)
    lakemq_slot_set(command, _o.flag, flag)
    lakemq_slot_set(command, _o.remark, remark)
    lakemq_slot_set(command, _o.ext, {} if ext is None else ext)
    lakemq_slot_set(command, _o.body, body)
    lakemq_slot_set(command, _o.kind, _json_type)
    return command
