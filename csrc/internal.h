/*
 * internal.h -- what the rooms of the C core share and a caller does not see: the struct bodies
 * of shardwise.h's handles (sw_problem, sw_task_graph; sw_tables in search/search.h, sw_lowering
 * in graph/lowering.h), regions, configurations and ops, the task and buffer records, plans,
 * error reporting (sw_set_error, SW_FAIL, SW_TRY), and the room headers of the later stages.
 *
 * Every .c file of csrc/ includes "internal.h" (built with -Icsrc); it includes the public
 * shardwise.h first.  The bindings in csrc/py/ are internal code too: they declare task graphs,
 * plans and memory plans on the stack and read their bodies.  cuda/ sees this file only through
 * the exec/ headers it includes (the backend interface hands backends sw_task and sw_buffer
 * records).
 */
#ifndef SHARDWISE_INTERNAL_H
#define SHARDWISE_INTERNAL_H

#include <stdatomic.h>  /* _Atomic progress counters read by another thread */
#include <stddef.h>  /* size_t */
#include <stdint.h>  /* int64_t, int32_t */
#include <string.h>  /* memset: the box converters */

#include "shardwise.h"  /* the public interface: status, limits, boxes, handles */

/* ---------------------------------------------------------------- status */
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
    int32_t first_plus1;        /* 1 + sw_config_first_device (0: not noted, worked out on each call):
                                   noted where a problem sets its configurations, as tables ask it
                                   per configuration and per pair, O(nworkers) each time */
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
/* The dimension of a weight's box along which ring all-reduce cuts it into k >= 2 chunks
 * (core/region.c): the outermost one k divides, else the outermost of at least k rows; -1 when
 * every dimension has fewer than k rows (then the group synchronizes by parameter server).  The
 * lowering (lower_backward.c) and the memory footprints (cost_memory.c) both ask it. */
int sw_ring_chunk_dim(const sw_box *box, int k);
/* Chunk c (0 <= c < k) of that cut into *out: rows [extent c / k, extent (c + 1) / k) of
 * dimension sw_ring_chunk_dim, the rest of the box whole.  0 when the box does not cut. */
int sw_ring_chunk(const sw_box *box, int k, int c, sw_box *out);
/* The member of a ring of k that owns chunk c once the reduce-scatter is done (the member
 * holding its whole sum: c - 1 mod k), and the chunk member i owns ((i + 1) mod k).  With
 * sync_model zero the owner alone updates that chunk and keeps its optimizer state. */
static inline int sw_ring_owned_chunk(int i, int k) { return (i + 1) % k; }
/* Is worker w the owner of its output block (first of its reduction group)? */
static inline int sw_is_owner(const sw_config *c, int w) { return w % c->rdeg == 0; }
/* Region of input `slot` that worker w reads (0 when it reads none).  In a
 * reduction group only the owner reads the inputs that do not depend on the
 * split variable (a bias: added once, to the summed output). */
int sw_worker_region(const sw_op *op, const sw_config *c, int w, int slot, sw_box *region);
/* The output box of every block of c (out[b], b < nworkers / rdeg: sw_worker_box of its owner,
 * worker b * rdeg), without a division per worker. */
void sw_config_blocks(const sw_op *op, const sw_config *c, sw_box *out);
/* sw_worker_region of every worker w of c at once (regions[w], used[w] its return value),
 * O(rank) per worker: the same boxes. */
sw_status sw_config_regions(const sw_op *op, const sw_config *c, int slot, sw_box *regions, char *used);
/* Region sizes of every worker of c as products over the split coordinates (output
 * dims of degree > 1 in worker order, then the reduction part): when every input
 * dimension depends on at most one of them (separable), worker w with coordinates x_q
 * reads constant * prod_q factor[first[q] + x_q] elements (0: it reads nothing), and a
 * dimension d on coordinate dim_coord[d] has extent[d * cells + first[q] + x_q] there, starting
 * at lo[d * cells + first[q] + x_q] (a worker that reads something reads that box). */
