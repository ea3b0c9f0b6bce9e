/* encode_py.c -- a graph's op descriptions in the words the C core decodes (core/problem.c).
 *
 * encode_ops(descs, producers) -> (blob, flops): blob is int64, len(descs) and then, per op,
 *
 *     nvars, out_rank, extents[nvars], granules[out_rank], additive[nvars - out_rank],
 *     ninputs, then per input:
 *         role (ROLE_BIAS for a bias), producer (-1 but for data inputs), rank, shape[rank],
 *         per dimension: coefs[nvars], vdivs[nvars] (1s when empty), offset, div, mod,
 *         has_window, then (lo, hi) per output dimension when it has one
 *
 * where the k-th data input's producer is producers[op][k] (-1 past the ones given) and the
 * granules are the description's split_granules() where an index expression has a divisor or a
 * modulus or an output dimension is unsplittable, else 1s; flops is float64 (len(descs), 2):
 * flops_per_point and flops_per_output.  The descriptions are Python objects (ops/desc.py: an
 * OpDesc of InputDescs of IndexExprs); read here attribute by attribute, a search's graph
 * encodes in a fraction of the time the same loop took in Python in a fresh process
 * (Inception-v3's 315 ops, 40,000 words: ~4.5 ms there).
 */
#include "problem_py.h"  /* CPython and NumPy C API */

#define ROLE_DATA 0   /* ops/desc.py: DATA */
#define ROLE_BIAS 3   /* ops/desc.py: ROLE_BIAS, a WEIGHT input with bias=True */

typedef struct {
    int64_t *v;
    size_t len, cap;
} words;

static int push(words *w, int64_t x) {
    if (w->len == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 4096;
        int64_t *n = PyMem_Realloc(w->v, sizeof *n * cap);
        if (!n) {
            PyErr_NoMemory();
            return 0;
        }
        w->v = n;
        w->cap = cap;
    }
    w->v[w->len++] = x;
    return 1;
}

/* The interned attribute names, made once per call. */
typedef struct {
    PyObject *extents, *out_rank, *inputs, *additive, *unsplittable, *split_granules, *flops_per_point,
        *flops_per_output, *role, *bias, *shape, *exprs, *window, *coefs, *vdivs, *offset, *div, *mod;
} names;

static void names_free(names *n) {
    PyObject **all = (PyObject **)n;
    for (size_t q = 0; q < sizeof *n / sizeof(PyObject *); q++) {
        Py_XDECREF(all[q]);
    }
}

static int names_make(names *n) {
    static const char *text[] = {"extents", "out_rank", "inputs", "additive", "unsplittable", "split_granules",
                                 "flops_per_point", "flops_per_output", "role", "bias", "shape", "exprs",
                                 "window", "coefs", "vdivs", "offset", "div", "mod"};
    PyObject **all = (PyObject **)n;
    for (size_t q = 0; q < sizeof *n / sizeof(PyObject *); q++) {
        all[q] = PyUnicode_InternFromString(text[q]);
        if (!all[q]) {
            return 0;
        }
    }
    return 1;
}

/* obj's attribute `name` as an int64; 0 with an exception. */
static int attr_int(PyObject *obj, PyObject *name, int64_t *out) {
    PyObject *a = PyObject_GetAttr(obj, name);
    if (!a) {
        return 0;
    }
    long long v = PyLong_AsLongLong(a);
    Py_DECREF(a);
    if (v == -1 && PyErr_Occurred()) {
        return 0;
    }
    *out = v;
    return 1;
}

/* obj's attribute `name` as a tuple or list (PySequence_Fast, a new reference); NULL with an exception. */
static PyObject *attr_seq(PyObject *obj, PyObject *name, const char *what) {
    PyObject *a = PyObject_GetAttr(obj, name);
    if (!a) {
        return NULL;
    }
    PyObject *s = PySequence_Fast(a, what);
    Py_DECREF(a);
    return s;
}

/* Every int of sequence s pushed (n of them; n < 0: as many as s holds, *n set); 0 with an exception. */
static int push_ints(words *w, PyObject *s, Py_ssize_t *n, const char *what) {
    if (PySequence_Fast_GET_SIZE(s) != *n && *n >= 0) {
        PyErr_Format(PyExc_ValueError, "%s: %zd values, expected %zd", what, PySequence_Fast_GET_SIZE(s), *n);
        return 0;
    }
    *n = PySequence_Fast_GET_SIZE(s);
    PyObject **items = PySequence_Fast_ITEMS(s);
    for (Py_ssize_t q = 0; q < *n; q++) {
        long long v = PyLong_AsLongLong(items[q]);
        if ((v == -1 && PyErr_Occurred()) || !push(w, v)) {
            return 0;
        }
    }
    return 1;
}

