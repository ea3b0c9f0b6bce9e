/* batchnorm.c -- 2-D batch normalization with statistics over the whole
 * minibatch, however the (N, C, H, W) output is split among workers.
 *
 * Forward, two phases:
 *   1. every worker: sw_bn_partial_sums over its box -> (sum x, sum x^2) per channel
 *   2. the executor adds the partial sums of all workers holding channel c,
 *      then mean = S1 / M, var = S2 / M - mean^2 (biased), invstd = 1 / sqrt(var + eps)
 *      with M = N * H * W of the whole minibatch (eps: the op's attribute, 1e-5 by default)
 *   3. every worker: sw_bn_apply over its box with the global mean/invstd
 * Backward, the same shape:
 *   1. sw_bn_backward_sums -> (sum dy, sum dy * xhat) per channel over the box
 *   2. the executor adds them up: the global sums are exactly dbeta and dgamma
 *   3. sw_bn_backward_apply over the dx box with the global sums
 *
 * Running statistics (PyTorch's running_mean and running_var, kept across steps):
 *   a training step: sw_bn_running_update from the same reduced sums, on every worker
 *   holding the channel (the sums are the lead's, copied: every replica computes the same bits)
 *   eval mode: sw_bn_running_moments gives the mean and invstd that sw_bn_apply uses
 *
 * Channel-indexed arrays (mean, invstd, gamma, beta, sums) always start at the
 * channel start of the kernel's *box*: x's box for the partial sums, y's box for
 * apply, dy's box for the backward sums and dx's box for the backward apply.
 * Every other view must cover that box (element-wise op: the same index).
 * `sums` arrays are laid out [2][channels of the box], overwritten.
 * Sums are accumulated in double so that the split does not change the
 * statistics beyond rounding of the final float32 values.
 */
#include <math.h>     /* sqrt */

#include "kernels.h"  /* sw_view, sw_bn_* */
#include "simd.h"     /* SW_CLONES */
#include "../core/view.h"     /* sw_view_check, sw_view_check_covers */

enum { N_, C_, H_, W_ };  /* dimensions of (N, C, H, W) views */

/* Pointer to row (n, c, h) of an (N, C, H, W) view; the row runs over w from v->lo[W_]. */
static const float *row_at(const sw_view *v, int64_t n, int64_t c, int64_t h) {
    return v->data + (((n - v->lo[N_]) * v->shape[C_] + (c - v->lo[C_])) * v->shape[H_] + (h - v->lo[H_])) *
                         v->shape[W_];
}

/* Offset from the start of a row of `outer` to global column `w`. */
static int64_t col(const sw_view *outer, int64_t w) { return w - outer->lo[W_]; }

/* Whether every view holds exactly box's rows and columns: then the (H, W) plane of
 * each (n, c) is one contiguous run in all of them (the usual case: the views are
 * the box's own), else the kernels go row by row. */
static int whole_planes(const sw_view *box, const sw_view *a, const sw_view *b) {
    const sw_view *vs[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        if (vs[k] && (vs[k]->lo[H_] != box->lo[H_] || vs[k]->shape[H_] != box->shape[H_] ||
                      vs[k]->lo[W_] != box->lo[W_] || vs[k]->shape[W_] != box->shape[W_])) {
            return 0;
        }
    }
    return 1;
}

/* s[0] += sum of g, s[1] += sum of g * h over len floats, in double: eight lanes
 * (vectorized by the compiler) added up in a fixed order at the end.  h = g (x NULL:
 * the sums of x and x^2, g being x), or h = xhat = (x - m) * is in float (the
 * backward sums of dy and dy * xhat, g being dy). */
