/* module.c -- shardwise._mpi: the MPI communicator (comm_mpi.c) as a Python type.
 *
 * A separate extension module, built only where the build found MPI (tools/build_mpi.py), so
 * that `import shardwise` never needs libmpi.  Python reaches it through shardwise.distributed,
 * which adds the checks and the friendly names; this file only converts arguments:
 *
 *   library_version() -> (text, (major, minor))   MPI_Get_library_version: no MPI_Init
 *   build_version()   -> "MPICH 5.0.2"            the mpi.h compiled against
 *   Comm()                                        MPI_Init_thread (or adopt) + the comm thread
 *     .rank .size .local_rank .thread_level .initialized_here .max_tag
 *     .isend(buffer, peer, tag) -> request        the buffer is held until the request completes
 *     .irecv(writable buffer, peer, tag) -> request
 *     .test(request) -> bool    .wait(request, timeout_s)   (TimeoutError names peer and tag)
 *     .allgather(bytes, timeout_s) -> bytes (size * len)    .allreduce_f32(float32 buffer, timeout_s)
 *     .counters() -> (sent per peer, received per peer)     .reset_counters()
 *     .abort(code, why)    .close() -> unfinished requests  ._capsule() -> sw_comm_ext (comm.h)
 *
 * Waits release the GIL; the comm thread never takes it.  The methods and attributes are the
 * generic binding of any sw_comm_i (csrc/py/comm_py.c, compiled into this module too): this file
 * adds the constructor, MPI's thread level and the library's versions.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "comm_mpi.h"
#include "../py/comm_py.h"  /* the generic binding (every method through the sw_comm_i table) */

static const sw_py_comm_ops MPI_OPS = {
    .thread_level = sw_comm_mpi_thread_level,
    .initialized_here = sw_comm_mpi_initialized_here,
    .free = sw_comm_mpi_free,
};

/* MPI can start once per process: a second Comm() is refused (shardwise.distributed keeps one). */
static int comm_made;

static PyObject *Comm_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, ":Comm", kw)) {
        return NULL;
    }
    if (comm_made) {
        PyErr_SetString(PyExc_RuntimeError, "MPI has been started in this process already: one communicator per "
                        "process (shardwise.distributed.init() returns it)");
        return NULL;
    }
    sw_py_comm *self = (sw_py_comm *)type->tp_alloc(type, 0);
    if (!self) {
        return NULL;
    }
    sw_comm *c = NULL;
    const sw_comm_i *i = NULL;
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = sw_comm_mpi_new(&c, &i);
    Py_END_ALLOW_THREADS
    if (s != SW_OK) {
        Py_DECREF(self);   /* comm NULL: nothing to close */
        return sw_py_comm_raise(s);
    }
    comm_made = 1;
    sw_py_comm_adopt(self, c, i, &MPI_OPS);
    return (PyObject *)self;
}

static PyTypeObject CommType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shardwise._mpi.Comm",
    .tp_basicsize = sizeof(sw_py_comm),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An MPI communicator over every rank of the job, its MPI calls on one comm thread.",
    .tp_new = Comm_new,
    .tp_dealloc = sw_py_comm_dealloc,
    .tp_methods = sw_py_comm_methods,
    .tp_getset = sw_py_comm_getset,
};

static PyObject *mod_library_version(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
    char text[512];
    int major = 0, minor = 0;
    sw_mpi_library_version(text, sizeof text, &major, &minor);
    return Py_BuildValue("(s(ii))", text, major, minor);
}

static PyObject *mod_build_version(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
    return PyUnicode_FromString(sw_mpi_build_version());
}

static PyMethodDef module_methods[] = {
    {"library_version", mod_library_version, METH_NOARGS,
     "library_version() -> (MPI_Get_library_version's first line, (major, minor)); MPI is not started"},
    {"build_version", mod_build_version, METH_NOARGS, "build_version() -> the mpi.h compiled against"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef mpi_module = {
    PyModuleDef_HEAD_INIT, "shardwise._mpi",
    "sw_comm_i over MPI (csrc/mpi/): use it through shardwise.distributed.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__mpi(void) {
    if (PyType_Ready(&CommType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&mpi_module);
    if (!m) {
        return NULL;
    }
    Py_INCREF(&CommType);
    if (PyModule_AddObject(m, "Comm", (PyObject *)&CommType) < 0 ||
        PyModule_AddIntConstant(m, "ABI_VERSION", SW_COMM_ABI_VERSION) < 0) {
        Py_DECREF(&CommType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
