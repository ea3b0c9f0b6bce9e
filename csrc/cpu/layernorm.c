/* layernorm.c -- layer normalization over the last dimension, on (rows, D) views.
 *
 *   mean = sum_k x[k] / D     var = sum_k (x[k] - mean)^2 / D    (biased, as torch.nn.LayerNorm)
 *   xhat[d] = (x[d] - mean) * invstd,  invstd = 1 / sqrt(var + eps)
 *   y[d] = xhat[d] * w[d] + b[d]                                  for d in y's d-range
 *   dx[k] = invstd * (w[k] dy[k] - S1 / D - xhat[k] S2 / D),  S1 = sum_d w[d] dy[d],
 *           S2 = sum_d w[d] dy[d] xhat[d]                          sums over dy's d-range
 *   dw[d] = sum over rows of dy[d] xhat[d]
 *
 * RMS normalization (torch.nn.RMSNorm; rms = 1) is the same with mean = 0: var = sum_k x[k]^2 / D,
 * no bias, and S1 = 0 in the data gradient (the mean subtracted is no function of x).
 *
 * x holds whole rows ([0, D)); y and dy may be a d sub-range (a split of the feature
 * dimension recomputes the row's statistics on every worker, in the same order, so every
 * worker's statistics are the same bits).  The data gradient is linear in dy, so each
 * worker's partial gradient over its d-range adds up to the whole.  Rows are local: the
 * caller gives every view the same rows.  Statistics in double, summed in vmath.h's fixed
 * lanes (vectorized; the same bits on every worker); the row loops are built for AVX2 and the
 * baseline (simd.h).
 */
#include <math.h>  /* sqrt */

#include "kernels.h"
#include "simd.h"   /* SW_CLONES */
#include "vmath.h"  /* SW_LANES, sw_row_moments */
#include "../core/view.h"   /* sw_view_check, sw_view_check_range, sw_view_check_covers */

/* y[d] = xhat[d0 + d] w[d] + b[d] for d < db, of the row xr (n features). */
SW_CLONES static void forward_row(const float *restrict xr, int64_t n, float eps, int rms, int64_t d0, int64_t db,
                                  const float *restrict ws, const float *restrict bs, float *restrict yr) {
    double mu, inv;
    sw_row_moments(xr, n, eps, rms, &mu, &inv);
    const float *xs = xr + d0;
    if (bs) {
        for (int64_t d = 0; d < db; d++) {
            yr[d] = (float)((xs[d] - mu) * inv) * ws[d] + bs[d];
        }
    } else {
        for (int64_t d = 0; d < db; d++) {
            yr[d] = (float)((xs[d] - mu) * inv) * ws[d] + 0.0f;
        }
    }
}

/* gr (n) = the row's data gradient from dr (db features from d0). */
SW_CLONES static void backward_data_row(const float *restrict xr, int64_t n, float eps, int rms, int64_t d0,
                                        int64_t db, const float *restrict ws, const float *restrict dr,
                                        float *restrict gr) {
    double mu, inv;
    sw_row_moments(xr, n, eps, rms, &mu, &inv);
    const float *xs = xr + d0;
    double a1[SW_LANES], a2[SW_LANES];   /* S1, S2 in lanes as sw_lane_sum's */
    for (int j = 0; j < SW_LANES; j++) {
        a1[j] = a2[j] = 0.0;
    }
    int64_t d = 0;
    for (; d + SW_LANES <= db; d += SW_LANES) {
        for (int j = 0; j < SW_LANES; j++) {
            const double g = (double)ws[d + j] * dr[d + j];
            a1[j] += g;
            a2[j] += g * (xs[d + j] - mu) * inv;
        }
    }
    for (int j = 0; d < db; d++, j++) {
        const double g = (double)ws[d] * dr[d];
        a1[j] += g;
        a2[j] += g * (xs[d] - mu) * inv;
    }
    const double s1 =
        rms ? 0.0 : (((a1[0] + a1[1]) + (a1[2] + a1[3])) + ((a1[4] + a1[5]) + (a1[6] + a1[7]))) / (double)n;
    const double s2 = (((a2[0] + a2[1]) + (a2[2] + a2[3])) + ((a2[4] + a2[5]) + (a2[6] + a2[7]))) / (double)n;
    for (int64_t k = 0; k < d0; k++) {                 /* features outside dy's range: g = 0 */
        gr[k] = (float)(inv * (0.0 - s1 - (xr[k] - mu) * inv * s2));
    }
    for (int64_t k = d0; k < d0 + db; k++) {
        const double g = (double)ws[k - d0] * dr[k - d0];
        gr[k] = (float)(inv * (g - s1 - (xr[k] - mu) * inv * s2));
    }
    for (int64_t k = d0 + db; k < n; k++) {
        gr[k] = (float)(inv * (0.0 - s1 - (xr[k] - mu) * inv * s2));
    }
}

/* dw[d] += dr[d] xhat[d0 + d] for d < db, of the row xr. */
SW_CLONES static void backward_weight_row(const float *restrict xr, int64_t n, float eps, int rms, int64_t d0,
                                          int64_t db, const float *restrict dr, float *restrict dw) {
    double mu, inv;
    sw_row_moments(xr, n, eps, rms, &mu, &inv);
    const float *xs = xr + d0;
    for (int64_t d = 0; d < db; d++) {
        dw[d] += dr[d] * (float)((xs[d] - mu) * inv);
    }
}

