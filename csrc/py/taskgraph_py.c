/* taskgraph_py.c -- the Python TaskGraph type: a plan lowered once, the handle every pass takes.
 *
 *   tg = _core.TaskGraph(problem, kinds, degrees, dev_ptr, devices, streams=None, swap=None, recompute=None,
 *                        fused_rings=False)   # fused: each ring all-reduce as one task per link (a model) 
 *   tg.arrays()                      # tasks and buffers, as Problem.lower returns them
 *   tg.set_streams(streams)          # a schedule made on tg itself, without lowering again
 *   tg.memory_plan(align, check)     # memplan_py.c      tg.task_order(iterations, check)
 *   tg.simulate(route_ptr, ...)      # simulate_py.c     tg.schedule(policy, ...)   schedule_py.c
 *   tg.swap_plan(start, end, ...)    # swap_py.c         _core.Runtime(tg, attrs, threads, ...)
 *   _core.lowerings()                # how many times the core has lowered a plan in this process
 *
 * The plan arrives as lower_py.c's four arrays; streams as a schedule's (stream, stream_device,
 * stream_priority) int32 arrays, swap as a swap plan's (buffer, out_at, in_at), recompute as the
 * int32 ids of the ops whose feature maps are recomputed (graph/recompute.c): the graph is
 * lowered once (csrc/graph/lowering.c), and a swap plan rewrites it there, so every pass reads
 * the same graph with the annotations made for it.  The object keeps its Problem; a pass on a
 * TaskGraph whose Problem was re-initialised or had its options changed since is a
 * RuntimeError (the graph would not be that problem's).  Passes only read the problem, so
 * several may run at once on different threads; changing the problem meanwhile is refused.
 */
#include "taskgraph_py.h"  /* TaskGraphObject; ProblemObject, CPython and NumPy C API */

#include <stdint.h>  /* intptr_t */
#include <string.h>  /* memset */

#include "pyerr.h"  /* sw_py_raise */

static PyTypeObject *problem_type_;   /* shardwise._core.Problem (module.c) */
static PyTypeObject TaskGraphType;

int sw_py_is_taskgraph(PyObject *obj) { return PyObject_TypeCheck(obj, &TaskGraphType); }

int sw_py_tg_enter(TaskGraphObject *self) {
    if (!self->l || !self->problem) {
        PyErr_SetString(PyExc_RuntimeError, "TaskGraph is not initialized");
        return 0;
    }
    ProblemObject *pr = self->problem;
    if (pr->p != self->p || pr->version != self->version) {
        PyErr_SetString(PyExc_RuntimeError, "the Problem this TaskGraph was lowered from has changed since "
                        "(re-initialised, or new options): lower the plan again");
        return 0;
    }
    if (pr->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Problem is in use by another thread");
        return 0;
    }
    pr->readers++;
    self->passes++;
    return 1;
}

void sw_py_tg_leave(TaskGraphObject *self) {
    self->problem->readers--;
    self->passes--;
}

int sw_py_lower_args(ProblemObject *self, PyObject *kinds, PyObject *degrees, PyObject *dev_ptr, PyObject *devs,
                     PyObject *streams, PyObject *swap, sw_lowering **out) {
    return sw_py_lower_args_recompute(self, SW_RINGS_CHUNKED, kinds, degrees, dev_ptr, devs, streams, swap, Py_None,
                                      out);
}

int sw_py_lower_args_recompute(ProblemObject *self, int rings, PyObject *kinds, PyObject *degrees, PyObject *dev_ptr,
                               PyObject *devs, PyObject *streams, PyObject *swap, PyObject *recompute,
                               sw_lowering **out) {
    *out = NULL;
    PyArrayObject *recompute_ops = NULL;
    sw_recompute_spec rspec = {0, NULL};
    if (recompute != Py_None) {   /* op ids whose feature maps are recomputed */
        recompute_ops = sw_py_array(recompute, NPY_INT32, 1, "recompute");
        if (!recompute_ops) {
            return -1;
        }
        rspec = (sw_recompute_spec){(int32_t)PyArray_DIM(recompute_ops, 0), PyArray_DATA(recompute_ops)};
    }
    plan_args a;
    PyArrayObject *stream_arrays[3] = {NULL, NULL, NULL}, *swap_arrays[3] = {NULL, NULL, NULL};
    sw_streams view;
    const sw_streams *st = NULL;
    sw_swap_spec spec;
    int rc = -1;
    memset(&a, 0, sizeof a);
    memset(&spec, 0, sizeof spec);
    if (sw_py_parse_plan(self->p, kinds, degrees, dev_ptr, devs, &a) < 0 ||
        sw_py_parse_streams(streams, stream_arrays, &view, &st) < 0 || sw_py_parse_swap(swap, swap_arrays, &spec) < 0) {
        goto done;
    }
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = sw_lowering_new(self->p, &a.plan, (sw_ring_detail)rings, st, &spec, &rspec, out);
    Py_END_ALLOW_THREADS
    if (s != SW_OK) {
        sw_py_raise(s);
        goto done;
    }
    rc = 0;
done:
    sw_py_streams_free(stream_arrays);
    for (int i = 0; i < 3; i++) {
        Py_XDECREF(swap_arrays[i]);
    }
    Py_XDECREF(recompute_ops);
    sw_py_plan_args_free(&a);
    return rc;
}

