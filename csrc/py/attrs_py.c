/* attrs_py.c -- op attributes by name: a Python dict per op read into its typed record
 * (csrc/exec/op_attrs.h), one reader per record kind (the op table's `attrs` column).
 *
 *   {"kind": "conv2d", "name": "conv1", "kernel": (3, 3), "stride": (1, 1), "padding": (1, 1),
 *    "dilation": (1, 1), "group_out_channels": 0, "relu": True}
 *
 * Every key of a record is required and no other key is accepted ("kind" and "name" aside),
 * so a misspelt or forgotten attribute is an error naming the op and the attribute, not a
 * silent default.  The values are then checked in C (sw_op_attrs_check), with the op's name
 * put in front of the message.
 */
#include "attrs_py.h"

#include <stdint.h>  /* int64_t, uint64_t */
#include <string.h>  /* strcmp */

#include "pyerr.h"  /* sw_py_raise */

/* The op being read, for messages: "op 3 'conv1' (conv2d)". */
typedef struct {
    int index;
    const char *name;
    const char *kind;
} who;

static int fail(const who *w, const char *key, const char *what) {
    PyErr_Format(PyExc_ValueError, "op %d '%s' (%s): attribute '%s' %s", w->index, w->name, w->kind, key, what);
    return -1;
}

static PyObject *need(PyObject *d, const who *w, const char *key) {
    PyObject *v = PyDict_GetItemString(d, key);   /* borrowed */
    if (!v) {
        fail(w, key, "is missing");
    }
    return v;
}

/* An integer in [lo, hi] (no float, no bool), or -1 without an exception. */
static int int_in(PyObject *v, int64_t lo, int64_t hi, int64_t *out) {
    if (PyFloat_Check(v) || PyBool_Check(v) || !PyIndex_Check(v)) {
        return -1;
    }
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    if (x < lo || x > hi) {
        return -1;
    }
    *out = x;
    return 0;
}

static int get_int(PyObject *d, const who *w, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    PyObject *v = need(d, w, key);
    if (!v) {
        return -1;
    }
    if (int_in(v, lo, hi, out) < 0) {
        PyErr_Format(PyExc_ValueError, "op %d '%s' (%s): attribute '%s' must be an integer in [%lld, %lld]",
                     w->index, w->name, w->kind, key, (long long)lo, (long long)hi);
        return -1;
    }
    return 0;
}

static int get_bool(PyObject *d, const who *w, const char *key, int8_t *out) {
    PyObject *v = need(d, w, key);
    if (!v) {
        return -1;
    }
    int t = PyObject_IsTrue(v);
    if (t < 0) {
        return -1;
    }
    *out = (int8_t)t;
    return 0;
}

static int get_float(PyObject *d, const who *w, const char *key, float *out) {
    PyObject *v = need(d, w, key);
    if (!v) {
        return -1;
    }
    double x = PyFloat_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return fail(w, key, "must be a number");
    }
    *out = (float)x;   /* rounded to float32 as the kernels use it */
    return 0;
}

static int get_double(PyObject *d, const who *w, const char *key, double *out) {
    PyObject *v = need(d, w, key);
    if (!v) {
        return -1;
    }
    double x = PyFloat_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return fail(w, key, "must be a number");
    }
    *out = x;
    return 0;
}

/* A pair of integers (rows, columns), each in [lo, hi]. */
static int get_pair(PyObject *d, const who *w, const char *key, int64_t lo, int64_t hi, int64_t *a, int64_t *b) {
    PyObject *v = need(d, w, key);
    if (!v) {
        return -1;
    }
    PyObject *t = PySequence_Check(v) ? PySequence_Tuple(v) : NULL;
    int ok = t && PyTuple_GET_SIZE(t) == 2 && int_in(PyTuple_GET_ITEM(t, 0), lo, hi, a) == 0 &&
             int_in(PyTuple_GET_ITEM(t, 1), lo, hi, b) == 0;
    Py_XDECREF(t);
    if (!ok) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "op %d '%s' (%s): attribute '%s' must be a pair of integers in [%lld, %lld]",
                     w->index, w->name, w->kind, key, (long long)lo, (long long)hi);
        return -1;
    }
    return 0;
}

/* Window values: kernels and strides from 1, paddings from 0, all below 2^24 (sw_window_check). */
#define WIN_MAX ((int64_t)1 << 24)

