/* runtime_py.c -- the Python Runtime type: one native runtime (csrc/exec/) per object.
 *
 *   rt = _core.Runtime(task_graph, attrs, threads, jitter_us=0, reuse=True)   # a _core.TaskGraph: the plan
 *                                                        # lowered once, with its streams or swap plan
 *   rt = _core.Runtime(problem, kinds, degrees, dev_ptr, devices, attrs, threads, jitter_us=0, reuse=True,
 *                      streams=None, swap=None)          # the same, lowering the plan's arrays first
 *   loss = rt.step(inputs, labels, kind, lr, weight_decay, momentum, dampening, nesterov, beta1, beta2, eps)
 *   loss = rt.forward(inputs, labels, running=False)   # the forward pass alone (loss, predict);
 *                                              # running: batchnorms use running statistics (eval)
 *   a = rt.buffer(b)                           # a NumPy view of buffer b in its arena (a copy on a GPU)
 *   rt.write(b, a)                             # buffer b = a (same shape)
 *
 * backend="cpu" (the default), "cuda" (shardwise._cuda; gpus: one GPU per logical device or
 * None, workspace: bytes per stream or 0) or "record" (tests: records the work, runs none).
 *
 * attrs is one dict per op, by name: {"kind": its _core.OP_KINDS name, "name": the op's name,
 * and exactly the fields of its kind's attribute record} (csrc/exec/op_attrs.h; read and checked
 * by attrs_py.c, shardwise/train/runtime.py op_attrs writes them).  inputs is a list with one entry per
 * op: the minibatch of an input op (a floating-point array of the op's shape, finite),
 * None otherwise; labels N integers in range.  Anything else is a ValueError.
 * streams: None (one stream per device) or a schedule's (stream, stream_device,
 * stream_priority) int32 arrays: per task its stream, per stream its device and priority
 * (a ValueError unless they fit the plan's task graph).
 * A step releases the GIL once for the whole step; a runtime used by two threads at
 * once raises RuntimeError in the second.
 */
#include "problem_py.h"  /* ProblemObject, plan_args, sw_py_* helpers; CPython and NumPy C API */
#include "runtime_py.h"  /* RuntimeObject; buffer, write, recorded (runtime_buffers_py.c) */
#include "taskgraph_py.h"  /* TaskGraphObject, sw_py_tg_enter, sw_py_lower_args */

#include <string.h>  /* memset, memcpy */

#include "../cpu/backend_cpu.h"  /* sw_cpu_has_kernels */
#include "../cpu/kernels.h"      /* sw_conv_scratch_grows */
#include "../exec/runtime_internal.h"  /* struct sw_runtime: the bindings report on its insides */
#include "attrs_py.h"     /* sw_py_parse_attrs */
#include "backend_py.h"   /* sw_py_backend_spec, sw_py_backend_make */
#include "pyerr.h"  /* sw_py_raise */
#include "step_inputs.h"  /* step_inputs, parse_inputs, inputs_free */

static PyTypeObject *problem_type_;   /* shardwise._core.Problem (module.c) */


/* The ops' attributes: one dict per op (shardwise/train/runtime.py op_attrs), by name (attrs_py.c). */
static int parse_attrs(const sw_problem *p, PyObject *obj, sw_op_attrs **out) {
    int *rank = PyMem_Calloc((size_t)p->nops + 1, sizeof *rank);
    if (!rank) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < p->nops; i++) {
        rank[i] = p->ops[i].out_rank;
    }
    int rc = sw_py_parse_attrs(obj, p->nops, rank, out);
    PyMem_Free(rank);
    return rc;
}

/* A new Runtime object running lowering `l` on the backend `spec` names (the GIL released while
 * the backend and the runtime are built), or NULL with the exception set. */
