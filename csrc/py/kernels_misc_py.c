/* kernels_misc_py.c -- test entry points for the misc CPU kernels: pooling and box
 * copies, whose tests reach what the runtime cannot (NaN, infinity, ties and signed zeros in
 * a max pool, whose inputs the runtime refuses when non-finite; arbitrary and empty boxes of
 * rank 1..5); the helpers: kernel_views.h.  ReLU, add, the LSTM cell and hidden state, batch
 * normalization and softmax cross-entropy are checked through the runtime by the conformance
 * harness (tests/ops/conformance.py) instead.
 *
 * Each function takes float32 NumPy arrays with the global coordinates of
 * their first element (`*_lo` tuples), builds sw_views, runs one kernel with
 * the GIL released and returns the output as a new array.  Output arrays are
 * filled with NaN before the call, so an element a kernel forgets to write
 * shows up in the tests.  Everything malformed -- wrong dtype, rank, lengths,
 * inconsistent boxes -- raises ValueError.
 */
#include "kernel_views.h"  /* arg_view and the helpers; CPython and NumPy C API */

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
