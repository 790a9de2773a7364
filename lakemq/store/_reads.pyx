# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A pull's read in C: ConsumeQueue entries walked, filtered by tags code, and their CommitLog
records copied into one buffer (gather_records).

Why compiled: read in Python, every pulled message cost an entry tuple, a few method calls and a
bytes object of its record, about 2 us; here it is a check and a memcpy. The rules are
MessageStore._read_queue's (lakemq.store.message_store), which stays the definition and reads
everything this does not take: a filter that is not decided by tags codes alone, a record
whose CommitLog file is gone or not where the entry says. tests/store/test_reads.py checks with
hypothesis that both read the same. Layouts are named in _layout.pxd.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING
from cpython.ref cimport PyObject, Py_XDECREF
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memcpy

from lakemq.store._layout cimport *

cdef extern from "Python.h":
    int PySet_Contains(object anyset, object key) except -1
    int _PyBytes_Resize(PyObject **bytes, Py_ssize_t newsize) except -1
    PyObject *PyBytes_FromStringAndSize_raw "PyBytes_FromStringAndSize" (const char *v, Py_ssize_t size)

__all__ = ["gather_records"]

cdef Py_ssize_t _FIRST_CAPACITY = 64 * 1024


def gather_records(entries, object codes, Py_ssize_t max_msg_nums, Py_ssize_t max_total_bytes,
                   int64_t max_phy, int64_t memory_limit, Py_ssize_t disk_bytes, Py_ssize_t disk_count,
                   Py_ssize_t memory_bytes, Py_ssize_t memory_count, object view_of):
    """Read a pull from ConsumeQueue ``entries`` (a buffer of whole 20-byte entries, the first
    at the pulled offset): ``(body, count, read, last_phy)``, the matching records joined in
    ``body``, how many entries were consumed and the CommitLog offset of the last one looked
    at; or None when a record is not where this path can read it (the Python read decides).

    ``codes``: None when every tags code matches, else the set of matching codes. The limits
    are the pull's (message count, bytes) and the store's, in memory and on disk as judged by
    ``max_phy - offset > memory_limit``. ``view_of(offset)``: ``(buffer, start)`` of the
    written bytes of the CommitLog file holding ``offset``, or None."""
    cdef Py_buffer cq, log
    cdef const uint8_t *e
    cdef int64_t log_start = 0, log_end = -1, offset, last_phy = 0
    cdef Py_ssize_t n, i, size, total = 0, count = 0, read = 0, capacity = 0
    cdef bint in_disk, have_log = False
    cdef PyObject *body = NULL  # owned: grown in place, handed over at the end
    cdef object result
    PyObject_GetBuffer(entries, &cq, PyBUF_SIMPLE)
    try:
        n = cq.len // CQ_STORE_UNIT_SIZE
        for i in range(n):
            e = <const uint8_t *>cq.buf + i * CQ_STORE_UNIT_SIZE
            size = <int32_t>get32(e + CQ_SIZE_POS)
            if size == CQ_BLANK_UNIT_SIZE:
                read += 1
                continue
            offset = get64(e + CQ_OFFSET_POS)
            last_phy = offset
            if total and count:
                if count >= max_msg_nums or total + size > max_total_bytes:
                    break
                in_disk = max_phy - offset > memory_limit
                if in_disk:
                    if total + size > disk_bytes or count >= disk_count:
                        break
                elif total + size > memory_bytes or count >= memory_count:
                    break
            read += 1
            if codes is not None and not PySet_Contains(codes, get64(e + CQ_TAGS_CODE_POS)):
                continue
            if size <= 0 or offset < 0:
                return None
            if offset < log_start or offset + size > log_end:
                if have_log:
                    PyBuffer_Release(&log)
                    have_log = False
                found = view_of(offset)
                if found is None:
                    return None
                view, start = found
                PyObject_GetBuffer(view, &log, PyBUF_SIMPLE)
                have_log = True
                log_start = start
                log_end = log_start + log.len
                if offset < log_start or offset + size > log_end:
                    return None
            if total + size > capacity:
                capacity = max(total + size, capacity * 2, min(_FIRST_CAPACITY, max_total_bytes))
                if body == NULL:
                    body = PyBytes_FromStringAndSize_raw(NULL, capacity)
                    if body == NULL:
                        raise MemoryError()
                else:
                    _PyBytes_Resize(&body, capacity)
            memcpy(PyBytes_AS_STRING(<object>body) + total, <const uint8_t *>log.buf + (offset - log_start), size)
            total += size
            count += 1
        if body == NULL:
            result = b""
        else:
            _PyBytes_Resize(&body, total)
            result = <object>body  # a reference of its own; ours goes in ``finally``
        return result, count, read, last_phy
    finally:
        Py_XDECREF(body)
        if have_log:
            PyBuffer_Release(&log)
        PyBuffer_Release(&cq)
