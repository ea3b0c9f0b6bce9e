/* kernels_misc_py.c -- test entry points for the misc CPU kernels: pooling,
 * ReLU, add, the LSTM cell and hidden state, batch normalization, softmax
 * cross-entropy, box copies.
 *
 * Each function takes float32 NumPy arrays with the global coordinates of
 * their first element (`*_lo` tuples), builds sw_views, runs one kernel with
 * the GIL released and returns the output as a new array.  Output arrays are
 * filled with NaN before the call, so an element a kernel forgets to write
 * shows up in the tests.  Everything malformed -- wrong dtype, rank, lengths,
 * labels out of range, inconsistent boxes -- raises ValueError.
 *
 * Labels follow softmax.c: labels[i] belongs to global sample x_lo[0] + i in
 * the forward pass (one label per row of x) and p_lo[0] + i in the backward
 * pass (one per row of p).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>  /* CPython API */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>  /* NumPy C API: PyArray_* (this file imports its own API table) */

#include <string.h>  /* strcmp */

#include "../cpu/kernels.h"  /* sw_view, sw_window, the kernels */
#include "../shardwise.h"    /* sw_status, sw_last_error, SW_MAX_RANK */
#include "kernel_args.h"     /* sw_py_ints, sw_py_pair, sw_py_float32, sw_py_view, sw_py_output */
#include "pyerr.h"           /* sw_py_raise */

/* ------------------------------------------------------------------ helpers */

/* An array argument (owned reference) and the view over it. */
typedef struct {
    PyArrayObject *arr;
    sw_view v;
} arg_view;

static void release(arg_view *a, int count) {
    for (int k = 0; k < count; k++) {
        Py_CLEAR(a[k].arr);
    }
}

/* An input: a float32 array of rank rmin..rmax (copied to C order if needed) and its global start. */
static int in_view(PyObject *obj, PyObject *lo, int rmin, int rmax, const char *what, arg_view *out) {
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
static int out_array(int rank, const int64_t *shape, int f64, PyArrayObject **out) {
    *out = sw_py_output(rank, shape, f64, 1, "output");
    return *out ? 0 : -1;
}

/* The output box: lo and shape tuples of `rank` entries, a NaN-filled float32 array behind it. */
static int out_view(int rank, PyObject *lo, PyObject *shape, const char *what, arg_view *out) {
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

/* A 1-D float32 array of exactly `len` entries (new reference), or NULL with ValueError.
 * None gives NULL without an exception when optional. */
static PyArrayObject *channel_array(PyObject *obj, int64_t len, int optional, const char *what, int *failed) {
    if (optional && obj == Py_None) {
        return NULL;
    }
    if (!PyArray_Check(obj) || PyArray_TYPE((PyArrayObject *)obj) != NPY_FLOAT32 ||
        PyArray_NDIM((PyArrayObject *)obj) != 1 || PyArray_DIM((PyArrayObject *)obj, 0) != len) {
        PyErr_Format(PyExc_ValueError, "%s must be a 1-D float32 array of %lld entries (the box's channels)", what,
                     (long long)len);
        *failed = 1;
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)PyArray_FROM_OTF(obj, NPY_FLOAT32, NPY_ARRAY_IN_ARRAY);
    if (!a) {
        *failed = 1;
    }
    return a;
}

/* Labels: an integer array of `len` entries in int32 range, as a C-contiguous int32 array (new reference). */
static PyArrayObject *get_labels(PyObject *obj, int64_t len) {
    PyArrayObject *raw = (PyArrayObject *)PyArray_FROM_O(obj);
    if (!raw) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "labels must be a 1-D integer array");
        return NULL;
    }
    if (!PyArray_ISINTEGER(raw) || PyArray_NDIM(raw) != 1 || PyArray_DIM(raw, 0) != len) {
        Py_DECREF(raw);
        PyErr_Format(PyExc_ValueError, "labels must be a 1-D integer array of %lld entries (one per row)",
                     (long long)len);
        return NULL;
    }
    PyArrayObject *wide = (PyArrayObject *)PyArray_FROM_OTF((PyObject *)raw, NPY_INT64, NPY_ARRAY_IN_ARRAY);
    Py_DECREF(raw);
    if (!wide) {
        return NULL;
    }
    npy_intp n = (npy_intp)len;
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(1, &n, NPY_INT32);
    if (!out) {
        Py_DECREF(wide);
        return NULL;
    }
    const int64_t *src = (const int64_t *)PyArray_DATA(wide);
    int32_t *dst = (int32_t *)PyArray_DATA(out);
    for (int64_t i = 0; i < len; i++) {
        if (src[i] < 0 || src[i] > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "label %lld at position %lld is out of range", (long long)src[i],
                         (long long)i);
            Py_DECREF(wide);
            Py_DECREF(out);
            return NULL;
        }
        dst[i] = (int32_t)src[i];
    }
    Py_DECREF(wide);
    return out;
}