/* ------------------------------------------------------------------ the type */
static PyObject *TaskGraph_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"problem", "kinds", "degrees", "dev_ptr", "devices", "streams", "swap", "recompute",
                             "fused_rings", NULL};
    PyObject *prob, *k, *dg, *ptr, *dv, *streams = Py_None, *swap = Py_None, *recompute = Py_None;
    int fused = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO|OOOp", kwlist, &prob, &k, &dg, &ptr, &dv, &streams, &swap,
                                     &recompute, &fused)) {
        return NULL;
    }
    if (!PyObject_TypeCheck(prob, problem_type_)) {
        PyErr_Format(PyExc_TypeError, "TaskGraph needs a shardwise._core.Problem, got %s", Py_TYPE(prob)->tp_name);
        return NULL;
    }
    ProblemObject *problem = (ProblemObject *)prob;
    if (!problem->p) {
        PyErr_SetString(PyExc_RuntimeError, "Problem is not initialized");
        return NULL;
    }
    if (problem->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Problem is in use by another thread");
        return NULL;
    }
    /* lowering only reads the problem: a reader from the conversions on, so lowerings and passes of
     * one (a plan's kept) problem may run on several threads at once, and nothing changes it meanwhile */
    problem->readers++;
    sw_lowering *l = NULL;
    TaskGraphObject *self = NULL;
    if (sw_py_lower_args_recompute(problem, fused ? SW_RINGS_FUSED : SW_RINGS_CHUNKED, k, dg, ptr, dv, streams, swap,
                                   recompute, &l) == 0) {
        self = (TaskGraphObject *)type->tp_alloc(type, 0);
        if (self) {
            self->problem = (ProblemObject *)Py_NewRef(prob);
            self->p = problem->p;
            self->version = problem->version;
            self->l = l;
            l = NULL;
        }
    }
    problem->readers--;
    sw_lowering_free(l);
    return (PyObject *)self;
}

/* Forget the kept memory plan (the graph's streams or ranks change). */
static void drop_memory_plan(TaskGraphObject *self) {
    if (self->kept_plan) {
        sw_memory_plan_free(self->kept_plan);
        free(self->kept_plan);
        self->kept_plan = NULL;
    }
}

void sw_py_tg_keep_memory_plan(TaskGraphObject *self, sw_memory_plan *made) {
    if (self->kept_plan) {   /* another pass kept the same plan meanwhile */
        sw_memory_plan_free(made);
        free(made);
    } else {
        self->kept_plan = made;
    }
}

sw_status sw_py_runtime_memory_plan(const sw_lowering *l, sw_memory_plan **out) {
    sw_memory_plan *mp = calloc(1, sizeof *mp);
    if (!mp) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a memory plan");
    }
    sw_streams view;
    sw_status s = sw_memory_plan_build_on(&l->g, l->ndev, SW_ARENA_ALIGN, 1, sw_lowering_streams(l, &view), mp);
    if (s != SW_OK) {
        sw_memory_plan_free(mp);
        free(mp);
        mp = NULL;
    }
    *out = mp;
    return s;
}

const sw_memory_plan *sw_py_tg_kept_memory_plan(TaskGraphObject *self) {
    if (self->kept_plan) {
        return self->kept_plan;
    }
    sw_memory_plan *mp;
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = sw_py_runtime_memory_plan(self->l, &mp);
    Py_END_ALLOW_THREADS
    if (s != SW_OK) {
        sw_py_raise(s);
        return NULL;
    }
    sw_py_tg_keep_memory_plan(self, mp);
    return self->kept_plan;
}

