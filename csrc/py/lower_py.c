/* lower_py.c -- Problem.lower, and what every binding taking a plan shares: the plan's arrays
 * in (sw_py_parse_plan) and a lowered task graph's arrays out (sw_py_put_tasks, sw_py_put_memory,
 * sw_py_put_graph: also TaskGraph.arrays).
 *
 * A plan arrives as four arrays over the problem's ops:
 *   kinds    (nops,) int32      sw_op_kind of every op
 *   degrees  (nops, 7) int32    degree per output dimension (5, 1 past the rank), then the split
 *                               reduction variable (or -1) and its degree
 *   dev_ptr  (nops + 1,) int32  op i's workers run on devices[dev_ptr[i] .. dev_ptr[i+1])
 *   devices  (n,) int32
 * Results come back as a dict of NumPy arrays, one entry per task (or buffer, device); names of
 * the enum codes are the module's TASK_KINDS, PHASES and BUFFER_KINDS (simulate_py.c).  The GIL
 * is released while the C core lowers (once: sw_py_lower_args, taskgraph_py.c).
 */
#include "taskgraph_py.h"  /* sw_py_lower_args, sw_py_put_graph; ProblemObject, CPython and NumPy C API */

#include <math.h>    /* llround */
#include <string.h>  /* memcpy, memset */

#include "pyerr.h"  /* sw_py_raise */

/* ------------------------------------------------------------------ arguments */
void sw_py_plan_args_free(plan_args *a) {
    Py_XDECREF(a->kinds);
    Py_XDECREF(a->degrees);
    Py_XDECREF(a->dev_ptr);
    Py_XDECREF(a->devs);
    PyMem_Free(a->cfg);
    PyMem_Free(a->kind);
}

/* Plan rows: the degrees of the output dimensions, then (split reduction or -1, its degree). */
#define PLAN_COLUMNS (SW_MAX_RANK + 2)


int sw_py_parse_plan(const sw_problem *p, PyObject *kinds, PyObject *degrees, PyObject *dev_ptr, PyObject *devs,
                      plan_args *a) {
    memset(a, 0, sizeof *a);
    a->kinds = sw_py_array(kinds, NPY_INT32, 1, "kinds");
    a->degrees = a->kinds ? sw_py_array(degrees, NPY_INT32, 2, "degrees") : NULL;
    a->dev_ptr = a->degrees ? sw_py_array(dev_ptr, NPY_INT32, 1, "dev_ptr") : NULL;
    a->devs = a->dev_ptr ? sw_py_array(devs, NPY_INT32, 1, "devices") : NULL;
    if (!a->devs) {
        return -1;
    }
    npy_intp n = p->nops;
    const int32_t *ptr = PyArray_DATA(a->dev_ptr);
    if (PyArray_DIM(a->kinds, 0) != n || PyArray_DIM(a->degrees, 0) != n ||
        PyArray_DIM(a->degrees, 1) != PLAN_COLUMNS || PyArray_DIM(a->dev_ptr, 0) != n + 1) {
        PyErr_Format(PyExc_ValueError, "a plan of %zd ops needs kinds (%zd,), degrees (%zd, %d), dev_ptr (%zd,)",
                     (Py_ssize_t)n, (Py_ssize_t)n, (Py_ssize_t)n, PLAN_COLUMNS, (Py_ssize_t)n + 1);
        return -1;
    }
    if (ptr[0] != 0 || ptr[n] != PyArray_DIM(a->devs, 0)) {
        PyErr_SetString(PyExc_ValueError, "dev_ptr must run from 0 to the length of devices");
        return -1;
    }
    a->cfg = PyMem_Calloc((size_t)n, sizeof *a->cfg);
    a->kind = PyMem_Calloc((size_t)n, 1);
    if (!a->cfg || !a->kind) {
        PyErr_NoMemory();
        return -1;
    }
    const int32_t *deg = PyArray_DATA(a->degrees), *kind = PyArray_DATA(a->kinds);
    for (npy_intp i = 0; i < n; i++) {
        if (ptr[i + 1] < ptr[i] || ptr[i + 1] - ptr[i] > SW_MAX_DEVICES || kind[i] < 0 || kind[i] > 127) {
            PyErr_Format(PyExc_ValueError, "op %zd: bad worker range or op kind", (Py_ssize_t)i);
            return -1;
        }
        const int32_t *row = deg + i * PLAN_COLUMNS;
        memcpy(a->cfg[i].deg, row, sizeof a->cfg[i].deg);
        sw_status st = sw_config_set_reduction(&p->ops[i], (int)i, row[SW_MAX_RANK], row[SW_MAX_RANK + 1], &a->cfg[i]);
        if (st != SW_OK) {
            sw_py_raise(st);
            return -1;
        }
        a->cfg[i].nworkers = ptr[i + 1] - ptr[i];
        a->cfg[i].dev_offset = ptr[i];
        a->kind[i] = (int8_t)kind[i];
    }
    a->plan = (sw_plan){(int)n, a->cfg, PyArray_DATA(a->devs), a->kind};
    return 0;
}

