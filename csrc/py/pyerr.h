/* pyerr.h -- the one place a core status becomes a Python exception (defined in pyerr.c). */
#ifndef SHARDWISE_PYERR_H
#define SHARDWISE_PYERR_H

#include <Python.h>  /* PyObject */

#include "../internal.h"  /* sw_status */

/* Set ValueError / MemoryError / RuntimeError with sw_last_error()'s message; returns NULL. */
PyObject *sw_py_raise(sw_status s);

#endif
