/*
 * shardwise.h -- the C core of shardwise: regions, configurations, the cost
 * model of Eq. 1 (Jia et al., ICML 2018) and the exact elimination search.
 *
 * Overview
 * --------
 * A *problem* is a computation graph plus a device graph.  Each op is given by
 * its description (see python/shardwise/opdesc.py): an iteration space (output
 * dimensions, then reduction dimensions) and, per input, one quasi-affine
 * index expression per input dimension.  From that one description the core
 * derives everything the planner needs:
 *
 *   region.c   the box of an input a worker reads for its output box (halos)
 *   config.c   configurations: a degree per output dimension + a device list
 *   cost_node.c  t_c (roofline) and t_s (parameter server or ring all-reduce)
 *   cost.c     t_x (bytes each destination worker needs and does not hold) and
 *              the tables the search reads
 *   search_*.c node / edge elimination (Algorithm 1), variable elimination of
 *              what they leave, and a brute-force oracle, all over plain cost
 *              tables so tests can feed fake ones
 *   taskgraph.c, lower.c  one training iteration of a plan as tasks, buffers
 *              and what every task reads and writes (the only lowering)
 *   memplan.c, memplan_place.c, memplan_check.c  one arena per device:
 *              buffer offsets from lifetimes, and a validator that proves them safe
 *   order.c    what each task runs after on the runtime (its stream's program
 *              order, dependencies, reuse edges): executor, simulator and
 *              validator read the one list
 *   streams.c, hazards.c, memplan_streams.c  several prioritized streams per
 *              device: the stream map, and the orderings one stream per device
 *              gave for free (buffer hazards, arena reuse) as explicit edges
 *   sim_durations.c, sim_plan.c, simulate.c  the simulator: modelled durations,
 *              the runtime's order and resources of every task, the event-driven replay
 *   schedule_paths.c, schedule.c  critical-path schedules (TurboDL): layer blocks and
 *              paths, then every task's sub-task (dA, dW, dB), priority and stream
 *
 * Example (what python/shardwise/search.py does through the module):
 *
 *   sw_problem *p;
 *   sw_problem_new(&p, blob, blob_len, flops, ndev, dev_flops, dev_membw, bw);
 *   sw_problem_enumerate(p, counts, ncounts);     // configurations of every op
 *   sw_problem_build_tables(p, 0);                // t_c, t_s per config, t_x per edge
 *   sw_search_elimination(&p->tables, limit, choice, &cost, &stats);
 *   sw_problem_free(p);
 *
 * Conventions: functions return sw_status and leave a message for
 * sw_last_error(); they never exit or abort on user input.  Boxes are
 * half-open [lo, hi).  Sizes and indices are int64_t.
 */
#ifndef SHARDWISE_H
#define SHARDWISE_H

#include <stdatomic.h>  /* _Atomic progress counters read by another thread */
#include <stddef.h>  /* size_t */
#include <stdint.h>  /* int64_t, int32_t */

#define SW_MAX_RANK 5      /* tensor rank: (N, C, H, W) and later (N, C, D, H, W) */
#define SW_MAX_VARS 10     /* iteration variables: output dims + reduction dims */
#define SW_MAX_DEVICES 4096

/* ---------------------------------------------------------------- status */
typedef enum {
    SW_OK = 0,
    SW_ERR_VALUE = 1,      /* malformed input: maps to ValueError */
    SW_ERR_NOMEM = 2,      /* allocation failed: MemoryError */
    SW_ERR_TOO_LARGE = 3,  /* a search space too large to enumerate: RuntimeError */
    SW_ERR_INTERNAL = 4,   /* a broken invariant: RuntimeError */
} sw_status;

const char *sw_last_error(void);
sw_status sw_set_error(sw_status status, const char *file, int line, const char *fmt, ...);
#define SW_FAIL(status, ...) sw_set_error((status), __FILE__, __LINE__, __VA_ARGS__)
/* Return the status of `expr` from the calling function unless it is SW_OK. */
#define SW_TRY(expr)              \
    do {                          \
        sw_status s_ = (expr);    \
        if (s_ != SW_OK) {        \
            return s_;            \
        }                         \
    } while (0)

/* ---------------------------------------------------------------- regions */
typedef struct {
    int rank;
    int64_t lo[SW_MAX_RANK];
    int64_t hi[SW_MAX_RANK];   /* exclusive */
} sw_box;

int64_t sw_box_volume(const sw_box *b);
int sw_box_equal(const sw_box *a, const sw_box *b);

/* ((sum_v coef[v] * (iter[v] div vdiv[v]) + offset) div div) mod mod   (mod == 0: none)
 * vdiv[v] >= 1 divides one variable before its coefficient: a grouped convolution reads
 * input channel cig * (co div cog) + ci, the first input channel of output channel co's
 * group plus ci (plain affine maps have every vdiv 1). */
typedef struct {
    int64_t coef[SW_MAX_VARS];
    int64_t vdiv[SW_MAX_VARS];
    int64_t offset;
    int64_t div;
    int64_t mod;
} sw_index_expr;

typedef enum { SW_ROLE_DATA = 0, SW_ROLE_WEIGHT = 1, SW_ROLE_STAT = 2 } sw_role;

typedef struct {
    sw_role role;
    int bias;                      /* a WEIGHT added to the output (conv/linear bias, batchnorm beta): its
                                    * gradient is the output's summed over the dimensions it does not
                                    * index, so its task reads nothing else (the dB sub-task) */
    int producer;                  /* op index for DATA inputs, -1 otherwise */
    int rank;
    int64_t shape[SW_MAX_RANK];
    sw_index_expr expr[SW_MAX_RANK];
    int has_window;                /* restrict the output points that read this input */
    int64_t win_lo[SW_MAX_RANK], win_hi[SW_MAX_RANK];
} sw_input;

