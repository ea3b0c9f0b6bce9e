/* cost_memory.c -- per-configuration memory footprints for the memory-constrained search.
 *
 * What the search constrains: per device, the bytes the memory plan (memplan.c) holds
 * live when the backward pass starts: parameters, optimizer state and batchnorm running
 * statistics (live throughout), and every forward buffer the backward pass reads again
 * (activations, staging regions, batchnorm statistics of x).  That is a sum over ops
 * and edges of terms that depend on one op's configuration (node terms) or on a
 * producer's and a consumer's (edge terms: a staging region is not made when the
 * producer's shard on the consumer's device is exactly that region), so the search can
 * carry it like Eq. 1.  It is a lower bound of the memory plan's peak (those bytes are
 * all live at one moment), not the peak itself: the backward pass adds gradients while
 * freeing activations.  The search checks every plan it returns with the memory plan.
 *
 * The rules follow lower.c, buffer by buffer (tests compare the sums with the memory
 * plan's `kept` plus persistent bytes on random plans), each buffer at its kind's element size
 * in the problem's precision (sw_precision_element_bytes, the memory plan's sizes too; below,
 * as in float32):
 *   param        every worker, every weight slot it reads: its region (float32)
 *   momentum     per replica group of a weight slot (workers reading one box), on the
 *                group's first worker: the box times optimizer_state; with the ring model,
 *                on every member of a group of r > 1 whose box cuts into r chunks
 *                (sw_ring_chunk_dim: every replica updates its own copy); with zero, on every
 *                such member only the chunk it owns (sw_ring_owned_chunk of its rank among the
 *                group's workers, sw_ring_chunk's box) times optimizer_state
 *   running      batchnorm, every worker: the statistics box (2, C) (float32)
 *   stats        batchnorm, every worker that has a backward task: the (2, C) sums of x
 *                (float64)
 *   activation   every worker (a split reduction: the owner of each block), except an
 *                input op's, which is kept only as the staging buffer a consumer shares
 *   region       per consumer worker and data slot read: kept when the worker has a
 *                backward task (any, when a producer is not an input op: backward_data
 *                of that slot reads it; for an input op's data, backward_weight of a
 *                non-bias weight, or backward_data of another slot); the edge's base
 *                counts it, and `shared` lists the (producer config, consumer config,
 *                device) where it is the producer's own shard instead (no bytes of its
 *                own; not for input producers, whose activation it then is).
 * An input op's shard shared by two consumers on one device is counted twice (the
 * additive model cannot see the sharing across two edges); the zoo has none.
 */
#include <stdatomic.h>  /* atomic_int */
#include <stdlib.h>  /* calloc, malloc, realloc, free */
#include <string.h>  /* memcmp, memcpy, memset */

#include "internal.h"
#include "core/sort_typed.h"

/* Bytes of one element of a buffer of kind `kind` in p's precision. */
static double elem(const sw_problem *p, sw_buffer_kind kind) {
    return (double)sw_precision_element_bytes(p->precision, kind);
}

static int role_slot(const sw_op *o, sw_role role) {
    for (int k = 0; k < o->ninputs; k++) {
        if (o->inputs[k].role == role) {
            return k;
        }
    }
    return -1;
}

/* Does worker w of op v (configuration c) run a backward task that reads its data regions? */
static int keeps_regions(const sw_problem *p, const int8_t *kind, int v, const sw_config *c, int w) {
    const sw_op *o = &p->ops[v];
    if (kind[v] == SW_OPKIND_INPUT) {
        return 0;
    }
    sw_box reg;
    for (int k = 0; k < o->ninputs; k++) {
        if (!sw_worker_region(o, c, w, k, &reg)) {
            continue;
        }
        if (o->inputs[k].role == SW_ROLE_DATA && kind[o->inputs[k].producer] != SW_OPKIND_INPUT) {
            return 1;   /* backward_data of this slot */
        }
        if (o->inputs[k].role == SW_ROLE_WEIGHT && !o->inputs[k].bias) {
            return 1;   /* backward_weight of a weight (not of a bias alone) */
        }
    }
    return 0;
}

/* A worker's region of one weight slot, tagged with the worker: sorting them groups the
 * replicas of each box (workers reading the same box), lowest worker first. */
typedef struct {
    sw_box box;
    int w;
} tagged_box;

static int tagged_cmp(const void *a, const void *b) {
    const tagged_box *x = a, *y = b;
    if (x->box.rank != y->box.rank) {
        return x->box.rank < y->box.rank ? -1 : 1;
    }
    for (int i = 0; i < x->box.rank; i++) {
        if (x->box.lo[i] != y->box.lo[i]) {
            return x->box.lo[i] < y->box.lo[i] ? -1 : 1;
        }
        if (x->box.hi[i] != y->box.hi[i]) {
            return x->box.hi[i] < y->box.hi[i] ? -1 : 1;
        }
    }
    return (x->w > y->w) - (x->w < y->w);
}

/* Scratch for node_term, of nworkers entries each. */
typedef struct {
    tagged_box *tagged;
    sw_box *boxes;   /* the blocks' boxes, then a weight slot's regions */
    char *used;
} node_scratch;

