# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""IndexFile writes in C: the keys of a scanned batch (lakemq.store._scan) with their
hashes, offsets and store times (IndexKeys), and their entries and hash slots written into
the mapped IndexFile (put_index_keys) with the GIL released. The layout is
lakemq.store.index_file's, named in _layout.pxd."""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from lakemq.store._layout cimport *
from lakemq.store._scan cimport DispatchBatch, Parsed

__all__ = ["IndexKeys", "index_keys", "java_hash", "put_index_keys"]


def java_hash(str text) -> int:
    """Java's ``String.hashCode()`` of ``text`` (signed 32 bits)."""
    return <int32_t>hash_units(0, text)



cdef class IndexKeys:
    """IndexFile keys to add, in CommitLog order: hash, CommitLog offset, store time."""

    cdef int32_t *hashes
    cdef int64_t *phys
    cdef int64_t *timestamps
    cdef readonly Py_ssize_t count

    def __dealloc__(self):
        PyMem_Free(self.hashes)
        PyMem_Free(self.phys)
        PyMem_Free(self.timestamps)

    cdef int _reserve(self, Py_ssize_t n) except -1:
        n = max(n, 1)
        self.hashes = <int32_t *>PyMem_Malloc(n * sizeof(int32_t))
        self.phys = <int64_t *>PyMem_Malloc(n * sizeof(int64_t))
        self.timestamps = <int64_t *>PyMem_Malloc(n * sizeof(int64_t))
        if self.hashes == NULL or self.phys == NULL or self.timestamps == NULL:
            raise MemoryError()
        return 0

    @staticmethod
    def of(list keys, list phys, list timestamps):
        """Keys (strs) hashed here, with their CommitLog offsets and store times."""
        cdef IndexKeys out = IndexKeys.__new__(IndexKeys)
        cdef Py_ssize_t i, n = len(keys)
        if len(phys) != n or len(timestamps) != n:
            raise ValueError("keys, offsets and timestamps differ in length")
        out._reserve(n)
        for i in range(n):
            out.hashes[i] = index_hash(hash_units(0, <str?>keys[i]))
            out.phys[i] = phys[i]
            out.timestamps[i] = timestamps[i]
        out.count = n
        return out

    def __len__(self):
        return self.count

    def phy(self, Py_ssize_t i):
        return self.phys[i]

    def timestamp(self, Py_ssize_t i):
        return self.timestamps[i]


def index_keys(DispatchBatch batch, long long last_indexed):
    """The IndexFile keys (UNIQ_KEY first, then each of KEYS) of the records after
    CommitLog offset ``last_indexed`` that are not rolled back."""
    cdef IndexKeys keys = IndexKeys.__new__(IndexKeys)
    cdef Py_ssize_t i, j, n = 0
    cdef Parsed *r
    keys._reserve(batch.key_count)
    for i in range(batch.count):
        r = &batch.recs[i]
        if is_rolled_back(r.sys_flag) or r.phy <= last_indexed:
            continue
        for j in range(r.first_key, r.first_key + r.key_count):
            keys.hashes[n] = batch.key_hashes[j]
            keys.phys[n] = r.phy
            keys.timestamps[n] = r.store_ts
            n += 1
    keys.count = n
    return keys

# -- IndexFile -------------------------------------------------------------------------------

cdef long long _put_index_entries(uint8_t *b, long long hash_slot_num, long long index, long long *begin,
                                  long long *first_phy, bint *has_first, const int32_t *hashes,
                                  const int64_t *phys, const int64_t *timestamps, Py_ssize_t start,
                                  Py_ssize_t count) noexcept nogil:
    """The IndexFile entries and slots of keys[start:start + count]; returns the slots newly used."""
    cdef Py_ssize_t i
    cdef long long new_slots = 0, entries_pos = INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT_SIZE, slot_pos, diff
    cdef int32_t slot_value, h
    cdef uint8_t *e
    for i in range(start, start + count):
        h = hashes[i]
        slot_pos = INDEX_HEADER_SIZE + (h % hash_slot_num) * INDEX_SLOT_SIZE
        slot_value = <int32_t>get32(b + slot_pos)
        if slot_value <= 0 or slot_value >= index:
            slot_value = 0
            new_slots += 1
        if begin[0] <= 0:
            diff = 0
        else:
            diff = (timestamps[i] - begin[0]) // 1000
            diff = 0 if diff < 0 else (INT32_MAX if diff > INT32_MAX else diff)
        e = b + entries_pos + index * INDEX_ENTRY_SIZE
        put32(e, <uint32_t>h)
        put64(e + INDEX_ENTRY_PHY_POS, <uint64_t>phys[i])
        put32(e + INDEX_ENTRY_TIME_DIFF_POS, <uint32_t>diff)
        put32(e + INDEX_ENTRY_PREV_POS, <uint32_t>slot_value)
        put32(b + slot_pos, <uint32_t>index)
        if index <= 1:  # the first entry's diff is taken before the file's begin is set
            first_phy[0] = phys[i]
            has_first[0] = True
            begin[0] = timestamps[i]
        index += 1
    return new_slots


def put_index_keys(mm, long long hash_slot_num, long long index_num, long long index_count,
                   long long begin_timestamp, IndexKeys keys, Py_ssize_t start):
    """Add ``keys[start:]`` to an IndexFile mapping (as many as fit) after ``index_count - 1``
    entries. Returns (how many were added, slots newly used, begin timestamp, begin offset:
    the file's, set by its first entry; None when it already had one)."""
    cdef Py_buffer view
    cdef Py_ssize_t count
    cdef long long begin = begin_timestamp, new_slots
    cdef long long entries_pos = INDEX_HEADER_SIZE + hash_slot_num * INDEX_SLOT_SIZE
    cdef long long first_phy = 0
    cdef bint has_first = False
    count = min(keys.count - start, index_num - index_count)
    if count <= 0:
        return 0, 0, begin_timestamp, None
    PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE)
    try:
        if view.len < entries_pos + index_num * INDEX_ENTRY_SIZE or hash_slot_num <= 0:
            raise ValueError("the mapping is smaller than the index file")
        with nogil:  # entries and slots land all over the file: page and cache misses, no Python
            new_slots = _put_index_entries(<uint8_t *>view.buf, hash_slot_num, index_count, &begin, &first_phy,
                                           &has_first, keys.hashes, keys.phys, keys.timestamps, start, count)
    finally:
        PyBuffer_Release(&view)
    return count, new_slots, begin, first_phy if has_first else None
