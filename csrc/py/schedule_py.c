/* schedule_py.c -- TaskGraph.schedule, Problem.schedule and Problem.layer_paths (csrc/graph/schedule.c,
 * schedule_paths.c).
 *
 * TaskGraph.schedule(policy, alpha=-1, beta=-1, split=None) reads the graph lowered once;
 * Problem.schedule(kinds, degrees, dev_ptr, devices, policy, ...) lowers a plan (simulate_py.c's
 * four arrays) first.  Both time its tasks (sw_task_durations: the roofline, or
 * `split`, the measured (forward, backward) seconds per op, NaN where not measured) and
 * annotates them; layer_paths(op_da) runs the path analysis alone on given dA seconds per op
 * (tests feed hand-made ones).  Results are dicts of NumPy arrays named as the C fields.
 * The GIL is released while the core works.
 */
#include "taskgraph_py.h"  /* TaskGraphObject, sw_py_lower_args; ProblemObject, sw_py_* helpers */

#include <math.h>    /* isfinite, isnan */
#include <stdlib.h>  /* malloc, free */

#include "pyerr.h"  /* sw_py_raise */

static const char *const POLICY_NAMES[] = {"fifo", "critical_path"};
static const char *const SUBTASK_NAMES[SW_SUB_NKINDS] = {"forward", "dA", "dW", "dB", "sync"};

static int put_paths(PyObject *d, const sw_layer_paths *lp) {
    return sw_py_put(d, "op_block", sw_py_contiguous(lp->op_block, lp->nops, NPY_INT32)) ||
           sw_py_put(d, "op_path", sw_py_contiguous(lp->op_path, lp->nops, NPY_INT32)) ||
           sw_py_put(d, "op_da", sw_py_contiguous(lp->op_da, lp->nops, NPY_FLOAT64)) ||
           sw_py_put(d, "block_fork", sw_py_contiguous(lp->block_fork, lp->nblocks, NPY_INT32)) ||
           sw_py_put(d, "block_merge", sw_py_contiguous(lp->block_merge, lp->nblocks, NPY_INT32)) ||
           sw_py_put(d, "block_distance", sw_py_contiguous(lp->block_distance, lp->nblocks, NPY_FLOAT64)) ||
           sw_py_put(d, "path_block", sw_py_contiguous(lp->path_block, lp->npaths, NPY_INT32)) ||
           sw_py_put(d, "path_rank", sw_py_contiguous(lp->path_rank, lp->npaths, NPY_INT32)) ||
           sw_py_put(d, "path_distance", sw_py_contiguous(lp->path_distance, lp->npaths, NPY_FLOAT64)) ||
           sw_py_put(d, "levels", PyLong_FromLong(lp->levels)) ? -1 : 0;
}

static int put_schedule(PyObject *d, const sw_schedule *s) {
    npy_intp n = s->ntasks;
    return put_paths(d, &s->paths) || sw_py_put(d, "subtask", sw_py_contiguous(s->subtask, n, NPY_INT8)) ||
           sw_py_put(d, "layer_path", sw_py_contiguous(s->layer_path, n, NPY_INT32)) ||
           sw_py_put(d, "path_priority", sw_py_contiguous(s->path_priority, n, NPY_INT32)) ||
           sw_py_put(d, "priority", sw_py_contiguous(s->priority, n, NPY_INT32)) ||
           sw_py_put(d, "stream", sw_py_contiguous(s->stream, n, NPY_INT32)) ||
           sw_py_put(d, "stream_ptr", sw_py_contiguous(s->stream_ptr, (npy_intp)s->ndev + 1, NPY_INT32)) ||
           sw_py_put(d, "stream_device", sw_py_contiguous(s->stream_device, s->nstreams, NPY_INT32)) ||
           sw_py_put(d, "stream_priority", sw_py_contiguous(s->stream_priority, s->nstreams, NPY_INT32)) ||
           sw_py_put(d, "alpha", PyLong_FromLong(s->alpha)) || sw_py_put(d, "beta", PyLong_FromLong(s->beta)) ||
           sw_py_put(d, "sync_floor", PyLong_FromLong(s->sync_floor))
               ? -1
               : 0;
}

/* split: None, or (nops, 2) float64 of NaN (not measured) or finite seconds >= 0. */
static int parse_split(const sw_problem *p, PyObject *obj, PyArrayObject **out) {
    *out = NULL;
    if (obj == Py_None) {
        return 0;
    }
    *out = sw_py_array(obj, NPY_FLOAT64, 2, "split");
    if (!*out) {
        return -1;
    }
    if (PyArray_DIM(*out, 0) != p->nops || PyArray_DIM(*out, 1) != 2) {
        PyErr_Format(PyExc_ValueError, "split must be (%d, 2): measured forward, backward seconds per op", p->nops);
        return -1;
    }
    const double *v = PyArray_DATA(*out);
    for (npy_intp i = 0; i < 2 * (npy_intp)p->nops; i++) {
        if (!isnan(v[i]) && !(isfinite(v[i]) && v[i] >= 0)) {
            PyErr_Format(PyExc_ValueError, "split: op %zd's measured time must be NaN (not measured) or finite and "
                         ">= 0, got %g", i / 2, v[i]);
            return -1;
        }
    }
    return 0;
}

/* Time l's tasks (the roofline, or the measured split) and annotate them, with the GIL released:
 * a dict, or NULL with an exception.  A swapped graph is not scheduled: its swap tasks have their
 * own streams already, and a swap plan runs on one compute stream per device. */
