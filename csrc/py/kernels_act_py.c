/* kernels_act_py.c -- test entry points for the activation kernels (activation.c), for what
 * the runtime cannot reach: NaN and infinities (the runtime refuses non-finite inputs, and a NaN
 * makes every gradient of its row NaN), any incoming gradient (PyTorch comparisons), any slope.
 * Dropout and the activations on finite data are checked through the runtime by the conformance
 * harness (tests/ops/conformance.py).
 *
 *   activation_forward(kind, x, x_lo, y_lo, y_shape, negative_slope=0.01, lo=-1, hi=1) -> y
 *   activation_backward(kind, src, src_lo, dy, dy_lo, dx_lo, dx_shape, negative_slope=0.01, lo=-1, hi=1) -> dx
 *
 * kind is "sigmoid", "tanh", "gelu", "silu", "leaky_relu", "clip" (bounds lo, hi), "hardsigmoid"
 * or "hardswish"; src is the forward
 * output y for sigmoid and tanh, the forward input x for the others.  Arrays are
 * float32 of any rank 1..MAX_RANK with the global coordinates of their first
 * element (`*_lo`); the output is a new array over the box (lo, shape), filled
 * with NaN before the call so that an element the kernel forgets shows up in the
 * tests.  Anything malformed raises ValueError; the GIL is released in the kernel.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>  /* CPython API */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>  /* NumPy C API: PyArray_* (this file imports its own API table) */

#include <math.h>    /* isfinite */
#include <string.h>  /* strcmp */

#include "../cpu/kernels.h"  /* sw_activation, sw_activation_forward / _backward */
#include "../internal.h"    /* sw_status, SW_MAX_RANK */
#include "kernel_args.h"     /* sw_py_ints, sw_py_float32, sw_py_view, sw_py_output, SW_KERNEL_* */
#include "pyerr.h"           /* sw_py_raise */

/* The activation named `name`, or -1 with ValueError. */
static int activation_named(const char *name) {
    for (int k = 0; k < SW_ACT_COUNT; k++) {
        if (strcmp(name, sw_activation_names[k]) == 0) {
            return k;
        }
    }
    PyErr_Format(PyExc_ValueError, "unknown activation '%s'; expected sigmoid, tanh, gelu, silu, leaky_relu, clip, "
                 "hardsigmoid or hardswish",
                 name);
    return -1;
}

/* A finite float32 negative slope, or -1 with ValueError. */
static int slope_arg(double s, float *out) {
    if (!isfinite(s) || !isfinite((float)s)) {
        PyErr_Format(PyExc_ValueError, "negative_slope must be a finite float32, got %g", s);
        return -1;
    }
    *out = (float)s;
    return 0;
}

/* Clip's bounds as float32s, lo <= hi, or -1 with ValueError. */
static int bounds_arg(double lo, double hi, float *a, float *b) {
    if (!((float)lo <= (float)hi)) {
        PyErr_Format(PyExc_ValueError, "clip bounds must be numbers with lo <= hi, got %g, %g", lo, hi);
        return -1;
    }
    *a = (float)lo;
    *b = (float)hi;
    return 0;
}

/* An input view: a float32 array of rank `rank` (any when rank is 0) and its global start (new reference). */
static PyArrayObject *input(PyObject *obj, PyObject *lo, int rank, const char *what, sw_view *v) {
    PyArrayObject *a = sw_py_float32(obj, rank ? rank : 1, rank ? rank : SW_MAX_RANK, what);
    if (!a) {
        return NULL;
    }
    int64_t start[SW_MAX_RANK];
    char lo_what[64];
    snprintf(lo_what, sizeof lo_what, "%s's lo", what);
    if (sw_py_ints(lo, PyArray_NDIM(a), start, 0, lo_what) < 0) {
        Py_DECREF(a);
        return NULL;
    }
    *v = sw_py_view(a, start);
    return a;
}

/* The output box (lo, shape) of `rank` entries, with a NaN-filled array behind it (new reference). */
static PyArrayObject *output(int rank, PyObject *lo, PyObject *shape, const char *what, sw_view *v) {
    char buf[64];
    v->rank = rank;
    snprintf(buf, sizeof buf, "%s's lo", what);
    if (sw_py_ints(lo, rank, v->lo, 0, buf) < 0) {
        return NULL;
    }
    snprintf(buf, sizeof buf, "%s's shape", what);
    if (sw_py_ints(shape, rank, v->shape, SW_PY_NONNEG, buf) < 0) {
        return NULL;
    }
    PyArrayObject *a = sw_py_output(rank, v->shape, 0, 1, what);
    if (a) {
        v->data = (float *)PyArray_DATA(a);
    }
    return a;
}

