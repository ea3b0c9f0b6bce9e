/* region.c -- boxes and the input region a worker reads for its output box.
 *
 * The region is the image of the worker's iteration box (its output box times
 * the full reduction ranges) under each input dimension's index expression,
 * computed by interval arithmetic and clipped to the input (padding).  For a
 * plain affine expression the interval is exact per dimension; this is where
 * convolution halos come from.
 */
#include "shardwise.h"

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

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) {
        q--;
    }
    return q;
}

/* Interval [lo, hi] (inclusive) of one index expression over an iteration box. */
static void expr_interval(const sw_index_expr *e, int nvars, const int64_t *vlo, const int64_t *vhi,
                          int64_t *lo, int64_t *hi) {
    int64_t a = e->offset, b = e->offset;
    for (int v = 0; v < nvars; v++) {
        int64_t c = e->coef[v];
        if (c > 0) {
            a += c * vlo[v];
            b += c * (vhi[v] - 1);
        } else if (c < 0) {
            a += c * (vhi[v] - 1);
            b += c * vlo[v];
        }
    }
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

int sw_input_region(const sw_op *op, int slot, const sw_box *out_box, sw_box *region) {
    const sw_input *in = &op->inputs[slot];
    int64_t vlo[SW_MAX_VARS], vhi[SW_MAX_VARS];
    for (int v = 0; v < op->nvars; v++) {
        if (v < op->out_rank) {
            vlo[v] = out_box->lo[v];
            vhi[v] = out_box->hi[v];
            if (in->has_window) {
                if (in->win_lo[v] > vlo[v]) {
                    vlo[v] = in->win_lo[v];
                }
                if (in->win_hi[v] < vhi[v]) {
                    vhi[v] = in->win_hi[v];
                }
            }
            if (vhi[v] <= vlo[v]) {
                region->rank = in->rank;
                for (int d = 0; d < in->rank; d++) {
                    region->lo[d] = region->hi[d] = 0;
                }
                return 0;
            }
        } else {
            vlo[v] = 0;
            vhi[v] = op->extent[v];
        }
    }
    region->rank = in->rank;
    int nonempty = 1;
    for (int d = 0; d < in->rank; d++) {
        int64_t lo, hi;
        expr_interval(&in->expr[d], op->nvars, vlo, vhi, &lo, &hi);
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

void sw_worker_box(const sw_op *op, const sw_config *c, int w, sw_box *out) {
    out->rank = op->out_rank;
    /* row-major worker grid: the last dimension varies fastest */
    int rem = w;
    for (int d = op->out_rank - 1; d >= 0; d--) {
        int coord = rem % c->deg[d];
        rem /= c->deg[d];
        int64_t len = op->extent[d] / c->deg[d];
        out->lo[d] = coord * len;
        out->hi[d] = (coord + 1) * len;
    }
}
