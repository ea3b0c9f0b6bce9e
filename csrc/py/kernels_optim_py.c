/* kernels_optim_py.c -- test entry point for the update kernel (csrc/cpu/optim.c):
 *
 *   optimizer_update(kind, lr, weight_decay, momentum, dampening, nesterov, beta1, beta2, eps,
 *                    t, p, grad, s0, s1=None)
 *
 * updates p, s0 (and s1) in place as one update task does: kind 0 SGD (s0 the momentum
 * buffer, t > 1 once it holds history), 1 Adam, 2 AdamW (s0 exp_avg, s1 exp_avg_sq, t the
 * step from 1).  Arrays are writable C-contiguous float32 of one size (grad needs not be
 * writable); the optimizer is checked as the runtime checks it (sw_optim_check).  Anything
 * malformed raises ValueError; the GIL is released in the kernel.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>  /* CPython API */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>  /* NumPy C API: PyArray_* (this file imports its own API table) */

#include "../cpu/optim.h"    /* sw_optimizer, sw_optim_check, sw_optim_update */
#include "kernel_args.h"      /* SW_KERNEL_BEGIN / SW_KERNEL_END */
#include "pyerr.h"            /* sw_py_raise */

/* obj as a float32 C-contiguous array of n elements (n < 0: any, set to its size). */
static int float_array(PyObject *obj, const char *name, int writable, npy_intp *n, float **data) {
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_ValueError, "%s must be a NumPy array", name);
        return -1;
    }
    PyArrayObject *a = (PyArrayObject *)obj;
    if (PyArray_TYPE(a) != NPY_FLOAT32 || !PyArray_IS_C_CONTIGUOUS(a) || (writable && !PyArray_ISWRITEABLE(a))) {
        PyErr_Format(PyExc_ValueError, "%s must be a%s C-contiguous float32 array", name,
                     writable ? " writable" : "");
        return -1;
    }
    if (*n >= 0 && PyArray_SIZE(a) != *n) {
        PyErr_Format(PyExc_ValueError, "%s has %zd elements, p has %zd", name, (Py_ssize_t)PyArray_SIZE(a),
                     (Py_ssize_t)*n);
        return -1;
    }
    *n = PyArray_SIZE(a);
    *data = PyArray_DATA(a);
    return 0;
}

static PyObject *py_optimizer_update(PyObject *Py_UNUSED(m), PyObject *args) {
    sw_optimizer o = {0};
    long long t;
    PyObject *p_o, *g_o, *s0_o, *s1_o = Py_None;
    if (!PyArg_ParseTuple(args, "iddddpdddLOOO|O", &o.kind, &o.lr, &o.weight_decay, &o.momentum, &o.dampening,
                          &o.nesterov, &o.beta1, &o.beta2, &o.eps, &t, &p_o, &g_o, &s0_o, &s1_o)) {
        return NULL;
    }
    sw_status s = sw_optim_check(&o, s1_o == Py_None ? 1 : 2);
    if (s != SW_OK) {
        return sw_py_raise(s);
    }
    if (t < 1) {
        PyErr_Format(PyExc_ValueError, "t must be >= 1 (the update count including this one), got %lld", t);
        return NULL;
    }
    npy_intp n = -1;
    float *p, *s0, *s1 = NULL, *g;
    if (float_array(p_o, "p", 1, &n, &p) < 0 || float_array(g_o, "grad", 0, &n, &g) < 0 ||
        float_array(s0_o, "s0", 1, &n, &s0) < 0 || (s1_o != Py_None && float_array(s1_o, "s1", 1, &n, &s1) < 0)) {
        return NULL;
    }
    SW_KERNEL_BEGIN
    sw_optim_update(&o, (int64_t)t, p, g, s0, s1, (int64_t)n);
    SW_KERNEL_END
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"optimizer_update", py_optimizer_update, METH_VARARGS,
     "optimizer_update(kind, lr, weight_decay, momentum, dampening, nesterov, beta1, beta2, eps, t, p, grad, s0, "
     "s1=None): one update task's arithmetic in place (kind 0 SGD, 1 Adam, 2 AdamW)"},
    {NULL, NULL, 0, NULL},
};

int sw_py_register_optim_kernels(PyObject *module) {
    import_array1(-1);  /* this file's own NumPy API table */
    if (sw_py_kernel_args_ready() < 0) {
        return -1;
    }
    return PyModule_AddFunctions(module, methods);
}