static int get_window(PyObject *kernel, PyObject *stride, PyObject *padding, sw_window *w) {
    *w = (sw_window){.relu = 0};   /* every field: a pooling window has no dilation or groups */
    if (sw_py_pair(kernel, 1, 1 << 20, "kernel", &w->kh, &w->kw) < 0 ||
        sw_py_pair(stride, 1, 1 << 20, "stride", &w->sh, &w->sw) < 0 ||
        sw_py_pair(padding, 0, 1 << 20, "padding", &w->ph, &w->pw) < 0) {
        return -1;
    }
    return 0;
}

/* "max" -> 1, "avg" -> 0, else -1 with ValueError. */
static int get_kind(const char *kind) {
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
static PyObject *finish(sw_status s, arg_view *args, int nargs, PyArrayObject **result) {
    release(args, nargs);
    if (s != SW_OK) {
        Py_CLEAR(*result);
        return sw_py_raise(s);
    }
    return (PyObject *)*result;
}

/* Finish a call whose output is its last view (the usual layout): hand that array over. */
static PyObject *finish_last(sw_status s, arg_view *args, int nargs) {
    PyArrayObject *out = args[nargs - 1].arr;
    args[nargs - 1].arr = NULL;
    return finish(s, args, nargs - 1, &out);
}

/* ------------------------------------------------------------------ pooling */
/* pool2d_forward(kind, x, x_lo, y_lo, y_shape, kernel, stride, padding) -> y */
static PyObject *py_pool2d_forward(PyObject *Py_UNUSED(m), PyObject *args) {
    const char *kind_s;
    PyObject *x_o, *x_lo, *y_lo, *y_shape, *k_o, *s_o, *p_o;
    if (!PyArg_ParseTuple(args, "sOOOOOOO", &kind_s, &x_o, &x_lo, &y_lo, &y_shape, &k_o, &s_o, &p_o)) {
        return NULL;
    }
    arg_view a[2] = {{0}};  /* x, y */
    sw_window w;
    int is_max = get_kind(kind_s);
    if (is_max < 0 || get_window(k_o, s_o, p_o, &w) < 0 || in_view(x_o, x_lo, 4, 4, "x", &a[0]) < 0 ||
        out_view(4, y_lo, y_shape, "y", &a[1]) < 0) {
        release(a, 2);
        return NULL;
    }
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_pool2d_forward(is_max, &a[0].v, &a[1].v, &w);
    SW_KERNEL_END
    return finish_last(s, a, 2);
}

/* pool2d_backward(kind, x, x_lo, dy, dy_lo, dx_lo, dx_shape, kernel, stride, padding) -> dx
 * (x may be None for 'avg') */
static PyObject *py_pool2d_backward(PyObject *Py_UNUSED(m), PyObject *args) {
    const char *kind_s;
    PyObject *x_o, *x_lo, *dy_o, *dy_lo, *dx_lo, *dx_shape, *k_o, *s_o, *p_o;
    if (!PyArg_ParseTuple(args, "sOOOOOOOOO", &kind_s, &x_o, &x_lo, &dy_o, &dy_lo, &dx_lo, &dx_shape, &k_o, &s_o,
                          &p_o)) {
        return NULL;
    }
    arg_view a[3] = {{0}};  /* x, dy, dx */
    sw_window w;
    int is_max = get_kind(kind_s);
    int have_x = x_o != Py_None || is_max;
    if (is_max < 0 || get_window(k_o, s_o, p_o, &w) < 0 ||
        (have_x && in_view(x_o, x_lo, 4, 4, "x", &a[0]) < 0) || in_view(dy_o, dy_lo, 4, 4, "dy", &a[1]) < 0 ||
        out_view(4, dx_lo, dx_shape, "dx", &a[2]) < 0) {
        release(a, 3);
        return NULL;
    }
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_pool2d_backward(is_max, have_x ? &a[0].v : NULL, &a[1].v, &a[2].v, &w);
    SW_KERNEL_END
    return finish_last(s, a, 3);
}

/* ------------------------------------------------------------------ element-wise */
/* relu_forward(x, x_lo, y_lo, y_shape) -> y */
static PyObject *py_relu_forward(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *x_o, *x_lo, *y_lo, *y_shape;
    if (!PyArg_ParseTuple(args, "OOOO", &x_o, &x_lo, &y_lo, &y_shape)) {
        return NULL;
    }
    arg_view a[2] = {{0}};
    if (in_view(x_o, x_lo, 1, SW_MAX_RANK, "x", &a[0]) < 0 || out_view(a[0].v.rank, y_lo, y_shape, "y", &a[1]) < 0) {
        release(a, 2);
        return NULL;
    }
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_relu_forward(&a[0].v, &a[1].v);
    SW_KERNEL_END
    return finish_last(s, a, 2);
}

/* relu_backward(y, y_lo, dy, dy_lo, dx_lo, dx_shape) -> dx */
static PyObject *py_relu_backward(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *y_o, *y_lo, *dy_o, *dy_lo, *dx_lo, *dx_shape;
    if (!PyArg_ParseTuple(args, "OOOOOO", &y_o, &y_lo, &dy_o, &dy_lo, &dx_lo, &dx_shape)) {
        return NULL;
    }
    arg_view a[3] = {{0}};
    if (in_view(y_o, y_lo, 1, SW_MAX_RANK, "y", &a[0]) < 0 || in_view(dy_o, dy_lo, 1, SW_MAX_RANK, "dy", &a[1]) < 0 ||
        out_view(a[0].v.rank, dx_lo, dx_shape, "dx", &a[2]) < 0) {
        release(a, 3);
        return NULL;
    }
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_relu_backward(&a[0].v, &a[1].v, &a[2].v);
    SW_KERNEL_END
    return finish_last(s, a, 3);
}

/* add_forward(a, a_lo, b, b_lo, y_lo, y_shape) -> y */
static PyObject *py_add_forward(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *a_o, *a_lo, *b_o, *b_lo, *y_lo, *y_shape;
    if (!PyArg_ParseTuple(args, "OOOOOO", &a_o, &a_lo, &b_o, &b_lo, &y_lo, &y_shape)) {
        return NULL;
    }
    arg_view a[3] = {{0}};
    if (in_view(a_o, a_lo, 1, SW_MAX_RANK, "a", &a[0]) < 0 || in_view(b_o, b_lo, 1, SW_MAX_RANK, "b", &a[1]) < 0 ||
        out_view(a[0].v.rank, y_lo, y_shape, "y", &a[2]) < 0) {
        release(a, 3);
        return NULL;
    }
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_add_forward(&a[0].v, &a[1].v, &a[2].v);
    SW_KERNEL_END
    return finish_last(s, a, 3);
}

/* ------------------------------------------------------------------ batch normalization */
/* bn_partial_sums(x, x_lo) -> (2, C_view) float64: sums of x and x^2 per channel of x's box */
static PyObject *py_bn_partial_sums(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *x_o, *x_lo;
    if (!PyArg_ParseTuple(args, "OO", &x_o, &x_lo)) {
        return NULL;
    }
    arg_view a[1] = {{0}};
    PyArrayObject *sums = NULL;
    if (in_view(x_o, x_lo, 4, 4, "x", &a[0]) < 0) {
        release(a, 1);
        return NULL;
    }
    int64_t shape[2] = {2, a[0].v.shape[1]};
    if (out_array(2, shape, 1, &sums) < 0) {
        release(a, 1);
        return NULL;
    }
    double *sp = (double *)PyArray_DATA(sums);
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_bn_partial_sums(&a[0].v, sp);
    SW_KERNEL_END
    return finish(s, a, 1, &sums);
}

/* bn_apply(x, x_lo, mean, invstd, gamma, beta, y_lo, y_shape) -> y; the four channel arrays
 * have y_shape[1] entries (from y's channel start); gamma/beta may be None */
static PyObject *py_bn_apply(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *x_o, *x_lo, *mean_o, *invstd_o, *gamma_o, *beta_o, *y_lo, *y_shape;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &x_o, &x_lo, &mean_o, &invstd_o, &gamma_o, &beta_o, &y_lo, &y_shape)) {
        return NULL;
    }
    arg_view a[2] = {{0}};
    PyArrayObject *ch[4] = {NULL, NULL, NULL, NULL};  /* mean, invstd, gamma, beta */
    PyObject *result = NULL;
    int failed = 0;
    if (in_view(x_o, x_lo, 4, 4, "x", &a[0]) < 0 || out_view(4, y_lo, y_shape, "y", &a[1]) < 0) {
        goto done;
    }
    int64_t nc = a[1].v.shape[1];
    ch[0] = channel_array(mean_o, nc, 0, "mean", &failed);
    ch[1] = failed ? NULL : channel_array(invstd_o, nc, 0, "invstd", &failed);
    ch[2] = failed ? NULL : channel_array(gamma_o, nc, 1, "gamma", &failed);
    ch[3] = failed ? NULL : channel_array(beta_o, nc, 1, "beta", &failed);
    if (failed) {
        goto done;
    }
    const float *f[4];
    for (int k = 0; k < 4; k++) {
        f[k] = ch[k] ? (const float *)PyArray_DATA(ch[k]) : NULL;
    }
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_bn_apply(&a[0].v, f[0], f[1], f[2], f[3], &a[1].v);
    SW_KERNEL_END
    if (s != SW_OK) {
        sw_py_raise(s);
        goto done;
    }
    result = (PyObject *)a[1].arr;
    a[1].arr = NULL;