static int read_window(PyObject *d, const who *w, sw_window *win) {
    return get_pair(d, w, "kernel", 1, WIN_MAX, &win->kh, &win->kw) < 0 ||
                   get_pair(d, w, "stride", 1, WIN_MAX, &win->sh, &win->sw) < 0 ||
                   get_pair(d, w, "padding", 0, WIN_MAX, &win->ph, &win->pw) < 0
               ? -1
               : 0;
}

/* ------------------------------------------------------------------ one reader per record */
typedef int (*reader)(PyObject *d, const who *w, sw_op_attrs *a);

static const char *const KEYS_none[] = {NULL};
static int read_none(PyObject *d, const who *w, sw_op_attrs *a) {
    (void)d, (void)w, (void)a;
    return 0;
}

static const char *const KEYS_input[] = {"id_bound", NULL};
static int read_input(PyObject *d, const who *w, sw_op_attrs *a) {
    int64_t v;
    if (get_int(d, w, "id_bound", 0, SW_MAX_ID_BOUND, &v) < 0) {
        return -1;
    }
    a->input.id_bound = (int32_t)v;
    return 0;
}

static const char *const KEYS_conv2d[] = {"kernel", "stride", "padding", "dilation", "group_out_channels", "relu",
                                          NULL};
static int read_conv2d(PyObject *d, const who *w, sw_op_attrs *a) {
    int64_t g;
    if (read_window(d, w, &a->conv2d.win) < 0 ||
        get_pair(d, w, "dilation", 1, WIN_MAX, &a->conv2d.win.dh, &a->conv2d.win.dw) < 0 ||
        get_int(d, w, "group_out_channels", 0, (int64_t)1 << 36, &g) < 0 || get_bool(d, w, "relu", &a->conv2d.relu) < 0) {
        return -1;
    }
    a->conv2d.win.group_co = g;
    return 0;
}

static const char *const KEYS_pool2d[] = {"kernel", "stride", "padding", "max", NULL};
static int read_pool2d(PyObject *d, const who *w, sw_op_attrs *a) {
    return read_window(d, w, &a->pool2d.win) < 0 || get_bool(d, w, "max", &a->pool2d.max) < 0 ? -1 : 0;
}

static const char *const KEYS_linear[] = {"relu", NULL};
static int read_linear(PyObject *d, const who *w, sw_op_attrs *a) { return get_bool(d, w, "relu", &a->linear.relu); }

static const char *const KEYS_concat[] = {"axis", NULL};
static int read_concat(PyObject *d, const who *w, sw_op_attrs *a) {
    int64_t v;
    if (get_int(d, w, "axis", 0, SW_MAX_RANK - 1, &v) < 0) {
        return -1;
    }
    a->concat.axis = (int8_t)v;
    return 0;
}

static const char *const KEYS_softmax_dim[] = {"dim", "scale", "causal", NULL};
static int read_softmax_dim(PyObject *d, const who *w, sw_op_attrs *a) {
    int64_t v;
    if (get_int(d, w, "dim", 0, SW_MAX_RANK - 1, &v) < 0 || get_float(d, w, "scale", &a->softmax_dim.scale) < 0 ||
        get_bool(d, w, "causal", &a->softmax_dim.causal) < 0) {
        return -1;
    }
    a->softmax_dim.dim = (int8_t)v;
    return 0;
}

static const char *const KEYS_layer_norm[] = {"eps", NULL};
static int read_layer_norm(PyObject *d, const who *w, sw_op_attrs *a) {
    return get_float(d, w, "eps", &a->layer_norm.eps);
}

static const char *const KEYS_group_norm[] = {"groups", "eps", NULL};
static int read_group_norm(PyObject *d, const who *w, sw_op_attrs *a) {
    int64_t g;
    if (get_int(d, w, "groups", 1, INT32_MAX, &g) < 0 || get_double(d, w, "eps", &a->group_norm.eps) < 0) {
        return -1;
    }
    a->group_norm.groups = (int32_t)g;
    return 0;
}

static const char *const KEYS_leaky_relu[] = {"negative_slope", NULL};
static int read_leaky_relu(PyObject *d, const who *w, sw_op_attrs *a) {
    return get_float(d, w, "negative_slope", &a->leaky_relu.negative_slope);
}

