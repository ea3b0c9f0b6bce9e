/* region.c -- boxes and the input region a worker reads for its output box.
 *
 * The region is the image of the worker's iteration box (its output box times
 * the full reduction ranges) under each input dimension's index expression,
 * computed by interval arithmetic and clipped to the input (padding).  For a
 * plain affine expression the interval is exact per dimension; this is where
 * convolution halos come from.  sw_iteration_region does the same for any box
 * of the iteration space (reduction dimensions split too: partition-n-reduce,
 * and the symbolic interval analysis of seed 004 section 3.2 behind
 * shardwise.strategies_of).
 */
#include <stdlib.h>  /* malloc, calloc, free */
#include <string.h>  /* memset */

#include "internal.h"

int64_t sw_box_volume(const sw_box *b) {
    int64_t v = 1;
    for (int d = 0; d < b->rank; d++) {
        int64_t len = b->hi[d] - b->lo[d];
        if (len <= 0) {
            return 0;
        }
        v *= len;
    }
    return v;
}

int sw_box_equal(const sw_box *a, const sw_box *b) {
    if (a->rank != b->rank) {
        return 0;
    }
    for (int d = 0; d < a->rank; d++) {
        if (a->lo[d] != b->lo[d] || a->hi[d] != b->hi[d]) {
            return 0;
        }
    }
    return 1;
}

int sw_ring_chunk_dim(const sw_box *box, int k) {
    for (int d = 0; k >= 2 && d < box->rank; d++) {
        if ((box->hi[d] - box->lo[d]) % k == 0 && box->hi[d] > box->lo[d]) {
            return d;
        }
    }
    for (int d = 0; k >= 2 && d < box->rank; d++) {
        if (box->hi[d] - box->lo[d] >= k) {
            return d;
        }
    }
    return -1;
}

int sw_ring_chunk(const sw_box *box, int k, int c, sw_box *out) {
    int dim = sw_ring_chunk_dim(box, k);
    if (dim < 0 || c < 0 || c >= k) {
        return 0;
    }
    int64_t lo = box->lo[dim], extent = box->hi[dim] - lo;
    *out = *box;
    out->lo[dim] = lo + extent * c / k;
    out->hi[dim] = lo + extent * (c + 1) / k;
    return 1;
}

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) {
        q--;
    }
    return q;
}

/* The ends [*pa, *pb] of the term coef[v] * (iter[v] div vdiv[v]) of e while iter[v]
 * ranges over [lo, hi) (hi > lo): floor division is monotone, so the ends come from the
 * range's ends. */
static void term_ends(const sw_index_expr *e, int v, int64_t lo, int64_t hi, int64_t *pa, int64_t *pb) {
    int64_t c = e->coef[v], q = e->vdiv[v];
    int64_t a = q > 1 ? floor_div(lo, q) : lo, b = q > 1 ? floor_div(hi - 1, q) : hi - 1;
    *pa = c > 0 ? c * a : c < 0 ? c * b : 0;
    *pb = c > 0 ? c * b : c < 0 ? c * a : 0;
}

/* Interval [lo, hi] (inclusive) of one index expression over an iteration box. */
static void expr_interval(const sw_index_expr *e, int nvars, const int64_t *vlo, const int64_t *vhi,
                          int64_t *lo, int64_t *hi) {
    int64_t a = e->offset, b = e->offset;
    for (int v = 0; v < nvars; v++) {
        if (e->coef[v] != 0) {
            int64_t pa, pb;
            term_ends(e, v, vlo[v], vhi[v], &pa, &pb);
            a += pa;
            b += pb;
        }
    }
    sw_expr_finish(e, &a, &b);
    *lo = a;
    *hi = b;
}

void sw_expr_finish(const sw_index_expr *e, int64_t *lo, int64_t *hi) {
    int64_t a = *lo, b = *hi;
    if (e->div > 1) {
        a = floor_div(a, e->div);
        b = floor_div(b, e->div);
    }
    if (e->mod > 0) {
        if (b - a + 1 >= e->mod || floor_div(a, e->mod) != floor_div(b, e->mod)) {
            a = 0;                 /* wraps around: the whole period */
            b = e->mod - 1;
        } else {
            int64_t base = floor_div(a, e->mod) * e->mod;
            a -= base;
            b -= base;
        }
    }
    *lo = a;
    *hi = b;
}