done:
    release(a, 2);
    for (int k = 0; k < 4; k++) {
        Py_XDECREF(ch[k]);
    }
    return result;
}

/* bn_backward_sums(x, x_lo, dy, dy_lo, mean, invstd) -> (2, C_dy) float64: sums of dy and dy * xhat
 * per channel of dy's box; mean/invstd have dy's channel count (from dy's channel start) */
static PyObject *py_bn_backward_sums(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *x_o, *x_lo, *dy_o, *dy_lo, *mean_o, *invstd_o;
    if (!PyArg_ParseTuple(args, "OOOOOO", &x_o, &x_lo, &dy_o, &dy_lo, &mean_o, &invstd_o)) {
        return NULL;
    }
    arg_view a[2] = {{0}};
    PyArrayObject *ch[2] = {NULL, NULL};
    PyArrayObject *sums = NULL;
    PyObject *result = NULL;
    int failed = 0;
    if (in_view(x_o, x_lo, 4, 4, "x", &a[0]) < 0 || in_view(dy_o, dy_lo, 4, 4, "dy", &a[1]) < 0) {
        goto done;
    }
    int64_t nc = a[1].v.shape[1];
    ch[0] = channel_array(mean_o, nc, 0, "mean", &failed);
    ch[1] = failed ? NULL : channel_array(invstd_o, nc, 0, "invstd", &failed);
    int64_t shape[2] = {2, nc};
    if (failed || out_array(2, shape, 1, &sums) < 0) {
        goto done;
    }
    const float *mp = PyArray_DATA(ch[0]), *ip = PyArray_DATA(ch[1]);
    double *sp = PyArray_DATA(sums);
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_bn_backward_sums(&a[0].v, &a[1].v, mp, ip, sp);
    SW_KERNEL_END
    if (s != SW_OK) {
        sw_py_raise(s);
        goto done;
    }
    result = (PyObject *)sums;
    sums = NULL;
done:
    release(a, 2);
    Py_XDECREF(ch[0]);
    Py_XDECREF(ch[1]);
    Py_XDECREF(sums);
    return result;
}

