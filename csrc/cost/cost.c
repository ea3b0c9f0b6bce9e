/* cost.c -- the transfer term of Eq. 1 (seed 003) and the tables the search reads.
 *
 * t_x(e, ci, cj)  tensor transfer: for every destination worker, the part of
 *             the region it reads (halos included) that lives on another
 *             device, over the route bandwidth from that device; counted twice,
 *             for the activation forward and its gradient backward (once for
 *             edges out of a graph input, which needs no gradient).
 * Every term is a sum, as in Eq. 1, so the transfers are serial in the model.
 * t_c and t_s (the node costs) are in cost_node.c.
 */
#include <math.h>       /* INFINITY, fmax */
#include <pthread.h>    /* the build's items wait for the tables' layout */
#include <stdatomic.h>  /* atomic_fetch_add: the progress counter */
#include <stdlib.h>     /* calloc, malloc, free */
#include <string.h>     /* memset, memcmp */

#include "internal.h"

#define TRANSFER_DIRECTIONS 2.0   /* activation forward + gradient backward */

static const int32_t *config_devices(const sw_problem *p, const sw_config *c) {
    return p->dev_pool + c->dev_offset;
}

static double route_bw(const sw_problem *p, int from, int to) { return p->bw[(size_t)from * p->ndev + to]; }

/* Transfer tables.  A configuration is a partition (its degrees) placed on
 * devices.  The volumes destination worker w needs from source worker s depend
 * only on the two partitions, so they are computed once per pair of partitions
 * as a list of (w, s, elements); each pair of placements then only sums
 * elements / bandwidth over the list entries whose devices differ. */

typedef struct {
    int32_t w, s;
    double elements;
} overlap;

typedef struct {
    overlap *items;
    size_t len, cap;
} overlap_list;

static sw_status overlap_push(overlap_list *l, int w, int64_t s, double elements) {
    if (l->len == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        overlap *n = realloc(l->items, sizeof *n * cap);
        if (!n) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        l->items = n;
        l->cap = cap;
    }
    l->items[l->len++] = (overlap){(int32_t)w, (int32_t)s, elements};
    return SW_OK;
}

/* Overlaps between the regions the workers of a destination partition read
 * (`regions`, `used` per worker) and the shards of the producer under
 * partition `src_cfg` (block, piece: scratch for sw_blocks_meeting). */
static sw_status partition_overlaps(const sw_box *regions, const char *used, int kd, const sw_op *src,
                                    const sw_config *src_cfg, int32_t *block, sw_box *piece, overlap_list *out) {
    out->len = 0;
    for (int w = 0; w < kd; w++) {
        if (!used[w]) {
            continue;
        }
        int n = sw_blocks_meeting(src, src_cfg, &regions[w], block, piece);
        for (int q = 0; q < n; q++) {
            sw_status st = overlap_push(out, w, block[q], (double)sw_box_volume(&piece[q]));
            if (st != SW_OK) {
                return st;
            }
        }
    }
    return SW_OK;
}

/* End (exclusive) of the run of configurations from `c` that share c's partition. */
static int partition_end(const sw_op *op, int c) {
    int e = c + 1;
    while (e < op->ncfg && sw_same_partition(&op->cfgs[c], &op->cfgs[e])) {
        e++;
    }
    return e;
}

/* Every configuration of op on a contiguous range of devices (as enumerated)? */
static int all_contiguous(const sw_problem *p, const sw_op *op) {
    for (int c = 0; c < op->ncfg; c++) {
        if (sw_config_first_device(p, &op->cfgs[c]) < 0) {
            return 0;
        }
    }
    return 1;
}

int sw_transfer_counted(const sw_problem *p, int consumer, int slot) {
    const sw_op *dst = &p->ops[consumer];
    return p->node_size > 0 && all_contiguous(p, dst) && all_contiguous(p, &p->ops[dst->inputs[slot].producer]);
}

sw_status sw_transfer_tables(const sw_problem *p, int consumer, int slot, const sw_table_copy *copies, int n) {
    if (sw_transfer_counted(p, consumer, slot)) {
        return sw_transfer_table_placed(p, consumer, slot, copies, n);   /* uniform nodes: counting */
    }
    if (n != 1) {
        return SW_FAIL(SW_ERR_VALUE, "scaled copies of a transfer table are made only where it is counted");
    }
    return sw_transfer_table(p, consumer, slot, copies[0].time, copies[0].bytes);
}

