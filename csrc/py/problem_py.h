/* problem_py.h -- the Python Problem object, shared by module.c and simulate_py.c. */
#ifndef SHARDWISE_PROBLEM_PY_H
#define SHARDWISE_PROBLEM_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>  /* PyObject */
#ifndef NPY_NO_DEPRECATED_API
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#endif
#include <numpy/arrayobject.h>  /* PyArrayObject; each file imports its own API table */

#include "../shardwise.h"  /* sw_problem */

typedef struct {
    PyObject_HEAD
    sw_problem *p;
    int busy;   /* set while the GIL is released over p */
} ProblemObject;

/* 1 if self holds a problem no other thread is using; 0 with an exception. */
int sw_py_problem_ready(ProblemObject *self);
/* A C-contiguous, aligned array of `type` (a new reference) or NULL with an exception. */
PyArrayObject *sw_py_array(PyObject *obj, int type, int ndim, const char *what);

/* simulate_py.c: its NumPy API table and constants (TASK_KINDS, PHASES, BUFFER_KINDS), Problem methods */
int sw_py_register_simulate(PyObject *module);
PyObject *sw_py_problem_lower(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_simulate_plan(ProblemObject *self, PyObject *args, PyObject *kwds);
PyObject *sw_py_problem_worker_times(ProblemObject *self, PyObject *args);

#endif
