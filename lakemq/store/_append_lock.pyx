# cython: language_level=3
"""The CommitLog's append lock in C (see PutMessageSpinLock)."""

from cpython.pythread cimport (
    NOWAIT_LOCK,
    PyThread_acquire_lock,
    PyThread_allocate_lock,
    PyThread_free_lock,
    PyThread_release_lock,
    PyThread_type_lock,
)

cdef extern from "<sched.h>" nogil:
    int sched_yield()

__all__ = ["PutMessageSpinLock"]


cdef class PutMessageSpinLock:
    """The CommitLog's append lock, spinning like RocketMQ's default PutMessageSpinLock. Under
    the GIL a blocking lock forms a convoy: a holder preempted mid-append puts every other
    writer to sleep in the kernel, and each later put pays a futex wake-up. A waiter here
    instead lets go of the GIL and yields the CPU, so the holder finishes its few
    microseconds. Measured with 64 writer threads, async flush: 39k msg/s with
    threading.Lock, 130k spinning (in Python; in C the uncontended enter and exit cost
    0.1 instead of 0.4 us)."""

    cdef PyThread_type_lock lock

    def __cinit__(self):
        self.lock = PyThread_allocate_lock()
        if self.lock == NULL:
            raise MemoryError()

    def __dealloc__(self):
        if self.lock != NULL:
            PyThread_free_lock(self.lock)

    def __enter__(self):
        while not PyThread_acquire_lock(self.lock, NOWAIT_LOCK):
            with nogil:
                sched_yield()

    def __exit__(self, *exc):
        PyThread_release_lock(self.lock)