sw_status sw_transfer_table(const sw_problem *p, int consumer, int slot, double *time, double *bytes) {
    const sw_op *dst = &p->ops[consumer];
    const sw_op *src = &p->ops[p->ops[consumer].inputs[slot].producer];
    if (sw_transfer_counted(p, consumer, slot)) {
        return sw_transfer_table_placed(p, consumer, slot, &(sw_table_copy){time, bytes, 1.0}, 1);
    }
    int nj = dst->ncfg, nd = p->ndev;
    /* seconds per element from device a to device b, both directions counted */
    double *sec = malloc(sizeof(double) * (size_t)nd * (size_t)nd);
    int maxk = 1;
    for (int c = 0; c < nj; c++) {
        maxk = dst->cfgs[c].nworkers > maxk ? dst->cfgs[c].nworkers : maxk;
    }
    int src_maxk = 1;   /* the most output blocks of any producer configuration */
    for (int c = 0; c < src->ncfg; c++) {
        src_maxk = src->cfgs[c].nworkers > src_maxk ? src->cfgs[c].nworkers : src_maxk;
    }
    sw_box *regions = malloc(sizeof *regions * (size_t)maxk);
    char *used = malloc((size_t)maxk);
    int32_t *block = malloc(sizeof *block * (size_t)src_maxk);
    sw_box *piece = malloc(sizeof *piece * (size_t)src_maxk);
    overlap_list list = {0};
    if (!sec || !regions || !used || !block || !piece) {
        free(sec);
        free(regions);
        free(used);
        free(block);
        free(piece);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    /* no gradient flows back into the graph's inputs: their transfers happen once */
    double per_elem = p->bytes_per_element * (src->ninputs == 0 ? 1.0 : TRANSFER_DIRECTIONS);
    for (int a = 0; a < nd; a++) {
        for (int b = 0; b < nd; b++) {
            sec[(size_t)a * nd + b] = a == b ? 0.0 : per_elem / route_bw(p, a, b);
        }
    }
    sw_status s = SW_OK;
    for (int cj0 = 0; cj0 < nj && s == SW_OK; cj0 = partition_end(dst, cj0)) {
        int cj1 = partition_end(dst, cj0);
        const sw_config *part = &dst->cfgs[cj0];
        s = sw_config_regions(dst, part, slot, regions, used);
        if (s != SW_OK) {
            break;
        }
        for (int ci0 = 0; ci0 < src->ncfg; ci0 = partition_end(src, ci0)) {
            int ci1 = partition_end(src, ci0);
            s = partition_overlaps(regions, used, part->nworkers, src, &src->cfgs[ci0], block, piece, &list);
            if (s != SW_OK) {
                break;
            }
            int src_rdeg = src->cfgs[ci0].rdeg;   /* output block s lives on its owner, worker s * rdeg */
            for (int cj = cj0; cj < cj1; cj++) {
                const int32_t *dd = config_devices(p, &dst->cfgs[cj]);
                for (int ci = ci0; ci < ci1; ci++) {
                    const int32_t *sd = config_devices(p, &src->cfgs[ci]);
                    double t = 0.0, moved = 0.0;
                    for (size_t q = 0; q < list.len; q++) {
                        const overlap *o = &list.items[q];
                        int a = sd[(size_t)o->s * src_rdeg], b = dd[o->w];
                        t += o->elements * sec[(size_t)a * nd + b];
                        moved += a != b ? o->elements : 0.0;
                    }
                    time[(size_t)ci * nj + cj] = t;
                    if (bytes) {
                        bytes[(size_t)ci * nj + cj] = moved * per_elem;
                    }
                }
            }
        }
    }
    free(list.items);
    free(sec);
    free(regions);
    free(used);
    free(block);
    free(piece);
    return s;
}

/* ---- sharing tables between edges that read the same data ----
 * Networks repeat themselves (conv -> batchnorm -> relu, identical Inception modules),
 * and ops of different kinds often read their input alike (a 1x1 convolution and a
 * batch norm split the same way read the same rows).  A table (t_x, its bytes, or its
 * lower bound) is a function of: whether the producer is a graph input (one direction
 * or two), the producer's output extents and configurations (degrees, reduction split,
 * devices), and per consumer configuration its devices and the region each worker
 * reads on that input slot; nothing else of the two ops.  Two edges with equal data
 * share one table.  The data of an edge, in two parts (producer_data, consumer_data: at
 * most a few times its table's entries), is kept as sw_keys (table_key.c). */

/* Entries the read regions of every consumer partition add to the data (1 + 2 rank per worker). */
static double region_entries(const sw_op *dst, int slot) {
    double n = 0;
    for (int c = 0; c < dst->ncfg; c++) {
        if (c == 0 || !sw_same_partition(&dst->cfgs[c - 1], &dst->cfgs[c])) {
            n += (double)dst->cfgs[c].nworkers * (1 + 2 * dst->inputs[slot].rank);
        }
    }
    return n;
}

/* ---- tables that are scaled copies of one another ----
 * Where every coordinate a table reads on dimension d (the producer's extent and block
 * lengths, the regions the consumer's workers read) is a multiple of g_d, the table's counts
 * (cost_placed.c: whole numbers of elements, each a product over dimensions of interval
 * overlaps) are prod_d g_d times those of the table with every coordinate divided by g_d.
 * Inception-v3's modules repeat one pattern at several channel counts (a convolution of 64
 * channels feeding its batch norm, another of 96 feeding its own), so the parts of the data
 * are kept divided by their own per-dimension divisors (the producer's: its `scale`, the
 * consumer's: its `scale`), and two tables whose divided parts agree, and whose divisors agree
 * up to one factor per dimension, are counted once (fill_class). */

/* x mod g for x >= 0, g > 0 (sw_quotient_rest: in 32 bits where both fit). */
static int64_t rest_of(int64_t x, int64_t g) {
    int64_t rest;
    sw_quotient_rest(x, g, &rest);
    return rest;
}

/* The greatest common divisor of a, b >= 0 (gcd(0, b) = b). */
static int64_t gcd64(int64_t a, int64_t b) {
    while (b != 0) {
        int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* The producer's part of the data a table is a function of, into k (emptied): whether it is
 * a graph input (one direction or two), its output extents and its configurations.  The
 * extents are divided by scale[d], the greatest common divisor of the extent and of every
 * configuration's block length there (scale[d] = 1 past the output rank). */
static int producer_data(const sw_problem *p, int producer, sw_key *k, int64_t scale[SW_MAX_RANK]) {
    const sw_op *src = &p->ops[producer];
    int ok = 1;
    k->len = 0;
    for (int d = 0; d < SW_MAX_RANK; d++) {
        scale[d] = d < src->out_rank ? src->extent[d] : 1;
    }
    for (int c = 0; c < src->ncfg; c++) {   /* (a degree as the configuration before's: that length again) */
        for (int d = 0; d < src->out_rank; d++) {
            int32_t deg = src->cfgs[c].deg[d];
            if (scale[d] > 1 && (c == 0 || deg != src->cfgs[c - 1].deg[d])) {
                int64_t len = src->extent[d] / deg;
                scale[d] = rest_of(len, scale[d]) == 0 ? scale[d] : gcd64(scale[d], len);
            }
        }
    }
    ok &= sw_key_push(k, src->ninputs == 0) && sw_key_push(k, src->out_rank) && sw_key_push(k, src->ncfg);
    for (int d = 0; d < src->out_rank; d++) {
        ok &= sw_key_push(k, src->extent[d] / scale[d]);
    }
    for (int c = 0; ok && c < src->ncfg; c++) {
        ok &= sw_key_push_config(k, p, &src->cfgs[c], src->out_rank);
    }
    return ok;
}

/* Does the consumer's part of the data list the region each worker reads?  Where those are
 * at most REGION_KEY_CELLS times the table's entries (Inception on 16 devices: all edges);
 * else it lists what determines them: the consumer's iteration extents, the slot's index map
 * and the partitions (the large searches: 1,024 workers per partition, ~300 partitions).
 * Listed regions find more tables to share (ops of other index maps that read alike), but
 * they are made on one thread before the tables are filled on all: that pays where an entry
 * costs far more than a listed word, as an exact one does (about a microsecond).  A bound
 * table's entry (sw_transfer_bound_table) costs about as much as two listed words, so bound
 * tables list regions only up to REGION_KEY_CELLS_BOUND times their entries: the relaxation
 * of a 32-layer Llama on 1,024 GPUs listed 14.6 M words (117 MB, 0.28 s on one thread) and
 * found no table to share that the index maps did not. */
#define REGION_KEY_CELLS 4.0
#define REGION_KEY_CELLS_BOUND 0.25
static int by_regions(const sw_problem *p, int consumer, int slot) {
    const sw_op *dst = &p->ops[consumer];
    const sw_op *src = &p->ops[dst->inputs[slot].producer];
    double most = p->bound_tables ? REGION_KEY_CELLS_BOUND : REGION_KEY_CELLS;
    return region_entries(dst, slot) <= most * (double)src->ncfg * (double)dst->ncfg;
}

/* The consumer's part of the data the table of input `slot` of op `consumer` is a function
 * of, into k (emptied): per configuration its devices and, by regions, the region each worker
 * of each partition reads on that slot, else what those regions are a function of.  Listed
 * regions of an input shaped as its producer's output are divided by scale[d], the greatest
 * common divisor of their coordinates on dimension d (0 where every one is 0: kept as it is);
 * scale is 1 everywhere else.  `at`: scratch (where each worker's coordinates begin in k). */
static sw_status consumer_data(const sw_problem *p, int consumer, int slot, int regions_listed, sw_key *k,
                               sw_box *regions, char *used, sw_key *at, int64_t scale[SW_MAX_RANK]) {
    const sw_op *dst = &p->ops[consumer];
    const sw_input *in = &dst->inputs[slot];
    const sw_op *src = &p->ops[in->producer];
    int ok = 1;
    k->len = 0;
    at->len = 0;
    int scaled = regions_listed && in->rank == src->out_rank;
    for (int d = 0; d < SW_MAX_RANK; d++) {
        scaled &= d >= in->rank || in->shape[d] == src->extent[d];
        scale[d] = 1;
    }
    ok &= sw_key_push(k, regions_listed) && sw_key_push(k, dst->ncfg);
    if (!regions_listed) {   /* what the regions are a function of (core/region.c) */
        ok &= sw_key_push(k, dst->nvars) && sw_key_push(k, dst->out_rank) && sw_key_push(k, in->rank) &&
              sw_key_push(k, in->has_window);
        for (int v = 0; v < dst->nvars; v++) {
            ok &= sw_key_push(k, dst->extent[v]);
        }
        for (int d = 0; ok && d < in->rank; d++) {
            const sw_index_expr *e = &in->expr[d];
            ok &= sw_key_push(k, in->shape[d]) && sw_key_push(k, e->offset) && sw_key_push(k, e->div) &&
                  sw_key_push(k, e->mod);
            for (int v = 0; v < dst->nvars; v++) {
                ok &= sw_key_push(k, e->coef[v]) && sw_key_push(k, e->vdiv[v]);
            }
        }
        for (int d = 0; in->has_window && d < dst->out_rank; d++) {
            ok &= sw_key_push(k, in->win_lo[d]) && sw_key_push(k, in->win_hi[d]);
        }
    }
    for (int c = 0; ok && c < dst->ncfg; c++) {
        const sw_config *cf = &dst->cfgs[c];
        if (!regions_listed) {
            ok &= sw_key_push_config(k, p, cf, dst->out_rank);
            continue;
        }
        ok &= sw_key_push(k, cf->nworkers) && sw_key_push_devices(k, p, cf);
        int starts = c == 0 || !sw_same_partition(&dst->cfgs[c - 1], cf);   /* placements of one partition read alike */
        ok &= sw_key_push(k, starts);
        if (!starts) {
            continue;
        }
        SW_TRY(sw_config_regions(dst, cf, slot, regions, used));
        for (int w = 0; ok && w < cf->nworkers; w++) {
            ok &= sw_key_push(k, used[w]);
            if (used[w] && scaled) {
                ok &= sw_key_push(at, (int64_t)k->len);   /* where its coordinates begin */
            }
            for (int d = 0; used[w] && d < regions[w].rank; d++) {
                ok &= sw_key_push(k, regions[w].lo[d]) && sw_key_push(k, regions[w].hi[d]);
            }
        }
    }
    if (scaled && ok) {   /* every listed coordinate (>= 0: a region lies in its input) divided by its dimension's divisor */
        int64_t g[2 * SW_MAX_RANK] = {0};   /* per coordinate word of a worker (lo, hi per dimension) */
        for (size_t q = 0; q < at->len; q++) {
            const int64_t *x = k->v + at->v[q];
            for (int i = 0; i < 2 * in->rank; i++) {   /* (most coordinates are multiples already) */
                g[i] = g[i] == 1 || (g[i] > 0 && rest_of(x[i], g[i]) == 0) ? g[i] : gcd64(g[i], x[i]);
            }
        }
        int any = 0;
        for (int d = 0; d < in->rank; d++) {
            int64_t both = gcd64(g[2 * d], g[2 * d + 1]);
            scale[d] = both > 0 ? both : 1;
            any |= scale[d] > 1;
        }
        for (size_t q = 0; any && q < at->len; q++) {
            int64_t *x = k->v + at->v[q];
            for (int i = 0; i < 2 * in->rank; i++) {
                x[i] = scale[i / 2] == 1 ? x[i] : sw_quotient_rest(x[i], scale[i / 2], NULL);
            }
        }
    }
    return ok ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory");
}

/* The id of k in `set`: an equal key's, else k's own, added (a copy: k's buffer makes the
 * next key); -1 when out of memory. */
static int part_id(sw_key_set *set, int cap, const sw_key *k) {
    uint64_t h = sw_key_hash(k);
    int id = sw_key_find(set, k, h);
    if (id >= 0 || set->n == cap) {
        return id;
    }
    return sw_key_keep(set, k, h, set->n) ? set->n - 1 : -1;
}

/* ---- filling the distinct tables on several threads (parallel.c) ----
 * Each table is written by one thread only; the problem is read-only here.  The tables of
 * one class (scaled copies, above) are filled by one call where the transfers are counted
 * (sw_transfer_tables, counting: sw_transfer_table_placed), each on its own otherwise. */
typedef struct {
    int ntables;
    int *todo;        /* per distinct table: the edge that owns it */
    int *table_of;    /* per edge: its distinct table */
    double *unit;     /* per distinct table: prod_d g_d, its coordinates' common divisors */
    int nclasses;
    int *class_at;    /* per class: its first member in `members`; class_at[nclasses] = ntables */
    int *members;     /* distinct tables, class by class */
} edge_tables;

static void edge_tables_free(edge_tables *et) {
    free(et->todo);
    free(et->table_of);
    free(et->unit);
    free(et->class_at);
    free(et->members);
    *et = (edge_tables){0};
}

typedef struct {
    sw_problem *p;
    const edge_tables *et;
} table_work;

static sw_status fill_class(void *ctx, int c) {
    table_work *wk = ctx;
    sw_problem *p = wk->p;
    const edge_tables *et = wk->et;
    int first = et->class_at[c], n = et->class_at[c + 1] - first;
    sw_table_copy copies[SW_TABLE_COPIES];
    sw_status s = SW_OK;
    for (int q = 0; q < n && s == SW_OK;) {
        int lead = et->todo[et->members[first + q]];
        const sw_edge_table *e = &p->tables.edges[lead];
        int slot = p->edge_consumer_slot[lead];
        if (p->bound_tables) {
            s = sw_transfer_bound_table(p, e->dst, slot, p->bound_bw, e->time);
            q++;
            continue;
        }
        /* counted: the class's next few tables from this one's counts; else this one alone */
        int most = sw_transfer_counted(p, e->dst, slot) ? SW_TABLE_COPIES : 1, m = 0;
        for (; q < n && m < most; q++) {
            int table = et->members[first + q];
            const sw_edge_table *x = &p->tables.edges[et->todo[table]];
            copies[m++] = (sw_table_copy){x->time, x->bytes, et->unit[table]};
        }
        s = sw_transfer_tables(p, e->dst, slot, copies, m);
    }
    atomic_fetch_add(&p->progress_done, n);
    return s;
}

/* An edge's table is a function of its producer's part of the data and its consumer's; each
 * part is kept once, divided by its own divisors (ids into two key sets, and the divisors per
 * producer and per consumer part), so two edges share a table when both ids and both divisors
 * agree: exactly when the data, the parts put end to end, agree (each part's length follows
 * from its content).  Two distinct tables are of one class (scaled copies) when the ids agree
 * and the divisors do up to one factor per dimension.  Ops with equal node data
 * (sw_node_twins: from[i]) read their inputs alike, so a consumer's part is made once per such
 * group, slot and listing.  Writes the problem's edges (t->edges, p->edge_consumer_slot) and
 * nothing the node costs write: the two run at once. */
typedef struct {
    int producer, consumer;           /* part ids */
    int64_t ps[SW_MAX_RANK], cs[SW_MAX_RANK];   /* their divisors */
} table_parts;

/* The class of a table: its part ids and its divisors over their common ones, g[d] =
 * gcd(ps[d], cs[d]) (returned in g). */
static table_parts class_of(const table_parts *t, int64_t g[SW_MAX_RANK]) {
    table_parts c = {t->producer, t->consumer, {0}, {0}};
    for (int d = 0; d < SW_MAX_RANK; d++) {
        g[d] = gcd64(t->ps[d], t->cs[d]);
        c.ps[d] = t->ps[d] / g[d];
        c.cs[d] = t->cs[d] / g[d];
    }
    return c;
}

typedef struct {
    int id;
    double work;
} class_order;

static int more_work_first(const void *a, const void *b) {
    const class_order *x = a, *y = b;
    return x->work > y->work ? -1 : x->work < y->work ? 1 : x->id - y->id;
}

static sw_status find_edge_tables(sw_problem *p, const int *from, edge_tables *et) {
    sw_tables *t = &p->tables;
    int ne = 0, maxk = 1;
    for (int i = 0; i < p->nops; i++) {
        for (int k = 0; k < p->ops[i].ninputs; k++) {
            ne += p->ops[i].inputs[k].role == SW_ROLE_DATA;
        }
        for (int c = 0; c < p->ops[i].ncfg; c++) {
            maxk = p->ops[i].cfgs[c].nworkers > maxk ? p->ops[i].cfgs[c].nworkers : maxk;
        }
    }
    size_t cap = (size_t)(ne > 0 ? ne : 1), nops = (size_t)(p->nops > 0 ? p->nops : 1);
    t->edges = calloc(cap, sizeof *t->edges);
    p->edge_consumer_slot = calloc(cap, sizeof *p->edge_consumer_slot);
    sw_key_set producers = {0, calloc(nops, sizeof(sw_key)), calloc(nops, sizeof(uint64_t)), calloc(nops, sizeof(int))};
    sw_key_set consumers = {0, calloc(2 * cap, sizeof(sw_key)), calloc(2 * cap, sizeof(uint64_t)),
                            calloc(2 * cap, sizeof(int))};
    int *producer_of = malloc(sizeof(int) * nops);       /* op -> its producer part's id, -1: not yet */
    int64_t *producer_scale = malloc(sizeof(int64_t) * SW_MAX_RANK * nops);
    int *first_edge = malloc(sizeof(int) * nops);        /* op -> its first data edge */
    int *consumer_of = malloc(sizeof(int) * 2 * cap);    /* 2 edge + listing -> consumer part's id */
    int64_t *consumer_scale = malloc(sizeof(int64_t) * SW_MAX_RANK * 2 * cap);
    table_parts *parts = malloc(sizeof *parts * cap);    /* per distinct table */
    et->todo = malloc(sizeof(int) * cap);
    et->table_of = malloc(sizeof(int) * cap);
    et->unit = malloc(sizeof(double) * cap);
    et->class_at = malloc(sizeof(int) * (cap + 1));
    et->members = malloc(sizeof(int) * cap);
    int *todo = et->todo, *table_of = et->table_of;
    int *class_id = malloc(sizeof(int) * cap);           /* per distinct table */
    char *whole = malloc(cap);                           /* per distinct table: its counts exact in doubles */
    table_parts *klass = malloc(sizeof *klass * cap);    /* per distinct table: its class (class_of) */
    sw_box *regions = malloc(sizeof *regions * (size_t)maxk);
    char *used = malloc((size_t)maxk);
    sw_key key = {0}, at = {0};
    sw_status s = SW_OK;
    int ntables = 0;
    if (!t->edges || !p->edge_consumer_slot || !producers.key || !producers.hash || !producers.owner ||
        !consumers.key || !consumers.hash || !consumers.owner || !producer_of || !producer_scale || !first_edge ||
        !consumer_of || !consumer_scale || !parts || !todo || !table_of || !et->unit || !et->class_at ||
        !et->members || !class_id || !whole || !klass || !regions || !used) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < p->nops; i++) {
        producer_of[i] = -1;
    }
    for (size_t q = 0; q < 2 * cap; q++) {
        consumer_of[q] = -1;
    }
    for (int i = 0; i < p->nops && s == SW_OK; i++) {
        first_edge[i] = t->nedges;
        for (int k = 0, nth = 0; k < p->ops[i].ninputs && s == SW_OK; k++) {
            const sw_input *in = &p->ops[i].inputs[k];
            if (in->role != SW_ROLE_DATA) {
                continue;
            }
            sw_edge_table *e = &t->edges[t->nedges];
            e->src = in->producer;
            e->dst = i;
            p->edge_consumer_slot[t->nedges] = k;
            int64_t *ps = producer_scale + (size_t)SW_MAX_RANK * (size_t)in->producer;
            if (producer_of[in->producer] < 0) {
                producer_of[in->producer] = producer_data(p, in->producer, &key, ps) ? part_id(&producers, p->nops, &key)
                                                                                     : -1;
                if (producer_of[in->producer] < 0) {
                    s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
                    break;
                }
            }
            int listed = by_regions(p, i, k);
            size_t slot_at = 2 * (size_t)(first_edge[from[i]] + nth++) + (size_t)listed;   /* the group's first op's edge */
            int *cid = &consumer_of[slot_at];
            int64_t *cs = consumer_scale + (size_t)SW_MAX_RANK * slot_at;
            if (*cid < 0) {
                s = consumer_data(p, i, k, listed, &key, regions, used, &at, cs);
                *cid = s == SW_OK ? part_id(&consumers, (int)(2 * cap), &key) : -1;
                if (s == SW_OK && *cid < 0) {
                    s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
                }
                if (s != SW_OK) {
                    break;
                }
            }
            table_parts mine = {producer_of[in->producer], *cid, {0}, {0}};
            memcpy(mine.ps, ps, sizeof mine.ps);
            memcpy(mine.cs, cs, sizeof mine.cs);
            int twin = -1;
            for (int q = 0; q < ntables && twin < 0; q++) {
                if (!memcmp(&parts[q], &mine, sizeof mine)) {
                    twin = q;
                }
            }
            t->nedges++;
            if (twin >= 0) {   /* its arrays are the twin's, placed below */
                e->shared = 1;
                table_of[t->nedges - 1] = twin;
                continue;
            }
            parts[ntables] = mine;
            table_of[t->nedges - 1] = ntables;
            todo[ntables++] = t->nedges - 1;
        }
    }
    /* the classes: distinct tables whose parts agree up to a factor per dimension */
    int nclasses = 0;
    for (int q = 0; s == SW_OK && q < ntables; q++) {
        int64_t g[SW_MAX_RANK];
        klass[q] = class_of(&parts[q], g);
        et->unit[q] = 1.0;
        for (int d = 0; d < SW_MAX_RANK; d++) {
            et->unit[q] *= (double)g[d];
        }
        class_id[q] = -1;
        /* counts up to 2^53 are whole numbers in a double: copies only below that (a bound of
         * each table's: its consumer's most workers each reading the producer's whole output) */
        const sw_edge_table *e = &t->edges[todo[q]];
        double reach = 1.0;
        for (int d = 0; d < p->ops[e->src].out_rank; d++) {
            reach *= (double)p->ops[e->src].extent[d];
        }
        int most = 1;
        for (int c = 0; c < p->ops[e->dst].ncfg; c++) {
            most = p->ops[e->dst].cfgs[c].nworkers > most ? p->ops[e->dst].cfgs[c].nworkers : most;
        }
        whole[q] = reach * (double)most <= 9007199254740992.0;
        for (int r = 0; r < q && class_id[q] < 0 && whole[q]; r++) {
            if (!whole[r]) {
                continue;
            }
            if (!memcmp(&klass[r], &klass[q], sizeof klass[q])) {
                class_id[q] = class_id[r];
            }
        }
        class_id[q] = class_id[q] >= 0 ? class_id[q] : nclasses++;
    }
    /* the classes, largest first (their work estimated by their cells, a copy's at a sixth of a
     * counted one's), so that the threads filling them end together rather than one of them
     * on a last large class while the other waits */
    class_order *order = s == SW_OK ? calloc((size_t)(nclasses > 0 ? nclasses : 1), sizeof *order) : NULL;
    if (s == SW_OK && !order) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int q = 0; s == SW_OK && q < ntables; q++) {
        const sw_edge_table *e = &t->edges[todo[q]];
        double cells = (double)p->ops[e->src].ncfg * (double)p->ops[e->dst].ncfg;
        order[class_id[q]].id = class_id[q];
        order[class_id[q]].work += order[class_id[q]].work > 0 ? cells / 6 : cells;
    }
    if (s == SW_OK) {
        qsort(order, (size_t)nclasses, sizeof *order, more_work_first);
        int *rank = malloc(sizeof(int) * (size_t)(nclasses > 0 ? nclasses : 1));
        if (!rank) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
        for (int c = 0; s == SW_OK && c < nclasses; c++) {   /* class ids renumbered in that order */
            rank[order[c].id] = c;
        }
        for (int q = 0; s == SW_OK && q < ntables; q++) {
            class_id[q] = rank[class_id[q]];
        }
        free(rank);
    }
    free(order);
    if (s == SW_OK) {   /* members class by class, each class in table order (a counting sort) */
        for (int c = 0; c <= nclasses; c++) {
            et->class_at[c] = 0;
        }
        for (int q = 0; q < ntables; q++) {
            et->class_at[class_id[q] + 1]++;
        }
        for (int c = 0; c < nclasses; c++) {
            et->class_at[c + 1] += et->class_at[c];
        }
        int *fill = malloc(sizeof(int) * (size_t)(nclasses > 0 ? nclasses : 1));
        if (!fill) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory");
            goto done;
        }
        memcpy(fill, et->class_at, sizeof(int) * (size_t)nclasses);
        for (int q = 0; q < ntables; q++) {
            et->members[fill[class_id[q]]++] = q;
        }
        free(fill);
        et->nclasses = nclasses;
    }
done:
    et->ntables = ntables;
    sw_key_set_free(&producers);
    sw_key_set_free(&consumers);
    free(producer_of);
    free(producer_scale);
    free(first_edge);
    free(consumer_of);
    free(consumer_scale);
    free(parts);
    free(class_id);
    free(whole);
    free(klass);
    free(regions);
    free(used);
    free(key.v);
    free(at.v);
    return s;
}