static PyObject *py_activation_forward(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"kind", "x", "x_lo", "y_lo", "y_shape", "negative_slope", "lo", "hi", NULL};
    const char *kind;
    PyObject *x_o, *x_lo, *y_lo, *y_shape;
    double slope = 0.01, lo = -1.0, hi = 1.0;
    float alpha, beta = 0.0f;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "sOOOO|ddd", kwlist, &kind, &x_o, &x_lo, &y_lo, &y_shape, &slope,
                                     &lo, &hi)) {
        return NULL;
    }
    int f = activation_named(kind);
    if (f < 0 || slope_arg(slope, &alpha) < 0 || (f == SW_ACT_CLIP && bounds_arg(lo, hi, &alpha, &beta) < 0)) {
        return NULL;
    }
    sw_view x, y;
    PyArrayObject *xa = input(x_o, x_lo, 0, "x", &x);
    PyArrayObject *ya = xa ? output(x.rank, y_lo, y_shape, "y", &y) : NULL;
    if (!ya) {
        Py_XDECREF(xa);
        return NULL;
    }
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_activation_forward((sw_activation)f, alpha, beta, &x, &y);
    SW_KERNEL_END
    Py_DECREF(xa);
    if (s != SW_OK) {
        Py_DECREF(ya);
        return sw_py_raise(s);
    }
    return (PyObject *)ya;
}

static PyObject *py_activation_backward(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"kind", "src", "src_lo", "dy", "dy_lo", "dx_lo", "dx_shape", "negative_slope", "lo", "hi",
                             NULL};
    const char *kind;
    PyObject *src_o, *src_lo, *dy_o, *dy_lo, *dx_lo, *dx_shape;
    double slope = 0.01, lo = -1.0, hi = 1.0;
    float alpha, beta = 0.0f;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "sOOOOOO|ddd", kwlist, &kind, &src_o, &src_lo, &dy_o, &dy_lo, &dx_lo,
                                     &dx_shape, &slope, &lo, &hi)) {
        return NULL;
    }
    int f = activation_named(kind);
    if (f < 0 || slope_arg(slope, &alpha) < 0 || (f == SW_ACT_CLIP && bounds_arg(lo, hi, &alpha, &beta) < 0)) {
        return NULL;
    }
    sw_view src, dy, dx;
    PyArrayObject *sa = input(src_o, src_lo, 0, "src", &src);
    PyArrayObject *da = sa ? input(dy_o, dy_lo, src.rank, "dy", &dy) : NULL;
    PyArrayObject *xa = da ? output(src.rank, dx_lo, dx_shape, "dx", &dx) : NULL;
    if (!xa) {
        Py_XDECREF(sa);
        Py_XDECREF(da);
        return NULL;
    }
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_activation_backward((sw_activation)f, alpha, beta, &src, &dy, &dx);
    SW_KERNEL_END
    Py_DECREF(sa);
    Py_DECREF(da);
    if (s != SW_OK) {
        Py_DECREF(xa);
        return sw_py_raise(s);
    }
    return (PyObject *)xa;
}

static PyMethodDef methods[] = {
    {"activation_forward", (PyCFunction)(void (*)(void))py_activation_forward, METH_VARARGS | METH_KEYWORDS,
     "activation_forward(kind, x, x_lo, y_lo, y_shape, negative_slope=0.01, lo=-1, hi=1) -> y = f(x) over y's box\n"
     "kind: sigmoid, tanh, gelu (exact erf form), silu, leaky_relu, clip (to [lo, hi]), hardsigmoid or hardswish."},
    {"activation_backward", (PyCFunction)(void (*)(void))py_activation_backward, METH_VARARGS | METH_KEYWORDS,
     "activation_backward(kind, src, src_lo, dy, dy_lo, dx_lo, dx_shape, negative_slope=0.01, lo=-1, hi=1) -> dx\n"
     "dx = dy * f'(x) over dx's box; src is the forward output y for sigmoid and tanh, the input x otherwise."},
    {NULL, NULL, 0, NULL},
};

int sw_py_register_activation_kernels(PyObject *module) {
    import_array1(-1);  /* this file's own NumPy API table */
    if (sw_py_kernel_args_ready() < 0) {
        return -1;
    }
    return PyModule_AddFunctions(module, methods);
}
