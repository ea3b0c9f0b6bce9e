/* indexmap.c -- ops that only move elements, computed from their description's index map.
 *
 *   y[o] = x[map(o)],  map_d(o) = ((sum_v coef[v] o[v] + offset) / div) % mod   (mod 0: none)
 *
 * reshape and permute are described by such maps (python/shardwise/ops_seq.py); the
 * kernels evaluate the very same expressions, so a kernel cannot disagree with the
 * regions the planner derived from them.  The maps are one-to-one, so the gradient is
 * the inverse move: dx[map(o)] = dy[o], zeros where dy sends nothing.  Coordinates are
 * global (kernels.h); only output variables appear in these maps.
 */
#include <string.h>  /* memset */

#include "kernels.h"
#include "view.h"  /* sw_view_check, sw_view_contains, sw_view_offset */

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

/* A run of output points along y's last dimension from o over which every x index moves
 * linearly: its length (at most `most`) and x's element stride per step.  An expression
 * with div 1 and no modulo moves by its coefficient; one with a modulo by its coefficient
 * until it wraps; one with div > 1 stays put until its quotient changes. */
static int64_t run_of(const sw_index_expr *map, int in_rank, const int64_t *o, int out_rank, const int64_t *xs,
                      int64_t most, int64_t *stride) {
    int last = out_rank - 1;
    int64_t len = most;
    *stride = 0;
    for (int d = 0; d < in_rank; d++) {
        const sw_index_expr *e = &map[d];
        int64_t c = e->coef[last];
        if (c == 0) {
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

/* Moves the len elements of a run between x (stride xstride) and y (contiguous). */
typedef void (*run_fn)(float *x, int64_t xstride, float *y, int64_t len);

static void gather_run(float *x, int64_t xstride, float *y, int64_t len) {
    for (int64_t j = 0; j < len; j++) {
        y[j] = x[j * xstride];
    }
}

static void scatter_run(float *x, int64_t xstride, float *y, int64_t len) {
    for (int64_t j = 0; j < len; j++) {
        x[j * xstride] = y[j];
    }
}

/* Move between x (the input side) and y (the output side, walked in row-major order).
 * strict: every point must land inside x (forward); else points outside are skipped. */
static sw_status walk(const sw_view *x, const sw_index_expr *map, const sw_view *y, run_fn fn, int strict,
                      const char *name) {
    int64_t o[SW_MAX_RANK], idx[SW_MAX_RANK], xs[SW_MAX_RANK];
    int last = y->rank - 1;
    sw_view_strides(x, xs);
    for (int d = 0; d < y->rank; d++) {
        o[d] = y->lo[d];
    }
    float *out = y->data;
    const int64_t hi = sw_view_hi(y, last);
    for (;;) {
        int64_t stride, len = run_of(map, x->rank, o, y->rank, xs, hi - o[last], &stride);
        apply(map, x->rank, o, y->rank, idx);
        int inside = sw_view_contains(x, idx);
        if (inside && len > 1) {   /* the run's last point: a linear walk stays inside if both ends do */
            int64_t end[SW_MAX_RANK], oe[SW_MAX_RANK];
            for (int d = 0; d < y->rank; d++) {
                oe[d] = o[d];
            }
            oe[last] += len - 1;
            apply(map, x->rank, oe, y->rank, end);
            inside = sw_view_contains(x, end);
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
            fn(x->data + sw_view_offset(x, idx), stride, out, len);
        }
        out += len;
        o[last] += len;
        if (o[last] < hi) {
            continue;
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