/* The distinct tables' storage (one block), each edge's arrays in it, and the counts of
 * table_counts; the entries are filled by fill_class. */
static sw_status lay_out_tables(sw_problem *p, int with_bytes, const edge_tables *et) {
    sw_tables *t = &p->tables;
    int ntables = et->ntables;
    const int *todo = et->todo, *table_of = et->table_of;
    /* every distinct table (and its bytes) in one block: ~15 MB of new memory on Inception-v3
     * over 16 devices, on huge pages where the system has them (core/big_alloc.c) */
    size_t total = 0;
    for (int q = 0; q < ntables; q++) {
        const sw_edge_table *e = &t->edges[todo[q]];
        total += (size_t)p->ops[e->src].ncfg * (size_t)p->ops[e->dst].ncfg * (with_bytes ? 2 : 1);
    }
    t->storage = sw_big_alloc(sizeof(double) * (total > 0 ? total : 1), SW_HUGE_FROM);
    if (!t->storage) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for %zu transfer-table entries", total);
    }
    double *at = t->storage;
    for (int q = 0; q < ntables; q++) {
        sw_edge_table *e = &t->edges[todo[q]];
        size_t cells = (size_t)p->ops[e->src].ncfg * (size_t)p->ops[e->dst].ncfg;
        e->time = at;
        e->bytes = with_bytes ? at + cells : NULL;
        at += cells * (with_bytes ? 2 : 1);
    }
    for (int q = 0; q < t->nedges; q++) {
        if (t->edges[q].shared) {
            t->edges[q].time = t->edges[todo[table_of[q]]].time;
            t->edges[q].bytes = t->edges[todo[table_of[q]]].bytes;
        }
    }
    p->distinct_tables = ntables;
    p->counted_tables = 0;
    for (int c = 0; c < et->nclasses; c++) {   /* as fill_class fills them */
        int n = et->class_at[c + 1] - et->class_at[c];
        const sw_edge_table *e = &t->edges[todo[et->members[et->class_at[c]]]];
        int counted = !p->bound_tables && sw_transfer_counted(p, e->dst, p->edge_consumer_slot[todo[et->members[et->class_at[c]]]]);
        p->counted_tables += counted ? (n + SW_TABLE_COPIES - 1) / SW_TABLE_COPIES : n;
    }
    return SW_OK;
}

