/* memplan_py.c -- memory_plan, check_memory_plan and task_order of a TaskGraph and of a Problem.
 *
 * The TaskGraph methods read the graph lowered once (taskgraph_py.c) on its streams; the
 * Problem methods take a plan as simulate_py.c's four arrays, lower it once (sw_py_lower_args,
 * GIL released) and run the same pass, with an optional `streams`: None (one stream per device) or a
 * schedule's (stream, stream_device, stream_priority) int32 arrays
 * (sw_py_parse_streams, shared with runtime_py.c).  memory_plan returns the
 * planned arena as a dict of NumPy arrays (per buffer: offset, bytes, first,
 * last; per device: arena, peak, total, kept, peak_kinds (ndev,
 * len(BUFFER_KINDS)); reuse_from, reuse_to), validated by
 * sw_memory_plan_check_on when check=True.  check_memory_plan validates offsets
 * and reuse edges given from Python (tests hand it broken ones).  task_order
 * returns what every task runs after on the runtime (order.c) as {ptr, ids}.
 */
#include "taskgraph_py.h"  /* TaskGraphObject, sw_py_lower_args; ProblemObject, sw_py_* helpers */

#include <string.h>  /* memset */

#include "pyerr.h"  /* sw_py_raise */

int sw_py_parse_streams(PyObject *obj, PyArrayObject **arr, sw_streams *view, const sw_streams **out) {
    *out = NULL;
    if (obj == Py_None) {
        return 0;
    }
    static const char *const names[3] = {"stream", "stream_device", "stream_priority"};
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 3) {
        PyErr_SetString(PyExc_ValueError, "streams must be None or (stream, stream_device, stream_priority)");
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        arr[i] = sw_py_array(PyTuple_GET_ITEM(obj, i), NPY_INT32, 1, names[i]);
        if (!arr[i]) {
            return -1;
        }
    }
    if (PyArray_DIM(arr[1], 0) != PyArray_DIM(arr[2], 0) || PyArray_DIM(arr[0], 0) > INT32_MAX ||
        PyArray_DIM(arr[1], 0) > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "streams: stream_device and stream_priority need one entry per stream");
        return -1;
    }
    *view = (sw_streams){.ntasks = (int32_t)PyArray_DIM(arr[0], 0), .nstreams = (int32_t)PyArray_DIM(arr[1], 0),
                         .stream = PyArray_DATA(arr[0]), .stream_device = PyArray_DATA(arr[1]),
                         .stream_priority = PyArray_DATA(arr[2])};
    *out = view;
    return 0;
}

void sw_py_streams_free(PyArrayObject **arr) {
    for (int i = 0; i < 3; i++) {
        Py_CLEAR(arr[i]);
    }
}

static PyObject *put_plan(const sw_memory_plan *mp) {
    PyObject *d = PyDict_New();
    npy_intp nb = mp->nbuffers, nd = mp->ndev;
    npy_intp dims[2] = {nd, SW_BUF_NKINDS};
    PyArrayObject *kinds = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_INT64);
    if (kinds) {
        memcpy(PyArray_DATA(kinds), mp->peak_kinds, sizeof *mp->peak_kinds * (size_t)(nd * SW_BUF_NKINDS));
    }
    if (!d || sw_py_put(d, "offset", sw_py_contiguous(mp->offset, nb, NPY_INT64)) < 0 ||
        sw_py_put(d, "bytes", sw_py_contiguous(mp->bytes, nb, NPY_INT64)) < 0 ||
        sw_py_put(d, "first", sw_py_contiguous(mp->first, nb, NPY_INT32)) < 0 ||
        sw_py_put(d, "last", sw_py_contiguous(mp->last, nb, NPY_INT32)) < 0 ||
        sw_py_put(d, "arena", sw_py_contiguous(mp->arena, nd, NPY_INT64)) < 0 ||
        sw_py_put(d, "peak", sw_py_contiguous(mp->peak, nd, NPY_INT64)) < 0 ||
        sw_py_put(d, "total", sw_py_contiguous(mp->total, nd, NPY_INT64)) < 0 ||
        sw_py_put(d, "kept", sw_py_contiguous(mp->kept, nd, NPY_INT64)) < 0 ||
        sw_py_put(d, "peak_kinds", (PyObject *)kinds) < 0 ||
        sw_py_put(d, "reuse_from", sw_py_contiguous(mp->reuse_from, mp->nreuse, NPY_INT32)) < 0 ||
        sw_py_put(d, "reuse_to", sw_py_contiguous(mp->reuse_to, mp->nreuse, NPY_INT32)) < 0 ||
        sw_py_put(d, "align", PyLong_FromLongLong(mp->align)) < 0) {
        Py_XDECREF(d);
        return NULL;
    }
    return d;
}