/* The words of one index expression over nvars variables; *periodic |= a divisor or modulus. */
static int encode_expr(words *w, const names *nm, PyObject *e, Py_ssize_t nvars, int *periodic) {
    PyObject *coefs = attr_seq(e, nm->coefs, "IndexExpr.coefs must be a sequence");
    PyObject *vdivs = coefs ? attr_seq(e, nm->vdivs, "IndexExpr.vdivs must be a sequence") : NULL;
    int ok = vdivs != NULL;
    Py_ssize_t n = nvars;
    ok = ok && push_ints(w, coefs, &n, "index expression coefficients");
    if (ok && PySequence_Fast_GET_SIZE(vdivs) == 0) {
        for (Py_ssize_t v = 0; ok && v < nvars; v++) {
            ok = push(w, 1);
        }
    } else if (ok) {
        n = nvars;
        ok = push_ints(w, vdivs, &n, "index expression variable divisors");
    }
    Py_XDECREF(coefs);
    Py_XDECREF(vdivs);
    int64_t offset = 0, div = 1, mod = 0;
    ok = ok && attr_int(e, nm->offset, &offset) && attr_int(e, nm->div, &div) && attr_int(e, nm->mod, &mod);
    *periodic |= ok && (div != 1 || mod != 0);
    return ok && push(w, offset) && push(w, div) && push(w, mod);
}

/* One input's words; its producer word's position into *producer_at (data inputs), else -1. */
static int encode_input(words *w, const names *nm, PyObject *in, Py_ssize_t nvars, int *periodic,
                        Py_ssize_t *producer_at) {
    int64_t role = 0;
    if (!attr_int(in, nm->role, &role)) {
        return 0;
    }
    PyObject *bias = PyObject_GetAttr(in, nm->bias);
    int is_bias = bias ? PyObject_IsTrue(bias) : -1;
    Py_XDECREF(bias);
    if (is_bias < 0) {
        return 0;
    }
    *producer_at = role == ROLE_DATA ? (Py_ssize_t)w->len + 1 : -1;
    PyObject *shape = attr_seq(in, nm->shape, "InputDesc.shape must be a sequence");
    if (!shape || !push(w, is_bias ? ROLE_BIAS : role) || !push(w, -1) ||
        !push(w, PySequence_Fast_GET_SIZE(shape))) {
        Py_XDECREF(shape);
        return 0;
    }
    Py_ssize_t rank = -1;
    int ok = push_ints(w, shape, &rank, "input shape");
    Py_DECREF(shape);
    PyObject *exprs = ok ? attr_seq(in, nm->exprs, "InputDesc.exprs must be a sequence") : NULL;
    ok = exprs != NULL;
    for (Py_ssize_t d = 0; ok && d < PySequence_Fast_GET_SIZE(exprs); d++) {
        ok = encode_expr(w, nm, PySequence_Fast_GET_ITEM(exprs, d), nvars, periodic);
    }
    Py_XDECREF(exprs);
    PyObject *window = ok ? PyObject_GetAttr(in, nm->window) : NULL;
    ok = window != NULL;
    if (ok && window == Py_None) {
        ok = push(w, 0);
    } else if (ok) {
        PyObject *ranges = PySequence_Fast(window, "InputDesc.window must be a sequence of (lo, hi)");
        ok = ranges && push(w, 1);
        for (Py_ssize_t d = 0; ok && d < PySequence_Fast_GET_SIZE(ranges); d++) {
            PyObject *pair = PySequence_Fast(PySequence_Fast_GET_ITEM(ranges, d), "a window range must be (lo, hi)");
            Py_ssize_t two = 2;
            ok = pair && push_ints(w, pair, &two, "window range");
            Py_XDECREF(pair);
        }
        Py_XDECREF(ranges);
    }
    Py_XDECREF(window);
    return ok;
}

