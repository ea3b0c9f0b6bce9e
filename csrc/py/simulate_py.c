/* simulate_py.c -- TaskGraph.simulate, Problem.simulate_plan, Problem.worker_times, and the names of
 * the enum codes (TASK_KINDS, PHASES, BUFFER_KINDS) that every task graph returned to Python uses.
 *
 * TaskGraph.simulate replays the graph lowered once (with its streams or swap tasks); a plan given
 * to Problem.simulate_plan as lower_py.c's four arrays is lowered once first (sw_py_lower_args,
 * with its streams and swap arguments) and replayed the same way.  The replay's results come back as
 * a dict of NumPy arrays, one entry per task (or buffer, device).  The GIL is released while the C
 * core works.  The event loops on hand-made task arrays are sim_tasks_py.c's.
 */
#include "taskgraph_py.h"  /* TaskGraphObject, sw_py_lower_args; ProblemObject, sw_py_array */

#include <math.h>    /* isfinite, isnan */
#include <string.h>  /* memcpy */

#include "pyerr.h"  /* sw_py_raise */

static const char *const PHASE_NAMES[] = {"forward", "backward", "sync", "update"};
static const char *const BUFFER_KIND_NAMES[SW_BUF_NKINDS] = {
    "activation", "region", "grad", "partial_grad", "param", "param_grad", "momentum", "stats", "recv",
    "partial", "grad_pre", "running_stats", "host"};

/* ------------------------------------------------------------------ Problem.simulate_plan */
typedef struct {
    PyArrayObject *route_ptr, *route_res, *split, *rates, *fixed, *fill, *host_bw, *rank;
    sw_machine machine;
    sw_measured measured;
} sim_args;

static void sim_args_free(sim_args *s) {
    Py_XDECREF(s->route_ptr);
    Py_XDECREF(s->route_res);
    Py_XDECREF(s->split);
    Py_XDECREF(s->rates);
    Py_XDECREF(s->fixed);
    Py_XDECREF(s->fill);
    Py_XDECREF(s->host_bw);
    Py_XDECREF(s->rank);
}

/* NaN (no measurement) or a finite value >= 0 in every entry. */
static int measurements_ok(PyArrayObject *a, const char *what) {
    const double *v = PyArray_DATA(a);
    for (npy_intp i = 0; i < PyArray_SIZE(a); i++) {
        if (!isnan(v[i]) && !(isfinite(v[i]) && v[i] >= 0)) {
            PyErr_Format(PyExc_ValueError, "%s must be NaN (not measured) or finite and >= 0, got %g", what, v[i]);
            return 0;
        }
    }
    return 1;
}

/* An optional array of one measurement per task kind (None: not measured) into *out. */
static int per_kind(PyObject *obj, const char *name, const char *what, PyArrayObject **out) {
    if (obj == Py_None) {
        return 0;
    }
    *out = sw_py_array(obj, NPY_FLOAT64, 1, name);
    if (!*out) {
        return -1;
    }
    if (PyArray_DIM(*out, 0) != SW_TASK_NKINDS) {
        PyErr_Format(PyExc_ValueError, "%s must have one entry per task kind (%d)", name, SW_TASK_NKINDS);
        return -1;
    }
    return measurements_ok(*out, what) ? 0 : -1;
}

