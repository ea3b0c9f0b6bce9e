/* softmax.c -- softmax + cross-entropy, the loss op, on (N, classes) views.
 *
 *   p[n, k]  = exp(x[n, k] - max_j x[n, j]) / sum_j exp(x[n, j] - max_j x[n, j])
 *   loss_sum += sum over the box's rows n whose label lies in p's class range of
 *               -log p[n, label[n]]  (= log sum_j exp(x[n, j] - max) - (x[n, label] - max))
 *   dx[n, k] = (p[n, k] - [k == label[n]]) / n_total
 *
 * The x view holds whole rows: its class range must be [0, K), K = the number
 * of classes.  p may be a class sub-range: every worker recomputes the row max
 * and row sum over all K classes in the same order, so p is the same bit for bit
 * however the classes are split, and each row's loss is counted by exactly the
 * one worker whose class range holds its label.
 *
 * Labels: `labels` holds one int32 per sample of the kernel's *input* view,
 *   label of global sample n = labels[n - x->lo[0]]   (forward: x's sample start)
 *   label of global sample n = labels[n - p->lo[0]]   (backward: p's sample start)
 * i.e. the labels array is sliced exactly like the input view's rows.  A label
 * outside [0, K) (forward) or negative (backward, where K is not known) is
 * SW_ERR_VALUE, checked before anything is written.
 */
#include <math.h>  /* log */

#include "kernels.h"  /* sw_view, sw_softmax_xent_* */
#include "simd.h"     /* SW_CLONES */
#include "vmath.h"    /* sw_vexpf, sw_line_max, sw_line_exp_sum */
#include "../core/view.h"     /* sw_view_check, sw_view_check_covers */

enum { N_, K_ };  /* dimensions of (N, classes) views */

/* Every label of global samples [n0, n1) (labels[n - base]) in [0, k_max). */
static sw_status check_labels(const int32_t *labels, int64_t base, int64_t n0, int64_t n1, int64_t k_max,
                              const char *name) {
    if (n1 > n0 && !labels) {
        return SW_FAIL(SW_ERR_VALUE, "%s: NULL labels", name);
    }
    for (int64_t n = n0; n < n1; n++) {
        const int32_t l = labels[n - base];
        if (l < 0 || (int64_t)l >= k_max) {
            return SW_FAIL(SW_ERR_VALUE, "%s: label %d of sample %lld is out of range [0, %lld)", name, (int)l,
                           (long long)n, (long long)k_max);
        }
    }
    return SW_OK;
}

/* p[k - k0] for k in [k0, k1) of one row xr of nk classes; returns the row's sum of exp(x - max),
 * the max in *max.
 * Max and sum over the whole row in vmath.h's lanes, so every class split gets the same bits;
 * a p holding the whole row keeps each exp (one per element), a part recomputes its own. */
SW_CLONES static double row_softmax(const float *restrict xr, int64_t nk, float *restrict pr, int64_t k0, int64_t k1,
                                    float *max) {
    const float mx = sw_line_max(xr, 1, nk, 1.0f);
    *max = mx;
    const int whole = k0 == 0 && k1 == nk;
    const double sum = sw_line_exp_sum(xr, 1, nk, 1.0f, mx, whole ? pr : NULL, 1);
    const double inv = 1.0 / sum;
    if (whole) {
        for (int64_t k = 0; k < nk; k++) {
            pr[k] = (float)((double)pr[k] * inv);
        }
    } else {
        for (int64_t k = k0; k < k1; k++) {
            pr[k - k0] = (float)((double)sw_vexpf(xr[k] - mx) * inv);
        }
    }
    return sum;
}