/* Node term of op v under configuration ci: row[ndev]. */
static sw_status node_term(const sw_problem *p, const int8_t *kind, int v, int ci, double *row, node_scratch *ns) {
    const sw_op *o = &p->ops[v];
    const sw_config *c = &o->cfgs[ci];
    const int32_t *devs = p->dev_pool + c->dev_offset;
    tagged_box *scratch = ns->tagged;
    sw_box reg;
    int stat = role_slot(o, SW_ROLE_STAT);
    if (kind[v] != SW_OPKIND_INPUT) {
        sw_config_blocks(o, c, ns->boxes);   /* worker w's output box: its block's, w / rdeg */
    }
    for (int w = 0; w < c->nworkers; w++) {
        int32_t d = devs[w];
        if (kind[v] != SW_OPKIND_INPUT && (kind[v] == SW_OPKIND_BATCHNORM || sw_is_owner(c, w))) {
            row[d] += elem(p, SW_BUF_ACTIVATION) * (double)sw_box_volume(&ns->boxes[w / c->rdeg]);
        }
        if (kind[v] == SW_OPKIND_BATCHNORM && stat >= 0 && sw_worker_region(o, c, w, stat, &reg)) {
            double n = (double)sw_box_volume(&reg);
            row[d] += elem(p, SW_BUF_RUNNING) * n;
            row[d] += keeps_regions(p, kind, v, c, w) ? elem(p, SW_BUF_STATS) * n : 0.0;
        }
    }
    for (int k = 0; k < o->ninputs; k++) {
        if (o->inputs[k].role != SW_ROLE_WEIGHT) {
            continue;
        }
        int n = 0;
        SW_TRY(sw_config_regions(o, c, k, ns->boxes, ns->used));   /* every worker's region at once */
        for (int w = 0; w < c->nworkers; w++) {
            if (ns->used[w]) {
                scratch[n] = (tagged_box){ns->boxes[w], w};
                n++;
            }
        }
        qsort(scratch, (size_t)n, sizeof *scratch, tagged_cmp);
        for (int g = 0; g < n;) {   /* one group of replicas: scratch[g .. end), in worker order */
            int end = g + 1;
            while (end < n && sw_box_equal(&scratch[end].box, &scratch[g].box)) {
                end++;
            }
            int replicas = end - g;
            double vol = (double)sw_box_volume(&scratch[g].box);
            /* the first worker reading this box keeps the optimizer state; with the ring
             * all-reduce every replica updates its own copy with its own state, and with zero
             * only the chunk it owns (its place in the ring: the lowering's members, in worker order) */
            int rings = sw_sync_rings(p->sync_model) && replicas > 1 &&
                        sw_ring_chunk_dim(&scratch[g].box, replicas) >= 0;
            for (int i = g; i < end; i++) {
                int32_t d = devs[scratch[i].w];
                row[d] += elem(p, SW_BUF_PARAM) * vol;
                double state = vol;
                if (rings && p->sync_model == SW_SYNC_ZERO) {
                    sw_box chunk;
                    sw_ring_chunk(&scratch[g].box, replicas, sw_ring_owned_chunk(i - g, replicas), &chunk);
                    state = (double)sw_box_volume(&chunk);
                }
                if (i == g || rings) {
                    row[d] += elem(p, SW_BUF_MOMENTUM) * (double)p->optimizer_state * state;
                }
            }
            g = end;
        }
    }
    return SW_OK;
}

/* ---- the row store: each distinct row of bytes per device kept once ---- */

static uint64_t row_hash(const double *row, int ndev) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < ndev; i++) {   /* FNV-1a over 64-bit words, folded: a byte at a time, a
                                        * 1,024-device row took a tenth of the build */
        uint64_t x;
        memcpy(&x, row + i, sizeof x);
        h = (h ^ x ^ (x >> 29)) * 1099511628211ull;
    }
    return h ^ (h >> 32);
}

static uint64_t row_hash_of(const void *mt, int32_t r) {
    const sw_memory_tables *t = mt;
    return row_hash(t->rows + (size_t)r * t->ndev, t->ndev);
}

/* Double the index (at half load) and put every row back. */
static sw_status grow_index(sw_memory_tables *mt) {
    int32_t n = mt->nslots ? mt->nslots * 2 : 1024;
    int32_t *slot = malloc(sizeof *slot * (size_t)n);
    if (!slot || n < mt->nslots) {
        free(slot);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for memory tables");
    }
    sw_index_fill(slot, n, mt->nrows, row_hash_of, mt);
    free(mt->row_slot);
    mt->row_slot = slot;
    mt->nslots = n;
    return SW_OK;
}

