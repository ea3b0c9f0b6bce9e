/* sim_plan.c -- replaying a lowered plan as the runtime runs it: order, resources, summary.
 *
 * Turns a task graph, the runtime's order of its tasks (order.c) and their
 * durations (sim_durations.c) into the flat arrays of the event loop
 * (simulate.c) and reads the result back:
 *
 *   order       every task runs after what it runs after on the runtime (the
 *               task before it on its stream, its dependencies, the memory
 *               plan's reuse edges into it, buffer hazards across streams)
 *   ranks       a resource free to take work starts the ready task that ranks
 *               first: the highest priority of its stream, then the lowest id
 *               (sw_simulate_graph_on; without streams every priority is 0, so
 *               program order).  That is the CPU backend's rule: on shared cores
 *               (cores > 0) thread c runs the streams of devices c, c + cores,
 *               ..., whenever free the most urgent task that may start.  The
 *               event loop queues by task id, so ranks are replayed by
 *               renumbering the tasks in rank order
 *   resources   compute and bookkeeping tasks hold their device (and, on shared
 *               cores, core device mod cores); a transfer a -> b holds the
 *               resources of its route (links along DeviceGraph.route, or the
 *               two nodes' network adapters), which the caller numbers, and on
 *               shared cores the receiving core (its thread copies); load_input
 *               and join hold nothing.  Links and adapters are what tasks of
 *               different streams contend for, in rank order too (one total
 *               order on every resource: no two tasks each first in line on
 *               one of two resources they both need).
 *   transfers   take bytes / bandwidth on top of their modelled duration (the
 *               route's bandwidth, or a measured copy bandwidth)
 *   ranks       (m->rank: an MPI job) a transfer between devices of different ranks
 *               is a message: rank_latency + bytes / rank_bandwidth (0: as above);
 *               on shared cores it holds the sending core too (packing and
 *               unpacking run on both ranks' threads at once)
 *   sharing     a device with a fill (m->dev_fill[d] > 0: a GPU) is a
 *               pool its streams' kernels share instead of a resource held by one
 *               task: each takes sw_task_share of it, in rank order
 *               (sim_share.c); with one stream per device nothing changes
 *   swaps       (swap.c) hold their device's host copy engine of their direction
 *               (resource host_res + 2 device, + 1 for prefetches) for bytes / its
 *               host-link bandwidth, not the device's compute; on shared cores the
 *               device's core too (the CPU backend's thread does the memcpy)
 *   summary     makespan = latest end; busy[d] = seconds of the tasks holding
 *               device d, summed in task order
 */
#include <math.h>    /* INFINITY */
#include <stdlib.h>  /* malloc, calloc, free */
#include <string.h>  /* memset */

#include "internal.h"

static int holds_device(const sw_task *t) {
    return !sw_is_transfer(t) && !sw_is_swap(t) && t->kind != SW_TASK_JOIN && t->kind != SW_TASK_LOAD_INPUT;
}

