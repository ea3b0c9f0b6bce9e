/* indexmap.c -- ops that only move elements, computed from their description's index map.
 *
 *   y[o] = x[map(o)],  map_d(o) = ((sum_v coef[v] o[v] + offset) / div) % mod   (mod 0: none)
 *
 * reshape and permute are described by such maps (python/shardwise/ops/seq.py); the
 * kernels evaluate the very same expressions, so a kernel cannot disagree with the
 * regions the planner derived from them.  The maps are one-to-one, so the gradient is
 * the inverse move: dx[map(o)] = dy[o], zeros where dy sends nothing.  Coordinates are
 * global (kernels.h); only output variables appear in these maps.
 */
#include <string.h>  /* memset */

#include "kernels.h"
#include "../core/view.h"  /* sw_view_check, sw_view_contains, sw_view_offset */

/* x's index of output point o (rank out_rank) through map (one expression per x dim). */
static void apply(const sw_index_expr *map, int in_rank, const int64_t *o, int out_rank, int64_t *idx) {
    for (int d = 0; d < in_rank; d++) {
        const sw_index_expr *e = &map[d];
        int64_t v = e->offset;
        for (int k = 0; k < out_rank; k++) {
            v += e->coef[k] * o[k];
        }
        v = e->div > 1 ? v / e->div : v;   /* indices are never negative here: truncation is floor */
        idx[d] = e->mod > 0 ? v % e->mod : v;
    }
}

static sw_status check_map(const sw_index_expr *map, const sw_view *v, const char *name) {
    if (!map) {
        return SW_FAIL(SW_ERR_VALUE, "%s: NULL index map", name);
    }
    for (int d = 0; d < v->rank; d++) {
        if (map[d].div < 1 || map[d].mod < 0) {
            return SW_FAIL(SW_ERR_VALUE, "%s: bad index expression for dimension %d", name, d);
        }
    }
    return SW_OK;
}

/* Are x's dimensions d and d + 1 the digits of one value, v / m and v % m (a reshape merging
 * them into one output dimension), with x's view holding all m values of the second?  Then
 * x's offset along the pair is (v / m) m s + (v % m) s = v s (s: the second's stride): linear
 * in v, and a run goes on across the wrap of the second digit. */
static int digit_pair(const sw_index_expr *map, const sw_view *x, int d, int out_rank) {
    if (d + 1 >= x->rank) {
        return 0;
    }
    const sw_index_expr *a = &map[d], *b = &map[d + 1];
    if (!(a->div > 1 && a->mod == 0 && b->div == 1 && b->mod == a->div && a->offset == b->offset &&
          x->shape[d + 1] == b->mod)) {
        return 0;
    }
    for (int k = 0; k < out_rank; k++) {
        if (a->coef[k] != b->coef[k]) {
            return 0;
        }
    }
    return 1;
}

/* A run of output points along y's last dimension from o over which every x index moves
 * linearly: its length (at most `most`) and x's element stride per step.  An expression
 * with div 1 and no modulo moves by its coefficient; one with a modulo by its coefficient
 * until it wraps; one with div > 1 stays put until its quotient changes; a digit pair
 * moves by its coefficient times its second digit's stride. */
static int64_t run_of(const sw_index_expr *map, const sw_view *x, const int64_t *o, int out_rank, const int64_t *xs,
                      int64_t most, int64_t *stride) {
    int last = out_rank - 1, in_rank = x->rank;
    int64_t len = most;
    *stride = 0;
    for (int d = 0; d < in_rank; d++) {
        const sw_index_expr *e = &map[d];
        int64_t c = e->coef[last];
        if (c == 0) {
            continue;
        }
        if (c > 0 && digit_pair(map, x, d, out_rank)) {
            *stride += c * xs[d + 1];
            d++;
            continue;
        }
        int64_t v = e->offset;
        for (int k = 0; k < out_rank; k++) {
            v += e->coef[k] * o[k];
        }
        if (c < 0) {   /* not produced by reshape or permute: one point at a time */
            return 1;
        }
        if (e->div > 1) {   /* constant until the quotient changes */
            int64_t steps = ((v / e->div + 1) * e->div - v + c - 1) / c;
            len = steps < len ? steps : len;
            continue;
        }
        if (e->mod > 0) {
            int64_t steps = (e->mod - v % e->mod + c - 1) / c;
            len = steps < len ? steps : len;
        }
        *stride += c * xs[d];
    }
    return len < 1 ? 1 : len;
}

