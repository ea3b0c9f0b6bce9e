/*
 * kernels_conv_py.c -- test entry points of the convolution CPU kernels
 * (csrc/cpu/conv*.c) and the linear forward (linear.c), so tests can compare them with
 * python/shardwise/reference/__init__.py on full tensors and on sharded views, with
 * either convolution algorithm forced (conv_algorithm: im2col against the direct loops,
 * which the runtime picks by size), and benchmarks can time one GEMM (linear_forward).
 * The linear backward passes are checked through the runtime by the conformance
 * harness (tests/ops/conformance.py).
 *
 * Every array is a float32 NumPy array (any other dtype is a ValueError, never
 * a silent cast); non-contiguous arrays are copied.  A view is an array plus
 * its `lo`: the global coordinates of its first element (None = all zeros).
 * The kernel runs with the GIL released; a failed check in the kernel comes
 * back as ValueError with the kernel's message.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>             /* CPython API */
#include <numpy/arrayobject.h>  /* NumPy C API: PyArray_* (NPY_NO_DEPRECATED_API is set by setup.py) */
#include <string.h>              /* strcmp */

#include "../cpu/kernels.h"  /* sw_view, sw_window, sw_conv2d_*, sw_linear_* */
#include "../internal.h"    /* sw_status, sw_last_error */
#include "kernel_args.h"     /* sw_py_ints, sw_py_pair, sw_py_float32, sw_py_view, sw_py_output */
#include "pyerr.h"           /* sw_py_raise */

/* ------------------------------------------------------------------ conversion */


/* The arrays one call holds, released together. */
typedef struct {
    PyArrayObject *a[8];
    int n;
} held;

static PyArrayObject *hold(held *h, PyArrayObject *a) {
    if (a) {
        h->a[h->n++] = a;
    }
    return a;
}

static void release(held *h) {
    for (int i = 0; i < h->n; i++) {
        Py_DECREF(h->a[i]);
    }
    h->n = 0;
}

/* An optional (b, b_lo) pair: b may be None (no bias). Returns 0 on error. */
static int optional_view(held *h, PyObject *obj, PyObject *lo_obj, int ndim, sw_view *v, int *present,
                         const char *what, const char *lo_what) {
    *present = obj != Py_None;
    if (!*present) {
        return 1;
    }
    int64_t lo[SW_MAX_RANK];
    PyArrayObject *a = hold(h, sw_py_float32(obj, ndim, ndim, what));
    if (!a || sw_py_ints(lo_obj, ndim, lo, SW_PY_NONE_IS_ZEROS, lo_what) < 0) {
        return 0;
    }
    *v = sw_py_view(a, lo);
    return 1;
}

/* A required (array, lo) pair. */
static int required_view(held *h, PyObject *obj, PyObject *lo_obj, int ndim, sw_view *v, const char *what,
                         const char *lo_what) {
    int present;
    if (obj == Py_None) {
        PyErr_Format(PyExc_ValueError, "%s must be a %d-D float32 NumPy array, got None", what, ndim);
        return 0;
    }
    return optional_view(h, obj, lo_obj, ndim, v, &present, what, lo_what);
}

/* A new zero output array with its view: shape and lo from Python sequences. */
static PyArrayObject *output_view(held *h, PyObject *lo_obj, PyObject *shape_obj, int ndim, sw_view *v,
                                  const char *what) {
    int64_t lo[SW_MAX_RANK], shape[SW_MAX_RANK];
    char lo_what[64], shape_what[64];
    snprintf(lo_what, sizeof lo_what, "%s_lo", what);
    snprintf(shape_what, sizeof shape_what, "%s_shape", what);
    if (sw_py_ints(lo_obj, ndim, lo, SW_PY_NONE_IS_ZEROS, lo_what) < 0 ||
        sw_py_ints(shape_obj, ndim, shape, SW_PY_NONNEG, shape_what) < 0) {
        return NULL;
    }
    PyArrayObject *a = hold(h, sw_py_output(ndim, shape, 0, 0, shape_what));
    if (a) {
        *v = sw_py_view(a, lo);
    }
    return a;
}

/* After the kernel ran: its output (a new reference) or its error as a Python exception;
 * the arrays the call held are released either way. */
