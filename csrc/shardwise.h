/*
 * shardwise.h -- the public C interface of shardwise's core: problems (a computation graph on a
 * device graph), the cost model of Eq. 1 (Jia et al., ICML 2018), the exact elimination search,
 * and the task graph a plan lowers to.
 *
 * Overview
 * --------
 * A *problem* is a computation graph plus a device graph.  Each op is given by its description
 * (see python/shardwise/ops/desc.py): an iteration space (output dimensions, then reduction
 * dimensions) and, per input, one quasi-affine index expression per input dimension.  From that
 * one description the core derives everything the planner and the runtime need, in one data flow:
 *
 *   problem -> configurations -> cost tables -> search -> plan -> task graph (lowering)
 *           -> memory plan / order / schedule / swap -> simulator | runtime -> backend
 *
 * The C files live in rooms, each using only the rooms below it (core <- cost <- search;
 * core <- graph <- mem <- sim; exec over graph and mem; cpu/, cuda/ and mpi/ over exec; py/ on
 * top; tools/rooms.py checks it):
 *
 *   core/      problems (decoding, node detection), regions (the box of an input a worker reads
 *              for its output box, halos), configurations (a degree per output dimension + a
 *              device list), status, parallel loops, the op table (ops.def), views
 *   cost/      t_c (roofline), t_s (parameter server or ring all-reduce), t_x (bytes each
 *              destination worker needs and does not hold): the tables the search reads;
 *              placed transfers, lower bounds, memory footprints
 *   search/    node / edge elimination (Algorithm 1), variable elimination of what they leave,
 *              and a brute-force oracle, all over plain cost tables
 *   graph/     the lowering: one training iteration of a plan as tasks, buffers and what every
 *              task reads and writes; streams and hazards, critical-path schedules, swap tasks
 *   mem/       memory plans (one arena per device, checked by a validator), the order the
 *              runtime, the simulator and the validator all read, iterations, swap plans that fit
 *   sim/       the simulator (modelled durations, the runtime's order, the event replay)
 *   exec/      the runtime and the backend interface (exec/runtime.h: an opaque sw_runtime)
 *   cpu/       the CPU backend and kernels;  cuda/ (outside csrc/) the CUDA backend, which meets
 *              the core through exec/backend_ext.h's function table;  mpi/ exec/comm.h over MPI
 *   py/        the Python module shardwise._core
 *
 * Example (what python/shardwise/planning/search.py does through the module):
 *
 *   sw_problem *p;
 *   sw_search_stats stats;
 *   if (sw_problem_new(&p, blob, blob_len, flops, ndev, dev_flops, dev_membw, bw) != SW_OK)
 *       fprintf(stderr, "%s\n", sw_last_error());
 *   sw_problem_enumerate(p, counts, ncounts, 0);   // configurations of every op
 *   sw_problem_build_tables(p, 0);                 // t_c, t_s per configuration, t_x per edge
 *   sw_search_elimination(sw_problem_tables(p), limit, choice, &cost, &stats);
 *   sw_problem_free(p);                            // choice[op]: the configuration of each op
 *
 * What is opaque here, and why: sw_problem, sw_tables, sw_task_graph and sw_lowering are handles
 * (their bodies are in csrc/internal.h, shared by the rooms and the bindings in csrc/py/), so
 * that the rooms can change their layout without touching a caller; sw_runtime is opaque in
 * exec/runtime.h in the same way.  What stays public is what is a value by nature: the status
 * codes, the limits, a box (rank and lo/hi arrays), the search's statistics record.  The passes
 * after the search (lowering with a plan, memory plans, schedules, swap, the simulator) fill
 * records the caller owns; they are declared in the room headers that csrc/internal.h includes.
 *
 * Headers: this file is the public interface; csrc/internal.h includes it and declares the
 * struct bodies, the room headers (search/search.h, cost/cost.h, graph/schedule.h,
 * graph/swap.h, graph/lowering.h, mem/memplan.h, sim/simulate.h) and what the rooms share.  A .c
 * file of the core includes "internal.h" (built with -Icsrc).
 *
 * Conventions: functions return sw_status and leave a message for sw_last_error(); they never
 * exit or abort on user input.  Boxes are half-open [lo, hi).  Sizes and indices are int64_t.
 */
#ifndef SHARDWISE_H
#define SHARDWISE_H

