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

/* The next point of v's box in row-major order; 0 after the last. */
static int next_point(const sw_view *v, int64_t *o) {
    for (int d = v->rank - 1; d >= 0; d--) {
        if (++o[d] < sw_view_hi(v, d)) {
            return 1;
        }
        o[d] = v->lo[d];
    }
    return 0;
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
    int64_t o[SW_MAX_RANK], idx[SW_MAX_RANK];
    for (int d = 0; d < y->rank; d++) {
        o[d] = y->lo[d];
    }
    float *out = y->data;
    do {
        apply(map, x->rank, o, y->rank, idx);
        if (!sw_view_contains(x, idx)) {
            return SW_FAIL(SW_ERR_VALUE, "%s: the input view does not hold an element the output reads", name);
        }
        *out++ = x->data[sw_view_offset(x, idx)];
    } while (next_point(y, o));
    return SW_OK;
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
    int64_t o[SW_MAX_RANK], idx[SW_MAX_RANK];
    for (int d = 0; d < dy->rank; d++) {
        o[d] = dy->lo[d];
    }
    const float *g = dy->data;
    do {
        apply(map, dx->rank, o, dy->rank, idx);
        if (sw_view_contains(dx, idx)) {
            dx->data[sw_view_offset(dx, idx)] = *g;
        }
        g++;
    } while (next_point(dy, o));
    return SW_OK;
}