/* m fits p and g (o: the order to replay, NULL when there is none yet). */
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
    if (!(m->rank_bandwidth >= 0 && m->rank_bandwidth < INFINITY) ||
        !(m->rank_latency >= 0 && m->rank_latency < INFINITY)) {
        return SW_FAIL(SW_ERR_VALUE, "machine: the rank link's bandwidth and latency must be finite and >= 0");
    }
    for (int32_t d = 0; m->rank && d < m->ndev; d++) {
        if (m->rank[d] < 0) {
            return SW_FAIL(SW_ERR_VALUE, "machine: device %d's rank %d must be >= 0", d, m->rank[d]);
        }
    }
    for (int32_t d = 0; m->dev_fill && d < m->ndev; d++) {
        if (!(m->dev_fill[d] >= 0 && m->dev_fill[d] < 1e18)) {
            return SW_FAIL(SW_ERR_VALUE, "machine: device %d's fill (outputs) %g must be finite and >= 0", d,
                           m->dev_fill[d]);
        }
    }
    if (o && o->ntasks != g->ntasks) {
        return SW_FAIL(SW_ERR_VALUE, "an order of %d tasks for a graph of %d", o->ntasks, g->ntasks);
    }
    if (m->route_ptr[0] != 0 || m->route_ptr[pairs] != m->nroute) {
        return SW_FAIL(SW_ERR_VALUE, "machine: route pointers must run from 0 to the %d route entries", m->nroute);
    }
    for (int32_t i = 0; i < g->ntasks; i++) {
        const sw_task *t = &g->tasks[i];
        /* the routes the replay reads, those of the transfers' pairs, and no others: the pointer
         * over every pair has 16.8 million entries at 4,096 devices, a search replays dozens of plans */
        if (sw_is_transfer(t)) {
            int64_t q = (int64_t)t->src_device * m->ndev + t->device;
            if (!(0 <= m->route_ptr[q] && m->route_ptr[q] <= m->route_ptr[q + 1] && m->route_ptr[q + 1] <= m->nroute)) {
                return SW_FAIL(SW_ERR_VALUE, "machine: the route pointers of pair %d -> %d (%d, %d) must not decrease "
                               "and lie in 0..%d", t->src_device, t->device, m->route_ptr[q], m->route_ptr[q + 1],
                               m->nroute);
            }
            for (int32_t k = m->route_ptr[q]; k < m->route_ptr[q + 1]; k++) {
                if (m->route_res[k] < m->ndev + m->cores || m->route_res[k] >= m->nres) {
                    return SW_FAIL(SW_ERR_VALUE, "machine: route resource %d outside %d..%d", m->route_res[k],
                                   m->ndev + m->cores, m->nres - 1);
                }
            }
        }
        if (sw_is_transfer(t) && m->copy_bandwidth <= 0 && !(p->bw[(size_t)t->src_device * p->ndev + t->device] > 0)) {
            return SW_FAIL(SW_ERR_VALUE, "no route from device %d to device %d", t->src_device, t->device);
        }
        if (sw_is_swap(t) && (!m->host_bw || m->host_res < m->ndev + m->cores || m->host_res + 2 * m->ndev > m->nres ||
                              !(m->host_bw[2 * t->device] > 0) || !(m->host_bw[2 * t->device + 1] > 0))) {
            return SW_FAIL(SW_ERR_VALUE, "task %d swaps with the host, but the machine has no host links for "
                           "device %d", i, t->device);
        }
    }
    return SW_OK;
}

/* Is task t's device a pool its kernels share (sim_share.c)? */
static int shares_device(const sw_task *t, const sw_machine *m) {
    return m->dev_fill && holds_device(t) && m->dev_fill[t->device] > 0;
}

/* Is task t a message between the devices of two ranks? */
static int crosses_ranks(const sw_task *t, const sw_machine *m) {
    return m->rank && sw_is_transfer(t) && m->rank[t->src_device] != m->rank[t->device];
}

/* The links (or adapters) of task t's route: 0 unless t is a transfer (checked by check_machine). */
static int32_t route_length(const sw_task *t, const sw_machine *m) {
    if (!sw_is_transfer(t)) {
        return 0;
    }
    int64_t q = (int64_t)t->src_device * m->ndev + t->device;
    return m->route_ptr[q + 1] - m->route_ptr[q];
}

/* Resources of task t (at most 2 + its route) into out; returns how many. */
static int task_resources(const sw_task *t, const sw_machine *m, int32_t *out) {
    if (sw_is_swap(t)) {   /* the device's copy engine of that direction; on shared cores, the thread copies */
        out[0] = m->host_res + 2 * t->device + (t->kind == SW_TASK_SWAP_IN);
        if (m->cores > 0) {
            out[1] = m->ndev + t->device % m->cores;
            return 2;
        }
        return 1;
    }
    if (sw_is_transfer(t)) {
        int64_t q = (int64_t)t->src_device * m->ndev + t->device;
        int n = 0;
        for (int32_t k = m->route_ptr[q]; k < m->route_ptr[q + 1]; k++) {
            out[n++] = m->route_res[k];
        }
        if (m->cores > 0) {
            out[n++] = m->ndev + t->device % m->cores;
            if (crosses_ranks(t, m) && t->src_device % m->cores != t->device % m->cores) {
                out[n++] = m->ndev + t->src_device % m->cores;   /* the sender packs */
            }
        }
        return n;
    }
    if (!holds_device(t)) {
        return 0;
    }
    out[0] = t->device;   /* a shared device too: the replay leaves it out of the exclusive ones */
    if (m->cores > 0) {
        out[1] = m->ndev + t->device % m->cores;
        return 2;
    }
    return 1;
}

