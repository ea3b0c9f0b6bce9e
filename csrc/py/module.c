/* module.c -- the CPython module shardwise._core: the Problem type and the module itself.
 *
 * A thin layer: it converts NumPy arrays to C arrays (convert.c), calls the core, and maps
 * statuses to exceptions in one place (sw_py_raise, pyerr.c).  One Python Problem owns one
 * sw_problem.  This file holds the type (construction, the method table, getters) and
 * module_exec, which calls every binding file's register function; the methods live by
 * concept in problem_configs_py.c, problem_tables_py.c, search_py.c (GIL released around
 * search), memplan_py.c, lower_py.c, simulate_py.c, schedule_py.c and swap_py.c; the TaskGraph type
 * (a plan lowered once, which those passes also take) is taskgraph_py.c's.  It sits on
 * top of csrc/py: it uses every binding file, and none of them uses it.
 */
#include "problem_py.h"  /* ProblemObject; CPython and NumPy C API */
#include "taskgraph_py.h"  /* sw_py_register_taskgraph */

#include "../cpu/kernels.h"
#include "../internal.h"
#include "backend_py.h"  /* sw_py_register_gpu_plan */
#include "comm_py.h"     /* sw_py_register_loopback */
#include "pyerr.h"  /* sw_py_raise */

/* test entry points of the CPU kernels, one file per kernel family */
int sw_py_register_conv_kernels(PyObject *module);
int sw_py_register_misc_kernels(PyObject *module);
int sw_py_register_activation_kernels(PyObject *module);
int sw_py_register_optim_kernels(PyObject *module);

/* CONVERTING: methods that change self->p, or hold pointers into it, convert their
 * arguments (arrays, sequences of ints) with self->busy set.  A conversion can run Python
 * code (__array__, __index__) that releases the GIL or calls back into this Problem; with
 * busy set, neither another thread nor that code can re-initialise self or start a search
 * on it in between (they get "in use by another thread").  busy was 0 before: every such
 * method checked sw_py_problem_ready first.
 *
 * Refuse to replace or change self->p while a search, table build or lowering on another
 * thread uses it (they run with the GIL released over self->p); 1 if nobody does. */
static int not_busy(ProblemObject *self, const char *what) {
    if (self->busy || self->readers) {
        PyErr_Format(PyExc_RuntimeError, "cannot %s a Problem while another thread is using it "
                     "(a search, table build or lowering is running)", what);
        return 0;
    }
    return 1;
}

/* Problem(...) and problem.__init__(...) again: a second call replaces the problem, but
 * only when no other thread is using the old one (freeing it under a running search was a
 * use-after-free).  The new problem is built first and swapped in last, so a failed
 * re-initialisation leaves the old problem as it was. */