SW_CLONES static void add_sums(const float *g, const float *x, int64_t len, float m, float is, double *s) {
    double a[8] = {0}, q[8] = {0};
    int64_t i = 0;
    if (x) {   /* two loops, not a test per element: the compiler vectorizes the lanes only so */
        for (; i + 8 <= len; i += 8) {
            for (int j = 0; j < 8; j++) {
                const double v = g[i + j];
                a[j] += v;
                q[j] += v * (double)((x[i + j] - m) * is);
            }
        }
    } else {
        for (; i + 8 <= len; i += 8) {
            for (int j = 0; j < 8; j++) {
                const double v = g[i + j];
                a[j] += v;
                q[j] += v * v;
            }
        }
    }
    double s1 = 0.0, s2 = 0.0;
    for (; i < len; i++) {
        const double v = g[i], h = x ? (double)((x[i] - m) * is) : v;
        s1 += v;
        s2 += v * h;
    }
    for (int j = 0; j < 8; j++) {
        s1 += a[j];
        s2 += q[j];
    }
    s[0] += s1;
    s[1] += s2;
}

/* y = (x - m) * scale + shift over len floats. */
SW_CLONES static void apply_run(const float *x, float *y, int64_t len, float m, float scale, float shift) {
    for (int64_t i = 0; i < len; i++) {
        y[i] = (x[i] - m) * scale + shift;
    }
}

/* dx = scale * (dy - mean_dy - xhat * mean_dy_xhat), xhat = (x - mu) * is, over len floats. */
SW_CLONES static void backward_apply_run(const float *x, const float *dy, float *dx, int64_t len, float mu, float is,
                                         float scale, float mean_dy, float mean_dy_xhat) {
    for (int64_t i = 0; i < len; i++) {
        const float xhat = (x[i] - mu) * is;
        dx[i] = scale * (dy[i] - mean_dy - xhat * mean_dy_xhat);
    }
}

/* `box` a valid (N, C, H, W) view; each non-NULL view of `others` has rank 4 and covers it. */
static sw_status check_box(const sw_view *box, const char *box_name, const sw_view *a, const char *a_name,
                           const sw_view *b, const char *b_name) {
    sw_status s = sw_view_check(box, 4, box_name);
    const sw_view *others[2] = {a, b};
    const char *names[2] = {a_name, b_name};
    for (int k = 0; k < 2 && s == SW_OK; k++) {
        if (!names[k]) {
            continue;
        }
        s = sw_view_check(others[k], 4, names[k]);
        for (int d = 0; d < 4 && s == SW_OK; d++) {
            s = sw_view_check_covers(others[k], d, names[k], box, d, box_name, "index");
        }
    }
    return s;
}

static sw_status check_arrays(const char *name, int count, const void *const *arrays) {
    for (int k = 0; k < count; k++) {
        if (!arrays[k]) {
            return SW_FAIL(SW_ERR_VALUE, "%s: NULL channel array (argument %d)", name, k);
        }
    }
    return SW_OK;
}

/* x (N, C, H, W): sums[0][c] = sum of x, sums[1][c] = sum of x^2 over x's box, c from x's channel start. */
sw_status sw_bn_partial_sums(const sw_view *x, double *sums) {
    sw_status s = check_box(x, "bn_partial_sums: x", NULL, NULL, NULL, NULL);
    const void *arrays[1] = {sums};
    if (s == SW_OK) {
        s = check_arrays("bn_partial_sums", 1, arrays);
    }
    if (s != SW_OK) {
        return s;
    }
    const int64_t nc = x->shape[C_], hw = x->shape[H_] * x->shape[W_];
    for (int64_t c = 0; c < nc; c++) {
        double s2[2] = {0.0, 0.0};
        for (int64_t n = 0; n < x->shape[N_]; n++) {
            add_sums(x->data + (n * nc + c) * hw, NULL, hw, 0.0f, 0.0f, s2);  /* the whole (H, W) plane is contiguous */
        }
        sums[c] = s2[0];
        sums[nc + c] = s2[1];
    }
    return SW_OK;
}

/* x covers y's box; y = (x - mean[c]) * invstd[c] * gamma[c] + beta[c], arrays from y's channel start.
 * gamma and beta may be NULL (no affine transform: gamma = 1, beta = 0). */