/* Is the image of expression e over the box [vlo, vhi) every integer of its interval?
 * Sorting the terms whose variable takes more than one value by |coef|, each
 * coefficient may be at most one more than the span the smaller terms cover;
 * a larger one leaves holes (strided reads).  A variable's own divisor keeps its
 * values consecutive (iter div vdiv over a range is a range), so its term counts
 * the values of the quotient.  Floor division and modulo of the whole expression
 * are not analysed: they count as not exact. */
static int expr_image_is_box(const sw_index_expr *e, int nvars, const int64_t *vlo, const int64_t *vhi) {
    if (e->div != 1 || e->mod != 0) {
        return 0;
    }
    int64_t coef[SW_MAX_VARS], count[SW_MAX_VARS];
    int n = 0;
    for (int v = 0; v < nvars; v++) {
        int64_t q = e->vdiv[v];
        int64_t values = q > 1 ? floor_div(vhi[v] - 1, q) - floor_div(vlo[v], q) + 1 : vhi[v] - vlo[v];
        if (e->coef[v] != 0 && values > 1) {
            coef[n] = e->coef[v] < 0 ? -e->coef[v] : e->coef[v];
            count[n] = values;
            n++;
        }
    }
    for (int i = 1; i < n; i++) {          /* insertion sort by |coef|: n <= SW_MAX_VARS */
        for (int j = i; j > 0 && coef[j] < coef[j - 1]; j--) {
            int64_t c = coef[j], k = count[j];
            coef[j] = coef[j - 1];
            count[j] = count[j - 1];
            coef[j - 1] = c;
            count[j - 1] = k;
        }
    }
    int64_t span = 0;
    for (int i = 0; i < n; i++) {
        if (coef[i] > span + 1) {
            return 0;
        }
        span += coef[i] * (count[i] - 1);
    }
    return 1;
}

int sw_iteration_region(const sw_op *op, int slot, const int64_t *vlo_in, const int64_t *vhi_in,
                        sw_box *region, int *exact) {
    const sw_input *in = &op->inputs[slot];
    int64_t vlo[SW_MAX_VARS], vhi[SW_MAX_VARS];
    int empty = 0;
    for (int v = 0; v < op->nvars; v++) {
        vlo[v] = vlo_in[v];
        vhi[v] = vhi_in[v];
        if (v < op->out_rank && in->has_window) {
            if (in->win_lo[v] > vlo[v]) {
                vlo[v] = in->win_lo[v];
            }
            if (in->win_hi[v] < vhi[v]) {
                vhi[v] = in->win_hi[v];
            }
        }
        if (vhi[v] <= vlo[v]) {
            empty = 1;
        }
    }
    region->rank = in->rank;
    if (empty) {
        for (int d = 0; d < in->rank; d++) {
            region->lo[d] = region->hi[d] = 0;
            if (exact) {
                exact[d] = 1;
            }
        }
        return 0;
    }
    int nonempty = 1;
    for (int d = 0; d < in->rank; d++) {
        int64_t lo, hi;
        expr_interval(&in->expr[d], op->nvars, vlo, vhi, &lo, &hi);
        if (exact) {
            exact[d] = expr_image_is_box(&in->expr[d], op->nvars, vlo, vhi);
        }
        if (lo < 0) {
            lo = 0;                /* padding: reads outside the input cost nothing */
        }
        if (hi > in->shape[d] - 1) {
            hi = in->shape[d] - 1;
        }
        region->lo[d] = lo;
        region->hi[d] = hi + 1;
        if (hi < lo) {
            region->hi[d] = region->lo[d];
            nonempty = 0;
        }
    }
    return nonempty;
}

