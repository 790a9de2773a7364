# cython: language_level=3
"""Building instances of lakemq's ``__slots__`` classes (RemotingCommand, MessageExt) from
compiled code: the offset of each slot is read once from its member descriptor, then an instance
is allocated as ``object.__new__`` does and its slots filled directly, which costs a fraction of
the class's Python ``__init__``. Every slot must be filled before the instance is used."""

cdef extern from *:
    """
    #include "structmember.h"
    /* Where a plain object slot of a __slots__ class lives in its instances; -1 if ``descr``
       is not one. */
    static Py_ssize_t lakemq_slot_offset(PyObject *descr) {
        if (Py_TYPE(descr) != &PyMemberDescr_Type) return -1;
        PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READONLY)) return -1;
        return m->offset;
    }
    /* An instance of ``cls`` with every slot empty, as object.__new__(cls). */
    static PyObject *lakemq_alloc(PyObject *cls) {
        PyTypeObject *t = (PyTypeObject *)cls;
        return t->tp_alloc(t, 0);
    }
    static void lakemq_slot_set(PyObject *obj, Py_ssize_t offset, PyObject *value) {
        PyObject **slot = (PyObject **)((char *)obj + offset);
        PyObject *old = *slot;
        Py_INCREF(value);
        *slot = value;
        Py_XDECREF(old);
    }
    /* A slot's value (a new reference); None for an empty slot, which never occurs for the
       instances filled through these helpers. */
    static PyObject *lakemq_slot_get(PyObject *obj, Py_ssize_t offset) {
        PyObject *value = *(PyObject **)((char *)obj + offset);
        if (value == NULL) value = Py_None;
        Py_INCREF(value);
        return value;
    }
    """
    Py_ssize_t lakemq_slot_offset(object descr)
    object lakemq_alloc(object cls)
    void lakemq_slot_set(object obj, Py_ssize_t offset, object value)
    object lakemq_slot_get(object obj, Py_ssize_t offset)
