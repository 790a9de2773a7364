# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A RemotingCommand's JSON header written in C, for the frame codec (lakemq/remoting/_codec.pyx):
byte for byte what lakemq.remoting.codec writes (fastjson's keys, sorted; orjson's numbers and
escapes). The common form only: for anything else (a value that is not a plain int or text, an
unknown language) the writer answers 1 and the Python codec, the definition, encodes the command.
"""

from cpython.dict cimport PyDict_Next
from cpython.long cimport PyLong_AsLongLong
from cpython.ref cimport PyObject
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport uint8_t

from lakemq.common._slots cimport lakemq_slot_get
from lakemq.remoting._command cimport CommandSlots, command_slots

cdef extern from "Python.h":
    bint PyBytes_CheckExact(object)
    bint PyUnicode_CheckExact(object)
    bint PyLong_Check(object)
    bint PyBool_Check(object)
    bint PyDict_CheckExact(object)

# -- bound once, through _codec.bind ----------------------------------------------------------

cdef object _command_type = None
cdef object _language_names = None  # tuple: LanguageCode value -> name
cdef object _json_type = None  # SerializeType.JSON
cdef CommandSlots _o


cdef int bind_writer(object command_type, object language_names, object json_type) except -1:
    global _command_type, _language_names, _json_type, _o
    _o = command_slots(command_type)
    _command_type, _language_names, _json_type = command_type, tuple(language_names), json_type
    return 0


cdef object json_body(object command):
    if type(command) is not _command_type or lakemq_slot_get(command, _o.kind) is not _json_type:
        return None
    body = lakemq_slot_get(command, _o.body)
    return body if PyBytes_CheckExact(body) else None


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
    out_raw(o, digits + i, 24 - i)
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
        out_grow(o, 6 * n + 2)
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


cdef int write_header(Out *o, object command) except -1:
    """fastjson's RemotingCommand JSON (keys sorted), as lakemq.remoting.codec writes it."""
    cdef PyObject *key
    cdef PyObject *value
    cdef Py_ssize_t i = 0
    cdef object language, remark, ext
    cdef long long language_value
    code = lakemq_slot_get(command, _o.code)
    out_raw(o, b'{"code":', 8)
    if _write_int(o, code):
        return 1
    ext = lakemq_slot_get(command, _o.ext)
    if not PyDict_CheckExact(ext):
        return 1
    if ext:
        out_raw(o, b',"extFields":{', 14)
        first = True
        while PyDict_Next(ext, &i, &key, &value):
            if not first:
                out_raw(o, b",", 1)
            first = False
            if _write_str(o, <object>key):
                return 1
            out_raw(o, b":", 1)
            if _write_str(o, <object>value):
                return 1
        out_raw(o, b"}", 1)
    out_raw(o, b',"flag":', 8)
    if _write_int(o, lakemq_slot_get(command, _o.flag)):
        return 1
    language = lakemq_slot_get(command, _o.language)
    if not PyLong_Check(language) or PyBool_Check(language):
        return 1
    language_value = language
    if not 0 <= language_value < len(_language_names):
        return 1
    out_raw(o, b',"language":', 12)
    _write_str(o, _language_names[language_value])
    out_raw(o, b',"opaque":', 10)
    if _write_int(o, lakemq_slot_get(command, _o.opaque)):
        return 1
    remark = lakemq_slot_get(command, _o.remark)
    if remark is not None:
        out_raw(o, b',"remark":', 10)
        if _write_str(o, remark):
            return 1
    out_raw(o, b',"serializeTypeCurrentRPC":"JSON","version":', 44)
    if _write_int(o, lakemq_slot_get(command, _o.version)):
        return 1
    out_raw(o, b"}", 1)
