/* lower_internal.h -- what lower.c (forward pass, checks, driver) shares with lower_backward.c
 * (backward pass and synchronization): the lowering's state and its small helpers.
 *
 * The helpers are static inline so that each file keeps them local; the state's layout is
 * described in lower.c's header comment (per worker at wbase[op] + w, per (op, input slot,
 * worker) at sbase[op] + slot * nworkers + w).
 */
#ifndef SHARDWISE_LOWER_INTERNAL_H
#define SHARDWISE_LOWER_INTERNAL_H

#include <stdlib.h>  /* malloc (region) */
#include <string.h>  /* memset (task_of, region) */

#include "internal.h"

#define NONE (-1)

typedef struct {
    const sw_problem *p;
    const sw_plan *plan;
    sw_task_graph *g;
    sw_ring_detail rings;        /* each ring all-reduce chunked (the runtime's) or fused (a model) */
    /* per worker of every op: [wbase[op] + w] */
    int32_t *wbase;
    sw_box *box;                 /* output box */
    int32_t *act, *act_task;     /* activation buffer and the task writing it */
    int32_t *grad, *grad_last;   /* gradient buffer (NONE until a consumer sends one), last accumulate */
    int32_t *stats_fwd, *stats_bwd;   /* batchnorm: the worker's reduced statistics of x and of the gradient */
    /* per (op, input slot, worker): [sbase[op] + slot * nworkers + w] */
    int32_t *sbase;
    int32_t *in_buf, *in_task;   /* data slots: staging region (or shared shard) and the task completing it,
                                    NONE when not read; weight slots: the parameter buffer */
    int32_t *wgrad_buf, *wgrad_task;  /* weight slots: gradient buffer, backward_weight task */
    /* scratch, maxk (the most workers of any op) entries each */
    int32_t maxk;
    int32_t *piece_w;            /* overlapping source workers of a region ... */
    sw_box *piece_box;           /* ... and the piece each one holds */
    int32_t npieces;
    int32_t *deps;               /* maxk + 8: dependencies being collected */
    int32_t *io;                 /* maxk + 72: buffers a task being built reads */
    int32_t *members;            /* a replica group */
    char *grouped;               /* worker already in a group */
    sw_box *rbox;                /* per worker: the region grouped on */
    int32_t *bufs, *ready;       /* per worker: buffers to reduce, task after which each is ready */
    /* the block owner of an op on each device, made for each producer the first time a consumer
     * gathers from it (lower.c owner_on_devices): owner_on[op][dev] (NONE: none; owner_on[op]
     * NULL: not made yet).  An op's workers are on distinct devices (sw_plan_check), so a device
     * has at most one; a consumer worker finds the shard on its device without visiting every
     * owner (a 1,024-way split read by a 1,024-way split: a million visits per edge). */
    int32_t **owner_on;
    /* the regions every worker of one op reads on each input slot, made for all its workers at
     * once (sw_config_regions) the first time one is asked for (lower_internal.h region): of
     * op region_op, slot s made when region_made[s]; maxk boxes per slot, allocated on first use */
    int32_t region_op;
    char region_made[64];        /* an op has at most 64 inputs (problem.c) */
    sw_box *region_of[64];
    char *region_used[64];
} lowering;

/* ------------------------------------------------------------------ small helpers */
static inline const sw_op *op_at(const lowering *L, int op) { return &L->p->ops[op]; }
static inline const sw_config *cfg_of(const lowering *L, int op) { return &L->plan->cfg[op]; }
static inline int32_t dev_of(const lowering *L, int op, int w) { return L->plan->devs[cfg_of(L, op)->dev_offset + w]; }
static inline int32_t widx(const lowering *L, int op, int w) { return L->wbase[op] + w; }
static inline int32_t sidx(const lowering *L, int op, int slot, int w) {
    return L->sbase[op] + slot * cfg_of(L, op)->nworkers + w;
}
static inline int has_weights(const sw_op *op) {
    for (int k = 0; k < op->ninputs; k++) {
        if (op->inputs[k].role == SW_ROLE_WEIGHT) {
            return 1;
        }
    }
    return 0;
}
static inline int first_slot(const sw_op *op, sw_role role) {
    for (int k = 0; k < op->ninputs; k++) {
        if (op->inputs[k].role == role) {
            return k;
        }
    }
    return NONE;
}

/* The region of input `slot` worker w reads (sw_worker_region: its output block,
 * over its part of a split reduction); an input not read gets the empty box (all
 * zeros) and 0. */