static int parse_machine(const sw_problem *p, PyObject *route_ptr, PyObject *route_res, int nres, int cores,
                         PyObject *split, PyObject *rates, PyObject *fixed, double copy_bw, PyObject *fill,
                         PyObject *host_bw, int host_res, sim_args *s) {
    memset(s, 0, sizeof *s);
    s->route_ptr = sw_py_array(route_ptr, NPY_INT32, 1, "route_ptr");
    s->route_res = s->route_ptr ? sw_py_array(route_res, NPY_INT32, 1, "route_res") : NULL;
    if (!s->route_res) {
        return -1;
    }
    npy_intp pairs = (npy_intp)p->ndev * p->ndev;
    const int32_t *ptr = PyArray_DATA(s->route_ptr);
    if (PyArray_DIM(s->route_ptr, 0) != pairs + 1 || ptr[pairs] != PyArray_DIM(s->route_res, 0)) {
        PyErr_Format(PyExc_ValueError, "route_ptr must have ndev * ndev + 1 = %zd entries ending at len(route_res)",
                     (Py_ssize_t)pairs + 1);
        return -1;
    }
    if (!(isfinite(copy_bw) && copy_bw >= 0)) {
        PyErr_SetString(PyExc_ValueError, "copy_bandwidth must be finite and >= 0");
        return -1;
    }
    if (split != Py_None) {
        s->split = sw_py_array(split, NPY_FLOAT64, 2, "split");
        if (!s->split) {
            return -1;
        }
        if (PyArray_DIM(s->split, 0) != p->nops || PyArray_DIM(s->split, 1) != 2) {
            PyErr_Format(PyExc_ValueError, "split must be (%d, 2): forward, backward seconds per op", p->nops);
            return -1;
        }
        if (!measurements_ok(s->split, "measured compute times")) {
            return -1;
        }
    }
    if (per_kind(rates, "element_seconds", "measured seconds per element", &s->rates) < 0 ||
        per_kind(fixed, "element_fixed", "measured fixed seconds per task", &s->fixed) < 0) {
        return -1;
    }
    if (fill != Py_None) {   /* shared compute: output elements that fill each device (0: not shared) */
        s->fill = sw_py_array(fill, NPY_FLOAT64, 1, "dev_fill");
        if (!s->fill) {
            return -1;
        }
        if (PyArray_DIM(s->fill, 0) != p->ndev) {
            PyErr_Format(PyExc_ValueError, "dev_fill must have one entry per device (%d)", p->ndev);
            return -1;
        }
    }
    s->machine = (sw_machine){.ndev = p->ndev, .cores = cores, .nres = nres, .route_ptr = ptr,
                              .route_res = PyArray_DATA(s->route_res), .nroute = ptr[pairs],
                              .copy_bandwidth = copy_bw, .dev_fill = s->fill ? PyArray_DATA(s->fill) : NULL};
    s->measured = (sw_measured){s->split ? PyArray_DATA(s->split) : NULL, s->rates ? PyArray_DATA(s->rates) : NULL,
                                s->fixed ? PyArray_DATA(s->fixed) : NULL};
    if (host_bw != Py_None) {   /* each device's host links: device-to-host, host-to-device bytes/s */
        s->host_bw = sw_py_array(host_bw, NPY_FLOAT64, 1, "host_bw");
        if (!s->host_bw) {
            return -1;
        }
        if (PyArray_DIM(s->host_bw, 0) != 2 * (npy_intp)p->ndev) {
            PyErr_Format(PyExc_ValueError, "host_bw must have 2 entries per device (%d)", 2 * p->ndev);
            return -1;
        }
        s->machine.host_bw = PyArray_DATA(s->host_bw);
        s->machine.host_res = host_res;
    }
    return 0;
}

/* The processes of an MPI job (rank: int32 per device, or None: one process) and the link between
 * them (bytes/s, 0: as a copy inside one process; seconds per message) into s->machine. */
static int parse_ranks(const sw_problem *p, PyObject *rank, double rank_bw, double rank_latency, sim_args *s) {
    if (!(isfinite(rank_bw) && rank_bw >= 0) || !(isfinite(rank_latency) && rank_latency >= 0)) {
        PyErr_SetString(PyExc_ValueError, "rank_bandwidth and rank_latency must be finite and >= 0");
        return -1;
    }
    s->machine.rank_bandwidth = rank_bw;
    s->machine.rank_latency = rank_latency;
    if (rank == Py_None) {
        return 0;
    }
    s->rank = sw_py_array(rank, NPY_INT32, 1, "rank");
    if (!s->rank) {
        return -1;
    }
    if (PyArray_DIM(s->rank, 0) != p->ndev) {
        PyErr_Format(PyExc_ValueError, "rank must have one entry per device (%d)", p->ndev);
        return -1;
    }
    const int32_t *r = PyArray_DATA(s->rank);
    for (int d = 0; d < p->ndev; d++) {
        if (r[d] < 0) {
            PyErr_Format(PyExc_ValueError, "rank: device %d's rank %d must be >= 0", d, r[d]);
            return -1;
        }
    }
    s->machine.rank = r;
    return 0;
}