int sw_input_region(const sw_op *op, int slot, const sw_box *out_box, sw_box *region) {
    int64_t vlo[SW_MAX_VARS], vhi[SW_MAX_VARS];
    for (int v = 0; v < op->nvars; v++) {
        vlo[v] = v < op->out_rank ? out_box->lo[v] : 0;
        vhi[v] = v < op->out_rank ? out_box->hi[v] : op->extent[v];
    }
    return sw_iteration_region(op, slot, vlo, vhi, region, NULL);
}

void sw_worker_box(const sw_op *op, const sw_config *c, int w, sw_box *out) {
    out->rank = op->out_rank;
    /* row-major grid of output blocks: the last dimension varies fastest */
    int rem = w / c->rdeg;
    for (int d = op->out_rank - 1; d >= 0; d--) {
        int coord = rem % c->deg[d];
        rem /= c->deg[d];
        int64_t len = op->extent[d] / c->deg[d];
        out->lo[d] = coord * len;
        out->hi[d] = (coord + 1) * len;
    }
}

void sw_config_blocks(const sw_op *op, const sw_config *c, sw_box *out) {
    int nblocks = c->nworkers / c->rdeg, rank = op->out_rank;
    int64_t coord[SW_MAX_RANK] = {0}, len[SW_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        len[d] = op->extent[d] / c->deg[d];
    }
    for (int b = 0; b < nblocks; b++) {   /* as sw_worker_box of worker b * rdeg: the last dimension fastest */
        out[b].rank = rank;
        for (int d = 0; d < rank; d++) {
            out[b].lo[d] = coord[d] * len[d];
            out[b].hi[d] = (coord[d] + 1) * len[d];
        }
        for (int d = rank - 1; d >= 0; d--) {
            if (++coord[d] < c->deg[d]) {
                break;
            }
            coord[d] = 0;
        }
    }
}

void sw_worker_iteration_box(const sw_op *op, const sw_config *c, int w, int64_t *vlo, int64_t *vhi) {
    sw_box box;
    sw_worker_box(op, c, w, &box);
    for (int v = 0; v < op->nvars; v++) {
        vlo[v] = v < op->out_rank ? box.lo[v] : 0;
        vhi[v] = v < op->out_rank ? box.hi[v] : op->extent[v];
    }
    if (c->rvar >= 0) {
        int64_t len = op->extent[c->rvar] / c->rdeg;
        vlo[c->rvar] = (w % c->rdeg) * len;
        vhi[c->rvar] = vlo[c->rvar] + len;
    }
}

int sw_worker_region(const sw_op *op, const sw_config *c, int w, int slot, sw_box *region) {
    const sw_input *in = &op->inputs[slot];
    if (c->rvar >= 0 && !sw_is_owner(c, w)) {
        /* an input the split reduction does not index is read by the owner alone when it is
         * added once to the sum (a bias); a data input feeds every part (the ids of an
         * embedding split over its vocabulary) */
        int uses = in->role == SW_ROLE_DATA;
        for (int d = 0; d < in->rank; d++) {
            uses |= in->expr[d].coef[c->rvar] != 0;
        }
        if (!uses) {
            region->rank = in->rank;
            for (int d = 0; d < in->rank; d++) {
                region->lo[d] = region->hi[d] = 0;
            }
            return 0;
        }
    }
    int64_t vlo[SW_MAX_VARS], vhi[SW_MAX_VARS];
    sw_worker_iteration_box(op, c, w, vlo, vhi);
    return sw_iteration_region(op, slot, vlo, vhi, region, NULL);
}