/* ---------------------------------------------------------------- configurations */
/* Workers form a row-major grid over the output degrees, then (partition-n-reduce)
 * `rdeg` parts of reduction variable `rvar`, fastest: worker w computes output
 * block w / rdeg over reduction part w % rdeg.  The rdeg workers of one output
 * block form a reduction group whose partial outputs are summed on its first
 * worker, the owner of that block of the op's output. */
typedef struct {
    int32_t deg[SW_MAX_RANK];   /* degree per output dimension */
    int32_t rvar;               /* split reduction variable, or -1 */
    int32_t rdeg;               /* its degree (1 when rvar == -1); prod(deg) * rdeg == nworkers */
    int32_t nworkers;
    int64_t dev_offset;         /* the devices, in worker order, are dev_pool[dev_offset ..] */
} sw_config;

typedef struct {
    int nvars, out_rank;
    int64_t extent[SW_MAX_VARS];
    int64_t granule[SW_MAX_RANK];  /* shard sizes must be multiples of these */
    uint8_t additive[SW_MAX_VARS]; /* reduction variables whose partial results add up:
                                      they may be split (partition-n-reduce) */
    double flops_per_point, flops_per_output;
    int ninputs;
    sw_input *inputs;
    int ncfg;
    sw_config *cfgs;
} sw_op;

/* Output box of worker w under configuration c (the block of its reduction group). */
void sw_worker_box(const sw_op *op, const sw_config *c, int w, sw_box *out);
/* Iteration box [vlo, vhi) of worker w over all op variables: its output box and,
 * for a split reduction variable, its part of that variable's range. */
void sw_worker_iteration_box(const sw_op *op, const sw_config *c, int w, int64_t *vlo, int64_t *vhi);
/* The output blocks of op under configuration c that meet the non-empty region reg
 * (row-major, the last dimension fastest): block[q] is the block's index in the grid
 * of output degrees, piece[q] its part of reg.  Returns their number, at most
 * prod(deg); both arrays must hold that many. */
int sw_blocks_meeting(const sw_op *op, const sw_config *c, const sw_box *reg, int32_t *block, sw_box *piece);
/* Is worker w the owner of its output block (first of its reduction group)? */
static inline int sw_is_owner(const sw_config *c, int w) { return w % c->rdeg == 0; }
/* Region of input `slot` that worker w reads (0 when it reads none).  In a
 * reduction group only the owner reads the inputs that do not depend on the
 * split variable (a bias: added once, to the summed output). */
int sw_worker_region(const sw_op *op, const sw_config *c, int w, int slot, sw_box *region);
/* sw_worker_region of every worker w of c at once (regions[w], used[w] its return value),
 * O(rank) per worker: the same boxes. */
sw_status sw_config_regions(const sw_op *op, const sw_config *c, int slot, sw_box *regions, char *used);
/* Region sizes of every worker of c as products over the split coordinates (output
 * dims of degree > 1 in worker order, then the reduction part): when every input
 * dimension depends on at most one of them (separable), worker w with coordinates x_q
 * reads constant * prod_q factor[first[q] + x_q] elements (0: it reads nothing), and a
 * dimension d on coordinate dim_coord[d] has extent[d * cells + first[q] + x_q] there. */
typedef struct {
    int nsplit, rank, separable;
    int64_t count[SW_MAX_VARS], first[SW_MAX_VARS + 1], cells;
    double constant;                  /* product of the dimensions on no coordinate (0: never read) */
    int64_t const_len[SW_MAX_RANK];   /* their lengths */
    int dim_coord[SW_MAX_RANK];       /* the coordinate each dimension depends on, or -1 */
    double *factor;
    int64_t *extent;
} sw_region_factors;
sw_status sw_config_region_factors(const sw_op *op, const sw_config *c, int slot, sw_region_factors *f);
void sw_region_factors_free(sw_region_factors *f);
/* The floor division and modulo of an index expression applied to the ends [lo, hi]
 * of the linear part's interval (inclusive), as interval arithmetic does. */
void sw_expr_finish(const sw_index_expr *e, int64_t *lo, int64_t *hi);
/* Box of input `slot` read by the points of `out_box` (all reductions in full);
 * returns 0 when this input is not read at all (outside its window). */
int sw_input_region(const sw_op *op, int slot, const sw_box *out_box, sw_box *region);
/* Box of input `slot` read by the iteration box [vlo, vhi) over all nvars
 * variables (output dimensions, then reductions); exact (may be NULL) gets, per
 * input dimension, 1 when every index of the box is read (no strided holes).
 * Returns 0 when the input is not read at all. */
int sw_iteration_region(const sw_op *op, int slot, const int64_t *vlo, const int64_t *vhi,
                        sw_box *region, int *exact);

/* ---------------------------------------------------------------- cost tables */
typedef struct {
    int src, dst;        /* node indices */
    double *time;        /* ncfg[src] x ncfg[dst], row-major, seconds */
    double *bytes;       /* same shape, bytes moved (NULL unless requested) */
    int shared;          /* the arrays belong to an earlier edge with the same signature */
} sw_edge_table;

typedef struct {
    int nnodes;
    int *ncfg;
    double **node_cost;  /* t_c + t_s per configuration */
    int nedges;
    sw_edge_table *edges;
    _Atomic long *progress;   /* if not NULL, incremented per elimination (a progress bar reads it) */
    int threads;              /* threads for large min-plus products (0 or 1: the calling thread) */
} sw_tables;

typedef struct {
    int node_eliminations, edge_eliminations, leaf_eliminations;
    int algorithm1_residual_nodes;  /* K of seed 003 Table 2: left by node + edge eliminations */
    int residual_nodes, residual_edges;  /* left after leaf eliminations too */
    double residual_combinations;   /* product of configuration counts of the residual graph (may be inf) */
    double evaluations;             /* exhaustive: strategies evaluated; elimination: min-plus steps of
                                     * variable elimination on the residual graph */
    int residual_width;             /* most ops in one table of exact variable elimination (0: none) */
    double residual_table;          /* entries of its largest table */
    int exact;                      /* 1: the optimum; 0: above the bound, best plan found + lower bound */
    double lower_bound;             /* a lower bound of Eq. 1 (the optimum when exact) */
} sw_search_stats;

