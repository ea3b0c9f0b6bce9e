/* sim_plan.c -- replaying a lowered plan as the runtime runs it: order, resources, summary.
 *
 * Turns a task graph, the runtime's order of its tasks (order.c) and their
 * durations (sim_durations.c) into the flat arrays of the event loop
 * (simulate.c) and reads the result back:
 *
 *   order       every task runs after what it runs after on the runtime: the
 *               task before it on its device's stream (program order), its
 *               dependencies and the memory plan's reuse edges into it; on
 *               shared cores (cores > 0) the CPU backend runs the streams of
 *               devices c, c + cores, ... on one thread in program order, so a
 *               task also runs after the task before it on its thread
 *   resources   compute and bookkeeping tasks hold their device (and, on shared
 *               cores, core device mod cores); a transfer a -> b holds the
 *               resources of its route (links along DeviceGraph.route, or the
 *               two nodes' network adapters), which the caller numbers, and on
 *               shared cores the receiving core (its thread copies); load_input
 *               and join hold nothing.  Links and adapters are what tasks of
 *               different streams contend for: lowest task id first.
 *   transfers   take bytes / bandwidth on top of their modelled duration (the
 *               route's bandwidth, or a measured copy bandwidth)
 *   summary     makespan = latest end; busy[d] = seconds of the tasks holding
 *               device d, summed in task order
 */
#include <stdlib.h>  /* malloc, calloc, free */
#include <string.h>  /* memset */

#include "shardwise.h"

static int holds_device(const sw_task *t) {
    return !sw_is_transfer(t) && t->kind != SW_TASK_JOIN && t->kind != SW_TASK_LOAD_INPUT;
}

