/* stochastic_depth.c -- torchvision.ops.StochasticDepth: a residual branch dropped per sample.
 *
 *   y[n, ...] = x[n, ...] * keep(n) / (1 - p)     ("row" mode: one draw per sample n)
 *   y[n, ...] = x[n, ...] * keep(0) / (1 - p)     ("batch" mode: one draw for the minibatch)
 *
 * keep(i) is dropout's counter-based draw (dropout.c, sw_dropout_keeps(seed, step, i, p)),
 * so the mask depends on the seed, the step and the sample's global index only: every plan,
 * however it cuts the tensor, drops the same samples.  The gradient is dy through the same
 * mask and scale.  python/shardwise/reference/bcast.py draws the same masks in NumPy.
 */
#include "kernels.h"
#include "../core/view.h"  /* sw_view_check_elementwise_*, sw_runs */

sw_status sw_stochastic_depth_apply(const sw_view *x, sw_view *y, float p, int row, uint64_t seed, int64_t step,
                                    const char *name) {
    sw_status s;
    if ((s = sw_dropout_check(p, name)) != SW_OK || (s = sw_view_check_elementwise_out(y, name)) != SW_OK ||
        (s = sw_view_check_elementwise_in(x, name, y, "the output")) != SW_OK) {
        return s;
    }
    if (y->lo[0] < 0) {
        return SW_FAIL(SW_ERR_VALUE, "%s: a negative sample index %lld", name, (long long)y->lo[0]);
    }
    const float scale = (float)(1.0 / (1.0 - (double)p));
    int64_t lo[SW_MAX_RANK], hi[SW_MAX_RANK];
    for (int d = 0; d < y->rank; d++) {
        lo[d] = y->lo[d];
        hi[d] = sw_view_hi(y, d);
    }
    const sw_view *views[2] = {y, x};
    for (int64_t n = y->lo[0]; n < sw_view_hi(y, 0); n++) {   /* one sample at a time: one factor */
        const float f = sw_dropout_keeps(seed, step, row ? n : 0, p) ? scale : 0.0f;
        lo[0] = n;
        hi[0] = n + 1;
        sw_runs r;
        if (!sw_runs_first(&r, views, 2, lo, hi, y->rank)) {
            return SW_OK;
        }
        do {
            const float *xp = x->data + sw_view_offset(x, r.idx);
            float *yp = y->data + sw_view_offset(y, r.idx);
            for (int64_t i = 0; i < r.len; i++) {
                yp[i] = xp[i] * f;
            }
        } while (sw_runs_next(&r));
    }
    return SW_OK;
}
