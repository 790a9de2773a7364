# cython: language_level=3
"""The SYNC_FLUSH commit thread, in C: it makes the CommitLog durable as puts publish their
end offsets, and never takes the GIL.

Why in C: a Python flusher needs the GIL to start each fdatasync, and the event loop that
appends holds the GIL while it works, so flushes and appends took turns (docs/SYNC_FLUSH.md).
This thread starts the next fdatasync the moment the last one returns, whatever Python is
doing; the group commit (lakemq/store/group_commit.py) only hears of finished flushes, on an
eventfd, and PutAcks (lakemq/store/acks.py) acknowledges the puts they covered. An event
loop may instead flush its own puts at the end of its turn (``publish_deferred``, then
``flush_published`` on the loop's thread); group_commit.py says when.

The thread knows the CommitLog files by a duplicate of their descriptor, oldest first; a file
is dropped once flushed to its end and the next one is known. ``publish(end)`` promises that
every byte below ``end`` is in the mapping (a put calls it after its append).
"""

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc
from posix.unistd cimport close, dup, write

cdef extern from "<errno.h>" nogil:
    int errno

cdef extern from "<unistd.h>" nogil:
    int fdatasync(int fd)
    int usleep(unsigned int usec)

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec
    int clock_gettime(int clock_id, timespec *tp)
    int CLOCK_MONOTONIC

cdef extern from "<pthread.h>" nogil:
    ctypedef unsigned long pthread_t
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    ctypedef struct pthread_condattr_t:
        pass
    int pthread_condattr_init(pthread_condattr_t *attr)
    int pthread_condattr_setclock(pthread_condattr_t *attr, int clock_id)
    int pthread_condattr_destroy(pthread_condattr_t *attr)
    int pthread_cond_timedwait(pthread_cond_t *cond, pthread_mutex_t *mutex, const timespec *abstime)
    int pthread_create(pthread_t *thread, const void *attr, void *(*start)(void *) noexcept nogil, void *arg)
    int pthread_join(pthread_t thread, void **result)
    int pthread_mutex_init(pthread_mutex_t *mutex, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *mutex)
    int pthread_mutex_lock(pthread_mutex_t *mutex)
    int pthread_mutex_unlock(pthread_mutex_t *mutex)
    int pthread_cond_init(pthread_cond_t *cond, const void *attr)
    int pthread_cond_destroy(pthread_cond_t *cond)
    int pthread_cond_wait(pthread_cond_t *cond, pthread_mutex_t *mutex)
    int pthread_cond_signal(pthread_cond_t *cond)

__all__ = ["CommitThread"]

cdef enum:
    MAX_RECORDS = 256  # flushes remembered between two take_flushes (the rest fold into the last)
    MAX_NOTIFY = 8
    ERROR_RETRY_US = 10000


cdef struct Segment:
    int fd
    int64_t start
    int64_t end
    Segment *next


cdef struct Waiter:
    # A blocking put's wait, on its own stack: only the flush that covers it wakes it (one
    # condition for all would wake every parked thread after every fdatasync).
    pthread_cond_t cond
    int64_t offset
    Waiter *prev
    Waiter *next


cdef struct State:
    pthread_mutex_t lock
    pthread_cond_t work
    pthread_condattr_t monotonic  # for the waiters' conditions (their deadlines are monotonic)
    Waiter *waiters
    bint ended
    Segment *head
    Segment *tail
    int64_t published
    int64_t flushed
    bint idle
    bint stopping
    int notify_fds[MAX_NOTIFY]
    int notify_count
    int error
    unsigned int delay_us
    bint inline_busy  # a flush_published runs outside the lock: no file is dropped meanwhile
    uint64_t flush_count
    int recorded
    int64_t record_ns[MAX_RECORDS]
    int64_t record_bytes[MAX_RECORDS]


cdef inline int64_t _now_ns() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


cdef void _drop_head(State *s) noexcept nogil:
    cdef Segment *seg = s.head
    s.head = seg.next
    if s.head == NULL:
        s.tail = NULL
    close(seg.fd)
    free(seg)


