/* comm_py.c -- a communicator as a Python object, through its sw_comm_i table alone (comm_py.h).
 *
 * Compiled into shardwise._core (the loopback test double) and into shardwise._mpi (the MPI
 * communicator): it needs nothing of the core but sw_last_error (csrc/core/status.c).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "comm_py.h"

void sw_py_comm_adopt(sw_py_comm *self, sw_comm *c, const sw_comm_i *i, const sw_py_comm_ops *ops) {
    self->comm = c;
    self->i = i;
    self->ops = ops;
    self->lent = NULL;
    self->nlent = self->caplent = 0;
    self->ext = (sw_comm_ext){SW_COMM_ABI_VERSION, sizeof(sw_comm_i), i, c};
}

PyObject *sw_py_comm_raise(sw_status s) {
    PyObject *type = s == SW_ERR_TIMEOUT ? PyExc_TimeoutError
                   : s == SW_ERR_VALUE   ? PyExc_ValueError
                   : s == SW_ERR_NOMEM   ? PyExc_MemoryError
                                         : PyExc_RuntimeError;
    PyErr_SetString(type, sw_last_error());
    return NULL;
}

static int check_open(sw_py_comm *self) {
    if (!self->comm) {
        PyErr_SetString(PyExc_ValueError, "the communicator is closed");
        return -1;
    }
    return 0;
}

static int lend(sw_py_comm *self, sw_comm_req req, Py_buffer *view) {
    if (self->nlent == self->caplent) {
        Py_ssize_t cap = self->caplent ? self->caplent * 2 : 16;
        sw_py_lent *grown = PyMem_Realloc(self->lent, (size_t)cap * sizeof *grown);
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        self->lent = grown;
        self->caplent = cap;
    }
    self->lent[self->nlent].req = req;
    self->lent[self->nlent].view = *view;
    self->nlent++;
    return 0;
}

static void give_back(sw_py_comm *self, sw_comm_req req) {
    for (Py_ssize_t k = 0; k < self->nlent; k++) {
        if (self->lent[k].req == req) {
            PyBuffer_Release(&self->lent[k].view);
            self->lent[k] = self->lent[--self->nlent];
            return;
        }
    }
}

/* Close the communicator (the implementation's free: receives cancelled), then release every lent buffer. */
static int close_comm(sw_py_comm *self) {
    int unfinished = 0;
    if (self->comm) {
        sw_comm *c = self->comm;
        self->comm = NULL;
        Py_BEGIN_ALLOW_THREADS
        self->ops->free(c, &unfinished);
        Py_END_ALLOW_THREADS
    }
    while (self->nlent > 0) {
        PyBuffer_Release(&self->lent[--self->nlent].view);
    }
    return unfinished;
}

void sw_py_comm_dealloc(PyObject *obj) {
    sw_py_comm *self = (sw_py_comm *)obj;
    PyTypeObject *type = Py_TYPE(obj);
    close_comm(self);
    PyMem_Free(self->lent);
    type->tp_free(obj);
    if (type->tp_flags & Py_TPFLAGS_HEAPTYPE) {
        Py_DECREF(type);   /* a heap type's instances hold a reference to it */
    }
}

static PyObject *Comm_close(sw_py_comm *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromLong(close_comm(self));
}

static PyObject *Comm_send_recv(sw_py_comm *self, PyObject *args, int send) {
    PyObject *obj;
    int peer;
    long long tag;
    if (!PyArg_ParseTuple(args, send ? "OiL:isend" : "OiL:irecv", &obj, &peer, &tag) || check_open(self)) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, send ? PyBUF_C_CONTIGUOUS : (PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)) < 0) {
        return NULL;
    }
    sw_comm_req req;
    sw_status s = send ? self->i->isend(self->comm, view.buf, (size_t)view.len, peer, tag, &req)
                       : self->i->irecv(self->comm, view.buf, (size_t)view.len, peer, tag, &req);
    if (s != SW_OK) {
        PyBuffer_Release(&view);
        return sw_py_comm_raise(s);
    }
    if (lend(self, req, &view) < 0) {
        /* the request is in flight with this buffer: keep it rather than release it */
        return NULL;
    }
    return PyLong_FromLongLong(req);
}

static PyObject *Comm_isend(sw_py_comm *self, PyObject *args) { return Comm_send_recv(self, args, 1); }
static PyObject *Comm_irecv(sw_py_comm *self, PyObject *args) { return Comm_send_recv(self, args, 0); }

