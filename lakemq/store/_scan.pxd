# cython: language_level=3
"""DispatchBatch's C side, for the modules that read a scanned batch (_cq_runs, _index)."""

from libc.stdint cimport int32_t, int64_t

cdef struct Parsed:
    int64_t phy
    int32_t size
    int32_t queue_id
    int64_t queue_offset
    int64_t tags_code
    int64_t store_ts
    int64_t born_ts
    int32_t sys_flag
    int64_t prepared
    Py_ssize_t topic  # index into DispatchBatch.topics
    Py_ssize_t props_pos  # into the scanned buffer
    Py_ssize_t props_len
    Py_ssize_t keys_pos  # the KEYS value, -1 when absent
    Py_ssize_t keys_len
    Py_ssize_t uniq_pos  # the UNIQ_KEY value, -1 when absent
    Py_ssize_t uniq_len
    Py_ssize_t first_key  # this record's index keys are keys[first_key:first_key + key_count]
    Py_ssize_t key_count



cdef class DispatchBatch:
    cdef Parsed *recs
    cdef Py_ssize_t cap
    cdef readonly Py_ssize_t count
    cdef readonly Py_ssize_t end_pos
    cdef readonly int stop
    cdef readonly list topics
    cdef int32_t *key_hashes  # IndexFile hash of topic#key for every index key, records in order
    cdef Py_ssize_t key_count, key_cap
    cdef object buf  # the scanned bytes, for requests()

    cdef int _add_key(self, int32_t h) except -1
