/* pyerr.c -- the one place a core status becomes a Python exception (see pyerr.h). */
#include "pyerr.h"

PyObject *sw_py_raise(sw_status s) {
    PyObject *type = PyExc_RuntimeError;
    if (s == SW_ERR_VALUE) {
        type = PyExc_ValueError;
    } else if (s == SW_ERR_NOMEM) {
        type = PyExc_MemoryError;
    } else if (s == SW_ERR_TIMEOUT) {   /* a message of another rank that never came (exec/messages.c) */
        type = PyExc_TimeoutError;
    }
    PyErr_SetString(type, sw_last_error());
    return NULL;
}
