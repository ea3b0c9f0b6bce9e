/* groupnorm.c -- group normalization (torch.nn.GroupNorm) on (N, C, H, W) views.
 *
 * The C channels form C / cg groups of cg consecutive channels; per sample n and group,
 * over the group's M = cg * H * W elements:
 *   mean = sum x / M      var = sum (x - mean)^2 / M   (biased, as PyTorch)
 *   xhat = (x - mean) * invstd,  invstd = 1 / sqrt(var + eps)
 *   y[n, c, h, w] = xhat * w[c] + b[c]                 (no w, b: y = xhat; affine=False)
 *   dx = invstd * (g - S1 / M - xhat S2 / M),  g = dy w[c] (dy without w),
 *        S1 = sum g,  S2 = sum g xhat                  sums over dy's part of the group
 *   dw[c] = sum over (n, h, w) of dy xhat,  db[c] = sum of dy (bias.c)
 *
 * x holds whole groups: its channel range starts and ends on group boundaries and it has
 * every row and column (a group of one sample is then cg * H * W contiguous floats, whose
 * moments are vmath.h's sw_row_moments, as layer norm's rows).  y and dy may be any box
 * inside x's (a split of the channels inside a group, or of the rows or columns, recomputes
 * the group's statistics on every worker, in one order: the same bits everywhere).  The data
 * gradient is linear in dy, so each worker's partial gradient over its box adds up to the
 * whole; dx has x's box.  Sums in double, in fixed orders (deterministic).
 */
#include <math.h>  /* sqrt */

#include "kernels.h"
#include "vmath.h"  /* sw_row_moments */
#include "../core/view.h"   /* sw_view_check, sw_view_check_covers, sw_view_hi */

/* x (N-range, whole groups of cg channels, all H, all W); `other` a box inside it. */
static sw_status check_groups(const sw_view *x, int64_t cg, const sw_view *other, const char *name,
                              const char *oname) {
    sw_status s;
    if ((s = sw_view_check(x, 4, name)) != SW_OK || (s = sw_view_check(other, 4, oname)) != SW_OK) {
        return s;
    }
    if (cg < 1 || x->lo[1] % cg != 0 || x->shape[1] % cg != 0 || x->lo[2] != 0 || x->lo[3] != 0) {
        return SW_FAIL(SW_ERR_VALUE, "%s: channels [%lld, +%lld) rows from %lld columns from %lld are not whole "
                       "groups of %lld channels over every row and column", name, (long long)x->lo[1],
                       (long long)x->shape[1], (long long)x->lo[2], (long long)x->lo[3], (long long)cg);
    }
    static const char *const dims[4] = {"sample", "channel", "row", "column"};
    for (int d = 0; d < 4; d++) {
        if ((s = sw_view_check_covers(x, d, name, other, d, oname, dims[d])) != SW_OK) {
            return s;
        }
    }
    return SW_OK;
}

/* A parameter (C) covering channels [c0, c0 + cb): NULL is allowed (no affine). */
static sw_status check_param(const sw_view *p, const sw_view *box, const char *name) {
    sw_status s;
    if (!p) {
        return SW_OK;
    }
    if ((s = sw_view_check(p, 1, name)) != SW_OK ||
        (s = sw_view_check_covers(p, 0, name, box, 1, "the output", "channel")) != SW_OK) {
        return s;
    }
    return SW_OK;
}

/* The index of the first float of sample n, channel c in v (global coordinates; v has all rows
 * and columns). */
static int64_t at(const sw_view *v, int64_t n, int64_t c) {
    return ((n - v->lo[0]) * v->shape[1] + (c - v->lo[1])) * v->shape[2] * v->shape[3];
}

