/* module.c -- the CPython module shardwise._core.
 *
 * A thin layer: it converts NumPy arrays to C arrays, calls the core, and maps
 * statuses to exceptions in one place (raise_status).  The GIL is released
 * around table building and search (search_py.c).  One Python Problem owns one
 * sw_problem.
 */
#include "problem_py.h"  /* ProblemObject; CPython and NumPy C API */

#include <math.h>  /* isfinite */

#include "../cpu/kernels.h"
#include "../shardwise.h"
#include "backend_py.h"  /* sw_py_register_gpu_plan */
#include "pyerr.h"  /* sw_py_raise */

/* test entry points of the CPU kernels, one file per kernel family */
int sw_py_register_conv_kernels(PyObject *module);
int sw_py_register_misc_kernels(PyObject *module);
int sw_py_register_activation_kernels(PyObject *module);
int sw_py_register_optim_kernels(PyObject *module);

/* ------------------------------------------------------------------ errors */
PyObject *sw_py_raise(sw_status s) {
    PyObject *type = PyExc_RuntimeError;
    if (s == SW_ERR_VALUE) {
        type = PyExc_ValueError;
    } else if (s == SW_ERR_NOMEM) {
        type = PyExc_MemoryError;
    }
    PyErr_SetString(type, sw_last_error());
    return NULL;
}

/* A C-contiguous, aligned array of `type` (a new reference) or NULL with an exception. */
PyArrayObject *sw_py_array(PyObject *obj, int type, int ndim, const char *what) {
    PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(obj, type, ndim, ndim, NPY_ARRAY_IN_ARRAY);
    if (!a) {
        PyErr_Format(PyExc_ValueError, "%s must be a %d-D array of %s", what, ndim,
                     type == NPY_INT64 ? "int64" : type == NPY_INT32 ? "int32" : "float64");
    }
    return a;
}

/* ------------------------------------------------------------------ Problem */
int sw_py_problem_ready(ProblemObject *self) {
    if (!self->p) {
        PyErr_SetString(PyExc_RuntimeError, "Problem is not initialized");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Problem is in use by another thread");
        return 0;
    }
    return 1;
}

int sw_py_check_op(ProblemObject *self, int op) {
    if (op < 0 || op >= self->p->nops) {
        PyErr_Format(PyExc_IndexError, "op index %d out of range 0..%d", op, self->p->nops - 1);
        return 0;
    }
    return 1;
}

/* CONVERTING: methods that change self->p, or hold pointers into it, convert their
 * arguments (arrays, sequences of ints) with self->busy set.  A conversion can run Python
 * code (__array__, __index__) that releases the GIL or calls back into this Problem; with
 * busy set, neither another thread nor that code can re-initialise self or start a search
 * on it in between (they get "in use by another thread").  busy was 0 before: every such
 * method checked sw_py_problem_ready first.
 *
 * Refuse to replace or change self->p while a search, table build or lowering on another
 * thread uses it (they run with the GIL released over self->p); 1 if nobody does. */
static int not_busy(ProblemObject *self, const char *what) {
    if (self->busy) {
        PyErr_Format(PyExc_RuntimeError, "cannot %s a Problem while another thread is using it "
                     "(a search, table build or lowering is running)", what);
        return 0;
    }
    return 1;
}

/* Problem(...) and problem.__init__(...) again: a second call replaces the problem, but
 * only when no other thread is using the old one (freeing it under a running search was a
 * use-after-free).  The new problem is built first and swapped in last, so a failed
 * re-initialisation leaves the old problem as it was. */