/* Algorithm 1 of seed 003 (node, edge, leaf eliminations), then variable elimination
 * of what is left: exact while that takes at most max_evaluations min-plus steps and
 * no table above min(max_evaluations, SW_MAX_TABLE_ENTRIES) entries; beyond, the best
 * plan found with stats->exact = 0 and stats->lower_bound. */
#define SW_MAX_TABLE_ENTRIES 134217728.0   /* 2^27 doubles: 1 GiB, never more in one table */
sw_status sw_search_elimination(const sw_tables *t, double max_evaluations, int *choice,
                                double *cost, sw_search_stats *stats);
/* The same, and marginals[v] (malloc'd, ncfg[v] entries, NULL before) the least Eq. 1 of a
 * strategy giving node v each configuration: exact when the eliminations left one node,
 * else lower bounds (search_marginals.c). */
sw_status sw_search_elimination_marginals(const sw_tables *t, double max_evaluations, int *choice,
                                          double *cost, sw_search_stats *stats, double **marginals);
sw_status sw_search_exhaustive(const sw_tables *t, double max_evaluations, int *choice,
                               double *cost, sw_search_stats *stats);
/* Eq. 1 for one strategy. */
double sw_strategy_cost(const sw_tables *t, const int *choice);

/* ---------------------------------------------------------------- problems */
typedef enum { SW_SYNC_PARAMETER_SERVER = 0, SW_SYNC_RING = 1 } sw_sync_model;

#define SW_MAX_OPTIMIZER_STATE 2   /* state buffers per parameter slice: Adam's two moments */

typedef struct {
    int ndev;
    double *dev_flops;    /* FLOP/s per device */
    double *dev_membw;    /* memory bytes/s per device */
    double *bw;           /* ndev x ndev route bandwidth, bytes/s; 0 = no route */
    int nops;
    sw_op *ops;
    sw_sync_model sync_model;
    double bytes_per_element;
    double backward_factor;   /* t_c multiplier for forward + backward (default 3) */
    int threads;              /* threads that build transfer tables (default 1) */
    int reduction_splits;     /* enumerate partition-n-reduce configurations too (default 0) */
    /* optimizer state buffers the lowering gives every parameter slice (kind momentum, each the
     * slice's box, on its replica group's lead device): 1 for SGD's momentum (default), 2 for
     * Adam's first and second moments (at most SW_MAX_OPTIMIZER_STATE) */
    int optimizer_state;
    /* uniform nodes (sw_problem_detect_nodes): devices [n*node_size, (n+1)*node_size) form node n,
     * bandwidth bw_in between two devices of a node and bw_out otherwise; node_size 0: not so */
    int node_size;
    double bw_in, bw_out;
    /* build lower bounds of t_x valid for every placement instead (cost_bounds.c): the
     * relaxation whose min-marginals prune large searches; bound_bw the fastest route */
    int bound_tables;
    double bound_bw;
    int32_t *dev_pool;
    int64_t pool_len, pool_cap;
    /* filled by sw_problem_build_tables */
    sw_tables tables;
    double **tc, **ts, **sync_bytes;      /* per op, per config */
    int *edge_consumer_slot;              /* per edge: input slot of the consumer */
    int tables_built;
    _Atomic long progress_done, progress_total;   /* of the running build or search */
} sw_problem;

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
sw_status sw_problem_build_tables(sw_problem *p, int with_bytes);
/* Only the node costs (t_c + t_s per configuration): part of sw_problem_build_tables. */
sw_status sw_problem_build_node_tables(sw_problem *p);
/* fn(ctx, i) for i = 0 .. n-1 on up to `threads` threads; the first failure (parallel.c). */
sw_status sw_parallel_for(int n, int threads, sw_status (*fn)(void *ctx, int i), void *ctx);
/* Free the tables (before building them again). */
void sw_problem_reset_tables(sw_problem *p);

/* The three terms of Eq. 1 for single configurations. */
double sw_compute_time(const sw_problem *p, int op, const sw_config *c);
/* Roofline seconds of one forward pass of worker w of configuration c on device `dev`:
 * its output block over its part of a split reduction (the per-worker term of t_c,
 * which is backward_factor x the slowest worker's). */
double sw_worker_time(const sw_problem *p, int op, const sw_config *c, int w, int dev);
/* FLOPs of that forward pass; *outputs = the elements of the worker's output block. */
double sw_worker_flops(const sw_problem *p, int op, const sw_config *c, int w, double *outputs);
/* Check a (split reduction variable or -1, degree) pair for op `opi` and store it in cfg. */
sw_status sw_config_set_reduction(const sw_op *op, int opi, int32_t rvar, int32_t rdeg, sw_config *cfg);
void sw_sync_cost(const sw_problem *p, int op, const sw_config *c, double *time, double *bytes);
sw_status sw_transfer_table(const sw_problem *p, int consumer, int slot, double *time, double *bytes);
/* The same on a machine of uniform nodes when both ops' configurations sit on contiguous
 * device ranges: counted per consumer worker instead of listed per pair (cost_placed.c). */
sw_status sw_transfer_table_placed(const sw_problem *p, int consumer, int slot, double *time, double *bytes);
/* The least t_x of edge (consumer, slot) between producer configuration ci and consumer
 * configuration cj over their placements on aligned device blocks of their sizes (uniform
 * nodes only; by symmetry the larger block stays on the first devices, and when the sizes
 * do not divide each other every pair of blocks is tried). */
sw_status sw_transfer_least(const sw_problem *p, int consumer, int slot, int ci, int cj, double *out);
/* Lower bounds of t_x for every pair of configurations (ncfg_src x ncfg_dst), valid
 * whatever devices they use; bw_max the fastest route (sw_fastest_route). */
