/* problem_py.h -- the Python Problem object and the bindings' shared helpers, one block per file of csrc/py. */
#ifndef SHARDWISE_PROBLEM_PY_H
#define SHARDWISE_PROBLEM_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>  /* PyObject */
#ifndef NPY_NO_DEPRECATED_API
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#endif
#include <numpy/arrayobject.h>  /* PyArrayObject; each file imports its own API table */

#include "../internal.h"  /* sw_problem */

typedef struct {
    PyObject_HEAD
    sw_problem *p;
    int busy;   /* set while the GIL is released over p */
    int readers;   /* passes of task graphs lowered from p running with the GIL released (taskgraph_py.c):
                      they only read p, so several may run at once, but nothing may change p meanwhile */
    unsigned long version;   /* bumped whenever p is replaced or its options change: a task graph lowered
                                from an older version refuses to run (its graph would not match) */
} ProblemObject;

/* 1 if self holds a problem no other thread is using; 0 with an exception. */
int sw_py_problem_ready(ProblemObject *self);
/* sw_py_problem_ready and the cost tables are built; 0 with an exception. */
int sw_py_tables_ready(ProblemObject *self);
/* 1 if op indexes an op of self's problem; 0 with IndexError. */
int sw_py_check_op(ProblemObject *self, int op);
/* 1 when `iterations` (steps back to back, simulate and memory plans) is 1 .. 8; 0 with ValueError. */
int sw_py_iterations_ok(int iterations);
/* A new float64 array of shape dims copied from src. */
PyObject *sw_py_copy_doubles(const double *src, int ndim, npy_intp *dims);
/* A C-contiguous, aligned array of `type` (a new reference) or NULL with an exception. */
PyArrayObject *sw_py_array(PyObject *obj, int type, int ndim, const char *what);
/* Row indices into a table of n rows: None (every row: *out NULL, *count n) or ints in 0 .. n-1
 * (*out a new int64 array); 1, or 0 with an exception (convert.c). */
int sw_py_rows(ProblemObject *self, PyObject *obj, npy_intp n, const char *what, PyArrayObject **out,
               npy_intp *count);
/* convert.c's NumPy API table (sw_py_array, ...); 0, or -1 with an exception (module_exec). */
int sw_py_convert_init(void);

/* A plan as four arrays over the problem's ops (lower_py.c's header comment), converted. */
typedef struct {
    PyArrayObject *kinds, *degrees, *dev_ptr, *devs;
    sw_config *cfg;
    int8_t *kind;
    sw_plan plan;
} plan_args;

/* Convert and check the four plan arrays into *a (0, or -1 with an exception);
 * release with sw_py_plan_args_free either way. */
int sw_py_parse_plan(const sw_problem *p, PyObject *kinds, PyObject *degrees, PyObject *dev_ptr, PyObject *devs,
                     plan_args *a);
void sw_py_plan_args_free(plan_args *a);

/* A new 1-D array of n items copied from src. */
PyObject *sw_py_contiguous(const void *src, npy_intp n, int type);
/* A 1-D array of n items over `data` (malloc'd; NULL when n is 0), which it frees, not copied:
 * the replay's resource lists and the routes run to hundreds of MB.  NULL with an exception
 * (data freed then). */
PyObject *sw_py_adopt(void *data, npy_intp n, int type);
/* d[key] = value, stealing value; -1 (with an exception) if value is NULL or on failure. */
int sw_py_put(PyObject *d, const char *key, PyObject *value);

