/* bilinear.c -- bilinear upsampling of (N, C, H, W) by integer factors (align_corners=False).
 *
 *   src(y)   = max((y + 1/2) / s - 1/2, 0),  y0 = floor(src), y1 = min(y0 + 1, H - 1), ly = src - y0
 *   out[y,x] = (1-ly)(1-lx) in[y0,x0] + (1-ly) lx in[y0,x1] + ly (1-lx) in[y1,x0] + ly lx in[y1,x1]
 *
 * PyTorch's nn.Upsample(scale_factor=s, mode="bilinear") and F.interpolate with the scale
 * given (its source index uses 1 / s).  Coordinates are global (kernels.h); x's view holds
 * the rows and columns y's box reads (the description's region, python/shardwise/ops/bcast.py).
 * The backward sends each output's gradient to its four taps' part inside dx's view.
 */
#include <string.h>  /* memset */

#include "kernels.h"
#include "../core/view.h"  /* sw_view_check, sw_view_offset, sw_view_contains */

typedef struct {
    int64_t i0, i1;
    float l;   /* the weight of i1 */
} tap;

static tap source(int64_t o, int64_t size, int64_t scale) {
    float src = ((float)o + 0.5f) * (1.0f / (float)scale) - 0.5f;
    src = src < 0.0f ? 0.0f : src;
    tap t;
    t.i0 = (int64_t)src;
    t.i0 = t.i0 < size - 1 ? t.i0 : size - 1;
    t.i1 = t.i0 + 1 < size ? t.i0 + 1 : t.i0;
    t.l = src - (float)t.i0;
    return t;
}

static const float *at(const sw_view *x, int64_t n, int64_t c, int64_t r, int64_t q) {
    int64_t idx[4] = {n, c, r, q};
    return sw_view_contains(x, idx) ? x->data + sw_view_offset(x, idx) : NULL;
}

sw_status sw_upsample_bilinear_forward(const sw_view *x, sw_view *y, int64_t h, int64_t w, int64_t sh, int64_t sw) {
    const char *name = "upsample_bilinear_forward";
    sw_status s;
    if ((s = sw_view_check(x, 4, name)) != SW_OK || (s = sw_view_check(y, 4, name)) != SW_OK) {
        return s;
    }
    if (h < 1 || w < 1 || sh < 1 || sw < 1) {
        return SW_FAIL(SW_ERR_VALUE, "%s: sizes and scales must be positive", name);
    }
    float *out = y->data;
    for (int64_t n = y->lo[0]; n < sw_view_hi(y, 0); n++) {
        for (int64_t c = y->lo[1]; c < sw_view_hi(y, 1); c++) {
            for (int64_t i = y->lo[2]; i < sw_view_hi(y, 2); i++) {
                tap ty = source(i, h, sh);
                for (int64_t j = y->lo[3]; j < sw_view_hi(y, 3); j++) {
                    tap tx = source(j, w, sw);
                    const float *a = at(x, n, c, ty.i0, tx.i0), *b = at(x, n, c, ty.i0, tx.i1);
                    const float *d = at(x, n, c, ty.i1, tx.i0), *e = at(x, n, c, ty.i1, tx.i1);
                    if (!a || !b || !d || !e) {
                        return SW_FAIL(SW_ERR_VALUE, "%s: the input view does not hold a tap", name);
                    }
                    float top = (1.0f - tx.l) * *a + tx.l * *b, bottom = (1.0f - tx.l) * *d + tx.l * *e;
                    *out++ = (1.0f - ty.l) * top + ty.l * bottom;
                }
            }
        }
    }
    return SW_OK;
}

sw_status sw_upsample_bilinear_backward(const sw_view *dy, sw_view *dx, int64_t h, int64_t w, int64_t sh, int64_t sw) {
    const char *name = "upsample_bilinear_backward";
    sw_status s;
    if ((s = sw_view_check(dy, 4, name)) != SW_OK || (s = sw_view_check(dx, 4, name)) != SW_OK) {
        return s;
    }
    if (h < 1 || w < 1 || sh < 1 || sw < 1) {
        return SW_FAIL(SW_ERR_VALUE, "%s: sizes and scales must be positive", name);
    }
    memset(dx->data, 0, sizeof(float) * (size_t)sw_view_volume(dx));
    const float *g = dy->data;
    for (int64_t n = dy->lo[0]; n < sw_view_hi(dy, 0); n++) {
        for (int64_t c = dy->lo[1]; c < sw_view_hi(dy, 1); c++) {
            for (int64_t i = dy->lo[2]; i < sw_view_hi(dy, 2); i++) {
                tap ty = source(i, h, sh);
                for (int64_t j = dy->lo[3]; j < sw_view_hi(dy, 3); j++, g++) {
                    tap tx = source(j, w, sw);
                    const int64_t rows[2] = {ty.i0, ty.i1}, cols[2] = {tx.i0, tx.i1};
                    const float wr[2] = {1.0f - ty.l, ty.l}, wc[2] = {1.0f - tx.l, tx.l};
                    for (int a = 0; a < 2; a++) {
                        for (int b = 0; b < 2; b++) {
                            float *p = (float *)at(dx, n, c, rows[a], cols[b]);
                            if (p) {
                                *p += *g * wr[a] * wc[b];
                            }
                        }
                    }
                }
            }
        }
    }
    return SW_OK;
}