sw_status sw_transfer_bound_table(const sw_problem *p, int consumer, int slot, double bw_max, double *out);
double sw_fastest_route(const sw_problem *p);
/* Set node_size, bw_in, bw_out from the bandwidth matrix (node_size 0 when not uniform). */
void sw_problem_detect_nodes(sw_problem *p);
/* The first device of c when its devices are first, first + 1, ...; -1 otherwise. */
int sw_config_first_device(const sw_problem *p, const sw_config *c);
/* Same degrees and reduction split (the placement may differ). */
int sw_same_partition(const sw_config *a, const sw_config *b);

/* ---------------------------------------------------------------- task graphs */
/* One training iteration of a plan as tasks (in a topological order), their
 * dependencies and the buffers each reads and writes; python/shardwise/lower.py
 * describes every kind.  Contract with the runtime: each device runs its own
 * tasks in program order (one stream), so dependencies are recorded only where
 * that order does not already give them (devices meet only through copies,
 * which run on the destination and depend on the source's writer).  Where a
 * device runs several streams, order.c adds what that order gave (hazards.c). */
typedef enum {
    SW_TASK_LOAD_INPUT = 0, SW_TASK_COPY, SW_TASK_JOIN, SW_TASK_FORWARD, SW_TASK_LOSS, SW_TASK_BN_STATS,
    SW_TASK_STATS_REDUCE, SW_TASK_BN_APPLY, SW_TASK_BN_BACKWARD_STATS, SW_TASK_BACKWARD_DATA,
    SW_TASK_ACCUMULATE, SW_TASK_BACKWARD_WEIGHT, SW_TASK_REDUCE, SW_TASK_UPDATE,
    SW_TASK_FORWARD_PARTIAL, SW_TASK_SUM_PARTIALS, SW_TASK_ACTIVATION_GRAD,   /* partition-n-reduce */
    SW_TASK_ZERO_GRAD,   /* a worker's gradient no consumer adds to (its box is read by none): zeros */
    SW_TASK_SWAP_OUT, SW_TASK_SWAP_IN,   /* swap.c: a feature map offloaded to host memory, prefetched back */
    SW_TASK_NKINDS
} sw_task_kind;

typedef enum { SW_PHASE_FORWARD = 0, SW_PHASE_BACKWARD, SW_PHASE_SYNC, SW_PHASE_UPDATE } sw_phase;

typedef enum {
    SW_BUF_ACTIVATION = 0, SW_BUF_REGION, SW_BUF_GRAD, SW_BUF_PARTIAL_GRAD, SW_BUF_PARAM, SW_BUF_PARAM_GRAD,
    SW_BUF_MOMENTUM, SW_BUF_STATS, SW_BUF_RECV, SW_BUF_PARTIAL, SW_BUF_GRAD_PRE,
    SW_BUF_RUNNING,   /* batchnorm: running mean (row 0) and variance (row 1) of the worker's channels, (2, C)
                         float32, kept across steps like parameters */
    SW_BUF_HOST,      /* swap.c: a feature map's copy in host memory (the device's host region, not its arena) */
    SW_BUF_NKINDS
} sw_buffer_kind;

/* What the lowering needs to know about an op beyond its description. */
typedef enum { SW_OPKIND_PLAIN = 0, SW_OPKIND_INPUT, SW_OPKIND_SOFTMAX, SW_OPKIND_BATCHNORM } sw_op_kind;

/* Op kinds (ops.def): SW_OP_INPUT, SW_OP_CONV2D, ...; sw_op_names[k] is the Python spelling. */
typedef enum {
#define SW_OP(id, name, role, cpu) SW_OP_##id,
#include "ops.def"
    SW_OP_COUNT
} sw_op_type;
extern const char *const sw_op_names[SW_OP_COUNT];
extern const sw_op_kind sw_op_roles[SW_OP_COUNT];

#define SW_TASK_BYTES_PER_ELEMENT 4   /* the executor's buffers are float32 */

typedef struct {
    int8_t kind, phase;        /* sw_task_kind, sw_phase */
    int32_t device;            /* where it runs (a copy: the destination) */
    int32_t src_device;        /* copies: the source device; -1 otherwise */
    int32_t op, worker, slot;  /* slot: input slot of per-input tasks, -1 otherwise */
    int32_t nreads;            /* buffers it reads (a reduction sums this many): the graph's io lists them */
    int64_t elements;          /* its box's volume, else its first written buffer's (0: none) */
    int64_t nbytes;            /* bytes crossing between devices (copies only) */
    sw_box box;                /* copies, accumulates: the global box moved; rank 0: none */
} sw_task;

/* A swap task: a copy between a device and its host region (swap.c), timed by the host link. */
static inline int sw_is_swap(const sw_task *t) { return t->kind == SW_TASK_SWAP_OUT || t->kind == SW_TASK_SWAP_IN; }

/* A copy between two devices (timed by its route), as opposed to a local copy. */
static inline int sw_is_transfer(const sw_task *t) { return t->kind == SW_TASK_COPY && t->src_device != t->device; }

typedef struct {
    int32_t device, op;        /* op: the global tensor's op */
    int32_t worker;            /* params and their gradients: the worker holding them; -1 otherwise */
    int16_t slot;              /* params, their gradients and momentum: the op's weight input slot; -1 otherwise */
    int8_t kind;               /* sw_buffer_kind */
    sw_box box;
} sw_buffer;

/* Bytes of a buffer: batchnorm statistics are double precision sums, the rest float32. */
static inline int64_t sw_buffer_bytes(const sw_buffer *b) {
    return sw_box_volume(&b->box) * (b->kind == SW_BUF_STATS ? 8 : SW_TASK_BYTES_PER_ELEMENT);
}

/* The buffers a task reads and writes (ids into the graph's buffers), in the order
 * its kernel takes them: an in-place update (a reduction into its first read, the
 * SGD update of a parameter) names the buffer in both lists. */
typedef struct {
    const int32_t *reads;
    int nreads;
    const int32_t *writes;
    int nwrites;
} sw_task_io;

