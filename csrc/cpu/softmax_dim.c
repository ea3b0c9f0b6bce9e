/* softmax_dim.c -- softmax along any dimension (not the loss: softmax.c), optionally of
 * scaled, causally masked attention scores.
 *
 *   p[.., j, ..] = exp(s x[j] - max) / sum_k exp(s x[k] - max)   over the line along `axis`
 *   causal (axis = rank-1, scores (.., T_q, T_k)): keys k > query q are left out (p = 0)
 *   dx[k] = s p[k] (dy[k] - sum_j dy[j] p[j])                     j over dy's part of the line
 *   (p: the forward's output when the worker holds whole lines of it, else recomputed from x)
 *
 * x holds whole lines along the axis; y and dy may be a part of them (a split of the
 * softmax's own dimension: every worker recomputes the line's max and sum in the same
 * order, so the parts are the same bits; the gradient is linear in dy, so the partial
 * gradients of the parts add up).  The other dimensions are at global coordinates and
 * every view holds the output box's range of them.  Sums in double, in vmath.h's fixed lanes;
 * exp is vmath.h's (vectorizes), and contiguous lines (the last axis) take vectorized loops.
 */
#include "kernels.h"
#include "simd.h"   /* SW_CLONES */
#include "vmath.h"  /* sw_vexpf, sw_line_max, sw_line_exp_sum, sw_line_dot */
#include "../core/view.h"  /* sw_view_check, sw_view_check_covers, sw_view_check_range, sw_view_offset */

typedef struct {
    int64_t len;     /* the line's length (x's whole extent along the axis) */
    int64_t stride;  /* x's element stride along the axis */
} line_shape;

/* The first key masked in the line of query q: len without a mask. */
static int64_t keys_end(int causal, const int64_t *idx, int rank, int64_t len) {
    if (!causal) {
        return len;
    }
    int64_t q = idx[rank - 2] + 1;
    return q < len ? q : len;
}

/* Max and 1 / sum of exp over the line's first `end` keys starting at xl (vmath.h's lanes:
 * the same bits wherever the line is computed, whole or in parts). */
static void line_stats(const float *xl, const line_shape *ls, int64_t end, float scale, float *mx, double *inv) {
    *mx = sw_line_max(xl, ls->stride, end, scale);
    *inv = 1.0 / sw_line_exp_sum(xl, ls->stride, end, scale, *mx, NULL, 0);
}

/* One whole line of the forward: p = exp(s x - max) / sum over the first `end` keys, 0 after.
 * Strides xs, ys; SW_INLINE, so that the contiguous call below specializes to stride 1. */
static SW_INLINE void forward_line(const float *restrict xl, int64_t xs, float *restrict yl, int64_t ys, int64_t len,
                                   int64_t end, float scale) {
    const float mx = sw_line_max(xl, xs, end, scale);
    const double inv = 1.0 / sw_line_exp_sum(xl, xs, end, scale, mx, yl, ys);   /* line_stats' bits */
    for (int64_t k = 0; k < end; k++) {
        yl[k * ys] = (float)((double)yl[k * ys] * inv);
    }
    for (int64_t k = end; k < len; k++) {
        yl[k * ys] = 0.0f;
    }
}

SW_CLONES static void forward_whole_line(const float *xl, int64_t xs, float *yl, int64_t ys, int64_t len, int64_t end,
                                         float scale) {
    if (xs == 1 && ys == 1) {
        forward_line(xl, 1, yl, 1, len, end, scale);
    } else {
        forward_line(xl, xs, yl, ys, len, end, scale);
    }
}

/* One whole line of the backward from the forward's p: dx = s p (dy - dot), dot = sum dy p over
 * dy's keys [j0, j1) (dy's part of the line, dl its first element). */
static SW_INLINE void backward_line(const float *restrict pl, int64_t ps, const float *restrict dl, int64_t ds,
                                    float *restrict gl, int64_t gs, int64_t len, int64_t j0, int64_t j1, float scale) {
    const double dot = sw_line_dot(dl, ds, pl + j0 * ps, ps, j1 - j0);
    for (int64_t k = 0; k < j0; k++) {
        gl[k * gs] = (float)((double)scale * pl[k * ps] * -dot);
    }
    for (int64_t k = j0; k < j1; k++) {
        gl[k * gs] = (float)((double)scale * pl[k * ps] * ((double)dl[(k - j0) * ds] - dot));
    }
    for (int64_t k = j1; k < len; k++) {
        gl[k * gs] = (float)((double)scale * pl[k * ps] * -dot);
    }
}