static sw_status check_machine(const sw_problem *p, const sw_task_graph *g, const sw_task_order *o,
                               const sw_machine *m) {
    int64_t pairs = (int64_t)m->ndev * m->ndev;
    if (m->ndev != p->ndev || m->cores < 0 || m->cores > m->ndev || m->nres < m->ndev + m->cores) {
        return SW_FAIL(SW_ERR_VALUE, "machine: %d devices and %d cores in %d resources, for a problem of %d devices",
                       m->ndev, m->cores, m->nres, p->ndev);
    }
    if (!(m->copy_bandwidth >= 0)) {
        return SW_FAIL(SW_ERR_VALUE, "machine: the copy bandwidth must be >= 0");
    }
    if (o->ntasks != g->ntasks) {
        return SW_FAIL(SW_ERR_VALUE, "an order of %d tasks for a graph of %d", o->ntasks, g->ntasks);
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

/* Resources of task t (at most 1 + the longest route) into out; returns how many. */
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

static double task_seconds(const sw_problem *p, const sw_task *t, double modelled, const sw_machine *m) {
    if (!sw_is_transfer(t)) {
        return modelled;
    }
    double bw = m->copy_bandwidth > 0 ? m->copy_bandwidth : p->bw[(size_t)t->src_device * p->ndev + t->device];
    return modelled + (double)t->nbytes / bw;
}

/* The event loop's arrays (CSR dependencies and resources over the graph's tasks). */
typedef struct {
    double *duration, *start;
    int32_t *dep_ptr, *deps, *res_ptr, *res;
} replay;

static void replay_free(replay *rp) {
    free(rp->duration);
    free(rp->start);
    free(rp->dep_ptr);
    free(rp->deps);
    free(rp->res_ptr);
    free(rp->res);
}

/* Task i's dependencies into deps[nd..]: the runtime's order, and on shared cores the task
 * before it on its core's thread (previous[core], updated) unless the order has it already. */
static int32_t add_deps(const sw_task_graph *g, const sw_task_order *o, int32_t i, int32_t *previous,
                        const sw_machine *m, int32_t *deps, int32_t nd) {
    int32_t start = nd;
    for (int32_t k = o->ptr[i]; k < o->ptr[i + 1]; k++) {
        deps[nd++] = o->ids[k];
    }
    if (previous) {
        int core = g->tasks[i].device % m->cores;
        int32_t before = previous[core];
        for (int32_t k = start; k < nd && before >= 0; k++) {
            before = deps[k] == before ? -1 : before;
        }
        if (before >= 0) {
            deps[nd++] = before;
        }
        previous[core] = i;
    }
    return nd;
}

static sw_status build_replay(const sw_problem *p, const sw_task_graph *g, const sw_task_order *o,
                              const double *durations, const sw_machine *m, replay *rp) {
    int32_t n = g->ntasks;
    int64_t longest = 0;
    for (int64_t q = 0; q < (int64_t)m->ndev * m->ndev; q++) {
        int64_t len = m->route_ptr[q + 1] - m->route_ptr[q];
        longest = len > longest ? len : longest;
    }
    rp->duration = malloc(sizeof *rp->duration * ((size_t)n + 1));
    rp->start = calloc((size_t)n + 1, sizeof *rp->start);
    rp->dep_ptr = malloc(sizeof *rp->dep_ptr * ((size_t)n + 1));
    rp->deps = malloc(sizeof *rp->deps * ((size_t)o->ptr[n] + (size_t)n + 1));
    rp->res_ptr = malloc(sizeof *rp->res_ptr * ((size_t)n + 1));
    rp->res = malloc(sizeof *rp->res * ((size_t)n * (size_t)(longest + 1 > 2 ? longest + 1 : 2) + 1));
    int32_t *previous = m->cores > 0 ? malloc(sizeof *previous * (size_t)m->cores) : NULL;
    if (!rp->duration || !rp->start || !rp->dep_ptr || !rp->deps || !rp->res_ptr || !rp->res ||
        (m->cores > 0 && !previous)) {
        free(previous);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a replay of %d tasks", n);
    }
    for (int c = 0; c < m->cores; c++) {
        previous[c] = -1;
    }
    int32_t nres = 0, nd = 0;
    rp->res_ptr[0] = rp->dep_ptr[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        const sw_task *t = &g->tasks[i];
        nres += task_resources(t, m, rp->res + nres);
        rp->res_ptr[i + 1] = nres;
        rp->duration[i] = task_seconds(p, t, durations[i], m);
        nd = add_deps(g, o, i, previous, m, rp->deps, nd);
        rp->dep_ptr[i + 1] = nd;
    }
    free(previous);
    return SW_OK;
}

/* Hand the replay's arrays over to the result, and add up the summary. */
static sw_status summarize(const sw_task_graph *g, const sw_machine *m, replay *rp, double makespan,
                           sw_sim_result *r) {
    r->busy = calloc((size_t)m->ndev + 1, sizeof *r->busy);
    if (!r->busy) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    r->start = rp->start;
    r->duration = rp->duration;
    r->res_ptr = rp->res_ptr;
    r->res = rp->res;
    rp->start = rp->duration = NULL;
    rp->res_ptr = rp->res = NULL;
    r->makespan = makespan;
    for (int32_t i = 0; i < g->ntasks; i++) {
        if (holds_device(&g->tasks[i])) {
            r->busy[g->tasks[i].device] += (r->start[i] + r->duration[i]) - r->start[i];
        }
    }
    return SW_OK;
}

sw_status sw_simulate_graph(const sw_problem *p, const sw_task_graph *g, const sw_task_order *o,
                            const double *durations, const sw_machine *m, sw_sim_result *r) {
    memset(r, 0, sizeof *r);
    SW_TRY(check_machine(p, g, o, m));
    replay rp;
    memset(&rp, 0, sizeof rp);
    double makespan = 0.0;
    sw_status s = build_replay(p, g, o, durations, m, &rp);
    if (s == SW_OK) {
        s = sw_simulate_tasks(g->ntasks, rp.duration, rp.dep_ptr, rp.deps, rp.res_ptr, rp.res, m->nres, rp.start,
                              &makespan);
    }
    if (s == SW_OK) {
        s = summarize(g, m, &rp, makespan, r);
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
