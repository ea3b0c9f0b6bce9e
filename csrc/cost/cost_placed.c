/* cost_placed.c -- t_x on machines of uniform nodes, by counting instead of listing.
 *
 * The presets (DeviceGraph.cluster, .cpu) put devices [n*P, (n+1)*P) in node n
 * and give every pair of devices one bandwidth inside a node (bw_in) and one
 * between nodes (bw_out).  Then t_x of an edge only needs, over the workers w
 * of the consumer, three counts of the elements w reads (its region R_w):
 *
 *     total  = sum_w |R_w|
 *     same   = sum_w |R_w  intersected with the producer blocks on w's node|
 *     local  = sum_w |R_w  intersected with the producer block on w's device|
 *     t_x    = per_element * ((total - same) / bw_out + (same - local) / bw_in)
 *
 * which is Eq. 1's sum over (w, s) pairs regrouped by bandwidth.  When both
 * configurations sit on contiguous device ranges (every enumerated one does:
 * aligned blocks), the producer blocks on one node are a contiguous range of
 * block indices, i.e. a few sub-grids of the producer's row-major block grid,
 * and the overlap of R_w with a sub-grid is a product over dimensions of one
 * interval intersection each.  So a pair of configurations costs O(k_dst * R^2)
 * for rank R, instead of O(k_dst * k_src) when every (w, s) pair is listed
 * (cost.c does that for other machines and device lists).
 */
#include <math.h>    /* INFINITY */
#include <stdlib.h>  /* malloc, calloc, free */

#include "internal.h"

#define TRANSFER_DIRECTIONS 2.0   /* activation forward + gradient backward (as cost.c) */

int sw_config_first_device(const sw_problem *p, const sw_config *c) {
    const int32_t *d = p->dev_pool + c->dev_offset;
    for (int w = 1; w < c->nworkers; w++) {
        if (d[w] != d[0] + w) {
            return -1;
        }
    }
    return d[0];
}

static int64_t overlap(int64_t alo, int64_t ahi, int64_t blo, int64_t bhi) {
    int64_t lo = alo > blo ? alo : blo, hi = ahi < bhi ? ahi : bhi;
    return hi > lo ? hi - lo : 0;
}

/* The producer's output blocks: row-major over deg (rank dims), block length len. */
typedef struct {
    int rank;
    int64_t deg[SW_MAX_RANK], len[SW_MAX_RANK], stride[SW_MAX_RANK];
    int64_t nb;   /* blocks */
} grid;

static void make_grid(const sw_op *op, const sw_config *c, grid *g) {
    g->rank = op->out_rank;
    int64_t acc = 1;
    for (int d = g->rank - 1; d >= 0; d--) {
        g->deg[d] = c->deg[d];
        g->len[d] = op->extent[d] / c->deg[d];
        g->stride[d] = acc;
        acc *= c->deg[d];
    }
    g->nb = acc;
}

/* Elements of box r inside the blocks whose row-major indices lie in [s0, s1),
 * counting dimensions d.. only (dimensions < d are accounted for by the caller).
 * The range splits at coordinate d into a head (coordinate a, a partial range
 * of the rest), whole values a+1 .. b-1 (a sub-grid: a product of interval
 * overlaps) and a tail (coordinate b, a partial range); head and tail recurse
 * on coordinate d+1, so O(R) sub-grids in all and O(R^2) work. */
static double range_overlap(const grid *g, const sw_box *r, int d, int64_t s0, int64_t s1) {
    if (s0 >= s1) {
        return 0;
    }
    if (d == g->rank) {
        return 1;   /* one block: the overlap of every dimension is already counted */
    }
    int64_t st = g->stride[d], len = g->len[d];
    int64_t a = s0 / st, b = (s1 - 1) / st;   /* coordinate d of the first and last block */
    if (a == b) {
        int64_t ov = overlap(r->lo[d], r->hi[d], a * len, (a + 1) * len);
        return ov == 0 ? 0 : (double)ov * range_overlap(g, r, d + 1, s0 - a * st, s1 - a * st);
    }
    double sum = 0;
    int64_t whole_lo = a, whole_hi = b + 1;   /* coordinates taken whole: [whole_lo, whole_hi) */
    if (s0 % st != 0) {
        int64_t ov = overlap(r->lo[d], r->hi[d], a * len, (a + 1) * len);
        sum += ov == 0 ? 0 : (double)ov * range_overlap(g, r, d + 1, s0 % st, st);
        whole_lo = a + 1;
    }
    if (s1 % st != 0) {
        int64_t ov = overlap(r->lo[d], r->hi[d], b * len, (b + 1) * len);
        sum += ov == 0 ? 0 : (double)ov * range_overlap(g, r, d + 1, 0, s1 % st);
        whole_hi = b;
    }
    if (whole_hi > whole_lo) {
        double whole = (double)overlap(r->lo[d], r->hi[d], whole_lo * len, whole_hi * len);
        for (int q = d + 1; q < g->rank && whole > 0; q++) {
            whole *= (double)overlap(r->lo[q], r->hi[q], 0, g->len[q] * g->deg[q]);
        }
        sum += whole;
    }
    return sum;
}

