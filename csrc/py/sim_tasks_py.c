/* sim_tasks_py.c -- the module functions simulate_tasks and simulate_shared: the event loops
 * (simulate.c, sim_share.c) on hand-made task arrays, for tests of the replay rules.
 *
 * Kept apart from simulate_py.c (which replays a lowered plan) because these take bare CSR
 * arrays: duration (n,) float64, dep_ptr (n + 1,) / deps int32, res_ptr (n + 1,) / res int32,
 * and for simulate_shared also pool (n,) int32 and share (n,) float64.  Both bindings check the
 * CSR pointer arrays here (one check, task_arrays) before the GIL is released.
 */
#include "problem_py.h"  /* sw_py_array; CPython and NumPy C API */

#include "pyerr.h"  /* sw_py_raise */

static const char *const NAMES[7] = {"duration", "dep_ptr", "deps", "res_ptr", "res", "pool", "share"};
static const int TYPES[7] = {NPY_FLOAT64, NPY_INT32, NPY_INT32, NPY_INT32, NPY_INT32, NPY_INT32, NPY_FLOAT64};

/* Convert objs[0 .. narrays) into a[] (NAMES / TYPES order) and check the task arrays: n tasks
 * (the duration's length, < 2^31), dep_ptr and res_ptr of n + 1 entries from 0 to the length of
 * deps / res, never decreasing; nres >= 0.  n, or -1 with a ValueError naming `fn`. */
static npy_intp task_arrays(const char *fn, PyObject **objs, int narrays, int nres, PyArrayObject **a) {
    for (int k = 0; k < narrays; k++) {
        a[k] = sw_py_array(objs[k], TYPES[k], 1, NAMES[k]);
        if (!a[k]) {
            return -1;
        }
    }
    npy_intp n = PyArray_DIM(a[0], 0);
    const int32_t *dp = PyArray_DATA(a[1]), *rp = PyArray_DATA(a[3]);
    if (n >= INT32_MAX || nres < 0 || PyArray_DIM(a[1], 0) != n + 1 || PyArray_DIM(a[3], 0) != n + 1 ||
        dp[0] != 0 || rp[0] != 0 || dp[n] != PyArray_DIM(a[2], 0) || rp[n] != PyArray_DIM(a[4], 0)) {
        PyErr_Format(PyExc_ValueError, "%s: pointer arrays must have n + 1 entries from 0 to len", fn);
        return -1;
    }
    for (npy_intp t = 0; t < n; t++) {
        if (dp[t + 1] < dp[t] || rp[t + 1] < rp[t]) {
            PyErr_Format(PyExc_ValueError, "%s: pointer arrays must not decrease", fn);
            return -1;
        }
    }
    return n;
}

/* simulate_tasks(duration, dep_ptr, deps, res_ptr, res, nres) -> (start, makespan) */
static PyObject *simulate_tasks(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *objs[5] = {NULL};
    int nres;
    if (!PyArg_ParseTuple(args, "OOOOOi", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &nres)) {
        return NULL;
    }
    PyArrayObject *a[5] = {NULL}, *start = NULL;
    PyObject *result = NULL;
    npy_intp n = task_arrays("simulate_tasks", objs, 5, nres, a);
    if (n < 0 || !(start = (PyArrayObject *)PyArray_ZEROS(1, &n, NPY_FLOAT64, 0))) {
        goto done;
    }
    double makespan = 0;
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = sw_simulate_tasks((int32_t)n, PyArray_DATA(a[0]), PyArray_DATA(a[1]), PyArray_DATA(a[2]), PyArray_DATA(a[3]),
                          PyArray_DATA(a[4]), nres, PyArray_DATA(start), &makespan);
    Py_END_ALLOW_THREADS
    if (s != SW_OK) {
        sw_py_raise(s);
        goto done;
    }
    result = Py_BuildValue("(Od)", start, makespan);
done:
    Py_XDECREF(start);
    for (int k = 0; k < 5; k++) {
        Py_XDECREF(a[k]);
    }
    return result;
}

/* simulate_shared(duration, dep_ptr, deps, res_ptr, res, nres, pool, share, npools) -> (start, end, makespan):
 * sw_simulate_shared on hand-made tasks (tests of the sharing rule). */
static PyObject *simulate_shared(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *objs[7] = {NULL};
    int nres, npools;
    if (!PyArg_ParseTuple(args, "OOOOOiOOi", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &nres, &objs[5],
                          &objs[6], &npools)) {
        return NULL;
    }
    PyArrayObject *a[7] = {NULL}, *start = NULL, *end = NULL;
    PyObject *result = NULL;
    npy_intp n = task_arrays("simulate_shared", objs, 7, nres, a);
    if (n < 0) {
        goto done;
    }
    if (npools < 0 || PyArray_DIM(a[5], 0) != n || PyArray_DIM(a[6], 0) != n) {
        PyErr_SetString(PyExc_ValueError, "simulate_shared: pool and share must have n entries, npools >= 0");
        goto done;
    }
    start = (PyArrayObject *)PyArray_ZEROS(1, &n, NPY_FLOAT64, 0);
    end = start ? (PyArrayObject *)PyArray_ZEROS(1, &n, NPY_FLOAT64, 0) : NULL;
    if (!end) {
        goto done;
    }
    double makespan = 0;
    sw_status s;
    Py_BEGIN_ALLOW_THREADS
    s = sw_simulate_shared((int32_t)n, PyArray_DATA(a[0]), PyArray_DATA(a[1]), PyArray_DATA(a[2]), PyArray_DATA(a[3]),
                           PyArray_DATA(a[4]), nres, PyArray_DATA(a[5]), PyArray_DATA(a[6]), npools,
                           PyArray_DATA(start), PyArray_DATA(end), &makespan);
    Py_END_ALLOW_THREADS
    if (s != SW_OK) {
        sw_py_raise(s);
        goto done;
    }
    result = Py_BuildValue("(OOd)", start, end, makespan);
done:
    Py_XDECREF(start);
    Py_XDECREF(end);
    for (int k = 0; k < 7; k++) {
        Py_XDECREF(a[k]);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"simulate_tasks", (PyCFunction)simulate_tasks, METH_VARARGS,
     "simulate_tasks(duration, dep_ptr, deps, res_ptr, res, nres) -> (start, makespan)\n"
     "Event-driven replay: each task holds its resources for its duration, lowest id first."},
    {"simulate_shared", (PyCFunction)simulate_shared, METH_VARARGS,
     "simulate_shared(duration, dep_ptr, deps, res_ptr, res, nres, pool, share, npools) -> (start, end, makespan)\n"
     "The same with shared compute: tasks of a pool share it, share[t] at most each, lowest id first."},
    {NULL, NULL, 0, NULL},
};

int sw_py_register_sim_tasks(PyObject *module) {
    import_array1(-1);  /* this file's own NumPy API table */
    return PyModule_AddFunctions(module, methods);
}
