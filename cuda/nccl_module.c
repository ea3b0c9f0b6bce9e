/* nccl_module.c -- shardwise._cuda's Python types for NCCL (comm_nccl.c) and GPU buffers.
 *
 *   HAVE_NCCL                 whether this build has the NCCL communicator (SW_HAVE_NCCL)
 *   nccl_version()            ncclGetVersion of the libnccl loaded (major*10000 + minor*100 + patch),
 *                             None where the build has no NCCL
 *   DeviceBuffer(nbytes, device=0)                cudaMalloc'd bytes on a GPU, freed with the object
 *     .ptr .nbytes .device    .upload(buffer)     .download(writable buffer=None) -> bytes or buffer
 *     .zero()
 *   NcclComm(bootstrap=None, device=0, timeout=300.0)
 *                             bootstrap: a "shardwise.comm" capsule (shardwise._mpi's Comm._capsule())
 *                             whose ranks all call this together; None: a one-rank communicator
 *     .rank .size .local_rank .device .closed
 *     .isend(DeviceBuffer, peer, tag) -> request  (the buffer is held until the request is consumed)
 *     .irecv(DeviceBuffer, peer, tag) -> request
 *     .test(request) -> bool   .wait(request, timeout_s=-1)   (TimeoutError names the request)
 *     .allreduce_f32(DeviceBuffer, timeout_s=-1)   .allgather(DeviceBuffer in, DeviceBuffer out, timeout_s=-1)
 *     .counters() -> (sent per peer, received per peer)   .reset_counters()
 *     .abort(code, why)   .close() -> unfinished requests   ._capsule() -> sw_comm_ext (comm.h)
 *
 * The NcclComm keeps the bootstrap's capsule; whoever made the capsule must keep its Comm alive
 * as long as this one (shardwise.distributed.nccl does).  Waits release the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "comm_nccl.h"
#include "cuda_backend.h"

/* ---------------------------------------------------------------- DeviceBuffer */

typedef struct {
    PyObject_HEAD
    void *ptr;
    Py_ssize_t nbytes;
    int device;
} DevBufObject;

static PyTypeObject DevBufType;

static PyObject *cuda_error(cudaError_t e, const char *what) {
    (void)cudaGetLastError();
    PyErr_Format(e == cudaErrorMemoryAllocation ? PyExc_MemoryError : PyExc_RuntimeError, "CUDA: %s: %s (%s)", what,
                 cudaGetErrorString(e), cudaGetErrorName(e));
    return NULL;
}

static PyObject *DevBuf_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"nbytes", "device", NULL};
    Py_ssize_t nbytes;
    int device = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n|i:DeviceBuffer", kw, &nbytes, &device)) {
        return NULL;
    }
    if (nbytes < 0) {
        return PyErr_Format(PyExc_ValueError, "DeviceBuffer of %zd bytes", nbytes);
    }
    DevBufObject *self = (DevBufObject *)type->tp_alloc(type, 0);
    if (!self) {
        return NULL;
    }
    self->device = device;
    self->nbytes = nbytes;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) {
        e = cudaMalloc(&self->ptr, nbytes ? (size_t)nbytes : 1);
    }
    if (e != cudaSuccess) {
        self->ptr = NULL;
        Py_DECREF(self);
        return cuda_error(e, "allocating a device buffer");
    }
    return (PyObject *)self;
}

static void DevBuf_dealloc(DevBufObject *self) {
    if (self->ptr) {
        (void)cudaSetDevice(self->device);
        (void)cudaFree(self->ptr);
        (void)cudaGetLastError();
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *DevBuf_copy(DevBufObject *self, PyObject *obj, int upload) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, upload ? PyBUF_C_CONTIGUOUS : (PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE)) < 0) {
        return NULL;
    }
    if (view.len != self->nbytes) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "the device buffer has %zd bytes, the host buffer %zd", self->nbytes,
                            view.len);
    }
    cudaError_t e;
    Py_BEGIN_ALLOW_THREADS
    e = cudaSetDevice(self->device);
    if (e == cudaSuccess && self->nbytes) {
        e = upload ? cudaMemcpy(self->ptr, view.buf, (size_t)view.len, cudaMemcpyHostToDevice)
                   : cudaMemcpy(view.buf, self->ptr, (size_t)view.len, cudaMemcpyDeviceToHost);
    }
    /* a copy from pageable memory may return before its DMA lands, and the communicator's
     * stream does not wait for the default stream: the bytes are on the GPU when this returns */
    if (e == cudaSuccess && upload) {
        e = cudaDeviceSynchronize();
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (e != cudaSuccess) {
        return cuda_error(e, upload ? "copying to the GPU" : "copying from the GPU");
    }
    Py_RETURN_NONE;
}

