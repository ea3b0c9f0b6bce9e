/* dropout.c -- dropout whose mask is a function of (seed, step, element), so every plan draws it.
 *
 * Why counter-based: a worker computes any box of the output, and a plan may cut
 * the tensor in any way; a random stream drawn in order would give each cut its
 * own mask.  Instead element i of the op's output (its row-major index in the
 * whole tensor, the global coordinates of kernels.h) keeps its value when
 *
 *   stream = mix(seed + G * (step + 1))                (mod 2^64)
 *   u(i)   = mix(stream + G * (i + 1)) >> 40           (24 bits, uniform in [0, 2^24))
 *   keep   = u(i) >= threshold,  threshold = round(p * 2^24)
 *
 * with G = 0x9E3779B97F4A7C15 and mix the splitmix64 finalizer (element i is the
 * i-th draw of a splitmix64 generator seeded by `stream`), so the mask depends on
 * nothing but the seed, the step and i: the same bits for one worker or many.
 * Kept values are scaled by 1 / (1 - p) (inverted dropout, as PyTorch), so the
 * expectation is the input; the gradient is dy through the same mask and scale.
 * python/shardwise/reference/dropout.py computes the same mask in NumPy.
 */
#include <math.h>  /* llround */

#include "kernels.h"
#include "../core/view.h"  /* sw_view_check_elementwise_*, sw_runs */

#define GOLDEN UINT64_C(0x9E3779B97F4A7C15)

/* The splitmix64 finalizer (Steele, Lea and Flood's constants). */
static inline uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

int sw_dropout_keeps(uint64_t seed, int64_t step, int64_t index, float p) {
    uint64_t stream = mix(seed + GOLDEN * ((uint64_t)step + 1));
    uint64_t u = mix(stream + GOLDEN * ((uint64_t)index + 1)) >> 40;
    return u >= (uint64_t)llround((double)p * 16777216.0);
}

sw_status sw_dropout_check(float p, const char *name) {
    if (!(p >= 0.0f && p < 1.0f)) {   /* NaN fails too */
        return SW_FAIL(SW_ERR_VALUE, "%s: the probability %g is not in [0, 1)", name, (double)p);
    }
    return SW_OK;
}

/* y = x * mask * scale over y's box; shape is the op's whole output (for the row-major index). */
sw_status sw_dropout_apply(const sw_view *x, sw_view *y, const int64_t *shape, float p, uint64_t seed, int64_t step,
                           const char *name) {
    sw_status s;
    if ((s = sw_dropout_check(p, name)) != SW_OK || (s = sw_view_check_elementwise_out(y, name)) != SW_OK ||
        (s = sw_view_check_elementwise_in(x, name, y, "the output")) != SW_OK) {
        return s;
    }
    for (int d = 0; d < y->rank; d++) {
        if (y->lo[d] < 0 || sw_view_hi(y, d) > shape[d]) {
            return SW_FAIL(SW_ERR_VALUE, "%s: the box [%lld, %lld) of dimension %d lies outside the tensor's %lld",
                           name, (long long)y->lo[d], (long long)sw_view_hi(y, d), d, (long long)shape[d]);
        }
    }
    const float scale = (float)(1.0 / (1.0 - (double)p));
    int64_t stride[SW_MAX_RANK], hi[SW_MAX_RANK];
    stride[y->rank - 1] = 1;
    for (int d = y->rank - 1; d > 0; d--) {
        stride[d - 1] = stride[d] * shape[d];
    }
    for (int d = 0; d < y->rank; d++) {
        hi[d] = sw_view_hi(y, d);
    }
    const sw_view *views[2] = {y, x};
    sw_runs r;
    if (!sw_runs_first(&r, views, 2, y->lo, hi, y->rank)) {
        return SW_OK;
    }
    /* a run is consecutive rows of the box (view.h), which the tensor's row-major index does not
     * number consecutively unless the box spans its whole rows: restart the index per row */
    const int last = y->rank - 1;
    const int64_t row = hi[last] - y->lo[last];
    do {
        const float *xp = x->data + sw_view_offset(x, r.idx);
        float *yp = y->data + sw_view_offset(y, r.idx);
        int64_t idx[SW_MAX_RANK];
        for (int d = 0; d < y->rank; d++) {
            idx[d] = r.idx[d];
        }
        for (int64_t done = 0; done < r.len; done += row) {
            int64_t first = 0;
            for (int d = 0; d < y->rank; d++) {
                first += idx[d] * stride[d];
            }
            for (int64_t i = 0; i < row; i++) {
                yp[done + i] = sw_dropout_keeps(seed, step, first + i, p) ? xp[done + i] * scale : 0.0f;
            }
            for (int d = last - 1; d >= 0; d--) {   /* the next row of the box */
                if (++idx[d] < hi[d]) {
                    break;
                }
                idx[d] = y->lo[d];
            }
        }
    } while (sw_runs_next(&r));
    return SW_OK;
}