#include <stddef.h>  /* size_t */
#include <stdint.h>  /* int64_t, int32_t */

/* ---------------------------------------------------------------- limits */
#define SW_MAX_RANK 5      /* tensor rank: (N, C, H, W) and later (N, C, D, H, W) */
#define SW_MAX_VARS 10     /* iteration variables: output dims + reduction dims */
#define SW_MAX_DEVICES 4096
#define SW_MAX_OPTIMIZER_STATE 2   /* state buffers per parameter slice: Adam's two moments */
/* The searches never build one table above this many entries (2^27 doubles: 1 GiB). */
#define SW_MAX_TABLE_ENTRIES 134217728.0

/* ---------------------------------------------------------------- status */
typedef enum {
    SW_OK = 0,
    SW_ERR_VALUE = 1,      /* malformed input: maps to ValueError */
    SW_ERR_NOMEM = 2,      /* allocation failed: MemoryError */
    SW_ERR_TOO_LARGE = 3,  /* a search space too large to enumerate: RuntimeError */
    SW_ERR_INTERNAL = 4,   /* a broken invariant: RuntimeError */
    SW_ERR_TIMEOUT = 5,    /* a wait that ran out of time (exec/comm.h): TimeoutError */
} sw_status;

/* The message of the last failure on this thread. */
const char *sw_last_error(void);

/* ---------------------------------------------------------------- boxes */
typedef struct {
    int rank;
    int64_t lo[SW_MAX_RANK];
    int64_t hi[SW_MAX_RANK];   /* exclusive */
} sw_box;

int64_t sw_box_volume(const sw_box *b);
int sw_box_equal(const sw_box *a, const sw_box *b);

/* ---------------------------------------------------------------- handles */
typedef struct sw_problem sw_problem;         /* ops, devices, configurations, cost tables */
typedef struct sw_tables sw_tables;           /* node and edge costs the searches read */
typedef struct sw_task_graph sw_task_graph;   /* one training iteration as tasks and buffers */
typedef struct sw_lowering sw_lowering;       /* a plan lowered once, with its streams and swap rewrite */

/* ---------------------------------------------------------------- problems */
sw_status sw_problem_new(sw_problem **out, const int64_t *blob, int64_t blob_len, const double *flops,
                         int ndev, const double *dev_flops, const double *dev_membw, const double *bw);
void sw_problem_free(sw_problem *p);
/* Configurations of every op: worker counts from `counts`, every factorization
 * into degrees that divide their dimension, each on the aligned contiguous
 * device blocks [j*k, (j+1)*k) (first_block_only: on [0, k) alone). */
sw_status sw_problem_enumerate(sw_problem *p, const int32_t *counts, int ncounts, int first_block_only);
/* The same over chosen device sets: set i is devs[ptr[i] .. ptr[i+1]) in worker order (distinct
 * devices, no set twice); every partition of |set| workers on every set. */
sw_status sw_problem_enumerate_sets(sw_problem *p, int nsets, const int32_t *ptr, const int32_t *devs);
/* Replace the configurations of one op (degrees ncfg x SW_MAX_RANK, reduction
 * splits ncfg x 2 as (rvar or -1, rdeg) or NULL for none, devices ncfg x maxk
 * padded with -1). */
sw_status sw_problem_set_configs(sw_problem *p, int op, int ncfg, const int32_t *deg, const int32_t *red,
                                 const int32_t *devs, int maxk);
/* Replace the configurations of one op by rows[0 .. n) of that op's in `src`, a problem of the
 * same graph and devices: what sw_problem_set_configs of their degrees, reductions and devices
 * makes, without the n x maxk devices (the staged search of 1,024 GPUs sets 10^5 configurations
 * of up to 1,024 workers). */
sw_status sw_problem_copy_configs(sw_problem *p, int op, const sw_problem *src, int n, const int64_t *rows);
sw_status sw_problem_build_tables(sw_problem *p, int with_bytes);
/* Only the node costs (t_c + t_s per configuration): part of sw_problem_build_tables. */
sw_status sw_problem_build_node_tables(sw_problem *p);
/* Free the tables (before building them again). */
void sw_problem_reset_tables(sw_problem *p);
/* The tables sw_problem_build_tables filled (owned by p). */
const sw_tables *sw_problem_tables(const sw_problem *p);
/* Set node_size, bw_in, bw_out from the bandwidth matrix (node_size 0 when not uniform; core/problem.c). */
void sw_problem_detect_nodes(sw_problem *p);
/* The fastest route's bandwidth, bytes/s. */
double sw_fastest_route(const sw_problem *p);