/* `iterations` copies of the iteration back to back, with no barrier between them (iterations.c):
 * r holds the replay of the concatenated graph (iterations x g's tasks). */
static sw_status run_back_to_back(const sw_problem *p, const sim_args *s, const sw_streams *streams,
                                  const sw_task_graph *g, const sw_memory_plan *mp, const double *modelled,
                                  int iterations, sw_sim_result *r) {
    sw_iterations it;
    sw_task_order order = {0};
    SW_TRY(sw_iterations_build(g, mp, streams, iterations, &it));
    double *durations = malloc(sizeof *durations * ((size_t)it.g.ntasks + 1));
    sw_status st = durations ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory");
    for (int32_t t = 0; st == SW_OK && t < it.g.ntasks; t++) {
        durations[t] = modelled[t % g->ntasks];
    }
    if (st == SW_OK) {
        st = sw_task_order_build_on(&it.g, &it.mp, sw_iterations_streams(&it), &order);
    }
    if (st == SW_OK) {
        st = sw_simulate_graph_on(p, &it.g, &order, sw_iterations_streams(&it), durations, &s->machine, r);
    }
    free(durations);
    sw_task_order_free(&order);
    sw_iterations_free(&it);
    return st;
}

/* Time l's graph (with its swap tasks, on its streams), plan memory and order the tasks as the
 * runtime does (its alignment, reuse on) and replay, with the GIL released; everything is freed on
 * failure.  arena and host (ndev each) get the memory plan's arenas and host regions.  When the
 * lower bound of the graph (sw_simulate_lower_bound) reaches `bound`, the replay is skipped: r
 * holds only that bound as its makespan and *bounded is set (a search discarding plans no faster
 * than its best needs no more).  `kept`: the graph's memory plan made before (a TaskGraph's), or
 * NULL: made here, and then, when `made` is not NULL, handed out in *made for the caller to keep
 * (else freed). */
static sw_status run_plan(const sw_problem *p, const sw_lowering *l, const sim_args *s, double bound, int iterations,
                          const sw_memory_plan *kept, sw_memory_plan **made, double **modelled, sw_sim_result *r,
                          int *bounded, int64_t *arena, int64_t *host) {
    *bounded = 0;
    const sw_task_graph *g = &l->g;
    sw_streams view;
    const sw_streams *streams = sw_lowering_streams(l, &view);
    *modelled = malloc(sizeof **modelled * ((size_t)g->ntasks + 1));
    sw_status st = *modelled ? sw_task_durations(p, &l->plan, g, &s->measured, *modelled)
                             : SW_FAIL(SW_ERR_NOMEM, "out of memory");
    /* the bound holds while every device runs one task at a time: one stream per device, or
     * no shared compute (with several streams sharing a device, two kernels may overlap) */
    if (st == SW_OK && isfinite(bound) && iterations == 1 && !(streams && s->machine.dev_fill)) {
        double lower;
        st = sw_simulate_lower_bound(p, g, *modelled, &s->machine, &lower);
        if (st == SW_OK && lower >= bound) {
            r->makespan = lower;
            *bounded = 1;
            return SW_OK;
        }
    }
    SW_TRY(st);
    sw_memory_plan *own = NULL;
    if (!kept) {
        st = sw_py_runtime_memory_plan(l, &own);
    }
    const sw_memory_plan *mp = kept ? kept : own;
    sw_task_order order = {0};
    if (st == SW_OK && iterations > 1) {
        st = l->swapped ? SW_FAIL(SW_ERR_VALUE, "iterations back to back are not simulated with a swap plan")
                        : run_back_to_back(p, s, streams, g, mp, *modelled, iterations, r);
    } else if (st == SW_OK) {
        memcpy(arena, mp->arena, sizeof *arena * (size_t)p->ndev);   /* what each device allocates */
        memcpy(host, mp->host_arena, sizeof *host * (size_t)p->ndev);
        st = sw_task_order_build_on(g, mp, streams, &order);
        if (st == SW_OK) {
            st = sw_simulate_graph_on(p, g, &order, streams, *modelled, &s->machine, r);
        }
    }
    sw_task_order_free(&order);
    if (own && made && st == SW_OK) {
        *made = own;
    } else if (own) {
        sw_memory_plan_free(own);
        free(own);
    }
    return st;
}