/* The id of `row` (ndev bytes per device) in the store, added if new. */
static sw_status row_id(sw_memory_tables *mt, const double *row, int32_t *id) {
    size_t width = sizeof(double) * (size_t)mt->ndev;
    if (2 * (int64_t)(mt->nrows + 1) > mt->nslots) {
        sw_status s = grow_index(mt);
        if (s != SW_OK) {
            return s;
        }
    }
    uint64_t q = row_hash(row, mt->ndev) & (uint64_t)(mt->nslots - 1);
    for (; mt->row_slot[q] >= 0; q = (q + 1) & (uint64_t)(mt->nslots - 1)) {
        if (!memcmp(mt->rows + (size_t)mt->row_slot[q] * mt->ndev, row, width)) {
            *id = mt->row_slot[q];
            return SW_OK;
        }
    }
    if (mt->nrows == mt->cap_rows) {
        int32_t cap = mt->cap_rows ? mt->cap_rows * 2 : 256;
        double *n = cap > mt->cap_rows ? realloc(mt->rows, width * (size_t)cap) : NULL;
        if (!n) {
            return SW_FAIL(SW_ERR_NOMEM, "out of memory for memory tables");
        }
        mt->rows = n;
        mt->cap_rows = cap;
    }
    memcpy(mt->rows + (size_t)mt->nrows * mt->ndev, row, width);
    mt->row_slot[q] = mt->nrows;
    *id = mt->nrows++;
    return SW_OK;
}

/* One edge's savings as they are found (merged into the tables' list in edge order). */
typedef struct {
    sw_memory_saving *items;
    int64_t n, cap;
} saving_list;

/* Room for `need` savings in *items (capacity *cap), doubling. */
static sw_status saving_room(sw_memory_saving **items, int64_t *cap, int64_t need) {
    if (need <= *cap) {
        return SW_OK;
    }
    int64_t n = *cap ? *cap : 256;
    while (n < need) {
        n *= 2;
    }
    sw_memory_saving *grown = realloc(*items, sizeof *grown * (size_t)n);
    if (!grown) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for memory tables");
    }
    *items = grown;
    *cap = n;
    return SW_OK;
}

static sw_status push_saving(saving_list *l, int32_t ci, int32_t cj, int32_t dev, double bytes) {
    SW_TRY(saving_room(&l->items, &l->cap, l->n + 1));
    l->items[l->n++] = (sw_memory_saving){ci, cj, dev, bytes};
    return SW_OK;
}

/* A producer's output block, keyed for the join below: its box hash and configuration (the
 * device is the bucket it sits in); `at` indexes its box in a separate array (the keys sort
 * and search compactly: a 1,024-device machine's edge holds a quarter of a million blocks). */
typedef struct {
    int32_t ci;
    uint64_t hash;
    int64_t at;
} owned_block;

static uint64_t box_hash(const sw_box *b) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)b->rank;
    for (int d = 0; d < b->rank; d++) {   /* FNV-style mixing of every bound */
        h = (h ^ (uint64_t)b->lo[d]) * 1099511628211ull;
        h = (h ^ (uint64_t)b->hi[d]) * 1099511628211ull;
    }
    return h;
}

static int owned_block_cmp(const void *pa, const void *pb) {
    const owned_block *a = pa, *b = pb;
    if (a->hash != b->hash) {
        return a->hash < b->hash ? -1 : 1;
    }
    return (a->ci > b->ci) - (a->ci < b->ci);
}

static inline int owned_block_before(const owned_block *a, const owned_block *b) {
    return a->hash != b->hash ? a->hash < b->hash : a->ci < b->ci;
}

SW_DEFINE_SORT(sort_blocks, owned_block, owned_block_before, owned_block_cmp)

/* A kept consumer region, for the join: its box hash and its pair (configuration, worker). */
typedef struct {
    uint64_t hash;
    int64_t pair;
} kept_region;

/* The join's buffers, one set per thread, kept from edge to edge and grown as needed: allocated
 * per edge, a large machine's (tens of megabytes of boxes an edge on 1,024 devices) were fresh
 * pages the system zeroed every time, a quarter of the build. */
typedef struct {
    sw_box *regs;             /* per consumer (configuration, worker) pair: its region ... */
    char *kept;               /* ... whether it is kept ... */
    int32_t *pair_cj, *pair_dev;   /* ... its configuration and device */
    kept_region *kept_by_dev;   /* the pairs bucketed by device (pair -1: not kept) */
    int32_t *block_dev;       /* per producer block, as made: its device */
    sw_box *boxes;            /* per producer block, as made: its box */
    owned_block *blocks;      /* the blocks bucketed by device, each bucket sorted by (hash, ci); `at`
                                 indexes boxes */
    int32_t *place;           /* where each item goes when bucketed (max(pairs, blocks)) */
    size_t *dev_start, *pair_start;   /* blocks (pairs) on device d: [start[d], start[d + 1]) */
    size_t pairs, nblocks;   /* room for this many of each */
} join_scratch;

static void join_scratch_free(join_scratch *j) {
    free(j->regs);
    free(j->kept);
    free(j->pair_cj);
    free(j->pair_dev);
    free(j->kept_by_dev);
    free(j->boxes);
    free(j->block_dev);
    free(j->blocks);
    free(j->place);
    free(j->dev_start);
    free(j->pair_start);
    *j = (join_scratch){0};
}