/* Given a run of len points along y's last dimension from o (run_of), the number of y rows
 * (steps along dimension rank-2, at most `most`) over which every x index still moves linearly
 * in both directions, so that the rows' runs lie at a constant x distance *stride apart: the
 * largest tile [o, o + (rows, len)) in which no quotient changes and no modulo wraps. */
static int64_t rows_of(const sw_index_expr *map, const sw_view *x, const int64_t *o, int out_rank,
                       const int64_t *xs, int64_t len, int64_t most, int64_t *stride) {
    int row = out_rank - 2, last = out_rank - 1, in_rank = x->rank;
    int64_t rows = most;
    *stride = 0;
    for (int d = 0; d < in_rank; d++) {
        const sw_index_expr *e = &map[d];
        int64_t c1 = e->coef[row], c2 = e->coef[last];
        if (c1 < 0 || c2 < 0) {
            return 1;
        }
        if ((c1 > 0 || c2 > 0) && digit_pair(map, x, d, out_rank)) {   /* linear throughout (run_of) */
            *stride += c1 * xs[d + 1];
            d++;
            continue;
        }
        if (c1 == 0) {
            continue;
        }
        int64_t v = e->offset;
        for (int k = 0; k < out_rank; k++) {
            v += e->coef[k] * o[k];
        }
        int64_t top = v + c2 * (len - 1);   /* the expression's largest value in the first row */
        if (e->div > 1) {   /* constant while the quotient is: contributes no stride */
            int64_t steps = ((v / e->div + 1) * e->div - 1 - top) / c1 + 1;
            rows = steps < rows ? steps : rows;
            continue;
        }
        if (e->mod > 0) {
            int64_t steps = (e->mod - 1 - (top - v + v % e->mod)) / c1 + 1;
            rows = steps < rows ? steps : rows;
        }
        *stride += c1 * xs[d];
    }
    return rows < 1 ? 1 : rows;
}

/* Moves the len elements of a run between x (stride xstride) and y (contiguous). */
typedef void (*run_fn)(float *x, int64_t xstride, float *y, int64_t len);

static void gather_run(float *restrict x, int64_t xstride, float *restrict y, int64_t len) {
    if (xstride == 1) {
        memcpy(y, x, sizeof(float) * (size_t)len);
        return;
    }
    for (int64_t j = 0; j < len; j++) {
        y[j] = x[j * xstride];
    }
}

static void scatter_run(float *restrict x, int64_t xstride, float *restrict y, int64_t len) {
    if (xstride == 1) {
        memcpy(x, y, sizeof(float) * (size_t)len);
        return;
    }
    for (int64_t j = 0; j < len; j++) {
        x[j * xstride] = y[j];
    }
}

/* Is x's element of output point o, moved by (rows - 1, len - 1) in y's last two dimensions
 * (rows 1: along the last alone), inside x's view?  idx gets x's index of that point. */
static int far_inside(const sw_view *x, const sw_index_expr *map, const int64_t *o, int out_rank, int64_t rows,
                      int64_t len, int64_t *idx) {
    int64_t oe[SW_MAX_RANK] = {0};
    for (int d = 0; d < out_rank; d++) {
        oe[d] = o[d];
    }
    oe[out_rank - 1] += len - 1;
    if (out_rank >= 2) {
        oe[out_rank - 2] += rows - 1;
    }
    apply(map, x->rank, oe, out_rank, idx);
    return sw_view_contains(x, idx);
}

