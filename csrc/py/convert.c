/* convert.c -- the bindings' shared conversions and checks (declared in problem_py.h): NumPy
 * arrays in, a Problem or Runtime ready for a call, an op index in range.  Every binding file uses them;
 * module.c, which registers the files, sits above. */
#include "problem_py.h"  /* ProblemObject; CPython and NumPy C API */
#include "runtime_py.h"  /* RuntimeObject */
#include "../exec/runtime_internal.h"  /* struct sw_runtime: the bindings report on its insides */

int sw_py_convert_init(void) {
    import_array1(-1);  /* this file's own NumPy API table */
    return 0;
}

/* A C-contiguous, aligned array of `type` (a new reference) or NULL with an exception. */
PyArrayObject *sw_py_array(PyObject *obj, int type, int ndim, const char *what) {
    PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(obj, type, ndim, ndim, NPY_ARRAY_IN_ARRAY);
    if (!a) {
        PyErr_Format(PyExc_ValueError, "%s must be a %d-D array of %s", what, ndim,
                     type == NPY_INT64 ? "int64" : type == NPY_INT32 ? "int32" : "float64");
    }
    return a;
}

/* Row indices into a table of n rows: obj None (every row, *out NULL, *count n) or a 1-D sequence of
 * ints each in 0 .. n-1 (*out a new int64 array, *count its length).  Converted with self->busy set
 * (module.c's CONVERTING note); 1, or 0 with an exception. */
int sw_py_rows(ProblemObject *self, PyObject *obj, npy_intp n, const char *what, PyArrayObject **out,
               npy_intp *count) {
    *out = NULL;
    *count = n;
    if (obj == NULL || obj == Py_None) {
        return 1;
    }
    self->busy = 1;
    PyArrayObject *a = sw_py_array(obj, NPY_INT64, 1, what);
    self->busy = 0;
    if (!a) {
        return 0;
    }
    const int64_t *r = PyArray_DATA(a);
    for (npy_intp q = 0; q < PyArray_DIM(a, 0); q++) {
        if (r[q] < 0 || r[q] >= n) {
            PyErr_Format(PyExc_IndexError, "%s: row %lld out of range 0..%lld", what, (long long)r[q],
                         (long long)n - 1);
            Py_DECREF(a);
            return 0;
        }
    }
    *out = a;
    *count = PyArray_DIM(a, 0);
    return 1;
}

int sw_py_problem_ready(ProblemObject *self) {
    if (!self->p) {
        PyErr_SetString(PyExc_RuntimeError, "Problem is not initialized");
        return 0;
    }
    if (self->busy || self->readers) {
        PyErr_SetString(PyExc_RuntimeError, "Problem is in use by another thread");
        return 0;
    }
    return 1;
}

int sw_py_check_op(ProblemObject *self, int op) {
    if (op < 0 || op >= self->p->nops) {
        PyErr_Format(PyExc_IndexError, "op index %d out of range 0..%d", op, self->p->nops - 1);
        return 0;
    }
    return 1;
}

int sw_py_runtime_ready(RuntimeObject *self) {
    if (!self->rt) {
        PyErr_SetString(PyExc_RuntimeError, "Runtime is not initialized");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "this runtime is in use by another thread (one trainer per thread)");
        return 0;
    }
    return 1;
}

int sw_py_iterations_ok(int iterations) {
    if (iterations < 1 || iterations > 8) {
        PyErr_Format(PyExc_ValueError, "iterations must be 1 .. 8, got %d", iterations);
        return 0;
    }
    return 1;
}
