/* layernorm.c -- layer normalization over the last dimension, on (rows, D) views.
 *
 *   mean = sum_k x[k] / D     var = sum_k (x[k] - mean)^2 / D    (biased, as torch.nn.LayerNorm)
 *   xhat[d] = (x[d] - mean) * invstd,  invstd = 1 / sqrt(var + eps)
 *   y[d] = xhat[d] * w[d] + b[d]                                  for d in y's d-range
 *   dx[k] = invstd * (w[k] dy[k] - S1 / D - xhat[k] S2 / D),  S1 = sum_d w[d] dy[d],
 *           S2 = sum_d w[d] dy[d] xhat[d]                          sums over dy's d-range
 *   dw[d] = sum over rows of dy[d] xhat[d]
 *
 * x holds whole rows ([0, D)); y and dy may be a d sub-range (a split of the feature
 * dimension recomputes the row's statistics on every worker, in the same order, so every
 * worker's statistics are the same bits).  The data gradient is linear in dy, so each
 * worker's partial gradient over its d-range adds up to the whole.  Rows are local: the
 * caller gives every view the same rows.  Statistics in double.
 */
#include <math.h>  /* sqrt */

#include "kernels.h"
#include "view.h"  /* sw_view_check, sw_view_check_range, sw_view_check_covers */

/* Mean and 1 / sqrt(var + eps) of one row of n floats. */
static void row_moments(const float *x, int64_t n, float eps, double *mean, double *invstd) {
    double s = 0.0;
    for (int64_t k = 0; k < n; k++) {
        s += x[k];
    }
    double mu = s / (double)n, v = 0.0;
    for (int64_t k = 0; k < n; k++) {
        double c = x[k] - mu;
        v += c * c;
    }
    *mean = mu;
    *invstd = 1.0 / sqrt(v / (double)n + (double)eps);
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

sw_status sw_layer_norm_forward(const sw_view *x, const sw_view *w, const sw_view *b, float eps, sw_view *y) {
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
        const float *xr = x->data + (r - x->lo[0]) * n;
        float *yr = y->data + (r - y->lo[0]) * db;
        double mu, inv;
        row_moments(xr, n, eps, &mu, &inv);
        for (int64_t d = 0; d < db; d++) {
            yr[d] = (float)((xr[d0 + d] - mu) * inv) * ws[d] + (bs ? bs[d] : 0.0f);
        }
    }
    return SW_OK;
}

sw_status sw_layer_norm_backward_data(const sw_view *x, const sw_view *w, const sw_view *dy, float eps,
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
        const float *xr = x->data + (r - x->lo[0]) * n, *dr = dy->data + (r - dy->lo[0]) * db;
        double mu, inv, s1 = 0.0, s2 = 0.0;
        row_moments(xr, n, eps, &mu, &inv);
        for (int64_t d = 0; d < db; d++) {
            double g = (double)ws[d] * dr[d];
            s1 += g;
            s2 += g * (xr[d0 + d] - mu) * inv;
        }
        s1 /= (double)n;
        s2 /= (double)n;
        for (int64_t k = 0; k < n; k++) {
            double xh = (xr[k] - mu) * inv;
            double g = k >= d0 && k < d0 + db ? (double)ws[k - d0] * dr[k - d0] : 0.0;
            gr[k] = (float)(inv * (g - s1 - xh * s2));
        }
    }
    return SW_OK;
}

sw_status sw_layer_norm_backward_weight(const sw_view *x, const sw_view *dy, float eps, sw_view *dw) {
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
        const float *xr = x->data + (r - x->lo[0]) * n, *dr = dy->data + (r - dy->lo[0]) * db;
        double mu, inv;
        row_moments(xr, n, eps, &mu, &inv);
        for (int64_t d = 0; d < db; d++) {
            dw->data[d] += dr[d] * (float)((xr[d0 + d] - mu) * inv);
        }
    }
    return SW_OK;
}
