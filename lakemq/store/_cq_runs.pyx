# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""ConsumeQueue entries in C: a scanned batch's records (lakemq.store._scan) grouped into each
queue's runs of consecutive queue offsets, every run packed as the 20-byte entries
lakemq.store.consume_queue writes (layout named in _layout.pxd)."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from lakemq.store._layout cimport *
from lakemq.store._scan cimport DispatchBatch, Parsed

__all__ = ["consume_queue_runs"]


cdef struct Group:  # one queue's state while its ConsumeQueue runs are formed
    uint64_t key
    Py_ssize_t run
    int64_t last_queue_offset
    int64_t last_end


cdef struct Run:
    Py_ssize_t topic
    int32_t queue_id
    int64_t first_queue_offset
    Py_ssize_t count
    uint8_t *cursor



def consume_queue_runs(DispatchBatch batch):
    """The ConsumeQueue entries of the records that get one (neither prepared nor rolled
    back), as runs: (topic, queue id, first queue offset, packed 20-byte entries), each
    run one queue's entries with consecutive queue offsets and rising CommitLog offsets,
    in CommitLog order within a queue. Also the store time of the last such record (None: none)."""
    cdef Py_ssize_t i, g, run, n_runs = 0, n_groups = 0, mask = 1
    cdef Parsed *r
    cdef uint64_t key
    cdef Group *grp
    cdef list out = [], packed = []
    cdef Py_ssize_t last = -1  # the last record given an entry
    while mask < 2 * batch.count:
        mask <<= 1
    cdef Py_ssize_t *slots = <Py_ssize_t *>PyMem_Malloc(mask * sizeof(Py_ssize_t))
    cdef Group *groups = <Group *>PyMem_Malloc(max(batch.count, 1) * sizeof(Group))
    cdef Run *runs = <Run *>PyMem_Malloc(max(batch.count, 1) * sizeof(Run))
    cdef Py_ssize_t *rec_run = <Py_ssize_t *>PyMem_Malloc(max(batch.count, 1) * sizeof(Py_ssize_t))
    mask -= 1
    try:
        if slots == NULL or groups == NULL or runs == NULL or rec_run == NULL:
            raise MemoryError()
        for i in range(mask + 1):
            slots[i] = -1
        for i in range(batch.count):
            r = &batch.recs[i]
            rec_run[i] = -1
            if not gets_queue_entry(r.sys_flag):
                continue
            last = i
            # the record's queue: open addressing over (topic index, queue id)
            key = (<uint64_t>r.topic << 32) | <uint32_t>r.queue_id  # a damaged record's id may be < 0
            g = <Py_ssize_t>((key * 0x9E3779B97F4A7C15) >> 40) & mask
            while slots[g] >= 0 and groups[slots[g]].key != key:
                g = (g + 1) & mask
            if slots[g] < 0:
                slots[g] = n_groups
                groups[n_groups].key = key
                groups[n_groups].run = -1
                n_groups += 1
            grp = &groups[slots[g]]
            if grp.run < 0 or r.queue_offset != grp.last_queue_offset + 1 or r.phy + r.size <= grp.last_end:
                grp.run = n_runs
                runs[n_runs].topic = r.topic
                runs[n_runs].queue_id = r.queue_id
                runs[n_runs].first_queue_offset = r.queue_offset
                runs[n_runs].count = 0
                n_runs += 1
            grp.last_queue_offset = r.queue_offset
            grp.last_end = r.phy + r.size
            rec_run[i] = grp.run
            runs[grp.run].count += 1
        for run in range(n_runs):
            units = PyBytes_FromStringAndSize(NULL, runs[run].count * CQ_STORE_UNIT_SIZE)
            packed.append(units)
            runs[run].cursor = <uint8_t *>PyBytes_AS_STRING(units)
        for i in range(batch.count):
            run = rec_run[i]
            if run >= 0:
                r = &batch.recs[i]
                put64(runs[run].cursor + CQ_OFFSET_POS, <uint64_t>r.phy)
                put32(runs[run].cursor + CQ_SIZE_POS, <uint32_t>r.size)
                put64(runs[run].cursor + CQ_TAGS_CODE_POS, <uint64_t>r.tags_code)
                runs[run].cursor += CQ_STORE_UNIT_SIZE
        for run in range(n_runs):
            out.append((batch.topics[runs[run].topic], runs[run].queue_id, runs[run].first_queue_offset,
                        packed[run]))
    finally:
        PyMem_Free(slots)
        PyMem_Free(groups)
        PyMem_Free(runs)
        PyMem_Free(rec_run)
    return out, batch.recs[last].store_ts if last >= 0 else None