/* Room for npairs consumer (configuration, worker) pairs and nblocks producer blocks on ndev devices. */
static sw_status join_scratch_room(join_scratch *j, size_t npairs, size_t nblocks, int ndev) {
    if (!j->dev_start) {
        j->dev_start = malloc(sizeof *j->dev_start * ((size_t)ndev + 2));
        j->pair_start = malloc(sizeof *j->pair_start * ((size_t)ndev + 2));
    }
    int grown = 0;
    if (npairs + 1 > j->pairs) {
        free(j->regs);
        free(j->kept);
        free(j->pair_cj);
        free(j->pair_dev);
        free(j->kept_by_dev);
        j->regs = malloc(sizeof *j->regs * (npairs + 1));
        j->kept = malloc(npairs + 1);
        j->pair_cj = malloc(sizeof *j->pair_cj * (npairs + 1));
        j->pair_dev = malloc(sizeof *j->pair_dev * (npairs + 1));
        j->kept_by_dev = malloc(sizeof *j->kept_by_dev * (npairs + 1));
        j->pairs = j->regs && j->kept && j->pair_cj && j->pair_dev && j->kept_by_dev ? npairs + 1 : 0;
        grown = 1;
    }
    if (nblocks + 1 > j->nblocks) {
        free(j->boxes);
        free(j->block_dev);
        free(j->blocks);
        j->boxes = malloc(sizeof *j->boxes * (nblocks + 1));
        j->block_dev = malloc(sizeof *j->block_dev * (nblocks + 1));
        j->blocks = malloc(sizeof *j->blocks * (nblocks + 1));
        j->nblocks = j->boxes && j->block_dev && j->blocks ? nblocks + 1 : 0;
        grown = 1;
    }
    if (grown) {
        free(j->place);
        j->place = malloc(sizeof *j->place * ((j->pairs > j->nblocks ? j->pairs : j->nblocks) + 1));
    }
    if (!j->dev_start || !j->pair_start || !j->place || npairs + 1 > j->pairs || nblocks + 1 > j->nblocks) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for memory tables");
    }
    return SW_OK;
}

/* start[0..ndev] from the device of each of n items (dev[i]), and where[i]: item i's place when
 * they are put in device order, stable (a counting sort; start[ndev + 1] is scratch). */
static void bucket_by_device(const int32_t *dev, size_t n, int ndev, size_t *start, int32_t *where) {
    memset(start, 0, sizeof *start * ((size_t)ndev + 2));
    for (size_t i = 0; i < n; i++) {
        start[dev[i] + 1]++;
    }
    for (int d = 0; d < ndev; d++) {
        start[d + 1] += start[d];
    }
    for (size_t i = 0; i < n; i++) {   /* start[d] moves up to start[d + 1] and is put back below */
        where[i] = (int32_t)start[dev[i]]++;
    }
    for (int d = ndev; d > 0; d--) {
        start[d] = start[d - 1];
    }
    start[0] = 0;
}

/* Edge e = (u -> v, slot): the consumer's kept staging regions per configuration of v, and
 * the (cu, cv, device) where a region is the producer's shard instead.  Each consumer worker's
 * region and whether it is kept do not depend on the producer's configuration, so they are
 * computed once per edge (kept[q] for the q-th (configuration, worker) pair, its region in
 * regs[q]).  The pairs where a region equals the producer's block on the same device are found
 * by a join, not by comparing every producer configuration with every consumer worker: device
 * by device, the producer blocks there (one per owner) sorted by box hash, and each kept region
 * there looked up and compared exactly.  Both sides are bucketed by device first (a counting
 * sort), so that each device's join runs on a few hundred records in cache: one sort and
 * search over the whole edge's blocks (a 1,024-device machine's quarter of a million) missed
 * the cache at every step, half the build.  Savings are listed per edge in no particular order
 * (they are whole bytes: their sums do not depend on it).  `row`: ndev doubles of scratch.
 *
 * Edge e's terms: its base row ids (in `rows`, the item's own store) into base[ncfg of v],
 * its savings into `out`. */