/* ---- the build as one pool of work (parallel.c) ----
 * Item 0 finds the distinct tables and their classes and lays out their storage; items 1 ..
 * nfirst compute the node costs of each group of ops with equal node data; every item after
 * those fills one class of tables (none past the last class), once item 0 is done: a thread
 * that takes one earlier waits for it.  The node costs and the tables read the problem and
 * write apart.  As two steps (the keys beside the node costs, then the tables), Inception-v3
 * over 16 devices waited ~2 ms between them: the keys took ~3.5 ms on one thread while the
 * node costs took ~4 ms on the other. */
typedef struct {
    sw_problem *p;
    const int *from;
    int with_bytes;
    const int *first;   /* node items: the first op of each group */
    int nfirst;
    edge_tables et;
    pthread_mutex_t lock;
    pthread_cond_t laid_out;
    int ready;   /* item 0: 0 running, 1 done, -1 failed */
} build_work;

static sw_status build_item(void *ctx, int i) {
    build_work *w = ctx;
    if (i == 0) {
        sw_status s = find_edge_tables(w->p, w->from, &w->et);
        if (s == SW_OK) {
            s = lay_out_tables(w->p, w->with_bytes, &w->et);
        }
        if (s == SW_OK) {   /* the tables' part of the progress: one per distinct table */
            atomic_store(&w->p->progress_total, w->nfirst + w->et.ntables);
        }
        pthread_mutex_lock(&w->lock);
        w->ready = s == SW_OK ? 1 : -1;
        pthread_cond_broadcast(&w->laid_out);
        pthread_mutex_unlock(&w->lock);
        return s;
    }
    if (i <= w->nfirst) {
        return sw_node_costs_of(w->p, w->first[i - 1]);
    }
    pthread_mutex_lock(&w->lock);
    while (w->ready == 0) {
        pthread_cond_wait(&w->laid_out, &w->lock);
    }
    int laid_out = w->ready > 0;
    pthread_mutex_unlock(&w->lock);
    int c = i - 1 - w->nfirst;
    if (!laid_out || c >= w->et.nclasses) {   /* (item 0's failure is its own to report) */
        return SW_OK;
    }
    table_work wk = {w->p, &w->et};
    return fill_class(&wk, c);
}