/* bn_backward_apply(x, x_lo, dy, dy_lo, mean, invstd, gamma, global_sums, m, dx_lo, dx_shape) -> dx;
 * channel arrays have dx_shape[1] entries (from dx's channel start), global_sums is (2, dx_shape[1])
 * float64, gamma may be None */
static PyObject *py_bn_backward_apply(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *x_o, *x_lo, *dy_o, *dy_lo, *mean_o, *invstd_o, *gamma_o, *sums_o, *dx_lo, *dx_shape;
    long long count;
    if (!PyArg_ParseTuple(args, "OOOOOOOOLOO", &x_o, &x_lo, &dy_o, &dy_lo, &mean_o, &invstd_o, &gamma_o, &sums_o,
                          &count, &dx_lo, &dx_shape)) {
        return NULL;
    }
    arg_view a[3] = {{0}};  /* x, dy, dx */
    PyArrayObject *ch[3] = {NULL, NULL, NULL};
    PyArrayObject *sums = NULL;
    PyObject *result = NULL;
    int failed = 0;
    if (in_view(x_o, x_lo, 4, 4, "x", &a[0]) < 0 || in_view(dy_o, dy_lo, 4, 4, "dy", &a[1]) < 0 ||
        out_view(4, dx_lo, dx_shape, "dx", &a[2]) < 0) {
        goto done;
    }
    int64_t nc = a[2].v.shape[1];
    ch[0] = channel_array(mean_o, nc, 0, "mean", &failed);
    ch[1] = failed ? NULL : channel_array(invstd_o, nc, 0, "invstd", &failed);
    ch[2] = failed ? NULL : channel_array(gamma_o, nc, 1, "gamma", &failed);
    if (failed) {
        goto done;
    }
    if (!PyArray_Check(sums_o) || PyArray_TYPE((PyArrayObject *)sums_o) != NPY_FLOAT64 ||
        PyArray_NDIM((PyArrayObject *)sums_o) != 2 || PyArray_DIM((PyArrayObject *)sums_o, 0) != 2 ||
        PyArray_DIM((PyArrayObject *)sums_o, 1) != nc) {
        PyErr_Format(PyExc_ValueError, "global_sums must be a (2, %lld) float64 array", (long long)nc);
        goto done;
    }
    sums = (PyArrayObject *)PyArray_FROM_OTF(sums_o, NPY_FLOAT64, NPY_ARRAY_IN_ARRAY);
    if (!sums) {
        goto done;
    }
    const float *mp = PyArray_DATA(ch[0]), *ip = PyArray_DATA(ch[1]);
    const float *gp = ch[2] ? (const float *)PyArray_DATA(ch[2]) : NULL;
    const double *sp = PyArray_DATA(sums);
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_bn_backward_apply(&a[0].v, &a[1].v, mp, ip, gp, sp, (int64_t)count, &a[2].v);
    SW_KERNEL_END
    if (s != SW_OK) {
        sw_py_raise(s);
        goto done;
    }
    result = (PyObject *)a[2].arr;
    a[2].arr = NULL;
done:
    release(a, 3);
    for (int k = 0; k < 3; k++) {
        Py_XDECREF(ch[k]);
    }
    Py_XDECREF(sums);
    return result;
}