int sw_blocks_meeting(const sw_op *op, const sw_config *c, const sw_box *reg, int32_t *block, sw_box *piece) {
    int rank = op->out_rank;
    int64_t len[SW_MAX_RANK], stride[SW_MAX_RANK], clo[SW_MAX_RANK], chi[SW_MAX_RANK], cur[SW_MAX_RANK];
    int64_t acc = 1;
    for (int m = rank - 1; m >= 0; m--) {
        len[m] = op->extent[m] / c->deg[m];
        stride[m] = acc;
        acc *= c->deg[m];
    }
    for (int m = 0; m < rank; m++) {
        clo[m] = reg->lo[m] / len[m];
        chi[m] = (reg->hi[m] - 1) / len[m];
        cur[m] = clo[m];
    }
    int n = 0;
    for (;;) {
        int64_t s = 0;
        piece[n].rank = rank;
        for (int m = 0; m < rank; m++) {
            int64_t lo = cur[m] * len[m], hi = lo + len[m];
            piece[n].lo[m] = reg->lo[m] > lo ? reg->lo[m] : lo;
            piece[n].hi[m] = reg->hi[m] < hi ? reg->hi[m] : hi;
            s += cur[m] * stride[m];
        }
        block[n++] = (int32_t)s;
        int m = rank - 1;  /* odometer over the blocks that meet the region */
        while (m >= 0 && cur[m] == chi[m]) {
            cur[m] = clo[m];
            m--;
        }
        if (m < 0) {
            return n;
        }
        cur[m]++;
    }
}

/* ---- the regions of every worker of a configuration at once ----
 * sw_worker_region for w = 0 .. k-1, without redoing per worker what depends on
 * one coordinate only.  An index expression is a sum of one term per iteration
 * variable, so the ends of its interval over a box are a constant (from the
 * variables that are not split) plus one term per split variable, looked up by
 * that variable's coordinate; division, modulo and clipping to the input then
 * run per worker exactly as sw_iteration_region does, so the boxes are the same.
 * Shapes: nsplit split coordinates (output dims of degree > 1, then the reduction
 * part), coordinate q taking count[q] values; terms are [dim][first[q] + x]. */
#define PREPARED_HERE 96   /* cells * rank + 1 entries kept in the struct itself */
typedef struct {
    int nsplit, split_var[SW_MAX_VARS], coord_of_var[SW_MAX_VARS];
    int64_t count[SW_MAX_VARS], first[SW_MAX_VARS + 1], cells;
    int64_t *ta, *tb;          /* [d * cells + first[q] + x]: the variable's part of both ends */
    char *hole;                /* [first[q] + x]: the coordinate's range misses the window */
    int64_t ca[SW_MAX_RANK], cb[SW_MAX_RANK];   /* the ends' constant parts */
    int empty_always;          /* a variable not split misses the window */
    int uses_rvar, rq;         /* the input reads the split reduction; its coordinate or -1 */
    /* ta, tb and hole point here when they fit (the usual case: a few dozen cells); the
     * searches' cost tables and the lowering prepare once per partition and input slot */
    int64_t ta_here[PREPARED_HERE], tb_here[PREPARED_HERE];
    char hole_here[PREPARED_HERE];
} prepared;

static void prepared_free(prepared *pr) {
    if (pr->ta != pr->ta_here) {
        free(pr->ta);
        free(pr->tb);
        free(pr->hole);
    }
}