SW_CLONES static void backward_whole_line(const float *pl, int64_t ps, const float *dl, int64_t ds, float *gl,
                                          int64_t gs, int64_t len, int64_t j0, int64_t j1, float scale) {
    if (ps == 1 && ds == 1 && gs == 1) {
        backward_line(pl, 1, dl, 1, gl, 1, len, j0, j1, scale);
    } else {
        backward_line(pl, ps, dl, ds, gl, gs, len, j0, j1, scale);
    }
}

static sw_status check_views(const sw_view *x, const sw_view *y, int axis, const char *name, const char *yname) {
    sw_status s;
    if ((s = sw_view_check(y, y ? y->rank : 0, yname)) != SW_OK ||
        (s = sw_view_check(x, y->rank, name)) != SW_OK) {
        return s;
    }
    if (axis < 0 || axis >= y->rank) {
        return SW_FAIL(SW_ERR_VALUE, "%s: axis %d out of range for rank %d", name, axis, y->rank);
    }
    if ((s = sw_view_check_range(x, axis, 0, x->shape[axis], name, "softmax (whole lines)")) != SW_OK) {
        return s;
    }
    for (int d = 0; d < y->rank; d++) {
        if ((s = sw_view_check_covers(x, d, name, y, d, yname, "index")) != SW_OK) {
            return s;
        }
    }
    return SW_OK;
}

/* Next index of the box [lo, hi) with dimension `skip` held at lo: 0 after the last. */
static int next_index(int64_t *idx, const int64_t *lo, const int64_t *hi, int rank, int skip) {
    for (int d = rank - 1; d >= 0; d--) {
        if (d == skip) {
            continue;
        }
        if (++idx[d] < hi[d]) {
            return 1;
        }
        idx[d] = lo[d];
    }
    return 0;
}

static void box_of(const sw_view *v, int64_t *lo, int64_t *hi) {
    for (int d = 0; d < v->rank; d++) {
        lo[d] = v->lo[d];
        hi[d] = sw_view_hi(v, d);
    }
}

sw_status sw_softmax_dim_forward(const sw_view *x, int axis, float scale, int causal, sw_view *y) {
    sw_status s = check_views(x, y, axis, "softmax_dim_forward: x", "softmax_dim_forward: y");
    if (s != SW_OK) {
        return s;
    }
    if (causal && (axis != y->rank - 1 || y->rank < 2)) {
        return SW_FAIL(SW_ERR_VALUE, "softmax_dim_forward: a causal mask needs the last axis of rank >= 2 scores");
    }
    if (sw_view_volume(y) == 0) {
        return SW_OK;
    }
    int64_t lo[SW_MAX_RANK], hi[SW_MAX_RANK], idx[SW_MAX_RANK], ys[SW_MAX_RANK], xs[SW_MAX_RANK];
    box_of(y, lo, hi);
    sw_view_strides(y, ys);
    sw_view_strides(x, xs);
    line_shape ls = {x->shape[axis], xs[axis]};
    for (int d = 0; d < y->rank; d++) {
        idx[d] = lo[d];
    }
    do {
        int64_t at[SW_MAX_RANK];
        for (int d = 0; d < y->rank; d++) {
            at[d] = d == axis ? 0 : idx[d];
        }
        const float *xl = x->data + sw_view_offset(x, at);
        float *yl = y->data + sw_view_offset(y, idx);
        int64_t end = keys_end(causal, idx, y->rank, ls.len);
        if (lo[axis] == 0 && hi[axis] == ls.len) {   /* the whole line: one exp per element, kept in y */
            forward_whole_line(xl, ls.stride, yl, ys[axis], ls.len, end, scale);
            continue;
        }
        float mx;
        double inv;
        line_stats(xl, &ls, end, scale, &mx, &inv);
        for (int64_t j = lo[axis]; j < hi[axis]; j++) {
            yl[(j - lo[axis]) * ys[axis]] = j < end ? (float)((double)sw_vexpf(scale * xl[j * ls.stride] - mx) * inv)
                                                    : 0.0f;
        }
    } while (next_index(idx, lo, hi, y->rank, axis));
    return SW_OK;
}

