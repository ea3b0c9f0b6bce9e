/* sim_plan.c -- replaying a lowered plan: resources, transfer times, dispatch, summary.
 *
 * Turns a task graph and its durations (sim_durations.c) into the flat arrays
 * of the event loop (simulate.c) and reads the result back:
 *
 *   resources   compute and bookkeeping tasks hold their device (and, on CPU
 *               workers sharing a machine, core device mod cores); a transfer
 *               a -> b holds the resources of its route (links along
 *               DeviceGraph.route, or the two nodes' network adapters), which
 *               the caller numbers, and on shared cores the receiving core (the
 *               executor's thread copies); load_input and join hold nothing
 *   threads     on shared cores (cores > 0) the CPU executor runs the tasks of
 *               devices c, c + cores, ... on one thread in program order, so
 *               every task also waits for the task before it on its core; with a
 *               measured wake latency w, a task that waits for tasks of another
 *               thread starts no sooner than w after the last of them (its wake
 *               task: ids after the others, holding nothing): a thread blocked on
 *               an event takes that long to run again
 *   transfers   take bytes / bandwidth on top of their modelled duration (the
 *               route's bandwidth, or a measured copy bandwidth)
 *   dispatch    with a measured per-task overhead o, task i (of n) first runs a
 *               dispatch task n + i of o seconds on the one interpreter and its
 *               device, and keeps o less itself (simulate.py's _with_dispatch);
 *               with a wake latency w too, the interpreter changes threads at
 *               w's cost (the lock's waiting thread sleeps: sw_handoff)
 *   summary     makespan = latest end; busy[d] = seconds of the tasks holding
 *               device d (dispatch tasks left out), summed in task order
 */
#include <stdlib.h>  /* malloc, calloc, free */
#include <string.h>  /* memcpy, memset */

#include "shardwise.h"

static int holds_device(const sw_task *t) {
    return !sw_is_transfer(t) && t->kind != SW_TASK_JOIN && t->kind != SW_TASK_LOAD_INPUT;
}

static sw_status check_machine(const sw_problem *p, const sw_task_graph *g, const sw_machine *m) {
    int64_t pairs = (int64_t)m->ndev * m->ndev;
    if (m->ndev != p->ndev || m->cores < 0 || m->cores > m->ndev || m->nres < m->ndev + m->cores) {
        return SW_FAIL(SW_ERR_VALUE, "machine: %d devices and %d cores in %d resources, for a problem of %d devices",
                       m->ndev, m->cores, m->nres, p->ndev);
    }
    if (m->dispatch > 0 && (m->interpreter < m->ndev + m->cores || m->interpreter >= m->nres)) {
        return SW_FAIL(SW_ERR_VALUE, "machine: interpreter resource %d outside %d..%d", m->interpreter,
                       m->ndev + m->cores, m->nres - 1);
    }
    if (!(m->dispatch >= 0) || !(m->copy_bandwidth >= 0) || !(m->wake_latency >= 0)) {
        return SW_FAIL(SW_ERR_VALUE, "machine: dispatch time, copy bandwidth and wake latency must be >= 0");
    }
    if (m->route_ptr[0] != 0) {
        return SW_FAIL(SW_ERR_VALUE, "machine: route pointers must start at 0");
    }
    for (int64_t q = 0; q < pairs; q++) {
        if (m->route_ptr[q + 1] < m->route_ptr[q]) {
            return SW_FAIL(SW_ERR_VALUE, "machine: route pointers must not decrease");
        }
        for (int32_t k = m->route_ptr[q]; k < m->route_ptr[q + 1]; k++) {
            if (m->route_res[k] < m->ndev + m->cores || m->route_res[k] >= m->nres) {
                return SW_FAIL(SW_ERR_VALUE, "machine: route resource %d outside %d..%d", m->route_res[k],
                               m->ndev + m->cores, m->nres - 1);
            }
        }
    }
    for (int32_t i = 0; i < g->ntasks; i++) {
        const sw_task *t = &g->tasks[i];
        if (sw_is_transfer(t) && m->copy_bandwidth <= 0 && !(p->bw[(size_t)t->src_device * p->ndev + t->device] > 0)) {
            return SW_FAIL(SW_ERR_VALUE, "no route from device %d to device %d", t->src_device, t->device);
        }
    }
    return SW_OK;
}