static int Problem_init(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"blob", "flops", "dev_flops", "dev_membw", "bandwidth", NULL};
    PyObject *blob_o, *flops_o, *df_o, *dm_o, *bw_o;
    if (!not_busy(self, "re-initialise") ||
        !PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO", kwlist, &blob_o, &flops_o, &df_o, &dm_o, &bw_o)) {
        return -1;
    }
    int rc = -1;
    sw_problem *fresh = NULL;
    PyArrayObject *blob = sw_py_array(blob_o, NPY_INT64, 1, "blob");
    PyArrayObject *flops = blob ? sw_py_array(flops_o, NPY_FLOAT64, 2, "flops") : NULL;
    PyArrayObject *df = flops ? sw_py_array(df_o, NPY_FLOAT64, 1, "dev_flops") : NULL;
    PyArrayObject *dm = df ? sw_py_array(dm_o, NPY_FLOAT64, 1, "dev_membw") : NULL;
    PyArrayObject *bw = dm ? sw_py_array(bw_o, NPY_FLOAT64, 2, "bandwidth") : NULL;
    if (!bw) {
        goto done;
    }
    npy_intp ndev = PyArray_DIM(df, 0);
    if (PyArray_DIM(dm, 0) != ndev || PyArray_DIM(bw, 0) != ndev || PyArray_DIM(bw, 1) != ndev) {
        PyErr_SetString(PyExc_ValueError, "device arrays disagree on the number of devices");
        goto done;
    }
    if (PyArray_DIM(blob, 0) < 1 || PyArray_DIM(flops, 1) != 2) {
        PyErr_SetString(PyExc_ValueError, "blob must be non-empty and flops must have two columns");
        goto done;
    }
    int64_t nops = ((int64_t *)PyArray_DATA(blob))[0];
    if (nops != PyArray_DIM(flops, 0)) {
        PyErr_SetString(PyExc_ValueError, "flops must have one row per op");
        goto done;
    }
    if (ndev > SW_MAX_DEVICES) {
        PyErr_Format(PyExc_ValueError, "at most %d devices are supported", SW_MAX_DEVICES);
        goto done;
    }
    sw_status s = sw_problem_new(&fresh, PyArray_DATA(blob), PyArray_DIM(blob, 0), PyArray_DATA(flops),
                                 (int)ndev, PyArray_DATA(df), PyArray_DATA(dm), PyArray_DATA(bw));
    if (s != SW_OK) {
        sw_py_raise(s);
        goto done;
    }
    /* checked again: converting the arguments can run Python code (__array__), which can
     * release the GIL and let another thread start a search on self */
    if (!not_busy(self, "re-initialise")) {
        sw_problem_free(fresh);
        goto done;
    }
    sw_problem_free(self->p);
    self->p = fresh;
    rc = 0;
done:
    Py_XDECREF(blob);
    Py_XDECREF(flops);
    Py_XDECREF(df);
    Py_XDECREF(dm);
    Py_XDECREF(bw);
    return rc;
}

static void Problem_dealloc(ProblemObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    sw_problem_free(self->p);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *Problem_set_options(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"sync_model", "bytes_per_element", "backward_factor", "threads", "reduction_splits",
                             "node_structure", NULL};
    int sync = 0, threads = 1, reduction_splits = 0, node_structure = 1;
    double bpe = 4.0, bf = 3.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|iddipp", kwlist, &sync, &bpe, &bf, &threads,
                                     &reduction_splits, &node_structure) ||
        !sw_py_problem_ready(self)) {
        return NULL;
    }
    self->p->reduction_splits = reduction_splits;
    /* node_structure=False: transfers listed pair by pair even on uniform nodes (tests compare) */
    sw_problem_detect_nodes(self->p);
    if (!node_structure) {
        self->p->node_size = 0;
    }
    if (threads < 1 || threads > 64) {
        PyErr_Format(PyExc_ValueError, "threads must be in 1..64, got %d", threads);
        return NULL;
    }
    self->p->threads = threads;
    if (sync != SW_SYNC_PARAMETER_SERVER && sync != SW_SYNC_RING) {
        PyErr_Format(PyExc_ValueError, "unknown sync model %d", sync);
        return NULL;
    }
    if (!(bpe > 0) || !(bf > 0) || bpe > 1e6 || bf > 1e6) {
        PyErr_SetString(PyExc_ValueError, "bytes_per_element and backward_factor must be positive");
        return NULL;
    }
    self->p->sync_model = (sw_sync_model)sync;
    self->p->bytes_per_element = bpe;
    self->p->backward_factor = bf;
    Py_RETURN_NONE;
}

/* set_optimizer_state(n): state buffers the lowering gives every parameter slice (1: SGD's
 * momentum, 2: Adam's moments); lower, memory_plan and Runtime built afterwards use it. */
static PyObject *Problem_set_optimizer_state(ProblemObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if ((n == -1 && PyErr_Occurred()) || !sw_py_problem_ready(self)) {
        return NULL;
    }
    if (n < 1 || n > SW_MAX_OPTIMIZER_STATE) {
        PyErr_Format(PyExc_ValueError, "optimizer state buffers per parameter must be 1..%d, got %ld",
                     SW_MAX_OPTIMIZER_STATE, n);
        return NULL;
    }
    self->p->optimizer_state = (int)n;
    Py_RETURN_NONE;
}