static int Problem_init(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"blob", "flops", "dev_flops", "dev_membw", "bandwidth", NULL};
    PyObject *blob_o, *flops_o, *df_o, *dm_o, *bw_o;
    if (!not_busy(self, "re-initialise") ||
        !PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO", kwlist, &blob_o, &flops_o, &df_o, &dm_o, &bw_o)) {
        return -1;
    }
    int rc = -1;
    sw_problem *fresh = NULL;
    PyArrayObject *blob = sw_py_array(blob_o, NPY_INT64, 1, "blob");
    PyArrayObject *flops = blob ? sw_py_array(flops_o, NPY_FLOAT64, 2, "flops") : NULL;
    PyArrayObject *df = flops ? sw_py_array(df_o, NPY_FLOAT64, 1, "dev_flops") : NULL;
    PyArrayObject *dm = df ? sw_py_array(dm_o, NPY_FLOAT64, 1, "dev_membw") : NULL;
    PyArrayObject *bw = dm ? sw_py_array(bw_o, NPY_FLOAT64, 2, "bandwidth") : NULL;
    if (!bw) {
        goto done;
    }
    npy_intp ndev = PyArray_DIM(df, 0);
    if (PyArray_DIM(dm, 0) != ndev || PyArray_DIM(bw, 0) != ndev || PyArray_DIM(bw, 1) != ndev) {
        PyErr_SetString(PyExc_ValueError, "device arrays disagree on the number of devices");
        goto done;
    }
    if (PyArray_DIM(blob, 0) < 1 || PyArray_DIM(flops, 1) != 2) {
        PyErr_SetString(PyExc_ValueError, "blob must be non-empty and flops must have two columns");
        goto done;
    }
    int64_t nops = ((int64_t *)PyArray_DATA(blob))[0];
    if (nops != PyArray_DIM(flops, 0)) {
        PyErr_SetString(PyExc_ValueError, "flops must have one row per op");
        goto done;
    }
    if (ndev > SW_MAX_DEVICES) {
        PyErr_Format(PyExc_ValueError, "at most %d devices are supported", SW_MAX_DEVICES);
        goto done;
    }
    sw_status s = sw_problem_new(&fresh, PyArray_DATA(blob), PyArray_DIM(blob, 0), PyArray_DATA(flops),
                                 (int)ndev, PyArray_DATA(df), PyArray_DATA(dm), PyArray_DATA(bw));
    if (s != SW_OK) {
        sw_py_raise(s);
        goto done;
    }
    /* checked again: converting the arguments can run Python code (__array__), which can
     * release the GIL and let another thread start a search on self */
    if (!not_busy(self, "re-initialise")) {
        sw_problem_free(fresh);
        goto done;
    }
    sw_problem_free(self->p);
    self->p = fresh;
    self->version++;   /* task graphs lowered from the old problem refuse to run on this one */
    rc = 0;
done:
    Py_XDECREF(blob);
    Py_XDECREF(flops);
    Py_XDECREF(df);
    Py_XDECREF(dm);
    Py_XDECREF(bw);
    return rc;
}

static void Problem_dealloc(ProblemObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    sw_problem_free(self->p);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* (done, total) of the build or search running on another thread; safe to call while busy. */
static PyObject *Problem_progress(ProblemObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!self->p) {
        return Py_BuildValue("(ll)", 0L, 0L);
    }
    return Py_BuildValue("(ll)", atomic_load(&self->p->progress_done), atomic_load(&self->p->progress_total));
}

static PyObject *Problem_get_nops(ProblemObject *self, void *Py_UNUSED(closure)) {
    if (!sw_py_problem_ready(self)) {
        return NULL;
    }
    return PyLong_FromLong(self->p->nops);
}

static PyObject *Problem_get_node_size(ProblemObject *self, void *Py_UNUSED(closure)) {
    if (!sw_py_problem_ready(self)) {
        return NULL;
    }
    return PyLong_FromLong(self->p->node_size);
}

static PyObject *Problem_get_ndev(ProblemObject *self, void *Py_UNUSED(closure)) {
    if (!sw_py_problem_ready(self)) {
        return NULL;
    }
    return PyLong_FromLong(self->p->ndev);
}