typedef struct {
    int32_t ntasks, task_cap;
    sw_task *tasks;
    int32_t *dep_ptr;          /* ntasks + 1: task t depends on deps[dep_ptr[t] .. dep_ptr[t+1]) */
    int32_t *deps;             /* sorted, distinct, all < t */
    int32_t ndeps, dep_cap;
    int32_t nbuffers, buffer_cap;
    sw_buffer *buffers;
    int32_t *io_ptr;           /* ntasks + 1: task t reads io[io_ptr[t] .. + nreads) and writes the rest
                                  of io[.. io_ptr[t+1]) */
    int32_t *io;
    int32_t nio, io_cap;
} sw_task_graph;

/* A plan: one configuration per op.  cfg[op].deg, cfg[op].nworkers and the
 * devices devs[cfg[op].dev_offset ..] in worker order; kind[op] a sw_op_kind. */
typedef struct {
    int nops;
    const sw_config *cfg;
    const int32_t *devs;
    const int8_t *kind;
} sw_plan;

/* Check a plan against a problem (sizes, degrees dividing their dimensions,
 * distinct devices in range, op kinds): SW_ERR_VALUE with a message if bad. */
sw_status sw_plan_check(const sw_problem *p, const sw_plan *plan);
/* Lower `plan` into `g` (which must be zeroed); on failure g is freed. */
sw_status sw_lower(const sw_problem *p, const sw_plan *plan, sw_task_graph *g);
void sw_task_graph_free(sw_task_graph *g);
/* taskgraph.c: append a buffer / a task with deps (negative ids are skipped;
 * the rest are sorted and made distinct) and the buffers it reads and writes
 * (t->nreads is set from io); the new id goes to *id. */
sw_status sw_tg_buffer(sw_task_graph *g, int32_t device, sw_buffer_kind kind, int32_t op, const sw_box *box,
                       int32_t *id);
sw_status sw_tg_task(sw_task_graph *g, const sw_task *t, const int32_t *deps, int ndeps, const sw_task_io *io,
                     int32_t *id);
/* The buffers task t reads (returns their number, *ids points into g->io) and writes. */
static inline int sw_tg_reads(const sw_task_graph *g, int32_t t, const int32_t **ids) {
    *ids = g->io + g->io_ptr[t];
    return g->tasks[t].nreads;
}
static inline int sw_tg_writes(const sw_task_graph *g, int32_t t, const int32_t **ids) {
    *ids = g->io + g->io_ptr[t] + g->tasks[t].nreads;
    return g->io_ptr[t + 1] - g->io_ptr[t] - g->tasks[t].nreads;
}
int64_t sw_tg_memory(const sw_task_graph *g, int ndev, int64_t *per_device);  /* bytes; returns bytes moved */

/* ---------------------------------------------------------------- schedules */
/* The critical-path analysis of TurboDL (Jin et al., section 2.4 and Algorithm 1) as
 * annotations on a task graph; docs/scheduling.md tells the whole story.
 *
 * Layers are the ops with a data input (inputs and parameters are sources, not
 * layers).  A *sync layer* lies on every path from the first layers to the last
 * ones; between two consecutive sync layers (or the start / end of the graph)
 * the layers form a *block* whose fork and merge are those sync layers.  Inside
 * a block, layer paths are taken longest first by their summed dA time (fork and
 * merge included); each layer joins the first path through it.  Path 0 is the
 * network's critical path: every sync layer and every block's longest path.
 * A path's rank is the number of distinct, longer distances in its block. */
typedef struct {
    int32_t nops, nblocks, npaths;
    int32_t levels;            /* path priority levels: 1 + the highest rank */
    const double *op_da;       /* nops: dA seconds of every op (borrowed from the caller) */
    int32_t *op_block;         /* nops: the block whose inside holds the op, -1 (sync layers, sources) */
    int32_t *op_path;          /* nops: its layer path, -1 for sources */
    int32_t *block_fork, *block_merge;   /* nblocks: ops, -1 for the start / end of the graph */
    double *block_distance;    /* nblocks: its longest path's distance */
    int32_t *path_block;       /* npaths: -1 for path 0 */
    int32_t *path_rank;        /* npaths: 0 for the longest paths of their block */
    double *path_distance;     /* npaths: summed dA seconds, fork to merge (path 0: first layer to last) */
} sw_layer_paths;

/* op_da: dA seconds of every op (>= 0; sources' are ignored).  lp is freed on failure. */
sw_status sw_layer_paths_build(const sw_problem *p, const double *op_da, sw_layer_paths *lp);
void sw_layer_paths_free(sw_layer_paths *lp);

typedef enum { SW_SCHED_FIFO = 0, SW_SCHED_CRITICAL_PATH = 1 } sw_sched_policy;

/* What a task is to Algorithm 1: forward work; dA: the activation-gradient chain (its output
 * is needed within the iteration, dependency distance 1); dW / dB: a weight's or a bias's
 * gradient (needed next iteration); sync: its synchronization and update (the sync and update
 * phases: copies to the replica group's first, reduce, update, copies back). */
typedef enum { SW_SUB_FORWARD = 0, SW_SUB_DA, SW_SUB_DW, SW_SUB_DB, SW_SUB_SYNC, SW_SUB_NKINDS } sw_subtask;

/* Per task: its priority (higher runs first among the ready tasks of a device) and its
 * stream; per device: streams, one per distinct priority of its tasks, most urgent
 * first.  A stream runs its tasks in task-id order (a topological order), so stream order
 * and dependencies never wait on each other in a cycle.  Critical path: priority =
 * path priority (-rank of the op's layer path; 0 on the critical path) minus alpha for a
 * dW, beta for a dB sub-task; a sync task of a layer's weights gets sync_floor - (the
 * number of layers with weights before it in the forward pass): below every compute class,
 * by reuse distance (the layer the next forward needs first goes first), one stream per
 * layer, so a layer's synchronization starts as soon as its dW is done (TurboDL's
 * multi-GPU extension; DeePa, section 5).  FIFO (the baseline): priority 0, one stream per
 * device. */