static PyObject *Problem_enumerate(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"counts", "first_block_only", NULL};
    PyObject *arg;
    int first_only = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p", kwlist, &arg, &first_only) || !sw_py_problem_ready(self)) {
        return NULL;
    }
    self->busy = 1;  /* see CONVERTING */
    PyArrayObject *counts = sw_py_array(arg, NPY_INT32, 1, "counts");
    self->busy = 0;
    if (!counts) {
        return NULL;
    }
    sw_status s = sw_problem_enumerate(self->p, PyArray_DATA(counts), (int)PyArray_DIM(counts, 0), first_only);
    Py_DECREF(counts);
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    Py_RETURN_NONE;
}

/* enumerate_sets(sets): sets a list of sequences of device indices (each in worker order). */
static PyObject *Problem_enumerate_sets(ProblemObject *self, PyObject *arg) {
    if (!sw_py_problem_ready(self)) {
        return NULL;
    }
    PyObject *seq = PySequence_Fast(arg, "device sets must be a sequence of sequences of device indices");
    if (!seq) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), total = 0;
    if (n < 1 || n > INT32_MAX / 2) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "device sets: give at least one set");
        return NULL;
    }
    PyArrayObject **arrays = PyMem_Calloc((size_t)n, sizeof *arrays);
    int32_t *ptr = PyMem_Malloc(sizeof *ptr * ((size_t)n + 1)), *devs = NULL;
    int ok = arrays && ptr;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        self->busy = 1;  /* see CONVERTING */
        arrays[i] = sw_py_array(PySequence_Fast_GET_ITEM(seq, i), NPY_INT32, 1, "a device set");
        self->busy = 0;
        ok = arrays[i] != NULL && PyArray_DIM(arrays[i], 0) <= self->p->ndev;
        if (arrays[i] && !ok) {
            PyErr_Format(PyExc_ValueError, "device set %zd has more devices than the machine's %d", i, self->p->ndev);
        }
        total += ok ? PyArray_DIM(arrays[i], 0) : 0;
    }
    if (ok) {
        devs = PyMem_Malloc(sizeof *devs * ((size_t)total + 1));
        ok = devs != NULL;
    }
    if (ok) {
        Py_ssize_t at = 0;
        ptr[0] = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            memcpy(devs + at, PyArray_DATA(arrays[i]), sizeof *devs * (size_t)PyArray_DIM(arrays[i], 0));
            at += PyArray_DIM(arrays[i], 0);
            ptr[i + 1] = (int32_t)at;
        }
    } else if (!PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; arrays && i < n; i++) {
        Py_XDECREF(arrays[i]);
    }
    PyMem_Free(arrays);
    Py_DECREF(seq);
    sw_status s = ok ? sw_problem_enumerate_sets(self->p, (int)n, ptr, devs) : SW_OK;
    PyMem_Free(ptr);
    PyMem_Free(devs);
    if (!ok) {
        return NULL;
    }
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    Py_RETURN_NONE;
}