static sw_status edge_terms(const sw_problem *p, const int8_t *kind, const sw_memory_tables *mt, int e,
                           sw_memory_tables *rows, int32_t *base, saving_list *out, double *row, join_scratch *js) {
    int u = mt->edge_src[e], v = mt->edge_dst[e], slot = mt->edge_slot[e], ndev = mt->ndev;
    const sw_op *ou = &p->ops[u], *ov = &p->ops[v];
    int from_input = kind[u] == SW_OPKIND_INPUT;
    size_t npairs = 0, nblocks = 0;
    for (int cj = 0; cj < ov->ncfg; cj++) {
        npairs += (size_t)ov->cfgs[cj].nworkers;
    }
    for (int ci = 0; !from_input && ci < ou->ncfg; ci++) {
        nblocks += (size_t)(ou->cfgs[ci].nworkers / ou->cfgs[ci].rdeg);
    }
    SW_TRY(join_scratch_room(js, npairs, nblocks, ndev));
    sw_box *regs = js->regs, *boxes = js->boxes;
    char *kept = js->kept;
    size_t q = 0;
    sw_status s = SW_OK;
    /* reading a region of a producer that is not an input op, a worker of a consumer that is not
     * one keeps its regions (keeps_regions finds this slot, if not an earlier one): not asked */
    int reads_kept = !from_input && kind[v] != SW_OPKIND_INPUT;
    for (int cj = 0; cj < ov->ncfg && s == SW_OK; cj++) {
        const sw_config *c = &ov->cfgs[cj];
        memset(row, 0, sizeof *row * (size_t)ndev);
        /* every worker's region at once (sw_worker_region's boxes, O(rank) a worker), kept[q] first
         * whether it reads one */
        if ((s = sw_config_regions(ov, c, slot, regs + q, kept + q)) != SW_OK) {
            break;
        }
        for (int w = 0; w < c->nworkers; w++, q++) {
            kept[q] = (char)(kept[q] && (reads_kept || keeps_regions(p, kind, v, c, w)));
            js->pair_cj[q] = cj;
            js->pair_dev[q] = p->dev_pool[c->dev_offset + w];
            if (kept[q]) {
                row[js->pair_dev[q]] += elem(p, SW_BUF_REGION) * (double)sw_box_volume(&regs[q]);
            }
        }
        s = row_id(rows, row, &base[cj]);
    }
    if (from_input || nblocks == 0 || s != SW_OK) {
        return s;
    }
    /* the producer's blocks, bucketed by device (boxes[b] stays block b's, in the order made) */
    owned_block *blocks = js->blocks;
    size_t nb = 0;
    for (int ci = 0; ci < ou->ncfg; ci++) {
        const sw_config *cu = &ou->cfgs[ci];
        sw_config_blocks(ou, cu, boxes + nb);
        for (int w = 0; w < cu->nworkers; w += cu->rdeg, nb++) {   /* owners of output blocks (one per device) */
            js->block_dev[nb] = p->dev_pool[cu->dev_offset + w];
        }
    }
    bucket_by_device(js->block_dev, nb, ndev, js->dev_start, js->place);
    nb = 0;
    for (int ci = 0; ci < ou->ncfg; ci++) {
        const sw_config *cu = &ou->cfgs[ci];
        for (int w = 0; w < cu->nworkers; w += cu->rdeg, nb++) {
            blocks[js->place[nb]] = (owned_block){ci, box_hash(&boxes[nb]), (int64_t)nb};
        }
    }
    /* the consumer's pairs (a kept one's region hash), bucketed by device */
    bucket_by_device(js->pair_dev, npairs, ndev, js->pair_start, js->place);
    for (size_t k = 0; k < npairs; k++) {
        kept_region r = {0, -1};
        if (kept[k]) {
            r = (kept_region){box_hash(&regs[k]), (int64_t)k};
        }
        js->kept_by_dev[js->place[k]] = r;
    }
    for (int d = 0; d < ndev && s == SW_OK; d++) {
        size_t b0 = js->dev_start[d], b1 = js->dev_start[d + 1];
        if (b0 == b1) {
            continue;
        }
        sort_blocks(blocks + b0, b1 - b0);
        for (size_t i = js->pair_start[d]; i < js->pair_start[d + 1] && s == SW_OK; i++) {
            if (js->kept_by_dev[i].pair < 0) {
                continue;   /* not kept */
            }
            size_t pq = (size_t)js->kept_by_dev[i].pair;
            uint64_t h = js->kept_by_dev[i].hash;
            size_t lo = b0, hi = b1;   /* the first block on d with hash >= h */
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (blocks[mid].hash < h) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            for (size_t k = lo; k < b1 && blocks[k].hash == h && s == SW_OK; k++) {
                if (sw_box_equal(&boxes[blocks[k].at], &regs[pq])) {
                    double bytes = elem(p, SW_BUF_REGION) * (double)sw_box_volume(&regs[pq]);
                    s = push_saving(out, blocks[k].ci, js->pair_cj[pq], d, bytes);
                }
            }
        }
    }
    return s;
}

/* Savings by producer configuration, then consumer configuration, then device: the search
 * groups them by their place in the edge's (ci, cj) table (search_memory.Tables), and edges
 * copied from this one keep the order (bytes last: one order, whatever the sort). */
static int saving_cmp(const void *a, const void *b) {
    const sw_memory_saving *x = a, *y = b;
    if (x->ci != y->ci) {
        return x->ci < y->ci ? -1 : 1;
    }
    if (x->cj != y->cj) {
        return x->cj < y->cj ? -1 : 1;
    }
    if (x->dev != y->dev) {
        return x->dev < y->dev ? -1 : 1;
    }
    return (x->bytes > y->bytes) - (x->bytes < y->bytes);
}

/* l's savings in saving_cmp's order.  The join lists them device after device, at most one a
 * (ci, cj, device) (a configuration has one worker and one block owner on a device), so a stable
 * counting sort by (ci, cj) puts them in that order, in time linear in the savings and the
 * edge's table (ncu x ncv): qsort took a tenth of the 1,024-GPU Llama's memory tables.  Out of
 * memory for the counts: qsort, the same order. */