typedef struct {
    int nsplit, rank, separable;
    int64_t count[SW_MAX_VARS], first[SW_MAX_VARS + 1], cells;
    double constant;                  /* product of the dimensions on no coordinate (0: never read) */
    int64_t const_len[SW_MAX_RANK];   /* their lengths */
    int64_t const_lo[SW_MAX_RANK];    /* and starts */
    int dim_coord[SW_MAX_RANK];       /* the coordinate each dimension depends on, or -1 */
    double *factor;
    int64_t *extent, *lo;
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

#include "search/search.h"  /* cost tables, sw_search_* */

/* ---------------------------------------------------------------- problems */
/* parameter server; ring all-reduce (reduce-scatter, allgather of gradient chunks, an update on
 * every replica); zero: the ring's reduce-scatter, the update of each chunk by its owner alone
 * (1/r of the optimizer state per replica), then an allgather of the updated weight chunks
 * (lower_backward.c, sync_ring).  sw_sync_rings says whether a model rings. */
typedef enum { SW_SYNC_PARAMETER_SERVER = 0, SW_SYNC_RING = 1, SW_SYNC_ZERO = 2 } sw_sync_model;
static inline int sw_sync_rings(sw_sync_model m) { return m == SW_SYNC_RING || m == SW_SYNC_ZERO; }
/* The number format a plan is costed in (core/precision.c): float32, or mixed precision with
 * bfloat16 or float16 values (float32 master weights and optimizer state). */
typedef enum { SW_PRECISION_FP32 = 0, SW_PRECISION_BF16 = 1, SW_PRECISION_FP16 = 2 } sw_precision;

struct sw_problem {
    int ndev;
    double *dev_flops;    /* FLOP/s per device */
    double *dev_membw;    /* memory bytes/s per device */
    double *bw;           /* ndev x ndev route bandwidth, bytes/s; 0 = no route */
    int nops;
    sw_op *ops;
    sw_sync_model sync_model;
    double bytes_per_element;   /* of the values the roofline reads and the messages carry */
    /* the number format (sw_problem_set_precision): the memory model's element sizes
     * (sw_precision_element_bytes) and, for ops marked dense (matrix products and
     * convolutions, op_dense[op] = 1), the peak FLOP/s dev_flops_dense[dev] at that format;
     * fp32 and no dense peaks (NULL): dev_flops for every op */
    sw_precision precision;
    double *dev_flops_dense;
    int8_t *op_dense;
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
    /* the enumeration's configurations of every op in one array (sw_problem_enumerate_sets):
     * ops[i].cfgs points into it, or to an array of its own where configurations were set */
    sw_config *cfg_block;
    int64_t cfg_block_len;
    /* filled by sw_problem_build_tables */
    sw_tables tables;
    double **tc, **ts, **sync_bytes;      /* per op, per config */
    int *edge_consumer_slot;              /* per edge: input slot of the consumer */
    int tables_built;
    int distinct_tables, counted_tables;  /* transfer tables: distinct ones, and those counted (the rest scaled copies) */
    _Atomic long progress_done, progress_total;   /* of the running build or search */
};

/* core/big_alloc.c: `bytes` (64-byte aligned) for an array written soon after, freed with free();
 * from `huge_from` bytes on, in whole transparent huge pages where the system has them (a page
 * fault per 2 MB instead of per 4 KB).  SW_HUGE_FROM: the size from which that pays for itself
 * (a huge page costs about as much to clear as ~90 faults of small pages).  NULL when out of memory. */
#define SW_HUGE_FROM ((size_t)4 << 20)
#define SW_HUGE_PAGE ((size_t)2 << 20)   /* the x86-64 and arm64 transparent huge page */
void *sw_big_alloc(size_t bytes, size_t huge_from);
/* An array that grows by doubling, `old` (its first `keep` bytes kept) made `bytes` long: below
 * huge_from by realloc; from there up to SW_GROW_COPY_MOST moved into a new block of huge pages,
 * its items copied (the old array lives on until then, at most half that); above, by realloc,
 * without a copy or a second array (mremap), its pages not yet written marked for huge pages
 * (the task graphs of 1,024 devices, the configurations of a large staged search).  NULL when
 * out of memory (old kept, as realloc does). */
#define SW_GROW_COPY_MOST ((size_t)16 << 20)
/* Where growing arrays go onto huge pages (sw_big_grow's huge_from for the task graph's arrays and
 * the configurations' list): an array that doubled to this size will be written through soon,
 * and its pages then map 2 MB at a fault. */
#define SW_GROW_HUGE_FROM (SW_HUGE_PAGE / 2)
void *sw_big_grow(void *old, size_t keep, size_t bytes, size_t huge_from);
/* The whole huge pages inside [p, p + bytes) marked for transparent huge pages (an array grown
 * in place by realloc: its pages not yet written then map 2 MB at a fault). */
void sw_advise_huge(void *p, size_t bytes);
/* The pages of [p, p + bytes) mapped for writing on a short-lived thread of their own, their
 * contents unchanged (Linux MADV_POPULATE_WRITE; elsewhere nothing): for an array about to be
 * written through, so that its page faults are taken beside the writes rather than in them. */
void sw_populate_async(void *p, size_t bytes);
/* Whether sw_populate_async does anything: on (1, the default) or off (0); -1 asks.  Returns the
 * setting before. */
int sw_populate_ahead(int on);
/* For an array [base, base + end) written front to back, `written` bytes so far, `ahead` of them
 * already asked to be mapped: while less than `lead` bytes are asked ahead of the writes, ask
 * for the next `stretch`es (sw_populate_async), up to a stretch past the lead.  Returns the new
 * `ahead`. */
int64_t sw_populate_ahead_of(void *base, int64_t written, int64_t end, int64_t ahead, int64_t lead, int64_t stretch);

/* fn(ctx, i) for i = 0 .. n-1 on up to `threads` threads; the first failure (parallel.c). */
sw_status sw_parallel_for(int n, int threads, sw_status (*fn)(void *ctx, int i), void *ctx);

/* core/precision.c: the plan's number format.  Set it (and the dense ops' peaks, ndev entries,
 * and which ops are dense, nops entries; both NULL: every op at dev_flops) before building
 * tables; SW_ERR_VALUE for an unknown format or a peak that is not positive. */
sw_status sw_problem_set_precision(sw_problem *p, int precision, const double *dense_flops, const int8_t *op_dense);
/* Bytes of one element of a buffer of kind `kind` (sw_buffer_kind) in a plan of format
 * `precision`: the memory plan's and the memory model's one rule (core/precision.c). */
int64_t sw_precision_element_bytes(sw_precision precision, int kind);
/* The peak FLOP/s op `op` runs at on device `dev` in the problem's format. */
static inline double sw_peak_flops(const sw_problem *p, int op, int dev) {
    return p->op_dense && p->op_dense[op] ? p->dev_flops_dense[dev] : p->dev_flops[dev];
}

/* cost/table_key.c: the data a cost table is a function of, as integers, so that tables
 * computed from equal data are computed once.  sw_key_push* return 0 when out of memory. */
typedef struct {
    int64_t *v;
    size_t len, cap;
} sw_key;
/* Keys kept so far: key[q] (owned), its hash, and the op or edge it was made for. */
typedef struct {
    int n;
    sw_key *key;
    uint64_t *hash;
    int *owner;
} sw_key_set;
int sw_key_grow(sw_key *k);   /* doubles the capacity; 0 when out of memory */
/* inline: a key of Inception-v3's transfer tables takes ~10^6 pushes */
static inline int sw_key_push(sw_key *k, int64_t x) {
    if (k->len == k->cap && !sw_key_grow(k)) {
        return 0;
    }
    k->v[k->len++] = x;
    return 1;
}
int sw_key_push_double(sw_key *k, double x);   /* its bits */
int sw_key_push_devices(sw_key *k, const sw_problem *p, const sw_config *cf);
int sw_key_push_config(sw_key *k, const sw_problem *p, const sw_config *cf, int rank);   /* degrees on rank dims, reduction, workers, devices */
uint64_t sw_key_hash(const sw_key *k);

/* The owner of a key of `set` equal to k (hash: sw_key_hash(k)), or -1. */
int sw_key_find(const sw_key_set *set, const sw_key *k, uint64_t hash);
void sw_key_set_free(sw_key_set *set);
/* Add a copy of k (exactly its length) to `set` under `owner`; k's buffer stays the caller's, to
 * make its next key in (grown once, not again for every key kept).  0 when out of memory. */
int sw_key_keep(sw_key_set *set, const sw_key *k, uint64_t hash, int owner);

/* An open-addressing index of items 0 .. n-1 (slots entries, a power of two above n; -1: empty),
 * filled afresh: item i at hash(ctx, i) & (slots - 1), or the next free slot after it.  The
 * memory tables' distinct rows and a task graph's distinct boxes grow their indexes so. */
static inline void sw_index_fill(int32_t *slot, int32_t slots, int32_t n, uint64_t (*hash)(const void *ctx, int32_t i),
                                 const void *ctx) {
    for (int32_t q = 0; q < slots; q++) {
        slot[q] = -1;
    }
    for (int32_t i = 0; i < n; i++) {
        size_t q = (size_t)hash(ctx, i) & (size_t)(slots - 1);
        while (slot[q] >= 0) {
            q = (q + 1) & (size_t)(slots - 1);
        }
        slot[q] = i;
    }
}

/* Node costs (cost_node.c) in two steps, so that the transfer tables can use the first: for
 * every op, the first op whose node costs are a function of equal data (itself if none
 * before it: its iteration space, FLOPs, inputs' index maps, configurations and devices),
 * then t_c + t_s computed once per such group and copied to the rest.
 * sw_problem_build_node_tables (shardwise.h) does both. */
sw_status sw_node_twins(const sw_problem *p, int *from);
sw_status sw_build_node_costs(sw_problem *p, const int *from);
/* sw_build_node_costs in three steps, for a caller that runs the ops' items among other work:
 * the arrays and the ops computed (*first, nfirst of them; freed by the caller), then
 * sw_node_costs_of(p, first[q]) for every q (any order, several threads), then the copies to
 * the other ops of each group. */
sw_status sw_node_costs_start(sw_problem *p, const int *from, int **first, int *nfirst);
sw_status sw_node_costs_of(sw_problem *p, int op);
sw_status sw_node_costs_finish(sw_problem *p, const int *from);

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
sw_status sw_transfer_table(const sw_problem *p, int consumer, int slot, double *time, double *bytes);
/* A transfer table to fill: its time and bytes (NULL: not wanted) and `unit`, the product over
 * dimensions of the common divisor of the coordinates it reads (cost.c: scaled copies). */
typedef struct {
    double *time, *bytes;
    double unit;
} sw_table_copy;
#define SW_TABLE_COPIES 8   /* tables filled from one table's counts at most */
/* Is the table of (consumer, slot) counted (a machine of uniform nodes, both ops' configurations
 * on contiguous device ranges), so that it can fill scaled copies of itself? */
int sw_transfer_counted(const sw_problem *p, int consumer, int slot);
/* The table of (consumer, slot) into copies[0] and, when counted, n - 1 more tables of which
 * every coordinate is that table's scaled per dimension (their units say how much); else n = 1. */
sw_status sw_transfer_tables(const sw_problem *p, int consumer, int slot, const sw_table_copy *copies, int n);
/* Counted per consumer worker instead of listed per pair (cost_placed.c), into n copies. */
sw_status sw_transfer_table_placed(const sw_problem *p, int consumer, int slot, const sw_table_copy *copies, int n);
/* The least t_x of edge (consumer, slot) between producer configuration ci and consumer
 * configuration cj over their placements on aligned device blocks of their sizes (uniform
 * nodes only; by symmetry the larger block stays on the first devices, and when the sizes
 * do not divide each other every pair of blocks is tried). */
sw_status sw_transfer_least(const sw_problem *p, int consumer, int slot, int ci, int cj, double *out);
/* t_x of edge (consumer, slot) between configurations ci and cj where they sit (the entry of
 * the exact table, for one pair): uniform nodes and contiguous devices only, else SW_ERR_VALUE. */
sw_status sw_transfer_placed(const sw_problem *p, int consumer, int slot, int ci, int cj, double *out);
/* Lower bounds of t_x for every pair of configurations (ncfg_src x ncfg_dst), valid
 * whatever devices they use; bw_max the fastest route (sw_fastest_route). */
sw_status sw_transfer_bound_table(const sw_problem *p, int consumer, int slot, double bw_max, double *out);
/* The first device of c when its devices are first, first + 1, ...; -1 otherwise. */
int sw_config_first_device(const sw_problem *p, const sw_config *c);
/* Note sw_config_first_device in each of op's n configurations (those sharing a device list
 * share the answer). */
void sw_configs_note_first_device(const sw_problem *p, sw_config *cfgs, int n);
/* config.c: op's configurations replaced by cfgs (n of them, op takes them); its old ones freed
 * unless they are a part of p's block of enumerated configurations. */
void sw_op_set_configs(sw_problem *p, sw_op *op, sw_config *cfgs, int n);
/* Same degrees and reduction split (the placement may differ; core/config.c). */
int sw_same_partition(const sw_config *a, const sw_config *b);

/* ---------------------------------------------------------------- task graphs */
/* One training iteration of a plan as tasks (in a topological order), their
 * dependencies and the buffers each reads and writes; python/shardwise/iteration/lower.py
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
    SW_TASK_SEND, SW_TASK_RECV,          /* graph/ranks.c: a copy between two ranks' devices, split in halves */
    SW_TASK_RECOMPUTE,   /* recompute.c: a forward task run again before the backward reads its output */
    SW_TASK_RING,        /* a fused ring (SW_RINGS_FUSED): all the chunks one ring link carries, as one transfer */
    SW_TASK_NKINDS
} sw_task_kind;