/* Resources of task t (at most 2 + the longest route) into out; returns how many. */
static int task_resources(const sw_task *t, const sw_machine *m, int32_t *out) {
    if (sw_is_transfer(t)) {
        int64_t q = (int64_t)t->src_device * m->ndev + t->device;
        int n = 0;
        for (int32_t k = m->route_ptr[q]; k < m->route_ptr[q + 1]; k++) {
            out[n++] = m->route_res[k];
        }
        if (m->cores > 0) {
            out[n++] = m->ndev + t->device % m->cores;
        }
        return n;
    }
    if (!holds_device(t)) {
        return 0;
    }
    out[0] = t->device;
    if (m->cores > 0) {
        out[1] = m->ndev + t->device % m->cores;
        return 2;
    }
    return 1;
}

/* The event loop's arrays, for n tasks or 2n with dispatch tasks. */
typedef struct {
    int32_t n;
    double *duration;
    int32_t *dep_ptr, *deps, *res_ptr, *res;
    double *start;
    int32_t *thread;       /* with dispatch and wake-ups: per task, the executor thread running it */
    double *handoff;       /* with dispatch and wake-ups: per resource, the interpreter's hand-off time */
} replay;

static void replay_free(replay *rp) {
    free(rp->thread);
    free(rp->handoff);
    free(rp->duration);
    free(rp->dep_ptr);
    free(rp->deps);
    free(rp->res_ptr);
    free(rp->res);
    free(rp->start);
}

static double task_seconds(const sw_problem *p, const sw_task *t, double modelled, const sw_machine *m) {
    double d = modelled;
    if (sw_is_transfer(t)) {
        double bw = m->copy_bandwidth > 0 ? m->copy_bandwidth : p->bw[(size_t)t->src_device * p->ndev + t->device];
        d += (double)t->nbytes / bw;
    }
    if (m->dispatch > 0) {  /* the dispatch task takes its share */
        d = d >= m->dispatch ? d - m->dispatch : d;
    }
    return d;
}

/* The thread (core) of a task on shared cores. */
static int core_of(const sw_task_graph *g, int32_t i, const sw_machine *m) { return g->tasks[i].device % m->cores; }

/* Task i's dependencies on another core's thread: with a wake latency its wake task waits for them. */
static int32_t cross_deps(const sw_task_graph *g, int32_t i, const sw_machine *m, int32_t *deps, int32_t nd) {
    for (int32_t k = g->dep_ptr[i]; k < g->dep_ptr[i + 1]; k++) {
        if (core_of(g, g->deps[k], m) != core_of(g, i, m)) {
            deps[nd++] = g->deps[k];
        }
    }
    return nd;
}

/* Append the dependencies of task i's first part (the task, or its dispatch task) to
 * deps[nd..] and return the new count: the graph's; on shared cores the task before it on its
 * core's thread (previous[core], updated); with wake tasks (wake_base >= 0), those on another
 * core are replaced by wake task wake_base + i, which the caller gives them. */
static int32_t add_deps(const sw_task_graph *g, int32_t i, int32_t *previous, const sw_machine *m, int32_t wake_base,
                        int32_t *deps, int32_t nd) {
    int crossing = 0;
    for (int32_t k = g->dep_ptr[i]; k < g->dep_ptr[i + 1]; k++) {
        if (wake_base >= 0 && core_of(g, g->deps[k], m) != core_of(g, i, m)) {
            crossing = 1;
        } else {
            deps[nd++] = g->deps[k];
        }
    }
    if (crossing) {
        deps[nd++] = wake_base + i;
    }
    if (previous) {
        int core = core_of(g, i, m);
        if (previous[core] >= 0) {
            deps[nd++] = previous[core];
        }
        previous[core] = i;
    }
    return nd;
}