cdef void _wake_waiters(State *s) noexcept nogil:
    """Signal the waiters the flushed offset now covers (all of them once the thread ended)."""
    cdef Waiter *w = s.waiters
    while w != NULL:
        if w.offset <= s.flushed or s.ended:
            pthread_cond_signal(&w.cond)
        w = w.next


cdef Segment *_segment_to_flush(State *s) noexcept nogil:
    """The file holding the first byte not yet flushed (the head, unless the head is flushed
    to its end and not yet dropped)."""
    cdef Segment *seg = s.head
    while seg != NULL and seg.next != NULL and s.flushed >= seg.end:
        seg = seg.next
    return seg


cdef void _flushed_to(State *s, int64_t target, int64_t elapsed, int quiet_fd) noexcept nogil:
    """Under the lock, after an fdatasync that made the log durable up to ``target``: record
    it, wake the waiters it covers and tell every eventfd but ``quiet_fd``. A flush that ended
    after another one that covered more moves nothing."""
    cdef int i
    cdef uint64_t one = 1
    if target <= s.flushed:
        return
    i = s.recorded if s.recorded < MAX_RECORDS else MAX_RECORDS - 1
    if s.recorded < MAX_RECORDS:
        s.record_ns[i] = 0
        s.record_bytes[i] = 0
        s.recorded += 1
    s.record_ns[i] += elapsed
    s.record_bytes[i] += target - s.flushed
    s.flush_count += 1
    s.flushed = target
    _wake_waiters(s)
    # Under the lock (an eventfd write does not block): once set_notify_fds returns,
    # a descriptor it replaced is never written again, so its owner may close it.
    for i in range(s.notify_count):
        if s.notify_fds[i] != quiet_fd:
            write(s.notify_fds[i], &one, sizeof(one))


cdef void *_commit_loop(void *arg) noexcept nogil:
    cdef State *s = <State *>arg
    cdef Segment *seg
    cdef int64_t target, started, elapsed
    cdef int rc, err
    cdef unsigned int delay
    pthread_mutex_lock(&s.lock)
    while True:
        while not s.inline_busy and s.head != NULL and s.head.next != NULL and s.flushed >= s.head.end:
            _drop_head(s)
        seg = _segment_to_flush(s)
        # One file per fdatasync: the rest of this one first, then the next. Nothing to do
        # also when the end published lies past the files known (their next is on its way).
        target = s.flushed
        if seg != NULL:
            target = s.published if s.published < seg.end else seg.end
        if target <= s.flushed:
            if s.stopping:
                break
            s.idle = True
            pthread_cond_wait(&s.work, &s.lock)
            s.idle = False
            continue
        delay = s.delay_us
        pthread_mutex_unlock(&s.lock)
        if delay:
            usleep(delay)
        started = _now_ns()
        rc = fdatasync(seg.fd)
        err = errno
        elapsed = _now_ns() - started
        pthread_mutex_lock(&s.lock)
        if rc != 0:
            s.error = err
            if s.stopping:  # a disk that fails now will not be waited for at shutdown
                break
            pthread_mutex_unlock(&s.lock)
            usleep(ERROR_RETRY_US)
            pthread_mutex_lock(&s.lock)
            continue
        if target > s.flushed:  # a sync that made nothing new durable (an inline flush did) clears no error
            s.error = 0
        _flushed_to(s, target, elapsed, -1)
    while s.inline_busy:  # a flush on another thread still uses a file's descriptor
        pthread_mutex_unlock(&s.lock)
        usleep(1000)
        pthread_mutex_lock(&s.lock)
    while s.head != NULL:
        _drop_head(s)
    s.ended = True
    _wake_waiters(s)
    pthread_mutex_unlock(&s.lock)
    return NULL