static int put_replay(PyObject *d, const sw_task_graph *g, const double *modelled, sw_sim_result *r, int ndev) {
    npy_intp n = g->ntasks;
    int32_t *res = r->res;   /* adopted by the array: every transfer lists its route's links (670 MB for a
                                parameter server over a chain of 4,096 devices), not copied again */
    r->res = NULL;
    if (sw_py_put(d, "res", sw_py_adopt(res, r->res_ptr[n], NPY_INT32)) < 0) {
        return -1;
    }
    return sw_py_put(d, "modelled", sw_py_contiguous(modelled, n, NPY_FLOAT64)) ||
           sw_py_put(d, "start", sw_py_contiguous(r->start, n, NPY_FLOAT64)) ||
           sw_py_put(d, "duration", sw_py_contiguous(r->duration, n, NPY_FLOAT64)) ||
           sw_py_put(d, "res_ptr", sw_py_contiguous(r->res_ptr, n + 1, NPY_INT32)) ||
           sw_py_put(d, "busy", sw_py_contiguous(r->busy, ndev, NPY_FLOAT64)) ||
           sw_py_put(d, "iteration_time", PyFloat_FromDouble(r->makespan)) ? -1 : 0;
}

/* Replay l's graph on the parsed machine: a dict (iteration_time, ntasks, bounded; unless brief or
 * bounded, every task's arrays, the replay, the arenas), or NULL with an exception. */
static PyObject *simulate_on(const sw_problem *p, const sw_lowering *l, const sim_args *s, double bound,
                             int iterations, int brief, TaskGraphObject *tg) {
    brief = brief || iterations > 1;   /* back to back: the time only */
    int64_t *arena = PyMem_Calloc((size_t)p->ndev + 1, sizeof *arena);
    int64_t *host = PyMem_Calloc((size_t)p->ndev + 1, sizeof *host);
    sw_sim_result r = {0};
    double *modelled = NULL;
    int bounded = 0;
    PyObject *d = NULL;
    if (!arena || !host) {
        PyErr_NoMemory();
        goto done;
    }
    sw_status st;
    const sw_memory_plan *kept = tg ? tg->kept_plan : NULL;   /* (read with the GIL held) */
    sw_memory_plan *made = NULL;
    Py_BEGIN_ALLOW_THREADS
    st = run_plan(p, l, s, bound, iterations, kept, tg ? &made : NULL, &modelled, &r, &bounded, arena, host);
    Py_END_ALLOW_THREADS
    if (made) {   /* the TaskGraph keeps the memory plan made for its next pass */
        sw_py_tg_keep_memory_plan(tg, made);
    }
    if (st != SW_OK) {
        sw_py_raise(st);
        goto done;
    }
    const sw_task_graph *g = &l->g;
    d = PyDict_New();
    if (!d || sw_py_put(d, "iteration_time", PyFloat_FromDouble(r.makespan)) ||
        sw_py_put(d, "ntasks", PyLong_FromLong(g->ntasks)) || sw_py_put(d, "bounded", PyBool_FromLong(bounded))) {
        Py_CLEAR(d);
    } else if (!brief && !bounded &&
               (sw_py_put_tasks(d, g) < 0 || sw_py_put_memory(d, g, p->ndev) < 0 ||
                put_replay(d, g, modelled, &r, p->ndev) < 0 ||
                sw_py_put(d, "arena", sw_py_contiguous(arena, p->ndev, NPY_INT64)) < 0 ||
                sw_py_put(d, "host_arena", sw_py_contiguous(host, p->ndev, NPY_INT64)) < 0)) {
        Py_CLEAR(d);
    }
done:
    PyMem_Free(arena);
    PyMem_Free(host);
    free(modelled);
    sw_sim_result_free(&r);
    return d;
}