/* ------------------------------------------------------------------ softmax cross-entropy */
/* softmax_xent_forward(x, x_lo, labels, p_lo, p_shape) -> (p, loss_sum); labels[i] is the label of
 * global sample x_lo[0] + i (one per row of x) */
static PyObject *py_softmax_xent_forward(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *x_o, *x_lo, *labels_o, *p_lo, *p_shape;
    if (!PyArg_ParseTuple(args, "OOOOO", &x_o, &x_lo, &labels_o, &p_lo, &p_shape)) {
        return NULL;
    }
    arg_view a[2] = {{0}};
    PyArrayObject *labels = NULL;
    if (in_view(x_o, x_lo, 2, 2, "x", &a[0]) < 0 || out_view(2, p_lo, p_shape, "p", &a[1]) < 0 ||
        !(labels = get_labels(labels_o, a[0].v.shape[0]))) {
        release(a, 2);
        return NULL;
    }
    const int32_t *lp = PyArray_DATA(labels);
    double loss = 0.0;
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_softmax_xent_forward(&a[0].v, lp, &a[1].v, &loss);
    SW_KERNEL_END
    Py_DECREF(labels);
    PyArrayObject *p = a[1].arr;
    a[1].arr = NULL;
    if (!finish(s, a, 2, &p)) {
        return NULL;
    }
    return Py_BuildValue("(Nd)", p, loss);
}

/* softmax_xent_backward(p, p_lo, labels, n_total) -> dx over p's box; labels[i] is the label of
 * global sample p_lo[0] + i (one per row of p) */
static PyObject *py_softmax_xent_backward(PyObject *Py_UNUSED(m), PyObject *args) {
    PyObject *p_o, *p_lo, *labels_o;
    long long n_total;
    if (!PyArg_ParseTuple(args, "OOOL", &p_o, &p_lo, &labels_o, &n_total)) {
        return NULL;
    }
    arg_view a[2] = {{0}};  /* p, dx */
    PyArrayObject *labels = NULL;
    if (in_view(p_o, p_lo, 2, 2, "p", &a[0]) < 0 || !(labels = get_labels(labels_o, a[0].v.shape[0]))) {
        release(a, 2);
        return NULL;
    }
    a[1].v = a[0].v;  /* dx has p's box */
    if (out_array(2, a[0].v.shape, 0, &a[1].arr) < 0) {
        Py_DECREF(labels);
        release(a, 2);
        return NULL;
    }
    a[1].v.data = (float *)PyArray_DATA(a[1].arr);
    const int32_t *lp = PyArray_DATA(labels);
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_softmax_xent_backward(&a[0].v, lp, (int64_t)n_total, &a[1].v);
    SW_KERNEL_END
    Py_DECREF(labels);
    return finish_last(s, a, 2);
}