static PyObject *finish(held *h, sw_status s, PyArrayObject *out) {
    if (s != SW_OK) {
        release(h);
        return sw_py_raise(s);
    }
    Py_INCREF(out);
    release(h);
    return (PyObject *)out;
}

/* ------------------------------------------------------------------ convolution */

/* The optional dilation (an int or a pair, default 1) and output channels per group (default
 * 0: dense) of a convolution call into p.  Returns 0 on error. */
static int conv_extras(PyObject *dilation, long long group_co, sw_window *p) {
    p->dh = p->dw = 1;
    p->group_co = group_co;
    return !dilation || sw_py_pair(dilation, 1, 1 << 20, "dilation", &p->dh, &p->dw) >= 0;
}

static PyObject *py_conv2d_forward(PyObject *self, PyObject *args, PyObject *kwds) {
    (void)self;
    static char *kwlist[] = {"x", "x_lo", "w", "w_lo", "b", "b_lo", "y_lo", "y_shape", "stride", "padding",
                             "relu", "dilation", "group_co", NULL};
    PyObject *xo, *xlo, *wo, *wlo, *bo, *blo, *ylo, *yshape, *stride = NULL, *padding = NULL, *dilation = NULL;
    int relu = 0;
    long long group_co = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOO|OOpOL", kwlist, &xo, &xlo, &wo, &wlo, &bo, &blo, &ylo,
                                     &yshape, &stride, &padding, &relu, &dilation, &group_co)) {
        return NULL;
    }
    held h = {.n = 0};
    sw_view x, w, b, y;
    int has_b;
    sw_window p = {.sh = 1, .sw = 1, .relu = relu};
    if (!required_view(&h, xo, xlo, 4, &x, "x", "x_lo") || !required_view(&h, wo, wlo, 4, &w, "w", "w_lo") ||
        !optional_view(&h, bo, blo, 1, &b, &has_b, "b", "b_lo") || !conv_extras(dilation, group_co, &p) ||
        (stride && sw_py_pair(stride, 1, 1 << 20, "stride", &p.sh, &p.sw) < 0) ||
        (padding && sw_py_pair(padding, 0, 1 << 20, "padding", &p.ph, &p.pw) < 0)) {
        release(&h);
        return NULL;
    }
    PyArrayObject *ya = output_view(&h, ylo, yshape, 4, &y, "y");
    if (!ya) {
        release(&h);
        return NULL;
    }
    p.kh = w.shape[2];
    p.kw = w.shape[3];
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_conv2d_forward(&x, &w, has_b ? &b : NULL, &y, &p);
    SW_KERNEL_END
    return finish(&h, s, ya);
}

static PyObject *py_conv2d_backward_data(PyObject *self, PyObject *args, PyObject *kwds) {
    (void)self;
    static char *kwlist[] = {"w", "w_lo", "dy", "dy_lo", "dx_lo", "dx_shape", "kernel", "stride", "padding",
                             "dilation", "group_co", "relu_y", "relu_y_lo", NULL};
    PyObject *wo, *wlo, *dyo, *dylo, *dxlo, *dxshape, *kernel, *stride = NULL, *padding = NULL, *dilation = NULL;
    PyObject *yo = Py_None, *ylo = Py_None;
    long long group_co = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOO|OOOLOO", kwlist, &wo, &wlo, &dyo, &dylo, &dxlo, &dxshape,
                                     &kernel, &stride, &padding, &dilation, &group_co, &yo, &ylo)) {
        return NULL;
    }
    held h = {.n = 0};
    sw_view w, dy, dx, y;
    int has_y;
    sw_window p = {.sh = 1, .sw = 1};
    if (!required_view(&h, wo, wlo, 4, &w, "w", "w_lo") || !required_view(&h, dyo, dylo, 4, &dy, "dy", "dy_lo") ||
        !optional_view(&h, yo, ylo, 4, &y, &has_y, "relu_y", "relu_y_lo") ||
        sw_py_pair(kernel, 1, 1 << 20, "kernel", &p.kh, &p.kw) < 0 || !conv_extras(dilation, group_co, &p) ||
        (stride && sw_py_pair(stride, 1, 1 << 20, "stride", &p.sh, &p.sw) < 0) ||
        (padding && sw_py_pair(padding, 0, 1 << 20, "padding", &p.ph, &p.pw) < 0)) {
        release(&h);
        return NULL;
    }
    PyArrayObject *dxa = output_view(&h, dxlo, dxshape, 4, &dx, "dx");
    if (!dxa) {
        release(&h);
        return NULL;
    }
    sw_status s;
    SW_KERNEL_BEGIN
    s = has_y ? sw_conv2d_backward_data_relu(&w, &dy, &y, &dx, &p) : sw_conv2d_backward_data(&w, &dy, &dx, &p);
    SW_KERNEL_END
    return finish(&h, s, dxa);
}