/* Each kind's name (graph/task_kinds.c): Python's TASK_KINDS, the runtime's error messages. */
extern const char *const sw_task_kind_names[SW_TASK_NKINDS];

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
#define SW_OP(id, name, role, attrs, cpu, cuda) SW_OP_##id,
#include "ops.def"
    SW_OP_COUNT
} sw_op_type;
extern const char *const sw_op_names[SW_OP_COUNT];
extern const sw_op_kind sw_op_roles[SW_OP_COUNT];

/* A box as task graphs store it: sw_box with int32 coordinates (44 bytes against 88).  A tensor
 * dimension beyond 2^31 - 1 elements is refused by the lowering (sw_tg_buffer, sw_tg_task), never
 * truncated: sw_box_narrow marks a box it cannot hold with rank SW_BOX32_TOO_WIDE, which
 * appending it refuses.  Read one with sw_box_wide (or sw_task_box, sw_buffer_box). */
typedef struct {
    int32_t rank;
    int32_t lo[SW_MAX_RANK];
    int32_t hi[SW_MAX_RANK];   /* exclusive */
} sw_box32;
#define SW_BOX32_TOO_WIDE (-1)

static inline sw_box sw_box_wide(const sw_box32 *b) {
    sw_box w;
    memset(&w, 0, sizeof w);   /* the unused dimensions 0 */
    w.rank = b->rank;
    for (int d = 0; d < b->rank; d++) {
        w.lo[d] = b->lo[d];
        w.hi[d] = b->hi[d];
    }
    return w;
}
/* *out = *in; 0 if a coordinate is outside int32 (*out then has rank SW_BOX32_TOO_WIDE). */
static inline int sw_box_narrow(sw_box32 *out, const sw_box *in) {
    memset(out, 0, sizeof *out);
    out->rank = in->rank;
    for (int d = 0; d < in->rank; d++) {
        if (in->lo[d] < INT32_MIN || in->lo[d] > INT32_MAX || in->hi[d] < INT32_MIN || in->hi[d] > INT32_MAX) {
            out->rank = SW_BOX32_TOO_WIDE;
            return 0;
        }
        out->lo[d] = (int32_t)in->lo[d];
        out->hi[d] = (int32_t)in->hi[d];
    }
    return 1;
}
/* sw_box_volume and sw_box_equal of stored boxes. */
static inline int64_t sw_box32_volume(const sw_box32 *b) {
    int64_t v = 1;
    for (int d = 0; d < b->rank; d++) {
        int64_t len = (int64_t)b->hi[d] - b->lo[d];
        if (len <= 0) {
            return 0;
        }
        v *= len;
    }
    return v;
}
static inline int sw_box32_equal(const sw_box32 *a, const sw_box32 *b) {
    sw_box wa = sw_box_wide(a), wb = sw_box_wide(b);
    return sw_box_equal(&wa, &wb);
}

