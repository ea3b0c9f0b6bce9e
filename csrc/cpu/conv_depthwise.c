/*
 * conv_depthwise.c -- depthwise convolutions: one input channel per group.
 *
 * Why direct loops: a depthwise convolution (MobileNet's 3x3 per-channel
 * filters; groups = Ci, Cig = 1, cog = Co / Ci output channels per input
 * channel) does kh*kw multiply-adds per output value.  As im2col + GEMM per
 * group that is one GEMM of cog x (kh*kw) x pixels per channel: hundreds of
 * GEMMs a few rows deep, all packing and no arithmetic.  Here every output
 * plane is a sum over the taps of a shifted (strided, dilated) copy of its one
 * input plane times a scalar, a loop over contiguous output columns the
 * compiler vectorizes.
 *
 *   forward          y[n, co, r, c]     = sum_{ky,kx} w[co, 0, ky, kx] x[n, co/cog, r*sh + ky*dh - ph, c*sw + kx*dw - pw]
 *   data gradient    dx[n, ci, iy, ix] += w[co, 0, ky, kx] dy[n, co, r, c] for every (co, ky, kx, r, c) reading it
 *   weight gradient  dw[co, 0, ky, kx]  = sum_{n,r,c} dy[n, co, r, c] x[n, co/cog, r*sh + ky*dh - ph, ...]
 *
 * Reads outside x's view are zero (padding); contributions outside dx's view
 * are dropped (a partial gradient over dx's box), as kernels.h says.  Sums run
 * in a fixed order (samples, taps, rows), so a call's result does not depend on
 * timing; the weight gradient sums each row in float and the rows in double.
 */
#include <string.h>  /* memset */

#include "conv_internal.h"
#include "view.h"  /* sw_view_hi */

int conv_depthwise_takes(const sw_window *p, int64_t ci) {
    return p->group_co > 0 && ci == 1 && sw_conv_get_algorithm() != SW_CONV_IM2COL;
}

/* Output columns [*ca, *cb) of [0, wo) (the box's columns from c0) whose tap column
 * c*sw + off lies in [lo, hi) (the other view's columns, global). */
static void tap_columns(int64_t c0, int64_t wo, int64_t sw, int64_t off, int64_t lo, int64_t hi, int64_t *ca,
                        int64_t *cb) {
    int64_t a = conv_max(0, conv_ceil_div(lo - off, sw) - c0);
    int64_t b = conv_min(wo, conv_floor_div(hi - 1 - off, sw) + 1 - c0);
    *ca = a;
    *cb = conv_max(a, b);
}

/* A plane of a rank-4 view: sample n, channel c (global). */
static float *plane_of(const sw_view *v, int64_t n, int64_t c) {
    return v->data + ((n - v->lo[0]) * v->shape[1] + (c - v->lo[1])) * v->shape[2] * v->shape[3];
}

sw_status conv_depthwise_forward(const sw_view *x, const float *wsub, const float *bias, sw_view *y,
                                 const sw_window *p) {
    int64_t taps = p->kh * p->kw, ho = y->shape[2], wo = y->shape[3], xw = x->shape[3];
    for (int64_t n = y->lo[0]; n < sw_view_hi(y, 0); n++) {
        for (int64_t co = y->lo[1]; co < sw_view_hi(y, 1); co++) {
            float *out = plane_of(y, n, co);
            const float *src = plane_of(x, n, co / p->group_co);
            const float *wt = wsub + (co - y->lo[1]) * taps;
            float b = bias ? bias[co - y->lo[1]] : 0.0f;
            for (int64_t i = 0; i < ho * wo; i++) {
                out[i] = b;
            }
            for (int64_t ky = 0; ky < p->kh; ky++) {
                for (int64_t kx = 0; kx < p->kw; kx++) {
                    float wv = wt[ky * p->kw + kx];
                    int64_t ca, cb;   /* output columns whose input column lies in x's view */
                    tap_columns(y->lo[3], wo, p->sw, kx * p->dw - p->pw, x->lo[3], sw_view_hi(x, 3), &ca, &cb);
                    for (int64_t r = 0; r < ho && cb > ca; r++) {
                        int64_t iy = (y->lo[2] + r) * p->sh + ky * p->dh - p->ph;
                        if (iy < x->lo[2] || iy >= sw_view_hi(x, 2)) {
                            continue;
                        }
                        /* local input offset of output column c: base + c * sw (>= 0 for c >= ca) */
                        int64_t base = (iy - x->lo[2]) * xw + y->lo[3] * p->sw + kx * p->dw - p->pw - x->lo[3];
                        float *o = out + r * wo;
                        if (p->sw == 1) {
                            const float *row = src + base + ca;
                            for (int64_t c = ca; c < cb; c++) {
                                o[c] += wv * row[c - ca];
                            }
                        } else {
                            for (int64_t c = ca; c < cb; c++) {
                                o[c] += wv * src[base + c * p->sw];
                            }
                        }
                    }
                }
            }
            if (p->relu) {
                for (int64_t i = 0; i < ho * wo; i++) {
                    out[i] = out[i] > 0.0f ? out[i] : 0.0f;   /* a NaN becomes 0, as in the GEMM path */
                }
            }
        }
    }
    return SW_OK;
}