/* The (dw, db) pair returned by the weight-gradient entry points. */
static PyObject *weight_result(PyArrayObject *dwa, PyArrayObject *dba) {
    if (dba) {
        return Py_BuildValue("(OO)", dwa, dba);
    }
    return Py_BuildValue("(OO)", dwa, Py_None);
}

/* dw's view for dy's output-channel range [lo, lo + extent) of a weight of full shape w_shape[0..rank). */
static int weight_grad_views(held *h, const int64_t *w_shape, int rank, int64_t co_lo, int64_t co_n, int with_bias,
                             sw_view *dw, sw_view *db, PyArrayObject **dwa, PyArrayObject **dba) {
    for (int d = 0; d < rank; d++) {
        if (w_shape[d] < 0) {
            PyErr_SetString(PyExc_ValueError, "w_shape must not hold negative extents");
            return 0;
        }
    }
    if (co_lo < 0 || co_lo + co_n > w_shape[0]) {
        PyErr_Format(PyExc_ValueError, "dy's output range [%lld, %lld) lies outside the weight's [0, %lld)",
                     (long long)co_lo, (long long)(co_lo + co_n), (long long)w_shape[0]);
        return 0;
    }
    int64_t shape[SW_MAX_RANK], lo[SW_MAX_RANK] = {0};
    for (int d = 0; d < rank; d++) {
        shape[d] = w_shape[d];
    }
    shape[0] = co_n;
    lo[0] = co_lo;
    *dwa = hold(h, sw_py_output(rank, shape, 0, 0, "dw"));
    if (!*dwa) {
        return 0;
    }
    *dw = sw_py_view(*dwa, lo);
    *dba = NULL;
    if (with_bias) {
        *dba = hold(h, sw_py_output(1, &co_n, 0, 0, "db"));
        if (!*dba) {
            return 0;
        }
        *db = sw_py_view(*dba, &co_lo);
    }
    return 1;
}

static PyObject *py_conv2d_backward_weight(PyObject *self, PyObject *args, PyObject *kwds) {
    (void)self;
    static char *kwlist[] = {"x", "x_lo", "dy", "dy_lo", "w_shape", "stride", "padding", "with_bias", "dilation",
                             "group_co", "relu_y", "relu_y_lo", NULL};
    PyObject *xo, *xlo, *dyo, *dylo, *wshape, *stride = NULL, *padding = NULL, *dilation = NULL;
    PyObject *yo = Py_None, *ylo = Py_None;
    int with_bias = 1, has_y;
    long long group_co = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO|OOpOLOO", kwlist, &xo, &xlo, &dyo, &dylo, &wshape, &stride,
                                     &padding, &with_bias, &dilation, &group_co, &yo, &ylo)) {
        return NULL;
    }
    held h = {.n = 0};
    sw_view x, dy, dw, db, y;
    int64_t ws[4];
    sw_window p = {.sh = 1, .sw = 1};
    PyArrayObject *dwa, *dba;
    if (!required_view(&h, xo, xlo, 4, &x, "x", "x_lo") || !required_view(&h, dyo, dylo, 4, &dy, "dy", "dy_lo") ||
        !optional_view(&h, yo, ylo, 4, &y, &has_y, "relu_y", "relu_y_lo") ||
        sw_py_ints(wshape, 4, ws, SW_PY_NONNEG, "w_shape") < 0 || !conv_extras(dilation, group_co, &p) ||
        (stride && sw_py_pair(stride, 1, 1 << 20, "stride", &p.sh, &p.sw) < 0) ||
        (padding && sw_py_pair(padding, 0, 1 << 20, "padding", &p.ph, &p.pw) < 0) ||
        !weight_grad_views(&h, ws, 4, dy.lo[1], dy.shape[1], with_bias, &dw, &db, &dwa, &dba)) {
        release(&h);
        return NULL;
    }
    p.kh = ws[2];
    p.kw = ws[3];
    sw_status s;
    SW_KERNEL_BEGIN
    s = has_y ? sw_conv2d_backward_weight_relu(&x, &dy, &y, &dw, with_bias ? &db : NULL, &p)
              : sw_conv2d_backward_weight(&x, &dy, &dw, with_bias ? &db : NULL, &p);
    SW_KERNEL_END
    PyObject *result = s == SW_OK ? weight_result(dwa, dba) : sw_py_raise(s);
    release(&h);
    return result;
}