static RuntimeObject *runtime_build(PyTypeObject *type, const sw_problem *p, const sw_lowering *l,
                                    const sw_op_attrs *attrs, int reuse, const sw_py_backend *spec, int threads,
                                    int jitter, const sw_comm_ext *comm, double timeout) {
    RuntimeObject *self = (RuntimeObject *)type->tp_alloc(type, 0);
    if (!self) {
        return NULL;
    }
    sw_backend *backend = NULL;
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = sw_py_backend_make(spec, threads, jitter, &backend);
    if (s == SW_OK) {
        s = sw_runtime_new_ranked(p, l, attrs, reuse, comm, timeout, backend, &self->rt);
    }
    Py_END_ALLOW_THREADS
    if (s != SW_OK) {
        Py_CLEAR(self);
        sw_py_raise(s);
    }
    return self;
}

/* Runtime(tg, attrs, threads, jitter_us=0, reuse=True, backend="cpu", gpus=None, workspace=0): the
 * graph of a TaskGraph, lowered once, with its streams or swap tasks (taskgraph_py.c). */
static PyObject *runtime_of_graph(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"task_graph", "attrs", "threads", "jitter_us", "reuse", "backend", "gpus", "workspace",
                             "comm", "timeout", NULL};
    PyObject *tg_obj, *at, *gpus = Py_None, *comm_obj = Py_None;
    int threads, jitter = 0, reuse = 1;
    const char *backend_name = "cpu";
    long long workspace = 0;
    double timeout = -1.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOi|ipsOLOd", kwlist, &tg_obj, &at, &threads, &jitter, &reuse,
                                     &backend_name, &gpus, &workspace, &comm_obj, &timeout)) {
        return NULL;
    }
    /* comm: the capsule of the job's communicator (shardwise._mpi's Comm._capsule()); the caller keeps
     * its Comm alive as long as the runtime */
    const sw_comm_ext *comm = NULL;
    if (comm_obj != Py_None) {
        comm = PyCapsule_GetPointer(comm_obj, SW_COMM_CAPSULE);
        if (!comm) {
            return NULL;
        }
    }
    TaskGraphObject *tg = (TaskGraphObject *)tg_obj;
    sw_op_attrs *attrs = NULL;
    RuntimeObject *self = NULL;
    sw_py_backend spec = {0};
    if (!sw_py_tg_enter(tg)) {
        return NULL;
    }
    const sw_problem *p = tg->p;
    if (parse_attrs(p, at, &attrs) < 0 || sw_py_backend_spec(backend_name, p->ndev, gpus, workspace, &spec) < 0) {
        goto done;
    }
    self = runtime_build(type, p, tg->l, attrs, reuse, &spec, threads, jitter, comm, timeout);
done:
    sw_py_tg_leave(tg);
    PyMem_Free(attrs);
    sw_py_backend_spec_free(&spec);
    return (PyObject *)self;
}

static PyObject *Runtime_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) > 0 && sw_py_is_taskgraph(PyTuple_GET_ITEM(args, 0))) {
        return runtime_of_graph(type, args, kwds);
    }
    static char *kwlist[] = {"problem", "kinds", "degrees", "dev_ptr", "devices", "attrs", "threads", "jitter_us",
                             "reuse", "streams", "backend", "gpus", "workspace", "swap", NULL};
    PyObject *prob, *k, *dg, *ptr, *dv, *at, *streams_obj = Py_None, *gpus = Py_None, *swap_obj = Py_None;
    int threads, jitter = 0, reuse = 1;
    const char *backend_name = "cpu";
    long long workspace = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOi|ipOsOLO", kwlist, &prob, &k, &dg, &ptr, &dv, &at,
                                     &threads, &jitter, &reuse, &streams_obj, &backend_name, &gpus, &workspace,
                                     &swap_obj)) {
        return NULL;
    }
    ProblemObject *problem = (ProblemObject *)prob;
    if (!PyObject_TypeCheck(prob, problem_type_)) {
        PyErr_SetString(PyExc_TypeError, "Runtime needs a shardwise._core.TaskGraph or a shardwise._core.Problem");
        return NULL;
    }
    if (!sw_py_problem_ready(problem)) {
        return NULL;
    }
    problem->busy = 1;   /* from the conversions on: they read the problem */
    sw_op_attrs *attrs = NULL;
    RuntimeObject *self = NULL;
    sw_py_backend spec = {0};
    sw_lowering *l = NULL;
    if (parse_attrs(problem->p, at, &attrs) < 0 ||
        sw_py_backend_spec(backend_name, problem->p->ndev, gpus, workspace, &spec) < 0 ||
        sw_py_lower_args(problem, k, dg, ptr, dv, streams_obj, swap_obj, &l) < 0) {   /* the plan lowered once */
        goto done;
    }
    self = runtime_build(type, problem->p, l, attrs, reuse, &spec, threads, jitter, NULL, -1.0);
