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
 *
 * The common case takes a faster walk with the same arithmetic in the same order: when no
 * expression that moves over y's box divides or wraps, and every operand holds all it reads,
 * each operand moves by a fixed stride per step of each output dimension, the dimensions
 * whose strides chain in every operand merge, and the walk is a few nested counters around
 * one loop per run (squeeze-and-excitation's (N, C, H, W) * (N, C, 1, 1): N*C runs of H*W
 * points, the scale's stride 0), instead of index maps evaluated twice per row (rows of 2-4
 * points at the last stages of a 64 x 64 EfficientNet, where that cost 100-200 ns a point).
 */
#include <string.h>  /* memset */

#include "kernels.h"
#include "simd.h"    /* SW_CLONES */
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

/* ------------------------------------------------------------------ the affine walk */
/* An operand read through an affine map over a box: its element at the box's first point,
 * and its stride per step of each output dimension. */
typedef struct {
    const float *base;
    int64_t stride[SW_MAX_RANK];
} affine_operand;

/* Fills `out` when x's map is affine over the box (lo, shape) -- every expression that moves
 * over it has no division and no wrap -- and x's view holds every element the box reads;
 * 0 otherwise (the caller walks row by row, which also reports or skips reads outside). */
static int affine_over(const sw_view *x, const sw_index_expr *map, const int64_t *lo, const int64_t *shape, int r,
                       affine_operand *out) {
    int64_t xs[SW_MAX_RANK], at_lo[SW_MAX_RANK];
    sw_view_strides(x, xs);
    apply(map, x->rank, lo, r, at_lo);
    for (int k = 0; k < r; k++) {
        out->stride[k] = 0;
    }
    for (int d = 0; d < x->rank; d++) {
        const sw_index_expr *e = &map[d];
        int64_t first = at_lo[d], last = at_lo[d];   /* the smallest and largest index read */
        for (int k = 0; k < r; k++) {
            if (e->coef[k] == 0 || shape[k] == 1) {
                continue;
            }
            if (e->div > 1 || e->mod > 0) {
                return 0;
            }
            int64_t span = e->coef[k] * (shape[k] - 1);
            first += span < 0 ? span : 0;
            last += span > 0 ? span : 0;
            out->stride[k] += e->coef[k] * xs[d];
        }
        if (first < x->lo[d] || last >= sw_view_hi(x, d)) {
            return 0;
        }
    }
    out->base = x->data + sw_view_offset(x, at_lo);
    return 1;
}

/* The box's dimensions for the walk: those of extent 1 dropped, and a dimension merged into
 * the one inside it when every operand's stride chains (stride[d] = stride[d+1] * extent[d+1]),
 * so that the innermost one is as long as possible.  The box's own buffer (y, or dy) is
 * dense: its strides are the row-major ones.  Returns the number of dimensions left (>= 1). */
typedef struct {
    int dims;
    int64_t extent[SW_MAX_RANK];
    int64_t stride[3][SW_MAX_RANK];   /* [0]: the box's buffer, [1], [2]: the operands */
} affine_walk;

static void walk_dims(affine_walk *w, const int64_t *shape, int r, const affine_operand *ops, int nops) {
    int64_t dense = 1, own[SW_MAX_RANK];
    for (int k = r - 1; k >= 0; k--) {
        own[k] = dense;
        dense *= shape[k];
    }
    w->dims = 0;
    int64_t ext[SW_MAX_RANK], st[3][SW_MAX_RANK];
    int n = 0;   /* built innermost first, reversed below */
    for (int k = r - 1; k >= 0; k--) {
        if (shape[k] == 1) {
            continue;
        }
        int chains = n > 0 && own[k] == st[0][n - 1] * ext[n - 1];
        for (int i = 0; i < nops && chains; i++) {
            chains = ops[i].stride[k] == st[1 + i][n - 1] * ext[n - 1];
        }
        if (chains) {   /* the strides stay the inner dimension's */
            ext[n - 1] *= shape[k];
            continue;
        }
        ext[n] = shape[k];
        st[0][n] = own[k];
        for (int i = 0; i < nops; i++) {
            st[1 + i][n] = ops[i].stride[k];
        }
        n++;
    }
    if (n == 0) {   /* a single point */
        ext[0] = 1;
        for (int i = 0; i < 3; i++) {
            st[i][0] = 0;
        }
        n = 1;
    }
    w->dims = n;
    for (int j = 0; j < n; j++) {
        w->extent[j] = ext[n - 1 - j];
        for (int i = 0; i < 3; i++) {
            w->stride[i][j] = i <= nops ? st[i][n - 1 - j] : 0;
        }
    }
}

/* One run of the forward: out[j] = f(a[j * sa], b[j * sb]), the strides 0 and 1 spelled out so
 * that the compiler vectorizes them (a product or a sum per point: the same bits as the rows). */