#define SW_TASK_BYTES_PER_ELEMENT 4   /* the executor's buffers are float32 */

typedef struct {
    int8_t kind, phase;        /* sw_task_kind, sw_phase */
    int32_t device;            /* where it runs (a copy: the destination) */
    int32_t src_device;        /* copies: the source device; send and recv: the device at the other end; -1 otherwise */
    int32_t op, worker, slot;  /* slot: input slot of per-input tasks, -1 otherwise; a ring task: the
                                  chunk transfers it stands for (each a message between ranks) */
    int32_t nreads;            /* buffers it reads (a reduction sums this many): the graph's io lists them */
    int32_t box;               /* copies, accumulates: the global box moved, as 1 + its index in the graph's
                                  boxes (sw_tg_task_box32 reads it, sw_tg_set_task_box writes it); 0: none;
                                  SW_TASK_BOX_TOO_WIDE, SW_TASK_BOX_NOMEM: one that could not be stored,
                                  which sw_tg_task refuses */
    int64_t elements;          /* its box's volume, else its first written buffer's (0: none) */
    int64_t nbytes;            /* bytes crossing between devices (copies; send and recv: the bytes on the wire) */
} sw_task;

/* A swap task: a copy between a device and its host region (swap.c), timed by the host link. */
static inline int sw_is_swap(const sw_task *t) { return t->kind == SW_TASK_SWAP_OUT || t->kind == SW_TASK_SWAP_IN; }

