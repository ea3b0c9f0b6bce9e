/* swap_py.c -- TaskGraph.swap_plan, Problem.swap_plan: which feature maps to offload (csrc/graph/swap_plan.c,
 * swap_fit.c).
 *
 *   r = tg.swap_plan(start, end, budget, pinned, host_bw, max_rounds=0, check=False)
 *   r = problem.swap_plan(kinds, degrees, dev_ptr, devices, start, end, ...)   # lowers the plan first
 *
 * The plan as simulate_py.c's four arrays (or the TaskGraph lowered once, without a swap plan); start, end: float64 per task of its lowered graph
 * (the unswapped iteration as simulated); budget, pinned: int64 per device (bytes of the arena;
 * of the host region, < 0 unlimited); host_bw: float64 (2 * ndev,), device-to-host then
 * host-to-device bytes/s of each device.  Returns a dict: per offloaded feature map buffer,
 * out_at, in_at (original task ids), ready, needed (seconds); per device stall, stalled, peak
 * (the model's live bytes), arena, host_arena (the swapped graph's memory plan), offloaded,
 * host_peak, min_peak, working_set, working_task (the task whose buffers, with the device's
 * persistent ones, need the most bytes); fits, pinned_overflow.  check: prove every swapped memory
 * plan safe (memplan_check.c; a ValueError naming the conflict).  The GIL is released.
 */
#include "taskgraph_py.h"  /* TaskGraphObject, sw_py_lower_args; ProblemObject, sw_py_* helpers */

#include <stdlib.h>  /* calloc, free */
#include <string.h>  /* memset */

#include "pyerr.h"  /* sw_py_raise */

int sw_py_parse_swap(PyObject *obj, PyArrayObject **arr, sw_swap_spec *spec) {
    memset(spec, 0, sizeof *spec);
    if (obj == Py_None) {
        return 0;
    }
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 3) {
        PyErr_SetString(PyExc_TypeError, "swap must be None or (buffer, out_at, in_at) int32 arrays");
        return -1;
    }
    static const char *const names[3] = {"swap buffer", "swap out_at", "swap in_at"};
    for (int k = 0; k < 3; k++) {
        arr[k] = sw_py_array(PyTuple_GET_ITEM(obj, k), NPY_INT32, 1, names[k]);
        if (!arr[k]) {
            return -1;
        }
    }
    npy_intp n = PyArray_DIM(arr[0], 0);
    if (PyArray_DIM(arr[1], 0) != n || PyArray_DIM(arr[2], 0) != n || n > INT32_MAX / 4) {
        PyErr_SetString(PyExc_ValueError, "swap's three arrays must have one length");
        return -1;
    }
    *spec = (sw_swap_spec){(int32_t)n, PyArray_DATA(arr[0]), PyArray_DATA(arr[1]), PyArray_DATA(arr[2])};
    return 0;
}

/* Per device, the task whose buffers (each once), with the device's persistent buffers, take the
 * most bytes: no budget below that can run it. */
static void working_sets(const sw_task_graph *g, int ndev, const char *host_read, int64_t *bytes, int32_t *task) {
    int64_t *persistent = calloc((size_t)ndev + 1, sizeof *persistent);
    for (int d = 0; d < ndev; d++) {
        bytes[d] = 0;
        task[d] = -1;
    }
    if (!persistent) {
        return;
    }
    for (int32_t b = 0; b < g->nbuffers; b++) {
        if (sw_buffer_lives_throughout(g, b, host_read)) {
            persistent[g->buffers[b].device] += sw_buffer_bytes(&g->buffers[b]);
        }
    }
    for (int32_t t = 0; t < g->ntasks; t++) {
        int d = g->tasks[t].device;
        int64_t sum = persistent[d];
        for (int32_t k = g->io_ptr[t]; k < g->io_ptr[t + 1]; k++) {
            int32_t b = g->io[k];
            int again = 0;
            for (int32_t j = g->io_ptr[t]; j < k; j++) {
                again |= g->io[j] == b;
            }
            if (!again && g->buffers[b].device == d && !sw_buffer_lives_throughout(g, b, host_read)) {
                sum += sw_buffer_bytes(&g->buffers[b]);
            }
        }
        if (sum > bytes[d]) {
            bytes[d] = sum;
            task[d] = t;
        }
    }
    free(persistent);
}