cdef class CommitThread:
    """One commit thread over one CommitLog: ``flushed`` is where the log is durable up to
    (from the ``flushed`` given here on); the eventfds of set_notify_fds get a count after
    every fdatasync."""

    cdef State *_s
    cdef pthread_t _thread
    cdef bint _running

    def __cinit__(self, int64_t flushed):
        self._s = <State *>malloc(sizeof(State))
        if self._s == NULL:
            raise MemoryError()
        s = self._s
        pthread_mutex_init(&s.lock, NULL)
        pthread_cond_init(&s.work, NULL)
        pthread_condattr_init(&s.monotonic)
        pthread_condattr_setclock(&s.monotonic, CLOCK_MONOTONIC)
        s.waiters = NULL
        s.ended = False
        s.head = s.tail = NULL
        s.published = s.flushed = flushed
        s.idle = s.stopping = False
        s.notify_count = 0
        s.error = 0
        s.delay_us = 0
        s.inline_busy = False
        s.flush_count = 0
        s.recorded = 0
        self._running = False

    def __dealloc__(self):
        if self._s == NULL:
            return
        self.stop()
        while self._s.head != NULL:
            _drop_head(self._s)
        pthread_cond_destroy(&self._s.work)
        pthread_condattr_destroy(&self._s.monotonic)
        pthread_mutex_destroy(&self._s.lock)
        free(self._s)
        self._s = NULL

    def start(self) -> None:
        if self._running:
            return
        rc = pthread_create(&self._thread, NULL, _commit_loop, self._s)
        if rc != 0:
            raise OSError(rc, "cannot start the commit thread")
        self._running = True

    def stop(self) -> None:
        """Flush what was published, then end the thread (and drop every file)."""
        if not self._running:
            return
        pthread_mutex_lock(&self._s.lock)
        self._s.stopping = True
        pthread_cond_signal(&self._s.work)
        pthread_mutex_unlock(&self._s.lock)
        with nogil:
            pthread_join(self._thread, NULL)
        self._running = False

    def add_file(self, int fd, int64_t start, int64_t end) -> None:
        """The next CommitLog file (the first one, or the one starting where the last ends)."""
        cdef Segment *seg = <Segment *>malloc(sizeof(Segment))
        if seg == NULL:
            raise MemoryError()
        seg.fd = dup(fd)
        if seg.fd < 0:
            free(seg)
            raise OSError(errno, "cannot duplicate a CommitLog descriptor")
        seg.start, seg.end, seg.next = start, end, NULL
        s = self._s
        pthread_mutex_lock(&s.lock)
        if s.tail == NULL:
            s.head = seg
            if s.flushed < start:  # nothing before a first file to make durable
                s.flushed = start
                if s.published < start:
                    s.published = start
        else:
            s.tail.next = seg
        s.tail = seg
        if s.idle:
            pthread_cond_signal(&s.work)
        pthread_mutex_unlock(&s.lock)

    def set_notify_fds(self, fds) -> None:
        """The eventfds told after every fdatasync from now on (at most MAX_NOTIFY); one
        replaced may be closed as soon as this returns."""
        cdef int n = len(fds)
        if n > MAX_NOTIFY:
            raise ValueError(f"at most {MAX_NOTIFY} descriptors to notify")
        cdef int values[MAX_NOTIFY]
        for i in range(n):
            values[i] = fds[i]
        s = self._s
        pthread_mutex_lock(&s.lock)
        for i in range(n):
            s.notify_fds[i] = values[i]
        s.notify_count = n
        pthread_mutex_unlock(&s.lock)

    def publish(self, int64_t end) -> None:
        """Every byte below ``end`` is written: make it durable."""
        s = self._s
        if end <= s.published:  # a racy read is fine: a stale value only takes the lock
            return
        pthread_mutex_lock(&s.lock)
        if end > s.published:
            s.published = end
            if s.idle:
                pthread_cond_signal(&s.work)
        pthread_mutex_unlock(&s.lock)

    def publish_deferred(self, int64_t end) -> None:
        """As :meth:`publish`, without waking the thread: the caller flushes it soon itself
        (:meth:`flush_published`) or calls :meth:`kick`."""
        s = self._s
        if end <= s.published:
            return
        pthread_mutex_lock(&s.lock)
        if end > s.published:
            s.published = end
        pthread_mutex_unlock(&s.lock)

    def kick(self) -> None:
        """Wake the thread for what was published and is not flushed yet."""
        s = self._s
        pthread_mutex_lock(&s.lock)
        if s.idle and s.published > s.flushed:
            pthread_cond_signal(&s.work)
        pthread_mutex_unlock(&s.lock)

    def flush_published(self, int quiet_fd=-1) -> int:
        """fdatasync everything published, on the calling thread and without the GIL, one
        file at a time; recorded, and told to every eventfd but ``quiet_fd``, as the thread's
        flushes are. Returns the nanoseconds the fdatasyncs took, or -errno when one failed
        (the caller then leaves it to the thread, which retries)."""
        cdef State *s = self._s
        cdef Segment *seg
        cdef int fd, rc = 0, err = 0
        cdef int64_t target, started, elapsed, total = 0
        with nogil:
            pthread_mutex_lock(&s.lock)
            s.inline_busy = True
            while True:
                seg = _segment_to_flush(s)
                if seg == NULL:
                    break
                target = s.published if s.published < seg.end else seg.end
                if target <= s.flushed:
                    break
                fd = seg.fd
                pthread_mutex_unlock(&s.lock)
                started = _now_ns()
                rc = fdatasync(fd)
                err = errno
                elapsed = _now_ns() - started
                pthread_mutex_lock(&s.lock)
                total += elapsed
                if rc != 0:
                    s.error = err
                    break
                s.error = 0
                _flushed_to(s, target, elapsed, quiet_fd)
            s.inline_busy = False
            pthread_mutex_unlock(&s.lock)
        return -err if rc != 0 else total

    def wait_flushed(self, int64_t offset, double timeout_s) -> bool:
        """Block, without the GIL, until the log is durable up to ``offset``; False if it
        is not within ``timeout_s`` (or the thread ended first)."""
        cdef timespec deadline
        cdef int64_t ns
        cdef bint ok
        cdef Waiter w
        s = self._s
        with nogil:
            clock_gettime(CLOCK_MONOTONIC, &deadline)
            ns = deadline.tv_nsec + <int64_t>(timeout_s * 1e9)
            deadline.tv_sec += ns // 1000000000
            deadline.tv_nsec = ns % 1000000000
            pthread_mutex_lock(&s.lock)
            if s.flushed < offset and not s.ended:
                pthread_cond_init(&w.cond, &s.monotonic)
                w.offset = offset
                w.prev = NULL
                w.next = s.waiters
                if w.next != NULL:
                    w.next.prev = &w
                s.waiters = &w
                while s.flushed < offset and not s.ended:
                    if pthread_cond_timedwait(&w.cond, &s.lock, &deadline) != 0:
                        break  # ETIMEDOUT
                if w.prev != NULL:
                    w.prev.next = w.next
                else:
                    s.waiters = w.next
                if w.next != NULL:
                    w.next.prev = w.prev
                pthread_cond_destroy(&w.cond)
            ok = s.flushed >= offset
            pthread_mutex_unlock(&s.lock)
        return ok

    def take_flushes(self) -> list:
        """(seconds, bytes) of every fdatasync since the last call (past MAX_RECORDS, the
        rest are summed into the last)."""
        s = self._s
        pthread_mutex_lock(&s.lock)
        taken = [(s.record_ns[i] / 1e9, s.record_bytes[i]) for i in range(s.recorded)]
        s.recorded = 0
        pthread_mutex_unlock(&s.lock)
        return taken

    @property
    def flushed(self) -> int:
        pthread_mutex_lock(&self._s.lock)
        flushed = self._s.flushed
        pthread_mutex_unlock(&self._s.lock)
        return flushed

    @property
    def flush_count(self) -> int:
        return self._s.flush_count

    @property
    def error(self) -> int:
        """errno of the last fdatasync if it failed (the thread retries), else 0."""
        return self._s.error

    @property
    def delay_us(self) -> int:
        return self._s.delay_us

    @delay_us.setter
    def delay_us(self, unsigned int value) -> None:
        """A slow disk for fault tests: sleep this long before each fdatasync."""
        self._s.delay_us = value