done:
    problem->busy = 0;
    sw_lowering_free(l);
    PyMem_Free(attrs);
    sw_py_backend_spec_free(&spec);
    return (PyObject *)self;
}

static void Runtime_dealloc(RuntimeObject *self) {
    sw_runtime_free(self->rt);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ------------------------------------------------------------------ steps */
static PyObject *run(RuntimeObject *self, int list, PyObject *inputs, PyObject *labels, sw_optimizer opt, int bn_mode) {
    if (!sw_py_runtime_ready(self)) {
        return NULL;
    }
    step_inputs in;
    if (parse_inputs(self->rt, inputs, labels, &in) < 0) {
        inputs_free(&in);
        return NULL;
    }
    sw_step_args args = {in.inputs, in.labels, opt, bn_mode, self->steps};
    double loss = 0.0;
    sw_status s;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    s = sw_runtime_step(self->rt, list, &args, &loss);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    inputs_free(&in);
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    if (list == SW_LIST_TRAIN) {
        self->steps++;
    }
    return PyFloat_FromDouble(loss);
}

/* step(inputs, labels, kind, lr, weight_decay, momentum, dampening, nesterov, beta1, beta2, eps):
 * every optimizer value is the step's own (a schedule changes lr from one step to the next). */
static PyObject *Runtime_step(RuntimeObject *self, PyObject *args) {
    PyObject *inputs, *labels;
    sw_optimizer o = {0};
    if (!PyArg_ParseTuple(args, "OOiddddpddd", &inputs, &labels, &o.kind, &o.lr, &o.weight_decay, &o.momentum,
                          &o.dampening, &o.nesterov, &o.beta1, &o.beta2, &o.eps)) {
        return NULL;
    }
    return run(self, SW_LIST_TRAIN, inputs, labels, o, SW_BN_UPDATE);
}

/* forward(inputs, labels, running=False): batchnorms normalize with the running statistics
 * (eval mode) or the minibatch's (train mode); neither updates the running statistics. */
static PyObject *Runtime_forward(RuntimeObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"inputs", "labels", "running", NULL};
    PyObject *inputs, *labels;
    int running = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|p", kwlist, &inputs, &labels, &running)) {
        return NULL;
    }
    return run(self, SW_LIST_FORWARD, inputs, labels, (sw_optimizer){0}, running ? SW_BN_RUNNING : SW_BN_BATCH);
}

/* ------------------------------------------------------------------ buffers and memory */
static PyObject *int64_list(const int64_t *v, int n) {
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (!x) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, x);
    }
    return l;
}

static PyObject *Runtime_arena_bytes(RuntimeObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!self->rt) {
        PyErr_SetString(PyExc_RuntimeError, "Runtime is not initialized");
        return NULL;
    }
    return int64_list(self->rt->mp.arena, self->rt->ndev);
}