static PyObject *Problem_set_configs(ProblemObject *self, PyObject *args) {
    int op;
    PyObject *deg_o, *dev_o, *red_o = Py_None;
    if (!PyArg_ParseTuple(args, "iOO|O", &op, &deg_o, &dev_o, &red_o) || !sw_py_problem_ready(self) ||
        !sw_py_check_op(self, op)) {
        return NULL;
    }
    self->busy = 1;  /* see CONVERTING */
    PyArrayObject *deg = sw_py_array(deg_o, NPY_INT32, 2, "degrees");
    PyArrayObject *dev = deg ? sw_py_array(dev_o, NPY_INT32, 2, "devices") : NULL;
    PyArrayObject *red = NULL;
    PyObject *result = NULL;
    int converted = dev && (red_o == Py_None || (red = sw_py_array(red_o, NPY_INT32, 2, "reductions")));
    self->busy = 0;
    if (!converted) {
        goto done;
    }
    if (PyArray_DIM(deg, 1) != SW_MAX_RANK || PyArray_DIM(dev, 0) != PyArray_DIM(deg, 0) ||
        PyArray_DIM(deg, 0) < 1 || PyArray_DIM(dev, 1) < 1) {
        PyErr_Format(PyExc_ValueError, "degrees must be (n, %d) and devices (n, maxk) with n >= 1", SW_MAX_RANK);
        goto done;
    }
    if (red && (PyArray_DIM(red, 0) != PyArray_DIM(deg, 0) || PyArray_DIM(red, 1) != 2)) {
        PyErr_SetString(PyExc_ValueError, "reductions must be (n, 2): (variable or -1, degree) per configuration");
        goto done;
    }
    sw_status s = sw_problem_set_configs(self->p, op, (int)PyArray_DIM(deg, 0), PyArray_DATA(deg),
                                         red ? PyArray_DATA(red) : NULL, PyArray_DATA(dev),
                                         (int)PyArray_DIM(dev, 1));
    if (s != SW_OK) {
        sw_py_raise(s);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(deg);
    Py_XDECREF(dev);
    Py_XDECREF(red);
    return result;
}

/* reductions(op) -> (ncfg, 2) int32: (split reduction variable or -1, its degree) per configuration. */
static PyObject *Problem_reductions(ProblemObject *self, PyObject *args) {
    int op;
    if (!PyArg_ParseTuple(args, "i", &op) || !sw_py_problem_ready(self) || !sw_py_check_op(self, op)) {
        return NULL;
    }
    const sw_op *o = &self->p->ops[op];
    npy_intp dims[2] = {o->ncfg, 2};
    PyArrayObject *red = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_INT32);
    if (!red) {
        return NULL;
    }
    int32_t *pr = PyArray_DATA(red);
    for (int c = 0; c < o->ncfg; c++) {
        pr[2 * c] = o->cfgs[c].rvar;
        pr[2 * c + 1] = o->cfgs[c].rdeg;
    }
    return (PyObject *)red;
}

static PyObject *Problem_configs(ProblemObject *self, PyObject *args) {
    int op;
    if (!PyArg_ParseTuple(args, "i", &op) || !sw_py_problem_ready(self) || !sw_py_check_op(self, op)) {
        return NULL;
    }
    const sw_op *o = &self->p->ops[op];
    int maxk = 1;
    for (int c = 0; c < o->ncfg; c++) {
        maxk = o->cfgs[c].nworkers > maxk ? o->cfgs[c].nworkers : maxk;
    }
    npy_intp dd[2] = {o->ncfg, o->out_rank}, dv[2] = {o->ncfg, maxk};
    PyArrayObject *deg = (PyArrayObject *)PyArray_SimpleNew(2, dd, NPY_INT32);
    PyArrayObject *dev = (PyArrayObject *)PyArray_SimpleNew(2, dv, NPY_INT32);
    if (!deg || !dev) {
        Py_XDECREF(deg);
        Py_XDECREF(dev);
        return NULL;
    }
    int32_t *pd = PyArray_DATA(deg), *pv = PyArray_DATA(dev);
    for (int c = 0; c < o->ncfg; c++) {
        for (int d = 0; d < o->out_rank; d++) {
            pd[(size_t)c * o->out_rank + d] = o->cfgs[c].deg[d];
        }
        for (int w = 0; w < maxk; w++) {
            pv[(size_t)c * maxk + w] = w < o->cfgs[c].nworkers ? self->p->dev_pool[o->cfgs[c].dev_offset + w] : -1;
        }
    }
    return Py_BuildValue("(NN)", deg, dev);
}

static PyObject *Problem_build_tables(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"with_bytes", "bounds", NULL};
    int with_bytes = 0, bounds = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pp", kwlist, &with_bytes, &bounds) ||
        !sw_py_problem_ready(self)) {
        return NULL;
    }
    if (bounds && with_bytes) {
        PyErr_SetString(PyExc_ValueError, "bound tables have no bytes");
        return NULL;
    }
    self->p->bound_tables = bounds;
    for (int i = 0; i < self->p->nops; i++) {
        if (self->p->ops[i].ncfg < 1) {
            PyErr_Format(PyExc_ValueError, "op %d has no configurations: call enumerate or set_configs first", i);
            return NULL;
        }
    }
    sw_status s;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    s = sw_problem_build_tables(self->p, with_bytes);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    Py_RETURN_NONE;
}

int sw_py_tables_ready(ProblemObject *self) {
    if (!sw_py_problem_ready(self)) {
        return 0;
    }
    if (!self->p->tables_built) {
        PyErr_SetString(PyExc_RuntimeError, "cost tables are not built: call build_tables first");
        return 0;
    }
    return 1;
}