/* problem_configs_py.c: its NumPy API table; Problem methods for options and configurations */
int sw_py_register_problem_configs(PyObject *module);
PyObject *sw_py_problem_set_options(ProblemObject *self, PyObject *args, PyObject *kwds);
PyObject *sw_py_problem_set_optimizer_state(ProblemObject *self, PyObject *arg);
PyObject *sw_py_problem_set_precision(ProblemObject *self, PyObject *args, PyObject *kwds);
PyObject *sw_py_problem_enumerate(ProblemObject *self, PyObject *args, PyObject *kwds);
PyObject *sw_py_problem_enumerate_sets(ProblemObject *self, PyObject *arg);
PyObject *sw_py_problem_set_configs(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_reductions(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_configs(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_copy_configs(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_workers(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_config_counts(ProblemObject *self, PyObject *ignored);
PyObject *sw_py_problem_degrees(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_iteration_region(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_iteration_regions(ProblemObject *self, PyObject *args);

/* problem_tables_py.c: its NumPy API table; Problem methods over the cost tables */
int sw_py_register_problem_tables(PyObject *module);
PyObject *sw_py_problem_build_tables(ProblemObject *self, PyObject *args, PyObject *kwds);
PyObject *sw_py_problem_node_costs(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_set_compute_times(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_edges(ProblemObject *self, PyObject *ignored);
PyObject *sw_py_problem_edge_table(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_table_counts(ProblemObject *self, PyObject *ignored);
PyObject *sw_py_problem_edge_times(ProblemObject *self, PyObject *args);

/* memory_tables_py.c: Problem.memory_tables (the memory-constrained search's footprints) */
PyObject *sw_py_problem_memory_tables(ProblemObject *self, PyObject *arg);
int sw_py_register_memory_tables(PyObject *module);

/* memplan_py.c: its NumPy API table, Problem.memory_plan, Problem.check_memory_plan, Problem.task_order */
PyObject *sw_py_problem_memory_plan(ProblemObject *self, PyObject *args, PyObject *kwds);
PyObject *sw_py_problem_check_memory_plan(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_task_order(ProblemObject *self, PyObject *args, PyObject *kwds);
/* A streams argument: None (*out NULL) or (stream, stream_device, stream_priority) int32 arrays,
 * held in arr[3] (release with sw_py_streams_free either way) and viewed as *view; -1 with an
 * exception.  The arrays' fit to a graph is checked where they are used (sw_streams_check). */
int sw_py_parse_streams(PyObject *obj, PyArrayObject **arr, sw_streams *view, const sw_streams **out);
void sw_py_streams_free(PyArrayObject **arr);
int sw_py_register_memplan(PyObject *module);
/* schedule_py.c: its NumPy API table and names (SCHED_POLICIES, SUBTASKS), Problem.schedule, layer_paths */
int sw_py_register_schedule(PyObject *module);
PyObject *sw_py_problem_schedule(ProblemObject *self, PyObject *args, PyObject *kwds);
PyObject *sw_py_problem_layer_paths(ProblemObject *self, PyObject *args);
/* runtime_py.c: the Runtime type and the op table's names (OP_KINDS, OP_ROLES, CPU_OP_KINDS) */
int sw_py_register_runtime(PyObject *module, PyTypeObject *problem_type);

/* lower_py.c: its NumPy API table, Problem.lower; a lowered graph's tasks (kinds, phases, devices, ...,
 * dependencies and reads / writes in CSR) and per-device memory put into dict d (0, or -1 with an exception) */
int sw_py_register_lower(PyObject *module);
PyObject *sw_py_problem_lower(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_chosen(ProblemObject *self, PyObject *arg);
PyObject *sw_py_problem_release_tables(ProblemObject *self, PyObject *arg);
PyObject *sw_py_problem_buffer_totals(ProblemObject *self, PyObject *args, PyObject *kwds);
PyObject *sw_py_problem_buffer_totals_chosen(ProblemObject *self, PyObject *args, PyObject *kwds);
/* problem_configs_py.c: `arg` as an int64 array of one configuration index per op of p, each in
 * range; NULL with an exception (ValueError: its length; IndexError: an index). */
PyArrayObject *sw_py_choice(const sw_problem *p, PyObject *arg);
int sw_py_put_tasks(PyObject *d, const sw_task_graph *t);
int sw_py_put_memory(PyObject *d, const sw_task_graph *g, int ndev);

/* simulate_py.c: its NumPy API table and constants (TASK_KINDS, PHASES, BUFFER_KINDS), Problem methods */
int sw_py_register_simulate(PyObject *module);
PyObject *sw_py_problem_simulate_plan(ProblemObject *self, PyObject *args, PyObject *kwds);
PyObject *sw_py_problem_worker_times(ProblemObject *self, PyObject *args);
/* sim_tasks_py.c: its NumPy API table, the module functions simulate_tasks and simulate_shared */
int sw_py_register_sim_tasks(PyObject *module);
/* routes_py.c: its NumPy API table, the module functions widest_bandwidths and widest_routes */
int sw_py_register_routes(PyObject *module);
/* encode_py.c: encode_ops, op descriptions in the core's words */
int sw_py_register_encode(PyObject *module);

/* swap_py.c: Problem.swap_plan; a swap argument: None (spec->n = 0) or (buffer, out_at, in_at) int32
 * arrays of one length, held in arr[3] (Py_XDECREF them either way); -1 with an exception. */
int sw_py_register_swap(PyObject *module);
PyObject *sw_py_problem_swap_plan(ProblemObject *self, PyObject *args, PyObject *kwds);
int sw_py_parse_swap(PyObject *obj, PyArrayObject **arr, sw_swap_spec *spec);

/* search_py.c: search_tables, Problem.search, Problem.least_transfer, Problem.placed_transfer,
 * Problem.worker_regions */
int sw_py_register_search(PyObject *module);
PyObject *sw_py_problem_search(ProblemObject *self, PyObject *args, PyObject *kwds);
PyObject *sw_py_problem_least_transfer(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_placed_transfer(ProblemObject *self, PyObject *args);
PyObject *sw_py_problem_worker_regions(ProblemObject *self, PyObject *args);

#endif