static PyObject *Runtime_arena_high_water(RuntimeObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!sw_py_runtime_ready(self)) {
        return NULL;
    }
    int64_t *hw = PyMem_Calloc((size_t)self->rt->ndev, sizeof *hw);
    if (!hw) {
        return PyErr_NoMemory();
    }
    sw_status s = sw_runtime_high_water(self->rt, hw);
    PyObject *out = s == SW_OK ? int64_list(hw, self->rt->ndev) : sw_py_raise(s);
    PyMem_Free(hw);
    return out;
}

/* (arena allocations, workspace bytes grown, workspace growths) since creation, and the
 * convolutions' scratch cache growths (process-wide) */
static PyObject *Runtime_allocations(RuntimeObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!self->rt) {
        PyErr_SetString(PyExc_RuntimeError, "Runtime is not initialized");
        return NULL;
    }
    int64_t bytes = 0, grows = 0;
    self->rt->backend->i->workspace_stats(self->rt->backend, &bytes, &grows);
    return Py_BuildValue("(LLLL)", (long long)self->rt->arena_allocations, (long long)bytes, (long long)grows,
                         sw_conv_scratch_grows());
}

/* [(buffer, updates)] of every state buffer with a count (> 0): SGD's started momentum
 * buffers, Adam's step count per parameter slice. */
static PyObject *Runtime_updates(RuntimeObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!sw_py_runtime_ready(self)) {
        return NULL;
    }
    PyObject *l = PyList_New(0);
    for (int32_t b = 0; l && b < self->rt->g.nbuffers; b++) {
        if (self->rt->updates[b] > 0) {
            PyObject *x = Py_BuildValue("(iL)", (int)b, (long long)self->rt->updates[b]);
            if (!x || PyList_Append(l, x) < 0) {
                Py_XDECREF(x);
                Py_CLEAR(l);
                break;
            }
            Py_DECREF(x);
        }
    }
    return l;
}

/* set_updates([(buffer, count)]): every count at once (the others 0), e.g. from a checkpoint;
 * checked in full before anything changes. */
static PyObject *Runtime_set_updates(RuntimeObject *self, PyObject *arg) {
    if (!sw_py_runtime_ready(self)) {
        return NULL;
    }
    PyObject *seq = PySequence_Fast(arg, "set_updates takes a sequence of (state buffer id, count) pairs");
    if (!seq) {
        return NULL;
    }
    int64_t *counts = PyMem_Calloc((size_t)self->rt->g.nbuffers + 1, sizeof *counts);
    if (!counts) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "set_updates takes (buffer id, count) pairs");
            goto fail;
        }
        long b = PyLong_AsLong(PyTuple_GET_ITEM(pair, 0));
        long long n = b == -1 && PyErr_Occurred() ? -1 : PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 1));
        if (PyErr_Occurred()) {
            goto fail;
        }
        if (b < 0 || b >= self->rt->g.nbuffers || self->rt->g.buffers[b].kind != SW_BUF_MOMENTUM || n < 0) {
            PyErr_Format(PyExc_ValueError, "(%ld, %lld) is not an optimizer state buffer and a count >= 0", b, n);
            goto fail;
        }
        counts[b] = n;
    }
    memcpy(self->rt->updates, counts, sizeof *counts * (size_t)self->rt->g.nbuffers);
    PyMem_Free(counts);
    Py_DECREF(seq);
    Py_RETURN_NONE;
fail:
    PyMem_Free(counts);
    Py_DECREF(seq);
    return NULL;
}

/* (task starts, task ends, step start, step end) of the last step: ns of the monotonic clock */
static PyObject *Runtime_task_times(RuntimeObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!sw_py_runtime_ready(self)) {
        return NULL;
    }
    npy_intp dims[2] = {self->rt->g.ntasks, 2};
    PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_INT64);
    if (!a) {
        return NULL;
    }
    memcpy(PyArray_DATA(a), self->rt->task_ns, sizeof(int64_t) * 2 * (size_t)self->rt->g.ntasks);
    return Py_BuildValue("(NLL)", (PyObject *)a, (long long)self->rt->step_ns[0], (long long)self->rt->step_ns[1]);
}