PyObject *sw_py_copy_doubles(const double *src, int ndim, npy_intp *dims) {
    PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(ndim, dims, NPY_FLOAT64);
    if (a) {
        memcpy(PyArray_DATA(a), src, (size_t)PyArray_NBYTES(a));
    }
    return (PyObject *)a;
}

static PyObject *Problem_node_costs(ProblemObject *self, PyObject *args) {
    int op;
    if (!PyArg_ParseTuple(args, "i", &op) || !sw_py_tables_ready(self) || !sw_py_check_op(self, op)) {
        return NULL;
    }
    npy_intp n = self->p->ops[op].ncfg;
    return Py_BuildValue("(NNN)", sw_py_copy_doubles(self->p->tc[op], 1, &n), sw_py_copy_doubles(self->p->ts[op], 1, &n),
                         sw_py_copy_doubles(self->p->sync_bytes[op], 1, &n));
}

/* Read a sequence of n ints into out; a clear TypeError/ValueError otherwise. */
static int int64_sequence(PyObject *o, int n, int64_t *out, const char *what) {
    PyObject *seq = PySequence_Fast(o, "expected a sequence of ints");
    if (!seq) {
        return 0;
    }
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "%s needs %d values (one per iteration variable), got %zd", what, n,
                     PySequence_Fast_GET_SIZE(seq));
        Py_DECREF(seq);
        return 0;
    }
    for (int k = 0; k < n; k++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, k));
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return 0;
        }
        out[k] = (int64_t)v;
    }
    Py_DECREF(seq);
    return 1;
}

/* iteration_region(op, slot, lo, hi) -> (box, exact): the region of input `slot` that the
 * iteration points [lo, hi) (every variable: output dims then reductions) read, as a tuple
 * of (lo, hi) per input dimension, and per dimension whether every index of it is read. */
static PyObject *Problem_iteration_region(ProblemObject *self, PyObject *args) {
    int op, slot;
    PyObject *lo_o, *hi_o;
    if (!PyArg_ParseTuple(args, "iiOO", &op, &slot, &lo_o, &hi_o) || !sw_py_problem_ready(self) || !sw_py_check_op(self, op)) {
        return NULL;
    }
    const sw_op *o = &self->p->ops[op];
    if (slot < 0 || slot >= o->ninputs) {
        PyErr_Format(PyExc_IndexError, "input slot %d out of range 0..%d", slot, o->ninputs - 1);
        return NULL;
    }
    int64_t lo[SW_MAX_VARS], hi[SW_MAX_VARS];
    self->busy = 1;  /* see CONVERTING: o points into self->p */
    int converted = int64_sequence(lo_o, o->nvars, lo, "lo") && int64_sequence(hi_o, o->nvars, hi, "hi");
    self->busy = 0;
    if (!converted) {
        return NULL;
    }
    for (int v = 0; v < o->nvars; v++) {
        if (lo[v] < 0 || hi[v] > o->extent[v] || lo[v] >= hi[v]) {
            PyErr_Format(PyExc_ValueError, "variable %d: [%lld, %lld) is not a non-empty range inside [0, %lld)", v,
                         (long long)lo[v], (long long)hi[v], (long long)o->extent[v]);
            return NULL;
        }
    }
    sw_box region;
    int exact[SW_MAX_RANK];
    sw_iteration_region(o, slot, lo, hi, &region, exact);
    PyObject *box = PyTuple_New(region.rank), *flags = PyTuple_New(region.rank);
    if (!box || !flags) {
        Py_XDECREF(box);
        Py_XDECREF(flags);
        return NULL;
    }
    for (int d = 0; d < region.rank; d++) {
        PyTuple_SET_ITEM(box, d, Py_BuildValue("(LL)", (long long)region.lo[d], (long long)region.hi[d]));
        PyTuple_SET_ITEM(flags, d, PyBool_FromLong(exact[d]));
        if (!PyTuple_GET_ITEM(box, d)) {
            Py_DECREF(box);
            Py_DECREF(flags);
            return NULL;
        }
    }
    return Py_BuildValue("(NN)", box, flags);
}