/* A half of a copy between two ranks (graph/ranks.c). */
static inline int sw_is_message(const sw_task *t) { return t->kind == SW_TASK_SEND || t->kind == SW_TASK_RECV; }

/* A copy between devices or a fused ring's link (timed by its route), as opposed to a local copy. */
static inline int sw_is_transfer(const sw_task *t) {
    return (t->kind == SW_TASK_COPY && t->src_device != t->device) || t->kind == SW_TASK_RING;
}

/* How a lowering writes each ring all-reduce (sync models ring and zero, lower_backward.c).
 * Chunked: every chunk's transfer and sum, 2 k (k - 1) transfers per gradient on k replicas, as
 * the runtime runs them.  Fused: per ring link one ring task carrying every chunk that link
 * carries (k - 1 or 2 (k - 1) of them), all of them after one join of the members' gradients and
 * before one join that the sums (an accumulate per member) wait for: the same bytes on the same
 * links in k + 2 tasks, the simulator's model of machines too large to replay every chunk.  The
 * runtime refuses a fused graph (its sums are not the ring's). */
typedef enum { SW_RINGS_CHUNKED = 0, SW_RINGS_FUSED = 1 } sw_ring_detail;

typedef struct {
    int32_t device, op;        /* op: the global tensor's op */
    int32_t worker;            /* params and their gradients: the worker holding them; -1 otherwise */
    int16_t slot;              /* params, their gradients and momentum: the op's weight input slot; -1 otherwise */
    int8_t kind;               /* sw_buffer_kind */
    sw_box32 box;              /* the global box it holds (sw_buffer_box reads it) */
} sw_buffer;

