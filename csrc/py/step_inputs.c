/* step_inputs.c -- one step's minibatch and labels from Python, checked before any task runs.
 *
 * Every input op gets an array of its exact shape: floating point without NaN or infinity
 * (converted to float32), or for an integer input (token ids) integers below its bound,
 * converted to exact float32s.  The labels have the loss's shape without its classes ((N)
 * for (N, C) logits, (N, T) for (N, T, C)) and lie below the smallest class count.  These
 * checks are the Trainer's: it validates a minibatch here, in one pass right after the
 * previous step, and only on an error asks Python for a message naming the inputs.
 */
#include "problem_py.h"  /* CPython and NumPy C API */

#include <string.h>  /* memset */

#include "kernel_args.h"  /* sw_py_all_finite */
#include "step_inputs.h"
#include "../exec/runtime_internal.h"  /* struct sw_runtime: the bindings report on its insides */

void inputs_free(step_inputs *in) {
    for (int i = 0; i < in->n && in->held; i++) {
        Py_XDECREF(in->held[i]);
    }
    PyMem_Free(in->held);
    PyMem_Free(in->inputs);
    PyMem_Free(in->labels);
}

/* Integer ids in [0, bound) as a new float32 array (exact: bound <= 2^24). */
static PyArrayObject *id_array(int i, PyObject *item, int32_t bound) {
    PyArrayObject *wide = (PyArrayObject *)PyArray_FROMANY(item, NPY_INT64, 0, 0, NPY_ARRAY_IN_ARRAY | NPY_ARRAY_FORCECAST);
    if (!wide) {
        return NULL;
    }
    PyArrayObject *arr = (PyArrayObject *)PyArray_SimpleNew(PyArray_NDIM(wide), PyArray_DIMS(wide), NPY_FLOAT32);
    if (!arr) {
        Py_DECREF(wide);
        return NULL;
    }
    const int64_t *v = PyArray_DATA(wide), n = PyArray_SIZE(wide);
    float *f = PyArray_DATA(arr);
    for (int64_t k = 0; k < n; k++) {
        if (v[k] < 0 || v[k] >= bound) {   /* uint64's top half wraps negative: refused here too */
            PyErr_Format(PyExc_ValueError, "input op %d: token id %lld is out of range [0, %d)", i, (long long)v[k],
                         (int)bound);
            Py_DECREF(wide);
            Py_DECREF(arr);
            return NULL;
        }
        f[k] = (float)v[k];
    }
    Py_DECREF(wide);
    return arr;
}

/* The minibatch of input op i: a floating-point array of exactly the op's shape, with no
 * NaN or infinity; returned as a float32 C-contiguous array (a new reference; the same
 * array when it already is one). */