/* Replace t_c of every configuration of one op (a measured profile); node costs follow. */
static PyObject *Problem_set_compute_times(ProblemObject *self, PyObject *args) {
    int op;
    PyObject *tc_o;
    if (!PyArg_ParseTuple(args, "iO", &op, &tc_o) || !sw_py_tables_ready(self) || !sw_py_check_op(self, op)) {
        return NULL;
    }
    self->busy = 1;  /* see CONVERTING */
    PyArrayObject *tc = sw_py_array(tc_o, NPY_FLOAT64, 1, "compute times");
    self->busy = 0;
    if (!tc) {
        return NULL;
    }
    int n = self->p->ops[op].ncfg;
    const double *v = PyArray_DATA(tc);
    if (PyArray_DIM(tc, 0) != n) {
        Py_DECREF(tc);
        PyErr_Format(PyExc_ValueError, "op %d has %d configurations, got %zd compute times", op, n,
                     (Py_ssize_t)PyArray_DIM(tc, 0));
        return NULL;
    }
    for (int k = 0; k < n; k++) {
        if (!(v[k] >= 0) || !isfinite(v[k])) {
            Py_DECREF(tc);
            PyErr_Format(PyExc_ValueError, "compute time %g of op %d must be finite and non-negative", v[k], op);
            return NULL;
        }
    }
    for (int k = 0; k < n; k++) {
        self->p->tc[op][k] = v[k];
        self->p->tables.node_cost[op][k] = v[k] + self->p->ts[op][k];
    }
    Py_DECREF(tc);
    Py_RETURN_NONE;
}

static PyObject *Problem_edges(ProblemObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!sw_py_tables_ready(self)) {
        return NULL;
    }
    const sw_tables *t = &self->p->tables;
    PyObject *list = PyList_New(t->nedges);
    for (int e = 0; list && e < t->nedges; e++) {
        PyObject *item = Py_BuildValue("(iii)", t->edges[e].src, t->edges[e].dst, self->p->edge_consumer_slot[e]);
        if (!item) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, e, item);
    }
    return list;
}

static PyObject *Problem_edge_table(ProblemObject *self, PyObject *args) {
    int e;
    if (!PyArg_ParseTuple(args, "i", &e) || !sw_py_tables_ready(self)) {
        return NULL;
    }
    const sw_tables *t = &self->p->tables;
    if (e < 0 || e >= t->nedges) {
        PyErr_Format(PyExc_IndexError, "edge index %d out of range", e);
        return NULL;
    }
    npy_intp dims[2] = {t->ncfg[t->edges[e].src], t->ncfg[t->edges[e].dst]};
    PyObject *time = sw_py_copy_doubles(t->edges[e].time, 2, dims);
    if (!time) {
        return NULL;
    }
    PyObject *bytes = t->edges[e].bytes ? sw_py_copy_doubles(t->edges[e].bytes, 2, dims) : Py_NewRef(Py_None);
    return Py_BuildValue("(NN)", time, bytes);
}

/* (done, total) of the build or search running on another thread; safe to call while busy. */
static PyObject *Problem_progress(ProblemObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!self->p) {
        return Py_BuildValue("(ll)", 0L, 0L);
    }
    return Py_BuildValue("(ll)", atomic_load(&self->p->progress_done), atomic_load(&self->p->progress_total));
}

static PyObject *Problem_get_nops(ProblemObject *self, void *Py_UNUSED(closure)) {
    if (!sw_py_problem_ready(self)) {
        return NULL;
    }
    return PyLong_FromLong(self->p->nops);
}

static PyObject *Problem_get_node_size(ProblemObject *self, void *Py_UNUSED(closure)) {
    if (!sw_py_problem_ready(self)) {
        return NULL;
    }
    return PyLong_FromLong(self->p->node_size);
}

static PyObject *Problem_get_ndev(ProblemObject *self, void *Py_UNUSED(closure)) {
    if (!sw_py_problem_ready(self)) {
        return NULL;
    }
    return PyLong_FromLong(self->p->ndev);
}