PyObject *sw_py_problem_simulate_plan(ProblemObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"kinds", "degrees", "dev_ptr", "devices", "route_ptr", "route_res", "nres", "cores",
                             "split", "element_seconds", "copy_bandwidth", "element_fixed", "streams",
                             "dev_fill", "swap", "host_bw", "host_res", "bound", "brief", "iterations", "rank",
                             "rank_bandwidth", "rank_latency", NULL};
    PyObject *k, *dg, *ptr, *dv, *rp, *rr, *split = Py_None, *rates = Py_None, *fixed = Py_None;
    PyObject *streams_obj = Py_None, *fill = Py_None, *swap_obj = Py_None, *host_bw_obj = Py_None;
    PyObject *rank_obj = Py_None;
    int nres, cores = 0, host_res = -1, brief = 0, iterations = 1;
    double copy_bw = 0.0, bound = INFINITY, rank_bw = 0.0, rank_latency = 0.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOi|iOOdOOOOOidpiOdd", kwlist, &k, &dg, &ptr, &dv, &rp, &rr,
                                     &nres, &cores, &split, &rates, &copy_bw, &fixed, &streams_obj, &fill,
                                     &swap_obj, &host_bw_obj, &host_res, &bound, &brief, &iterations, &rank_obj,
                                     &rank_bw, &rank_latency) ||
        !sw_py_problem_ready(self) || !sw_py_iterations_ok(iterations)) {
        return NULL;
    }
    self->busy = 1;   /* from the conversions on: they read the problem */
    sim_args s;
    sw_lowering *l = NULL;
    PyObject *d = NULL;
    if (parse_machine(self->p, rp, rr, nres, cores, split, rates, fixed, copy_bw, fill, host_bw_obj, host_res, &s) ==
            0 &&
        parse_ranks(self->p, rank_obj, rank_bw, rank_latency, &s) == 0 &&
        sw_py_lower_args(self, k, dg, ptr, dv, streams_obj, swap_obj, &l) == 0) {
        d = simulate_on(self->p, l, &s, bound, iterations, brief, NULL);
    }
    self->busy = 0;
    sw_lowering_free(l);
    sim_args_free(&s);
    return d;
}

/* TaskGraph.simulate(route_ptr, route_res, nres, cores=0, split=None, element_seconds=None,
 *                    copy_bandwidth=0.0, element_fixed=None, dev_fill=None, host_bw=None, host_res=-1,
 *                    bound=inf, brief=False, iterations=1, rank=None, rank_bandwidth=0.0,
 *                    rank_latency=0.0) -> dict, as Problem.simulate_plan */
PyObject *sw_py_tg_simulate(TaskGraphObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"route_ptr", "route_res", "nres", "cores", "split", "element_seconds", "copy_bandwidth",
                             "element_fixed", "dev_fill", "host_bw", "host_res", "bound", "brief", "iterations",
                             "rank", "rank_bandwidth", "rank_latency", NULL};
    PyObject *rp, *rr, *split = Py_None, *rates = Py_None, *fixed = Py_None, *fill = Py_None;
    PyObject *host_bw_obj = Py_None, *rank_obj = Py_None;
    int nres, cores = 0, host_res = -1, brief = 0, iterations = 1;
    double copy_bw = 0.0, bound = INFINITY, rank_bw = 0.0, rank_latency = 0.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOi|iOOdOOOidpiOdd", kwlist, &rp, &rr, &nres, &cores, &split, &rates,
                                     &copy_bw, &fixed, &fill, &host_bw_obj, &host_res, &bound, &brief, &iterations,
                                     &rank_obj, &rank_bw, &rank_latency) ||
        !sw_py_iterations_ok(iterations) || !sw_py_tg_enter(self)) {
        return NULL;
    }
    sim_args s;
    PyObject *d = NULL;
    if (parse_machine(self->p, rp, rr, nres, cores, split, rates, fixed, copy_bw, fill, host_bw_obj, host_res, &s) ==
            0 &&
        parse_ranks(self->p, rank_obj, rank_bw, rank_latency, &s) == 0) {
        d = simulate_on(self->p, self->l, &s, bound, iterations, brief, self);
    }
    sim_args_free(&s);
    sw_py_tg_leave(self);
    return d;
}

