# cython: language_level=3
"""RemotingCommand as the compiled codec (_codec, _header_read, _header_write) sees it: where
each of its slots lives in an instance, read from its class once, when lakemq.remoting.codec
binds the codec (lakemq.common._slots reads and fills the slots at these offsets)."""

from lakemq.common._slots cimport lakemq_slot_offset


cdef struct CommandSlots:
    Py_ssize_t code, language, version, opaque, flag, remark, ext, body, kind


cdef inline CommandSlots command_slots(object command_type) except *:
    """The offsets of ``command_type``'s slots; TypeError unless it has exactly these slots,
    each a plain one."""
    cdef CommandSlots o
    fields = ("code", "language", "version", "opaque", "flag", "remark", "ext_fields", "body", "serialize_type")
    offsets = []
    for name in fields:
        offset = lakemq_slot_offset(command_type.__dict__[name])
        if offset < 0:
            raise TypeError(f"{command_type.__name__}.{name} is not a plain slot")
        offsets.append(offset)
    if len(command_type.__slots__) != len(fields):
        raise TypeError(f"{command_type.__name__} has slots {command_type.__slots__}, expected {fields}")
    o.code, o.language, o.version, o.opaque, o.flag, o.remark, o.ext, o.body, o.kind = offsets
    return o
