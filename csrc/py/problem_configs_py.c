/* problem_configs_py.c -- the Problem methods that set up a problem's options and configurations:
 * set_options, set_optimizer_state, enumerate, enumerate_sets, set_configs, and the read-back of
 * configurations (configs, degrees, workers, reductions) and of the region an iteration box reads (iteration_region,
 * iteration_regions for many boxes at once).
 *
 * Apart from module.c (the Problem type itself) because these are the planner's inputs: what the
 * search may choose from.  Methods that change self->p convert their arguments with self->busy
 * set (module.c's CONVERTING note).
 */
#include "problem_py.h"  /* ProblemObject; CPython and NumPy C API */

#include "pyerr.h"  /* sw_py_raise */

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

PyObject *sw_py_problem_set_options(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"sync_model", "bytes_per_element", "backward_factor", "threads", "reduction_splits",
                             "node_structure", NULL};
    int sync = 0, threads = 1, reduction_splits = 0, node_structure = 1;
    double bpe = 4.0, bf = 3.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|iddipp", kwlist, &sync, &bpe, &bf, &threads,
                                     &reduction_splits, &node_structure) ||
        !sw_py_problem_ready(self)) {
        return NULL;
    }
    self->version++;   /* task graphs lowered before would not match the problem's new options */
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
    if (sync != SW_SYNC_PARAMETER_SERVER && sync != SW_SYNC_RING && sync != SW_SYNC_ZERO) {
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
PyObject *sw_py_problem_set_optimizer_state(ProblemObject *self, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if ((n == -1 && PyErr_Occurred()) || !sw_py_problem_ready(self)) {
        return NULL;
    }
    if (n < 1 || n > SW_MAX_OPTIMIZER_STATE) {
        PyErr_Format(PyExc_ValueError, "optimizer state buffers per parameter must be 1..%d, got %ld",
                     SW_MAX_OPTIMIZER_STATE, n);
        return NULL;
    }
    if (self->p->optimizer_state != (int)n) {
        self->version++;   /* task graphs lowered before have another number of state buffers */
    }
    self->p->optimizer_state = (int)n;
    Py_RETURN_NONE;
}

/* set_precision(precision, dense_flops=None, op_dense=None): the number format (0 fp32, 1 bf16,
 * 2 fp16: core/precision.c) and, for the ops marked in op_dense (nops int8), the peak FLOP/s of
 * every device in it (ndev float64); set before building tables. */
PyObject *sw_py_problem_set_precision(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"precision", "dense_flops", "op_dense", NULL};
    int precision = 0;
    PyObject *df_o = Py_None, *od_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|OO", kwlist, &precision, &df_o, &od_o) ||
        !sw_py_problem_ready(self)) {
        return NULL;
    }
    if ((df_o == Py_None) != (od_o == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "dense_flops and op_dense come together");
        return NULL;
    }
    PyArrayObject *df = NULL, *od = NULL;
    if (df_o != Py_None) {
        df = sw_py_array(df_o, NPY_FLOAT64, 1, "dense_flops");
        od = df ? sw_py_array(od_o, NPY_INT8, 1, "op_dense") : NULL;
        if (!od) {
            Py_XDECREF(df);
            return NULL;
        }
        if (PyArray_DIM(df, 0) != self->p->ndev || PyArray_DIM(od, 0) != self->p->nops) {
            PyErr_Format(PyExc_ValueError, "dense_flops needs %d entries (one per device) and op_dense %d (one per "
                         "op)", self->p->ndev, self->p->nops);
            Py_DECREF(df);
            Py_DECREF(od);
            return NULL;
        }
    }
    sw_status s = sw_problem_set_precision(self->p, precision, df ? PyArray_DATA(df) : NULL,
                                           od ? PyArray_DATA(od) : NULL);
    Py_XDECREF(df);
    Py_XDECREF(od);
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    self->version++;   /* task graphs lowered before count other element sizes */
    Py_RETURN_NONE;
}

