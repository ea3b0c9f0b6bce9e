/* bcast.c -- ops that read their inputs through broadcasting index maps: expand, mul and
 * broadcast_add (and nearest upsampling, whose maps divide), forward and backward.
 *
 *   y[o]  = f(a[map_a(o)], b[map_b(o)])     f: a (expand), a + b (broadcast_add), a * b (mul)
 *   da[i] = sum over the o with map_a(o) = i of dy[o]      (times b[map_b(o)] for mul)
 *
 * map_x(o) is the op description's index map (python/shardwise/ops/bcast.py): one
 * expression per input dimension over the output's coordinates, ((sum_k coef[k] o[k] +
 * offset) / div) % mod; a broadcast dimension has no variable (coefficient 0), so many
 * outputs read one input element and its gradient is their sum.  Coordinates are global
 * (kernels.h).  The walk goes row by row along y's last dimension; along a row an input
 * moves by a constant stride (0 when broadcast) unless one of its expressions divides or
 * wraps, and then point by point.  Gradients are summed in y's row-major order, so the
 * result does not depend on the plan's cut of y beyond the order of partial sums.
 */
#include <string.h>  /* memset */

#include "kernels.h"
#include "../core/view.h"  /* sw_view_check, sw_view_contains, sw_view_offset, sw_view_strides */

/* x's index of output point o through map (one expression per x dimension). */
static void apply(const sw_index_expr *map, int in_rank, const int64_t *o, int out_rank, int64_t *idx) {
    for (int d = 0; d < in_rank; d++) {
        const sw_index_expr *e = &map[d];
        int64_t v = e->offset;
        for (int k = 0; k < out_rank; k++) {
            v += e->coef[k] * o[k];
        }
        v = e->div > 1 ? v / e->div : v;   /* indices are never negative: truncation is floor */
        idx[d] = e->mod > 0 ? v % e->mod : v;
    }
}

/* x's element stride per step along y's last dimension, or -1 when some expression that
 * moves with it divides or wraps (then the row is walked point by point). */
static int64_t row_stride(const sw_index_expr *map, const sw_view *x, int out_rank) {
    int64_t xs[SW_MAX_RANK], stride = 0;
    sw_view_strides(x, xs);
    for (int d = 0; d < x->rank; d++) {
        int64_t c = map[d].coef[out_rank - 1];
        if (c == 0) {
            continue;
        }
        if (map[d].div > 1 || map[d].mod > 0) {
            return -1;
        }
        stride += c * xs[d];
    }
    return stride;
}

static sw_status check_map(const sw_index_expr *map, const sw_view *x, const char *name) {
    if (!map) {
        return SW_FAIL(SW_ERR_VALUE, "%s: NULL index map", name);
    }
    for (int d = 0; d < x->rank; d++) {
        if (map[d].div < 1 || map[d].mod < 0) {
            return SW_FAIL(SW_ERR_VALUE, "%s: bad index expression for dimension %d", name, d);
        }
    }
    return SW_OK;
}

/* One input of a row: the pointer to its element at the row's first point, its stride
 * (-1: point by point through the map), and whether the row's ends lie inside its view. */
typedef struct {
    const sw_view *v;
    const sw_index_expr *map;
    int64_t stride;
} operand;

/* The element of x read at output point o, or NULL when it lies outside x's view. */
static float *at(const operand *x, const int64_t *o, int out_rank) {
    int64_t idx[SW_MAX_RANK];
    apply(x->map, x->v->rank, o, out_rank, idx);
    return sw_view_contains(x->v, idx) ? x->v->data + sw_view_offset(x->v, idx) : NULL;
}

/* Does the row of len points from o read x inside x's view throughout?  (An affine walk
 * stays inside when both ends do.) */
static int row_inside(const operand *x, int64_t *o, int out_rank, int64_t len) {
    if (x->stride < 0) {
        return 0;
    }
    int last = out_rank - 1;
    int ok = at(x, o, out_rank) != NULL;
    o[last] += len - 1;
    ok = ok && at(x, o, out_rank) != NULL;
    o[last] -= len - 1;
    return ok;
}

/* The next row of v's box (o's last coordinate at the box's start); 0 after the last. */
static int next_row(const sw_view *v, int64_t *o) {
    for (int d = v->rank - 2; d >= 0; d--) {
        if (++o[d] < sw_view_hi(v, d)) {
            return 1;
        }
        o[d] = v->lo[d];
    }
    return 0;
}

static float combine(int op, float a, float b) {
    return op == SW_BCAST_MUL ? a * b : op == SW_BCAST_ADD ? a + b : a;
}