static PyObject *Comm_test(sw_py_comm *self, PyObject *args) {
    long long req;
    int done = 0;
    if (!PyArg_ParseTuple(args, "L:test", &req) || check_open(self)) {
        return NULL;
    }
    sw_status s = self->i->test(self->comm, req, &done);
    while (done && self->nlent > 0) {   /* every buffer lent to it */
        Py_ssize_t before = self->nlent;
        give_back(self, req);
        if (self->nlent == before) {
            break;
        }
    }
    if (s != SW_OK) {
        return sw_py_comm_raise(s);
    }
    return PyBool_FromLong(done);
}

/* wait with the GIL released; 0, or -1 with the exception set.  Every buffer lent to the request
 * is given back once the request is consumed; a timeout leaves it outstanding, its buffers lent. */
static int wait_req(sw_py_comm *self, sw_comm_req req, double timeout) {
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = self->i->wait(self->comm, req, timeout);
    Py_END_ALLOW_THREADS
    if (s != SW_ERR_TIMEOUT) {
        Py_ssize_t before;
        do {
            before = self->nlent;
            give_back(self, req);
        } while (self->nlent < before);
    }
    if (s != SW_OK) {
        sw_py_comm_raise(s);
        return -1;
    }
    return 0;
}

static PyObject *Comm_wait(sw_py_comm *self, PyObject *args) {
    long long req;
    double timeout = -1.0;
    if (!PyArg_ParseTuple(args, "L|d:wait", &req, &timeout) || check_open(self)) {
        return NULL;
    }
    if (wait_req(self, req, timeout) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Comm_allgather(sw_py_comm *self, PyObject *args) {
    PyObject *obj;
    double timeout = -1.0;
    if (!PyArg_ParseTuple(args, "O|d:allgather", &obj, &timeout) || check_open(self)) {
        return NULL;
    }
    if (!self->i->allgather) {
        PyErr_SetString(PyExc_NotImplementedError, "this communicator has no allgather");
        return NULL;
    }
    Py_buffer in;
    if (PyObject_GetBuffer(obj, &in, PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    int n = self->i->size(self->comm);
    PyObject *out = PyBytes_FromStringAndSize(NULL, in.len * n);
    if (!out) {
        PyBuffer_Release(&in);
        return NULL;
    }
    sw_comm_req req;
    sw_status s = self->i->allgather(self->comm, in.buf, (size_t)in.len, PyBytes_AS_STRING(out), &req);
    if (s != SW_OK) {
        PyBuffer_Release(&in);
        Py_DECREF(out);
        return sw_py_comm_raise(s);
    }
    /* both buffers belong to the request until it completes: lend them (out through a view) */
    Py_buffer outview;
    if (PyObject_GetBuffer(out, &outview, PyBUF_SIMPLE) < 0 || lend(self, req, &in) < 0 ||
        lend(self, req, &outview) < 0) {
        return NULL;
    }
    if (wait_req(self, req, timeout) < 0) {
        Py_DECREF(out);   /* a timeout: the view lent to the request keeps the bytes alive */
        return NULL;
    }
    return out;
}

static PyObject *Comm_allreduce_f32(sw_py_comm *self, PyObject *args) {
    PyObject *obj;
    double timeout = -1.0;
    if (!PyArg_ParseTuple(args, "O|d:allreduce_f32", &obj, &timeout) || check_open(self)) {
        return NULL;
    }
    if (!self->i->allreduce_f32) {
        PyErr_SetString(PyExc_NotImplementedError, "this communicator has no allreduce");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        return NULL;
    }
    if (view.itemsize != 4 || !view.format || strcmp(view.format, "f") != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "allreduce_f32 sums float32 buffers");
        return NULL;
    }
    sw_comm_req req;
    sw_status s = self->i->allreduce_f32(self->comm, view.buf, view.len / 4, &req);
    if (s != SW_OK) {
        PyBuffer_Release(&view);
        return sw_py_comm_raise(s);
    }
    if (lend(self, req, &view) < 0 || wait_req(self, req, timeout) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Comm_counters(sw_py_comm *self, PyObject *Py_UNUSED(ignored)) {
    if (check_open(self)) {
        return NULL;
    }
    int n = self->i->size(self->comm);
    int64_t *buf = PyMem_Calloc((size_t)(2 * n), sizeof *buf);
    if (!buf) {
        return PyErr_NoMemory();
    }
    self->i->counters(self->comm, buf, buf + n);
    PyObject *sent = PyList_New(n), *received = PyList_New(n);
    for (int p = 0; sent && received && p < n; p++) {
        PyList_SET_ITEM(sent, p, PyLong_FromLongLong(buf[p]));
        PyList_SET_ITEM(received, p, PyLong_FromLongLong(buf[n + p]));
    }
    PyMem_Free(buf);
    if (!sent || !received) {
        Py_XDECREF(sent);
        Py_XDECREF(received);
        return NULL;
    }
    return Py_BuildValue("(NN)", sent, received);
}

static PyObject *Comm_reset_counters(sw_py_comm *self, PyObject *Py_UNUSED(ignored)) {
    if (check_open(self)) {
        return NULL;
    }
    self->i->reset_counters(self->comm);
    Py_RETURN_NONE;
}

static PyObject *Comm_abort(sw_py_comm *self, PyObject *args) {
    int code = 1;
    const char *why = "no reason given";
    if (!PyArg_ParseTuple(args, "|is:abort", &code, &why) || check_open(self)) {
        return NULL;
    }
    self->i->abort(self->comm, code, why);
    Py_RETURN_NONE;   /* not reached */
}

static PyObject *Comm_capsule(sw_py_comm *self, PyObject *Py_UNUSED(ignored)) {
    if (check_open(self)) {
        return NULL;
    }
    return PyCapsule_New(&self->ext, SW_COMM_CAPSULE, NULL);
}

#define INT_GETTER(name, expr)                                                  \
    static PyObject *Comm_get_##name(sw_py_comm *self, void *Py_UNUSED(closure)) { \
        if (check_open(self)) {                                                 \
            return NULL;                                                        \
        }                                                                       \
        return PyLong_FromLongLong((long long)(expr));                          \
    }
INT_GETTER(rank, self->i->rank(self->comm))
INT_GETTER(size, self->i->size(self->comm))
INT_GETTER(local_rank, self->i->local_rank(self->comm))
INT_GETTER(max_tag, self->i->max_tag(self->comm))
INT_GETTER(thread_level, self->ops->thread_level(self->comm))

static PyObject *Comm_get_initialized_here(sw_py_comm *self, void *Py_UNUSED(closure)) {
    if (check_open(self)) {
        return NULL;
    }
    return PyBool_FromLong(self->ops->initialized_here(self->comm));
}

static PyObject *Comm_get_closed(sw_py_comm *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->comm == NULL);
}

PyGetSetDef sw_py_comm_getset[] = {
    {"rank", (getter)Comm_get_rank, NULL, "this process's rank", NULL},
    {"size", (getter)Comm_get_size, NULL, "the number of ranks", NULL},
    {"local_rank", (getter)Comm_get_local_rank, NULL, "the rank among this machine's ranks", NULL},
    {"max_tag", (getter)Comm_get_max_tag, NULL, "the largest tag (MPI_TAG_UB for MPI)", NULL},
    {"thread_level", (getter)Comm_get_thread_level, NULL, "0 single, 1 funneled, 2 serialized, 3 multiple", NULL},
    {"initialized_here", (getter)Comm_get_initialized_here, NULL, "this module started the library (MPI_Init_thread)",
     NULL},
    {"closed", (getter)Comm_get_closed, NULL, "close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyMethodDef sw_py_comm_methods[] = {
    {"isend", (PyCFunction)Comm_isend, METH_VARARGS, "isend(buffer, peer, tag) -> request"},
    {"irecv", (PyCFunction)Comm_irecv, METH_VARARGS, "irecv(writable buffer, peer, tag) -> request"},
    {"test", (PyCFunction)Comm_test, METH_VARARGS, "test(request) -> completed (and consumed)"},
    {"wait", (PyCFunction)Comm_wait, METH_VARARGS, "wait(request, timeout_s=-1): TimeoutError names peer and tag"},
    {"allgather", (PyCFunction)Comm_allgather, METH_VARARGS, "allgather(bytes, timeout_s=-1) -> size * len bytes"},
    {"allreduce_f32", (PyCFunction)Comm_allreduce_f32, METH_VARARGS, "allreduce_f32(float32 buffer, timeout_s=-1)"},
    {"counters", (PyCFunction)Comm_counters, METH_NOARGS, "counters() -> (sent per peer, received per peer)"},
    {"reset_counters", (PyCFunction)Comm_reset_counters, METH_NOARGS, "zero the byte counters"},
    {"abort", (PyCFunction)Comm_abort, METH_VARARGS, "abort(code=1, why=...): end every rank of the job (MPI_Abort)"},
    {"close", (PyCFunction)Comm_close, METH_NOARGS,
     "close the communicator (MPI: stop the comm thread, MPI_Finalize if it initialised MPI)"},
    {"_capsule", (PyCFunction)Comm_capsule, METH_NOARGS, "the sw_comm_ext table (csrc/exec/comm.h)"},
    {NULL, NULL, 0, NULL},
};