static const char *const KEYS_gelu[] = {"tanh", NULL};
static int read_gelu(PyObject *d, const who *w, sw_op_attrs *a) { return get_bool(d, w, "tanh", &a->gelu.tanh); }

static const char *const KEYS_dropout[] = {"p", "seed", NULL};
static int read_dropout(PyObject *d, const who *w, sw_op_attrs *a) {
    if (get_float(d, w, "p", &a->dropout.p) < 0) {
        return -1;
    }
    PyObject *v = need(d, w, "seed");
    if (!v) {
        return -1;
    }
    unsigned long long seed = 0;
    if (!PyFloat_Check(v) && !PyBool_Check(v) && PyIndex_Check(v)) {
        seed = PyLong_AsUnsignedLongLong(v);
    } else {
        PyErr_SetNone(PyExc_TypeError);
    }
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return fail(w, "seed", "must be an integer in [0, 2^64)");
    }
    a->dropout.seed = (uint64_t)seed;
    return 0;
}

static const char *const KEYS_batchnorm2d[] = {"momentum", "eps", NULL};
static int read_batchnorm2d(PyObject *d, const who *w, sw_op_attrs *a) {
    return get_float(d, w, "momentum", &a->batchnorm2d.momentum) < 0 ||
                   get_double(d, w, "eps", &a->batchnorm2d.eps) < 0
               ? -1
               : 0;
}

static const char *const KEYS_clip[] = {"lo", "hi", NULL};
static int read_clip(PyObject *d, const who *w, sw_op_attrs *a) {
    return get_float(d, w, "lo", &a->clip.lo) < 0 || get_float(d, w, "hi", &a->clip.hi) < 0 ? -1 : 0;
}

/* seed: an integer in [0, 2^64) (dropout's and stochastic depth's) */
static int get_seed(PyObject *d, const who *w, uint64_t *out) {
    PyObject *v = need(d, w, "seed");
    if (!v) {
        return -1;
    }
    unsigned long long seed = 0;
    if (!PyFloat_Check(v) && !PyBool_Check(v) && PyIndex_Check(v)) {
        seed = PyLong_AsUnsignedLongLong(v);
    } else {
        PyErr_SetNone(PyExc_TypeError);
    }
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return fail(w, "seed", "must be an integer in [0, 2^64)");
    }
    *out = (uint64_t)seed;
    return 0;
}

static const char *const KEYS_stochastic_depth[] = {"p", "seed", "row", NULL};
static int read_stochastic_depth(PyObject *d, const who *w, sw_op_attrs *a) {
    return get_float(d, w, "p", &a->stochastic_depth.p) < 0 || get_seed(d, w, &a->stochastic_depth.seed) < 0 ||
           get_bool(d, w, "row", &a->stochastic_depth.row) < 0 ? -1 : 0;
}

static const char *const KEYS_rotary[] = {"base", NULL};
static int read_rotary(PyObject *d, const who *w, sw_op_attrs *a) { return get_double(d, w, "base", &a->rotary.base); }

static const reader READERS[SW_ATTRS_COUNT] = {
    [SW_ATTRS_none] = read_none, [SW_ATTRS_input] = read_input, [SW_ATTRS_conv2d] = read_conv2d,
    [SW_ATTRS_pool2d] = read_pool2d, [SW_ATTRS_linear] = read_linear, [SW_ATTRS_concat] = read_concat,
    [SW_ATTRS_softmax_dim] = read_softmax_dim, [SW_ATTRS_layer_norm] = read_layer_norm,
    [SW_ATTRS_leaky_relu] = read_leaky_relu, [SW_ATTRS_dropout] = read_dropout,
    [SW_ATTRS_batchnorm2d] = read_batchnorm2d,
    [SW_ATTRS_stochastic_depth] = read_stochastic_depth,
    [SW_ATTRS_clip] = read_clip,
    [SW_ATTRS_group_norm] = read_group_norm,
    [SW_ATTRS_rotary] = read_rotary,
    [SW_ATTRS_gelu] = read_gelu,
};