/* ------------------------------------------------------------------ box copies */
/* copy_box / accumulate_box(src, src_lo, dst, dst_lo): in place into dst (C-contiguous writable float32) */
static PyObject *move_box(PyObject *args, int accumulate) {
    PyObject *src_o, *src_lo, *dst_o, *dst_lo;
    if (!PyArg_ParseTuple(args, "OOOO", &src_o, &src_lo, &dst_o, &dst_lo)) {
        return NULL;
    }
    arg_view a[1] = {{0}};
    sw_view dst;
    if (in_view(src_o, src_lo, 1, SW_MAX_RANK, "src", &a[0]) < 0) {
        release(a, 1);
        return NULL;
    }
    PyArrayObject *d = (PyArrayObject *)dst_o;
    if (!PyArray_Check(dst_o) || PyArray_TYPE(d) != NPY_FLOAT32 || !PyArray_ISCARRAY(d) ||
        !PyArray_ISNOTSWAPPED(d) || PyArray_NDIM(d) != a[0].v.rank) {
        release(a, 1);
        PyErr_Format(PyExc_ValueError, "dst must be a writable C-contiguous float32 array of rank %d (src's)",
                     a[0].v.rank);
        return NULL;
    }
    dst.data = (float *)PyArray_DATA(d);
    dst.rank = PyArray_NDIM(d);
    for (int k = 0; k < dst.rank; k++) {
        dst.shape[k] = (int64_t)PyArray_DIM(d, k);
    }
    if (sw_py_ints(dst_lo, dst.rank, dst.lo, 0, "dst's lo") < 0) {
        release(a, 1);
        return NULL;
    }
    sw_status s;
    SW_KERNEL_BEGIN
    s = accumulate ? sw_accumulate_box(&a[0].v, &dst) : sw_copy_box(&a[0].v, &dst);
    SW_KERNEL_END
    release(a, 1);
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    Py_RETURN_NONE;
}

static PyObject *py_copy_box(PyObject *Py_UNUSED(m), PyObject *args) { return move_box(args, 0); }

static PyObject *py_accumulate_box(PyObject *Py_UNUSED(m), PyObject *args) { return move_box(args, 1); }

/* ------------------------------------------------------------------ LSTM element-wise */
/* Views of `n` (array, lo) pairs taken from args[0..2n-1], all of one rank (that of the first). */
static int in_views(PyObject *const *objs, int n, const char *const *names, arg_view *out) {
    for (int k = 0; k < n; k++) {
        int rank = k == 0 ? 1 : out[0].v.rank;
        if (in_view(objs[2 * k], objs[2 * k + 1], rank, k == 0 ? SW_MAX_RANK : rank, names[k], &out[k]) < 0) {
            return -1;
        }
    }
    return 0;
}

/* lstm_cell_forward(i, i_lo, f, f_lo, g, g_lo, c_prev, c_prev_lo, c_lo, c_shape) -> c */
static PyObject *py_lstm_cell_forward(PyObject *Py_UNUSED(m), PyObject *args) {
    static const char *const names[4] = {"i", "f", "g", "c_prev"};
    PyObject *o[10];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9])) {
        return NULL;
    }
    arg_view a[5] = {{0}};
    if (in_views(o, 4, names, a) < 0 || out_view(a[0].v.rank, o[8], o[9], "c", &a[4]) < 0) {
        release(a, 5);
        return NULL;
    }
    const sw_view *in[4] = {&a[0].v, &a[1].v, &a[2].v, &a[3].v};
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_lstm_cell_forward(in, &a[4].v);
    SW_KERNEL_END
    return finish_last(s, a, 5);
}