PyObject *sw_py_problem_enumerate(ProblemObject *self, PyObject *args, PyObject *kwds) {
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
PyObject *sw_py_problem_enumerate_sets(ProblemObject *self, PyObject *arg) {
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

PyObject *sw_py_problem_set_configs(ProblemObject *self, PyObject *args) {
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

/* copy_configs(op, source, rows): op's configurations become rows of op's in `source`, a Problem of
 * the same graph and devices (sw_problem_copy_configs). */
PyObject *sw_py_problem_copy_configs(ProblemObject *self, PyObject *args) {
    int op;
    PyObject *src_o, *rows_o;
    if (!PyArg_ParseTuple(args, "iOO", &op, &src_o, &rows_o) || !sw_py_problem_ready(self) ||
        !sw_py_check_op(self, op)) {
        return NULL;
    }
    if (!PyObject_TypeCheck(src_o, Py_TYPE(self))) {
        PyErr_Format(PyExc_TypeError, "copy_configs: source must be a Problem, got %s", Py_TYPE(src_o)->tp_name);
        return NULL;
    }
    ProblemObject *src = (ProblemObject *)src_o;
    if (!sw_py_problem_ready(src)) {
        return NULL;
    }
    if (src->p->nops != self->p->nops) {
        PyErr_Format(PyExc_ValueError, "copy_configs: the source has %d ops, this problem %d", src->p->nops,
                     self->p->nops);
        return NULL;
    }
    PyArrayObject *rows;
    npy_intp n;
    self->busy = 1;   /* see CONVERTING */
    int converted = sw_py_rows(src, rows_o, src->p->ops[op].ncfg, "rows", &rows, &n);
    self->busy = 0;
    if (!converted) {
        return NULL;
    }
    if (!rows || n > INT32_MAX) {
        Py_XDECREF(rows);
        PyErr_SetString(PyExc_ValueError, "copy_configs: rows must list the configurations to copy");
        return NULL;
    }
    sw_status s = sw_problem_copy_configs(self->p, op, src->p, (int)n, PyArray_DATA(rows));
    Py_DECREF(rows);
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    Py_RETURN_NONE;
}

/* reductions(op) -> (ncfg, 2) int32: (split reduction variable or -1, its degree) per configuration. */
PyObject *sw_py_problem_reductions(ProblemObject *self, PyObject *args) {
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

/* configs(op, rows=None) -> (degrees (n, out_rank), devices (n, maxk) padded with -1): every
 * configuration of op, or only `rows` (indices into its enumeration, in that order), maxk the most
 * workers among them.  Asking for rows keeps the copy to what is needed: the first-block
 * enumeration of 1,024 devices holds 10^5 configurations of up to 1,024 workers each. */
PyObject *sw_py_problem_configs(ProblemObject *self, PyObject *args) {
    int op;
    PyObject *rows_o = Py_None;
    if (!PyArg_ParseTuple(args, "i|O", &op, &rows_o) || !sw_py_problem_ready(self) || !sw_py_check_op(self, op)) {
        return NULL;
    }
    PyArrayObject *rows;
    npy_intp n;
    if (!sw_py_rows(self, rows_o, self->p->ops[op].ncfg, "rows", &rows, &n)) {
        return NULL;
    }
    const sw_op *o = &self->p->ops[op];
    const int64_t *pick = rows ? PyArray_DATA(rows) : NULL;
    int maxk = 1;
    for (npy_intp q = 0; q < n; q++) {
        const sw_config *c = &o->cfgs[pick ? pick[q] : q];
        maxk = c->nworkers > maxk ? c->nworkers : maxk;
    }
    npy_intp dd[2] = {n, o->out_rank}, dv[2] = {n, maxk};
    PyArrayObject *deg = (PyArrayObject *)PyArray_SimpleNew(2, dd, NPY_INT32);
    PyArrayObject *dev = (PyArrayObject *)PyArray_SimpleNew(2, dv, NPY_INT32);
    if (!deg || !dev) {
        Py_XDECREF(rows);
        Py_XDECREF(deg);
        Py_XDECREF(dev);
        return NULL;
    }
    int32_t *pd = PyArray_DATA(deg), *pv = PyArray_DATA(dev);
    for (npy_intp q = 0; q < n; q++) {
        const sw_config *c = &o->cfgs[pick ? pick[q] : q];
        for (int d = 0; d < o->out_rank; d++) {
            pd[(size_t)q * o->out_rank + d] = c->deg[d];
        }
        for (int w = 0; w < maxk; w++) {
            pv[(size_t)q * maxk + w] = w < c->nworkers ? self->p->dev_pool[c->dev_offset + w] : -1;
        }
    }
    Py_XDECREF(rows);
    return Py_BuildValue("(NN)", deg, dev);
}

/* chosen(choice) -> (degrees (nops, MAX_RANK), devices (nops, maxk), reductions (nops, 2),
 * counts (nops, 2)) int32: per op v, its configuration choice[v]'s degrees (out_rank of them,
 * then 0), devices (then -1), (split reduction variable or -1, its degree), and (its workers, the
 * op's configurations).  A plan's rows in one call: per op, configs() and reductions() took
 * ~2 ms of a search of Inception-v3 on 16 devices. */
PyArrayObject *sw_py_choice(const sw_problem *p, PyObject *arg) {
    PyArrayObject *choice = sw_py_array(arg, NPY_INT64, 1, "choice");
    if (!choice) {
        return NULL;
    }
    if (PyArray_DIM(choice, 0) != p->nops) {
        PyErr_Format(PyExc_ValueError, "choice needs one configuration per op (%d), got %zd", p->nops,
                     (Py_ssize_t)PyArray_DIM(choice, 0));
        Py_DECREF(choice);
        return NULL;
    }
    const int64_t *pick = PyArray_DATA(choice);
    for (int v = 0; v < p->nops; v++) {
        if (pick[v] < 0 || pick[v] >= p->ops[v].ncfg) {
            PyErr_Format(PyExc_IndexError, "op %d: configuration %lld out of range 0..%d", v, (long long)pick[v],
                         p->ops[v].ncfg - 1);
            Py_DECREF(choice);
            return NULL;
        }
    }
    return choice;
}

PyObject *sw_py_problem_chosen(ProblemObject *self, PyObject *arg) {
    if (!sw_py_problem_ready(self)) {
        return NULL;
    }
    const sw_problem *p = self->p;
    PyArrayObject *choice = sw_py_choice(p, arg);
    if (!choice) {
        return NULL;
    }
    const int64_t *pick = PyArray_DATA(choice);
    int maxk = 1;
    for (int v = 0; v < p->nops; v++) {
        int k = p->ops[v].cfgs[pick[v]].nworkers;
        maxk = k > maxk ? k : maxk;
    }
    npy_intp dd[2] = {p->nops, SW_MAX_RANK}, dv[2] = {p->nops, maxk}, d2[2] = {p->nops, 2};
    PyArrayObject *deg = (PyArrayObject *)PyArray_ZEROS(2, dd, NPY_INT32, 0);
    PyArrayObject *dev = (PyArrayObject *)PyArray_SimpleNew(2, dv, NPY_INT32);
    PyArrayObject *red = (PyArrayObject *)PyArray_SimpleNew(2, d2, NPY_INT32);
    PyArrayObject *count = (PyArrayObject *)PyArray_SimpleNew(2, d2, NPY_INT32);
    if (!deg || !dev || !red || !count) {
        Py_DECREF(choice);
        Py_XDECREF(deg);
        Py_XDECREF(dev);
        Py_XDECREF(red);
        Py_XDECREF(count);
        return NULL;
    }
    int32_t *pd = PyArray_DATA(deg), *pv = PyArray_DATA(dev), *pr = PyArray_DATA(red), *pc = PyArray_DATA(count);
    for (int v = 0; v < p->nops; v++) {
        const sw_op *o = &p->ops[v];
        const sw_config *c = &o->cfgs[pick[v]];
        for (int d = 0; d < o->out_rank; d++) {
            pd[(size_t)v * SW_MAX_RANK + d] = c->deg[d];
        }
        for (int w = 0; w < maxk; w++) {
            pv[(size_t)v * maxk + w] = w < c->nworkers ? p->dev_pool[c->dev_offset + w] : -1;
        }
        pr[2 * v] = c->rvar;
        pr[2 * v + 1] = c->rdeg;
        pc[2 * v] = c->nworkers;
        pc[2 * v + 1] = o->ncfg;
    }
    Py_DECREF(choice);
    return Py_BuildValue("(NNNN)", deg, dev, red, count);
}

/* degrees(op) -> (n, out_rank) int32: the partition of every configuration of op (configs()'s
 * degrees, without its devices). */
PyObject *sw_py_problem_degrees(ProblemObject *self, PyObject *args) {
    int op;
    if (!PyArg_ParseTuple(args, "i", &op) || !sw_py_problem_ready(self) || !sw_py_check_op(self, op)) {
        return NULL;
    }
    const sw_op *o = &self->p->ops[op];
    npy_intp dims[2] = {o->ncfg, o->out_rank};
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_INT32);
    if (!out) {
        return NULL;
    }
    int32_t *pd = PyArray_DATA(out);
    for (int c = 0; c < o->ncfg; c++) {
        for (int d = 0; d < o->out_rank; d++) {
            pd[(size_t)c * o->out_rank + d] = o->cfgs[c].deg[d];
        }
    }
    return (PyObject *)out;
}

/* workers(op) -> (n,) int32: the workers of every configuration of op (the devices configs()
 * lists, without copying them). */
PyObject *sw_py_problem_workers(ProblemObject *self, PyObject *args) {
    int op;
    if (!PyArg_ParseTuple(args, "i", &op) || !sw_py_problem_ready(self) || !sw_py_check_op(self, op)) {
        return NULL;
    }
    const sw_op *o = &self->p->ops[op];
    npy_intp n = o->ncfg;
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(1, &n, NPY_INT32);
    if (!out) {
        return NULL;
    }
    int32_t *pw = PyArray_DATA(out);
    for (int c = 0; c < o->ncfg; c++) {
        pw[c] = o->cfgs[c].nworkers;
    }
    return (PyObject *)out;
}

/* config_counts() -> (nops,) int64: every op's number of configurations (as enumerated). */
PyObject *sw_py_problem_config_counts(ProblemObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!sw_py_problem_ready(self)) {
        return NULL;
    }
    npy_intp n = self->p->nops;
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(1, &n, NPY_INT64);
    if (!out) {
        return NULL;
    }
    int64_t *count = PyArray_DATA(out);
    for (int i = 0; i < self->p->nops; i++) {
        count[i] = self->p->ops[i].ncfg;
    }
    return (PyObject *)out;
}

/* iteration_region(op, slot, lo, hi) -> (box, exact): the region of input `slot` that the
 * iteration points [lo, hi) (every variable: output dims then reductions) read, as a tuple
 * of (lo, hi) per input dimension, and per dimension whether every index of it is read. */
PyObject *sw_py_problem_iteration_region(ProblemObject *self, PyObject *args) {
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

/* iteration_regions(op, slot, lo, hi) -> (rlo, rhi, used): iteration_region for many boxes at once
 * (Tofu's model asks for every group of a partition): lo, hi (n, nvars) int64, one iteration box
 * per row; rlo, rhi (n, rank) int64 the region each reads, used (n,) bool whether it reads any
 * (sw_iteration_region's result: 0 outside a concat window or when clipping leaves nothing). */
PyObject *sw_py_problem_iteration_regions(ProblemObject *self, PyObject *args) {
    int op, slot;
    PyObject *lo_o, *hi_o;
    if (!PyArg_ParseTuple(args, "iiOO", &op, &slot, &lo_o, &hi_o) || !sw_py_problem_ready(self) ||
        !sw_py_check_op(self, op)) {
        return NULL;
    }
    const sw_op *o = &self->p->ops[op];
    if (slot < 0 || slot >= o->ninputs) {
        PyErr_Format(PyExc_IndexError, "input slot %d out of range 0..%d", slot, o->ninputs - 1);
        return NULL;
    }
    self->busy = 1;  /* see CONVERTING: o points into self->p */
    PyArrayObject *lo = sw_py_array(lo_o, NPY_INT64, 2, "lo");
    PyArrayObject *hi = lo ? sw_py_array(hi_o, NPY_INT64, 2, "hi") : NULL;
    self->busy = 0;
    PyArrayObject *rlo = NULL, *rhi = NULL, *used = NULL;
    if (!hi) {
        goto fail;
    }
    npy_intp n = PyArray_DIM(lo, 0);
    if (PyArray_DIM(lo, 1) != o->nvars || PyArray_DIM(hi, 0) != n || PyArray_DIM(hi, 1) != o->nvars) {
        PyErr_Format(PyExc_ValueError, "lo and hi must both be (n, %d): one value per iteration variable", o->nvars);
        goto fail;
    }
    const int64_t *pl = PyArray_DATA(lo), *ph = PyArray_DATA(hi);
    for (npy_intp i = 0; i < n; i++) {
        for (int v = 0; v < o->nvars; v++) {
            int64_t a = pl[i * o->nvars + v], b = ph[i * o->nvars + v];
            if (a < 0 || b > o->extent[v] || a >= b) {
                PyErr_Format(PyExc_ValueError, "box %zd, variable %d: [%lld, %lld) is not a non-empty range inside "
                             "[0, %lld)", (Py_ssize_t)i, v, (long long)a, (long long)b, (long long)o->extent[v]);
                goto fail;
            }
        }
    }
    int rank = o->inputs[slot].rank;
    npy_intp dims[2] = {n, rank};
    rlo = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_INT64);
    rhi = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_INT64);
    used = (PyArrayObject *)PyArray_SimpleNew(1, dims, NPY_BOOL);
    if (!rlo || !rhi || !used) {
        goto fail;
    }
    int64_t *ql = PyArray_DATA(rlo), *qh = PyArray_DATA(rhi);
    npy_bool *pu = PyArray_DATA(used);
    for (npy_intp i = 0; i < n; i++) {
        sw_box region;
        pu[i] = (npy_bool)(sw_iteration_region(o, slot, pl + i * o->nvars, ph + i * o->nvars, &region, NULL) != 0);
        for (int d = 0; d < rank; d++) {
            ql[i * rank + d] = region.lo[d];
            qh[i * rank + d] = region.hi[d];
        }
    }
    Py_DECREF(lo);
    Py_DECREF(hi);
    return Py_BuildValue("(NNN)", rlo, rhi, used);
fail:
    Py_XDECREF(lo);
    Py_XDECREF(hi);
    Py_XDECREF(rlo);
    Py_XDECREF(rhi);
    Py_XDECREF(used);
    return NULL;
}

int sw_py_register_problem_configs(PyObject *Py_UNUSED(module)) {
    import_array1(-1);  /* this file's own NumPy API table */
    return 0;
}