/* x (N, K) view with all K classes, labels from x's sample start; p (N, k) = the box to compute. */
sw_status sw_softmax_xent_forward(const sw_view *x, const int32_t *labels, sw_view *p, double *loss_sum) {
    const char *name = "softmax_xent_forward";
    sw_status s = sw_view_check(x, 2, "softmax_xent_forward: x");
    if (s == SW_OK) {
        s = sw_view_check(p, 2, "softmax_xent_forward: p");
    }
    if (s == SW_OK && x->lo[K_] != 0) {
        s = SW_FAIL(SW_ERR_VALUE, "%s: x must hold whole rows (classes from 0), its classes start at %lld", name,
                    (long long)x->lo[K_]);
    }
    if (s == SW_OK) {
        s = sw_view_check_covers(x, N_, "softmax_xent_forward: x", p, N_, "p", "sample");
    }
    if (s == SW_OK) {
        s = sw_view_check_covers(x, K_, "softmax_xent_forward: x", p, K_, "p", "class");
    }
    if (s == SW_OK && !loss_sum) {
        s = SW_FAIL(SW_ERR_VALUE, "%s: NULL loss_sum", name);
    }
    if (s == SW_OK) {
        s = check_labels(labels, x->lo[N_], p->lo[N_], sw_view_hi(p, N_), x->shape[K_], name);
    }
    if (s != SW_OK) {
        return s;
    }
    const int64_t nk = x->shape[K_];
    const int64_t k0 = p->lo[K_], k1 = sw_view_hi(p, K_);
    double loss = 0.0;
    for (int64_t n = p->lo[N_]; n < sw_view_hi(p, N_); n++) {
        const float *xr = x->data + (n - x->lo[N_]) * nk;  /* the whole row, classes 0..K-1 */
        float *pr = p->data + (n - p->lo[N_]) * p->shape[K_];  /* p's classes k0..k1-1 */
        float mx;
        const double sum = row_softmax(xr, nk, pr, k0, k1, &mx);
        const int32_t l = labels[n - x->lo[N_]];
        if (l >= k0 && l < k1) {
            loss += log(sum) - (double)(xr[l] - mx);
        }
    }
    *loss_sum += loss;
    return SW_OK;
}

/* dr[k] = (pr[k] - [k == l]) / nt for k < n (l: the label's index in this part of the row). */
SW_CLONES static void row_grad(const float *restrict pr, float *restrict dr, int64_t n, int64_t l, float nt) {
    for (int64_t k = 0; k < n; k++) {
        dr[k] = (pr[k] - (k == l ? 1.0f : 0.0f)) / nt;
    }
}

/* p (N, k) view, labels from p's sample start; dx = (p - onehot(label)) / n_total over dx's box,
 * which p must cover. */
sw_status sw_softmax_xent_backward(const sw_view *p, const int32_t *labels, int64_t n_total, sw_view *dx) {
    const char *name = "softmax_xent_backward";
    sw_status s = sw_view_check(p, 2, "softmax_xent_backward: p");
    if (s == SW_OK) {
        s = sw_view_check(dx, 2, "softmax_xent_backward: dx");
    }
    if (s == SW_OK) {
        s = sw_view_check_covers(p, N_, "softmax_xent_backward: p", dx, N_, "dx", "sample");
    }
    if (s == SW_OK) {
        s = sw_view_check_covers(p, K_, "softmax_xent_backward: p", dx, K_, "dx", "class");
    }
    if (s == SW_OK && n_total < 1) {
        s = SW_FAIL(SW_ERR_VALUE, "%s: n_total must be >= 1, got %lld", name, (long long)n_total);
    }
    if (s == SW_OK) {
        s = check_labels(labels, p->lo[N_], dx->lo[N_], sw_view_hi(dx, N_), INT32_MAX, name);
    }
    if (s != SW_OK) {
        return s;
    }
    const float nt = (float)n_total;
    const int64_t k0 = dx->lo[K_], k1 = sw_view_hi(dx, K_);
    float *dp = dx->data;
    for (int64_t n = dx->lo[N_]; n < sw_view_hi(dx, N_); n++) {
        const float *pr = p->data + (n - p->lo[N_]) * p->shape[K_];  /* p's classes from p->lo[1] */
        row_grad(pr + (k0 - p->lo[K_]), dp, k1 - k0, labels[n - p->lo[N_]] - k0, nt);
        dp += k1 - k0;
    }
    return SW_OK;
}
