/* rotary.c -- rotary position embedding (RoPE, "RoFormer: Enhanced Transformer with Rotary
 * Position Embedding"), in the rotate-half layout Llama uses: along the last dimension
 * (Dh, even; h = Dh / 2) of x (.., T, Dh), at position t (the global index of dimension
 * rank-2),
 *
 *   y[j] = x[j] cos(t f_j) + r[j] sin(t f_j),   r[j] = -x[j + h] (j < h),  x[j - h] (j >= h)
 *   f_j  = base^(-2 (j mod h) / Dh)
 *
 * The op's description reads whole rows of x (as layer_norm's), so x holds every column of
 * y's rows.  The backward is linear in dy: a worker holding part of a row's dy writes the
 * whole row of dx from it (its partial gradient; the parts of a split add up).  Angles and
 * products in double; the frequencies are computed here from base, never stored: a call
 * computes the cos and sin of its positions once (a table (positions, Dh) of doubles). */
#include <math.h>
#include <stdlib.h>   /* malloc, free */

#include "task_env.h"

/* the offset of the row at the multi-index idx (global, its first rank-1 dimensions) in v */
static int64_t row_offset(const sw_view *v, const int64_t *idx) {
    int r = v->rank;
    int64_t off = 0;
    for (int d = 0; d < r - 1; d++) {
        off = off * v->shape[d] + (idx[d] - v->lo[d]);
    }
    return off * v->shape[r - 1];
}

/* advance idx over the leading box [lo, lo + shape) of v's first rank-1 dimensions; 0 after the last */
static int next_row(const sw_view *v, int64_t *idx) {
    for (int d = v->rank - 2; d >= 0; d--) {
        if (++idx[d] < sw_view_hi(v, d)) {
            return 1;
        }
        idx[d] = v->lo[d];
    }
    return 0;
}

static sw_status check_views(const sw_view *rows, const sw_view *box, const char *what) {
    int r = rows->rank;
    if (r < 3 || box->rank != r) {
        return SW_FAIL(SW_ERR_VALUE, "%s: views of rank %d and %d (rank >= 3: (.., T, Dh))", what, r, box->rank);
    }
    int64_t dh = rows->shape[r - 1];
    if (rows->lo[r - 1] != 0 || dh % 2 != 0) {
        return SW_FAIL(SW_ERR_INTERNAL, "%s: the rows must be whole and of even length, got [%lld, +%lld)", what,
                       (long long)rows->lo[r - 1], (long long)dh);
    }
    if (box->lo[r - 1] < 0 || sw_view_hi(box, r - 1) > dh) {
        return SW_FAIL(SW_ERR_INTERNAL, "%s: columns [%lld, %lld) outside the rows of %lld", what,
                       (long long)box->lo[r - 1], (long long)sw_view_hi(box, r - 1), (long long)dh);
    }
    return SW_OK;
}

/* cos and sin of t f_j for the positions t in [t0, t0 + nt) and every column j: cs[2 (i dh + j)] and
 * cs[2 (i dh + j) + 1] for t = t0 + i (NULL with an error set when out of memory) */
static double *angle_table(int64_t t0, int64_t nt, int64_t dh, double base, sw_status *st) {
    double *cs = malloc((size_t)(nt * dh * 2) * sizeof(double));
    if (!cs) {
        *st = SW_FAIL(SW_ERR_NOMEM, "rotary: no memory for a table of %lld x %lld angles", (long long)nt, (long long)dh);
        return NULL;
    }
    for (int64_t j = 0; j < dh; j++) {
        double f = pow(base, -2.0 * (double)(j % (dh / 2)) / (double)dh);
        for (int64_t i = 0; i < nt; i++) {
            double a = (double)(t0 + i) * f;
            cs[2 * (i * dh + j)] = cos(a);
            cs[2 * (i * dh + j) + 1] = sin(a);
        }
    }
    *st = SW_OK;
    return cs;
}

sw_status sw_rotary_forward(const sw_view *x, double base, sw_view *y) {
    SW_TRY(check_views(x, y, "rotary_forward"));
    int r = y->rank;
    for (int d = 0; d < r - 1; d++) {
        if (y->lo[d] < x->lo[d] || sw_view_hi(y, d) > sw_view_hi(x, d)) {
            return SW_FAIL(SW_ERR_INTERNAL, "rotary_forward: x does not cover y's rows in dimension %d", d);
        }
    }
    int64_t idx[SW_MAX_RANK];
    for (int d = 0; d < r - 1; d++) {
        idx[d] = y->lo[d];
    }
    if (sw_view_volume(y) == 0) {
        return SW_OK;
    }
    const int64_t dh = x->shape[r - 1], h = dh / 2, j0 = y->lo[r - 1], nj = y->shape[r - 1];
    sw_status st;
    double *cs = angle_table(y->lo[r - 2], y->shape[r - 2], dh, base, &st);
    if (!cs) {
        return st;
    }
    do {
        const float *xr = x->data + row_offset(x, idx);
        float *yr = y->data + row_offset(y, idx);
        const double *ct = cs + 2 * (idx[r - 2] - y->lo[r - 2]) * dh;
        for (int64_t k = 0; k < nj; k++) {
            int64_t j = j0 + k;
            double rot = j < h ? -(double)xr[j + h] : (double)xr[j - h];
            yr[k] = (float)((double)xr[j] * ct[2 * j] + rot * ct[2 * j + 1]);
        }
    } while (next_row(y, idx));
    free(cs);
    return SW_OK;
}

sw_status sw_rotary_backward(const sw_view *dy, double base, sw_view *dx) {
    SW_TRY(check_views(dx, dy, "rotary_backward"));
    int r = dx->rank;
    if (sw_view_volume(dx) == 0) {
        return SW_OK;
    }
    const int64_t dh = dx->shape[r - 1], h = dh / 2, j0 = dy->lo[r - 1], nj = dy->shape[r - 1];
    int64_t idx[SW_MAX_RANK];
    for (int d = 0; d < r - 1; d++) {
        idx[d] = dx->lo[d];
    }
    sw_status st;
    double *cs = angle_table(dx->lo[r - 2], dx->shape[r - 2], dh, base, &st);
    if (!cs) {
        return st;
    }
    do {
        float *g = dx->data + row_offset(dx, idx);
        int inside = 1;   /* rows dy does not hold get nothing */
        for (int d = 0; d < r - 1; d++) {
            inside &= idx[d] >= dy->lo[d] && idx[d] < sw_view_hi(dy, d);
        }
        for (int64_t j = 0; j < dh; j++) {
            g[j] = 0.0f;
        }
        if (!inside) {
            continue;
        }
        const float *gy = dy->data + row_offset(dy, idx);
        const double *ct = cs + 2 * (idx[r - 2] - dx->lo[r - 2]) * dh;
        /* dx[i] = dy[i] c_i + (i >= h: -dy[i - h] s_{i - h};  i < h: dy[i + h] s_{i + h}),
         * summed over this worker's columns of dy */
        for (int64_t k = 0; k < nj; k++) {
            int64_t j = j0 + k;
            double c = ct[2 * j], s = ct[2 * j + 1];
            g[j] = (float)((double)g[j] + (double)gy[k] * c);
            if (j < h) {
                g[j + h] = (float)((double)g[j + h] - (double)gy[k] * s);
            } else {
                g[j - h] = (float)((double)g[j - h] + (double)gy[k] * s);
            }
        }
    } while (next_row(dx, idx));
    free(cs);
    return SW_OK;
}
