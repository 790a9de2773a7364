# cython: language_level=3
"""The remoting frame's layout as the compiled codec names it. The Python side names the same
things in lakemq.remoting.codec; tests/remoting/test_compiled_codec.py checks each name here
against it (``_codec.layout()``).

A frame (big endian)::

    | length (4) | serialization type (1) | header length (3) | header | body |
"""

cdef enum:
    FRAME_LENGTH_SIZE = 4  # the length prefix, not counted in itself
    HEADER_MARK_SIZE = 4  # serialization type << 24 | header length
    SERIALIZE_TYPE_SHIFT = 24
    HEADER_LENGTH_MASK = 0xFFFFFF
    SERIALIZE_JSON = 0
    SERIALIZE_ROCKETMQ = 1
    FLAG_RESPONSE = 1
    FLAG_ONEWAY = 2
    INT32_MAX = 0x7FFFFFFF
