/* kernels_norm_py.c -- test entry points for the normalizing CPU kernels: batch normalization
 * (partial sums, apply, the backward's sums and apply) and softmax cross-entropy.
 *
 * Kept apart from kernels_misc_py.c (which has pooling, element-wise, LSTM and box copies) by
 * concept: these kernels reduce over a minibatch or a row.  The same rules as there: float32
 * arrays with the global coordinates of their first element (`*_lo` tuples), outputs NaN-filled
 * before the call, the GIL released around each kernel; anything malformed is a ValueError.
 *
 * Labels follow softmax.c: labels[i] belongs to global sample x_lo[0] + i in the forward pass
 * (one label per row of x) and p_lo[0] + i in the backward pass (one per row of p).
 */
#include "kernel_views.h"  /* arg_view and the helpers; CPython and NumPy C API */

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

static PyMethodDef methods[] = {
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
    {NULL, NULL, 0, NULL},
};

int sw_py_register_norm_kernels(PyObject *module) {
    import_array1(-1);  /* this file's own NumPy API table */
    if (sw_py_kernel_args_ready() < 0) {
        return -1;
    }
    return PyModule_AddFunctions(module, methods);
}