static void TaskGraph_dealloc(TaskGraphObject *self) {
    drop_memory_plan(self);
    sw_lowering_free(self->l);
    Py_XDECREF(self->problem);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* arrays() -> dict: every task and buffer of the graph that runs (its swap tasks included), as
 * Problem.lower returns them (lower_py.c), and per device the bytes of its buffers. */
static PyObject *TaskGraph_arrays(TaskGraphObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!sw_py_tg_enter(self)) {
        return NULL;
    }
    PyObject *d = PyDict_New();
    if (d && sw_py_put_graph(d, &self->l->g, self->l->ndev) < 0) {
        Py_CLEAR(d);
    }
    sw_py_tg_leave(self);
    return d;
}

/* buffer_totals(chunked=False, persistent=False): (bytes, buffers) per device, int64 arrays: what
 * arrays()["memory"] and a bincount of arrays()["buffer_device"] give, without converting every
 * task and buffer (sw_tg_buffer_totals says what chunked and persistent count). */
static PyObject *TaskGraph_buffer_totals(TaskGraphObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"chunked", "persistent", NULL};
    int chunked = 0, persistent = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pp", kwlist, &chunked, &persistent)) {
        return NULL;
    }
    if (!sw_py_tg_enter(self)) {
        return NULL;
    }
    int ndev = self->l->ndev;
    int64_t *mem = PyMem_Calloc((size_t)ndev + 1, sizeof *mem), *count = PyMem_Calloc((size_t)ndev + 1, sizeof *count);
    PyObject *out = NULL;
    if (!mem || !count) {
        PyErr_NoMemory();
    } else {
        sw_tg_buffer_totals(&self->l->g, ndev, chunked, persistent, mem, count);
        out = Py_BuildValue("(NN)", sw_py_contiguous(mem, ndev, NPY_INT64), sw_py_contiguous(count, ndev, NPY_INT64));
    }
    PyMem_Free(mem);
    PyMem_Free(count);
    sw_py_tg_leave(self);
    return out;
}

/* set_streams(streams): the tasks on a schedule's (stream, stream_device, stream_priority) int32
 * arrays, e.g. one made on this graph, or None (one stream per device); no lowering again. */
static PyObject *TaskGraph_set_streams(TaskGraphObject *self, PyObject *arg) {
    if (!self->l) {
        PyErr_SetString(PyExc_RuntimeError, "TaskGraph is not initialized");
        return NULL;
    }
    if (self->passes) {
        PyErr_SetString(PyExc_RuntimeError, "TaskGraph is in use by another thread");
        return NULL;
    }
    PyArrayObject *arrays[3] = {NULL, NULL, NULL};
    sw_streams view;
    const sw_streams *st = NULL;
    PyObject *result = NULL;
    if (sw_py_parse_streams(arg, arrays, &view, &st) == 0) {
        if (self->passes) {   /* converting can run Python code: checked again */
            PyErr_SetString(PyExc_RuntimeError, "TaskGraph is in use by another thread");
        } else {
            drop_memory_plan(self);   /* (made on the streams it had) */
            sw_status s = sw_lowering_set_streams(self->l, st);
            result = s == SW_OK ? Py_NewRef(Py_None) : sw_py_raise(s);
        }
    }
    sw_py_streams_free(arrays);
    return result;
}

/* split_ranks(rank): the graph split over processes, rank[d] the rank of device d (an int sequence
 * of ndev entries covering 0 .. nranks - 1): copies between two ranks become send and recv halves
 * (graph/ranks.c).  Once, after any streams. */