#define SW_TASK_BOX_TOO_WIDE (-1)
#define SW_TASK_BOX_NOMEM (-2)

/* A task graph holds millions of tasks and buffers (a 32-layer Llama on 1,024 devices: 4.8 M
 * and 3.8 M), so their boxes are stored narrow (60 bytes a buffer, against 104 with sw_box),
 * and a task's box once per distinct box in the graph (that Llama's 2.1 M task boxes are 15,000
 * distinct ones): 48 bytes a task, against 88 with its own sw_box32. */
_Static_assert(sizeof(sw_task) <= 48, "sw_task grew: keep its box an index, between the int32s and the int64s");
_Static_assert(sizeof(sw_buffer) <= 60, "sw_buffer grew");

/* The box of a buffer, widened. */
static inline sw_box sw_buffer_box(const sw_buffer *b) { return sw_box_wide(&b->box); }

/* Bytes of one element of a buffer: batchnorm statistics are double precision sums, the rest float32. */
static inline int64_t sw_buffer_element_bytes(const sw_buffer *b) {
    return b->kind == SW_BUF_STATS ? 8 : SW_TASK_BYTES_PER_ELEMENT;
}
/* Bytes of a buffer. */
static inline int64_t sw_buffer_bytes(const sw_buffer *b) { return sw_box32_volume(&b->box) * sw_buffer_element_bytes(b); }

/* The buffers a task reads and writes (ids into the graph's buffers), in the order
 * its kernel takes them: an in-place update (a reduction into its first read, the
 * SGD update of a parameter) names the buffer in both lists. */
typedef struct {
    const int32_t *reads;
    int nreads;
    const int32_t *writes;
    int nwrites;
} sw_task_io;