sw_status sw_bcast_forward(int op, const sw_view *a, const sw_index_expr *map_a, const sw_view *b,
                           const sw_index_expr *map_b, sw_view *y) {
    const char *name = "bcast_forward";
    sw_status s;
    int binary = op != SW_BCAST_COPY;
    if ((s = sw_view_check(y, y ? y->rank : 0, name)) != SW_OK || (s = sw_view_check(a, a ? a->rank : 0, name)) != SW_OK ||
        (s = check_map(map_a, a, name)) != SW_OK) {
        return s;
    }
    if (binary && ((s = sw_view_check(b, b ? b->rank : 0, name)) != SW_OK || (s = check_map(map_b, b, name)) != SW_OK)) {
        return s;
    }
    if (sw_view_volume(y) == 0) {
        return SW_OK;
    }
    const int r = y->rank, last = r - 1;
    const int64_t len = y->shape[last];
    operand xa = {a, map_a, row_stride(map_a, a, r)}, xb = {b, map_b, binary ? row_stride(map_b, b, r) : 0};
    int64_t o[SW_MAX_RANK];
    for (int d = 0; d < r; d++) {
        o[d] = y->lo[d];
    }
    float *out = y->data;
    do {
        if (row_inside(&xa, o, r, len) && (!binary || row_inside(&xb, o, r, len))) {
            const float *pa = at(&xa, o, r), *pb = binary ? at(&xb, o, r) : NULL;
            const int64_t sa = xa.stride, sb = xb.stride;
            if (op == SW_BCAST_MUL) {
                for (int64_t j = 0; j < len; j++) {
                    out[j] = pa[j * sa] * pb[j * sb];
                }
            } else if (op == SW_BCAST_ADD) {
                for (int64_t j = 0; j < len; j++) {
                    out[j] = pa[j * sa] + pb[j * sb];
                }
            } else {
                for (int64_t j = 0; j < len; j++) {
                    out[j] = pa[j * sa];
                }
            }
        } else {   /* point by point: a map that divides, or a read outside a view (an error) */
            for (int64_t j = 0; j < len; j++) {
                o[last] = y->lo[last] + j;
                const float *pa = at(&xa, o, r), *pb = binary ? at(&xb, o, r) : NULL;
                if (!pa || (binary && !pb)) {
                    return SW_FAIL(SW_ERR_VALUE, "%s: an input view does not hold an element the output reads", name);
                }
                out[j] = combine(op, *pa, binary ? *pb : 0.0f);
            }
            o[last] = y->lo[last];
        }
        out += len;
    } while (next_row(y, o));
    return SW_OK;
}

sw_status sw_bcast_backward(int op, const sw_index_expr *map_x, const sw_view *other, const sw_index_expr *map_o,
                            const sw_view *dy, sw_view *dx) {
    const char *name = "bcast_backward";
    sw_status s;
    int mul = op == SW_BCAST_MUL;
    if ((s = sw_view_check(dy, dy ? dy->rank : 0, name)) != SW_OK ||
        (s = sw_view_check(dx, dx ? dx->rank : 0, name)) != SW_OK || (s = check_map(map_x, dx, name)) != SW_OK) {
        return s;
    }
    if (mul && ((s = sw_view_check(other, other ? other->rank : 0, name)) != SW_OK ||
                (s = check_map(map_o, other, name)) != SW_OK)) {
        return s;
    }
    memset(dx->data, 0, sizeof(float) * (size_t)sw_view_volume(dx));
    if (sw_view_volume(dy) == 0) {
        return SW_OK;
    }
    const int r = dy->rank, last = r - 1;
    const int64_t len = dy->shape[last];
    operand xx = {dx, map_x, row_stride(map_x, dx, r)}, xo = {other, map_o, mul ? row_stride(map_o, other, r) : 0};
    int64_t o[SW_MAX_RANK];
    for (int d = 0; d < r; d++) {
        o[d] = dy->lo[d];
    }
    const float *g = dy->data;
    do {
        if (row_inside(&xx, o, r, len) && (!mul || row_inside(&xo, o, r, len))) {
            float *px = at(&xx, o, r);
            const float *po = mul ? at(&xo, o, r) : NULL;
            const int64_t sx = xx.stride, so = xo.stride;
            if (mul) {
                for (int64_t j = 0; j < len; j++) {
                    px[j * sx] += g[j] * po[j * so];
                }
            } else {
                for (int64_t j = 0; j < len; j++) {
                    px[j * sx] += g[j];
                }
            }
        } else {   /* point by point; points whose element lies outside dx's view send nothing here */
            for (int64_t j = 0; j < len; j++) {
                o[last] = dy->lo[last] + j;
                float *px = at(&xx, o, r);
                if (!px) {
                    continue;
                }
                const float *po = mul ? at(&xo, o, r) : NULL;
                if (mul && !po) {
                    return SW_FAIL(SW_ERR_VALUE, "%s: the other operand's view does not hold an element dy needs",
                                   name);
                }
                *px += mul ? g[j] * *po : g[j];
            }
            o[last] = dy->lo[last];
        }
        g += len;
    } while (next_row(dy, o));
    return SW_OK;
}