sw_status sw_softmax_dim_backward(const sw_view *x, const sw_view *p, const sw_view *dy, int axis, float scale,
                                  int causal, sw_view *dx) {
    sw_status s = check_views(x, dy, axis, "softmax_dim_backward: x", "softmax_dim_backward: dy");
    if (s == SW_OK) {
        s = check_views(x, dx, axis, "softmax_dim_backward: x", "softmax_dim_backward: dx");
    }
    if (s == SW_OK) {
        s = sw_view_check_range(dx, axis, 0, x->shape[axis], "softmax_dim_backward: dx", "softmax (whole lines)");
    }
    if (s == SW_OK && p) {
        s = check_views(p, dx, axis, "softmax_dim_backward: p", "softmax_dim_backward: dx");
    }
    if (s != SW_OK) {
        return s;
    }
    if (causal && (axis != dx->rank - 1 || dx->rank < 2)) {
        return SW_FAIL(SW_ERR_VALUE, "softmax_dim_backward: a causal mask needs the last axis of rank >= 2 scores");
    }
    if (sw_view_volume(dx) == 0) {
        return SW_OK;
    }
    int64_t lo[SW_MAX_RANK], hi[SW_MAX_RANK], idx[SW_MAX_RANK], ds[SW_MAX_RANK], xs[SW_MAX_RANK], gs[SW_MAX_RANK];
    int64_t ps[SW_MAX_RANK];
    box_of(dx, lo, hi);
    sw_view_strides(dx, gs);
    if (p) {
        sw_view_strides(p, ps);
    }
    sw_view_strides(dy, ds);
    sw_view_strides(x, xs);
    line_shape ls = {x->shape[axis], xs[axis]};
    const int64_t j0 = dy->lo[axis], j1 = sw_view_hi(dy, axis);
    for (int d = 0; d < dx->rank; d++) {
        idx[d] = lo[d];
    }
    do {
        float *gl = dx->data + sw_view_offset(dx, idx);
        int inside = 1;   /* does dy hold this line's other coordinates? */
        int64_t at[SW_MAX_RANK];
        for (int d = 0; d < dx->rank; d++) {
            at[d] = d == axis ? j0 : idx[d];
            inside &= d == axis || (idx[d] >= dy->lo[d] && idx[d] < sw_view_hi(dy, d));
        }
        if (!inside || j1 <= j0) {
            for (int64_t k = 0; k < ls.len; k++) {
                gl[k * gs[axis]] = 0.0f;
            }
            continue;
        }
        const float *dl = dy->data + sw_view_offset(dy, at);
        at[axis] = 0;
        const float *xl = x->data + sw_view_offset(x, at);
        int64_t end = keys_end(causal, idx, dx->rank, ls.len);
        if (p) {   /* the forward's probabilities of the whole line: no exp */
            backward_whole_line(p->data + sw_view_offset(p, at), ps[axis], dl, ds[axis], gl, gs[axis], ls.len, j0, j1,
                                scale);
            continue;
        }
        float mx;
        double inv, dot = 0.0;
        line_stats(xl, &ls, end, scale, &mx, &inv);
        for (int64_t j = j0; j < j1 && j < end; j++) {
            dot += (double)dl[(j - j0) * ds[axis]] * ((double)sw_vexpf(scale * xl[j * ls.stride] - mx) * inv);
        }
        for (int64_t k = 0; k < ls.len; k++) {
            double p = k < end ? (double)sw_vexpf(scale * xl[k * ls.stride] - mx) * inv : 0.0;
            double g = k >= j0 && k < j1 ? (double)dl[(k - j0) * ds[axis]] : 0.0;
            gl[k * gs[axis]] = (float)((double)scale * p * (g - dot));
        }
    } while (next_index(idx, lo, hi, dx->rank, axis));
    return SW_OK;
}