typedef struct {
    sw_sched_policy policy;
    int32_t alpha, beta;       /* the offsets used (defaults: levels and 2 x levels) */
    int32_t sync_floor;        /* the sync priority of the first layer with weights: -(levels + max(alpha, beta)) */
    sw_layer_paths paths;      /* the analysis (also made for FIFO; paths.op_da points at op_da) */
    double *op_da;             /* nops: dA seconds of every op: its slowest worker's backward_data sum */
    int32_t ntasks;
    int8_t *subtask;           /* ntasks: sw_subtask */
    int32_t *layer_path;       /* ntasks: the layer path of the task's op, -1 for sources */
    int32_t *path_priority;    /* ntasks */
    int32_t *priority;         /* ntasks */
    int32_t *stream;           /* ntasks: a stream id */
    int32_t ndev, nstreams;
    int32_t *stream_ptr;       /* ndev + 1: device d's streams are ids stream_ptr[d] .. stream_ptr[d+1] */
    int32_t *stream_device;    /* nstreams */
    int32_t *stream_priority;  /* nstreams: descending within a device */
} sw_schedule;

/* Annotate g (lowered from a plan of p) from `durations` (sw_task_durations: a roofline or a
 * profile).  alpha, beta >= 0, or -1 for the defaults.  s is zeroed first, freed on failure. */
sw_status sw_schedule_build(const sw_problem *p, const sw_task_graph *g, const double *durations,
                            sw_sched_policy policy, int32_t alpha, int32_t beta, sw_schedule *s);
void sw_schedule_free(sw_schedule *s);

/* ---------------------------------------------------------------- streams */
/* The streams a task graph runs on (streams.c): task t on stream stream[t].  A stream
 * belongs to one device (stream_device: its tasks' device), runs its tasks in task-id
 * order, and has a priority (stream_priority: among the ready heads of one device's
 * streams, the highest runs first).  Wherever a function takes a `const sw_streams *`,
 * NULL means one stream per device (stream d on device d, priority 0): the order the
 * lowering records its dependencies for (FIFO). */
typedef struct {
    int32_t ntasks, nstreams;
    const int32_t *stream;           /* ntasks */
    const int32_t *stream_device;    /* nstreams */
    const int32_t *stream_priority;  /* nstreams */
} sw_streams;

/* A schedule's streams (borrowed: valid while s is). */
sw_streams sw_schedule_streams(const sw_schedule *s);
/* SW_ERR_VALUE unless st fits g on ndev devices: one stream per task, stream ids in range,
 * every task on a stream of its own device. */
sw_status sw_streams_check(const sw_task_graph *g, int ndev, const sw_streams *st);
/* 1 when some device has more than one stream (0 for NULL): then the orderings that one
 * stream per device gave for free must be explicit edges (hazards.c, memplan_streams.c). */
int sw_streams_several(const sw_streams *st, int ndev);
/* The stream of task t (its device's under NULL). */
static inline int32_t sw_stream_of(const sw_task_graph *g, const sw_streams *st, int32_t t) {
    return st ? st->stream[t] : g->tasks[t].device;
}

/* hazards.c: per task t, the earlier tasks on other streams that conflict with it over a
 * buffer (one of the two writes it), as CSR *ptr (ntasks + 1) / *ids (free() both): for
 * every buffer in program order, its last writer before a read (read after write) or a
 * write (write after write), and the readers since that writer before a write (write
 * after read).  Consecutive conflicts are enough: the rest follow by transitivity. */
sw_status sw_tg_hazards(const sw_task_graph *g, const sw_streams *st, int32_t **ptr, int32_t **ids);

/* ---------------------------------------------------------------- memory footprints */
/* Per device, the bytes a plan's memory plan holds live when the backward pass starts
 * (parameters, optimizer state, running statistics, and the forward buffers the backward
 * reads again), as node terms (one op's configuration) plus edge terms (a producer's and
 * a consumer's): what the memory-constrained search adds up (cost_memory.c).  A lower
 * bound of the memory plan's peak. */
typedef struct {
    int32_t ci, cj;   /* producer, consumer configuration */
    int32_t dev;
    double bytes;     /* the consumer's staging region there is the producer's shard: not needed */
} sw_memory_saving;

typedef struct {
    int ndev, nops;
    double **node;            /* per op: ncfg x ndev bytes */
    int nedges;               /* one per (consumer, data slot), consumers in order */
    int *edge_src, *edge_dst, *edge_slot;
    double **edge_base;       /* per edge: ncfg[dst] x ndev, the consumer's kept staging regions */
    int64_t *shared_ptr;      /* nedges + 1: edge e's savings are shared[shared_ptr[e] .. shared_ptr[e+1]) */
    sw_memory_saving *shared;
    int64_t nshared;
} sw_memory_tables;

/* kind: per op, its sw_op_kind.  The configurations must be enumerated. */
sw_status sw_memory_tables_build(const sw_problem *p, const int8_t *kind, sw_memory_tables *mt);
void sw_memory_tables_free(sw_memory_tables *mt);

/* ---------------------------------------------------------------- memory plans */
/* One arena per device (memplan.c): every buffer's byte offset in its device's
 * arena, from lifetimes over the program order of the tasks, and the edges that
 * make reuse across streams safe (a copy reading a buffer on another device's
 * stream before that memory is taken over: reuse_from[i] must finish before
 * reuse_to[i] starts).  Every offset is a multiple of `align`. */
typedef struct {
    int32_t nbuffers;
    int ndev;
    int64_t align;
    int64_t *offset;       /* nbuffers: bytes into the arena of the buffer's device */
    int64_t *bytes;        /* nbuffers: its size (sw_buffer_bytes) */
    int32_t *first, *last; /* nbuffers: first and last task touching it; 0 .. ntasks when it lives throughout */
    int64_t *arena;        /* ndev: arena bytes (the highest aligned end of a buffer) */
    int64_t *peak;         /* ndev: the most bytes live at once */
    int64_t *total;        /* ndev: every buffer's bytes added up (what the device needs without reuse) */
    int64_t *kept;         /* ndev: bytes written in the forward phase still live when the backward starts */
    int64_t *peak_kinds;   /* ndev x SW_BUF_NKINDS: bytes live at the peak, per buffer kind */
    int32_t nreuse;
    int32_t *reuse_from, *reuse_to;
    int64_t *host_arena;   /* ndev: bytes of each device's host region, where its host buffers (SW_BUF_HOST,
                              swap.c) lie at their offsets, planned by lifetimes as the arena is */
} sw_memory_plan;