/* ------------------------------------------------------------------ the passes on a lowering */
/* The memory plan of l's graph on its streams (validated when check), as a dict; the GIL is
 * released.  `kept`: that plan made before (a TaskGraph's, at `align`), or NULL: made here. */
static PyObject *memory_plan_on(const sw_lowering *l, const sw_memory_plan *kept, long long align, int check) {
    sw_memory_plan own = {0};
    const sw_memory_plan *mp = kept ? kept : &own;
    sw_streams view;
    const sw_streams *st = sw_lowering_streams(l, &view);
    sw_status s = SW_OK;
    Py_BEGIN_ALLOW_THREADS
    if (!kept) {
        s = sw_memory_plan_build_on(&l->g, l->ndev, (int64_t)align, 1, st, &own);
    }
    if (s == SW_OK && check) {
        s = sw_memory_plan_check_on(&l->g, mp, st);
    }
    Py_END_ALLOW_THREADS
    PyObject *d = s == SW_OK ? put_plan(mp) : sw_py_raise(s);
    sw_memory_plan_free(&own);
    return d;
}

/* The runtime's order over l's memory plan (reuse on, the arena alignment); with iterations > 1,
 * of that many iterations back to back (iterations.c: task t of iteration i is i * ntasks + t),
 * and with check the plan of the concatenated graph proved safe by it (sw_memory_plan_check_on;
 * ValueError naming the conflict otherwise).  {ptr, ids}; the GIL is released. */
static PyObject *task_order_on(const sw_lowering *l, const sw_memory_plan *kept, int iterations, int check) {
    sw_iterations it = {0};
    sw_memory_plan own = {0};
    const sw_memory_plan *mp = kept ? kept : &own;   /* (kept: the TaskGraph's, at the same alignment) */
    sw_task_order order = {0};
    sw_streams view;
    const sw_streams *st = sw_lowering_streams(l, &view);
    const sw_task_graph *g = &l->g;
    sw_status s = SW_OK;
    Py_BEGIN_ALLOW_THREADS
    if (!kept) {
        s = sw_memory_plan_build_on(g, l->ndev, SW_ARENA_ALIGN, 1, st, &own);
    }
    if (s == SW_OK && iterations > 1) {
        s = sw_iterations_build(g, mp, st, iterations, &it);
    }
    if (s == SW_OK && check) {
        s = iterations > 1 ? sw_memory_plan_check_on(&it.g, &it.mp, sw_iterations_streams(&it))
                           : sw_memory_plan_check_on(g, mp, st);
    }
    if (s == SW_OK) {
        s = iterations > 1 ? sw_task_order_build_on(&it.g, &it.mp, sw_iterations_streams(&it), &order)
                           : sw_task_order_build_on(g, mp, st, &order);
    }
    Py_END_ALLOW_THREADS
    PyObject *d = NULL;
    if (s != SW_OK) {
        sw_py_raise(s);
    } else {
        d = PyDict_New();
        if (!d || sw_py_put(d, "ptr", sw_py_contiguous(order.ptr, (npy_intp)order.ntasks + 1, NPY_INT32)) < 0 ||
            sw_py_put(d, "ids", sw_py_contiguous(order.ids, order.ptr[order.ntasks], NPY_INT32)) < 0) {
            Py_CLEAR(d);
        }
    }
    sw_task_order_free(&order);
    sw_iterations_free(&it);
    sw_memory_plan_free(&own);
    return d;
}

/* Validate offsets and reuse edges given from Python against l's graph and streams: None, or
 * NULL with a ValueError naming the conflict. */