static inline int region(lowering *L, int op, int slot, int w, sw_box *out) {
    if (L->region_op != op) {
        memset(L->region_made, 0, sizeof L->region_made);
        L->region_op = op;
    }
    if (!L->region_made[slot]) {   /* every worker's at once: the passes ask worker by worker */
        if (!L->region_of[slot]) {
            L->region_of[slot] = malloc(sizeof(sw_box) * (size_t)L->maxk);
            L->region_used[slot] = malloc((size_t)L->maxk);
        }
        L->region_made[slot] = L->region_of[slot] && L->region_used[slot] &&
                               sw_config_regions(op_at(L, op), cfg_of(L, op), slot, L->region_of[slot],
                                                 L->region_used[slot]) == SW_OK;
    }
    int used = L->region_made[slot] ? L->region_used[slot][w]   /* (else out of memory: this one alone) */
                                    : sw_worker_region(op_at(L, op), cfg_of(L, op), w, slot, out);
    if (L->region_made[slot]) {
        *out = L->region_of[slot][w];
    }
    if (used) {
        return 1;
    }
    for (int d = 0; d < out->rank; d++) {
        out->lo[d] = out->hi[d] = 0;
    }
    return 0;
}

static inline sw_task task_of(sw_task_kind kind, sw_phase phase, int32_t device, int32_t op, int32_t worker) {
    sw_task t;
    memset(&t, 0, sizeof t);
    t.kind = (int8_t)kind;
    t.phase = (int8_t)phase;
    t.device = device;
    t.src_device = NONE;
    t.op = op;
    t.worker = worker;
    t.slot = NONE;
    return t;
}

/* A copy of `box` from src to dst device: the bytes count only across devices. */
static inline sw_task copy_of(lowering *L, sw_phase phase, int32_t dst, int32_t src, int32_t op, int32_t worker,
                              int32_t slot, const sw_box *box) {
    sw_task t = task_of(SW_TASK_COPY, phase, dst, op, worker);
    t.slot = slot;
    t.src_device = src;
    sw_tg_set_task_box(L->g, &t, box);
    t.elements = sw_box_volume(box);
    t.nbytes = src != dst ? t.elements * SW_TASK_BYTES_PER_ELEMENT : 0;
    return t;
}

/* Append task t with its dependencies and the buffers it reads and writes. */
static inline sw_status add_task(lowering *L, const sw_task *t, const int32_t *deps, int ndeps, const int32_t *reads,
                          int nreads, const int32_t *writes, int nwrites, int32_t *id) {
    sw_task_io io = {reads, nreads, writes, nwrites};
    return sw_tg_task(L->g, t, deps, ndeps, &io, id);
}

/* A copy task reading buffer `from` and writing buffer `to`. */
static inline sw_status add_copy(lowering *L, const sw_task *t, int32_t dep, int32_t from, int32_t to, int32_t *id) {
    return add_task(L, t, &dep, 1, &from, 1, &to, 1, id);
}

/* The workers of op `src` whose boxes meet `region`, row-major (the last
 * dimension fastest), with their pieces: the
 * owner of each output block (with a split reduction, worker block * rdeg). */
static inline void find_pieces(lowering *L, int src, const sw_box *reg) {
    const sw_config *c = cfg_of(L, src);
    L->npieces = sw_blocks_meeting(op_at(L, src), c, reg, L->piece_w, L->piece_box);
    for (int q = 0; q < L->npieces; q++) {
        L->piece_w[q] *= c->rdeg;   /* the block's owner */
    }
}

/* Replica groups of input `slot` of op: workers reading the same box, in worker
 * order (workers that do not read it are in none).  start_groups computes the
 * boxes; next_group fills L->members and returns its size, 0 when every worker
 * is in a group. */
static inline void start_groups(lowering *L, int op, int slot) {
    int k = cfg_of(L, op)->nworkers;
    for (int w = 0; w < k; w++) {
        L->grouped[w] = (char)!region(L, op, slot, w, &L->rbox[w]);
    }
}

static inline int next_group(lowering *L, int op, int *from) {
    int k = cfg_of(L, op)->nworkers;
    while (*from < k && L->grouped[*from]) {
        (*from)++;
    }
    if (*from >= k) {
        return 0;
    }
    int r = 0;
    for (int v = *from; v < k; v++) {
        if (!L->grouped[v] && sw_box_equal(&L->rbox[*from], &L->rbox[v])) {
            L->grouped[v] = 1;
            L->members[r++] = v;
        }
    }
    return r;
}

/* lower.c: sum L->bufs[] over each replica group of `slot` at its first worker and send the sum
 * back; L->ready[w] becomes the task after which worker w's buffer holds it (batch norms'
 * statistics, in both passes). */
sw_status sw_lower_reduce_among(lowering *L, int op, int slot, sw_phase phase, sw_task_kind kind);
/* lower_backward.c: op's backward tasks (ops in reverse order), then its weights' synchronization
 * and update (ops with weights, in reverse order). */
sw_status sw_lower_backward(lowering *L, int op);
sw_status sw_lower_sync(lowering *L, int op);

#endif
