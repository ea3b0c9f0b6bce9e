/* cost/cost.h -- the cost model's memory footprints (cost_memory.c), the tables the
 * memory-constrained search adds up.
 *
 * The time tables (sw_tables, sw_edge_table) are declared in search/search.h, which the problem's
 * body needs early; the cost functions themselves (sw_worker_time, sw_transfer_table, ...) are in
 * internal.h.  A room header: include "internal.h", which includes this file after the
 * types it uses (problems).
 */
#ifndef SHARDWISE_COST_H
#define SHARDWISE_COST_H

#ifndef SHARDWISE_INTERNAL_H
#error "include internal.h, not cost/cost.h alone"
#endif

/* ---------------------------------------------------------------- arithmetic */
/* a / b and a % b (into *rest when not NULL) for a >= 0, b > 0: in 32 bits where both fit,
 * as device and block indices and coordinates do (a 64-bit division takes several times
 * longer: the transfer counts divide for every pair of placements, the table keys for every
 * listed coordinate). */
static inline int64_t sw_quotient_rest(int64_t a, int64_t b, int64_t *rest) {
    if (a <= UINT32_MAX && b <= UINT32_MAX) {
        uint32_t q = (uint32_t)a / (uint32_t)b;
        if (rest) {
            *rest = (int64_t)((uint32_t)a - q * (uint32_t)b);
        }
        return q;
    }
    if (rest) {
        *rest = a % b;
    }
    return a / b;
}

/* ---------------------------------------------------------------- memory footprints */
/* Per device, the bytes a plan's memory plan holds live when the backward pass starts
 * (parameters, optimizer state, running statistics, and the forward buffers the backward
 * reads again), as node terms (one op's configuration) plus edge terms (a producer's and
 * a consumer's): what the memory-constrained search adds up (cost/cost_memory.c).  A lower
 * bound of the memory plan's peak. */
typedef struct {
    int32_t ci, cj;   /* producer, consumer configuration */
    int32_t dev;
    double bytes;     /* the consumer's staging region there is the producer's shard: not needed */
} sw_memory_saving;

typedef struct {
    int ndev, nops;
    /* every distinct row of bytes per device once: configurations of a large machine repeat a
     * few hundred rows (a 32-layer Llama on 256 GPUs: 859 node rows for 368,693 configurations) */
    double *rows;             /* nrows x ndev */
    int32_t nrows, cap_rows;
    int32_t *row_slot;        /* open-addressing index of rows by hash, nslots entries, -1 empty */
    int32_t nslots;
    int32_t **node;           /* per op: ncfg row ids, its configurations' bytes per device */
    int nedges;               /* one per (consumer, data slot), consumers in order */
    int *edge_src, *edge_dst, *edge_slot;
    int32_t **edge_base;      /* per edge: ncfg[dst] row ids, the consumer's kept staging regions */
    int64_t *shared_ptr;      /* nedges + 1: edge e's savings are shared[shared_ptr[e] .. shared_ptr[e+1]) */
    int *edge_copy_of;        /* per edge: the first twin edge whose base rows and savings it has (its own
                               * savings range is then empty: a transformer's layers list them once), or -1 */
    sw_memory_saving *shared;
    int64_t nshared;
} sw_memory_tables;

/* kind: per op, its sw_op_kind.  The configurations must be enumerated. */
sw_status sw_memory_tables_build(const sw_problem *p, const int8_t *kind, sw_memory_tables *mt);
void sw_memory_tables_free(sw_memory_tables *mt);

#endif /* SHARDWISE_COST_H */