static PyObject *TaskGraph_split_ranks(TaskGraphObject *self, PyObject *arg) {
    if (!self->l) {
        PyErr_SetString(PyExc_RuntimeError, "TaskGraph is not initialized");
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(arg, NPY_INT32, 1, 1, NPY_ARRAY_IN_ARRAY | NPY_ARRAY_FORCECAST);
    if (!a) {
        return NULL;
    }
    PyObject *result = NULL;
    if (PyArray_DIM(a, 0) != self->l->ndev) {
        PyErr_Format(PyExc_ValueError, "split_ranks needs one rank per device (%d), got %zd", self->l->ndev,
                     (Py_ssize_t)PyArray_DIM(a, 0));
    } else if (self->passes) {
        PyErr_SetString(PyExc_RuntimeError, "TaskGraph is in use by another thread");
    } else {
        const int32_t *rank = PyArray_DATA(a);
        int nranks = 0;
        for (int d = 0; d < self->l->ndev; d++) {
            nranks = rank[d] + 1 > nranks ? rank[d] + 1 : nranks;
        }
        drop_memory_plan(self);   /* (made on the graph before its split; with the GIL held) */
        sw_status s;
        Py_BEGIN_ALLOW_THREADS
        s = sw_lowering_split_ranks(self->l, nranks, rank);
        Py_END_ALLOW_THREADS
        result = s == SW_OK ? Py_NewRef(Py_None) : sw_py_raise(s);
    }
    Py_DECREF(a);
    return result;
}

/* Each device's rank (an int32 array) of a graph split over processes; None for one process. */
static PyObject *TaskGraph_get_ranks(TaskGraphObject *self, void *Py_UNUSED(closure)) {
    if (!self->l) {
        PyErr_SetString(PyExc_RuntimeError, "TaskGraph is not initialized");
        return NULL;
    }
    if (self->l->nranks == 0) {
        Py_RETURN_NONE;
    }
    return sw_py_contiguous(self->l->rank, self->l->ndev, NPY_INT32);
}

static PyObject *TaskGraph_get_int(TaskGraphObject *self, void *closure) {
    if (!self->l) {
        PyErr_SetString(PyExc_RuntimeError, "TaskGraph is not initialized");
        return NULL;
    }
    const sw_lowering *l = self->l;
    switch ((int)(intptr_t)closure) {
    case 0: return PyLong_FromLong(l->g.ntasks);
    case 1: return PyLong_FromLong(l->g.nbuffers);
    case 2: return PyLong_FromLong(l->ndev);
    case 3: return PyLong_FromLong(l->nops);
    case 4: return PyLong_FromLong(l->optimizer_state);
    case 5: return PyBool_FromLong(l->swapped);
    case 7: return PyLong_FromLong(l->recomputed);
    case 8: return PyBool_FromLong(self->kept_plan != NULL);
    default: return PyBool_FromLong(l->has_streams);
    }
}

/* (stream per task, device per stream, priority per stream) int32 arrays, or None: one per device. */
static PyObject *TaskGraph_get_streams(TaskGraphObject *self, void *Py_UNUSED(closure)) {
    if (!self->l) {
        PyErr_SetString(PyExc_RuntimeError, "TaskGraph is not initialized");
        return NULL;
    }
    const sw_lowering *l = self->l;
    if (!l->has_streams) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(NNN)", sw_py_contiguous(l->stream, l->g.ntasks, NPY_INT32),
                         sw_py_contiguous(l->stream_device, l->nstreams, NPY_INT32),
                         sw_py_contiguous(l->stream_priority, l->nstreams, NPY_INT32));
}

/* Per task of a swapped or recomputed graph, its id in the lowering (-1: a swap or recompute task);
 * None without either. */
static PyObject *TaskGraph_get_origin(TaskGraphObject *self, void *Py_UNUSED(closure)) {
    if (!self->l) {
        PyErr_SetString(PyExc_RuntimeError, "TaskGraph is not initialized");
        return NULL;
    }
    if (!self->l->origin) {
        Py_RETURN_NONE;
    }
    return sw_py_contiguous(self->l->origin, self->l->g.ntasks, NPY_INT32);
}

static PyObject *TaskGraph_get_problem(TaskGraphObject *self, void *Py_UNUSED(closure)) {
    if (!self->problem) {
        PyErr_SetString(PyExc_RuntimeError, "TaskGraph is not initialized");
        return NULL;
    }
    return Py_NewRef((PyObject *)self->problem);
}

