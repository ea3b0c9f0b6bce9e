/* kernel_views.h -- what the misc kernels' entry points share (kernels_misc_py.c): an array
 * argument with its sw_view, NaN-filled outputs, pooling windows,
 * and the one way a binding finishes (release the arguments, raise or return the result).
 *
 * static inline: each including file uses its own NumPy API table (imported by its register
 * function), so the helpers are compiled against it.
 */
#ifndef SHARDWISE_KERNEL_VIEWS_H
#define SHARDWISE_KERNEL_VIEWS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>  /* CPython API */
#ifndef NPY_NO_DEPRECATED_API
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#endif
#include <numpy/arrayobject.h>  /* NumPy C API: PyArray_* (each including file imports its own API table) */

#include <string.h>  /* strcmp */

#include "../cpu/kernels.h"  /* sw_view, sw_window, the kernels */
#include "../internal.h"    /* sw_status, sw_last_error, SW_MAX_RANK */
#include "kernel_args.h"     /* sw_py_ints, sw_py_pair, sw_py_float32, sw_py_view, sw_py_output */
#include "pyerr.h"           /* sw_py_raise */

/* An array argument (owned reference) and the view over it. */
typedef struct {
    PyArrayObject *arr;
    sw_view v;
} arg_view;

static inline void release(arg_view *a, int count) {
    for (int k = 0; k < count; k++) {
        Py_CLEAR(a[k].arr);
    }
}

/* An input: a float32 array of rank rmin..rmax (copied to C order if needed) and its global start. */
static inline int in_view(PyObject *obj, PyObject *lo, int rmin, int rmax, const char *what, arg_view *out) {
    out->arr = sw_py_float32(obj, rmin, rmax, what);
    if (!out->arr) {
        return -1;
    }
    int64_t start[SW_MAX_RANK];
    char lo_what[96];
    snprintf(lo_what, sizeof lo_what, "%s's lo", what);
    if (sw_py_ints(lo, PyArray_NDIM(out->arr), start, 0, lo_what) < 0) {
        return -1;
    }
    out->v = sw_py_view(out->arr, start);
    return 0;
}

/* An output of rank `rank`: a new float32 (or float64 when f64) array of the given shape filled with NaN. */
static inline int out_array(int rank, const int64_t *shape, int f64, PyArrayObject **out) {
    *out = sw_py_output(rank, shape, f64, 1, "output");
    return *out ? 0 : -1;
}

/* The output box: lo and shape tuples of `rank` entries, a NaN-filled float32 array behind it. */
static inline int out_view(int rank, PyObject *lo, PyObject *shape, const char *what, arg_view *out) {
    char buf[96];
    out->v.rank = rank;
    snprintf(buf, sizeof buf, "%s's lo", what);
    if (sw_py_ints(lo, rank, out->v.lo, 0, buf) < 0) {
        return -1;
    }
    snprintf(buf, sizeof buf, "%s's shape", what);
    if (sw_py_ints(shape, rank, out->v.shape, SW_PY_NONNEG, buf) < 0) {
        return -1;
    }
    if (out_array(rank, out->v.shape, 0, &out->arr) < 0) {
        return -1;
    }
    out->v.data = (float *)PyArray_DATA(out->arr);
    return 0;
}

static inline int get_window(PyObject *kernel, PyObject *stride, PyObject *padding, sw_window *w) {
    *w = (sw_window){.relu = 0};   /* every field: a pooling window has no dilation or groups */
    if (sw_py_pair(kernel, 1, 1 << 20, "kernel", &w->kh, &w->kw) < 0 ||
        sw_py_pair(stride, 1, 1 << 20, "stride", &w->sh, &w->sw) < 0 ||
        sw_py_pair(padding, 0, 1 << 20, "padding", &w->ph, &w->pw) < 0) {
        return -1;
    }
    return 0;
}

/* "max" -> 1, "avg" -> 0, else -1 with ValueError. */
static inline int get_kind(const char *kind) {
    if (strcmp(kind, "max") == 0) {
        return 1;
    }
    if (strcmp(kind, "avg") == 0) {
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "pooling kind must be 'max' or 'avg', got '%s'", kind);
    return -1;
}

/* Finish a call: on a failed status drop the output and raise, else hand the output over. */
static inline PyObject *finish(sw_status s, arg_view *args, int nargs, PyArrayObject **result) {
    release(args, nargs);
    if (s != SW_OK) {
        Py_CLEAR(*result);
        return sw_py_raise(s);
    }
    return (PyObject *)*result;
}

/* Finish a call whose output is its last view (the usual layout): hand that array over. */
static inline PyObject *finish_last(sw_status s, arg_view *args, int nargs) {
    PyArrayObject *out = args[nargs - 1].arr;
    args[nargs - 1].arr = NULL;
    return finish(s, args, nargs - 1, &out);
}

#endif /* SHARDWISE_KERNEL_VIEWS_H */