struct sw_task_graph {
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
    /* bytes of one element per buffer kind as the plan counts them (the lowering fills it from
     * the problem's precision, sw_precision_element_bytes); all 0: the executor's own sizes
     * (sw_buffer_element_bytes), which a graph the runtime runs keeps */
    int64_t element_bytes[SW_BUF_NKINDS];
    double value_bytes;   /* the problem's bytes_per_element when lowered (sw_wire_bytes); 0: the executor's */
    int8_t ring_detail;   /* sw_ring_detail it was lowered with: a fused graph is for the simulator only */
    /* per growing array (tasks, buffers, deps, io): the bytes from its start that threads were
     * asked to map ahead of the writes (taskgraph.c's populate_ahead) */
    int64_t ahead_tasks, ahead_buffers, ahead_deps, ahead_io;
    /* the distinct boxes of its tasks (sw_task.box indexes them from 1), and an open-addressing
     * table of their indices (box_slots entries, a power of two; -1: empty) that finds a box
     * already there as tasks are appended */
    sw_box32 *boxes;
    int32_t nboxes, box_cap;
    int32_t *box_slot;
    int32_t box_slots;
    /* Not NULL: a graph lowered for its buffers alone (sw_lower_buffer_totals): its tasks are
     * numbered but not kept (tasks, deps and io stay empty), and each ring task adds its `slot`
     * (the chunk halves it stands for) to ring_halves[its device] instead.  The caller's array
     * (one entry per device), never freed with the graph; NULL in every graph that keeps tasks. */
    int64_t *ring_halves;
};
/* Cut a grown graph's arrays to their items (graph/taskgraph.c): what it mapped ahead of the
 * writes and its room to double go back to the system once nothing more is appended. */
void sw_tg_trim(sw_task_graph *g);


/* Bytes a copy or message task t puts on the wire as a plan counts them: the executor's
 * t->nbytes (float32) at `value_bytes` a value (the problem's bytes_per_element; 0: the
 * executor's own).  The simulator's transfers and a task graph's bytes moved; the search's
 * transfer tables count elements x bytes_per_element the same way. */
static inline double sw_wire_bytes(double value_bytes, const sw_task *t) {
    return value_bytes > 0 ? (double)t->nbytes * value_bytes / (double)SW_TASK_BYTES_PER_ELEMENT
                           : (double)t->nbytes;
}
/* Bytes of buffer b as graph g counts them: the plan's element sizes where the lowering set
 * them (memory plans, the memory model's checks, swap plans), else the executor's. */
static inline int64_t sw_graph_buffer_bytes(const sw_task_graph *g, int32_t b) {
    const sw_buffer *buf = &g->buffers[b];
    int64_t each = g->element_bytes[buf->kind];
    return each > 0 ? sw_box32_volume(&buf->box) * each : sw_buffer_bytes(buf);
}

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
/* Lower `plan` into `g` (which must be zeroed), its rings written as `rings` says (sw_ring_detail:
 * chunked for the runtime); on failure g is freed. */
sw_status sw_lower(const sw_problem *p, const sw_plan *plan, sw_ring_detail rings, sw_task_graph *g);
/* What the memory check of a search needs from the lowering of `plan`, without its tasks (a
 * graph with ring_halves: every buffer, no task kept; graph/lower.c): per device, into ndev
 * entries each, the bytes of every buffer (the plan's element sizes), the number of buffers
 * and the bytes of the persistent ones (sw_tg_buffer_totals).  A fused lowering with `chunked`
 * counts the buffers its chunked graph holds. */
sw_status sw_lower_buffer_totals(const sw_problem *p, const sw_plan *plan, sw_ring_detail rings, int chunked,
                                 int64_t *bytes, int64_t *count, int64_t *persistent);
/* Per device (ndev entries each): bytes[d], the bytes of the buffers on d (the plan's element
 * sizes; only those kept across steps, the parameters, optimizer state and running statistics,
 * with `persistent`), and count[d], their number.  chunked (not with persistent): on a graph with
 * fused rings, the totals of the same plan's chunked graph: the same bytes (a member's one
 * receive buffer of the whole gradient holds what its k chunk buffers hold), k - 1 more buffers
 * a member and ring, counted from its ring tasks (slot / 2 each: a ring's one task stands for
 * 2 (k - 1) chunks, zero's two for k - 1 each, on the same member).  Allocates nothing. */
void sw_tg_buffer_totals(const sw_task_graph *g, int ndev, int chunked, int persistent, int64_t *bytes,
                         int64_t *count);
