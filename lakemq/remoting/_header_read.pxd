# cython: language_level=3
"""The JSON header reader (lakemq/remoting/_header_read.pyx) as the frame codec calls it."""

from libc.stdint cimport uint8_t


# lakemq.remoting.codec's definitions, through _codec.bind; TypeError if RemotingCommand's
# slots are not the expected ones.
cdef int bind_reader(object command_type, object languages_by_name, object language_other,
                     object json_type) except -1
# The command of a JSON header in the common form, else None (the Python codec decides).
cdef object read_command(const uint8_t *header, Py_ssize_t header_len, object body)
