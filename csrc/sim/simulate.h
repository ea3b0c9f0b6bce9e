/* sim/simulate.h -- the simulator: durations, replaying a plan, the event loops.
 *
 * sim_durations.c, sim_plan.c, simulate.c and sim_share.c: the runtime's task graph replayed in its order.
 * A room header: include "internal.h", which includes this file after the types it
 * uses (task graphs, problems, streams).
 */
#ifndef SHARDWISE_SIMULATE_H
#define SHARDWISE_SIMULATE_H

#ifndef SHARDWISE_INTERNAL_H
#error "include internal.h, not sim/simulate.h alone"
#endif

#include "core/id_heap.h"  /* sw_id_heap: the event loops' lines of ready tasks */

/* ---------------------------------------------------------------- durations */
/* Measured costs (a profile) replacing parts of the model; NULL: all modelled. */
typedef struct {
    const double *split;           /* nops x 2: forward, backward seconds of the op's partition; NaN: model */
    const double *element_seconds; /* SW_TASK_NKINDS: seconds per element of bookkeeping kinds; NaN: model */
    const double *element_fixed;   /* SW_TASK_NKINDS or NULL: their fixed seconds per task; NaN: none */
} sw_measured;

/* Seconds of every task (transfers excluded: their links decide); out has g->ntasks
 * entries.  tests/sim_oracle.py computes the same independently. */
sw_status sw_task_durations(const sw_problem *p, const sw_plan *plan, const sw_task_graph *g,
                            const sw_measured *m, double *out);

/* ---------------------------------------------------------------- simulating a plan */
/* The machine a task graph runs on, as resource ids: device d is resource d;
 * with cores > 0 (CPU workers sharing this machine's cores: the CPU backend's
 * threads), compute also holds core (d mod cores) = resource ndev + core, so
 * the tasks of one core run one at a time (thread d mod cores runs device d's
 * streams, the most urgent ready task first); a transfer a -> b holds
 * route_res[route_ptr[a*ndev+b] .. route_ptr[a*ndev+b+1]) (links or network
 * adapters, ids chosen by the caller) and, with cores > 0, b's core. */
typedef struct {
    int32_t ndev, cores, nres;
    const int32_t *route_ptr;      /* ndev * ndev + 1; only the pairs of the graph's transfers are read */
    const int32_t *route_res;      /* nroute */
    int32_t nroute;
    double copy_bandwidth;         /* > 0: every transfer runs at this (measured) bytes/s */
    /* Shared compute (sim_share.c): dev_fill[d] > 0 makes device d a pool that the kernels of
     * its streams share, each filling sw_task_share of it; NULL or 0: one task at a time. */
    const double *dev_fill;        /* ndev, or NULL: output elements a kernel needs to fill device d */
    /* swap tasks (swap.c): device d's offloads hold resource host_res + 2d (its device-to-host copy engine)
     * and its prefetches host_res + 2d + 1 (host-to-device), for bytes / host_bw[2d] (resp. [2d + 1])
     * seconds; host_bw NULL: a graph without swap tasks */
    const double *host_bw;
    int32_t host_res;
    /* processes (an MPI job): rank[d] is the rank running device d; NULL: one process.  A transfer
     * between devices of different ranks is a message: rank_latency + bytes / rank_bandwidth
     * seconds (rank_bandwidth 0: as a copy inside one process, copy_bandwidth or the route's),
     * holding its route and, with cores > 0, the sending core as well as the receiving one (the
     * sender packs into MPI's staging buffer while the receiver copies out of it). */
    const int32_t *rank;
    double rank_bandwidth, rank_latency;
} sw_machine;

typedef struct {
    double *start, *duration;      /* ntasks each */
    int32_t *res_ptr, *res;        /* resources of every task (CSR over ntasks) */
    double *busy;                  /* ndev: seconds each device computed */
    double makespan;
} sw_sim_result;