static PyObject *schedule_on(const sw_problem *p, const sw_lowering *l, PyArrayObject *split, int policy, int alpha,
                             int beta) {
    if (l->swapped) {
        PyErr_SetString(PyExc_ValueError, "a task graph with a swap plan runs on one compute stream per device: "
                        "schedule the plan's graph without it");
        return NULL;
    }
    if (l->recomputed) {
        PyErr_SetString(PyExc_ValueError, "a task graph with recompute tasks runs on one compute stream per device so "
                        "far: schedule the plan's graph without recomputation");
        return NULL;
    }
    const double *sp = split ? PyArray_DATA(split) : NULL;
    sw_schedule s = {0};
    sw_status st;
    Py_BEGIN_ALLOW_THREADS
    double *durations = malloc(sizeof *durations * ((size_t)l->g.ntasks + 1));
    sw_measured m = {.split = sp};
    st = durations ? sw_task_durations(p, &l->plan, &l->g, sp ? &m : NULL, durations)
                   : SW_FAIL(SW_ERR_NOMEM, "out of memory");
    if (st == SW_OK) {
        st = sw_schedule_build(p, &l->g, durations, (sw_sched_policy)policy, alpha, beta, &s);
    }
    free(durations);
    Py_END_ALLOW_THREADS
    PyObject *d = NULL;
    if (st != SW_OK) {
        sw_py_raise(st);
    } else {
        d = PyDict_New();
        if (!d || put_schedule(d, &s) < 0) {
            Py_CLEAR(d);
        }
    }
    sw_schedule_free(&s);
    return d;
}

/* schedule(kinds, degrees, dev_ptr, devices, policy, alpha=-1, beta=-1, split=None) -> dict */
PyObject *sw_py_problem_schedule(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"kinds", "degrees", "dev_ptr", "devices", "policy", "alpha", "beta", "split", NULL};
    PyObject *k, *dg, *ptr, *dv, *split_obj = Py_None;
    int policy, alpha = -1, beta = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOi|iiO", kwlist, &k, &dg, &ptr, &dv, &policy, &alpha, &beta,
                                     &split_obj) ||
        !sw_py_problem_ready(self)) {
        return NULL;
    }
    self->busy = 1;   /* from the conversions on: they read the problem */
    PyArrayObject *split = NULL;
    sw_lowering *l = NULL;
    PyObject *d = NULL;
    if (parse_split(self->p, split_obj, &split) == 0 &&
        sw_py_lower_args(self, k, dg, ptr, dv, Py_None, Py_None, &l) == 0) {
        d = schedule_on(self->p, l, split, policy, alpha, beta);
    }
    self->busy = 0;
    sw_lowering_free(l);
    Py_XDECREF(split);
    return d;
}

/* TaskGraph.schedule(policy, alpha=-1, beta=-1, split=None) -> dict */
PyObject *sw_py_tg_schedule(TaskGraphObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"policy", "alpha", "beta", "split", NULL};
    PyObject *split_obj = Py_None;
    int policy, alpha = -1, beta = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|iiO", kwlist, &policy, &alpha, &beta, &split_obj)) {
        return NULL;
    }
    PyArrayObject *split = NULL;
    if (parse_split(self->p, split_obj, &split) < 0) {
        Py_XDECREF(split);
        return NULL;
    }
    PyObject *d = NULL;
    if (sw_py_tg_enter(self)) {
        d = schedule_on(self->p, self->l, split, policy, alpha, beta);
        sw_py_tg_leave(self);
    }
    Py_XDECREF(split);
    return d;
}

PyObject *sw_py_problem_layer_paths(ProblemObject *self, PyObject *args) {
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "O", &obj) || !sw_py_problem_ready(self)) {
        return NULL;
    }
    PyArrayObject *op_da = sw_py_array(obj, NPY_FLOAT64, 1, "op_da");
    if (!op_da) {
        return NULL;
    }
    if (PyArray_DIM(op_da, 0) != self->p->nops) {
        PyErr_Format(PyExc_ValueError, "op_da needs one dA time per op (%d), got %zd", self->p->nops,
                     (Py_ssize_t)PyArray_DIM(op_da, 0));
        Py_DECREF(op_da);
        return NULL;
    }
    self->busy = 1;
    sw_layer_paths lp;
    sw_status st;
    Py_BEGIN_ALLOW_THREADS
    st = sw_layer_paths_build(self->p, PyArray_DATA(op_da), &lp);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyObject *d = NULL;
    if (st != SW_OK) {
        sw_py_raise(st);
    } else {
        d = PyDict_New();
        if (!d || put_paths(d, &lp) < 0) {
            Py_CLEAR(d);
        }
        sw_layer_paths_free(&lp);
    }
    Py_DECREF(op_da);
    return d;
}

/* Its NumPy API table and the names of the codes: SCHED_POLICIES, SUBTASKS. */
int sw_py_register_schedule(PyObject *module) {
    import_array1(-1);
    PyObject *policies = Py_BuildValue("(ss)", POLICY_NAMES[0], POLICY_NAMES[1]);
    PyObject *subtasks = Py_BuildValue("(sssss)", SUBTASK_NAMES[0], SUBTASK_NAMES[1], SUBTASK_NAMES[2],
                                       SUBTASK_NAMES[3], SUBTASK_NAMES[4]);
    int rc = policies && subtasks && PyModule_AddObjectRef(module, "SCHED_POLICIES", policies) == 0 &&
                     PyModule_AddObjectRef(module, "SUBTASKS", subtasks) == 0
                 ? 0
                 : -1;
    Py_XDECREF(policies);
    Py_XDECREF(subtasks);
    return rc;
}
