# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The remoting frame codec's common path in C: splitting a byte stream into frames whose
JSON header is read into a RemotingCommand, and writing a command's frame. The JSON header
itself is read by _header_read.pyx and written by _header_write.pyx.

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
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport uint8_t, uint32_t

from lakemq.remoting._frame cimport *
from lakemq.remoting._header_read cimport bind_reader, read_command
from lakemq.remoting._header_write cimport Out, bind_writer, json_body, out_raw, write_header

cdef extern from "Python.h":
    bint PyBytes_CheckExact(object)
    bint PyByteArray_CheckExact(object)

__all__ = ["bind", "decode_frames", "encode_frame", "encode_head", "layout"]

# -- bound once by lakemq.remoting.codec ------------------------------------------------------

cdef object _fallback = None  # the Python decoder: (buffer, start, end) -> RemotingCommand
cdef object _frame_error = None
cdef bint _bound = False


def bind(command_type, fallback, frame_error, languages_by_name, language_other, language_names, json_type):
    """Called once by lakemq.remoting.codec with its own definitions."""
    global _fallback, _frame_error, _bound
    bind_reader(command_type, languages_by_name, language_other, json_type)
    bind_writer(command_type, language_names, json_type)
    _fallback, _frame_error = fallback, frame_error
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
            command = read_command(data + start + HEADER_MARK_SIZE, header_len, body)
            # ``data`` may have moved if the command's building ran Python code that resized
            # ``source``; nothing here does, and the buffer is the caller's own.
        if command is None:
            command = _fallback(source, start, end)
        commands.append(command)
        pos = end
    return commands, pos


# -- writing a frame -------------------------------------------------------------------------

cdef object _encode(object command, bint with_body):
    cdef Out o
    cdef object body
    cdef Py_ssize_t body_len = 0, header_len
    if not _bound:
        return None
    body = json_body(command)
    if body is None:
        return None
    if with_body:
        body_len = PyBytes_GET_SIZE(body)
    o.cap = 256 + body_len
    o.len = FRAME_LENGTH_SIZE + HEADER_MARK_SIZE
    o.buf = <uint8_t *>PyMem_Malloc(o.cap)
    if o.buf == NULL:
        raise MemoryError()
    try:
        if write_header(&o, command):
            return None
        header_len = o.len - FRAME_LENGTH_SIZE - HEADER_MARK_SIZE
        if header_len > HEADER_LENGTH_MASK:
            return None
        if with_body and body_len:
            out_raw(&o, PyBytes_AS_STRING(body), body_len)
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