/* The alignment of every buffer in the runtime's arenas (a cache line; the widest loads of the
 * CPU kernels): the simulator plans memory with it too, so it replays the runtime's reuse edges. */
#define SW_ARENA_ALIGN 64

/* reuse 0: every buffer keeps its own bytes (a check, and the baseline the plan saves against). */
sw_status sw_memory_plan_build(const sw_task_graph *g, int ndev, int64_t align, int reuse, sw_memory_plan *mp);
/* The same for tasks run on streams `st` (NULL: one per device, as sw_memory_plan_build):
 * with several streams on a device, the reuse edges order the tasks of a buffer's bytes'
 * previous occupant before the buffer's first tasks on whatever stream (memplan_streams.c). */
sw_status sw_memory_plan_build_on(const sw_task_graph *g, int ndev, int64_t align, int reuse, const sw_streams *st,
                                  sw_memory_plan *mp);
/* The same with every buffer's offset given (offset[b], nbuffers entries: a plan of one
 * iteration repeated over several, iterations.c): lifetimes, arenas and reuse edges only. */
sw_status sw_memory_plan_build_at(const sw_task_graph *g, int ndev, int64_t align, const sw_streams *st,
                                  const int64_t *offset, sw_memory_plan *mp);
void sw_memory_plan_free(sw_memory_plan *mp);
/* Buffers the host reads after the step (the loss tasks' outputs): (*out)[b] = 1; free() it. */
sw_status sw_tg_host_reads(const sw_task_graph *g, char **out);
/* Does buffer b live through every step and across steps (parameters, momentum, host reads)? */
int sw_buffer_lives_throughout(const sw_task_graph *g, int32_t b, const char *host_read);
/* Each buffer's lifetime in program order: first[b] / last[b] = the first / last task touching it
 * (nbuffers entries each); [0, ntasks] for a buffer living throughout, one no task touches, or
 * every buffer when !reuse (the memory plan and the swap plan both measure live bytes by these). */
void sw_buffer_lifetimes(const sw_task_graph *g, const char *host_read, int reuse, int32_t *first, int32_t *last);
/* memplan_check.c: SW_OK when offsets (and the reuse edges) are safe for g, judged
 * from the graph alone: buffers of one device whose bytes overlap are touched by
 * tasks all ordered one buffer's before the other's (dependencies, reuse edges,
 * each device's program order), parameters, momentum and loss outputs overlap
 * nothing, and every buffer lies inside its arena at an aligned offset;
 * otherwise SW_ERR_VALUE naming the first conflict. */
sw_status sw_memory_plan_check(const sw_task_graph *g, const sw_memory_plan *mp);
/* The same judged by the order on streams `st` (NULL: one per device); it also proves that
 * every buffer's conflicting accesses (a write and another access) keep program order. */
sw_status sw_memory_plan_check_on(const sw_task_graph *g, const sw_memory_plan *mp, const sw_streams *st);

/* ---------------------------------------------------------------- iterations back to back */
/* `copies` iterations of g concatenated, with no barrier between them (iterations.c):
 * iteration i's task t is i * ntasks + t on t's stream; buffers living across steps are
 * shared by all iterations, every other buffer is a new one per iteration at its offset in
 * mp; the memory plan has mp's offsets and the reuse edges of the concatenated graph.  Its
 * sw_task_order (on `streams()`) is the order of the iterations back to back;
 * sw_memory_plan_check_on proves it safe. */
typedef struct {
    int copies;
    int32_t ntasks;          /* tasks of one iteration */
    sw_task_graph g;
    sw_memory_plan mp;
    int32_t *buffer_of;      /* g.nbuffers: the buffer of one iteration each one repeats */
    int32_t *stream;         /* g.ntasks, NULL without streams */
    sw_streams st;           /* over `stream`, borrowing the rest of the given streams */
} sw_iterations;

sw_status sw_iterations_build(const sw_task_graph *g, const sw_memory_plan *mp, const sw_streams *st, int copies,
                              sw_iterations *it);
/* The streams of the concatenated graph (NULL when built without streams). */
static inline const sw_streams *sw_iterations_streams(const sw_iterations *it) { return it->stream ? &it->st : NULL; }
void sw_iterations_free(sw_iterations *it);

/* ---------------------------------------------------------------- the runtime's order */
/* What each task runs after on the runtime (order.c): the task before it on its stream, its
 * dependencies, the memory plan's reuse edges into it and, when a device has several streams,
 * the buffer hazards across streams (hazards.c), as CSR, sorted and distinct (all < t).  The
 * executor waits for the entries on other streams, the simulator replays them all,
 * memplan_check.c proves memory plans safe by them. */
typedef struct {
    int32_t ntasks;
    int32_t *ptr;   /* ntasks + 1 */
    int32_t *ids;   /* task t runs after ids[ptr[t] .. ptr[t+1]) */
} sw_task_order;

/* SW_ERR_VALUE for reuse edges that do not go forward between tasks of g. */
sw_status sw_task_order_build(const sw_task_graph *g, const sw_memory_plan *mp, sw_task_order *o);
/* The same on streams `st` (NULL: one per device, exactly sw_task_order_build's order). */
sw_status sw_task_order_build_on(const sw_task_graph *g, const sw_memory_plan *mp, const sw_streams *st,
                                 sw_task_order *o);