typedef struct {
    PyArrayObject *start, *end, *budget, *pinned, *host_bw;
} swap_args;

static void swap_args_free(swap_args *s) {
    Py_XDECREF(s->start);
    Py_XDECREF(s->end);
    Py_XDECREF(s->budget);
    Py_XDECREF(s->pinned);
    Py_XDECREF(s->host_bw);
}

static int parse_args(PyObject *start, PyObject *end, PyObject *budget, PyObject *pinned, PyObject *host_bw, int ndev,
                      swap_args *s) {
    memset(s, 0, sizeof *s);
    s->start = sw_py_array(start, NPY_FLOAT64, 1, "start");
    s->end = s->start ? sw_py_array(end, NPY_FLOAT64, 1, "end") : NULL;
    s->budget = s->end ? sw_py_array(budget, NPY_INT64, 1, "budget") : NULL;
    s->pinned = s->budget ? sw_py_array(pinned, NPY_INT64, 1, "pinned") : NULL;
    s->host_bw = s->pinned ? sw_py_array(host_bw, NPY_FLOAT64, 1, "host_bw") : NULL;
    if (!s->host_bw) {
        return -1;
    }
    if (PyArray_DIM(s->budget, 0) != ndev || PyArray_DIM(s->pinned, 0) != ndev ||
        PyArray_DIM(s->host_bw, 0) != 2 * (npy_intp)ndev || PyArray_DIM(s->start, 0) != PyArray_DIM(s->end, 0)) {
        PyErr_Format(PyExc_ValueError, "swap_plan needs budget and pinned per device (%d), host_bw twice that, and "
                     "start and end of one length", ndev);
        return -1;
    }
    return 0;
}

typedef struct {
    sw_swap_result r;
    int64_t *arena, *host, *ws;
    int32_t *ws_task;
} swap_out;

static sw_status run(const sw_lowering *l, const swap_args *s, int max_rounds, int check, swap_out *o) {
    const sw_task_graph *g = &l->g;
    if (l->swapped) {
        return SW_FAIL(SW_ERR_VALUE, "this task graph has a swap plan already: plan swapping on the graph without it");
    }
    if (PyArray_DIM(s->start, 0) != g->ntasks) {
        return SW_FAIL(SW_ERR_VALUE, "a timeline of %lld tasks for a graph of %d", (long long)PyArray_DIM(s->start, 0),
                       g->ntasks);
    }
    char *host_read = NULL;
    sw_status st = sw_tg_host_reads(g, &host_read);
    if (st == SW_OK) {
        working_sets(g, l->ndev, host_read, o->ws, o->ws_task);
        sw_swap_inputs in = {PyArray_DATA(s->start), PyArray_DATA(s->end), PyArray_DATA(s->budget),
                             PyArray_DATA(s->pinned), PyArray_DATA(s->host_bw), SW_ARENA_ALIGN, max_rounds, check};
        st = sw_swap_plan_fit(g, l->ndev, &in, &o->r, o->arena, o->host);
    }
    free(host_read);
    return st;
}

static int put_result(PyObject *d, const swap_out *o, int ndev) {
    const sw_swap_result *r = &o->r;
    return sw_py_put(d, "buffer", sw_py_contiguous(r->buffer, r->n, NPY_INT32)) ||
           sw_py_put(d, "out_at", sw_py_contiguous(r->out_at, r->n, NPY_INT32)) ||
           sw_py_put(d, "in_at", sw_py_contiguous(r->in_at, r->n, NPY_INT32)) ||
           sw_py_put(d, "ready", sw_py_contiguous(r->ready, r->n, NPY_FLOAT64)) ||
           sw_py_put(d, "needed", sw_py_contiguous(r->needed, r->n, NPY_FLOAT64)) ||
           sw_py_put(d, "stall", sw_py_contiguous(r->stall, ndev, NPY_FLOAT64)) ||
           sw_py_put(d, "stalled", sw_py_contiguous(r->stalled, ndev, NPY_INT32)) ||
           sw_py_put(d, "peak", sw_py_contiguous(r->peak, ndev, NPY_INT64)) ||
           sw_py_put(d, "offloaded", sw_py_contiguous(r->offloaded, ndev, NPY_INT64)) ||
           sw_py_put(d, "host_peak", sw_py_contiguous(r->host_peak, ndev, NPY_INT64)) ||
           sw_py_put(d, "min_peak", sw_py_contiguous(r->min_peak, ndev, NPY_INT64)) ||
           sw_py_put(d, "arena", sw_py_contiguous(o->arena, ndev, NPY_INT64)) ||
           sw_py_put(d, "host_arena", sw_py_contiguous(o->host, ndev, NPY_INT64)) ||
           sw_py_put(d, "working_set", sw_py_contiguous(o->ws, ndev, NPY_INT64)) ||
           sw_py_put(d, "working_task", sw_py_contiguous(o->ws_task, ndev, NPY_INT32)) ||
           sw_py_put(d, "fits", PyBool_FromLong(r->fits)) ||
           sw_py_put(d, "pinned_overflow", PyLong_FromLong(r->pinned_overflow)) ? -1 : 0;
}