/* ------------------------------------------------------------------ linear */

static PyObject *py_linear_forward(PyObject *self, PyObject *args, PyObject *kwds) {
    (void)self;
    static char *kwlist[] = {"x", "x_lo", "w", "w_lo", "b", "b_lo", "y_lo", "y_shape", "relu", NULL};
    PyObject *xo, *xlo, *wo, *wlo, *bo, *blo, *ylo, *yshape;
    int relu = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOO|p", kwlist, &xo, &xlo, &wo, &wlo, &bo, &blo, &ylo,
                                     &yshape, &relu)) {
        return NULL;
    }
    held h = {.n = 0};
    sw_view x, w, b, y;
    int has_b;
    if (!required_view(&h, xo, xlo, 2, &x, "x", "x_lo") || !required_view(&h, wo, wlo, 2, &w, "w", "w_lo") ||
        !optional_view(&h, bo, blo, 1, &b, &has_b, "b", "b_lo")) {
        release(&h);
        return NULL;
    }
    PyArrayObject *ya = output_view(&h, ylo, yshape, 2, &y, "y");
    if (!ya) {
        release(&h);
        return NULL;
    }
    sw_status s;
    SW_KERNEL_BEGIN
    s = sw_linear_forward(&x, &w, has_b ? &b : NULL, &y, relu);
    SW_KERNEL_END
    return finish(&h, s, ya);
}

/* ------------------------------------------------------------------ the algorithm and the instruction set */
static const char *const algorithm_names[] = {"auto", "im2col", "direct"};
static const char *const isa_names[] = {"auto", "avx2", "avx512", "none"};

/* The process-wide setting `what` (name=None: read it): its index among `names[0..n)` set first when
 * named, then the setting in effect as its name; ValueError naming `choices` for another name. */
static PyObject *named_setting(PyObject *args, PyObject *kwds, const char *what, const char *choices,
                               const char *const *names, int n, sw_status (*set)(int), int (*get)(void)) {
    static char *kwlist[] = {"name", NULL};
    const char *name = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|z", kwlist, &name)) {
        return NULL;
    }
    if (name) {
        int a = -1;
        for (int k = 0; k < n; k++) {
            if (strcmp(name, names[k]) == 0) {
                a = k;
            }
        }
        if (a < 0) {
            return PyErr_Format(PyExc_ValueError, "%s must be %s, got %R", what, choices, PyTuple_GET_ITEM(args, 0));
        }
        sw_status s = set(a);
        if (s != SW_OK) {
            return sw_py_raise(s);
        }
    }
    return PyUnicode_FromString(names[get()]);
}

static sw_status set_algorithm(int a) { return sw_conv_set_algorithm((sw_conv_algorithm)a); }
static int get_algorithm(void) { return (int)sw_conv_get_algorithm(); }
static sw_status set_isa(int a) { return sw_conv_set_isa((sw_conv_isa)a); }
static int get_isa(void) { return (int)sw_conv_get_isa(); }

/* conv_algorithm(name=None) -> str: the convolutions' algorithm (process-wide), set first when named. */
static PyObject *py_conv_algorithm(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwds) {
    return named_setting(args, kwds, "conv algorithm", "'auto', 'im2col' or 'direct'", algorithm_names, 3,
                         set_algorithm, get_algorithm);
}