/* With dispatch tasks on shared cores: the interpreter lock changes threads at the wake
 * latency's cost (a thread waiting for it sleeps); every replay task gets its thread (core). */
static sw_status interpreter_handoffs(const sw_task_graph *g, const sw_machine *m, replay *rp) {
    rp->thread = malloc(sizeof *rp->thread * ((size_t)rp->n + 1));
    rp->handoff = calloc((size_t)m->nres + 1, sizeof *rp->handoff);
    if (!rp->thread || !rp->handoff) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a replay of %d tasks", rp->n);
    }
    for (int32_t i = 0; i < rp->n; i++) {
        rp->thread[i] = core_of(g, i % g->ntasks, m);
    }
    rp->handoff[m->interpreter] = m->wake_latency;
    return SW_OK;
}

static sw_status build_replay(const sw_problem *p, const sw_task_graph *g, const double *durations,
                              const sw_machine *m, replay *rp) {
    sw_status s;
    int32_t n = g->ntasks;
    int dispatch = m->dispatch > 0;
    int wake = m->cores > 0 && m->wake_latency > 0;
    int32_t wake_base = wake ? (dispatch ? 2 * n : n) : -1;  /* wake task of task i: wake_base + i */
    int64_t longest = 0;
    for (int64_t q = 0; q < (int64_t)m->ndev * m->ndev; q++) {
        int64_t len = m->route_ptr[q + 1] - m->route_ptr[q];
        longest = len > longest ? len : longest;
    }
    rp->n = n * (1 + dispatch + wake);
    size_t cap = (size_t)n * (size_t)(longest + 1 > 2 ? longest + 1 : 2) + (dispatch ? 2 * (size_t)n : 0) + 1;
    rp->duration = malloc(sizeof *rp->duration * ((size_t)rp->n + 1));
    rp->start = calloc((size_t)rp->n + 1, sizeof *rp->start);
    rp->dep_ptr = malloc(sizeof *rp->dep_ptr * ((size_t)rp->n + 1));
    rp->deps = malloc(sizeof *rp->deps * ((size_t)g->ndeps + 3 * (size_t)n + 1));
    rp->res_ptr = malloc(sizeof *rp->res_ptr * ((size_t)rp->n + 1));
    rp->res = malloc(sizeof *rp->res * cap);
    if (!rp->duration || !rp->start || !rp->dep_ptr || !rp->deps || !rp->res_ptr || !rp->res) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a replay of %d tasks", rp->n);
    }
    int32_t *previous = NULL;  /* per core: the last task given to its thread so far, or -1 */
    if (m->cores > 0) {
        previous = malloc(sizeof *previous * (size_t)m->cores);
        if (!previous) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory for a replay of %d tasks", rp->n);
        }
        for (int c = 0; c < m->cores; c++) {
            previous[c] = -1;
        }
    }
    int32_t nres = 0, nd = 0;
    rp->res_ptr[0] = rp->dep_ptr[0] = 0;
    for (int32_t i = 0; i < n; i++) {  /* the graph's tasks: ids 0 .. n-1 */
        const sw_task *t = &g->tasks[i];
        nres += task_resources(t, m, rp->res + nres);
        rp->res_ptr[i + 1] = nres;
        rp->duration[i] = task_seconds(p, t, durations[i], m);
        if (dispatch) {
            rp->deps[nd++] = n + i;
        } else {
            nd = add_deps(g, i, previous, m, wake_base, rp->deps, nd);
        }
        rp->dep_ptr[i + 1] = nd;
    }
    for (int c = 0; previous && c < m->cores; c++) {
        previous[c] = -1;
    }
    for (int32_t i = 0; dispatch && i < n; i++) {  /* their dispatch: ids n .. 2n-1, the original deps */
        rp->res[nres++] = m->interpreter;
        rp->res[nres++] = g->tasks[i].device;
        rp->res_ptr[n + i + 1] = nres;
        rp->duration[n + i] = m->dispatch;
        nd = add_deps(g, i, previous, m, wake_base, rp->deps, nd);
        rp->dep_ptr[n + i + 1] = nd;
    }
    free(previous);
    if (dispatch && wake) {   /* as simulate.py's _run: hand-offs between the threads of shared cores */
        s = interpreter_handoffs(g, m, rp);
        if (s != SW_OK) {
            return s;
        }
    }
    for (int32_t i = 0; wake && i < n; i++) {  /* wake tasks: the thread wakes `wake_latency` after the last */
        int32_t start = nd;                      /* dependency on another thread is done; they hold nothing */
        nd = cross_deps(g, i, m, rp->deps, nd);
        rp->res_ptr[wake_base + i + 1] = nres;
        rp->duration[wake_base + i] = nd > start ? m->wake_latency : 0.0;
        rp->dep_ptr[wake_base + i + 1] = nd;
    }
    return SW_OK;
}

