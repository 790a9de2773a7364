# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The plain send in C (PlainSends): a SEND_MESSAGE_V2 of one message to a known topic, read
from the request's extFields, checked, put through the store's one entry point
(MessageStore.put of a PlainPut) and answered, without the Python send processor's header
object, checks and reply in between. A put that waits for its acknowledgement (the disk's
under SYNC_FLUSH, a slave's under SYNC_MASTER) is handed to the processor's ``later``, which
answers through ``acknowledged`` once PutAcks answered: a PUT_OK is answered in C then too.

Why compiled: a sync send's Python around the store's put cost about as much as the put (the
header decoded into a frozen object, the checks, the reply's fields and command). The send
processor (lakemq.broker.processor.send_processor) stays the definition: ``send`` answers
None, having done nothing, for everything it does not take exactly as that processor would
(any field missing or not a plain number, a batch, a retry topic, a transaction's half, a
timer message, an unknown topic, a permission or queue id it would refuse), and the processor handles the
request from the start. Once the store was called, a result other than a plain PUT_OK is
answered by the processor's own reply (``reply``). tests/broker/test_send_path.py checks with
hypothesis that both answer and store the same.
"""

from cpython.dict cimport PyDict_GetItem
from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM
from libc.stdint cimport int64_t
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from lakemq.common._slots cimport lakemq_alloc, lakemq_slot_offset, lakemq_slot_set

cdef extern from "Python.h":
    bint PyUnicode_CheckExact(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    int PyUnicode_KIND(object)
    void *PyUnicode_DATA(object)
    Py_UCS4 PyUnicode_READ(int kind, void *data, Py_ssize_t index)

__all__ = ["PlainSends"]

# SendMessageRequestHeaderV2's one-letter names (lakemq.remoting.headers) that a plain send uses.
cdef str _TOPIC = "b"
cdef str _QUEUE_ID = "e"
cdef str _SYS_FLAG = "f"
cdef str _BORN = "g"
cdef str _FLAG = "h"
cdef str _PROPERTIES = "i"
cdef str _RECONSUME = "j"
cdef str _MAX_RECONSUME = "l"
cdef str _BATCH = "m"
cdef str _DEFAULT_QUEUE_NUMS = "d"
cdef tuple _REQUIRED = ("a", "c")  # producerGroup, defaultTopic: any text
cdef str _FALSE = "false"
# A timer message (TIMER_DELIVER_MS, TIMER_DELAY_SEC ...) takes the processor's path: its reply
# carries a recall handle.
cdef str _TIMER = "TIMER_"

# The response's fields (SendMessageResponseHeader, then MSG_REGION and TRACE_ON).
cdef str _MSG_ID = "msgId"
cdef str _QUEUE_ID_OUT = "queueId"
cdef str _QUEUE_OFFSET = "queueOffset"

cdef bint _number(object text, bint negative_ok, int64_t *out) except -1:
    """A decimal the Python header decoder reads the same (ASCII digits, an optional minus),
    within int64, into ``out``; False otherwise (int() decides)."""
    cdef Py_ssize_t i = 0, n
    cdef int kind, digit
    cdef void *data
    cdef int64_t v = 0
    cdef bint negative = False
    if not PyUnicode_CheckExact(text):
        return False
    n = PyUnicode_GET_LENGTH(text)
    kind = PyUnicode_KIND(text)
    data = PyUnicode_DATA(text)
    if n and negative_ok and <int>PyUnicode_READ(kind, data, 0) == 0x2D:
        negative = True
        i = 1
    if i >= n or n - i > 18:
        return False
    while i < n:
        digit = <int>PyUnicode_READ(kind, data, i) - 0x30
        if digit < 0 or digit > 9:
            return False
        v = v * 10 + digit
        i += 1
    out[0] = -v if negative else v
    return True


cdef class PlainSends:
    cdef object _topic_config  # TopicConfigManager.select_topic_config
    cdef object _config  # BrokerConfig: its permission is read per send (it may change)
    cdef object _writeable  # PermName.is_writeable
    cdef object _valid_name  # is_valid_name
    cdef object _not_allowed  # topics no producer may send to
    cdef str _retry_prefix
    cdef str _transaction_pair
    cdef str _wait
    cdef object _without_wait  # without_wait_true
    cdef object _plain_put  # PlainPut
    cdef object _put  # MessageStore.put
    cdef bytes _suffix  # the broker's CLUSTER pair
    cdef object _put_ok  # PutMessageStatus.PUT_OK
    cdef object _record  # SendTallies.record
    cdef object _reply  # the processor's reply for any other result
    cdef object _later  # the processor's answer to a put that waits for its acknowledgement
    cdef object _command_type  # RemotingCommand
    cdef object _language, _version, _empty_body
    cdef str _region_key, _region, _trace_key, _trace
    cdef Py_ssize_t _o[9]
    cdef dict _valid  # topic -> is_valid_name(topic), bounded

    def __init__(self, topic_config, config, writeable, valid_name, not_allowed, str retry_prefix,
                 str transaction_pair, str wait, without_wait, plain_put, put, bytes suffix, put_ok, record,
                 reply, later, command_type, language, int version, str region_key, str region, str trace_key,
                 str trace):
        self._topic_config, self._config, self._writeable, self._valid_name = topic_config, config, writeable, valid_name
        self._not_allowed, self._retry_prefix, self._transaction_pair = not_allowed, retry_prefix, transaction_pair
        self._wait, self._without_wait, self._plain_put, self._put = wait, without_wait, plain_put, put
        self._suffix, self._put_ok, self._record, self._reply, self._later = suffix, put_ok, record, reply, later
        self._command_type, self._language, self._version, self._empty_body = command_type, language, version, b""
        self._region_key, self._region, self._trace_key, self._trace = region_key, region, trace_key, trace
        names = ("code", "language", "version", "opaque", "flag", "remark", "ext_fields", "body", "serialize_type")
        for i, name in enumerate(names):
            offset = lakemq_slot_offset(command_type.__dict__[name])
            if offset < 0:
                raise TypeError(f"{command_type.__name__}.{name} is not a plain slot")
            self._o[i] = offset
        self._valid = {}

    def send(self, ctx, request, sink=None, token=None):
        """The response to a plain send, stored; or None, nothing done: the processor decides.
        ``sink`` and ``token`` go to MessageStore.put; a put that comes back pending is
        answered by ``later`` (what it returns is returned)."""
        cdef dict ext = request.ext_fields
        cdef PyObject *found
        cdef int64_t queue_id, sys_flag, born, flag, ignored, reconsume = 0
        cdef timespec t
        cdef double started
        for name in _REQUIRED:
            if PyDict_GetItem(ext, name) == NULL:
                return None
        found = PyDict_GetItem(ext, _BATCH)
        if found != NULL and <object>found != _FALSE:
            return None
        found = PyDict_GetItem(ext, _TOPIC)
        if found == NULL or not PyUnicode_CheckExact(<object>found):
            return None
        topic = <object>found
        if topic.startswith(self._retry_prefix) or topic in self._not_allowed:
            return None
        if not (self._int(ext, _QUEUE_ID, False, &queue_id) and self._int(ext, _SYS_FLAG, True, &sys_flag)
                and self._int(ext, _BORN, True, &born) and self._int(ext, _FLAG, True, &flag)
                # read, and refused when not a number, though a known topic does not use it
                and self._int(ext, _DEFAULT_QUEUE_NUMS, True, &ignored)):
            return None
        found = PyDict_GetItem(ext, _MAX_RECONSUME)
        if found != NULL and not _number(<object>found, True, &ignored):
            return None
        found = PyDict_GetItem(ext, _RECONSUME)
        if found != NULL and not _number(<object>found, True, &reconsume):
            return None
        found = PyDict_GetItem(ext, _PROPERTIES)
        properties = "" if found == NULL else <object>found
        if not PyUnicode_CheckExact(properties) or self._transaction_pair in properties or _TIMER in properties:
            return None
        if not self._writeable(self._config.broker_permission) or not self._valid_topic(topic):
            return None
        topic_config = self._topic_config(topic)
        if topic_config is None or not self._writeable(topic_config.perm):
            return None
        if queue_id >= max(<int64_t>topic_config.write_queue_nums, <int64_t>topic_config.read_queue_nums):
            return None
        if self._wait in properties:
            properties = self._without_wait(properties)
        clock_gettime(CLOCK_MONOTONIC, &t)
        started = t.tv_sec + t.tv_nsec * 1e-9
        put = tuple.__new__(self._plain_put, (topic, queue_id, request.body, properties, flag, sys_flag, born,
                                              ctx.remote_addr, reconsume, self._suffix))
        result = self._put(put, sink, token)
        if <object>PyTuple_GET_ITEM(result, 3):  # pending: PutAcks answers later, through ``sink``
            return self._later(ctx, request, topic, queue_id, result, started, token)
        return self._answer(ctx, request, topic, queue_id, result, started, <object>PyTuple_GET_ITEM(result, 0))

    def acknowledged(self, ctx, request, str topic, int64_t queue_id, result, double started, status):
        """The answer to a send whose put came back pending (``later`` was called), now that its
        acknowledgement ``status`` came: as ``send`` answers a put acknowledged at once."""
        return self._answer(ctx, request, topic, queue_id, result, started, status)

    cdef object _answer(self, ctx, request, str topic, int64_t queue_id, result, double started, status):
        """SUCCESS built here for a put that is PUT_OK with no remark; anything else is the
        processor's reply (its refusals and the stored-but-not-acknowledged statuses)."""
        cdef timespec t
        cdef double elapsed
        append = <object>PyTuple_GET_ITEM(result, 1)
        if status is not self._put_ok or append is None or <object>PyTuple_GET_ITEM(result, 2):
            if status is not <object>PyTuple_GET_ITEM(result, 0):
                result = result.acknowledged(status)
            return self._reply(ctx, request, topic, queue_id, result, started)
        clock_gettime(CLOCK_MONOTONIC, &t)
        elapsed = t.tv_sec + t.tv_nsec * 1e-9 - started
        self._record(topic, <object>PyTuple_GET_ITEM(append, 6), <object>PyTuple_GET_ITEM(append, 7), elapsed)
        fields = {_MSG_ID: <object>PyTuple_GET_ITEM(append, 3), _QUEUE_ID_OUT: str(queue_id),
                  _QUEUE_OFFSET: str(<object>PyTuple_GET_ITEM(append, 5)), self._region_key: self._region,
                  self._trace_key: self._trace}
        response = lakemq_alloc(self._command_type)
        lakemq_slot_set(response, self._o[0], 0)  # ResponseCode.SUCCESS
        lakemq_slot_set(response, self._o[1], self._language)
        lakemq_slot_set(response, self._o[2], self._version)
        lakemq_slot_set(response, self._o[3], request.opaque)
        lakemq_slot_set(response, self._o[4], 1)  # FLAG_RESPONSE
        lakemq_slot_set(response, self._o[5], None)
        lakemq_slot_set(response, self._o[6], fields)
        lakemq_slot_set(response, self._o[7], self._empty_body)
        lakemq_slot_set(response, self._o[8], request.serialize_type)
        return response

    cdef bint _int(self, dict ext, str name, bint negative_ok, int64_t *out) except -1:
        cdef PyObject *found = PyDict_GetItem(ext, name)
        return found != NULL and _number(<object>found, negative_ok, out)

    cdef bint _valid_topic(self, topic) except -1:
        cdef PyObject *found = PyDict_GetItem(self._valid, topic)
        if found != NULL:
            return <object>found is True
        valid = bool(self._valid_name(topic))
        if len(self._valid) >= 4096:
            self._valid.clear()
        self._valid[topic] = valid
        return valid