/* conv_isa(name=None) -> str: the direct loops' instruction set in effect (process-wide), set first
 * when named ('auto', 'avx2', 'avx512'); 'none' where the CPU has no AVX2 + FMA. */
static PyObject *py_conv_isa(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwds) {
    return named_setting(args, kwds, "conv instruction set", "'auto', 'avx2' or 'avx512'", isa_names, 3, set_isa,
                         get_isa);
}

/* conv_isa_calls() -> {"avx2": n, "avx512": n}: how often each set's direct loops ran. */
static PyObject *py_conv_isa_calls(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(args)) {
    long long a, b;
    sw_conv_isa_calls(&a, &b);
    return Py_BuildValue("{s:L,s:L}", "avx2", a, "avx512", b);
}

/* ------------------------------------------------------------------ registration */

#define KW (METH_VARARGS | METH_KEYWORDS)
#define FN(f) ((PyCFunction)(void (*)(void))(f))

static PyMethodDef methods[] = {
    {"conv2d_forward", FN(py_conv2d_forward), KW,
     "conv2d_forward(x, x_lo, w, w_lo, b, b_lo, y_lo, y_shape, stride=1, padding=0, relu=False, dilation=1,\n"
     "               group_co=0) -> y\n"
     "y's box (global lo, shape) of conv2d(x, w) + b; x and w are views (array, global lo); b may be None.\n"
     "Reads of x outside its view are zero padding.  group_co > 0: a grouped convolution with that many\n"
     "output channels per group (w (Co, Cig, kh, kw))."},
    {"conv2d_backward_data", FN(py_conv2d_backward_data), KW,
     "conv2d_backward_data(w, w_lo, dy, dy_lo, dx_lo, dx_shape, kernel, stride=1, padding=0, dilation=1,\n"
     "                     group_co=0, relu_y=None, relu_y_lo=None) -> dx\n"
     "The partial input gradient over dx's box from dy's box only (contributions outside dx's box dropped);\n"
     "with relu_y (the output of a fused ReLU over dy's box) through the ReLU: dy where relu_y > 0, else 0."},
    {"conv2d_backward_weight", FN(py_conv2d_backward_weight), KW,
     "conv2d_backward_weight(x, x_lo, dy, dy_lo, w_shape, stride=1, padding=0, with_bias=True, dilation=1,\n"
     "                       group_co=0, relu_y=None, relu_y_lo=None) -> (dw, db)\n"
     "dw (dy's Co range, Ci, kh, kw) and db (dy's Co range, or None) summed over dy's box;\n"
     "with relu_y as in conv2d_backward_data."},
    {"conv_isa_calls", FN(py_conv_isa_calls), METH_NOARGS,
     "conv_isa_calls() -> {'avx2': n, 'avx512': n}: how often each instruction set's direct loops ran."},
    {"conv_isa", FN(py_conv_isa), KW,
     "conv_isa(name=None) -> str\n"
     "The direct convolution loops' vector instructions for the whole process, set first when name is\n"
     "given: 'auto' (AVX-512 where the CPU has it, else AVX2), 'avx2' or 'avx512' (ValueError where the\n"
     "CPU lacks it); returns the set in effect, 'none' on a CPU without AVX2 and FMA.  The same bits either way."},
    {"conv_algorithm", FN(py_conv_algorithm), KW,
     "conv_algorithm(name=None) -> str\n"
     "The convolutions' algorithm for the whole process, set first when name is given: 'auto' (the\n"
     "default: the direct loops where they pay, else im2col + GEMM), 'im2col', or 'direct' (the direct\n"
     "loops wherever they apply; ValueError on a CPU without AVX2 and FMA).  For tests and benchmarks."},
    {"linear_forward", FN(py_linear_forward), KW,
     "linear_forward(x, x_lo, w, w_lo, b, b_lo, y_lo, y_shape, relu=False) -> y\n"
     "y's box of x w^T + b; b may be None."},
    {NULL, NULL, 0, NULL},
};

int sw_py_register_conv_kernels(PyObject *module) {
    import_array1(-1);  /* this file's own NumPy C-API table */
    if (sw_py_kernel_args_ready() < 0) {
        return -1;
    }
    return PyModule_AddFunctions(module, methods);
}