/* An exact copy of src into dst (zeroed first; freed on failure). */
sw_status sw_task_graph_copy(const sw_task_graph *src, sw_task_graph *dst);
/* What a graph says about itself beside its tasks and buffers (element sizes as the plan counts
 * them, bytes a value on the wire, how its rings are written): every rewrite of a graph (swap,
 * recompute, ranks, iterations) copies it into the graph it builds, whose memory plan and
 * simulation must count the plan's precision as the original's do. */
void sw_tg_copy_header(const sw_task_graph *src, sw_task_graph *dst);
/* taskgraph.c: append a buffer / a task with deps (negative ids are skipped;
 * the rest are sorted and made distinct) and the buffers it reads and writes
 * (t->nreads is set from io); the new id goes to *id. */
sw_status sw_tg_buffer(sw_task_graph *g, int32_t device, sw_buffer_kind kind, int32_t op, const sw_box *box,
                       int32_t *id);
/* append an exact copy of *buf (worker and slot too) */
sw_status sw_tg_buffer_copy(sw_task_graph *g, const sw_buffer *buf, int32_t *id);
/* Room for about `expected` buffers in a graph that has none yet, made at once (taskgraph.c
 * says when); more still grow as ever.  Only a guess of the size: never required. */
void sw_tg_expect_buffers(sw_task_graph *g, int64_t expected);
/* Task t's box (to be appended to g): stored once in g (an equal box already there is
 * shared); one beyond int32 or out of memory marks t, and sw_tg_task refuses it. */
void sw_tg_set_task_box(sw_task_graph *g, sw_task *t, const sw_box *box);
void sw_tg_set_task_box32(sw_task_graph *g, sw_task *t, const sw_box32 *box);
/* The box of a task of g: its stored box, or the empty one (rank 0). */
static inline const sw_box32 *sw_tg_task_box32(const sw_task_graph *g, const sw_task *t) {
    static const sw_box32 none = {0, {0}, {0}};
    return t->box > 0 ? &g->boxes[t->box - 1] : &none;
}
/* Task t of graph `from` copied for graph g (a pass rewriting `from` into g): its box stored in g. */
static inline sw_task sw_tg_task_for(sw_task_graph *g, const sw_task_graph *from, const sw_task *t) {
    sw_task c = *t;
    c.box = 0;
    if (t->box > 0) {
        sw_tg_set_task_box32(g, &c, sw_tg_task_box32(from, t));
    }
    return c;
}
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
/* graph/ranks.c: g split over processes, rank[d] the rank of each of ndev devices: every copy
 * between two ranks' devices becomes a send on its source device and a recv right after it on
 * its destination (the recv depends on the send); the rest is copied as is, buffers keep their
 * ids.  (*origin)[t] is the task of g each task of out comes from (malloc'd; free() it). */
sw_status sw_split_ranks(const sw_task_graph *g, int ndev, const int32_t *rank, sw_task_graph *out,
                         int32_t **origin);
/* Lifetimes (taskgraph.c): shared by the memory plan (mem/) and the swap plan (graph/swap*.c). */
/* Buffers the host reads after the step (the loss tasks' outputs, the probabilities, and their reads,
 * the logits: Trainer.forward): (*out)[b] = 1; free() it. */
sw_status sw_tg_host_reads(const sw_task_graph *g, char **out);
/* Does buffer b live through every step and across steps (parameters, momentum, host reads)? */
int sw_buffer_lives_throughout(const sw_task_graph *g, int32_t b, const char *host_read);
/* Each buffer's lifetime in program order: first[b] / last[b] = the first / last task touching it
 * (nbuffers entries each); [0, ntasks] for a buffer living throughout, one no task touches, or
 * every buffer when !reuse (the memory plan and the swap plan both measure live bytes by these). */
void sw_buffer_lifetimes(const sw_task_graph *g, const char *host_read, int reuse, int32_t *first, int32_t *last);

/* The later stages, one room header each (each needs the types above and the rooms before it). */
#include "cost/cost.h"        /* memory footprints per configuration (the cost model's) */
#include "graph/schedule.h"   /* schedules, streams, hazards */
#include "graph/swap.h"       /* swapping feature maps to host memory */
#include "graph/recompute.h"  /* recomputing feature maps in the backward pass */
#include "graph/lowering.h"   /* a plan lowered once, with its streams and swap rewrite */
#include "mem/memplan.h"      /* memory plans, iterations, the runtime's order, swap plans that fit */
#include "sim/simulate.h"     /* durations, simulating a plan, the event loops */

#endif /* SHARDWISE_INTERNAL_H */