static sw_status prepare(const sw_op *op, const sw_config *c, int slot, prepared *pr) {
    const sw_input *in = &op->inputs[slot];
    int R = op->out_rank, rank = in->rank;
    pr->nsplit = 0;
    for (int v = 0; v < op->nvars; v++) {   /* worker-index order: output dims, then the reduction part */
        int64_t n = v < R ? c->deg[v] : v == c->rvar ? c->rdeg : 1;
        pr->coord_of_var[v] = -1;
        if (n > 1) {
            pr->coord_of_var[v] = pr->nsplit;
            pr->split_var[pr->nsplit] = v;
            pr->count[pr->nsplit++] = n;
        }
    }
    pr->first[0] = 0;
    for (int q = 0; q < pr->nsplit; q++) {
        pr->first[q + 1] = pr->first[q] + pr->count[q];
    }
    int64_t cells = pr->cells = pr->first[pr->nsplit] > 0 ? pr->first[pr->nsplit] : 1;
    if (cells * rank + 1 <= PREPARED_HERE && cells <= PREPARED_HERE) {
        pr->ta = pr->ta_here;
        pr->tb = pr->tb_here;
        pr->hole = memset(pr->hole_here, 0, (size_t)cells);
    } else {
        pr->ta = malloc(sizeof(int64_t) * (size_t)(cells * rank + 1));
        pr->tb = malloc(sizeof(int64_t) * (size_t)(cells * rank + 1));
        pr->hole = calloc((size_t)cells, 1);
        if (!pr->ta || !pr->tb || !pr->hole) {
            prepared_free(pr);
            return SW_FAIL(SW_ERR_NOMEM, "out of memory");
        }
    }
    pr->empty_always = 0;
    for (int d = 0; d < rank; d++) {
        pr->ca[d] = pr->cb[d] = in->expr[d].offset;
    }
    for (int v = 0; v < op->nvars; v++) {
        int q = pr->coord_of_var[v];
        int64_t n = q < 0 ? 1 : pr->count[q], len = op->extent[v] / n;
        for (int64_t x = 0; x < n; x++) {
            int64_t lo = x * len, hi = lo + len;   /* as sw_worker_iteration_box */
            if (v < R && in->has_window) {
                lo = in->win_lo[v] > lo ? in->win_lo[v] : lo;
                hi = in->win_hi[v] < hi ? in->win_hi[v] : hi;
            }
            if (hi <= lo) {
                if (q < 0) {
                    pr->empty_always = 1;
                } else {
                    pr->hole[pr->first[q] + x] = 1;
                }
                continue;
            }
            for (int d = 0; d < rank; d++) {   /* this variable's part of both interval ends */
                int64_t pa, pb;
                term_ends(&in->expr[d], v, lo, hi, &pa, &pb);
                if (q < 0) {
                    pr->ca[d] += pa;
                    pr->cb[d] += pb;
                } else {
                    pr->ta[(size_t)d * cells + pr->first[q] + x] = pa;
                    pr->tb[(size_t)d * cells + pr->first[q] + x] = pb;
                }
            }
        }
    }
    pr->uses_rvar = in->role == SW_ROLE_DATA;   /* as sw_worker_region: data feeds every part */
    for (int d = 0; c->rvar >= 0 && d < rank; d++) {
        pr->uses_rvar |= in->expr[d].coef[c->rvar] != 0;
    }
    pr->rq = c->rvar >= 0 ? pr->coord_of_var[c->rvar] : -1;
    return SW_OK;
}

/* Clip a finished interval [a, b] to the input dimension of size n (padding reads nothing). */
static void clip(int64_t n, int64_t *a, int64_t *b) {
    *a = *a < 0 ? 0 : *a;
    *b = *b > n - 1 ? n - 1 : *b;
}

sw_status sw_config_regions(const sw_op *op, const sw_config *c, int slot, sw_box *regions, char *used) {
    const sw_input *in = &op->inputs[slot];
    int k = c->nworkers, rank = in->rank;
    prepared pr;
    SW_TRY(prepare(op, c, slot, &pr));
    int64_t coord[SW_MAX_VARS] = {0};
    for (int w = 0; w < k; w++) {
        sw_box *r = &regions[w];
        r->rank = rank;
        int empty = pr.empty_always || (pr.rq >= 0 && coord[pr.rq] != 0 && !pr.uses_rvar);   /* non-owners */
        for (int q = 0; q < pr.nsplit && !empty; q++) {
            empty = pr.hole[pr.first[q] + coord[q]];
        }
        int nonempty = !empty;
        for (int d = 0; d < rank; d++) {
            if (empty) {
                r->lo[d] = r->hi[d] = 0;
                continue;
            }
            const sw_index_expr *e = &in->expr[d];
            int64_t a = pr.ca[d], b = pr.cb[d];
            for (int q = 0; q < pr.nsplit; q++) {
                if (e->coef[pr.split_var[q]] != 0) {
                    a += pr.ta[(size_t)d * pr.cells + pr.first[q] + coord[q]];
                    b += pr.tb[(size_t)d * pr.cells + pr.first[q] + coord[q]];
                }
            }
            sw_expr_finish(e, &a, &b);
            clip(in->shape[d], &a, &b);
            r->lo[d] = a;
            r->hi[d] = b + 1;
            if (b < a) {
                r->hi[d] = r->lo[d];
                nonempty = 0;
            }
        }
        used[w] = (char)nonempty;
        for (int q = pr.nsplit - 1; q >= 0; q--) {   /* next worker: the last coordinate is fastest */
            if (++coord[q] < pr.count[q]) {
                break;
            }
            coord[q] = 0;
        }
    }
    prepared_free(&pr);
    return SW_OK;
}