/* Mean and invstd of sample n's group starting at channel gc. */
static void group_moments(const sw_view *x, int64_t n, int64_t gc, int64_t cg, double eps, double *mu,
                          double *inv) {
    sw_row_moments(x->data + at(x, n, gc), cg * x->shape[2] * x->shape[3], eps, 0, mu, inv);
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

sw_status sw_group_norm_forward(const sw_view *x, const sw_view *w, const sw_view *b, int64_t cg, double eps,
                                sw_view *y) {
    sw_status s;
    if ((s = check_groups(x, cg, y, "group_norm_forward: x", "y")) != SW_OK ||
        (s = check_param(w, y, "group_norm_forward: w")) != SW_OK ||
        (s = check_param(b, y, "group_norm_forward: b")) != SW_OK) {
        return s;
    }
    const int64_t c0 = y->lo[1], c1 = sw_view_hi(y, 1), h0 = y->lo[2], hb = y->shape[2];
    const int64_t w0 = y->lo[3], wb = y->shape[3], width = x->shape[3];
    float *out = y->data;   /* y's elements in row-major order */
    for (int64_t n = y->lo[0]; n < sw_view_hi(y, 0); n++) {
        for (int64_t gc = c0 - c0 % cg; gc < c1; gc += cg) {
            double mu, inv;
            group_moments(x, n, gc, cg, eps, &mu, &inv);
            for (int64_t c = max64(gc, c0); c < min64(gc + cg, c1); c++) {
                const double wc = w ? (double)w->data[c - w->lo[0]] : 1.0;
                const double bc = b ? (double)b->data[c - b->lo[0]] : 0.0;
                const float *xc = x->data + at(x, n, c);
                for (int64_t h = h0; h < h0 + hb; h++) {
                    const float *xr = xc + h * width + w0;
                    for (int64_t k = 0; k < wb; k++) {
                        *out++ = (float)((((double)xr[k] - mu) * inv) * wc + bc);
                    }
                }
            }
        }
    }
    return SW_OK;
}

sw_status sw_group_norm_backward_data(const sw_view *x, const sw_view *w, const sw_view *dy, int64_t cg,
                                      double eps, sw_view *dx) {
    sw_status s;
    if ((s = check_groups(x, cg, dy, "group_norm_backward_data: x", "dy")) != SW_OK ||
        (s = check_groups(dx, cg, dy, "group_norm_backward_data: dx", "dy")) != SW_OK ||
        (s = check_param(w, dy, "group_norm_backward_data: w")) != SW_OK ||
        (s = sw_view_check_covers(x, 1, "group_norm_backward_data: x", dx, 1, "dx", "channel")) != SW_OK ||
        (s = sw_view_check_covers(x, 0, "group_norm_backward_data: x", dx, 0, "dx", "sample")) != SW_OK) {
        return s;
    }
    if (dx->shape[2] != x->shape[2] || dx->shape[3] != x->shape[3]) {
        return SW_FAIL(SW_ERR_VALUE, "group_norm_backward_data: dx has %lldx%lld rows and columns, x %lldx%lld",
                       (long long)dx->shape[2], (long long)dx->shape[3], (long long)x->shape[2],
                       (long long)x->shape[3]);
    }
    const int64_t height = x->shape[2], width = x->shape[3], m = cg * height * width;
    const int64_t c0 = dy->lo[1], c1 = sw_view_hi(dy, 1), h0 = dy->lo[2], h1 = sw_view_hi(dy, 2);
    const int64_t w0 = dy->lo[3], w1 = sw_view_hi(dy, 3), hb = dy->shape[2], wb = dy->shape[3];
    for (int64_t n = dx->lo[0]; n < sw_view_hi(dx, 0); n++) {
        const int in_n = n >= dy->lo[0] && n < sw_view_hi(dy, 0);
        for (int64_t gc = dx->lo[1]; gc < sw_view_hi(dx, 1); gc += cg) {
            float *dg = dx->data + at(dx, n, gc);
            const int64_t lo = max64(gc, c0), hi = min64(gc + cg, c1);
            if (!in_n || lo >= hi) {   /* no gradient reaches this group from dy's box */
                for (int64_t k = 0; k < m; k++) {
                    dg[k] = 0.0f;
                }
                continue;
            }
            double mu, inv;
            group_moments(x, n, gc, cg, eps, &mu, &inv);
            /* S1, S2 over dy's part of the group, channel by channel, rows, columns in order */
            double s1 = 0.0, s2 = 0.0;
            for (int64_t c = lo; c < hi; c++) {
                const double wc = w ? (double)w->data[c - w->lo[0]] : 1.0;
                const float *xc = x->data + at(x, n, c);
                const float *dr = dy->data + (((n - dy->lo[0]) * dy->shape[1] + (c - c0)) * hb) * wb;
                for (int64_t h = 0; h < hb; h++) {
                    const float *xr = xc + (h0 + h) * width + w0;
                    for (int64_t k = 0; k < wb; k++) {
                        const double g = (double)dr[h * wb + k] * wc;
                        s1 += g;
                        s2 += g * (((double)xr[k] - mu) * inv);
                    }
                }
            }
            s1 /= (double)m;
            s2 /= (double)m;
            /* dx over the whole group: g is dy's inside its box, 0 outside */
            for (int64_t c = gc; c < gc + cg; c++) {
                const int in_c = c >= lo && c < hi;
                const double wc = w && in_c ? (double)w->data[c - w->lo[0]] : 1.0;
                const float *xc = x->data + at(x, n, c);
                float *dc = dg + (c - gc) * height * width;
                const float *dr = in_c ? dy->data + (((n - dy->lo[0]) * dy->shape[1] + (c - c0)) * hb) * wb : NULL;
                for (int64_t h = 0; h < height; h++) {
                    const int in_h = in_c && h >= h0 && h < h1;
                    for (int64_t k = 0; k < width; k++) {
                        const double xhat = ((double)xc[h * width + k] - mu) * inv;
                        const double g = in_h && k >= w0 && k < w1 ? (double)dr[(h - h0) * wb + (k - w0)] * wc : 0.0;
                        dc[h * width + k] = (float)(inv * (g - s1 - xhat * s2));
                    }
                }
            }
        }
    }
    return SW_OK;
}

sw_status sw_group_norm_backward_weight(const sw_view *x, const sw_view *dy, int64_t cg, double eps, double *acc,
                                        sw_view *dw) {
    sw_status s;
    if ((s = check_groups(x, cg, dy, "group_norm_backward_weight: x", "dy")) != SW_OK ||
        (s = sw_view_check(dw, 1, "group_norm_backward_weight: dw")) != SW_OK ||
        (s = sw_view_check_range(dw, 0, dy->lo[1], dy->shape[1], "group_norm_backward_weight: dw",
                                 "channel (dy's)")) != SW_OK) {
        return s;
    }
    const int64_t c0 = dy->lo[1], c1 = sw_view_hi(dy, 1), h0 = dy->lo[2], hb = dy->shape[2];
    const int64_t w0 = dy->lo[3], wb = dy->shape[3], width = x->shape[3];
    for (int64_t c = c0; c < c1; c++) {
        acc[c - c0] = 0.0;
    }
    const float *dr = dy->data;   /* dy's elements in row-major order */
    for (int64_t n = dy->lo[0]; n < sw_view_hi(dy, 0); n++) {   /* samples in order: one fixed sum order */
        for (int64_t gc = c0 - c0 % cg; gc < c1; gc += cg) {
            double mu, inv;
            group_moments(x, n, gc, cg, eps, &mu, &inv);
            for (int64_t c = max64(gc, c0); c < min64(gc + cg, c1); c++) {
                const float *xc = x->data + at(x, n, c);
                double sum = 0.0;
                for (int64_t h = h0; h < h0 + hb; h++) {
                    const float *xr = xc + h * width + w0;
                    for (int64_t k = 0; k < wb; k++) {
                        sum += (double)*dr++ * (((double)xr[k] - mu) * inv);
                    }
                }
                acc[c - c0] += sum;
            }
        }
    }
    for (int64_t c = c0; c < c1; c++) {
        dw->data[c - c0] = (float)acc[c - c0];
    }
    return SW_OK;
}