/* time_tasks(on): the backend times every task from the next step on (a GPU's own clock) or no
 * longer; a no-op where the backend always does (the CPU backend). */
static PyObject *Runtime_time_tasks(RuntimeObject *self, PyObject *arg) {
    if (!sw_py_runtime_ready(self)) {
        return NULL;
    }
    int on = PyObject_IsTrue(arg);
    if (on < 0) {
        return NULL;
    }
    sw_backend *b = self->rt->backend;
    if (b->i->time_tasks) {
        sw_status s = b->i->time_tasks(b, on);
        if (s != SW_OK) {
            return sw_py_raise(s);
        }
    }
    Py_RETURN_NONE;
}

/* The last step's nanoseconds each worker thread waited for other streams' tasks. */
static PyObject *Runtime_wait_times(RuntimeObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!sw_py_runtime_ready(self)) {
        return NULL;
    }
    int64_t ns[256];
    int n = self->rt->backend->i->wait_times ? self->rt->backend->i->wait_times(self->rt->backend, ns, 256) : 0;
    return int64_list(ns, n < 256 ? n : 256);
}

static PyObject *Runtime_get_steps(RuntimeObject *self, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(self->steps);
}

static int Runtime_set_steps(RuntimeObject *self, PyObject *value, void *closure) {
    (void)closure;
    if (!value || !PyLong_Check(value) || PyBool_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "steps must be an int");
        return -1;
    }
    long long n = PyLong_AsLongLong(value);
    if (n == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "steps must be >= 0");
        return -1;
    }
    self->steps = n;
    return 0;
}

static PyObject *Runtime_get_backend(RuntimeObject *self, void *closure) {
    (void)closure;
    if (!self->rt) {
        PyErr_SetString(PyExc_RuntimeError, "Runtime is not initialized");
        return NULL;
    }
    return PyUnicode_FromString(self->rt->backend->i->name);
}