/* ---- region sizes as products over coordinates ----
 * When each dimension of the input depends on at most one split coordinate, the
 * volume of worker w's region is constant x prod_q factor_q(x_q): the sizes of all
 * k workers from sum_q count[q] numbers.  Sums over workers factor the same way. */
sw_status sw_config_region_factors(const sw_op *op, const sw_config *c, int slot, sw_region_factors *f) {
    const sw_input *in = &op->inputs[slot];
    int rank = in->rank;
    prepared pr;
    memset(f, 0, sizeof *f);
    SW_TRY(prepare(op, c, slot, &pr));
    f->nsplit = pr.nsplit;
    f->rank = rank;
    f->separable = 1;
    for (int q = 0; q <= pr.nsplit; q++) {
        f->first[q] = pr.first[q];
    }
    for (int q = 0; q < pr.nsplit; q++) {
        f->count[q] = pr.count[q];
    }
    for (int d = 0; d < rank; d++) {
        f->dim_coord[d] = -1;
        for (int q = 0; q < pr.nsplit; q++) {
            if (in->expr[d].coef[pr.split_var[q]] != 0) {
                f->separable &= f->dim_coord[d] < 0;
                f->dim_coord[d] = q;
            }
        }
    }
    f->factor = malloc(sizeof(double) * (size_t)pr.cells);
    f->extent = malloc(sizeof(int64_t) * (size_t)(pr.cells * rank + 1));
    f->lo = malloc(sizeof(int64_t) * (size_t)(pr.cells * rank + 1));
    if (!f->factor || !f->extent || !f->lo) {
        prepared_free(&pr);
        sw_region_factors_free(f);
        return SW_FAIL(SW_ERR_NOMEM, "out of memory");
    }
    f->constant = pr.empty_always ? 0.0 : 1.0;
    for (int d = 0; d < rank && f->separable; d++) {
        if (f->dim_coord[d] >= 0) {
            continue;
        }
        int64_t a = pr.ca[d], b = pr.cb[d];
        sw_expr_finish(&in->expr[d], &a, &b);
        clip(in->shape[d], &a, &b);
        f->const_len[d] = b >= a ? b - a + 1 : 0;
        f->const_lo[d] = a;
        f->constant *= (double)f->const_len[d];
    }
    for (int q = 0; q < pr.nsplit && f->separable; q++) {
        for (int64_t x = 0; x < pr.count[q]; x++) {
            int64_t cell = pr.first[q] + x;
            int skip = pr.hole[cell] || (q == pr.rq && x != 0 && !pr.uses_rvar);   /* non-owners */
            double v = skip ? 0.0 : 1.0;
            for (int d = 0; d < rank; d++) {
                if (f->dim_coord[d] != q) {
                    continue;
                }
                int64_t a = pr.ca[d] + pr.ta[(size_t)d * pr.cells + cell];
                int64_t b = pr.cb[d] + pr.tb[(size_t)d * pr.cells + cell];
                sw_expr_finish(&in->expr[d], &a, &b);
                clip(in->shape[d], &a, &b);
                int64_t len = b >= a ? b - a + 1 : 0;
                f->extent[(size_t)d * pr.cells + cell] = skip ? 0 : len;
                f->lo[(size_t)d * pr.cells + cell] = a;
                v *= (double)len;
            }
            f->factor[cell] = v;
        }
    }
    f->cells = pr.cells;
    prepared_free(&pr);
    return SW_OK;
}

void sw_region_factors_free(sw_region_factors *f) {
    free(f->factor);
    free(f->extent);
    free(f->lo);
    f->factor = NULL;
    f->extent = NULL;
    f->lo = NULL;
}
