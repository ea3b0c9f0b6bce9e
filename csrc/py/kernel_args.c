/* kernel_args.c -- see kernel_args.h. */
#define _POSIX_C_SOURCE 200809L  /* clock_gettime under -std=c11 */
#include "kernel_args.h"

#include <math.h>   /* NAN */
#include <stdio.h>  /* snprintf */
#include <time.h>   /* clock_gettime */

/* Per thread: each executor thread reads its own total before and after a task. */
static _Thread_local double kernel_seconds;

double sw_py_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void sw_py_kernel_add(double seconds) { kernel_seconds += seconds; }

double sw_py_kernel_seconds(void) { return kernel_seconds; }

int sw_py_kernel_args_ready(void) {
    import_array1(-1);  /* this file's own NumPy API table */
    return 0;
}

/* One integer within [min, max]: 0, or -1 with ValueError naming `what`. */
static int one_int(PyObject *item, int64_t min, int64_t max, const char *what, int64_t *out) {
    PyObject *index = PyBool_Check(item) ? NULL : PyNumber_Index(item);
    if (!index) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be an integer", what);
        return -1;
    }
    long long v = PyLong_AsLongLong(index);
    Py_DECREF(index);
    if ((v == -1 && PyErr_Occurred()) || v < min || v > max) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s is out of range [%lld, %lld]", what, (long long)min, (long long)max);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

int sw_py_ints(PyObject *obj, int n, int64_t *out, int flags, const char *what) {
    if (obj == Py_None && (flags & SW_PY_NONE_IS_ZEROS)) {
        for (int k = 0; k < n; k++) {
            out[k] = 0;
        }
        return 0;
    }
    PyObject *seq = PySequence_Check(obj) ? PySequence_Fast(obj, what) : NULL;
    if (!seq) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be a sequence of %d integers", what, n);
        return -1;
    }
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "%s must have %d entries, got %zd", what, n, PySequence_Fast_GET_SIZE(seq));
        rc = -1;
    }
    int64_t min = (flags & SW_PY_NONNEG) ? 0 : -SW_PY_COORD_LIMIT;
    for (int k = 0; rc == 0 && k < n; k++) {
        char item[128];
        snprintf(item, sizeof item, "%s[%d]", what, k);
        rc = one_int(PySequence_Fast_GET_ITEM(seq, k), min, SW_PY_COORD_LIMIT, item, &out[k]);
    }
    Py_DECREF(seq);
    return rc;
}

int sw_py_pair(PyObject *obj, int64_t min, int64_t max, const char *what, int64_t *a, int64_t *b) {
    int64_t v[2];
    if (PySequence_Check(obj)) {
        if (sw_py_ints(obj, 2, v, 0, what) < 0) {
            return -1;
        }
    } else if (one_int(obj, min, max, what, &v[0]) < 0) {
        return -1;
    } else {
        v[1] = v[0];
    }
    if (v[0] < min || v[1] < min || v[0] > max || v[1] > max) {
        PyErr_Format(PyExc_ValueError, "%s must be an int or a pair of ints in [%lld, %lld]", what, (long long)min,
                     (long long)max);
        return -1;
    }
    *a = v[0];
    *b = v[1];
    return 0;
}

PyArrayObject *sw_py_float32(PyObject *obj, int rmin, int rmax, const char *what) {
    if (!PyArray_Check(obj) || PyArray_TYPE((PyArrayObject *)obj) != NPY_FLOAT32) {
        PyErr_Format(PyExc_ValueError, "%s must be a float32 NumPy array", what);
        return NULL;
    }
    int nd = PyArray_NDIM((PyArrayObject *)obj);
    if (nd < rmin || nd > rmax) {
        if (rmin == rmax) {
            PyErr_Format(PyExc_ValueError, "%s must have rank %d, got %d", what, rmin, nd);
        } else {
            PyErr_Format(PyExc_ValueError, "%s must have rank %d..%d, got %d", what, rmin, rmax, nd);
        }
        return NULL;
    }
    return (PyArrayObject *)PyArray_FROM_OTF(obj, NPY_FLOAT32, NPY_ARRAY_IN_ARRAY);
}

sw_view sw_py_view(PyArrayObject *a, const int64_t *lo) {
    sw_view v = {0};
    v.data = (float *)PyArray_DATA(a);
    v.rank = PyArray_NDIM(a);
    for (int d = 0; d < v.rank; d++) {
        v.lo[d] = lo[d];
        v.shape[d] = (int64_t)PyArray_DIM(a, d);
    }
    return v;
}

PyArrayObject *sw_py_output(int rank, const int64_t *shape, int f64, int nan_filled, const char *what) {
    npy_intp dims[SW_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        if (shape[d] < 0 || shape[d] > (int64_t)1 << 36) {
            PyErr_Format(PyExc_ValueError, "%s: extent %lld out of range", what, (long long)shape[d]);
            return NULL;
        }
        dims[d] = (npy_intp)shape[d];
    }
    int type = f64 ? NPY_FLOAT64 : NPY_FLOAT32;
    PyArrayObject *a = (PyArrayObject *)(nan_filled ? PyArray_EMPTY(rank, dims, type, 0)
                                                    : PyArray_ZEROS(rank, dims, type, 0));
    if (a && nan_filled) {
        npy_intp size = PyArray_SIZE(a);
        if (f64) {
            double *p = (double *)PyArray_DATA(a);
            for (npy_intp i = 0; i < size; i++) {
                p[i] = NAN;
            }
        } else {
            float *p = (float *)PyArray_DATA(a);
            for (npy_intp i = 0; i < size; i++) {
                p[i] = NAN;
            }
        }
    }
    return a;
}

int sw_py_all_finite(PyArrayObject *a) {
    const uint32_t *bits = PyArray_DATA(a);   /* IEEE single: exponent all ones = NaN or inf */
    npy_intp n = 1;
    for (int d = 0; d < PyArray_NDIM(a); d++) {
        n *= PyArray_DIM(a, d);
    }
    uint32_t bad = 0;
    for (npy_intp i = 0; i < n; i++) {
        bad |= (uint32_t)((bits[i] & 0x7f800000u) == 0x7f800000u);
    }
    return !bad;
}