sw_status sw_problem_build_tables(sw_problem *p, int with_bytes) {
    sw_problem_reset_tables(p);
    if (p->bound_tables) {
        with_bytes = 0;
        p->bound_bw = sw_fastest_route(p);
    }
    int *from = malloc(sizeof(int) * (size_t)(p->nops > 0 ? p->nops : 1));   /* ops with equal node data */
    sw_status s = from ? sw_node_twins(p, from) : SW_FAIL(SW_ERR_NOMEM, "out of memory");
    build_work w = {p, from, with_bytes, NULL, 0, {0}, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    int *first = NULL;
    if (s == SW_OK) {
        s = sw_node_costs_start(p, from, &first, &w.nfirst);
    }
    if (s == SW_OK) {
        int edges = 0;   /* an upper bound of the classes */
        for (int i = 0; i < p->nops; i++) {
            for (int k = 0; k < p->ops[i].ninputs; k++) {
                edges += p->ops[i].inputs[k].role == SW_ROLE_DATA;
            }
        }
        w.first = first;
        atomic_store(&p->progress_done, 0);
        atomic_store(&p->progress_total, w.nfirst + edges);
        s = sw_parallel_for(1 + w.nfirst + edges, p->threads, build_item, &w);
    }
    if (s == SW_OK) {
        s = sw_node_costs_finish(p, from);
    }
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.laid_out);
    edge_tables_free(&w.et);
    free(first);
    free(from);
    if (s != SW_OK) {
        sw_problem_reset_tables(p);
        return s;
    }
    p->tables_built = 1;
    return SW_OK;
}