static PyObject *check_on(const sw_lowering *l, PyObject *off, PyObject *ar, PyObject *rf, PyObject *rt,
                          long long align) {
    PyArrayObject *offset = NULL, *arena = NULL, *from = NULL, *to = NULL;
    PyObject *result = NULL;
    sw_streams view;
    const sw_streams *st = sw_lowering_streams(l, &view);
    if (!(offset = sw_py_array(off, NPY_INT64, 1, "offset")) || !(arena = sw_py_array(ar, NPY_INT64, 1, "arena")) ||
        !(from = sw_py_array(rf, NPY_INT32, 1, "reuse_from")) || !(to = sw_py_array(rt, NPY_INT32, 1, "reuse_to"))) {
        goto done;
    }
    if (PyArray_DIM(arena, 0) != l->ndev || PyArray_DIM(from, 0) != PyArray_DIM(to, 0) || align < 1 ||
        (align & (align - 1)) != 0) {
        PyErr_Format(PyExc_ValueError, "arena needs %d entries, reuse_from and reuse_to equal lengths, align a "
                     "power of two", l->ndev);
        goto done;
    }
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = SW_OK;
    if (PyArray_DIM(offset, 0) != l->g.nbuffers) {
        s = SW_FAIL(SW_ERR_VALUE, "offset has %lld entries for %d buffers", (long long)PyArray_DIM(offset, 0),
                    l->g.nbuffers);
    }
    if (s == SW_OK) {
        sw_memory_plan mp = {.nbuffers = l->g.nbuffers, .ndev = l->ndev, .align = align,
                             .offset = PyArray_DATA(offset), .arena = PyArray_DATA(arena),
                             .nreuse = (int32_t)PyArray_DIM(from, 0), .reuse_from = PyArray_DATA(from),
                             .reuse_to = PyArray_DATA(to)};
        s = sw_memory_plan_check_on(&l->g, &mp, st);
    }
    Py_END_ALLOW_THREADS
    if (s != SW_OK) {
        sw_py_raise(s);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(offset);
    Py_XDECREF(arena);
    Py_XDECREF(from);
    Py_XDECREF(to);
    return result;
}

/* ------------------------------------------------------------------ Problem methods (a plan as arrays) */
/* memory_plan(kinds, degrees, dev_ptr, devices, align=ARENA_ALIGN, check=False, streams=None) -> dict */
PyObject *sw_py_problem_memory_plan(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"kinds", "degrees", "dev_ptr", "devices", "align", "check", "streams", NULL};
    PyObject *k, *dg, *ptr, *dv, *streams_obj = Py_None;
    long long align = SW_ARENA_ALIGN;
    int check = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO|LpO", kwlist, &k, &dg, &ptr, &dv, &align, &check,
                                     &streams_obj) ||
        !sw_py_problem_ready(self)) {
        return NULL;
    }
    self->busy = 1;   /* from the conversions on: they read the problem */
    sw_lowering *l = NULL;
    PyObject *d = sw_py_lower_args(self, k, dg, ptr, dv, streams_obj, Py_None, &l) == 0 ? memory_plan_on(l, NULL, align, check)
                                                                                      : NULL;
    self->busy = 0;
    sw_lowering_free(l);
    return d;
}

/* task_order(kinds, degrees, dev_ptr, devices, streams=None, iterations=1, check=False) -> {ptr, ids} */
PyObject *sw_py_problem_task_order(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"kinds", "degrees", "dev_ptr", "devices", "streams", "iterations", "check", NULL};
    PyObject *k, *dg, *ptr, *dv, *streams_obj = Py_None;
    int iterations = 1, check = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO|Oip", kwlist, &k, &dg, &ptr, &dv, &streams_obj, &iterations,
                                     &check) ||
        !sw_py_problem_ready(self) || !sw_py_iterations_ok(iterations)) {
        return NULL;
    }
    self->busy = 1;
    sw_lowering *l = NULL;
    PyObject *d = sw_py_lower_args(self, k, dg, ptr, dv, streams_obj, Py_None, &l) == 0
                      ? task_order_on(l, NULL, iterations, check)
                      : NULL;
    self->busy = 0;
    sw_lowering_free(l);
    return d;
}

/* check_memory_plan(kinds, degrees, dev_ptr, devices, offset, arena, reuse_from, reuse_to, align,
 *                   streams=None) -> None */
PyObject *sw_py_problem_check_memory_plan(ProblemObject *self, PyObject *args) {
    PyObject *k, *dg, *ptr, *dv, *off, *ar, *rf, *rt, *streams_obj = Py_None;
    long long align;
    if (!PyArg_ParseTuple(args, "OOOOOOOOL|O", &k, &dg, &ptr, &dv, &off, &ar, &rf, &rt, &align, &streams_obj) ||
        !sw_py_problem_ready(self)) {
        return NULL;
    }
    self->busy = 1;   /* from the conversions on: they read the problem */
    sw_lowering *l = NULL;
    PyObject *result = sw_py_lower_args(self, k, dg, ptr, dv, streams_obj, Py_None, &l) == 0
                           ? check_on(l, off, ar, rf, rt, align)
                           : NULL;
    self->busy = 0;
    sw_lowering_free(l);
    return result;
}

