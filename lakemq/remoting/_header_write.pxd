# cython: language_level=3
"""The JSON header writer (lakemq/remoting/_header_write.pyx) as the frame codec calls it, and
the growing buffer both write a frame into."""

from cpython.mem cimport PyMem_Realloc
from libc.stdint cimport uint8_t
from libc.string cimport memcpy


cdef struct Out:
    uint8_t *buf
    Py_ssize_t len
    Py_ssize_t cap


cdef inline int out_grow(Out *o, Py_ssize_t extra) except -1:
    cdef Py_ssize_t cap = o.cap
    cdef uint8_t *buf
    while cap < o.len + extra:
        cap *= 2
    buf = <uint8_t *>PyMem_Realloc(o.buf, cap)
    if buf == NULL:
        raise MemoryError()
    o.buf, o.cap = buf, cap
    return 0


cdef inline int out_raw(Out *o, const char *text, Py_ssize_t n) except -1:
    if o.len + n > o.cap:
        out_grow(o, n)
    memcpy(o.buf + o.len, text, n)
    o.len += n
    return 0


# lakemq.remoting.codec's definitions, through _codec.bind; TypeError if RemotingCommand's
# slots are not the expected ones.
cdef int bind_writer(object command_type, object language_names, object json_type) except -1
# The body of a command the writer takes (a RemotingCommand itself, serialized as JSON, with a
# bytes body), else None (the Python codec encodes it).
cdef object json_body(object command)
# fastjson's RemotingCommand JSON into ``o``; 1 (nothing usable written) if not the common form.
cdef int write_header(Out *o, object command) except -1
