/* runtime_py.h -- the Python Runtime object (runtime_py.c), shared with runtime_buffers_py.c. */
#ifndef SHARDWISE_RUNTIME_PY_H
#define SHARDWISE_RUNTIME_PY_H

#include <Python.h>

#include "../exec/runtime.h"  /* sw_runtime */

typedef struct {
    PyObject_HEAD
    sw_runtime *rt;
    int busy;
    long long steps;   /* training steps completed (counted here, so an interrupt after a step
                        * returns cannot separate the count from the weights) */
} RuntimeObject;

/* 1 when the runtime exists and no other thread is inside it, else 0 with RuntimeError (convert.c). */
int sw_py_runtime_ready(RuntimeObject *self);

/* runtime_buffers_py.c: the methods that read and write buffers, and the record backend's lists */
PyObject *Runtime_buffer(RuntimeObject *self, PyObject *arg);
PyObject *Runtime_write(RuntimeObject *self, PyObject *args);
PyObject *Runtime_recorded(RuntimeObject *self, PyObject *arg);
/* runtime_steps_py.c: steps back to back (csrc/exec/pipeline.c) */
PyObject *Runtime_pipeline(RuntimeObject *self, PyObject *arg);
PyObject *Runtime_steps_back_to_back(RuntimeObject *self, PyObject *arg);
/* Called once at module init: the file's NumPy API table. */
int sw_py_register_runtime_buffers(void);

#endif /* SHARDWISE_RUNTIME_PY_H */