static PyMethodDef Problem_methods[] = {
    {"set_options", (PyCFunction)(void (*)(void))sw_py_problem_set_options, METH_VARARGS | METH_KEYWORDS,
     "set_options(sync_model=0, bytes_per_element=4.0, backward_factor=3.0, threads=1, reduction_splits=False)"},
    {"set_precision", (PyCFunction)(void (*)(void))sw_py_problem_set_precision, METH_VARARGS | METH_KEYWORDS,
     "set_precision(precision, dense_flops=None, op_dense=None): 0 fp32, 1 bf16, 2 fp16; the dense ops' peaks"},
    {"set_optimizer_state", (PyCFunction)sw_py_problem_set_optimizer_state, METH_O,
     "set_optimizer_state(n): optimizer state buffers per parameter slice in the lowering (1 SGD, 2 Adam)"},
    {"enumerate", (PyCFunction)(void (*)(void))sw_py_problem_enumerate, METH_VARARGS | METH_KEYWORDS,
     "enumerate(counts, first_block_only=False): configurations of every op for these worker counts"},
    {"enumerate_sets", (PyCFunction)sw_py_problem_enumerate_sets, METH_O,
     "enumerate_sets(sets): configurations of every op on these device sets (each a list of device indices)"},
    {"set_configs", (PyCFunction)sw_py_problem_set_configs, METH_VARARGS,
     "set_configs(op, degrees (n, 5) int32, devices (n, maxk) int32 padded with -1, reductions (n, 2) or None)"},
    {"copy_configs", (PyCFunction)sw_py_problem_copy_configs, METH_VARARGS,
     "copy_configs(op, source, rows): op's configurations become those rows of op's in source (a Problem of "
     "the same graph and devices)"},
    {"configs", (PyCFunction)sw_py_problem_configs, METH_VARARGS,
     "configs(op, rows=None) -> (degrees, devices): every configuration, or those rows of the enumeration"},
    {"chosen", (PyCFunction)sw_py_problem_chosen, METH_O,
     "chosen(choice) -> (degrees, devices, reductions, counts): each op's configuration choice[op] in one call"},
    {"config_counts", (PyCFunction)sw_py_problem_config_counts, METH_NOARGS,
     "config_counts() -> (nops,) int64: every op's number of configurations"},
    {"workers", (PyCFunction)sw_py_problem_workers, METH_VARARGS,
     "workers(op) -> (n,) int32: the number of workers of every configuration"},
    {"degrees", (PyCFunction)sw_py_problem_degrees, METH_VARARGS,
     "degrees(op) -> (n, out_rank) int32: the partition of every configuration (configs() without devices)"},
    {"reductions", (PyCFunction)sw_py_problem_reductions, METH_VARARGS,
     "reductions(op) -> (n, 2): (split reduction variable or -1, degree) per configuration"},
    {"build_tables", (PyCFunction)(void (*)(void))sw_py_problem_build_tables, METH_VARARGS | METH_KEYWORDS,
     "build_tables(with_bytes=False, bounds=False): t_c, t_s per configuration and t_x per edge (bounds: lower "
     "bounds of t_x valid for any devices), GIL released"},
    {"release_tables", (PyCFunction)sw_py_problem_release_tables, METH_NOARGS,
     "release_tables(): free the cost tables, keep the configurations (build_tables makes them again)"},
    {"node_costs", (PyCFunction)sw_py_problem_node_costs, METH_VARARGS, "node_costs(op) -> (t_c, t_s, sync bytes)"},
    {"worker_regions", (PyCFunction)sw_py_problem_worker_regions, METH_VARARGS,
     "worker_regions(op, config, slot, per_worker=False) -> (lo, hi, used) of every worker's region"},
    {"iteration_region", (PyCFunction)sw_py_problem_iteration_region, METH_VARARGS,
     "iteration_region(op, slot, lo, hi) -> (box, exact): input region read by the iteration box [lo, hi)"},
    {"iteration_regions", (PyCFunction)sw_py_problem_iteration_regions, METH_VARARGS,
     "iteration_regions(op, slot, lo, hi) -> (rlo, rhi, used): iteration_region of every row of the (n, nvars) "
     "int64 arrays lo, hi at once; rlo, rhi (n, rank) int64, used (n,) bool"},
    {"progress", (PyCFunction)Problem_progress, METH_NOARGS,
     "progress() -> (done, total) of the table build or search running on another thread"},
    {"set_compute_times", (PyCFunction)sw_py_problem_set_compute_times, METH_VARARGS,
     "set_compute_times(op, t_c): replace the modelled compute times of one op (measured profile)"},
    {"edges", (PyCFunction)sw_py_problem_edges, METH_NOARGS, "edges() -> [(producer, consumer, slot)]"},
    {"edge_table", (PyCFunction)sw_py_problem_edge_table, METH_VARARGS,
     "edge_table(e, rows=None, cols=None) -> (t_x, bytes or None): the table, or those producer rows and consumer "
     "columns of it"},
    {"table_counts", (PyCFunction)sw_py_problem_table_counts, METH_NOARGS,
     "table_counts() -> (edges, distinct transfer tables, tables counted; the others scaled copies of those)"},
    {"edge_times", (PyCFunction)sw_py_problem_edge_times, METH_NOARGS,
     "edge_times() -> [t_x per edge], edges sharing a table sharing one array"},
    {"least_transfer", (PyCFunction)sw_py_problem_least_transfer, METH_VARARGS,
     "least_transfer(e, ci, cj) -> least t_x between the two configurations over aligned placements"},
    {"placed_transfer", (PyCFunction)sw_py_problem_placed_transfer, METH_VARARGS,
     "placed_transfer(e, ci, cj) -> t_x between the two configurations where they sit (uniform nodes, contiguous "
     "devices)"},
    {"search", (PyCFunction)(void (*)(void))sw_py_problem_search, METH_VARARGS | METH_KEYWORDS,
     "search(algorithm='elimination', max_evaluations=1e8, marginals=False, skip_marginals_within=-1) -> (choice, "
     "cost, stats[, marginals]); marginals None when skip_marginals_within >= 0 and the chosen plan, costed exactly "
     "where it sits, is within that fraction of the lower bound"},
    {"worker_times", (PyCFunction)sw_py_problem_worker_times, METH_VARARGS,
     "worker_times(op, degrees, devices) -> roofline seconds of one forward pass of every worker"},
    {"memory_plan", (PyCFunction)(void (*)(void))sw_py_problem_memory_plan, METH_VARARGS | METH_KEYWORDS,
     "memory_plan(kinds, degrees, dev_ptr, devices, align=ARENA_ALIGN, check=False, streams=None) -> dict: one "
     "arena per device"},
    {"memory_tables", (PyCFunction)sw_py_problem_memory_tables, METH_O,
     "memory_tables(kinds) -> (node, edges): per configuration and device, the bytes live when the backward pass "
     "starts (csrc/cost/cost_memory.c)"},
    {"check_memory_plan", (PyCFunction)sw_py_problem_check_memory_plan, METH_VARARGS,
     "check_memory_plan(kinds, degrees, dev_ptr, devices, offset, arena, reuse_from, reuse_to, align, "
     "streams=None): ValueError unless the offsets are safe"},
    {"task_order", (PyCFunction)(void (*)(void))sw_py_problem_task_order, METH_VARARGS | METH_KEYWORDS,
     "task_order(kinds, degrees, dev_ptr, devices, streams=None, iterations=1, check=False) -> {ptr, ids}: "
     "what each task runs after (of iterations back to back)"},
    {"lower", (PyCFunction)sw_py_problem_lower, METH_VARARGS,
     "lower(kinds, degrees, dev_ptr, devices) -> dict of task and buffer arrays (one iteration of a plan)"},
    {"buffer_totals", (PyCFunction)(void (*)(void))sw_py_problem_buffer_totals, METH_VARARGS | METH_KEYWORDS,
     "buffer_totals(kinds, degrees, dev_ptr, devices, fused_rings=False, chunked=False) -> (bytes, buffers, "
     "persistent bytes) per device of the plan's lowering, its tasks not kept"},
    {"buffer_totals_chosen", (PyCFunction)(void (*)(void))sw_py_problem_buffer_totals_chosen, METH_VARARGS | METH_KEYWORDS,
     "buffer_totals_chosen(kinds, choice, fused_rings=False, chunked=False) -> buffer_totals of the plan giving "
     "op v its configuration choice[v]"},
    {"simulate_plan", (PyCFunction)(void (*)(void))sw_py_problem_simulate_plan, METH_VARARGS | METH_KEYWORDS,
     "simulate_plan(kinds, degrees, dev_ptr, devices, route_ptr, route_res, nres, cores=0, ..., bound=inf,\n"
     "              brief=False) -> dict\n"
     "Lower, time and replay one iteration of a plan (GIL released).  When the graph's lower bound\n"
     "reaches `bound` the replay is skipped (bounded=True, iteration_time = the bound); `brief`\n"
     "returns only iteration_time, ntasks and bounded."},
    {"swap_plan", (PyCFunction)(void (*)(void))sw_py_problem_swap_plan, METH_VARARGS | METH_KEYWORDS,
     "swap_plan(kinds, degrees, dev_ptr, devices, start, end, budget, pinned, host_bw, max_rounds=0) -> dict\n"
     "Which feature maps to offload and where their swap tasks go (csrc/graph/swap_plan.c, swap_fit.c)."},
    {"schedule", (PyCFunction)(void (*)(void))sw_py_problem_schedule, METH_VARARGS | METH_KEYWORDS,
     "schedule(kinds, degrees, dev_ptr, devices, policy, alpha=-1, beta=-1, split=None) -> dict\n"
     "Lower and time one iteration of a plan, then its priorities and streams (csrc/graph/schedule.c)."},
    {"layer_paths", (PyCFunction)sw_py_problem_layer_paths, METH_VARARGS,
     "layer_paths(op_da) -> dict: layer blocks and paths for these dA seconds per op"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Problem_getset[] = {
    {"nops", (getter)Problem_get_nops, NULL, "number of ops", NULL},
    {"ndev", (getter)Problem_get_ndev, NULL, "number of devices", NULL},
    {"node_size", (getter)Problem_get_node_size, NULL,
     "devices per node when the machine is uniform nodes (every pair linked at one bandwidth inside a node and "
     "one between nodes), else 0", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Problem_slots[] = {
    {Py_tp_doc, "Problem(blob, flops, dev_flops, dev_membw, bandwidth): a graph on a device graph"},
    {Py_tp_init, Problem_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, Problem_dealloc},
    {Py_tp_methods, Problem_methods},
    {Py_tp_getset, Problem_getset},
    {0, NULL},
};

static PyType_Spec Problem_spec = {
    .name = "shardwise._core.Problem",
    .basicsize = sizeof(ProblemObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Problem_slots,
};

/* ------------------------------------------------------------------ module */
static int module_exec(PyObject *m) {
    import_array1(-1);
    if (sw_py_convert_init() < 0) {
        return -1;
    }
    PyObject *type = PyType_FromModuleAndSpec(m, &Problem_spec, NULL);
    if (!type) {
        return -1;
    }
    int rc = PyModule_AddObjectRef(m, "Problem", type);
    Py_DECREF(type);   /* the module keeps it */
    if (rc < 0) {
        return -1;
    }
    if (sw_py_register_problem_configs(m) < 0 || sw_py_register_problem_tables(m) < 0 ||
        sw_py_register_conv_kernels(m) < 0 || sw_py_register_misc_kernels(m) < 0 ||
        sw_py_register_activation_kernels(m) < 0 || sw_py_register_optim_kernels(m) < 0 ||
        sw_py_register_lower(m) < 0 || sw_py_register_simulate(m) < 0 || sw_py_register_sim_tasks(m) < 0 || sw_py_register_routes(m) < 0 ||
        sw_py_register_memplan(m) < 0 || sw_py_register_runtime(m, (PyTypeObject *)type) < 0 ||
        sw_py_register_taskgraph(m, (PyTypeObject *)type) < 0 ||
        sw_py_register_search(m) < 0 || sw_py_register_memory_tables(m) < 0) {
        return -1;
    }
    if (sw_py_register_schedule(m) < 0 || sw_py_register_gpu_plan(m) < 0 || sw_py_register_swap(m) < 0 ||
        sw_py_register_loopback(m) < 0 || sw_py_register_encode(m) < 0) {
        return -1;
    }
    sw_blas_single_thread();
    if (PyModule_AddIntConstant(m, "MAX_RANK", SW_MAX_RANK) < 0 ||
        PyModule_AddIntConstant(m, "MAX_DEVICES", SW_MAX_DEVICES) < 0 ||
        PyModule_AddIntConstant(m, "ARENA_ALIGN", SW_ARENA_ALIGN) < 0 ||
        PyModule_AddIntConstant(m, "SYNC_PARAMETER_SERVER", SW_SYNC_PARAMETER_SERVER) < 0 ||
        PyModule_AddIntConstant(m, "SYNC_RING", SW_SYNC_RING) < 0 ||
        PyModule_AddIntConstant(m, "SYNC_ZERO", SW_SYNC_ZERO) < 0) {
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "shardwise._core",
    .m_doc = "C core of shardwise: cost tables and the elimination search.",
    .m_size = 0,
    .m_methods = NULL,   /* module functions come from the files' register functions */
    .m_slots = module_slots,
};

PyMODINIT_FUNC PyInit__core(void) { return PyModuleDef_Init(&module_def); }