static void sort_savings(saving_list *l, int ncu, int ncv) {
    size_t cells = (size_t)ncu * (size_t)ncv;
    int64_t *start = calloc(cells + 1, sizeof *start);
    sw_memory_saving *out = malloc(sizeof *out * (size_t)l->n);
    if (!start || !out) {
        free(start);
        free(out);
        qsort(l->items, (size_t)l->n, sizeof *l->items, saving_cmp);
        return;
    }
    for (int64_t i = 0; i < l->n; i++) {
        start[(size_t)l->items[i].ci * (size_t)ncv + (size_t)l->items[i].cj + 1]++;
    }
    for (size_t q = 0; q < cells; q++) {
        start[q + 1] += start[q];
    }
    for (int64_t i = 0; i < l->n; i++) {
        out[start[(size_t)l->items[i].ci * (size_t)ncv + (size_t)l->items[i].cj]++] = l->items[i];
    }
    free(start);
    free(l->items);
    l->items = out;
    l->cap = l->n;
}

/* Does op v's memory read its producers alike with op t's: equal kind, and per data slot a
 * graph input as producer on both or on neither (keeps_regions reads that). */
static int same_memory_reads(const sw_problem *p, const int8_t *kind, int v, int t) {
    const sw_op *a = &p->ops[v], *b = &p->ops[t];
    if (kind[v] != kind[t] || a->ninputs != b->ninputs) {
        return 0;
    }
    for (int k = 0; k < a->ninputs; k++) {
        if (a->inputs[k].role == SW_ROLE_DATA &&
            (kind[a->inputs[k].producer] == SW_OPKIND_INPUT) != (kind[b->inputs[k].producer] == SW_OPKIND_INPUT)) {
            return 0;
        }
    }
    return 1;
}

/* Edge e's terms when an earlier edge d joins ops of the same data (twins, the same slot): its
 * base rows copied, and its savings those of d's first twin (edge_copy_of), not listed again.
 * A transformer's layers are such twins. */
static void copy_edge_terms(const sw_problem *p, sw_memory_tables *mt, int e, int d) {
    memcpy(mt->edge_base[e], mt->edge_base[d], sizeof(int32_t) * (size_t)p->ops[mt->edge_dst[e]].ncfg);
    mt->edge_copy_of[e] = mt->edge_copy_of[d] >= 0 ? mt->edge_copy_of[d] : d;
}

/* ---- the terms, made on several threads ----
 * The work comes in items, in this order: every op's node terms, then every edge's terms.  An
 * op that is another's twin (from[v] != v) and an edge between twins copy their twin's terms;
 * every other item is made on some thread into its own row store and saving list, and then,
 * in item order on one thread, its rows join the tables' store and its savings the tables'
 * list: the row ids, the rows' order and the savings' order are the ones one thread makes.
 * Items are taken a batch at a time, so that only a batch's own stores are held at once. */
#define ITEMS_PER_THREAD 4   /* a batch: this many items a thread */

typedef struct {
    sw_memory_tables rows;   /* the item's distinct rows (only the row store's fields used) */
    saving_list saved;       /* an edge's savings, sorted (saving_cmp) */
} table_item;

typedef struct {
    const sw_problem *p;
    const int8_t *kind;
    sw_memory_tables *mt;
    const int *from;         /* sw_node_twins, kinds checked */
    const int *edge_twin;    /* per edge: an earlier edge between the same ops' twins on the same slot, or -1 */
    const int *work;         /* the items made (not twins'), in order */
    int first;               /* the batch's first: work[first] */
    table_item *items;       /* the batch's */
    join_scratch *pool;      /* one a thread, taken by a free flag */
    atomic_int *taken;
    int npool;
} table_batch;

static int saving_cmp(const void *a, const void *b);

/* The terms of item work[first + i] (not a twin's), made into its own store and list. */
static sw_status make_item(void *ctx, int i) {
    table_batch *tb = ctx;
    const sw_problem *p = tb->p;
    sw_memory_tables *mt = tb->mt;
    int q = tb->work[tb->first + i];
    table_item *it = &tb->items[i];
    it->rows.ndev = p->ndev;
    int v = q < p->nops ? q : -1, e = q < p->nops ? -1 : q - p->nops;
    double *row = malloc(sizeof *row * (size_t)p->ndev);
    if (!row) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for memory tables");
    }
    sw_status s = SW_OK;
    if (v >= 0) {
        int most = 1;
        for (int ci = 0; ci < p->ops[v].ncfg; ci++) {
            most = p->ops[v].cfgs[ci].nworkers > most ? p->ops[v].cfgs[ci].nworkers : most;
        }
        node_scratch ns = {malloc(sizeof *ns.tagged * (size_t)most), malloc(sizeof *ns.boxes * (size_t)most),
                           malloc((size_t)most)};
        s = ns.tagged && ns.boxes && ns.used ? SW_OK : SW_FAIL(SW_ERR_NOMEM, "out of memory for memory tables");
        for (int ci = 0; ci < p->ops[v].ncfg && s == SW_OK; ci++) {
            memset(row, 0, sizeof *row * (size_t)p->ndev);
            if ((s = node_term(p, tb->kind, v, ci, row, &ns)) == SW_OK) {
                s = row_id(&it->rows, row, &mt->node[v][ci]);
            }
        }
        free(ns.tagged);
        free(ns.boxes);
        free(ns.used);
    } else {
        int slot = -1;   /* a free join scratch (as many as threads: one is) */
        for (int k = 0; slot < 0; k = (k + 1) % tb->npool) {
            int expected = 0;
            if (atomic_compare_exchange_strong(&tb->taken[k], &expected, 1)) {
                slot = k;
            }
        }
        s = edge_terms(p, tb->kind, mt, e, &it->rows, mt->edge_base[e], &it->saved, row, &tb->pool[slot]);
        atomic_store(&tb->taken[slot], 0);
        if (s == SW_OK && it->saved.n > 1) {
            sort_savings(&it->saved, p->ops[mt->edge_src[e]].ncfg, p->ops[mt->edge_dst[e]].ncfg);
        }
    }
    free(row);
    return s;
}