/* The swap plan of l's graph from the parsed arguments: a dict, or NULL with an exception. */
static PyObject *swap_plan_on(const sw_lowering *l, PyObject *start, PyObject *end, PyObject *budget,
                              PyObject *pinned, PyObject *host_bw, int max_rounds, int check) {
    int ndev = l->ndev;
    swap_args s;
    swap_out o = {0};
    PyObject *d = NULL;
    memset(&s, 0, sizeof s);
    o.arena = PyMem_Calloc((size_t)ndev + 1, sizeof *o.arena);
    o.host = PyMem_Calloc((size_t)ndev + 1, sizeof *o.host);
    o.ws = PyMem_Calloc((size_t)ndev + 1, sizeof *o.ws);
    o.ws_task = PyMem_Calloc((size_t)ndev + 1, sizeof *o.ws_task);
    if (!o.arena || !o.host || !o.ws || !o.ws_task) {
        PyErr_NoMemory();
        goto done;
    }
    if (parse_args(start, end, budget, pinned, host_bw, ndev, &s) < 0) {
        goto done;
    }
    sw_status st;
    Py_BEGIN_ALLOW_THREADS
    st = run(l, &s, max_rounds, check, &o);
    Py_END_ALLOW_THREADS
    if (st != SW_OK) {
        sw_py_raise(st);
        goto done;
    }
    d = PyDict_New();
    if (!d || put_result(d, &o, ndev) < 0) {
        Py_CLEAR(d);
    }
done:
    sw_swap_result_free(&o.r);
    PyMem_Free(o.arena);
    PyMem_Free(o.host);
    PyMem_Free(o.ws);
    PyMem_Free(o.ws_task);
    swap_args_free(&s);
    return d;
}

PyObject *sw_py_problem_swap_plan(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"kinds", "degrees", "dev_ptr", "devices", "start", "end", "budget", "pinned", "host_bw",
                             "max_rounds", "check", NULL};
    PyObject *k, *dg, *ptr, *dv, *start, *end, *budget, *pinned, *host_bw;
    int max_rounds = 0, check = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOOO|ip", kwlist, &k, &dg, &ptr, &dv, &start, &end, &budget,
                                     &pinned, &host_bw, &max_rounds, &check) ||
        !sw_py_problem_ready(self)) {
        return NULL;
    }
    self->busy = 1;   /* from the conversions on: they read the problem */
    sw_lowering *l = NULL;
    PyObject *d = sw_py_lower_args(self, k, dg, ptr, dv, Py_None, Py_None, &l) == 0
                      ? swap_plan_on(l, start, end, budget, pinned, host_bw, max_rounds, check)
                      : NULL;
    self->busy = 0;
    sw_lowering_free(l);
    return d;
}

/* TaskGraph.swap_plan(start, end, budget, pinned, host_bw, max_rounds=0, check=False) -> dict */
PyObject *sw_py_tg_swap_plan(TaskGraphObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"start", "end", "budget", "pinned", "host_bw", "max_rounds", "check", NULL};
    PyObject *start, *end, *budget, *pinned, *host_bw;
    int max_rounds = 0, check = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO|ip", kwlist, &start, &end, &budget, &pinned, &host_bw,
                                     &max_rounds, &check) ||
        !sw_py_tg_enter(self)) {
        return NULL;
    }
    PyObject *d = swap_plan_on(self->l, start, end, budget, pinned, host_bw, max_rounds, check);
    sw_py_tg_leave(self);
    return d;
}

int sw_py_register_swap(PyObject *module) {
    (void)module;
    import_array1(-1);  /* this file's own NumPy API table */
    return 0;
}