/* x (rows, D) with whole rows; `other` (rows, d-range) inside them. */
static sw_status check_rows(const sw_view *x, const sw_view *other, const char *name, const char *oname) {
    sw_status s;
    if ((s = sw_view_check(x, 2, name)) != SW_OK || (s = sw_view_check(other, 2, oname)) != SW_OK ||
        (s = sw_view_check_range(x, 1, 0, x->shape[1], name, "feature (whole rows)")) != SW_OK ||
        (s = sw_view_check_covers(x, 0, name, other, 0, oname, "row")) != SW_OK ||
        (s = sw_view_check_covers(x, 1, name, other, 1, oname, "feature")) != SW_OK) {
        return s;
    }
    return SW_OK;
}

sw_status sw_layer_norm_forward(const sw_view *x, const sw_view *w, const sw_view *b, float eps, int rms, sw_view *y) {
    sw_status s;
    if ((s = check_rows(x, y, "layer_norm_forward: x", "y")) != SW_OK ||
        (s = sw_view_check(w, 1, "layer_norm_forward: w")) != SW_OK ||
        (s = sw_view_check_covers(w, 0, "layer_norm_forward: w", y, 1, "y", "feature")) != SW_OK ||
        (b && (s = sw_view_check(b, 1, "layer_norm_forward: b")) != SW_OK) ||
        (b && (s = sw_view_check_covers(b, 0, "layer_norm_forward: b", y, 1, "y", "feature")) != SW_OK)) {
        return s;
    }
    if (!(eps > 0.0f)) {
        return SW_FAIL(SW_ERR_VALUE, "layer_norm_forward: eps must be positive, got %g", (double)eps);
    }
    const int64_t n = x->shape[1], d0 = y->lo[1], db = y->shape[1];
    const float *ws = w->data + (d0 - w->lo[0]), *bs = b ? b->data + (d0 - b->lo[0]) : NULL;
    for (int64_t r = y->lo[0]; r < sw_view_hi(y, 0); r++) {
        forward_row(x->data + (r - x->lo[0]) * n, n, eps, rms, d0, db, ws, bs, y->data + (r - y->lo[0]) * db);
    }
    return SW_OK;
}

sw_status sw_layer_norm_backward_data(const sw_view *x, const sw_view *w, const sw_view *dy, float eps, int rms,
                                      sw_view *dx) {
    sw_status s;
    if ((s = check_rows(x, dy, "layer_norm_backward_data: x", "dy")) != SW_OK ||
        (s = check_rows(x, dx, "layer_norm_backward_data: x", "dx")) != SW_OK ||
        (s = sw_view_check_range(dx, 1, 0, x->shape[1], "layer_norm_backward_data: dx", "feature")) != SW_OK ||
        (s = sw_view_check_covers(dx, 0, "layer_norm_backward_data: dx", dy, 0, "dy", "row")) != SW_OK ||
        (s = sw_view_check(w, 1, "layer_norm_backward_data: w")) != SW_OK ||
        (s = sw_view_check_covers(w, 0, "layer_norm_backward_data: w", dy, 1, "dy", "feature")) != SW_OK) {
        return s;
    }
    if (!(eps > 0.0f)) {
        return SW_FAIL(SW_ERR_VALUE, "layer_norm_backward_data: eps must be positive, got %g", (double)eps);
    }
    const int64_t n = x->shape[1], d0 = dy->lo[1], db = dy->shape[1];
    const float *ws = w->data + (d0 - w->lo[0]);
    for (int64_t r = dx->lo[0]; r < sw_view_hi(dx, 0); r++) {
        float *gr = dx->data + (r - dx->lo[0]) * n;
        if (r < dy->lo[0] || r >= sw_view_hi(dy, 0)) {   /* rows dy does not hold get nothing */
            for (int64_t k = 0; k < n; k++) {
                gr[k] = 0.0f;
            }
            continue;
        }
        backward_data_row(x->data + (r - x->lo[0]) * n, n, eps, rms, d0, db, ws, dy->data + (r - dy->lo[0]) * db, gr);
    }
    return SW_OK;
}

sw_status sw_layer_norm_backward_weight(const sw_view *x, const sw_view *dy, float eps, int rms, sw_view *dw) {
    sw_status s;
    if ((s = check_rows(x, dy, "layer_norm_backward_weight: x", "dy")) != SW_OK ||
        (s = sw_view_check(dw, 1, "layer_norm_backward_weight: dw")) != SW_OK ||
        (s = sw_view_check_range(dw, 0, dy->lo[1], dy->shape[1], "layer_norm_backward_weight: dw",
                                 "feature (dy's)")) != SW_OK) {
        return s;
    }
    if (!(eps > 0.0f)) {
        return SW_FAIL(SW_ERR_VALUE, "layer_norm_backward_weight: eps must be positive, got %g", (double)eps);
    }
    const int64_t n = x->shape[1], d0 = dy->lo[1], db = dy->shape[1];
    for (int64_t d = 0; d < db; d++) {
        dw->data[d] = 0.0f;
    }
    for (int64_t r = dy->lo[0]; r < sw_view_hi(dy, 0); r++) {   /* rows in order: one fixed sum order */
        backward_weight_row(x->data + (r - x->lo[0]) * n, n, eps, rms, d0, db, dy->data + (r - dy->lo[0]) * db,
                            dw->data);
    }
    return SW_OK;
}