/* ------------------------------------------------------------------ results */
/* A 1-D array of n items of `size` bytes read at `stride` from `src`. */
static PyObject *strided(const void *src, npy_intp n, size_t stride, int type) {
    PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(1, &n, type);
    if (!a) {
        return NULL;
    }
    size_t size = (size_t)PyArray_ITEMSIZE(a);
    char *dst = PyArray_DATA(a);
    for (npy_intp i = 0; i < n; i++) {
        memcpy(dst + (size_t)i * size, (const char *)src + (size_t)i * stride, size);
    }
    return (PyObject *)a;
}

PyObject *sw_py_contiguous(const void *src, npy_intp n, int type) {
    PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(1, &n, type);
    if (a && n > 0) {
        memcpy(PyArray_DATA(a), src, (size_t)PyArray_NBYTES(a));
    }
    return (PyObject *)a;
}

static void free_adopted(PyObject *capsule) {
    free(PyCapsule_GetPointer(capsule, "shardwise.adopted"));
}

PyObject *sw_py_adopt(void *data, npy_intp n, int type) {
    PyObject *capsule = data ? PyCapsule_New(data, "shardwise.adopted", free_adopted) : NULL;
    if (!capsule) {
        free(data);
        return data ? NULL : PyArray_SimpleNew(1, &n, type);   /* nothing to adopt: n is 0 */
    }
    PyObject *a = PyArray_SimpleNewFromData(1, &n, type, data);
    if (!a) {
        Py_DECREF(capsule);   /* frees data */
        return NULL;
    }
    if (PyArray_SetBaseObject((PyArrayObject *)a, capsule) < 0) {   /* steals capsule either way */
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

/* Boxes as an (n, 1 + 2 * MAX_RANK) int64 array: rank, lo[5], hi[5] (the graph's sw_box32s, widened). */
/* (n, 1 + 2 SW_MAX_RANK) int64 rows (rank, lo, hi) of n boxes: box i at first + i * stride, or
 * with `g`, task i's box (sw_tg_task_box32; first and stride unused). */
static PyObject *boxes(const void *first, npy_intp n, size_t stride, const sw_task_graph *g) {
    npy_intp dims[2] = {n, 1 + 2 * SW_MAX_RANK};
    PyArrayObject *a = (PyArrayObject *)PyArray_ZEROS(2, dims, NPY_INT64, 0);
    if (!a) {
        return NULL;
    }
    int64_t *out = PyArray_DATA(a);
    for (npy_intp i = 0; i < n; i++) {
        const sw_box32 *b = g ? sw_tg_task_box32(g, &g->tasks[i])
                              : (const sw_box32 *)((const char *)first + (size_t)i * stride);
        int64_t *row = out + i * dims[1];
        row[0] = b->rank;
        for (int d = 0; d < b->rank; d++) {
            row[1 + d] = b->lo[d];
            row[1 + SW_MAX_RANK + d] = b->hi[d];
        }
    }
    return (PyObject *)a;
}

int sw_py_put(PyObject *d, const char *key, PyObject *value) {
    if (!value) {
        return -1;
    }
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

#define TASK_FIELD(g, field, type) strided(&(g)->tasks[0].field, (g)->ntasks, sizeof(sw_task), (type))

/* Per task, the bytes on the wire as the plan counts them (sw_wire_bytes at the graph's value_bytes). */
static PyObject *plan_nbytes(const sw_task_graph *t) {
    npy_intp n = t->ntasks;
    PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(1, &n, NPY_INT64);
    for (npy_intp i = 0; a && i < n; i++) {
        ((int64_t *)PyArray_DATA(a))[i] = (int64_t)llround(sw_wire_bytes(t->value_bytes, &t->tasks[i]));
    }
    return (PyObject *)a;
}

/* A lowered graph is never empty: every op has a worker with a task and an activation. */
int sw_py_put_tasks(PyObject *d, const sw_task_graph *t) {
    return sw_py_put(d, "kind", TASK_FIELD(t, kind, NPY_INT8)) || sw_py_put(d, "phase", TASK_FIELD(t, phase, NPY_INT8)) ||
           sw_py_put(d, "device", TASK_FIELD(t, device, NPY_INT32)) ||
           sw_py_put(d, "src_device", TASK_FIELD(t, src_device, NPY_INT32)) ||
           sw_py_put(d, "op", TASK_FIELD(t, op, NPY_INT32)) || sw_py_put(d, "worker", TASK_FIELD(t, worker, NPY_INT32)) ||
           sw_py_put(d, "slot", TASK_FIELD(t, slot, NPY_INT32)) || sw_py_put(d, "nreads", TASK_FIELD(t, nreads, NPY_INT32)) ||
           sw_py_put(d, "elements", TASK_FIELD(t, elements, NPY_INT64)) ||
           sw_py_put(d, "nbytes", TASK_FIELD(t, nbytes, NPY_INT64)) || sw_py_put(d, "plan_nbytes", plan_nbytes(t)) ||
           sw_py_put(d, "dep_ptr", sw_py_contiguous(t->dep_ptr, (npy_intp)t->ntasks + 1, NPY_INT32)) ||
           sw_py_put(d, "deps", sw_py_contiguous(t->deps, t->ndeps, NPY_INT32)) ||
           sw_py_put(d, "io_ptr", sw_py_contiguous(t->io_ptr, (npy_intp)t->ntasks + 1, NPY_INT32)) ||
           sw_py_put(d, "io", sw_py_contiguous(t->io, t->nio, NPY_INT32)) ? -1 : 0;
}

/* Per buffer, bytes as the runtime holds it (buffer_bytes: float32, statistics float64) and as
 * the plan counts it (buffer_plan_bytes: its precision's element sizes, sw_graph_buffer_bytes). */
static int put_buffers(PyObject *d, const sw_task_graph *g) {
    const sw_buffer *b = g->buffers;
    npy_intp n = g->nbuffers;
    PyArrayObject *bytes = (PyArrayObject *)PyArray_SimpleNew(1, &n, NPY_INT64);
    PyArrayObject *plan_bytes = bytes ? (PyArrayObject *)PyArray_SimpleNew(1, &n, NPY_INT64) : NULL;
    for (npy_intp i = 0; plan_bytes && i < n; i++) {
        ((int64_t *)PyArray_DATA(bytes))[i] = sw_buffer_bytes(&b[i]);
        ((int64_t *)PyArray_DATA(plan_bytes))[i] = sw_graph_buffer_bytes(g, (int32_t)i);
    }
    if (bytes && (!plan_bytes || sw_py_put(d, "buffer_plan_bytes", (PyObject *)plan_bytes))) {
        Py_DECREF(bytes);
        return -1;
    }
    return sw_py_put(d, "buffer_device", strided(&b[0].device, n, sizeof(sw_buffer), NPY_INT32)) ||
           sw_py_put(d, "buffer_op", strided(&b[0].op, n, sizeof(sw_buffer), NPY_INT32)) ||
           sw_py_put(d, "buffer_kind", strided(&b[0].kind, n, sizeof(sw_buffer), NPY_INT8)) ||
           sw_py_put(d, "buffer_bytes", (PyObject *)bytes) ||
           sw_py_put(d, "buffer_worker", strided(&b[0].worker, n, sizeof(sw_buffer), NPY_INT32)) ||
           sw_py_put(d, "buffer_slot", strided(&b[0].slot, n, sizeof(sw_buffer), NPY_INT16)) ||
           sw_py_put(d, "buffer_box", boxes(&b[0].box, n, sizeof(sw_buffer), NULL)) ? -1 : 0;
}

int sw_py_put_memory(PyObject *d, const sw_task_graph *g, int ndev) {
    int64_t *mem = PyMem_Calloc((size_t)ndev, sizeof *mem);
    if (!mem) {
        PyErr_NoMemory();
        return -1;
    }
    int64_t moved = sw_tg_memory(g, ndev, mem);
    int rc = sw_py_put(d, "memory", sw_py_contiguous(mem, ndev, NPY_INT64)) ||
             sw_py_put(d, "bytes_moved", PyLong_FromLongLong(moved)) ? -1 : 0;
    PyMem_Free(mem);
    return rc;
}

int sw_py_put_graph(PyObject *d, const sw_task_graph *g, int ndev) {
    return sw_py_put_tasks(d, g) < 0 || sw_py_put(d, "box", boxes(NULL, g->ntasks, 0, g)) < 0 ||
           put_buffers(d, g) < 0 || sw_py_put_memory(d, g, ndev) < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------ Problem.lower */
PyObject *sw_py_problem_lower(ProblemObject *self, PyObject *args) {
    PyObject *k, *dg, *ptr, *dv;
    if (!PyArg_ParseTuple(args, "OOOO", &k, &dg, &ptr, &dv) || !sw_py_problem_ready(self)) {
        return NULL;
    }
    self->busy = 1;   /* from the conversions on: they read the problem */
    sw_lowering *l = NULL;
    PyObject *d = NULL;
    if (sw_py_lower_args(self, k, dg, ptr, dv, Py_None, Py_None, &l) == 0) {
        d = PyDict_New();
        if (d && sw_py_put_graph(d, &l->g, self->p->ndev) < 0) {
            Py_CLEAR(d);
        }
    }
    self->busy = 0;
    sw_lowering_free(l);
    return d;
}

/* ------------------------------------------------------------------ Problem.buffer_totals */
/* (bytes, buffers, persistent bytes) per device of plan's lowering (sw_lower_buffer_totals),
 * as int64 arrays; NULL with an exception.  The GIL is released while it lowers. */
static PyObject *totals_of(ProblemObject *self, const sw_plan *plan, int fused, int chunked) {
    int ndev = self->p->ndev;
    int64_t *bytes = PyMem_Calloc((size_t)ndev + 1, sizeof *bytes), *count = PyMem_Calloc((size_t)ndev + 1, sizeof *count);
    int64_t *persistent = PyMem_Calloc((size_t)ndev + 1, sizeof *persistent);
    PyObject *out = NULL;
    if (!bytes || !count || !persistent) {
        PyErr_NoMemory();
    } else {
        sw_status s;
        Py_BEGIN_ALLOW_THREADS
        s = sw_lower_buffer_totals(self->p, plan, fused ? SW_RINGS_FUSED : SW_RINGS_CHUNKED, chunked, bytes, count,
                                   persistent);
        Py_END_ALLOW_THREADS
        out = s != SW_OK ? sw_py_raise(s)
                         : Py_BuildValue("(NNN)", sw_py_contiguous(bytes, ndev, NPY_INT64),
                                         sw_py_contiguous(count, ndev, NPY_INT64),
                                         sw_py_contiguous(persistent, ndev, NPY_INT64));
    }
    PyMem_Free(bytes);
    PyMem_Free(count);
    PyMem_Free(persistent);
    return out;
}

/* Problem.buffer_totals(kinds, degrees, dev_ptr, devices, fused_rings=False, chunked=False) ->
 * (bytes, buffers, persistent bytes) per device, int64 arrays: what TaskGraph.buffer_totals
 * gives (chunked, then persistent=True) of the plan's lowering, from a lowering that keeps no
 * task (sw_lower_buffer_totals).  Like a TaskGraph, it only reads the problem: a reader, so
 * the search's own problem may be asked while other passes read it. */
PyObject *sw_py_problem_buffer_totals(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"kinds", "degrees", "dev_ptr", "devices", "fused_rings", "chunked", NULL};
    PyObject *k, *dg, *ptr, *dv;
    int fused = 0, chunked = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO|pp", kwlist, &k, &dg, &ptr, &dv, &fused, &chunked) ||
        !sw_py_problem_ready(self)) {
        return NULL;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Problem is in use by another thread");
        return NULL;
    }
    self->readers++;
    plan_args a;
    PyObject *out = sw_py_parse_plan(self->p, k, dg, ptr, dv, &a) == 0 ? totals_of(self, &a.plan, fused, chunked) : NULL;
    sw_py_plan_args_free(&a);
    self->readers--;
    return out;
}

/* Problem.buffer_totals_chosen(kinds, choice, fused_rings=False, chunked=False): buffer_totals
 * of the plan giving op v its configuration choice[v] of the problem's enumeration, lowered
 * from those configurations themselves: a search's memory check of the plan it found, without
 * the plan's arrays (Inception-v3 on 16 devices: ~0.7 ms to make them). */
PyObject *sw_py_problem_buffer_totals_chosen(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"kinds", "choice", "fused_rings", "chunked", NULL};
    PyObject *k, *ch;
    int fused = 0, chunked = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|pp", kwlist, &k, &ch, &fused, &chunked) ||
        !sw_py_problem_ready(self)) {
        return NULL;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Problem is in use by another thread");
        return NULL;
    }
    const sw_problem *p = self->p;
    PyArrayObject *kinds = sw_py_array(k, NPY_INT32, 1, "kinds");
    PyArrayObject *choice = kinds ? sw_py_choice(p, ch) : NULL;
    sw_config *cfg = NULL;
    int8_t *kind = NULL;
    PyObject *out = NULL;
    if (!choice) {
        goto done;
    }
    if (PyArray_DIM(kinds, 0) != p->nops) {
        PyErr_Format(PyExc_ValueError, "kinds needs one entry per op (%d), got %zd", p->nops,
                     (Py_ssize_t)PyArray_DIM(kinds, 0));
        goto done;
    }
    cfg = PyMem_Calloc((size_t)p->nops + 1, sizeof *cfg);
    kind = PyMem_Calloc((size_t)p->nops + 1, 1);
    if (!cfg || !kind) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *pick = PyArray_DATA(choice);
    const int32_t *kd = PyArray_DATA(kinds);
    for (int v = 0; v < p->nops; v++) {
        if (kd[v] < 0 || kd[v] > 127) {
            PyErr_Format(PyExc_ValueError, "op %d: bad op kind %d", v, kd[v]);
            goto done;
        }
        cfg[v] = p->ops[v].cfgs[pick[v]];   /* its devices: dev_pool[dev_offset ..] */
        kind[v] = (int8_t)kd[v];
    }
    self->readers++;
    sw_plan plan = {p->nops, cfg, p->dev_pool, kind};
    out = totals_of(self, &plan, fused, chunked);
    self->readers--;
done:
    PyMem_Free(cfg);
    PyMem_Free(kind);
    Py_XDECREF(kinds);
    Py_XDECREF(choice);
    return out;
}

int sw_py_register_lower(PyObject *Py_UNUSED(module)) {
    import_array1(-1);  /* this file's own NumPy API table */
    return 0;
}