/* Move between x (the input side) and y (the output side, walked in row-major order).
 * strict: every point must land inside x (forward); else points outside are skipped.
 * A run that covers a whole row of y's box extends over the following rows as far as the
 * map stays linear (rows_of): one index computation per tile, not per row (the permutes
 * and reshapes of attention heads move rows of a head's width). */
static sw_status walk(const sw_view *x, const sw_index_expr *map, const sw_view *y, run_fn fn, int strict,
                      const char *name) {
    int64_t o[SW_MAX_RANK], idx[SW_MAX_RANK], end[SW_MAX_RANK], xs[SW_MAX_RANK];
    int last = y->rank - 1, row = y->rank - 2;
    sw_view_strides(x, xs);
    for (int d = 0; d < y->rank; d++) {
        o[d] = y->lo[d];
    }
    float *out = y->data;
    const int64_t hi = sw_view_hi(y, last), width = y->shape[last];
    for (;;) {
        int64_t stride, len = run_of(map, x, o, y->rank, xs, hi - o[last], &stride);
        apply(map, x->rank, o, y->rank, idx);
        int inside = sw_view_contains(x, idx);
        int64_t rows = 1, rstride = 0;
        if (inside && row >= 0 && len == width && sw_view_hi(y, row) - o[row] > 1) {
            rows = rows_of(map, x, o, y->rank, xs, len, sw_view_hi(y, row) - o[row], &rstride);
            if (rows > 1 && !far_inside(x, map, o, y->rank, rows, len, end)) {
                rows = 1;
            }
        }
        if (inside && rows == 1 && len > 1) {   /* the run's last point: a linear walk stays inside if both ends do */
            inside = far_inside(x, map, o, y->rank, 1, len, end);
            if (!inside) {
                len = 1;
                inside = 1;
            }
        }
        if (!inside && strict) {
            return SW_FAIL(SW_ERR_VALUE, "%s: the input view does not hold an element the output reads", name);
        }
        if (!inside) {   /* skip this point alone: the run may enter x's view further on */
            len = 1;
        }
        if (inside) {
            float *xp = x->data + sw_view_offset(x, idx);
            for (int64_t r = 0; r < rows; r++) {
                fn(xp + r * rstride, stride, out + r * len, len);
            }
        }
        out += rows * len;
        if (rows > 1) {   /* whole rows done: o[last] is back at the row start */
            o[row] += rows - 1;
        } else {
            o[last] += len;
            if (o[last] < hi) {
                continue;
            }
        }
        o[last] = y->lo[last];
        int d = last - 1;
        for (; d >= 0; d--) {
            if (++o[d] < sw_view_hi(y, d)) {
                break;
            }
            o[d] = y->lo[d];
        }
        if (d < 0) {
            return SW_OK;
        }
    }
}

sw_status sw_index_map_forward(const sw_view *x, const sw_index_expr *map, sw_view *y) {
    const char *name = "index_map_forward";
    sw_status s;
    if ((s = sw_view_check(y, y ? y->rank : 0, name)) != SW_OK || (s = sw_view_check(x, x ? x->rank : 0, name)) != SW_OK ||
        (s = check_map(map, x, name)) != SW_OK) {
        return s;
    }
    if (sw_view_volume(y) == 0) {
        return SW_OK;
    }
    return walk(x, map, y, gather_run, 1, name);
}

sw_status sw_index_map_backward(const sw_index_expr *map, const sw_view *dy, sw_view *dx) {
    const char *name = "index_map_backward";
    sw_status s;
    if ((s = sw_view_check(dy, dy ? dy->rank : 0, name)) != SW_OK ||
        (s = sw_view_check(dx, dx ? dx->rank : 0, name)) != SW_OK || (s = check_map(map, dx, name)) != SW_OK) {
        return s;
    }
    memset(dx->data, 0, sizeof(float) * (size_t)sw_view_volume(dx));
    if (sw_view_volume(dy) == 0) {
        return SW_OK;
    }
    return walk(dx, map, dy, scatter_run, 0, name);
}