static double task_seconds(const sw_problem *p, const sw_task *t, double modelled, const sw_machine *m) {
    if (sw_is_swap(t)) {
        double bw = m->host_bw[2 * t->device + (t->kind == SW_TASK_SWAP_IN)];
        return modelled + (double)t->elements * p->bytes_per_element / bw;
    }
    if (!sw_is_transfer(t)) {
        return modelled;
    }
    double bw = m->copy_bandwidth > 0 ? m->copy_bandwidth : p->bw[(size_t)t->src_device * p->ndev + t->device];
    if (crosses_ranks(t, m)) {   /* an MPI message (a fused ring's link: one per chunk it carries) */
        double rank_bw = m->rank_bandwidth > 0 ? m->rank_bandwidth : bw;
        double messages = t->kind == SW_TASK_RING ? (double)t->slot : 1.0;
        return modelled + messages * m->rank_latency + sw_wire_bytes(p->bytes_per_element, t) / rank_bw;
    }
    return modelled + sw_wire_bytes(p->bytes_per_element, t) / bw;
}

/* The event loop's arrays (CSR dependencies and resources over the graph's tasks). */
typedef struct {
    double *duration, *start;
    const int32_t *dep_ptr, *deps;   /* the order's own arrays (or, ranked, the caller's), not freed here:
                                        a copy was 70 MB of new memory per 1,024-GPU replay */
    int32_t *res_ptr, *res;
    int32_t *pool;    /* NULL, or per task the device whose compute it shares (-1: none) */
    double *share;    /* with pool: the fraction of that device it fills */
} replay;

static void replay_free(replay *rp) {
    free(rp->duration);
    free(rp->start);
    free(rp->pool);
    free(rp->share);
    free(rp->res_ptr);
    free(rp->res);
}

static sw_status build_replay(const sw_problem *p, const sw_task_graph *g, const sw_task_order *o,
                              const double *durations, const sw_machine *m, replay *rp) {
    int32_t n = g->ntasks;
    size_t entries = 1;   /* every task's resources: its route and at most 2 more (task_resources) */
    for (int32_t i = 0; i < n; i++) {
        entries += 2 + (size_t)route_length(&g->tasks[i], m);
    }
    rp->duration = malloc(sizeof *rp->duration * ((size_t)n + 1));
    rp->start = calloc((size_t)n + 1, sizeof *rp->start);
    rp->dep_ptr = o->ptr;   /* the order's CSR (o->ptr[0] is 0), read as it is */
    rp->deps = o->ids;
    rp->res_ptr = malloc(sizeof *rp->res_ptr * ((size_t)n + 1));
    rp->res = malloc(sizeof *rp->res * entries);
    if (!rp->duration || !rp->start || !rp->res_ptr || !rp->res) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a replay of %d tasks", n);
    }
    if (m->dev_fill) {
        rp->pool = malloc(sizeof *rp->pool * ((size_t)n + 1));
        rp->share = malloc(sizeof *rp->share * ((size_t)n + 1));
        if (!rp->pool || !rp->share) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory for a replay of %d tasks", n);
        }
    }
    int32_t nres = 0;
    rp->res_ptr[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        const sw_task *t = &g->tasks[i];
        if (rp->pool) {
            rp->pool[i] = shares_device(t, m) ? t->device : -1;
            rp->share[i] = sw_task_share(t, m);
        }
        nres += task_resources(t, m, rp->res + nres);
        rp->res_ptr[i + 1] = nres;
        rp->duration[i] = task_seconds(p, t, durations[i], m);
    }
    return SW_OK;
}

static sw_status busy_shared(const sw_task_graph *g, const int32_t *pool, sw_sim_result *r);

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
        if (holds_device(&g->tasks[i]) && !(rp->pool && rp->pool[i] >= 0)) {
            r->busy[g->tasks[i].device] += (r->start[i] + r->duration[i]) - r->start[i];
        }
    }
    return rp->pool ? busy_shared(g, rp->pool, r) : SW_OK;
}

static int by_device_then_start(const void *pa, const void *pb) {
    const double *a = pa, *b = pb;   /* (device, start, end) triples */
    return a[0] != b[0] ? (a[0] > b[0]) - (a[0] < b[0]) : (a[1] > b[1]) - (a[1] < b[1]);
}

