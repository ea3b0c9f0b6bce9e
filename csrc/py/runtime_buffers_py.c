/* runtime_buffers_py.c -- a Runtime's buffers from Python: read (a view of host memory, a
 * copy of device memory), written, and the record backend's lists (tests of the CUDA
 * backend's stream and event plan). */
#include "problem_py.h"  /* CPython and NumPy C API (NO_IMPORT_ARRAY side) */

#include <string.h>  /* memcpy, strcmp */

#include "../exec/gpu/gpu_plan.h"  /* sw_gpu_cmd: the record backend's lists */
#include "../exec/backend_ext.h"       /* sw_backend_record_list, sw_backend_record_streams */
#include "pyerr.h"                     /* sw_py_raise */
#include "runtime_py.h"
#include "../exec/runtime_internal.h"  /* struct sw_runtime: the bindings report on its insides */

/* Buffer b of the runtime (IndexError when there is none): its box as array dimensions. */
static const sw_buffer *buffer_arg(RuntimeObject *self, PyObject *arg, long *b, npy_intp *dims) {
    if (!self->rt) {
        PyErr_SetString(PyExc_RuntimeError, "Runtime is not initialized");
        return NULL;
    }
    *b = PyLong_AsLong(arg);
    if (*b == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (*b < 0 || *b >= self->rt->g.nbuffers) {
        PyErr_Format(PyExc_IndexError, "no buffer %ld (the graph has %d)", *b, self->rt->g.nbuffers);
        return NULL;
    }
    const sw_buffer *buf = &self->rt->g.buffers[*b];
    if (!sw_runtime_runs_device(self->rt, buf->device)) {
        PyErr_Format(PyExc_ValueError, "buffer %ld lies on device %d, which rank %d does not run (its memory is in "
                     "another process)", *b, buf->device, sw_runtime_rank(self->rt));
        return NULL;
    }
    for (int d = 0; d < buf->box.rank; d++) {
        dims[d] = buf->box.hi[d] - buf->box.lo[d];
    }
    return buf;
}

/* A view of the buffer in its arena (host-memory backends), else a copy from the device. */
PyObject *Runtime_buffer(RuntimeObject *self, PyObject *arg) {
    long b;
    npy_intp dims[SW_MAX_RANK];
    const sw_buffer *buf = buffer_arg(self, arg, &b, dims);
    if (!buf) {
        return NULL;
    }
    int type = buf->kind == SW_BUF_STATS ? NPY_FLOAT64 : NPY_FLOAT32;
    void *data = sw_runtime_buffer(self->rt, (int32_t)b);
    const sw_backend *be = self->rt->backend;
    if (be->i->to_host) {
        if (!sw_py_runtime_ready(self)) {
            return NULL;
        }
        PyObject *a = PyArray_SimpleNew(buf->box.rank, dims, type);
        if (!a) {
            return NULL;
        }
        sw_status s;
        Py_BEGIN_ALLOW_THREADS
        s = be->i->to_host(self->rt->backend, buf->device, PyArray_DATA((PyArrayObject *)a), data,
                           (size_t)sw_buffer_bytes(buf));
        Py_END_ALLOW_THREADS
        if (s != SW_OK) {
            Py_DECREF(a);
            return sw_py_raise(s);
        }
        return a;
    }
    PyObject *a = PyArray_SimpleNewFromData(buf->box.rank, dims, type, data);
    if (a && PyArray_SetBaseObject((PyArrayObject *)a, Py_NewRef((PyObject *)self)) < 0) {
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

/* write(b, array): buffer b = array (its exact shape; float64 for statistics, else float32). */
PyObject *Runtime_write(RuntimeObject *self, PyObject *args) {
    PyObject *barg, *obj;
    if (!PyArg_ParseTuple(args, "OO", &barg, &obj) || !sw_py_runtime_ready(self)) {
        return NULL;
    }
    long b;
    npy_intp dims[SW_MAX_RANK];
    const sw_buffer *buf = buffer_arg(self, barg, &b, dims);
    if (!buf) {
        return NULL;
    }
    int type = buf->kind == SW_BUF_STATS ? NPY_FLOAT64 : NPY_FLOAT32;
    PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(obj, type, 0, 0, NPY_ARRAY_IN_ARRAY | NPY_ARRAY_FORCECAST);
    if (!a) {
        return NULL;
    }
    int same = PyArray_NDIM(a) == buf->box.rank;
    for (int d = 0; same && d < buf->box.rank; d++) {
        same = PyArray_DIM(a, d) == dims[d];
    }
    if (!same) {
        Py_DECREF(a);
        return PyErr_Format(PyExc_ValueError, "buffer %ld: the array's shape differs from the buffer's", b);
    }
    void *data = sw_runtime_buffer(self->rt, (int32_t)b);
    const sw_backend *be = self->rt->backend;
    sw_status s = SW_OK;
    if (be->i->from_host) {
        Py_BEGIN_ALLOW_THREADS
        s = be->i->from_host(self->rt->backend, buf->device, data, PyArray_DATA(a), (size_t)sw_buffer_bytes(buf));
        Py_END_ALLOW_THREADS
    } else {
        memcpy(data, PyArray_DATA(a), (size_t)sw_buffer_bytes(buf));
    }
    Py_DECREF(a);
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    Py_RETURN_NONE;
}

/* recorded(list) -> (ops, streams, ids, stream_device, stream_priority): what the record
 * backend recorded (tests of the CUDA backend's stream and event plan). */
PyObject *Runtime_recorded(RuntimeObject *self, PyObject *arg) {
    if (!sw_py_runtime_ready(self)) {
        return NULL;
    }
    long list = PyLong_AsLong(arg);
    if (list == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (strcmp(self->rt->backend->i->name, "record") != 0 || list < 0 || list >= SW_NLISTS) {
        return PyErr_Format(PyExc_ValueError, "recorded(list): a runtime on the record backend, list 0, 1 or 2");
    }
    int32_t n;
    const sw_gpu_cmd *c = sw_backend_record_list(self->rt->backend, (int)list, &n);
    const int *device, *priority;
    int ns = sw_backend_record_streams(self->rt->backend, &device, &priority);
    PyObject *ops = PyList_New(n), *streams = PyList_New(n), *ids = PyList_New(n);
    PyObject *sd = PyList_New(ns), *sp = PyList_New(ns);
    int ok = ops && streams && ids && sd && sp;
    for (int32_t i = 0; ok && i < n; i++) {
        PyList_SET_ITEM(ops, i, PyLong_FromLong(c[i].op));
        PyList_SET_ITEM(streams, i, PyLong_FromLong(c[i].stream));
        PyList_SET_ITEM(ids, i, PyLong_FromLong(c[i].id));
    }
    for (int k = 0; ok && k < ns; k++) {
        PyList_SET_ITEM(sd, k, PyLong_FromLong(device[k]));
        PyList_SET_ITEM(sp, k, PyLong_FromLong(priority[k]));
    }
    if (!ok || PyErr_Occurred()) {
        Py_XDECREF(ops);
        Py_XDECREF(streams);
        Py_XDECREF(ids);
        Py_XDECREF(sd);
        Py_XDECREF(sp);
        return NULL;
    }
    return Py_BuildValue("(NNNNN)", ops, streams, ids, sd, sp);
}

int sw_py_register_runtime_buffers(void) {
    import_array1(-1);   /* this file's own NumPy API table */
    return 0;
}