void sw_task_order_free(sw_task_order *o);

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
    const int32_t *route_ptr;      /* ndev * ndev + 1 */
    const int32_t *route_res;
    double copy_bandwidth;         /* > 0: every transfer runs at this (measured) bytes/s */
    /* Shared compute (sim_share.c): dev_fill[d] > 0 makes device d a pool that the kernels of
     * its streams share, each filling sw_task_share of it; NULL or 0: one task at a time. */
    const double *dev_fill;        /* ndev, or NULL: output elements a kernel needs to fill device d */
    /* swap tasks (swap.c): device d's offloads hold resource host_res + 2d (its device-to-host copy engine)
     * and its prefetches host_res + 2d + 1 (host-to-device), for bytes / host_bw[2d] (resp. [2d + 1])
     * seconds; host_bw NULL: a graph without swap tasks */
    const double *host_bw;
    int32_t host_res;
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
/* ---------------------------------------------------------------- swapping (AccUDNN) */
/* Offloading feature maps to host memory between their forward writes and backward reads, as
 * "AccUDNN: A GPU Memory Efficient Accelerator for Training Ultra-deep Deep Neural Networks"
 * (Guo et al.) does; docs/memory.md tells the story.  swap.c rewrites a lowered graph: each
 * offloaded buffer A (device d) gets a host copy H (SW_BUF_HOST, d's host region), a swap_out
 * task (reads A, writes H) on d's swap-out stream and a swap_in task (reads H, writes A', a new
 * buffer like A) on d's swap-in stream; the backward tasks read A' instead of A.  Where the two
 * go in program order is the plan: A's memory is free after the swap_out's position, A' is
 * taken from the swap_in's (the memory plan sees the shorter lifetimes).  swap_plan.c chooses. */
typedef struct {
    int32_t n;               /* feature maps offloaded */
    const int32_t *buffer;   /* n: buffer ids of the lowered graph */
    const int32_t *out_at;   /* n: the swap_out goes right before original task out_at[i] (after the buffer's
                                last forward write; <= ntasks) */
    const int32_t *in_at;    /* n: the swap_in goes right before original task in_at[i] (after out_at[i], at
                                most the buffer's first backward read) */
} sw_swap_spec;

/* The streams of a swapped graph: original tasks on stream d of their device d (priority 0),
 * device d's offloads on stream ndev + 2d and prefetches on ndev + 2d + 1 (priority 1: a
 * ready copy goes first); origin[t]: the original task id of new task t, -1 for swap tasks. */
typedef struct {
    int32_t ntasks, nstreams;
    int32_t *stream, *stream_device, *stream_priority, *origin;
} sw_swap_streams;

/* Rewrite g (lowered, one stream per device) by spec into *out (zeroed first) and *st; SW_ERR_VALUE
 * naming the entry when a buffer cannot be swapped as asked.  Buffer ids of g keep their meaning
 * in *out (new buffers come after them). */
sw_status sw_swap_apply(const sw_task_graph *g, int ndev, const sw_swap_spec *spec, sw_task_graph *out,
                        sw_swap_streams *st);
void sw_swap_streams_free(sw_swap_streams *st);
/* The streams view of st (borrowed). */
sw_streams sw_swap_streams_view(const sw_swap_streams *st);

/* What swap_plan.c needs: the unswapped timeline and the machine's figures. */
typedef struct {
    const double *start, *end;     /* ntasks each: the unswapped iteration as simulated */
    const int64_t *budget;         /* ndev: bytes each device's arena may take */
    const int64_t *pinned;         /* ndev: bytes each device's host region may take (< 0: unlimited) */
    const double *host_bw;         /* 2 ndev: device-to-host, host-to-device bytes/s of each device */
    int64_t align;
    int max_rounds;                /* of pinning stalled feature maps (0: the default) */
    int check;                     /* sw_swap_plan_fit: prove each swapped memory plan safe (tests) */
} sw_swap_inputs;

/* The plan and what the model predicts (arrays malloc'd here, sw_swap_plan_free frees them). */
typedef struct {
    int32_t n, cap;
    int32_t *buffer, *out_at, *in_at;
    double *ready;            /* n: t_ready of the prefetch (Algorithm 1), seconds into the iteration */
    double *needed;           /* n: when its first backward reader starts without stalls (Eq. 6's right side) */
    int ndev;
    double *stall;            /* ndev: predicted stall seconds (0 when Eq. 6 holds for every prefetch) */
    int64_t *peak;            /* ndev: the most live bytes the model counts (aligned) */
    int64_t *offloaded;       /* ndev: bytes of feature maps offloaded */
    int64_t *host_peak;       /* ndev: the most bytes live in the host region */
    int64_t *min_peak;        /* ndev: the smallest peak swapping can reach (every candidate offloaded, prefetched
                                 just in time) */
    int32_t *stalled;         /* ndev: prefetches predicted late */
    int fits;                 /* every device within its budget (and pinned host budget) */
    int32_t pinned_overflow;  /* feature maps kept on a device because its pinned host budget was spent */
} sw_swap_result;

/* Choose which feature maps to offload and where their swap tasks go (swap_plan.c): start with
 * every candidate offloaded (the smallest footprint), then keep on the device (pin) those whose
 * prefetch would stall the computation while memory allows (Algorithm 2's inner loop).  A device
 * that cannot fit even so gets fits = 0 (r->min_peak says how close it gets). */
sw_status sw_swap_plan(const sw_task_graph *g, int ndev, const sw_swap_inputs *in, sw_swap_result *r);
void sw_swap_result_free(sw_swap_result *r);
/* The spec view of a result (borrowed). */
sw_swap_spec sw_swap_result_spec(const sw_swap_result *r);
/* sw_swap_plan until the memory plan of the swapped graph (its arena, not only the live bytes the
 * model counts) fits every budget (swap_fit.c): arena and host (ndev each) get its arenas and host
 * regions; r->fits = 0 when a device stays over. */
sw_status sw_swap_plan_fit(const sw_task_graph *g, int ndev, const sw_swap_inputs *in, sw_swap_result *r,
                           int64_t *arena, int64_t *host);

#endif /* SHARDWISE_H */