static PyObject *DevBuf_upload(DevBufObject *self, PyObject *obj) { return DevBuf_copy(self, obj, 1); }

static PyObject *DevBuf_download(DevBufObject *self, PyObject *args) {
    PyObject *obj = Py_None;
    if (!PyArg_ParseTuple(args, "|O:download", &obj)) {
        return NULL;
    }
    if (obj != Py_None) {
        PyObject *r = DevBuf_copy(self, obj, 0);
        if (!r) {
            return NULL;
        }
        Py_DECREF(r);
        return Py_NewRef(obj);
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, self->nbytes);
    if (!out) {
        return NULL;
    }
    PyObject *r = DevBuf_copy(self, out, 0);
    if (!r) {
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(r);
    PyObject *bytes = PyBytes_FromStringAndSize(PyByteArray_AS_STRING(out), self->nbytes);
    Py_DECREF(out);
    return bytes;
}

static PyObject *DevBuf_zero(DevBufObject *self, PyObject *Py_UNUSED(ignored)) {
    cudaError_t e = cudaSetDevice(self->device);
    if (e == cudaSuccess && self->nbytes) {
        e = cudaMemset(self->ptr, 0, (size_t)self->nbytes);
    }
    if (e == cudaSuccess) {
        e = cudaDeviceSynchronize();
    }
    if (e != cudaSuccess) {
        return cuda_error(e, "zeroing a device buffer");
    }
    Py_RETURN_NONE;
}

static PyObject *DevBuf_get_ptr(DevBufObject *self, void *Py_UNUSED(closure)) {
    return PyLong_FromVoidPtr(self->ptr);
}
static PyObject *DevBuf_get_nbytes(DevBufObject *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->nbytes);
}
static PyObject *DevBuf_get_device(DevBufObject *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLong(self->device);
}