/* Copy the graph's tasks' part of the replay out, and add up the summary. */
static sw_status summarize(const sw_task_graph *g, const sw_machine *m, const replay *rp, sw_sim_result *r) {
    int32_t n = g->ntasks, nres = rp->res_ptr[n];
    r->start = malloc(sizeof *r->start * ((size_t)n + 1));
    r->duration = malloc(sizeof *r->duration * ((size_t)n + 1));
    r->res_ptr = malloc(sizeof *r->res_ptr * ((size_t)n + 1));
    r->res = malloc(sizeof *r->res * ((size_t)nres + 1));
    r->busy = calloc((size_t)m->ndev, sizeof *r->busy);
    if (!r->start || !r->duration || !r->res_ptr || !r->res || !r->busy) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    memcpy(r->start, rp->start, sizeof *r->start * (size_t)n);
    memcpy(r->duration, rp->duration, sizeof *r->duration * (size_t)n);
    memcpy(r->res_ptr, rp->res_ptr, sizeof *r->res_ptr * ((size_t)n + 1));
    memcpy(r->res, rp->res, sizeof *r->res * (size_t)nres);
    r->makespan = 0.0;
    for (int32_t i = 0; i < rp->n; i++) {
        double end = rp->start[i] + rp->duration[i];
        r->makespan = end > r->makespan ? end : r->makespan;
    }
    for (int32_t i = 0; i < n; i++) {
        if (holds_device(&g->tasks[i])) {
            r->busy[g->tasks[i].device] += (rp->start[i] + rp->duration[i]) - rp->start[i];
        }
    }
    return SW_OK;
}

sw_status sw_simulate_graph(const sw_problem *p, const sw_task_graph *g, const double *durations,
                            const sw_machine *m, sw_sim_result *r) {
    memset(r, 0, sizeof *r);
    sw_status s = check_machine(p, g, m);
    if (s != SW_OK) {
        return s;
    }
    replay rp;
    memset(&rp, 0, sizeof rp);
    double loop_end = 0.0;
    s = build_replay(p, g, durations, m, &rp);
    if (s == SW_OK) {
        sw_handoff handoff = {rp.thread, rp.handoff};
        s = sw_simulate_tasks(rp.n, rp.duration, rp.dep_ptr, rp.deps, rp.res_ptr, rp.res, m->nres,
                              rp.handoff ? &handoff : NULL, rp.start, &loop_end);
    }
    if (s == SW_OK) {
        s = summarize(g, m, &rp, r);
    }
    replay_free(&rp);
    if (s != SW_OK) {
        sw_sim_result_free(r);
    }
    return s;
}

void sw_sim_result_free(sw_sim_result *r) {
    free(r->start);
    free(r->duration);
    free(r->res_ptr);
    free(r->res);
    free(r->busy);
    memset(r, 0, sizeof *r);
}