/* Replay g as the runtime runs it: every task after what it runs after there (the order from
 * sw_task_order_build over the runtime's memory plan: stream program order, dependencies,
 * reuse edges), with `durations` (from sw_task_durations) on machine m; ready tasks waiting
 * for a resource start lowest id first.  The result's arrays are allocated here and freed
 * with sw_sim_result_free. */
sw_status sw_simulate_graph(const sw_problem *p, const sw_task_graph *g, const sw_task_order *o,
                            const double *durations, const sw_machine *m, sw_sim_result *r);
/* The same for tasks on streams `st` (the streams o was built for; NULL: one per device):
 * wherever ready tasks wait for one resource, the one of the higher stream priority starts
 * first, then the lower id, as the CPU backend's threads choose.  A device with
 * m->dev_fill[d] > 0 runs the ready tasks of its streams at once, sharing its compute
 * (sw_simulate_shared); otherwise one task at a time. */
sw_status sw_simulate_graph_on(const sw_problem *p, const sw_task_graph *g, const sw_task_order *o,
                               const sw_streams *st, const double *durations, const sw_machine *m,
                               sw_sim_result *r);
void sw_sim_result_free(sw_sim_result *r);
/* A lower bound of every replay's makespan from g alone (no memory plan, no order): the most
 * seconds any resource is held, and the longest path over g's dependencies. */
sw_status sw_simulate_lower_bound(const sw_problem *p, const sw_task_graph *g, const double *durations,
                                  const sw_machine *m, double *bound);

/* ---------------------------------------------------------------- simulation */
/* Replay tasks with the given durations; a task holds its resources (CSR
 * res_ptr/res) for its duration and starts when its dependencies (CSR
 * dep_ptr/deps) are done and it is first in line (lowest id) on each resource.
 * Writes every task's start time and the makespan. */
sw_status sw_simulate_tasks(int32_t ntasks, const double *duration, const int32_t *dep_ptr, const int32_t *deps,
                            const int32_t *res_ptr, const int32_t *res, int32_t nres, double *start,
                            double *makespan);
/* SW_OK when task t's dependencies name other tasks in [0, ntasks) and its resources lie in
 * [0, nres); otherwise SW_ERR_VALUE naming the first bad one (both event loops' input check). */
sw_status sw_sim_check_task(int32_t t, int32_t ntasks, const int32_t *dep_ptr, const int32_t *deps,
                            const int32_t *res_ptr, const int32_t *res, int32_t nres);
/* 1 when task t heads the line of each of its n resources res[0 .. n) and none is busy (both
 * event loops' test before starting a task).  The test begins at the resource that stopped t
 * last time (res[*blocked], updated here), which mostly still does: a transfer routed over
 * 2,000 links is tried once per link freed, and testing its whole route each time made a
 * parameter server over a chain of 4,096 devices quadratic in the routes' length. */
int sw_sim_first_in_line(int32_t t, const int32_t *res, int32_t n, const char *busy, const sw_id_heap *line,
                         int32_t *blocked);

/* sim_share.c: the same with shared compute.  pool[t] >= 0: t runs on pool (a device) of
 * capacity 1 filling at most share[t] in (0, 1] of it; whenever the running set changes the
 * pools are handed out again by id (lowest first), min(share, what is left) each, and a task
 * given g progresses at g / share[t] of its alone speed.  pool[t] = -1: only its exclusive
 * resources (res).  Writes every task's start (first progress) and end. */
sw_status sw_simulate_shared(int32_t ntasks, const double *duration, const int32_t *dep_ptr, const int32_t *deps,
                             const int32_t *res_ptr, const int32_t *res, int32_t nres, const int32_t *pool,
                             const double *share, int32_t npools, double *start, double *end, double *makespan);
/* The fraction of its device task t's kernel fills: its output elements over the device's
 * dev_fill, at most 1 (1 where the device is not shared). */
double sw_task_share(const sw_task *t, const sw_machine *m);

#endif /* SHARDWISE_SIMULATE_H */