/* lstm_cell_backward(i, i_lo, f, f_lo, g, g_lo, c_prev, c_prev_lo, dc, dc_lo, slot, dx_lo, dx_shape) -> dx */
static PyObject *py_lstm_cell_backward(PyObject *Py_UNUSED(m), PyObject *args) {
    static const char *const names[5] = {"i", "f", "g", "c_prev", "dc"};
    PyObject *o[12];
    int slot;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOiOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8],
                          &o[9], &slot, &o[10], &o[11])) {
        return NULL;
    }
    if (slot < 0 || slot > 3) {
        PyErr_Format(PyExc_ValueError, "slot must be 0..3 (i, f, g, c_prev), got %d", slot);
        return NULL;
    }
    arg_view a[6] = {{0}};
    if (in_views(o, 5, names, a) < 0 || out_view(a[0].v.rank, o[10], o[11], "dx", &a[5]) < 0) {
        release(a, 6);
        return NULL;
    }
    const sw_view *in[4] = {&a[0].v, &a[1].v, &a[2].v, &a[3].v};
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_lstm_cell_backward(in, &a[4].v, slot, &a[5].v);
    SW_KERNEL_END
    return finish_last(s, a, 6);
}

/* lstm_hidden_forward(o, o_lo, c, c_lo, h_lo, h_shape) -> h */
static PyObject *py_lstm_hidden_forward(PyObject *Py_UNUSED(m), PyObject *args) {
    static const char *const names[2] = {"o", "c"};
    PyObject *o[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5])) {
        return NULL;
    }
    arg_view a[3] = {{0}};
    if (in_views(o, 2, names, a) < 0 || out_view(a[0].v.rank, o[4], o[5], "h", &a[2]) < 0) {
        release(a, 3);
        return NULL;
    }
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_lstm_hidden_forward(&a[0].v, &a[1].v, &a[2].v);
    SW_KERNEL_END
    return finish_last(s, a, 3);
}

/* lstm_hidden_backward(o, o_lo, c, c_lo, dh, dh_lo, slot, dx_lo, dx_shape) -> dx */
static PyObject *py_lstm_hidden_backward(PyObject *Py_UNUSED(m), PyObject *args) {
    static const char *const names[3] = {"o", "c", "dh"};
    PyObject *o[8];
    int slot;
    if (!PyArg_ParseTuple(args, "OOOOOOiOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &slot, &o[6], &o[7])) {
        return NULL;
    }
    if (slot < 0 || slot > 1) {
        PyErr_Format(PyExc_ValueError, "slot must be 0 (o) or 1 (c), got %d", slot);
        return NULL;
    }
    arg_view a[4] = {{0}};
    if (in_views(o, 3, names, a) < 0 || out_view(a[0].v.rank, o[6], o[7], "dx", &a[3]) < 0) {
        release(a, 4);
        return NULL;
    }
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_lstm_hidden_backward(&a[0].v, &a[1].v, &a[2].v, slot, &a[3].v);
    SW_KERNEL_END
    return finish_last(s, a, 4);
}

/* kernel_seconds() -> float */
static PyObject *py_kernel_seconds(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(args)) {
    return PyFloat_FromDouble(sw_py_kernel_seconds());
}

/* all_finite(a) -> bool: no NaN or infinity in a float32 C-contiguous array. */
static PyObject *py_all_finite(PyObject *Py_UNUSED(m), PyObject *arg) {
    if (!PyArray_Check(arg) || PyArray_TYPE((PyArrayObject *)arg) != NPY_FLOAT32 ||
        !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)arg)) {
        PyErr_SetString(PyExc_TypeError, "all_finite needs a C-contiguous float32 array");
        return NULL;
    }
    return PyBool_FromLong(sw_py_all_finite((PyArrayObject *)arg));
}