SW_CLONES static void forward_run(int op, float *restrict out, const float *a, int64_t sa, const float *b, int64_t sb,
                                  int64_t len) {
    if (op == SW_BCAST_MUL && sa == 1 && sb == 0) {
        const float v = b[0];
        for (int64_t j = 0; j < len; j++) {
            out[j] = a[j] * v;
        }
    } else if (op == SW_BCAST_MUL && sa == 0 && sb == 1) {
        const float v = a[0];
        for (int64_t j = 0; j < len; j++) {
            out[j] = v * b[j];
        }
    } else if (op == SW_BCAST_MUL && sa == 1 && sb == 1) {
        for (int64_t j = 0; j < len; j++) {
            out[j] = a[j] * b[j];
        }
    } else if (op == SW_BCAST_MUL) {
        for (int64_t j = 0; j < len; j++) {
            out[j] = a[j * sa] * b[j * sb];
        }
    } else if (op == SW_BCAST_ADD) {
        for (int64_t j = 0; j < len; j++) {
            out[j] = a[j * sa] + b[j * sb];
        }
    } else {
        for (int64_t j = 0; j < len; j++) {
            out[j] = a[j * sa];
        }
    }
}

/* One run of the backward: dx[j * sx] += g[j] (times o[j * so] for mul), in j's order.  With
 * sx == 0 every point adds into one element: a running sum, as the rows' loop adds them. */
SW_CLONES static void backward_run(int mul, float *dx, int64_t sx, const float *restrict g, const float *o, int64_t so,
                                   int64_t len) {
    if (sx == 0) {
        float acc = dx[0];
        if (mul) {
            for (int64_t j = 0; j < len; j++) {
                acc += g[j] * o[j * so];
            }
        } else {
            for (int64_t j = 0; j < len; j++) {
                acc += g[j];
            }
        }
        dx[0] = acc;
    } else if (sx == 1 && mul && so == 0) {
        const float v = o[0];
        for (int64_t j = 0; j < len; j++) {
            dx[j] += g[j] * v;
        }
    } else if (sx == 1 && mul && so == 1) {
        for (int64_t j = 0; j < len; j++) {
            dx[j] += g[j] * o[j];
        }
    } else if (mul) {
        for (int64_t j = 0; j < len; j++) {
            dx[j * sx] += g[j] * o[j * so];
        }
    } else {
        for (int64_t j = 0; j < len; j++) {
            dx[j * sx] += g[j];
        }
    }
}

/* The walk over the box: every run in row-major order; `out` or `dx` per direction. */
static void affine_forward(int op, const affine_walk *w, float *y, const float *a, const float *b) {
    const int m = w->dims, inner = m - 1;
    const int64_t len = w->extent[inner];
    int64_t count[SW_MAX_RANK] = {0};
    for (;;) {
        forward_run(op, y, a, w->stride[1][inner], b, w->stride[2][inner], len);
        int d = inner - 1;
        for (; d >= 0; d--) {
            y += w->stride[0][d];
            a += w->stride[1][d];
            b += w->stride[2][d];
            if (++count[d] < w->extent[d]) {
                break;
            }
            count[d] = 0;
            y -= w->stride[0][d] * w->extent[d];
            a -= w->stride[1][d] * w->extent[d];
            b -= w->stride[2][d] * w->extent[d];
        }
        if (d < 0) {
            return;
        }
    }
}

static void affine_backward(int mul, const affine_walk *w, const float *g, float *dx, const float *o) {
    const int m = w->dims, inner = m - 1;
    const int64_t len = w->extent[inner];
    int64_t count[SW_MAX_RANK] = {0};
    for (;;) {
        backward_run(mul, dx, w->stride[1][inner], g, o, w->stride[2][inner], len);
        int d = inner - 1;
        for (; d >= 0; d--) {
            g += w->stride[0][d];
            dx += w->stride[1][d];
            o += w->stride[2][d];
            if (++count[d] < w->extent[d]) {
                break;
            }
            count[d] = 0;
            g -= w->stride[0][d] * w->extent[d];
            dx -= w->stride[1][d] * w->extent[d];
            o -= w->stride[2][d] * w->extent[d];
        }
        if (d < 0) {
            return;
        }
    }
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
    affine_operand fa, fb[1];
    if (affine_over(a, map_a, y->lo, y->shape, r, &fa) && (!binary || affine_over(b, map_b, y->lo, y->shape, r, fb))) {
        affine_operand ops[2] = {fa, binary ? fb[0] : fa};
        affine_walk w;
        walk_dims(&w, y->shape, r, ops, 2);
        affine_forward(op, &w, y->data, fa.base, binary ? fb[0].base : fa.base);
        return SW_OK;
    }
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
    affine_operand fx, fo[1];
    if (affine_over(dx, map_x, dy->lo, dy->shape, r, &fx) && (!mul || affine_over(other, map_o, dy->lo, dy->shape, r, fo))) {
        affine_operand ops[2] = {fx, mul ? fo[0] : fx};
        affine_walk w;
        walk_dims(&w, dy->shape, r, ops, 2);
        affine_backward(mul, &w, dy->data, dx->data + (fx.base - dx->data), mul ? fo[0].base : fx.base);
        return SW_OK;
    }
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