/* Item q into the tables: its rows into the store (its ids renumbered), its savings onto the
 * list; a twin's item (it: NULL) copies its twin's. */
static sw_status merge_item(const sw_problem *p, sw_memory_tables *mt, const int *from, const int *edge_twin, int q,
                            table_item *it, int64_t *cap) {
    int v = q < p->nops ? q : -1, e = q < p->nops ? -1 : q - p->nops;
    if (v >= 0 && from[v] != v) {
        memcpy(mt->node[v], mt->node[from[v]], sizeof **mt->node * (size_t)p->ops[v].ncfg);
        return SW_OK;
    }
    if (e >= 0 && edge_twin[e] >= 0) {
        copy_edge_terms(p, mt, e, edge_twin[e]);
        mt->shared_ptr[e + 1] = mt->nshared;
        return SW_OK;
    }
    int32_t *ids = v >= 0 ? mt->node[v] : mt->edge_base[e];
    int n = v >= 0 ? p->ops[v].ncfg : p->ops[mt->edge_dst[e]].ncfg;
    int32_t *map = malloc(sizeof *map * ((size_t)it->rows.nrows + 1));
    if (!map) {
        return SW_FAIL(SW_ERR_NOMEM, "out of memory for memory tables");
    }
    sw_status s = SW_OK;
    for (int32_t r = 0; r < it->rows.nrows && s == SW_OK; r++) {   /* first seen first, as one thread adds them */
        s = row_id(mt, it->rows.rows + (size_t)r * mt->ndev, &map[r]);
    }
    for (int c = 0; c < n && s == SW_OK; c++) {
        ids[c] = map[ids[c]];
    }
    free(map);
    if (s == SW_OK && e >= 0) {
        SW_TRY(saving_room(&mt->shared, cap, mt->nshared + it->saved.n));
        if (it->saved.n > 0) {
            memcpy(mt->shared + mt->nshared, it->saved.items, sizeof *it->saved.items * (size_t)it->saved.n);
        }
        mt->nshared += it->saved.n;
        mt->shared_ptr[e + 1] = mt->nshared;
    }
    return s;
}

static void table_item_free(table_item *it) {
    free(it->rows.rows);
    free(it->rows.row_slot);
    free(it->saved.items);
    *it = (table_item){0};
}