/* One op's words, its data inputs' producers from the sequence `producers`. */
static int encode_op(words *w, const names *nm, PyObject *desc, PyObject *producers, double *flops) {
    size_t start = w->len;
    PyObject *extents = attr_seq(desc, nm->extents, "OpDesc.extents must be a sequence");
    int64_t out_rank = 0;
    if (!extents || !attr_int(desc, nm->out_rank, &out_rank)) {
        Py_XDECREF(extents);
        return 0;
    }
    Py_ssize_t nvars = PySequence_Fast_GET_SIZE(extents), n = nvars;
    int ok = push(w, nvars) && push(w, out_rank) && push_ints(w, extents, &n, "extents");
    Py_DECREF(extents);
    if (!ok) {
        return 0;
    }
    if (out_rank < 1 || out_rank > nvars) {
        PyErr_Format(PyExc_ValueError, "out_rank %lld outside 1..%zd", (long long)out_rank, nvars);
        return 0;
    }
    size_t granules_at = w->len;
    for (int64_t d = 0; ok && d < out_rank; d++) {
        ok = push(w, 1);
    }
    PyObject *additive = ok ? attr_seq(desc, nm->additive, "OpDesc.additive must be a sequence") : NULL;
    ok = additive != NULL;
    size_t additive_at = w->len;
    for (Py_ssize_t v = out_rank; ok && v < nvars; v++) {
        ok = push(w, 0);
    }
    for (Py_ssize_t q = 0; ok && q < PySequence_Fast_GET_SIZE(additive); q++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(additive, q));
        ok = !(v == -1 && PyErr_Occurred());
        if (ok && v >= out_rank && v < nvars) {   /* (others are refused by the core's validation) */
            w->v[additive_at + (size_t)(v - out_rank)] = 1;
        }
    }
    Py_XDECREF(additive);
    PyObject *inputs = ok ? attr_seq(desc, nm->inputs, "OpDesc.inputs must be a sequence") : NULL;
    ok = inputs && push(w, PySequence_Fast_GET_SIZE(inputs));
    int periodic = 0;
    Py_ssize_t data = 0, nproducers = PySequence_Fast_GET_SIZE(producers);
    for (Py_ssize_t k = 0; ok && k < PySequence_Fast_GET_SIZE(inputs); k++) {
        Py_ssize_t at = -1;
        ok = encode_input(w, nm, PySequence_Fast_GET_ITEM(inputs, k), nvars, &periodic, &at);   /* (the core checks a window's rank) */
        if (ok && at >= 0 && data < nproducers) {
            long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(producers, data));
            ok = !(v == -1 && PyErr_Occurred());
            w->v[at] = v;
        }
        data += at >= 0;
    }
    Py_XDECREF(inputs);
    PyObject *unsplittable = ok ? attr_seq(desc, nm->unsplittable, "OpDesc.unsplittable must be a sequence") : NULL;
    ok = unsplittable != NULL;
    if (ok && (periodic || PySequence_Fast_GET_SIZE(unsplittable) > 0)) {   /* the description's own granules */
        PyObject *g = PyObject_CallMethodNoArgs(desc, nm->split_granules);
        PyObject *gs = g ? PySequence_Fast(g, "split_granules() must return a sequence") : NULL;
        Py_ssize_t rank = out_rank;
        words at = {w->v + granules_at, 0, (size_t)out_rank};   /* written in place */
        ok = gs && push_ints(&at, gs, &rank, "split granules");
        Py_XDECREF(gs);
        Py_XDECREF(g);
    }
    Py_XDECREF(unsplittable);
    for (int q = 0; ok && q < 2; q++) {
        PyObject *f = PyObject_GetAttr(desc, q == 0 ? nm->flops_per_point : nm->flops_per_output);
        flops[q] = f ? PyFloat_AsDouble(f) : -1.0;
        ok = f && !(flops[q] == -1.0 && PyErr_Occurred());
        Py_XDECREF(f);
    }
    if (!ok) {
        w->len = start;
    }
    return ok;
}

/* encode_ops(descs, producers) -> (blob int64, flops float64 (n, 2)); the header comment. */
static PyObject *encode_ops(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *descs_o, *producers_o;
    if (!PyArg_ParseTuple(args, "OO", &descs_o, &producers_o)) {
        return NULL;
    }
    PyObject *descs = PySequence_Fast(descs_o, "descs must be a sequence of OpDesc");
    PyObject *producers = descs ? PySequence_Fast(producers_o, "producers must be a sequence of sequences") : NULL;
    if (!producers) {
        Py_XDECREF(descs);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(descs);
    PyObject *result = NULL;
    names nm = {0};
    words w = {0};
    npy_intp dims[2] = {n, 2};
    PyArrayObject *flops = NULL;
    if (PySequence_Fast_GET_SIZE(producers) != n) {
        PyErr_Format(PyExc_ValueError, "%zd descriptions but %zd producer lists", n,
                     PySequence_Fast_GET_SIZE(producers));
        goto done;
    }
    flops = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_FLOAT64);
    if (!flops || !names_make(&nm) || !push(&w, n)) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *from = PySequence_Fast(PySequence_Fast_GET_ITEM(producers, i), "an op's producers must be a sequence");
        int ok = from && encode_op(&w, &nm, PySequence_Fast_GET_ITEM(descs, i), from, (double *)PyArray_DATA(flops) + 2 * i);
        Py_XDECREF(from);
        if (!ok) {
            PyObject *type, *value, *trace;   /* the op's index in front of what went wrong */
            PyErr_Fetch(&type, &value, &trace);
            PyErr_NormalizeException(&type, &value, &trace);
            PyErr_Format(type ? type : PyExc_ValueError, "op %zd: %S", i, value ? value : Py_None);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(trace);
            goto done;
        }
    }
    npy_intp len = (npy_intp)w.len;
    PyObject *blob = PyArray_SimpleNew(1, &len, NPY_INT64);
    if (blob) {
        memcpy(PyArray_DATA((PyArrayObject *)blob), w.v, sizeof *w.v * w.len);
        result = Py_BuildValue("(NO)", blob, flops);
    }
done:
    Py_XDECREF(flops);
    PyMem_Free(w.v);
    names_free(&nm);
    Py_DECREF(descs);
    Py_DECREF(producers);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_ops", encode_ops, METH_VARARGS,
     "encode_ops(descs, producers) -> (blob, flops): op descriptions in the C core's words, each data "
     "input's producer from producers[op] (a sequence per op), and each op's (flops_per_point, "
     "flops_per_output)"},
    {NULL, NULL, 0, NULL},
};

int sw_py_register_encode(PyObject *module) {
    import_array1(-1);  /* this file's own NumPy API table */
    return PyModule_AddFunctions(module, methods);
}