/* ------------------------------------------------------------------ registration */
static PyMethodDef methods[] = {
    {"all_finite", py_all_finite, METH_O,
     "all_finite(a) -> bool: no NaN or infinity in a C-contiguous float32 array"},
    {"kernel_seconds", py_kernel_seconds, METH_NOARGS,
     "kernel_seconds() -> float\n"
     "Wall seconds the calling thread has spent inside the kernels (with the interpreter lock "
     "released) since it started; the profile times shards by its differences."},
    {"pool2d_forward", py_pool2d_forward, METH_VARARGS,
     "pool2d_forward(kind, x, x_lo, y_lo, y_shape, kernel, stride, padding) -> y\n"
     "kind 'max' (first maximum wins) or 'avg' (divisor kh*kw, padding included)."},
    {"pool2d_backward", py_pool2d_backward, METH_VARARGS,
     "pool2d_backward(kind, x, x_lo, dy, dy_lo, dx_lo, dx_shape, kernel, stride, padding) -> dx\n"
     "The partial dx over dx's box from dy's box only; x may be None for 'avg'."},
    {"relu_forward", py_relu_forward, METH_VARARGS, "relu_forward(x, x_lo, y_lo, y_shape) -> y"},
    {"relu_backward", py_relu_backward, METH_VARARGS,
     "relu_backward(y, y_lo, dy, dy_lo, dx_lo, dx_shape) -> dx = dy * (y > 0)"},
    {"add_forward", py_add_forward, METH_VARARGS, "add_forward(a, a_lo, b, b_lo, y_lo, y_shape) -> y = a + b"},
    {"lstm_cell_forward", py_lstm_cell_forward, METH_VARARGS,
     "lstm_cell_forward(i, i_lo, f, f_lo, g, g_lo, c_prev, c_prev_lo, c_lo, c_shape) -> c\n"
     "c = sigmoid(f) * c_prev + sigmoid(i) * tanh(g) over c's box."},
    {"lstm_cell_backward", py_lstm_cell_backward, METH_VARARGS,
     "lstm_cell_backward(i, i_lo, f, f_lo, g, g_lo, c_prev, c_prev_lo, dc, dc_lo, slot, dx_lo, dx_shape) -> dx\n"
     "The gradient of input slot (0 i, 1 f, 2 g, 3 c_prev) over dx's box."},
    {"lstm_hidden_forward", py_lstm_hidden_forward, METH_VARARGS,
     "lstm_hidden_forward(o, o_lo, c, c_lo, h_lo, h_shape) -> h = sigmoid(o) * tanh(c) over h's box"},
    {"lstm_hidden_backward", py_lstm_hidden_backward, METH_VARARGS,
     "lstm_hidden_backward(o, o_lo, c, c_lo, dh, dh_lo, slot, dx_lo, dx_shape) -> dx\n"
     "The gradient of input slot (0 o, 1 c) over dx's box."},
    {"bn_partial_sums", py_bn_partial_sums, METH_VARARGS,
     "bn_partial_sums(x, x_lo) -> (2, C_view) float64: per-channel sums of x and x^2 over x's box"},
    {"bn_apply", py_bn_apply, METH_VARARGS,
     "bn_apply(x, x_lo, mean, invstd, gamma, beta, y_lo, y_shape) -> y\n"
     "Channel arrays (float32) start at y's channel start; gamma/beta may be None."},
    {"bn_backward_sums", py_bn_backward_sums, METH_VARARGS,
     "bn_backward_sums(x, x_lo, dy, dy_lo, mean, invstd) -> (2, C_dy) float64: sums of dy and dy * xhat"},
    {"bn_backward_apply", py_bn_backward_apply, METH_VARARGS,
     "bn_backward_apply(x, x_lo, dy, dy_lo, mean, invstd, gamma, global_sums, m, dx_lo, dx_shape) -> dx\n"
     "Channel arrays start at dx's channel start; m = N*H*W of the whole minibatch."},
    {"softmax_xent_forward", py_softmax_xent_forward, METH_VARARGS,
     "softmax_xent_forward(x, x_lo, labels, p_lo, p_shape) -> (p, loss_sum)\n"
     "x holds whole rows; labels[i] belongs to sample x_lo[0] + i; loss_sum counts the rows whose label "
     "lies in p's class range."},
    {"softmax_xent_backward", py_softmax_xent_backward, METH_VARARGS,
     "softmax_xent_backward(p, p_lo, labels, n_total) -> dx = (p - onehot(label)) / n_total over p's box\n"
     "labels[i] belongs to sample p_lo[0] + i."},
    {"copy_box", py_copy_box, METH_VARARGS,
     "copy_box(src, src_lo, dst, dst_lo): dst[i] = src[i] on the intersection of the boxes (in place)"},
    {"accumulate_box", py_accumulate_box, METH_VARARGS,
     "accumulate_box(src, src_lo, dst, dst_lo): dst[i] += src[i] on the intersection of the boxes (in place)"},
    {NULL, NULL, 0, NULL},
};

int sw_py_register_misc_kernels(PyObject *module) {
    import_array1(-1);  /* this file's own NumPy API table */
    if (sw_py_kernel_args_ready() < 0) {
        return -1;
    }
    return PyModule_AddFunctions(module, methods);
}