sw_status conv_depthwise_backward_data(const float *wsub, const sw_view *dy, sw_view *dx, const sw_window *p) {
    int64_t taps = p->kh * p->kw, ho = dy->shape[2], wo = dy->shape[3], xw = dx->shape[3];
    memset(dx->data, 0, sizeof(float) * (size_t)sw_view_volume(dx));
    for (int64_t n = dx->lo[0]; n < sw_view_hi(dx, 0); n++) {
        for (int64_t co = dy->lo[1]; co < sw_view_hi(dy, 1); co++) {
            int64_t ci = co / p->group_co;
            if (ci < dx->lo[1] || ci >= sw_view_hi(dx, 1)) {
                continue;   /* its input channel lies outside dx's box */
            }
            const float *g = plane_of(dy, n, co);
            float *dst = plane_of(dx, n, ci);
            const float *wt = wsub + (co - dy->lo[1]) * taps;
            for (int64_t ky = 0; ky < p->kh; ky++) {
                for (int64_t kx = 0; kx < p->kw; kx++) {
                    float wv = wt[ky * p->kw + kx];
                    int64_t ca, cb;   /* dy columns whose input column lies in dx's view */
                    tap_columns(dy->lo[3], wo, p->sw, kx * p->dw - p->pw, dx->lo[3], sw_view_hi(dx, 3), &ca, &cb);
                    for (int64_t r = 0; r < ho && cb > ca; r++) {
                        int64_t iy = (dy->lo[2] + r) * p->sh + ky * p->dh - p->ph;
                        if (iy < dx->lo[2] || iy >= sw_view_hi(dx, 2)) {
                            continue;
                        }
                        int64_t base = (iy - dx->lo[2]) * xw + dy->lo[3] * p->sw + kx * p->dw - p->pw - dx->lo[3];
                        const float *gr = g + r * wo;
                        if (p->sw == 1) {
                            float *row = dst + base + ca;
                            for (int64_t c = ca; c < cb; c++) {
                                row[c - ca] += wv * gr[c];
                            }
                        } else {
                            for (int64_t c = ca; c < cb; c++) {
                                dst[base + c * p->sw] += wv * gr[c];
                            }
                        }
                    }
                }
            }
        }
    }
    return SW_OK;
}

sw_status conv_depthwise_backward_weight(const sw_view *x, const sw_view *dy, float *dw, const sw_window *p) {
    int64_t taps = p->kh * p->kw, ho = dy->shape[2], wo = dy->shape[3], xw = x->shape[3];
    for (int64_t co = dy->lo[1]; co < sw_view_hi(dy, 1); co++) {
        for (int64_t ky = 0; ky < p->kh; ky++) {
            for (int64_t kx = 0; kx < p->kw; kx++) {
                int64_t ca, cb;
                tap_columns(dy->lo[3], wo, p->sw, kx * p->dw - p->pw, x->lo[3], sw_view_hi(x, 3), &ca, &cb);
                double acc = 0.0;
                for (int64_t n = dy->lo[0]; n < sw_view_hi(dy, 0) && cb > ca; n++) {
                    const float *g = plane_of(dy, n, co);
                    const float *src = plane_of(x, n, co / p->group_co);
                    for (int64_t r = 0; r < ho; r++) {
                        int64_t iy = (dy->lo[2] + r) * p->sh + ky * p->dh - p->ph;
                        if (iy < x->lo[2] || iy >= sw_view_hi(x, 2)) {
                            continue;
                        }
                        int64_t base = (iy - x->lo[2]) * xw + dy->lo[3] * p->sw + kx * p->dw - p->pw - x->lo[3];
                        const float *gr = g + r * wo;
                        float part = 0.0f;
                        for (int64_t c = ca; c < cb; c++) {
                            part += gr[c] * src[base + c * p->sw];
                        }
                        acc += (double)part;
                    }
                }
                dw[(co - dy->lo[1]) * taps + ky * p->kw + kx] = (float)acc;
            }
        }
    }
    return SW_OK;
}