sw_status sw_bn_apply(const sw_view *x, const float *mean, const float *invstd, const float *gamma, const float *beta,
                      sw_view *y) {
    sw_status s = check_box(y, "bn_apply: y", x, "bn_apply: x", NULL, NULL);
    const void *arrays[2] = {mean, invstd};
    if (s == SW_OK) {
        s = check_arrays("bn_apply", 2, arrays);
    }
    if (s != SW_OK) {
        return s;
    }
    const int whole = whole_planes(y, x, NULL);
    const int64_t rows = whole ? 1 : y->shape[H_], len = whole ? y->shape[H_] * y->shape[W_] : y->shape[W_];
    float *yp = y->data;
    for (int64_t n = y->lo[N_]; n < sw_view_hi(y, N_); n++) {
        for (int64_t c = y->lo[C_]; c < sw_view_hi(y, C_); c++) {
            const int64_t k = c - y->lo[C_];
            const float m = mean[k];
            const float scale = invstd[k] * (gamma ? gamma[k] : 1.0f);
            const float shift = beta ? beta[k] : 0.0f;
            for (int64_t h = y->lo[H_]; h < y->lo[H_] + rows; h++) {
                apply_run(row_at(x, n, c, h) + col(x, y->lo[W_]), yp, len, m, scale, shift);
                yp += len;
            }
        }
    }
    return SW_OK;
}

/* x covers dy's box; over dy's box, with xhat = (x - mean[c]) * invstd[c] (arrays from dy's channel start):
 * sums[0][c] = sum of dy, sums[1][c] = sum of dy * xhat. */
sw_status sw_bn_backward_sums(const sw_view *x, const sw_view *dy, const float *mean, const float *invstd,
                              double *sums) {
    sw_status s = check_box(dy, "bn_backward_sums: dy", x, "bn_backward_sums: x", NULL, NULL);
    const void *arrays[3] = {mean, invstd, sums};
    if (s == SW_OK) {
        s = check_arrays("bn_backward_sums", 3, arrays);
    }
    if (s != SW_OK) {
        return s;
    }
    const int64_t nc = dy->shape[C_];
    for (int64_t k = 0; k < nc; k++) {
        sums[k] = 0.0;
        sums[nc + k] = 0.0;
    }
    const int whole = whole_planes(dy, x, NULL);
    const int64_t rows = whole ? 1 : dy->shape[H_], len = whole ? dy->shape[H_] * dy->shape[W_] : dy->shape[W_];
    const float *gp = dy->data;
    for (int64_t n = dy->lo[N_]; n < sw_view_hi(dy, N_); n++) {
        for (int64_t c = dy->lo[C_]; c < sw_view_hi(dy, C_); c++) {
            const int64_t k = c - dy->lo[C_];
            double s2[2] = {0.0, 0.0};
            for (int64_t h = dy->lo[H_]; h < dy->lo[H_] + rows; h++) {
                add_sums(gp, row_at(x, n, c, h) + col(x, dy->lo[W_]), len, mean[k], invstd[k], s2);
                gp += len;
            }
            sums[k] += s2[0];
            sums[nc + k] += s2[1];
        }
    }
    return SW_OK;
}

/* x and dy cover dx's box; over dx's box (arrays, global_sums [2][channels] from dx's channel start):
 * dx = gamma * invstd * (dy - sum_dy / m - xhat * sum_dy_xhat / m), m = N*H*W of the minibatch.
 * gamma may be NULL (gamma = 1). */