/* busy[d] of a shared device: the time at least one of its kernels ran (the union of their
 * spans; with one stream per device, the sum of their durations). */
static sw_status busy_shared(const sw_task_graph *g, const int32_t *pool, sw_sim_result *r) {
    double *span = malloc(sizeof *span * 3 * ((size_t)g->ntasks + 1));
    if (!span) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    int32_t n = 0;
    for (int32_t i = 0; i < g->ntasks; i++) {
        if (pool[i] >= 0) {
            span[3 * n] = pool[i];
            span[3 * n + 1] = r->start[i];
            span[3 * n + 2] = r->start[i] + r->duration[i];
            n++;
        }
    }
    qsort(span, (size_t)n, 3 * sizeof *span, by_device_then_start);
    for (int32_t k = 0; k < n;) {
        int32_t d = (int32_t)span[3 * k];
        double lo = span[3 * k + 1], hi = span[3 * k + 2];
        for (k++; k < n && (int32_t)span[3 * k] == d && span[3 * k + 1] <= hi; k++) {
            hi = span[3 * k + 2] > hi ? span[3 * k + 2] : hi;
        }
        r->busy[d] += hi - lo;
    }
    free(span);
    return SW_OK;
    return SW_OK;
}

typedef struct {
    int32_t priority, task;
} ranked;

static int by_rank(const void *pa, const void *pb) {
    const ranked *a = pa, *b = pb;
    if (a->priority != b->priority) {
        return a->priority > b->priority ? -1 : 1;
    }
    return (a->task > b->task) - (a->task < b->task);
}

/* Replay rp's tasks with the ones of higher stream priority first in every line: renumbered in
 * rank order (pos[t]: t's new id), replayed, and their start times read back. */
static sw_status replay_ranked(const sw_task_graph *g, const sw_streams *st, const sw_machine *m, replay *rp,
                               double *makespan) {
    int32_t nres = m->nres;
    int32_t n = g->ntasks;
    ranked *order = malloc(sizeof *order * ((size_t)n + 1));
    int32_t *pos = malloc(sizeof *pos * ((size_t)n + 1));
    int32_t *dep_ptr = malloc(sizeof(int32_t) * ((size_t)n + 1));   /* renumbered: q's, freed here */
    int32_t *deps = malloc(sizeof(int32_t) * ((size_t)rp->dep_ptr[n] + 1));
    replay q = {.duration = malloc(sizeof(double) * ((size_t)n + 1)), .start = malloc(sizeof(double) * ((size_t)n + 1)),
                .dep_ptr = dep_ptr, .deps = deps,
                .res_ptr = malloc(sizeof(int32_t) * ((size_t)n + 1)),
                .res = malloc(sizeof(int32_t) * ((size_t)rp->res_ptr[n] + 1)),
                .pool = rp->pool ? malloc(sizeof(int32_t) * ((size_t)n + 1)) : NULL,
                .share = rp->pool ? malloc(sizeof(double) * ((size_t)n + 1)) : NULL};
    double *end = rp->pool ? malloc(sizeof(double) * ((size_t)n + 1)) : NULL;
    sw_status s = SW_OK;
    if (!order || !pos || !q.duration || !q.start || !dep_ptr || !deps || !q.res_ptr || !q.res ||
        (rp->pool && (!q.pool || !q.share || !end))) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory for a replay of %d tasks", n);
        goto done;
    }
    for (int32_t t = 0; t < n; t++) {
        order[t] = (ranked){st ? st->stream_priority[st->stream[t]] : 0, t};
    }
    qsort(order, (size_t)n, sizeof *order, by_rank);
    for (int32_t j = 0; j < n; j++) {
        pos[order[j].task] = j;
    }
    dep_ptr[0] = q.res_ptr[0] = 0;
    for (int32_t j = 0; j < n; j++) {
        int32_t t = order[j].task, nd = dep_ptr[j], nr = q.res_ptr[j];
        q.duration[j] = rp->duration[t];
        if (rp->pool) {
            q.pool[j] = rp->pool[t];
            q.share[j] = rp->share[t];
        }
        for (int32_t k = rp->dep_ptr[t]; k < rp->dep_ptr[t + 1]; k++) {
            deps[nd++] = pos[rp->deps[k]];
        }
        for (int32_t k = rp->res_ptr[t]; k < rp->res_ptr[t + 1]; k++) {
            if (!rp->pool || rp->res[k] != rp->pool[t]) {   /* a shared device is a pool, not held */
                q.res[nr++] = rp->res[k];
            }
        }
        dep_ptr[j + 1] = nd;
        q.res_ptr[j + 1] = nr;
    }
    if (rp->pool) {   /* a task's duration becomes its span: stretched where it shared its device */
        s = sw_simulate_shared(n, q.duration, q.dep_ptr, q.deps, q.res_ptr, q.res, nres, q.pool, q.share, m->ndev,
                               q.start, end, makespan);
        for (int32_t t = 0; t < n && s == SW_OK; t++) {
            rp->duration[t] = end[pos[t]] - q.start[pos[t]];
        }
    } else {
        s = sw_simulate_tasks(n, q.duration, q.dep_ptr, q.deps, q.res_ptr, q.res, nres, q.start, makespan);
    }
    for (int32_t t = 0; t < n && s == SW_OK; t++) {
        rp->start[t] = q.start[pos[t]];
    }
