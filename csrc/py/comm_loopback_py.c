/* comm_loopback_py.c -- shardwise._core.loopback_comms(n): the loopback communicator (a test double,
 * exec/comm_loopback.h) as n objects of the generic communicator binding (comm_py.c).
 *
 *   a, b = _core.loopback_comms(2)     # rank 0 and rank 1 of one mailbox: give each to a thread
 *   a.isend(x, 1, 7); b.wait(b.irecv(y, 0, 7), 5.0)
 *
 * Each object owns its endpoint (close() or deallocation frees it: its posted receives are
 * cancelled); the mailbox goes with the last.  shardwise.distributed.loopback wraps them in Comm.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "comm_py.h"               /* the binding, sw_py_register_loopback */
#include "../exec/comm_loopback.h"

static int lb_thread_level(const sw_comm *c) {
    (void)c;
    return 3;   /* any thread, any time: MPI_THREAD_MULTIPLE */
}

static int lb_initialized_here(const sw_comm *c) {
    (void)c;
    return 0;   /* no library started */
}

static const sw_py_comm_ops LOOPBACK_OPS = {
    .thread_level = lb_thread_level,
    .initialized_here = lb_initialized_here,
    .free = sw_comm_loopback_free,
};

static PyType_Slot Loopback_slots[] = {
    {Py_tp_doc, "One endpoint of a loopback communicator between the threads of this process (a test double: "
                "jobs use MPI); made by loopback_comms(n)."},
    {Py_tp_dealloc, sw_py_comm_dealloc},
    {Py_tp_methods, sw_py_comm_methods},
    {Py_tp_getset, sw_py_comm_getset},
    {0, NULL},
};

static PyType_Spec Loopback_spec = {
    .name = "shardwise._core.LoopbackComm",
    .basicsize = sizeof(sw_py_comm),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Loopback_slots,
};

static PyObject *loopback_type;   /* the module's (one interpreter) */

static PyObject *loopback_comms(PyObject *Py_UNUSED(m), PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (n < 1 || n > 4096) {
        PyErr_Format(PyExc_ValueError, "loopback_comms(n): n in 1 .. 4096, got %ld", n);
        return NULL;
    }
    sw_comm **ep = PyMem_Calloc((size_t)n, sizeof *ep);
    if (!ep) {
        return PyErr_NoMemory();
    }
    sw_status s = sw_comm_loopback_new((int)n, ep);
    if (s != SW_OK) {
        PyMem_Free(ep);
        return sw_py_comm_raise(s);
    }
    PyObject *out = PyList_New(n);
    PyTypeObject *type = (PyTypeObject *)loopback_type;
    for (long r = 0; r < n; r++) {
        sw_py_comm *obj = out ? (sw_py_comm *)type->tp_alloc(type, 0) : NULL;
        if (!obj) {   /* free the endpoints no object took (the ones that did go with their objects) */
            for (long q = r; q < n; q++) {
                sw_comm_loopback_free(ep[q], NULL);
            }
            Py_XDECREF(out);
            PyMem_Free(ep);
            return NULL;
        }
        sw_py_comm_adopt(obj, ep[r], sw_comm_loopback_table(), &LOOPBACK_OPS);
        PyList_SET_ITEM(out, r, (PyObject *)obj);
    }
    PyMem_Free(ep);
    return out;
}

static PyMethodDef loopback_methods[] = {
    {"loopback_comms", loopback_comms, METH_O,
     "loopback_comms(n) -> n communicator endpoints, ranks 0 .. n-1, between the threads of this process (a test "
     "double: csrc/exec/comm_loopback.h)"},
    {NULL, NULL, 0, NULL},
};

int sw_py_register_loopback(PyObject *module) {
    PyObject *type = PyType_FromModuleAndSpec(module, &Loopback_spec, NULL);
    if (!type) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "LoopbackComm", type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    loopback_type = type;   /* the module holds it too */
    return PyModule_AddFunctions(module, loopback_methods);
}
