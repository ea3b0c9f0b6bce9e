/* window_geom.c -- a worker's window (convolution, pooling) as cuDNN can run it (gpu_plan.h).
 *
 * cuDNN pads both ends of a spatial dimension alike.  A worker computing output rows
 * [out_lo, out_lo + out_n) reads input rows [out_lo s - p, (out_lo + out_n - 1) s - p + k);
 * its view of the input holds some of them, the rest lie outside the tensor (padding).
 * When the padding needed before the view's rows equals that needed after, cuDNN runs on the
 * view directly (from row `skip`, `used` rows, padding pad_lo); otherwise (a worker at the
 * top of a split image needs padding above but reads a halo below) the rows go to a padded
 * copy first.  Example, kernel 3, stride 1, padding 1, 32 rows split in two:
 *   whole image  out [0, 32) in [0, 32): need [-1, 33)  pad 1 and 1: direct
 *   top half     out [0, 16) in [0, 17): need [-1, 17)  pad 1 and 0: padded copy
 *   bottom half  out [16, 32) in [15, 32): need [15, 33) pad 0 and 1: padded copy
 */
#include "gpu_plan.h"

sw_status sw_gpu_window_dim_of(int64_t in_lo, int64_t in_n, int64_t out_lo, int64_t out_n, int64_t k, int64_t s,
                               int64_t p, sw_gpu_window_dim *out) {
    if (k < 1 || s < 1 || p < 0 || in_n < 0 || out_n < 1) {
        return SW_FAIL(SW_ERR_VALUE, "window: kernel %lld, stride %lld, padding %lld, input %lld and output %lld "
                       "elements", (long long)k, (long long)s, (long long)p, (long long)in_n, (long long)out_n);
    }
    out->need_lo = out_lo * s - p;
    out->need_hi = (out_lo + out_n - 1) * s - p + k;
    int64_t lo = in_lo > out->need_lo ? in_lo : out->need_lo;
    int64_t hi = in_lo + in_n < out->need_hi ? in_lo + in_n : out->need_hi;
    if (hi < lo) {   /* the view holds none of the rows read: all padding */
        hi = lo;
    }
    out->skip = lo - in_lo;
    out->used = hi - lo;
    out->pad_lo = lo - out->need_lo;
    out->pad_hi = out->need_hi - hi;
    /* cuDNN pads both ends by pad_lo: output o reads rows o*s - pad_lo .. + k - 1 of the used ones, the
     * last output's last read is used + pad_hi - 1 <= used + pad_lo - 1 (padding either way); its
     * output count floor((used + 2 pad_lo - k) / s) + 1 must be out_n, not more */
    out->direct = out->used > 0 && out->pad_hi <= out->pad_lo && out->used + 2 * out->pad_lo >= k &&
                  (out->used + 2 * out->pad_lo - k) / s + 1 == out_n;
    return SW_OK;
}
