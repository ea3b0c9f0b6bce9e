/* adaptive_pool.c -- adaptive average pooling of (N, C, H, W) to (N, C, OH, OW), any sizes.
 *
 *   y[n, c, i, j] = mean of x[n, c, h, w] over h in [floor(i H / OH), ceil((i + 1) H / OH))
 *                                        and w in [floor(j W / OW), ceil((j + 1) W / OW))
 *
 * PyTorch's windows (torch.nn.AdaptiveAvgPool2d): where OH > H (upsampling, alexnet's and vgg's
 * 2x2 -> 7x7 on small images) windows of one or two rows overlap.  Coordinates are global
 * (kernels.h); x's view holds every row and column the windows of y's box read (the
 * description's region, python/shardwise/ops/bcast.py).  Sums in double.  The backward spreads
 * dy / (window area) over each window's part inside dx's view.
 */
#include <string.h>  /* memset */

#include "kernels.h"
#include "../core/view.h"  /* sw_view_check, sw_view_offset, sw_view_contains */

/* The window [*lo, *hi) of output index i of out along an axis of size in. */
static void window(int64_t i, int64_t in, int64_t out, int64_t *lo, int64_t *hi) {
    *lo = i * in / out;
    *hi = ((i + 1) * in + out - 1) / out;
}

sw_status sw_adaptive_avg_pool2d_forward(const sw_view *x, sw_view *y, int64_t h, int64_t w, int64_t oh, int64_t ow) {
    const char *name = "adaptive_avg_pool2d_forward";
    sw_status s;
    if ((s = sw_view_check(x, 4, name)) != SW_OK || (s = sw_view_check(y, 4, name)) != SW_OK) {
        return s;
    }
    if (h < 1 || w < 1 || oh < 1 || ow < 1) {
        return SW_FAIL(SW_ERR_VALUE, "%s: sizes must be positive", name);
    }
    float *out = y->data;
    int64_t idx[4];
    for (int64_t n = y->lo[0]; n < sw_view_hi(y, 0); n++) {
        for (int64_t c = y->lo[1]; c < sw_view_hi(y, 1); c++) {
            for (int64_t i = y->lo[2]; i < sw_view_hi(y, 2); i++) {
                int64_t h0, h1;
                window(i, h, oh, &h0, &h1);
                for (int64_t j = y->lo[3]; j < sw_view_hi(y, 3); j++) {
                    int64_t w0, w1;
                    window(j, w, ow, &w0, &w1);
                    double sum = 0.0;
                    for (int64_t r = h0; r < h1; r++) {
                        idx[0] = n, idx[1] = c, idx[2] = r, idx[3] = w0;
                        if (!sw_view_contains(x, idx)) {
                            return SW_FAIL(SW_ERR_VALUE, "%s: the input view does not hold a window's row", name);
                        }
                        idx[3] = w1 - 1;
                        if (!sw_view_contains(x, idx)) {
                            return SW_FAIL(SW_ERR_VALUE, "%s: the input view does not hold a window's columns", name);
                        }
                        idx[3] = w0;
                        const float *row = x->data + sw_view_offset(x, idx);
                        for (int64_t q = 0; q < w1 - w0; q++) {
                            sum += row[q];
                        }
                    }
                    *out++ = (float)(sum / (double)((h1 - h0) * (w1 - w0)));
                }
            }
        }
    }
    return SW_OK;
}

sw_status sw_adaptive_avg_pool2d_backward(const sw_view *dy, sw_view *dx, int64_t h, int64_t w, int64_t oh,
                                          int64_t ow) {
    const char *name = "adaptive_avg_pool2d_backward";
    sw_status s;
    if ((s = sw_view_check(dy, 4, name)) != SW_OK || (s = sw_view_check(dx, 4, name)) != SW_OK) {
        return s;
    }
    if (h < 1 || w < 1 || oh < 1 || ow < 1) {
        return SW_FAIL(SW_ERR_VALUE, "%s: sizes must be positive", name);
    }
    memset(dx->data, 0, sizeof(float) * (size_t)sw_view_volume(dx));
    const float *g = dy->data;
    for (int64_t n = dy->lo[0]; n < sw_view_hi(dy, 0); n++) {
        for (int64_t c = dy->lo[1]; c < sw_view_hi(dy, 1); c++) {
            int inside = n >= dx->lo[0] && n < sw_view_hi(dx, 0) && c >= dx->lo[1] && c < sw_view_hi(dx, 1);
            for (int64_t i = dy->lo[2]; i < sw_view_hi(dy, 2); i++) {
                int64_t h0, h1;
                window(i, h, oh, &h0, &h1);
                h0 = h0 > dx->lo[2] ? h0 : dx->lo[2];
                h1 = h1 < sw_view_hi(dx, 2) ? h1 : sw_view_hi(dx, 2);
                for (int64_t j = dy->lo[3]; j < sw_view_hi(dy, 3); j++, g++) {
                    int64_t w0, w1, a0, a1;
                    window(j, w, ow, &w0, &w1);
                    window(i, h, oh, &a0, &a1);
                    const float share = (float)((double)*g / (double)((a1 - a0) * (w1 - w0)));
                    w0 = w0 > dx->lo[3] ? w0 : dx->lo[3];
                    w1 = w1 < sw_view_hi(dx, 3) ? w1 : sw_view_hi(dx, 3);
                    if (!inside) {
                        continue;
                    }
                    for (int64_t r = h0; r < h1; r++) {
                        int64_t idx[4] = {n, c, r, w0};
                        float *row = dx->data + sw_view_offset(dx, idx);
                        for (int64_t q = 0; q < w1 - w0; q++) {
                            row[q] += share;
                        }
                    }
                }
            }
        }
    }
    return SW_OK;
}