static const char *const *const KEYS[SW_ATTRS_COUNT] = {
    [SW_ATTRS_none] = KEYS_none, [SW_ATTRS_input] = KEYS_input, [SW_ATTRS_conv2d] = KEYS_conv2d,
    [SW_ATTRS_pool2d] = KEYS_pool2d, [SW_ATTRS_linear] = KEYS_linear, [SW_ATTRS_concat] = KEYS_concat,
    [SW_ATTRS_softmax_dim] = KEYS_softmax_dim, [SW_ATTRS_layer_norm] = KEYS_layer_norm,
    [SW_ATTRS_leaky_relu] = KEYS_leaky_relu, [SW_ATTRS_dropout] = KEYS_dropout,
    [SW_ATTRS_batchnorm2d] = KEYS_batchnorm2d,
    [SW_ATTRS_stochastic_depth] = KEYS_stochastic_depth,
    [SW_ATTRS_clip] = KEYS_clip,
    [SW_ATTRS_group_norm] = KEYS_group_norm,
    [SW_ATTRS_rotary] = KEYS_rotary,
    [SW_ATTRS_gelu] = KEYS_gelu,
};

/* Every key of d is "kind", "name" or one of the record's. */
static int check_keys(PyObject *d, const who *w, const char *const *keys) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &key, &value)) {
        const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        if (!k) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "op %d '%s' (%s): attribute names must be strings", w->index, w->name,
                         w->kind);
            return -1;
        }
        int known = !strcmp(k, "kind") || !strcmp(k, "name");
        for (int i = 0; !known && keys[i]; i++) {
            known = !strcmp(k, keys[i]);
        }
        if (!known) {
            char list[256] = "";
            size_t used = 0;
            for (int i = 0; keys[i] && used < sizeof list; i++) {
                used += (size_t)PyOS_snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", keys[i]);
            }
            PyErr_Format(PyExc_ValueError, "op %d '%s' (%s): unknown attribute '%s' (%s takes %s)", w->index, w->name,
                         w->kind, k, w->kind, keys[0] ? list : "none");
            return -1;
        }
    }
    return 0;
}

int sw_py_parse_op_attrs(PyObject *d, int op, int out_rank, sw_op_attrs *a) {
    if (!PyDict_Check(d)) {
        PyErr_Format(PyExc_TypeError, "op %d: attributes must be a dict, not %s", op, Py_TYPE(d)->tp_name);
        return -1;
    }
    PyObject *kind = PyDict_GetItemString(d, "kind"), *name = PyDict_GetItemString(d, "name");
    const char *kind_s = kind && PyUnicode_Check(kind) ? PyUnicode_AsUTF8(kind) : NULL;
    const char *name_s = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : "?";
    if (!kind_s || !name_s) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "op %d: attributes need a 'kind' (a string of _core.OP_KINDS)", op);
        return -1;
    }
    int type = -1;
    for (int k = 0; k < SW_OP_COUNT && type < 0; k++) {
        type = strcmp(sw_op_names[k], kind_s) == 0 ? k : -1;
    }
    if (type < 0) {
        PyErr_Format(PyExc_ValueError, "op %d '%s': unknown op kind '%s'", op, name_s, kind_s);
        return -1;
    }
    who w = {op, name_s, kind_s};
    sw_attrs_kind rk = sw_op_attrs_kind[type];
    *a = sw_op_attrs_default(type);
    if (check_keys(d, &w, KEYS[rk]) < 0 || READERS[rk](d, &w, a) < 0) {
        return -1;
    }
    if (sw_op_attrs_check(a, out_rank, op) != SW_OK) {
        PyErr_Format(PyExc_ValueError, "op '%s': %s", name_s, sw_last_error());
        return -1;
    }
    return 0;
}

int sw_py_parse_attrs(PyObject *seq, int nops, const int *out_rank, sw_op_attrs **out) {
    PyObject *fast = PySequence_Fast(seq, "attrs must be a sequence of dicts, one per op");
    if (!fast) {
        return -1;
    }
    if (PySequence_Fast_GET_SIZE(fast) != nops) {
        PyErr_Format(PyExc_ValueError, "attrs must be one dict per op: %d, not %zd", nops,
                     PySequence_Fast_GET_SIZE(fast));
        Py_DECREF(fast);
        return -1;
    }
    sw_op_attrs *attrs = PyMem_Calloc((size_t)nops + 1, sizeof *attrs);
    if (!attrs) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < nops; i++) {
        if (sw_py_parse_op_attrs(PySequence_Fast_GET_ITEM(fast, i), i, out_rank[i], &attrs[i]) < 0) {
            PyMem_Free(attrs);
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    *out = attrs;
    return 0;
}