static PyGetSetDef DevBuf_getset[] = {
    {"ptr", (getter)DevBuf_get_ptr, NULL, "the device address", NULL},
    {"nbytes", (getter)DevBuf_get_nbytes, NULL, "its size in bytes", NULL},
    {"device", (getter)DevBuf_get_device, NULL, "the GPU it is on", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef DevBuf_methods[] = {
    {"upload", (PyCFunction)DevBuf_upload, METH_O, "upload(buffer of nbytes bytes): host -> GPU"},
    {"download", (PyCFunction)DevBuf_download, METH_VARARGS,
     "download(writable buffer=None) -> the buffer filled, or bytes: GPU -> host"},
    {"zero", (PyCFunction)DevBuf_zero, METH_NOARGS, "zero(): every byte 0"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DevBufType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shardwise._cuda.DeviceBuffer",
    .tp_basicsize = sizeof(DevBufObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "DeviceBuffer(nbytes, device=0): bytes in a GPU's memory (cudaMalloc), freed with the object.",
    .tp_new = DevBuf_new,
    .tp_dealloc = (destructor)DevBuf_dealloc,
    .tp_methods = DevBuf_methods,
    .tp_getset = DevBuf_getset,
};

/* ---------------------------------------------------------------- NcclComm */

typedef struct {
    sw_comm_req req;
    PyObject *obj;
} lent;

typedef struct {
    PyObject_HEAD
    sw_comm *comm;          /* NULL once closed */
    const sw_comm_i *i;
    PyObject *boot;         /* the bootstrap's capsule (or None): kept while the communicator lives */
    lent *lent;
    Py_ssize_t nlent, caplent;
    sw_comm_ext ext;        /* what _capsule() points to */
} NcclObject;

static PyObject *raise_status(sw_status s) {
    PyObject *type = s == SW_ERR_TIMEOUT ? PyExc_TimeoutError
                   : s == SW_ERR_VALUE   ? PyExc_ValueError
                   : s == SW_ERR_NOMEM   ? PyExc_MemoryError
                                         : PyExc_RuntimeError;
    PyErr_SetString(type, sw_last_error());
    return NULL;
}

static int check_open(NcclObject *self) {
    if (!self->comm) {
        PyErr_SetString(PyExc_ValueError, "the NCCL communicator is closed");
        return -1;
    }
    return 0;
}

static int lend(NcclObject *self, sw_comm_req req, PyObject *obj) {
    if (self->nlent == self->caplent) {
        Py_ssize_t cap = self->caplent ? self->caplent * 2 : 16;
        lent *grown = PyMem_Realloc(self->lent, (size_t)cap * sizeof *grown);
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        self->lent = grown;
        self->caplent = cap;
    }
    self->lent[self->nlent].req = req;
    self->lent[self->nlent].obj = Py_NewRef(obj);
    self->nlent++;
    return 0;
}

/* Every buffer lent to `req` is given back. */
static void give_back(NcclObject *self, sw_comm_req req) {
    for (Py_ssize_t k = self->nlent - 1; k >= 0; k--) {
        if (self->lent[k].req == req) {
            PyObject *obj = self->lent[k].obj;
            self->lent[k] = self->lent[--self->nlent];
            Py_DECREF(obj);
        }
    }
}

/* A DeviceBuffer on the communicator's GPU, or NULL with TypeError / ValueError. */
static DevBufObject *device_buffer(NcclObject *self, PyObject *obj, const char *what) {
    if (!PyObject_TypeCheck(obj, &DevBufType)) {
        PyErr_Format(PyExc_TypeError, "%s takes a shardwise._cuda.DeviceBuffer, not %.80s", what,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    DevBufObject *b = (DevBufObject *)obj;
    int device = sw_comm_nccl_device(self->comm);
    if (b->device != device) {
        PyErr_Format(PyExc_ValueError, "%s: the buffer is on GPU %d, the communicator on GPU %d", what, b->device,
                     device);
        return NULL;
    }
    return b;
}

static PyObject *Nccl_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"bootstrap", "device", "timeout", NULL};
    PyObject *boot = Py_None;
    int device = 0;
    double timeout = 300.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|Oid:NcclComm", kw, &boot, &device, &timeout)) {
        return NULL;
    }
    const sw_comm_ext *ext = NULL;
    if (boot != Py_None) {
        ext = PyCapsule_GetPointer(boot, SW_COMM_CAPSULE);   /* TypeError/ValueError for another capsule */
        if (!ext) {
            return NULL;
        }
    }
    NcclObject *self = (NcclObject *)type->tp_alloc(type, 0);
    if (!self) {
        return NULL;
    }
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = sw_comm_nccl_new(ext, device, timeout, &self->comm, &self->i);
    Py_END_ALLOW_THREADS
    if (s != SW_OK) {
        self->comm = NULL;
        Py_DECREF(self);
        return raise_status(s);
    }
    self->boot = Py_NewRef(boot);
    self->ext = (sw_comm_ext){SW_COMM_ABI_VERSION, sizeof(sw_comm_i), self->i, self->comm};
    return (PyObject *)self;
}

static int close_comm(NcclObject *self) {
    int unfinished = 0;
    if (self->comm) {
        sw_comm *c = self->comm;
        self->comm = NULL;
        Py_BEGIN_ALLOW_THREADS
        sw_comm_nccl_free(c, &unfinished);
        Py_END_ALLOW_THREADS
    }
    while (self->nlent > 0) {
        PyObject *obj = self->lent[--self->nlent].obj;
        Py_DECREF(obj);
    }
    return unfinished;
}

static void Nccl_dealloc(NcclObject *self) {
    close_comm(self);
    PyMem_Free(self->lent);
    Py_XDECREF(self->boot);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Nccl_close(NcclObject *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromLong(close_comm(self));
}

static PyObject *Nccl_send_recv(NcclObject *self, PyObject *args, int send) {
    PyObject *obj;
    int peer;
    long long tag;
    if (!PyArg_ParseTuple(args, send ? "OiL:isend" : "OiL:irecv", &obj, &peer, &tag) || check_open(self)) {
        return NULL;
    }
    DevBufObject *b = device_buffer(self, obj, send ? "isend" : "irecv");
    if (!b) {
        return NULL;
    }
    sw_comm_req req;
    sw_status s = send ? self->i->isend(self->comm, b->ptr, (size_t)b->nbytes, peer, tag, &req)
                       : self->i->irecv(self->comm, b->ptr, (size_t)b->nbytes, peer, tag, &req);
    if (s != SW_OK) {
        return raise_status(s);
    }
    if (lend(self, req, obj) < 0) {
        return NULL;
    }
    return PyLong_FromLongLong(req);
}

static PyObject *Nccl_isend(NcclObject *self, PyObject *args) { return Nccl_send_recv(self, args, 1); }
static PyObject *Nccl_irecv(NcclObject *self, PyObject *args) { return Nccl_send_recv(self, args, 0); }

static PyObject *Nccl_test(NcclObject *self, PyObject *args) {
    long long req;
    int done = 0;
    if (!PyArg_ParseTuple(args, "L:test", &req) || check_open(self)) {
        return NULL;
    }
    sw_status s = self->i->test(self->comm, req, &done);
    if (done) {
        give_back(self, req);
    }
    if (s != SW_OK) {
        return raise_status(s);
    }
    return PyBool_FromLong(done);
}

/* wait with the GIL released; 0, or -1 with the exception set.  The buffers lent to the request
 * are given back once it is consumed; a timeout leaves it outstanding, its buffers lent. */
static int wait_req(NcclObject *self, sw_comm_req req, double timeout) {
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = self->i->wait(self->comm, req, timeout);
    Py_END_ALLOW_THREADS
    if (s != SW_ERR_TIMEOUT) {
        give_back(self, req);
    }
    if (s != SW_OK) {
        raise_status(s);
        return -1;
    }
    return 0;
}

static PyObject *Nccl_wait(NcclObject *self, PyObject *args) {
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

static PyObject *Nccl_allreduce_f32(NcclObject *self, PyObject *args) {
    PyObject *obj;
    double timeout = -1.0;
    if (!PyArg_ParseTuple(args, "O|d:allreduce_f32", &obj, &timeout) || check_open(self)) {
        return NULL;
    }
    DevBufObject *b = device_buffer(self, obj, "allreduce_f32");
    if (!b) {
        return NULL;
    }
    if (b->nbytes % 4) {
        return PyErr_Format(PyExc_ValueError, "allreduce_f32 sums float32: %zd bytes is not a whole number of them",
                            b->nbytes);
    }
    sw_comm_req req;
    sw_status s = self->i->allreduce_f32(self->comm, (float *)b->ptr, (int64_t)(b->nbytes / 4), &req);
    if (s != SW_OK) {
        return raise_status(s);
    }
    if (lend(self, req, obj) < 0 || wait_req(self, req, timeout) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Nccl_allgather(NcclObject *self, PyObject *args) {
    PyObject *in_obj, *out_obj;
    double timeout = -1.0;
    if (!PyArg_ParseTuple(args, "OO|d:allgather", &in_obj, &out_obj, &timeout) || check_open(self)) {
        return NULL;
    }
    DevBufObject *in = device_buffer(self, in_obj, "allgather");
    DevBufObject *out = in ? device_buffer(self, out_obj, "allgather") : NULL;
    if (!out) {
        return NULL;
    }
    int n = self->i->size(self->comm);
    if (out->nbytes != in->nbytes * n) {
        return PyErr_Format(PyExc_ValueError, "allgather of %zd bytes per rank over %d ranks needs an output of %zd "
                            "bytes, not %zd", in->nbytes, n, in->nbytes * n, out->nbytes);
    }
    sw_comm_req req;
    sw_status s = self->i->allgather(self->comm, in->ptr, (size_t)in->nbytes, out->ptr, &req);
    if (s != SW_OK) {
        return raise_status(s);
    }
    if (lend(self, req, in_obj) < 0 || lend(self, req, out_obj) < 0 || wait_req(self, req, timeout) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Nccl_counters(NcclObject *self, PyObject *Py_UNUSED(ignored)) {
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

static PyObject *Nccl_reset_counters(NcclObject *self, PyObject *Py_UNUSED(ignored)) {
    if (check_open(self)) {
        return NULL;
    }
    self->i->reset_counters(self->comm);
    Py_RETURN_NONE;
}

static PyObject *Nccl_abort(NcclObject *self, PyObject *args) {
    int code = 1;
    const char *why = "no reason given";
    if (!PyArg_ParseTuple(args, "|is:abort", &code, &why) || check_open(self)) {
        return NULL;
    }
    self->i->abort(self->comm, code, why);
    Py_RETURN_NONE;   /* not reached */
}

static PyObject *Nccl_capsule(NcclObject *self, PyObject *Py_UNUSED(ignored)) {
    if (check_open(self)) {
        return NULL;
    }
    return PyCapsule_New(&self->ext, SW_COMM_CAPSULE, NULL);
}

#define NCCL_INT_GETTER(name, expr)                                                \
    static PyObject *Nccl_get_##name(NcclObject *self, void *Py_UNUSED(closure)) { \
        if (check_open(self)) {                                                    \
            return NULL;                                                           \
        }                                                                          \
        return PyLong_FromLongLong((long long)(expr));                             \
    }
NCCL_INT_GETTER(rank, self->i->rank(self->comm))
NCCL_INT_GETTER(size, self->i->size(self->comm))
NCCL_INT_GETTER(local_rank, self->i->local_rank(self->comm))
NCCL_INT_GETTER(device, sw_comm_nccl_device(self->comm))

static PyObject *Nccl_get_closed(NcclObject *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->comm == NULL);
}

static PyGetSetDef Nccl_getset[] = {
    {"rank", (getter)Nccl_get_rank, NULL, "this process's rank", NULL},
    {"size", (getter)Nccl_get_size, NULL, "the number of ranks", NULL},
    {"local_rank", (getter)Nccl_get_local_rank, NULL, "the rank among this machine's ranks (the bootstrap's)", NULL},
    {"device", (getter)Nccl_get_device, NULL, "the GPU this rank's NCCL calls run on", NULL},
    {"closed", (getter)Nccl_get_closed, NULL, "close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Nccl_methods[] = {
    {"isend", (PyCFunction)Nccl_isend, METH_VARARGS, "isend(DeviceBuffer, peer, tag) -> request"},
    {"irecv", (PyCFunction)Nccl_irecv, METH_VARARGS, "irecv(DeviceBuffer, peer, tag) -> request"},
    {"test", (PyCFunction)Nccl_test, METH_VARARGS, "test(request) -> completed (and consumed)"},
    {"wait", (PyCFunction)Nccl_wait, METH_VARARGS, "wait(request, timeout_s=-1): TimeoutError names the request"},
    {"allreduce_f32", (PyCFunction)Nccl_allreduce_f32, METH_VARARGS,
     "allreduce_f32(DeviceBuffer, timeout_s=-1): the float32 sum over the ranks, in place"},
    {"allgather", (PyCFunction)Nccl_allgather, METH_VARARGS,
     "allgather(DeviceBuffer in, DeviceBuffer out of size * in.nbytes, timeout_s=-1)"},
    {"counters", (PyCFunction)Nccl_counters, METH_NOARGS, "counters() -> (sent per peer, received per peer)"},
    {"reset_counters", (PyCFunction)Nccl_reset_counters, METH_NOARGS, "zero the byte counters"},
    {"abort", (PyCFunction)Nccl_abort, METH_VARARGS, "abort(code=1, why=...): ncclCommAbort, then the bootstrap's"},
    {"close", (PyCFunction)Nccl_close, METH_NOARGS, "free the communicator (abort it if requests are left)"},
    {"_capsule", (PyCFunction)Nccl_capsule, METH_NOARGS, "the sw_comm_ext table (csrc/exec/comm.h)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject NcclType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shardwise._cuda.NcclComm",
    .tp_basicsize = sizeof(NcclObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "NcclComm(bootstrap=None, device=0, timeout=300.0): NCCL over the bootstrap's ranks, one GPU each.",
    .tp_new = Nccl_new,
    .tp_dealloc = (destructor)Nccl_dealloc,
    .tp_methods = Nccl_methods,
    .tp_getset = Nccl_getset,
};

/* ---------------------------------------------------------------- the module's part */

PyObject *cu_nccl_version(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    (void)self;
#if SW_HAVE_NCCL
    return PyLong_FromLong(sw_nccl_version());
#else
    Py_RETURN_NONE;
#endif
}

int cu_nccl_add_types(PyObject *m) {
    if (PyType_Ready(&DevBufType) < 0 || PyType_Ready(&NcclType) < 0) {
        return -1;
    }
    if (PyModule_AddObjectRef(m, "DeviceBuffer", (PyObject *)&DevBufType) < 0 ||
        PyModule_AddObjectRef(m, "NcclComm", (PyObject *)&NcclType) < 0 ||
        PyModule_AddObjectRef(m, "HAVE_NCCL", SW_HAVE_NCCL ? Py_True : Py_False) < 0 ||
        PyModule_AddIntConstant(m, "COMM_ABI_VERSION", SW_COMM_ABI_VERSION) < 0) {
        return -1;
    }
    return 0;
}