sw_status sw_bn_backward_apply(const sw_view *x, const sw_view *dy, const float *mean, const float *invstd,
                               const float *gamma, const double *global_sums, int64_t m, sw_view *dx) {
    sw_status s = check_box(dx, "bn_backward_apply: dx", x, "bn_backward_apply: x", dy, "bn_backward_apply: dy");
    const void *arrays[3] = {mean, invstd, global_sums};
    if (s == SW_OK) {
        s = check_arrays("bn_backward_apply", 3, arrays);
    }
    if (s == SW_OK && m < 1) {
        s = SW_FAIL(SW_ERR_VALUE, "bn_backward_apply: m (elements per channel) must be >= 1, got %lld",
                    (long long)m);
    }
    if (s != SW_OK) {
        return s;
    }
    const int64_t nc = dx->shape[C_];
    const int whole = whole_planes(dx, x, dy);
    const int64_t rows = whole ? 1 : dx->shape[H_], len = whole ? dx->shape[H_] * dx->shape[W_] : dx->shape[W_];
    float *dp = dx->data;
    for (int64_t n = dx->lo[N_]; n < sw_view_hi(dx, N_); n++) {
        for (int64_t c = dx->lo[C_]; c < sw_view_hi(dx, C_); c++) {
            const int64_t k = c - dx->lo[C_];
            const float mu = mean[k], is = invstd[k];
            const float scale = (gamma ? gamma[k] : 1.0f) * is;
            const float mean_dy = (float)(global_sums[k] / (double)m);
            const float mean_dy_xhat = (float)(global_sums[nc + k] / (double)m);
            for (int64_t h = dx->lo[H_]; h < dx->lo[H_] + rows; h++) {
                backward_apply_run(row_at(x, n, c, h) + col(x, dx->lo[W_]), row_at(dy, n, c, h) + col(dy, dx->lo[W_]),
                                   dp, len, mu, is, scale, mean_dy, mean_dy_xhat);
                dp += len;
            }
        }
    }
    return SW_OK;
}

/* running (2, C) += momentum * (statistic - running), computed as torch.nn.BatchNorm2d does
 * ((1 - momentum) * running + momentum * statistic, in double, stored as float32) from the
 * minibatch's sums (2, C) over m elements: the mean, and the unbiased variance var * m / (m - 1)
 * (with one element per channel, where that is undefined, the biased one: 0). */
sw_status sw_bn_running_update(const double *sums, int64_t channels, int64_t m, float momentum, float *running) {
    if (!sums || !running) {
        return SW_FAIL(SW_ERR_VALUE, "bn_running_update: NULL sums or running statistics");
    }
    if (m < 1 || channels < 0) {
        return SW_FAIL(SW_ERR_VALUE, "bn_running_update: %lld elements of %lld channels", (long long)m,
                       (long long)channels);
    }
    if (!(momentum >= 0.0f && momentum <= 1.0f)) {   /* NaN fails too */
        return SW_FAIL(SW_ERR_VALUE, "bn_running_update: momentum must lie in [0, 1], got %g", (double)momentum);
    }
    const double keep = 1.0 - (double)momentum, md = (double)m;
    for (int64_t c = 0; c < channels; c++) {
        const double mu = sums[c] / md;
        double var = sums[channels + c] / md - mu * mu;
        var = var > 0.0 ? var : 0.0;
        /* the statistics rounded to float32 first, as the forward pass uses them: the update then
         * depends on those bits alone, not on the order in which a plan added up the sums */
        const float mean = (float)mu, unbiased = (float)(m > 1 ? var * md / (md - 1.0) : var);
        running[c] = (float)(keep * (double)running[c] + (double)momentum * (double)mean);
        running[channels + c] = (float)(keep * (double)running[channels + c] + (double)momentum * (double)unbiased);
    }
    return SW_OK;
}

/* mean[c] = running mean, invstd[c] = 1 / sqrt(running variance + eps), from running (2, C). */
void sw_bn_running_moments(const float *running, int64_t channels, double eps, float *mean, float *invstd) {
    for (int64_t c = 0; c < channels; c++) {
        const double var = (double)running[channels + c];
        mean[c] = running[c];
        invstd[c] = (float)(1.0 / sqrt((var > 0.0 ? var : 0.0) + eps));
    }
}