/* The regions the workers of one consumer configuration read from input `slot`. */
typedef struct {
    int k;
    sw_box *region;
    char *used;
    double *prefix;      /* prefix[w] = sum over used workers v < w of |R_v|; prefix[k] the total */
    double volume_sum;   /* prefix[k] */
} reads;

static void free_reads(reads *rd) {
    free(rd->region);
    free(rd->used);
    free(rd->prefix);
    *rd = (reads){0};
}

static sw_status reads_of(const sw_op *dst, const sw_config *c, int slot, reads *out) {
    out->k = c->nworkers;
    out->region = malloc(sizeof *out->region * (size_t)c->nworkers);
    out->used = malloc((size_t)c->nworkers);
    out->prefix = malloc(sizeof *out->prefix * ((size_t)c->nworkers + 1));
    if (!out->region || !out->used || !out->prefix) {
        free_reads(out);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    out->prefix[0] = 0;
    sw_status s = sw_config_regions(dst, c, slot, out->region, out->used);
    if (s != SW_OK) {
        free_reads(out);
        return s;
    }
    for (int w = 0; w < c->nworkers; w++) {
        out->prefix[w + 1] = out->prefix[w] + (out->used[w] ? (double)sw_box_volume(&out->region[w]) : 0.0);
    }
    out->volume_sum = out->prefix[c->nworkers];
    return SW_OK;
}

/* The three counts of the header for consumer reads rd on devices [d0, d0 + k) and
 * the producer configuration (grid g, reduction degree rdeg) on [s0, s0 + nb * rdeg):
 * output block s lives on device s0 + s * rdeg. */
static void count_placed(const sw_problem *p, const reads *rd, int64_t d0, const grid *g, int64_t rdeg,
                         int64_t s0, double *same, double *local) {
    int64_t per = p->node_size, k = rd->k;
    *same = 0;
    *local = 0;
    /* local: the workers on a device holding a block, visited with the block's coordinates
     * kept by an odometer (no division per worker) */
    int64_t w = s0 - d0 > 0 ? s0 - d0 : 0;
    int64_t rel = d0 + w - s0;
    w += (rdeg - rel % rdeg) % rdeg;
    int64_t blk = (d0 + w - s0) / rdeg, coord[SW_MAX_RANK];
    for (int64_t d = g->rank - 1, q = blk; d >= 0; d--) {
        coord[d] = q % g->deg[d];
        q /= g->deg[d];
    }
    for (; w < k && blk < g->nb; w += rdeg, blk++) {
        if (rd->used[w]) {
            const sw_box *r = &rd->region[w];
            double v = 1;
            for (int d = 0; d < g->rank && v > 0; d++) {
                v *= (double)overlap(r->lo[d], r->hi[d], coord[d] * g->len[d], (coord[d] + 1) * g->len[d]);
            }
            *local += v;
        }
        for (int d = g->rank - 1; d >= 0; d--) {   /* next block */
            if (++coord[d] < g->deg[d]) {
                break;
            }
            coord[d] = 0;
        }
    }
    /* same node: node by node, the consumer workers [a, b) on it and the producer blocks
     * [first, last) on it; all blocks there covers every worker's whole region */
    for (int64_t n0 = d0 / per * per; n0 < d0 + k; n0 += per) {
        int64_t a = n0 - d0 > 0 ? n0 - d0 : 0, b = n0 + per - d0 < k ? n0 + per - d0 : k;
        int64_t first = n0 - s0 <= 0 ? 0 : (n0 - s0 + rdeg - 1) / rdeg;
        int64_t last = n0 + per - s0 <= 0 ? 0 : (n0 + per - s0 + rdeg - 1) / rdeg;
        last = last < g->nb ? last : g->nb;
        if (first >= last) {
            continue;
        }
        if (first == 0 && last == g->nb) {
            *same += rd->prefix[b] - rd->prefix[a];
            continue;
        }
        for (int64_t v = a; v < b; v++) {
            if (rd->used[v]) {
                *same += range_overlap(g, &rd->region[v], 0, first, last);
            }
        }
    }
}

/* ---- the counts of one pair of partitions, memoized over placements ----
 * The counts depend on where the consumer workers [d0, d0 + kd) and the producer devices
 * [s0, s0 + ks) sit only up to a shift of both by whole nodes (every step of count_placed
 * reads differences), and are 0 when the two ranges share no node.  So for one pair of
 * partitions on P-device nodes, the (d0, s0) pairs fall into few classes: on 16 devices
 * of 4 per node, 64 of the 256 pairs of single-device blocks share a node, and those 64
 * fall into 16 classes.  Each class is counted once; the table is bit for bit as before.
 * Within a run of configurations of one partition (enumerated together), all contiguous,
 * a configuration is its first device. */
typedef struct {
    int64_t key;   /* (d0 - t) * ndev + (s0 - t) for the shift t; -1: empty */
    double same, local;
} memo_slot;

typedef struct {
    memo_slot *slot;
    size_t mask;   /* slots - 1 for this pair of partitions (a power of two) */
} placed_memo;

static void memo_reset(placed_memo *m, size_t pairs) {
    size_t cap = 4;
    while (cap < 2 * pairs) {
        cap *= 2;
    }
    m->mask = cap - 1;
    for (size_t q = 0; q < cap; q++) {
        m->slot[q].key = -1;
    }
}

/* same and local for consumer reads rd on [d0, d0 + rd->k), producer configuration cs
 * (grid g) on [s0, s0 + cs->nworkers): from the memo, else counted and kept. */
static void memo_counts(const sw_problem *p, placed_memo *m, const reads *rd, int64_t d0, const grid *g,
                        const sw_config *cs, int64_t s0, double *same, double *local) {
    int64_t per = p->node_size;
    int64_t dn0 = d0 / per, dn1 = (d0 + rd->k - 1) / per, sn0 = s0 / per, sn1 = (s0 + cs->nworkers - 1) / per;
    if (dn1 < sn0 || sn1 < dn0) {   /* no node in common: nothing read on the same node */
        *same = 0;
        *local = 0;
        return;
    }
    int64_t t = (dn0 < sn0 ? dn0 : sn0) * per;
    int64_t key = (d0 - t) * p->ndev + (s0 - t);
    size_t q = (size_t)(((uint64_t)key * 0x9e3779b97f4a7c15ULL) >> 32) & m->mask;
    while (m->slot[q].key >= 0 && m->slot[q].key != key) {
        q = (q + 1) & m->mask;
    }
    if (m->slot[q].key != key) {   /* shifted by t: the same counts, read from the first nodes */
        count_placed(p, rd, d0 - t, g, cs->rdeg, s0 - t, &m->slot[q].same, &m->slot[q].local);
        m->slot[q].key = key;
    }
    *same = m->slot[q].same;
    *local = m->slot[q].local;
}

/* End (exclusive) of the run of configurations from c that share c's partition. */
static int run_end(const sw_op *op, int c) {
    int e = c + 1;
    while (e < op->ncfg && sw_same_partition(&op->cfgs[c], &op->cfgs[e])) {
        e++;
    }
    return e;
}

sw_status sw_transfer_table_placed(const sw_problem *p, int consumer, int slot, double *time, double *bytes) {
    const sw_op *dst = &p->ops[consumer];
    const sw_op *src = &p->ops[dst->inputs[slot].producer];
    int nj = dst->ncfg;
    /* no gradient flows back into the graph's inputs: their transfers happen once */
    double per_elem = p->bytes_per_element * (src->ninputs == 0 ? 1.0 : TRANSFER_DIRECTIONS);
    int *src_first = malloc(sizeof *src_first * (size_t)src->ncfg);
    grid *grids = malloc(sizeof *grids * (size_t)src->ncfg);
    /* the memo holds twice the placement pairs of the largest pair of partition runs */
    size_t most_d = 1, most_s = 1;
    for (int c = 0; c < nj; c = run_end(dst, c)) {
        most_d = (size_t)(run_end(dst, c) - c) > most_d ? (size_t)(run_end(dst, c) - c) : most_d;
    }
    for (int c = 0; c < src->ncfg; c = run_end(src, c)) {
        most_s = (size_t)(run_end(src, c) - c) > most_s ? (size_t)(run_end(src, c) - c) : most_s;
    }
    size_t cap = 4;
    while (cap < 2 * most_d * most_s) {
        cap *= 2;
    }
    placed_memo memo = {malloc(sizeof(memo_slot) * cap), 0};
    if (!src_first || !grids || !memo.slot) {
        free(src_first);
        free(grids);
        free(memo.slot);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    for (int ci = 0; ci < src->ncfg; ci++) {
        src_first[ci] = sw_config_first_device(p, &src->cfgs[ci]);
        make_grid(src, &src->cfgs[ci], &grids[ci]);
    }
    sw_status s = SW_OK;
    for (int cj0 = 0; cj0 < nj && s == SW_OK; cj0 = run_end(dst, cj0)) {
        int cj1 = run_end(dst, cj0);
        reads rd = {0};
        s = reads_of(dst, &dst->cfgs[cj0], slot, &rd);   /* the same regions on any devices */
        if (s != SW_OK) {
            break;
        }
        double total = rd.volume_sum;
        for (int ci0 = 0; ci0 < src->ncfg; ci0 = run_end(src, ci0)) {
            int ci1 = run_end(src, ci0);
            memo_reset(&memo, (size_t)(cj1 - cj0) * (size_t)(ci1 - ci0));
            for (int cj = cj0; cj < cj1; cj++) {
                int d0 = sw_config_first_device(p, &dst->cfgs[cj]);
                for (int ci = ci0; ci < ci1; ci++) {
                    double same, local;
                    memo_counts(p, &memo, &rd, d0, &grids[ci], &src->cfgs[ci], src_first[ci], &same, &local);
                    time[(size_t)ci * nj + cj] = per_elem * ((total - same) / p->bw_out + (same - local) / p->bw_in);
                    if (bytes) {
                        bytes[(size_t)ci * nj + cj] = per_elem * (total - local);
                    }
                }
            }
        }
        free_reads(&rd);
    }
    free(memo.slot);
    free(src_first);
    free(grids);
    return s;
}

static double placed_time(const sw_problem *p, double per_elem, const reads *rd, int64_t d0, const grid *g,
                          int64_t rdeg, int64_t s0) {
    double same, local;
    count_placed(p, rd, d0, g, rdeg, s0, &same, &local);
    return per_elem * ((rd->volume_sum - same) / p->bw_out + (same - local) / p->bw_in);
}

sw_status sw_transfer_least(const sw_problem *p, int consumer, int slot, int ci, int cj, double *out) {
    const sw_op *dst = &p->ops[consumer];
    const sw_op *src = &p->ops[dst->inputs[slot].producer];
    const sw_config *cs = &src->cfgs[ci], *cd = &dst->cfgs[cj];
    double per_elem = p->bytes_per_element * (src->ninputs == 0 ? 1.0 : TRANSFER_DIRECTIONS);
    int64_t n = p->ndev, per = p->node_size, ks = cs->nworkers, kd = cd->nworkers;
    if (per <= 0) {
        return SW_FAIL(SW_ERR_VALUE, "the least transfer over placements needs a machine of uniform nodes");
    }
    grid g;
    make_grid(src, cs, &g);
    reads rd = {0};
    SW_TRY(reads_of(dst, cd, slot, &rd));
    double best = INFINITY;
    int64_t a = ks < kd ? ks : kd, b = ks < kd ? kd : ks;
    if (b % a == 0) {
        /* by symmetry the larger block sits on [0, b); the smaller one overlapping it, or
         * outside it on node 0, or on another node: outside, only the node matters */
        int64_t outside_same = -1, outside_other = -1;
        for (int64_t x = 0; x + a <= n; x += a) {
            int in_node0 = x + a <= per;
            if (x >= b && in_node0 && outside_same < 0) {
                outside_same = x;
            } else if (x >= b && !in_node0 && x / per != 0 && outside_other < 0) {
                outside_other = x;
            }
            if (x < b || x == outside_same || x == outside_other) {
                int64_t s0 = ks >= kd ? 0 : x, d0 = ks >= kd ? x : 0;
                double t = placed_time(p, per_elem, &rd, d0, &g, cs->rdeg, s0);
                best = t < best ? t : best;
            }
        }
    } else {
        for (int64_t s0 = 0; s0 + ks <= n; s0 += ks) {   /* sizes that do not nest: every pair */
            for (int64_t d0 = 0; d0 + kd <= n; d0 += kd) {
                double t = placed_time(p, per_elem, &rd, d0, &g, cs->rdeg, s0);
                best = t < best ? t : best;
            }
        }
    }
    free_reads(&rd);
    *out = best;
    return SW_OK;
}