/* ------------------------------------------------------------------ TaskGraph methods */
/* memory_plan(align=ARENA_ALIGN, check=False) -> dict */
PyObject *sw_py_tg_memory_plan(TaskGraphObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"align", "check", NULL};
    long long align = SW_ARENA_ALIGN;
    int check = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|Lp", kwlist, &align, &check) || !sw_py_tg_enter(self)) {
        return NULL;
    }
    /* the runtime's alignment: the graph's kept plan (made now if need be); another: its own */
    const sw_memory_plan *kept = align == SW_ARENA_ALIGN ? sw_py_tg_kept_memory_plan(self) : NULL;
    PyObject *d = align != SW_ARENA_ALIGN || kept ? memory_plan_on(self->l, kept, align, check) : NULL;
    sw_py_tg_leave(self);
    return d;
}

/* task_order(iterations=1, check=False) -> {ptr, ids} */
PyObject *sw_py_tg_task_order(TaskGraphObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"iterations", "check", NULL};
    int iterations = 1, check = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|ip", kwlist, &iterations, &check) || !sw_py_iterations_ok(iterations) ||
        !sw_py_tg_enter(self)) {
        return NULL;
    }
    const sw_memory_plan *kept = sw_py_tg_kept_memory_plan(self);
    PyObject *d = kept ? task_order_on(self->l, kept, iterations, check) : NULL;
    sw_py_tg_leave(self);
    return d;
}

/* check_memory_plan(offset, arena, reuse_from, reuse_to, align) -> None */
PyObject *sw_py_tg_check_memory_plan(TaskGraphObject *self, PyObject *args) {
    PyObject *off, *ar, *rf, *rt;
    long long align;
    if (!PyArg_ParseTuple(args, "OOOOL", &off, &ar, &rf, &rt, &align) || !sw_py_tg_enter(self)) {
        return NULL;
    }
    PyObject *result = check_on(self->l, off, ar, rf, rt, align);
    sw_py_tg_leave(self);
    return result;
}

/* memory_plan_parallel(parallel_from=-1, threads=-1) -> the old (parallel_from, threads) */
static PyObject *memory_plan_parallel(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"parallel_from", "threads", NULL};
    int from = -1, threads = -1, old_from, old_threads;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|ii", kwlist, &from, &threads)) {
        return NULL;
    }
    if (threads > 64) {
        PyErr_Format(PyExc_ValueError, "threads must be at most 64, got %d", threads);
        return NULL;
    }
    sw_memplan_parallel(from, threads, &old_from, &old_threads);
    return Py_BuildValue("(ii)", old_from, old_threads);
}

/* populate_ahead(on=-1) -> the old setting (sw_populate_ahead) */
static PyObject *populate_ahead(PyObject *Py_UNUSED(module), PyObject *args) {
    int on = -1;
    if (!PyArg_ParseTuple(args, "|i", &on)) {
        return NULL;
    }
    return PyBool_FromLong(sw_populate_ahead(on));
}

static PyMethodDef memplan_methods[] = {
    {"populate_ahead", (PyCFunction)populate_ahead, METH_VARARGS,
     "populate_ahead(on=-1) -> the old setting: whether large task graphs have their pages mapped ahead of\n"
     "the writes on other threads (on by default; -1 leaves it).  The graphs are the same either way."},
    {"memory_plan_parallel", (PyCFunction)(void (*)(void))memory_plan_parallel, METH_VARARGS | METH_KEYWORDS,
     "memory_plan_parallel(parallel_from=-1, threads=-1) -> the old (parallel_from, threads): memory plans of\n"
     "graphs of parallel_from buffers or more plan their devices on `threads` threads (0: one per processor,\n"
     "at most 8); an argument below 0 leaves its setting.  The plans are the same on any number."},
    {NULL, NULL, 0, NULL},
};

int sw_py_register_memplan(PyObject *module) {
    import_array1(-1);  /* this file's own NumPy API table */
    return PyModule_AddFunctions(module, memplan_methods);
}