static PyGetSetDef Runtime_getset[] = {
    {"steps", (getter)Runtime_get_steps, (setter)Runtime_set_steps,
     "training steps completed (step() adds one when it returns; settable, e.g. from a checkpoint)", NULL},
    {"backend", (getter)Runtime_get_backend, NULL, "the backend's name (cpu, cuda, record)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Runtime_methods[] = {
    {"wait_times", (PyCFunction)Runtime_wait_times, METH_NOARGS,
     "wait_times() -> [ns each worker thread waited for other streams' tasks in the last step]"},
    {"time_tasks", (PyCFunction)Runtime_time_tasks, METH_O,
     "time_tasks(on): time every task from the next step on, on the device's clock (GPUs); CPU: always"},
    {"task_times", (PyCFunction)Runtime_task_times, METH_NOARGS,
     "task_times() -> ((ntasks, 2) start/end ns of every task of the last step, step start, step end)"},
    {"step", (PyCFunction)Runtime_step, METH_VARARGS,
     "step(inputs, labels, kind, lr, weight_decay, momentum, dampening, nesterov, beta1, beta2, eps) -> mean loss "
     "(kind: 0 SGD, 1 Adam, 2 AdamW)"},
    {"pipeline", (PyCFunction)Runtime_pipeline, METH_O,
     "pipeline(k): record k (2 .. 8) training steps back to back, no barrier between them (once per runtime)"},
    {"steps_back_to_back", (PyCFunction)Runtime_steps_back_to_back, METH_O,
     "steps_back_to_back([step's arguments as for step(), one tuple per step]) -> [mean loss per step]"},
    {"forward", (PyCFunction)(void (*)(void))Runtime_forward, METH_VARARGS | METH_KEYWORDS,
     "forward(inputs, labels, running=False) -> mean loss (running: batchnorms use their running statistics)"},
    {"buffer", (PyCFunction)Runtime_buffer, METH_O,
     "buffer(b) -> NumPy view of buffer b in its arena (a copy where the arena is device memory)"},
    {"write", (PyCFunction)Runtime_write, METH_VARARGS, "write(b, array): buffer b = array (its shape)"},
    {"recorded", (PyCFunction)Runtime_recorded, METH_O,
     "recorded(list) -> (ops, streams, ids, stream_device, stream_priority) of the record backend"},
    {"arena_bytes", (PyCFunction)Runtime_arena_bytes, METH_NOARGS, "arena_bytes() -> [bytes per device]"},
    {"arena_high_water", (PyCFunction)Runtime_arena_high_water, METH_NOARGS,
     "arena_high_water() -> [highest byte written per device, rounded up to the alignment]"},
    {"allocations", (PyCFunction)Runtime_allocations, METH_NOARGS,
     "allocations() -> (arenas allocated, workspace bytes grown, workspace growths, conv scratch growths)"},
    {"updates", (PyCFunction)Runtime_updates, METH_NOARGS,
     "updates() -> [(state buffer, updates applied)] of the counted ones (SGD: momentum started; Adam: step)"},
    {"set_updates", (PyCFunction)Runtime_set_updates, METH_O,
     "set_updates([(state buffer, count)]): every state buffer's update count (the others 0)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RuntimeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shardwise._core.Runtime",
    .tp_basicsize = sizeof(RuntimeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A plan's task graph on the native runtime (CPU backend), with planned memory.",
    .tp_new = Runtime_new,
    .tp_dealloc = (destructor)Runtime_dealloc,
    .tp_methods = Runtime_methods,
    .tp_getset = Runtime_getset,
};

int sw_py_register_runtime(PyObject *module, PyTypeObject *problem_type) {
    import_array1(-1);  /* this file's own NumPy API table */
    if (sw_py_step_inputs_init() < 0 || sw_py_register_runtime_buffers() < 0) {
        return -1;
    }
    problem_type_ = problem_type;
    if (PyType_Ready(&RuntimeType) < 0 || PyModule_AddObjectRef(module, "Runtime", (PyObject *)&RuntimeType) < 0) {
        return -1;
    }
    /* the op table: names, lowering roles, and which kinds the CPU backend has kernels for */
    PyObject *names = PyTuple_New(SW_OP_COUNT), *roles = PyTuple_New(SW_OP_COUNT), *cpu = PyList_New(0);
    int rc = names && roles && cpu ? 0 : -1;
    for (int k = 0; k < SW_OP_COUNT && rc == 0; k++) {
        PyObject *name = PyUnicode_FromString(sw_op_names[k]), *role = PyLong_FromLong(sw_op_roles[k]);
        if (!name || !role) {
            Py_XDECREF(name);
            Py_XDECREF(role);
            rc = -1;
            break;
        }
        PyTuple_SET_ITEM(names, k, name);
        PyTuple_SET_ITEM(roles, k, role);
        if (sw_cpu_has_kernels(k) && PyList_Append(cpu, name) < 0) {
            rc = -1;
        }
    }
    PyObject *cpu_kinds = rc == 0 ? PyList_AsTuple(cpu) : NULL;
    PyObject *backends = Py_BuildValue("(s)", "cpu");   /* the backends built into this module */
    if (rc == 0 && (!cpu_kinds || !backends || PyModule_AddObjectRef(module, "BACKENDS", backends) < 0 ||
                    PyModule_AddObjectRef(module, "OP_KINDS", names) < 0 ||
                    PyModule_AddObjectRef(module, "OP_ROLES", roles) < 0 ||
                    PyModule_AddObjectRef(module, "CPU_OP_KINDS", cpu_kinds) < 0)) {
        rc = -1;
    }
    Py_XDECREF(names);
    Py_XDECREF(roles);
    Py_XDECREF(cpu);
    Py_XDECREF(cpu_kinds);
    Py_XDECREF(backends);
    return rc;
}
