/* kernel_args.h -- the Python arguments of the kernel entry points as C values.
 *
 * kernels_conv_py.c and kernels_misc_py.c take float32 NumPy arrays with the
 * global coordinates of their first element (`lo` tuples), integer tuples
 * (shapes, windows) and build sw_views; these helpers do the conversions for
 * both, with one set of checks and messages: anything malformed is a
 * ValueError, never a silent cast or an out-of-range coordinate.  Both also
 * release the interpreter lock around each kernel the same way, timed
 * (SW_KERNEL_BEGIN / SW_KERNEL_END, at the end of this file).
 */
#ifndef SHARDWISE_KERNEL_ARGS_H
#define SHARDWISE_KERNEL_ARGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>  /* PyObject */
#include <numpy/arrayobject.h>  /* PyArrayObject */

#include "../cpu/kernels.h"  /* sw_view */

/* Coordinates and extents beyond this are refused before they reach index arithmetic. */
#define SW_PY_COORD_LIMIT ((int64_t)1 << 40)

enum {
    SW_PY_NONE_IS_ZEROS = 1,  /* None stands for n zeros (a lo at the origin) */
    SW_PY_NONNEG = 2,         /* every entry >= 0 (a shape) */
};

/* 1 when a float32 C-contiguous array holds no NaN or infinity: one branch-free pass (the
 * runtime checks every minibatch with it, right after a step has left the caches cold). */
int sw_py_all_finite(PyArrayObject *a);

/* Imports this file's NumPy API table; call once before the others (0, or -1 with an exception). */
int sw_py_kernel_args_ready(void);

/* n integers (Python or NumPy, not bool) from a sequence into out: 0, or -1 with ValueError. */
int sw_py_ints(PyObject *obj, int n, int64_t *out, int flags, const char *what);

/* An int or a pair of ints, each in [min, max] (a window's kernel, stride, padding). */
int sw_py_pair(PyObject *obj, int64_t min, int64_t max, const char *what, int64_t *a, int64_t *b);

/* A float32 NumPy array of rank rmin..rmax as a C-contiguous array (new reference; copied if
 * needed), or NULL with ValueError. */
PyArrayObject *sw_py_float32(PyObject *obj, int rmin, int rmax, const char *what);

/* The view of array a whose first element sits at global coordinates lo. */
sw_view sw_py_view(PyArrayObject *a, const int64_t *lo);

/* A new float32 (float64 when f64) array of the given shape, zero-filled, or NaN-filled when
 * nan_filled (so that an element a kernel forgets to write shows up in the tests). */
PyArrayObject *sw_py_output(int rank, const int64_t *shape, int f64, int nan_filled, const char *what);

/* Wall seconds the calling thread has spent inside kernels with the interpreter lock released,
 * since it started.  The profile times a shard by it: what the kernel took on its core, the
 * core's own slowdowns included (another tenant, a run-queue wait), the wait to take the lock
 * back left out (the simulator models the lock itself). */
double sw_py_kernel_seconds(void);

/* For SW_KERNEL_BEGIN / SW_KERNEL_END (safe without the interpreter lock): a monotonic clock,
 * and adding a kernel's seconds to the calling thread's total. */
double sw_py_now(void);
void sw_py_kernel_add(double seconds);

/* Run the statements between these two with the interpreter lock released and their wall time
 * added to sw_py_kernel_seconds (Py_BEGIN_ALLOW_THREADS / Py_END_ALLOW_THREADS, timed). */
#define SW_KERNEL_BEGIN                                                                         \
    Py_BEGIN_ALLOW_THREADS {                                                                   \
        double sw_kernel_t0_ = sw_py_now();
#define SW_KERNEL_END                                                                           \
    sw_py_kernel_add(sw_py_now() - sw_kernel_t0_);                                             \
    }                                                                                          \
    Py_END_ALLOW_THREADS

#endif /* SHARDWISE_KERNEL_ARGS_H */