/* ---------------------------------------------------------------- search */
typedef struct {
    int node_eliminations, edge_eliminations, leaf_eliminations;
    int reused_products;            /* node eliminations that reused an earlier one's table (same inputs) */
    int reused_sums;                /* edge eliminations that reused an earlier one's table (same inputs) */
    int algorithm1_residual_nodes;  /* K of seed 003 Table 2: left by node + edge eliminations */
    int residual_nodes, residual_edges;  /* left after leaf eliminations too */
    double residual_combinations;   /* product of configuration counts of the residual graph (may be inf) */
    double evaluations;             /* exhaustive: strategies evaluated; elimination: min-plus steps of
                                     * variable elimination on the residual graph */
    int residual_width;             /* most ops in one table of exact variable elimination (0: none) */
    double residual_table;          /* entries of its largest table */
    int exact;                      /* 1: the optimum; 0: above the bound, best plan found + lower bound */
    double lower_bound;             /* a lower bound of Eq. 1 (the optimum when exact) */
    double marginals_cap;           /* min-marginals: the cap of their reverse pass (INFINITY: none) */
} sw_search_stats;

/* Algorithm 1 of seed 003 (node, edge, leaf eliminations), then variable elimination
 * of what is left: exact while that takes at most max_evaluations min-plus steps and
 * no table above min(max_evaluations, SW_MAX_TABLE_ENTRIES) entries; beyond, the best
 * plan found with stats->exact = 0 and stats->lower_bound. */
sw_status sw_search_elimination(const sw_tables *t, double max_evaluations, int *choice,
                                double *cost, sw_search_stats *stats);
/* The same, and marginals[v] (malloc'd, ncfg[v] entries, NULL before) the least Eq. 1 of a
 * strategy giving node v each configuration: exact when the eliminations left one node,
 * else lower bounds (search_marginals.c).  Those above `cap` (1 + 1e-9) come out as INFINITY, faster
 * (a pruning that drops every configuration above a threshold needs no more); `cap` is only
 * valid on tables whose entries are all >= 0, as Eq. 1's are.  INFINITY: every marginal. */
sw_status sw_search_elimination_marginals(const sw_tables *t, double max_evaluations, int *choice,
                                          double *cost, sw_search_stats *stats, double **marginals, double cap);
/* The cap of the reverse pass for the strategy the eliminations chose, with their lower bound
 * (a plan known to cost the bound makes the marginals pointless, a known plan's cost bounds
 * what a pruning keeps): negative skips the reverse pass (marginals left NULL), INFINITY caps
 * nothing. */
typedef double (*sw_marginals_cap_fn)(void *ctx, const int *choice, double lower_bound);
/* sw_search_elimination_marginals with the cap min(cap, cap_of(ctx, choice, lower bound)), or
 * without the reverse pass when that is negative; cap_of NULL: `cap` alone.  stats->marginals_cap
 * is the cap used. */
sw_status sw_search_elimination_marginals_unless(const sw_tables *t, double max_evaluations, int *choice,
                                                 double *cost, sw_search_stats *stats, double **marginals,
                                                 double cap, sw_marginals_cap_fn cap_of, void *ctx);
sw_status sw_search_exhaustive(const sw_tables *t, double max_evaluations, int *choice,
                               double *cost, sw_search_stats *stats);
/* Eq. 1 for one strategy. */
double sw_strategy_cost(const sw_tables *t, const int *choice);
/* The last edge before e whose time table is e's own array (tables shared between edges that
 * read the same data, or passed in as one array), between ops of the same configuration
 * counts; -1 if none.  O(e): for one pass over a graph's edges (a few thousand). */
int sw_tables_shared_with(const sw_tables *t, int e);

/* ---------------------------------------------------------------- task graphs */
void sw_task_graph_free(sw_task_graph *g);
int64_t sw_tg_memory(const sw_task_graph *g, int ndev, int64_t *per_device);  /* bytes; returns bytes moved */
void sw_lowering_free(sw_lowering *l);
/* How many times sw_lower has run in this process (tests: a Trainer lowers its plan once). */
int64_t sw_lower_count(void);

#endif /* SHARDWISE_H */