static PyArrayObject *input_array(const sw_runtime *rt, int i, PyObject *item) {
    const sw_rt_op *op = &rt->ops[i];
    const int32_t ids = rt->attrs[i].type == SW_OP_INPUT ? rt->attrs[i].input.id_bound : 0;
    if (!PyArray_Check(item) || !(ids ? PyArray_ISINTEGER((PyArrayObject *)item)
                                      : PyArray_ISFLOAT((PyArrayObject *)item))) {
        PyErr_Format(PyExc_ValueError, "input op %d: the minibatch must be %s array", i,
                     ids ? "an integer (token id)" : "a floating-point");
        return NULL;
    }
    PyArrayObject *given = (PyArrayObject *)item;
    if (PyArray_NDIM(given) != op->out_rank) {
        PyErr_Format(PyExc_ValueError, "input op %d: the minibatch has %d dimensions, expected %d", i,
                     PyArray_NDIM(given), op->out_rank);
        return NULL;
    }
    for (int d = 0; d < op->out_rank; d++) {
        if (PyArray_DIM(given, d) != op->shape[d]) {
            PyErr_Format(PyExc_ValueError, "input op %d: dimension %d is %zd, expected %lld", i, d,
                         (Py_ssize_t)PyArray_DIM(given, d), (long long)op->shape[d]);
            return NULL;
        }
    }
    if (ids) {
        return id_array(i, item, ids);
    }
    PyArrayObject *arr = (PyArrayObject *)PyArray_FROMANY(item, NPY_FLOAT32, 0, 0, NPY_ARRAY_IN_ARRAY | NPY_ARRAY_FORCECAST);
    if (arr && !sw_py_all_finite(arr)) {
        PyErr_Format(PyExc_ValueError, "input op %d: the minibatch contains NaN or infinity", i);
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

/* The loss ops' labels: their count (the loss's shape but its classes, e.g. (N) or (N, T)),
 * the smallest class count (every label must be below it) and the loss op (-1: none). */
static int loss_labels(const sw_runtime *rt, int64_t *count, int64_t *classes) {
    int found = -1;
    *classes = INT32_MAX;
    *count = rt->batch;
    for (int i = 0; i < rt->nops; i++) {
        const sw_rt_op *o = &rt->ops[i];
        if (rt->attrs[i].type == SW_OP_SOFTMAX && o->out_rank >= 2) {
            found = found < 0 ? i : found;
            *classes = o->shape[o->out_rank - 1] < *classes ? o->shape[o->out_rank - 1] : *classes;
        }
    }
    if (found >= 0) {
        *count = 1;
        for (int d = 0; d + 1 < rt->ops[found].out_rank; d++) {
            *count *= rt->ops[found].shape[d];
        }
    }
    return found;
}

/* The labels in 0..classes-1 as int32 (PyMem_Malloc'd into *out): an integer array of the
 * loss op's shape without its classes ((N) for (N, C) logits, (N, T) for (N, T, C)). */
static int parse_labels(const sw_runtime *rt, PyObject *labels, int32_t **out) {
    int64_t count, classes;
    int loss = loss_labels(rt, &count, &classes);
    int rank = loss >= 0 ? rt->ops[loss].out_rank - 1 : 1;
    int ok = PyArray_Check(labels) && PyArray_ISINTEGER((PyArrayObject *)labels) &&
             PyArray_NDIM((PyArrayObject *)labels) == rank;
    for (int d = 0; ok && d < rank; d++) {
        ok = PyArray_DIM((PyArrayObject *)labels, d) == (loss >= 0 ? rt->ops[loss].shape[d] : rt->batch);
    }
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "labels must be a %d-D integer array of %lld entries (the loss's shape "
                     "without its classes)", rank, (long long)count);
        return -1;
    }
    /* int64 holds every integer dtype's values except uint64's top half, which wraps negative
     * and is refused below like any other label out of range */
    PyArrayObject *wide = (PyArrayObject *)PyArray_FROMANY(labels, NPY_INT64, rank, rank,
                                                           NPY_ARRAY_IN_ARRAY | NPY_ARRAY_FORCECAST);
    if (!wide) {
        return -1;
    }
    const int64_t *v = PyArray_DATA(wide);
    *out = PyMem_Malloc((size_t)count * sizeof **out);
    int bad = !*out;
    for (int64_t n = 0; !bad && n < count; n++) {
        bad = v[n] < 0 || v[n] >= classes;
        (*out)[n] = (int32_t)v[n];
    }
    Py_DECREF(wide);
    if (!*out) {
        PyErr_NoMemory();
        return -1;
    }
    if (bad) {
        PyErr_Format(PyExc_ValueError, "labels must lie in 0..%lld", (long long)classes - 1);
        return -1;
    }
    return 0;
}

/* One floating-point, finite array of the op's exact shape per input op, None for the other
 * ops; N integer labels in range.  These checks are the Trainer's: it validates a minibatch
 * here, in one pass right after the previous step, and only on an error asks Python for a
 * message naming the inputs. */
int parse_inputs(const sw_runtime *rt, PyObject *list, PyObject *labels, step_inputs *in) {
    memset(in, 0, sizeof *in);
    if (!PyList_Check(list) || PyList_GET_SIZE(list) != rt->nops) {
        PyErr_Format(PyExc_ValueError, "inputs must be a list of %d entries (one per op)", rt->nops);
        return -1;
    }
    in->n = rt->nops;
    in->inputs = PyMem_Calloc((size_t)rt->nops, sizeof *in->inputs);
    in->held = PyMem_Calloc((size_t)rt->nops, sizeof *in->held);
    if (!in->inputs || !in->held) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < rt->nops; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        int is_input = rt->attrs[i].type == SW_OP_INPUT;
        if (item == Py_None || !is_input) {
            if (is_input || item != Py_None) {
                PyErr_Format(PyExc_ValueError, is_input ? "input op %d has no data" : "op %d is not an input op", i);
                return -1;
            }
            continue;
        }
        PyArrayObject *arr = input_array(rt, i, item);
        if (!arr) {
            return -1;
        }
        in->held[i] = (PyObject *)arr;
        in->inputs[i] = PyArray_DATA(arr);
    }
    return parse_labels(rt, labels, &in->labels);
}

int sw_py_step_inputs_init(void) {
    import_array1(-1);  /* this file's own NumPy API table */
    return 0;
}