/* ------------------------------------------------------------------ Problem.worker_times */
PyObject *sw_py_problem_worker_times(ProblemObject *self, PyObject *args) {
    int op, rvar = -1, rdeg = 1;
    PyObject *dg_o, *dv_o;
    if (!PyArg_ParseTuple(args, "iOO|(ii)", &op, &dg_o, &dv_o, &rvar, &rdeg) || !sw_py_problem_ready(self)) {
        return NULL;
    }
    if (op < 0 || op >= self->p->nops) {
        PyErr_Format(PyExc_IndexError, "op index %d out of range 0..%d", op, self->p->nops - 1);
        return NULL;
    }
    self->busy = 1;   /* from the conversions on: they read the problem */
    PyArrayObject *dg = sw_py_array(dg_o, NPY_INT32, 1, "degrees");
    PyArrayObject *dv = dg ? sw_py_array(dv_o, NPY_INT32, 1, "devices") : NULL;
    PyArrayObject *out = NULL;
    const sw_op *o = &self->p->ops[op];
    if (!dv) {
        goto done;
    }
    sw_config c = {.deg = {1, 1, 1, 1, 1}, .rvar = -1, .rdeg = 1, .nworkers = 1, .dev_offset = 0};
    int64_t k = 1;
    const int32_t *deg = PyArray_DATA(dg), *devs = PyArray_DATA(dv);
    for (int d = 0; d < PyArray_DIM(dg, 0); d++) {
        if (d >= o->out_rank || deg[d] < 1 || o->extent[d] % deg[d] != 0) {
            PyErr_Format(PyExc_ValueError, "op %d: degrees must divide its %d output dimensions", op, o->out_rank);
            goto done;
        }
        c.deg[d] = deg[d];
        k *= deg[d];
    }
    sw_status st = sw_config_set_reduction(o, op, rvar, rdeg, &c);
    if (st != SW_OK) {
        sw_py_raise(st);
        goto done;
    }
    k *= c.rdeg;
    npy_intp n = PyArray_DIM(dv, 0);
    if (k != n) {
        PyErr_Format(PyExc_ValueError, "op %d: %lld workers need as many devices, got %zd", op, (long long)k,
                     (Py_ssize_t)n);
        goto done;
    }
    for (npy_intp w = 0; w < n; w++) {
        if (devs[w] < 0 || devs[w] >= self->p->ndev) {
            PyErr_Format(PyExc_ValueError, "device %d out of range 0..%d", devs[w], self->p->ndev - 1);
            goto done;
        }
    }
    c.nworkers = (int32_t)k;
    out = (PyArrayObject *)PyArray_SimpleNew(1, &n, NPY_FLOAT64);
    if (out) {
        double *t = PyArray_DATA(out);
        for (npy_intp w = 0; w < n; w++) {
            t[w] = sw_worker_time(self->p, op, &c, (int)w, devs[w]);
        }
    }
done:
    self->busy = 0;
    Py_XDECREF(dg);
    Py_XDECREF(dv);
    return (PyObject *)out;
}

/* ------------------------------------------------------------------ registration */
static PyObject *names(const char *const *items, int n) {
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *s = PyUnicode_FromString(items[i]);
        if (!s) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

int sw_py_register_simulate(PyObject *module) {
    import_array1(-1);  /* this file's own NumPy API table */
    PyObject *kinds = names(sw_task_kind_names, SW_TASK_NKINDS), *phases = names(PHASE_NAMES, 4),
             *bufs = names(BUFFER_KIND_NAMES, SW_BUF_NKINDS);
    int rc = (!kinds || !phases || !bufs || PyModule_AddObjectRef(module, "TASK_KINDS", kinds) < 0 ||
              PyModule_AddObjectRef(module, "PHASES", phases) < 0 ||
              PyModule_AddObjectRef(module, "BUFFER_KINDS", bufs) < 0)
                 ? -1
                 : 0;
    Py_XDECREF(kinds);
    Py_XDECREF(phases);
    Py_XDECREF(bufs);
    return rc;
}