done:
    free(end);
    replay_free(&q);
    free(dep_ptr);
    free(deps);
    free(order);
    free(pos);
    return s;
}

/* A lower bound of the makespan any replay of g can reach, before its memory plan and order
 * exist: every resource runs one task at a time (so it is busy at least the seconds of the tasks
 * that hold it), and every task starts after its dependencies (the longest path over the task
 * graph's own dependencies; the runtime's order adds edges, never removes one). */
sw_status sw_simulate_lower_bound(const sw_problem *p, const sw_task_graph *g, const double *durations,
                                  const sw_machine *m, double *bound) {
    *bound = 0.0;
    SW_TRY(check_machine(p, g, NULL, m));
    int64_t longest = 0;
    for (int32_t i = 0; i < g->ntasks; i++) {
        int64_t len = route_length(&g->tasks[i], m);
        longest = len > longest ? len : longest;
    }
    double *load = calloc((size_t)m->nres + 1, sizeof *load);
    double *finish = malloc(sizeof *finish * ((size_t)g->ntasks + 1));
    int32_t *res = malloc(sizeof *res * (size_t)(longest + 3));
    if (!load || !finish || !res) {
        free(load);
        free(finish);
        free(res);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for a bound of %d tasks", g->ntasks);
    }
    double best = 0.0;
    for (int32_t i = 0; i < g->ntasks; i++) {
        const sw_task *t = &g->tasks[i];
        double secs = task_seconds(p, t, durations[i], m), ready = 0.0;
        int n = task_resources(t, m, res);
        for (int k = 0; k < n; k++) {
            load[res[k]] += secs;
            best = load[res[k]] > best ? load[res[k]] : best;
        }
        for (int32_t k = g->dep_ptr[i]; k < g->dep_ptr[i + 1]; k++) {
            ready = finish[g->deps[k]] > ready ? finish[g->deps[k]] : ready;
        }
        finish[i] = ready + secs;
        best = finish[i] > best ? finish[i] : best;
    }
    free(load);
    free(finish);
    free(res);
    *bound = best;
    return SW_OK;
}

sw_status sw_simulate_graph(const sw_problem *p, const sw_task_graph *g, const sw_task_order *o,
                            const double *durations, const sw_machine *m, sw_sim_result *r) {
    return sw_simulate_graph_on(p, g, o, NULL, durations, m, r);
}

sw_status sw_simulate_graph_on(const sw_problem *p, const sw_task_graph *g, const sw_task_order *o,
                               const sw_streams *st, const double *durations, const sw_machine *m,
                               sw_sim_result *r) {
    memset(r, 0, sizeof *r);
    SW_TRY(check_machine(p, g, o, m));
    SW_TRY(sw_streams_check(g, p->ndev, st));
    replay rp;
    memset(&rp, 0, sizeof rp);
    double makespan = 0.0;
    sw_status s = build_replay(p, g, o, durations, m, &rp);
    if (s == SW_OK && (st || rp.pool)) {
        s = replay_ranked(g, st, m, &rp, &makespan);
    } else if (s == SW_OK) {
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