static PyMethodDef Problem_methods[] = {
    {"set_options", (PyCFunction)(void (*)(void))Problem_set_options, METH_VARARGS | METH_KEYWORDS,
     "set_options(sync_model=0, bytes_per_element=4.0, backward_factor=3.0, threads=1, reduction_splits=False)"},
    {"set_optimizer_state", (PyCFunction)Problem_set_optimizer_state, METH_O,
     "set_optimizer_state(n): optimizer state buffers per parameter slice in the lowering (1 SGD, 2 Adam)"},
    {"enumerate", (PyCFunction)(void (*)(void))Problem_enumerate, METH_VARARGS | METH_KEYWORDS,
     "enumerate(counts, first_block_only=False): configurations of every op for these worker counts"},
    {"enumerate_sets", (PyCFunction)Problem_enumerate_sets, METH_O,
     "enumerate_sets(sets): configurations of every op on these device sets (each a list of device indices)"},
    {"set_configs", (PyCFunction)Problem_set_configs, METH_VARARGS,
     "set_configs(op, degrees (n, 5) int32, devices (n, maxk) int32 padded with -1, reductions (n, 2) or None)"},
    {"configs", (PyCFunction)Problem_configs, METH_VARARGS, "configs(op) -> (degrees, devices)"},
    {"reductions", (PyCFunction)Problem_reductions, METH_VARARGS,
     "reductions(op) -> (n, 2): (split reduction variable or -1, degree) per configuration"},
    {"build_tables", (PyCFunction)(void (*)(void))Problem_build_tables, METH_VARARGS | METH_KEYWORDS,
     "build_tables(with_bytes=False, bounds=False): t_c, t_s per configuration and t_x per edge (bounds: lower "
     "bounds of t_x valid for any devices), GIL released"},
    {"node_costs", (PyCFunction)Problem_node_costs, METH_VARARGS, "node_costs(op) -> (t_c, t_s, sync bytes)"},
    {"worker_regions", (PyCFunction)sw_py_problem_worker_regions, METH_VARARGS,
     "worker_regions(op, config, slot, per_worker=False) -> (lo, hi, used) of every worker's region"},
    {"iteration_region", (PyCFunction)Problem_iteration_region, METH_VARARGS,
     "iteration_region(op, slot, lo, hi) -> (box, exact): input region read by the iteration box [lo, hi)"},
    {"progress", (PyCFunction)Problem_progress, METH_NOARGS,
     "progress() -> (done, total) of the table build or search running on another thread"},
    {"set_compute_times", (PyCFunction)Problem_set_compute_times, METH_VARARGS,
     "set_compute_times(op, t_c): replace the modelled compute times of one op (measured profile)"},
    {"edges", (PyCFunction)Problem_edges, METH_NOARGS, "edges() -> [(producer, consumer, slot)]"},
    {"edge_table", (PyCFunction)Problem_edge_table, METH_VARARGS, "edge_table(e) -> (t_x, bytes or None)"},
    {"least_transfer", (PyCFunction)sw_py_problem_least_transfer, METH_VARARGS,
     "least_transfer(e, ci, cj) -> least t_x between the two configurations over aligned placements"},
    {"search", (PyCFunction)(void (*)(void))sw_py_problem_search, METH_VARARGS | METH_KEYWORDS,
     "search(algorithm='elimination', max_evaluations=1e8) -> (choice, cost, stats)"},
    {"worker_times", (PyCFunction)sw_py_problem_worker_times, METH_VARARGS,
     "worker_times(op, degrees, devices) -> roofline seconds of one forward pass of every worker"},
    {"memory_plan", (PyCFunction)(void (*)(void))sw_py_problem_memory_plan, METH_VARARGS | METH_KEYWORDS,
     "memory_plan(kinds, degrees, dev_ptr, devices, align=ARENA_ALIGN, check=False, streams=None) -> dict: one "
     "arena per device"},
    {"memory_tables", (PyCFunction)sw_py_problem_memory_tables, METH_O,
     "memory_tables(kinds) -> (node, edges): per configuration and device, the bytes live when the backward pass "
     "starts (csrc/cost_memory.c)"},
    {"check_memory_plan", (PyCFunction)sw_py_problem_check_memory_plan, METH_VARARGS,
     "check_memory_plan(kinds, degrees, dev_ptr, devices, offset, arena, reuse_from, reuse_to, align, "
     "streams=None): ValueError unless the offsets are safe"},
    {"task_order", (PyCFunction)(void (*)(void))sw_py_problem_task_order, METH_VARARGS | METH_KEYWORDS,
     "task_order(kinds, degrees, dev_ptr, devices, streams=None, iterations=1, check=False) -> {ptr, ids}: "
     "what each task runs after (of iterations back to back)"},
    {"lower", (PyCFunction)sw_py_problem_lower, METH_VARARGS,
     "lower(kinds, degrees, dev_ptr, devices) -> dict of task and buffer arrays (one iteration of a plan)"},
    {"simulate_plan", (PyCFunction)(void (*)(void))sw_py_problem_simulate_plan, METH_VARARGS | METH_KEYWORDS,
     "simulate_plan(kinds, degrees, dev_ptr, devices, route_ptr, route_res, nres, cores=0, ..., bound=inf,\n"
     "              brief=False) -> dict\n"
     "Lower, time and replay one iteration of a plan (GIL released).  When the graph's lower bound\n"
     "reaches `bound` the replay is skipped (bounded=True, iteration_time = the bound); `brief`\n"
     "returns only iteration_time, ntasks and bounded."},
    {"swap_plan", (PyCFunction)(void (*)(void))sw_py_problem_swap_plan, METH_VARARGS | METH_KEYWORDS,
     "swap_plan(kinds, degrees, dev_ptr, devices, start, end, budget, pinned, host_bw, max_rounds=0) -> dict\n"
     "Which feature maps to offload and where their swap tasks go (csrc/swap_plan.c, swap_fit.c)."},
    {"schedule", (PyCFunction)(void (*)(void))sw_py_problem_schedule, METH_VARARGS | METH_KEYWORDS,
     "schedule(kinds, degrees, dev_ptr, devices, policy, alpha=-1, beta=-1, split=None) -> dict\n"
     "Lower and time one iteration of a plan, then its priorities and streams (csrc/schedule.c)."},
    {"layer_paths", (PyCFunction)sw_py_problem_layer_paths, METH_VARARGS,
     "layer_paths(op_da) -> dict: layer blocks and paths for these dA seconds per op"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Problem_getset[] = {
    {"nops", (getter)Problem_get_nops, NULL, "number of ops", NULL},
    {"ndev", (getter)Problem_get_ndev, NULL, "number of devices", NULL},
    {"node_size", (getter)Problem_get_node_size, NULL,
     "devices per node when the machine is uniform nodes (every pair linked at one bandwidth inside a node and "
     "one between nodes), else 0", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Problem_slots[] = {
    {Py_tp_doc, "Problem(blob, flops, dev_flops, dev_membw, bandwidth): a graph on a device graph"},
    {Py_tp_init, Problem_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, Problem_dealloc},
    {Py_tp_methods, Problem_methods},
    {Py_tp_getset, Problem_getset},
    {0, NULL},
};

static PyType_Spec Problem_spec = {
    .name = "shardwise._core.Problem",
    .basicsize = sizeof(ProblemObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Problem_slots,
};

/* ------------------------------------------------------------------ module */
static int module_exec(PyObject *m) {
    import_array1(-1);
    PyObject *type = PyType_FromModuleAndSpec(m, &Problem_spec, NULL);
    if (!type) {
        return -1;
    }
    int rc = PyModule_AddObjectRef(m, "Problem", type);
    Py_DECREF(type);   /* the module keeps it */
    if (rc < 0) {
        return -1;
    }
    if (sw_py_register_conv_kernels(m) < 0 || sw_py_register_misc_kernels(m) < 0 ||
        sw_py_register_activation_kernels(m) < 0 || sw_py_register_optim_kernels(m) < 0 ||
        sw_py_register_simulate(m) < 0 || sw_py_register_sim_tasks(m) < 0 || sw_py_register_memplan(m) < 0 || sw_py_register_runtime(m, (PyTypeObject *)type) < 0 ||
        sw_py_register_search(m) < 0 || sw_py_register_memory_tables(m) < 0) {
        return -1;
    }
    if (sw_py_register_schedule(m) < 0 || sw_py_register_gpu_plan(m) < 0 || sw_py_register_swap(m) < 0) {
        return -1;
    }
    sw_blas_single_thread();
    if (PyModule_AddIntConstant(m, "MAX_RANK", SW_MAX_RANK) < 0 ||
        PyModule_AddIntConstant(m, "MAX_DEVICES", SW_MAX_DEVICES) < 0 ||
        PyModule_AddIntConstant(m, "ARENA_ALIGN", SW_ARENA_ALIGN) < 0 ||
        PyModule_AddIntConstant(m, "SYNC_PARAMETER_SERVER", SW_SYNC_PARAMETER_SERVER) < 0 ||
        PyModule_AddIntConstant(m, "SYNC_RING", SW_SYNC_RING) < 0) {
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "shardwise._core",
    .m_doc = "C core of shardwise: cost tables and the elimination search.",
    .m_size = 0,
    .m_methods = NULL,   /* module functions come from the files' register functions */
    .m_slots = module_slots,
};

PyMODINIT_FUNC PyInit__core(void) { return PyModuleDef_Init(&module_def); }
