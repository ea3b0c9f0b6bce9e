/* backend_py.h -- choosing a Runtime's backend from Python (backend_py.c). */
#ifndef SHARDWISE_BACKEND_PY_H
#define SHARDWISE_BACKEND_PY_H

#include <Python.h>

#include "../exec/backend_ext.h"  /* sw_ext_backend, sw_ext_options, sw_backend_record_new */

enum { SW_PY_BACKEND_CPU = 0, SW_PY_BACKEND_RECORD = 1, SW_PY_BACKEND_EXT = 2 };

typedef struct {
    int kind;
    const sw_ext_backend *ext;   /* SW_PY_BACKEND_EXT: the module's table */
    sw_ext_options opt;
    int *gpu;                    /* owned copy behind opt.gpu */
} sw_py_backend;

/* Under the GIL: resolve `name` ("cpu", "cuda", "record"), importing shardwise._cuda for
 * "cuda"; gpus (None or one GPU per logical device) and workspace bytes per stream (0:
 * default) for device backends.  0, or -1 with an exception set. */
int sw_py_backend_spec(const char *name, int ndev, PyObject *gpus, long long workspace, sw_py_backend *spec);
/* Without the GIL: make the backend. */
sw_status sw_py_backend_make(const sw_py_backend *spec, int threads, int jitter_us, sw_backend **out);
void sw_py_backend_spec_free(sw_py_backend *spec);
/* The module functions of the GPU planning (tests) and supports_op (the Trainer asks it). */
int sw_py_register_gpu_plan(PyObject *module);

#endif /* SHARDWISE_BACKEND_PY_H */