static PyGetSetDef TaskGraph_getset[] = {
    {"ntasks", (getter)TaskGraph_get_int, NULL, "tasks of the graph that runs (swap tasks included)", (void *)0},
    {"ranks", (getter)TaskGraph_get_ranks, NULL, "split over processes: each device's rank (int32); else None",
     NULL},
    {"nbuffers", (getter)TaskGraph_get_int, NULL, "buffers of the graph that runs", (void *)1},
    {"ndev", (getter)TaskGraph_get_int, NULL, "devices", (void *)2},
    {"nops", (getter)TaskGraph_get_int, NULL, "ops of the plan", (void *)3},
    {"optimizer_state", (getter)TaskGraph_get_int, NULL, "state buffers per parameter slice it was lowered with",
     (void *)4},
    {"swapped", (getter)TaskGraph_get_int, NULL, "a swap plan rewrote the graph (swap tasks, host buffers)",
     (void *)5},
    {"has_streams", (getter)TaskGraph_get_int, NULL, "the tasks run on given streams (a schedule's, a swap plan's)",
     (void *)6},
    {"memory_planned", (getter)TaskGraph_get_int, NULL,
     "a memory plan at the runtime's alignment is kept for the next pass (memory_plan, task_order, simulate)",
     (void *)8},
    {"recomputed", (getter)TaskGraph_get_int, NULL, "feature maps recomputed in the backward pass (recompute tasks)",
     (void *)7},
    {"streams", (getter)TaskGraph_get_streams, NULL,
     "(stream, stream_device, stream_priority) int32 arrays, or None: one stream per device", NULL},
    {"origin", (getter)TaskGraph_get_origin, NULL,
     "swapped or recomputed graphs: each task's id in the lowering (-1: a swap or recompute task)",
     NULL},
    {"problem", (getter)TaskGraph_get_problem, NULL, "the Problem it was lowered from", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef TaskGraph_methods[] = {
    {"arrays", (PyCFunction)TaskGraph_arrays, METH_NOARGS,
     "arrays() -> dict of task and buffer arrays of the graph that runs (as Problem.lower)"},
    {"buffer_totals", (PyCFunction)(void (*)(void))TaskGraph_buffer_totals, METH_VARARGS | METH_KEYWORDS,
     "buffer_totals(chunked=False) -> (bytes, buffers) per device, int64 arrays (as arrays()'s memory and "
     "buffer_device); chunked: a fused graph's totals as its chunked graph has them"},
    {"split_ranks", (PyCFunction)TaskGraph_split_ranks, METH_O,
     "split_ranks(rank) -> None: copies between devices of two ranks become send and recv halves (once)"},
    {"set_streams", (PyCFunction)TaskGraph_set_streams, METH_O,
     "set_streams(streams): the tasks on (stream, stream_device, stream_priority) int32 arrays, or None"},
    {"memory_plan", (PyCFunction)(void (*)(void))sw_py_tg_memory_plan, METH_VARARGS | METH_KEYWORDS,
     "memory_plan(align=ARENA_ALIGN, check=False) -> dict: one arena per device, on the graph's streams"},
    {"check_memory_plan", (PyCFunction)sw_py_tg_check_memory_plan, METH_VARARGS,
     "check_memory_plan(offset, arena, reuse_from, reuse_to, align): ValueError unless the offsets are safe"},
    {"task_order", (PyCFunction)(void (*)(void))sw_py_tg_task_order, METH_VARARGS | METH_KEYWORDS,
     "task_order(iterations=1, check=False) -> {ptr, ids}: what each task runs after"},
    {"simulate", (PyCFunction)(void (*)(void))sw_py_tg_simulate, METH_VARARGS | METH_KEYWORDS,
     "simulate(route_ptr, route_res, nres, cores=0, ..., bound=inf, brief=False, iterations=1) -> dict: "
     "time and replay the graph as Problem.simulate_plan does"},
    {"schedule", (PyCFunction)(void (*)(void))sw_py_tg_schedule, METH_VARARGS | METH_KEYWORDS,
     "schedule(policy, alpha=-1, beta=-1, split=None) -> dict: priorities and streams of the graph's tasks"},
    {"swap_plan", (PyCFunction)(void (*)(void))sw_py_tg_swap_plan, METH_VARARGS | METH_KEYWORDS,
     "swap_plan(start, end, budget, pinned, host_bw, max_rounds=0, check=False) -> dict: which feature maps "
     "to offload"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TaskGraphType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "shardwise._core.TaskGraph",
    .tp_basicsize = sizeof(TaskGraphObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "TaskGraph(problem, kinds, degrees, dev_ptr, devices, streams=None, swap=None, recompute=None): a plan "
              "lowered once, "
              "with its streams or swap rewrite; every pass and the Runtime take it.",
    .tp_new = TaskGraph_new,
    .tp_dealloc = (destructor)TaskGraph_dealloc,
    .tp_methods = TaskGraph_methods,
    .tp_getset = TaskGraph_getset,
};

static PyObject *lowerings(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromLongLong(sw_lower_count());
}

static PyMethodDef module_functions[] = {
    {"lowerings", lowerings, METH_NOARGS, "lowerings() -> how many times the core has lowered a plan (sw_lower) "
     "in this process"},
    {NULL, NULL, 0, NULL},
};

int sw_py_register_taskgraph(PyObject *module, PyTypeObject *problem_type) {
    import_array1(-1);  /* this file's own NumPy API table */
    problem_type_ = problem_type;
    if (PyType_Ready(&TaskGraphType) < 0 ||
        PyModule_AddObjectRef(module, "TaskGraph", (PyObject *)&TaskGraphType) < 0) {
        return -1;
    }
    return PyModule_AddFunctions(module, module_functions);
}