sw_status sw_memory_tables_build(const sw_problem *p, const int8_t *kind, sw_memory_tables *mt) {
    memset(mt, 0, sizeof *mt);
    if (p->nops < 1 || p->ndev < 1) {
        return SW_FAIL(SW_ERR_VALUE, "memory tables of a problem of %d ops on %d devices", p->nops, p->ndev);
    }
    mt->ndev = p->ndev;
    mt->nops = p->nops;
    int ndata = 0;
    for (int v = 0; v < p->nops; v++) {
        if (p->ops[v].ncfg < 1) {
            return SW_FAIL(SW_ERR_VALUE, "op %d has no configurations: enumerate them first", v);
        }
        for (int k = 0; k < p->ops[v].ninputs; k++) {
            ndata += p->ops[v].inputs[k].role == SW_ROLE_DATA;
        }
    }
    size_t nops = (size_t)p->nops, ne = (size_t)ndata + 1;
    /* ops whose terms are another's (sw_node_twins: equal shapes, index maps, configurations
     * and devices; here also equal kinds and input producers): computed once */
    int *from = malloc(sizeof *from * nops);
    int *edge_twin = malloc(sizeof *edge_twin * ne);
    int *work = malloc(sizeof *work * (nops + ne));
    int threads = p->threads < 1 ? 1 : p->threads;
    int batch = threads * ITEMS_PER_THREAD;
    table_item *items = calloc((size_t)batch, sizeof *items);
    join_scratch *pool = calloc((size_t)threads, sizeof *pool);
    atomic_int *taken = calloc((size_t)threads, sizeof *taken);
    mt->node = calloc(nops, sizeof *mt->node);
    mt->edge_src = calloc(ne, sizeof *mt->edge_src);
    mt->edge_dst = calloc(ne, sizeof *mt->edge_dst);
    mt->edge_slot = calloc(ne, sizeof *mt->edge_slot);
    mt->edge_base = calloc(ne, sizeof *mt->edge_base);
    mt->shared_ptr = calloc(ne + 1, sizeof *mt->shared_ptr);
    mt->edge_copy_of = malloc(sizeof *mt->edge_copy_of * ne);
    sw_status s = SW_OK;
    if (!from || !edge_twin || !work || !items || !pool || !taken || !mt->node || !mt->edge_src || !mt->edge_dst ||
        !mt->edge_slot || !mt->edge_base || !mt->shared_ptr || !mt->edge_copy_of) {
        s = SW_FAIL(SW_ERR_NOMEM, "out of memory for memory tables");
        goto done;
    }
    for (int k = 0; k < threads; k++) {
        atomic_init(&taken[k], 0);
    }
    s = sw_node_twins(p, from);
    for (int v = 0; v < p->nops && s == SW_OK; v++) {
        if (from[v] != v && !same_memory_reads(p, kind, v, from[v])) {
            from[v] = v;
        }
    }
    for (int v = 0; v < p->nops && s == SW_OK; v++) {
        mt->node[v] = malloc(sizeof **mt->node * (size_t)p->ops[v].ncfg);
        if (!mt->node[v]) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory for memory tables");
            break;
        }
        for (int k = 0; k < p->ops[v].ninputs; k++) {
            if (p->ops[v].inputs[k].role == SW_ROLE_DATA) {
                int e = mt->nedges++;
                mt->edge_src[e] = p->ops[v].inputs[k].producer;
                mt->edge_dst[e] = v;
                mt->edge_slot[e] = k;
            }
        }
    }
    for (int e = 0; e < mt->nedges && s == SW_OK; e++) {
        mt->edge_base[e] = malloc(sizeof **mt->edge_base * (size_t)p->ops[mt->edge_dst[e]].ncfg);
        if (!mt->edge_base[e]) {
            s = SW_FAIL(SW_ERR_NOMEM, "out of memory for memory tables");
            break;
        }
        edge_twin[e] = -1;   /* an earlier edge between the same ops' twins, on the same slot */
        for (int d = e - 1; d >= 0 && edge_twin[e] < 0; d--) {
            if (mt->edge_slot[d] == mt->edge_slot[e] && from[mt->edge_src[d]] == from[mt->edge_src[e]] &&
                from[mt->edge_dst[d]] == from[mt->edge_dst[e]]) {
                edge_twin[e] = d;
            }
        }
        mt->edge_copy_of[e] = -1;
    }
    int nitems = p->nops + mt->nedges, nwork = 0, merged = 0;   /* items before `merged` are in the tables */
    for (int q = 0; q < nitems && s == SW_OK; q++) {
        int twin = q < p->nops ? from[q] != q : edge_twin[q - p->nops] >= 0;
        if (!twin) {
            work[nwork++] = q;
        }
    }
    int64_t cap = 0;
    table_batch tb = {p, kind, mt, from, edge_twin, work, 0, items, pool, taken, threads};
    for (int first = 0; first < nwork && s == SW_OK; first += batch) {   /* a batch of items to make */
        int n = nwork - first < batch ? nwork - first : batch;
        tb.first = first;
        s = sw_parallel_for(n, threads, make_item, &tb);
        for (int i = 0; s == SW_OK && merged <= work[first + n - 1]; merged++) {   /* then every item up to them, in order */
            int made = merged == work[first + i];
            s = merge_item(p, mt, from, edge_twin, merged, made ? &items[i] : NULL, &cap);
            i += made;
        }
        for (int i = 0; i < n; i++) {
            table_item_free(&items[i]);
        }
    }
    for (; s == SW_OK && merged < nitems; merged++) {   /* twins' items after the last made */
        s = merge_item(p, mt, from, edge_twin, merged, NULL, &cap);
    }
done:
    for (int k = 0; pool && k < threads; k++) {
        join_scratch_free(&pool[k]);
    }
    free(pool);
    free((void *)taken);
    free(items);
    free(work);
    free(edge_twin);
    free(from);
    if (s != SW_OK) {
        sw_memory_tables_free(mt);
    }
    return s;
}

void sw_memory_tables_free(sw_memory_tables *mt) {
    for (int v = 0; mt->node && v < mt->nops; v++) {
        free(mt->node[v]);
    }
    for (int e = 0; mt->edge_base && e < mt->nedges; e++) {
        free(mt->edge_base[e]);
    }
    free(mt->node);
    free(mt->edge_base);
    free(mt->edge_src);
    free(mt->edge_dst);
    free(mt->edge_slot);
    free(mt->shared_ptr);
    free(mt->edge_copy_of);
    free(mt->shared);
    free(mt->rows);
    free(mt->row_slot);
    memset(mt, 0, sizeof *mt);
}
