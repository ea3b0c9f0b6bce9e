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
 * timing (nor on the CPU: the loops' AVX2 and baseline builds give the same bits); the weight
 * gradient sums each row in eight float lanes and the rows in double.
 */
#include <string.h>  /* memset */

#include "conv_internal.h"
#include "simd.h"  /* SW_CLONES */
#include "../core/view.h"  /* sw_view_hi */

/* out[r * ldo + c] += w * in[r * ldi + c * stride] for r < rows, c < n: one tap over the rows
 * it reads (compiled for AVX2 and the baseline; no FMA contraction: the clones give the same
 * bits). */
SW_CLONES static void tap_gather(float *restrict out, int64_t ldo, const float *restrict in, int64_t ldi,
                                 int64_t rows, int64_t n, int64_t stride, float w) {
    for (int64_t r = 0; r < rows; r++) {
        float *o = out + r * ldo;
        const float *s = in + r * ldi;
        if (stride == 1) {
            for (int64_t c = 0; c < n; c++) {
                o[c] += w * s[c];
            }
        } else {
            for (int64_t c = 0; c < n; c++) {
                o[c] += w * s[c * stride];
            }
        }
    }
}

/* out[r * ldo + c * stride] += w * in[r * ldi + c]: the data gradient's scatter of one tap. */
SW_CLONES static void tap_scatter(float *restrict out, int64_t ldo, const float *restrict in, int64_t ldi,
                                  int64_t rows, int64_t n, int64_t stride, float w) {
    for (int64_t r = 0; r < rows; r++) {
        float *o = out + r * ldo;
        const float *s = in + r * ldi;
        if (stride == 1) {
            for (int64_t c = 0; c < n; c++) {
                o[c] += w * s[c];
            }
        } else {
            for (int64_t c = 0; c < n; c++) {
                o[c * stride] += w * s[c];
            }
        }
    }
}

/* sum over r < rows of sum_c a[r * lda + c] * b[r * ldb + c * stride]: each row in eight float
 * lanes, the rows in double (a fixed order: the same bits on every CPU). */
SW_CLONES static double tap_dot(const float *restrict a, int64_t lda, const float *restrict b, int64_t ldb,
                                int64_t rows, int64_t n, int64_t stride) {
    double acc = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = a + r * lda, *y = b + r * ldb;
        float lane[8] = {0};
        int64_t c = 0;
        for (; c + 8 <= n; c += 8) {
            for (int k = 0; k < 8; k++) {
                lane[k] += x[c + k] * y[(c + k) * stride];
            }
        }
        for (; c < n; c++) {
            lane[c % 8] += x[c] * y[c * stride];
        }
        acc += (double)(((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])));
    }
    return acc;
}

/* The part of an output box (first pixel (r0, c0), ho x wo) whose tap (ky, kx) reads inside
 * view v: rows [ra, ra + rows) and columns [ca, ca + n) of the box, and `base`, the local
 * offset in v's plane of the input pixel the first of them reads (rows step sh * v's width). */
typedef struct {
    int64_t ra, rows, ca, n, base;
} tap_span;

static tap_span tap_span_of(const sw_window *p, int64_t ky, int64_t kx, int64_t r0, int64_t c0, int64_t ho, int64_t wo,
                            const sw_view *v) {
    int64_t offy = ky * p->dh - p->ph, offx = kx * p->dw - p->pw;   /* output (r, c) reads (r*sh + offy, c*sw + offx) */
    tap_span t;
    t.ra = conv_max(0, conv_ceil_div(v->lo[2] - offy, p->sh) - r0);
    t.ca = conv_max(0, conv_ceil_div(v->lo[3] - offx, p->sw) - c0);
    t.rows = conv_max(0, conv_min(ho, conv_floor_div(sw_view_hi(v, 2) - 1 - offy, p->sh) + 1 - r0) - t.ra);
    t.n = conv_max(0, conv_min(wo, conv_floor_div(sw_view_hi(v, 3) - 1 - offx, p->sw) + 1 - c0) - t.ca);
    t.base = ((r0 + t.ra) * p->sh + offy - v->lo[2]) * v->shape[3] + (c0 + t.ca) * p->sw + offx - v->lo[3];
    return t;
}

int conv_depthwise_takes(const sw_window *p, int64_t ci) {
    return p->group_co > 0 && ci == 1 && sw_conv_get_algorithm() != SW_CONV_IM2COL;
}

/* A plane of a rank-4 view: sample n, channel c (global). */
static float *plane_of(const sw_view *v, int64_t n, int64_t c) {
    return v->data + ((n - v->lo[0]) * v->shape[1] + (c - v->lo[1])) * v->shape[2] * v->shape[3];
}

sw_status conv_depthwise_forward(const sw_view *x, const float *wsub, const float *bias, sw_view *y,
                                 const sw_window *p) {
    int64_t taps = p->kh * p->kw, ho = y->shape[2], wo = y->shape[3], ldi = p->sh * x->shape[3];
    for (int64_t n = y->lo[0]; n < sw_view_hi(y, 0); n++) {
        for (int64_t co = y->lo[1]; co < sw_view_hi(y, 1); co++) {
            float *out = plane_of(y, n, co);
            const float *src = plane_of(x, n, co / p->group_co);
            const float *wt = wsub + (co - y->lo[1]) * taps;
            float b = bias ? bias[co - y->lo[1]] : 0.0f;
            for (int64_t i = 0; i < ho * wo; i++) {
                out[i] = b;
            }
            for (int64_t k = 0; k < taps; k++) {
                tap_span t = tap_span_of(p, k / p->kw, k % p->kw, y->lo[2], y->lo[3], ho, wo, x);
                if (t.rows > 0 && t.n > 0) {
                    tap_gather(out + t.ra * wo + t.ca, wo, src + t.base, ldi, t.rows, t.n, p->sw, wt[k]);
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
    int64_t taps = p->kh * p->kw, ho = dy->shape[2], wo = dy->shape[3], ldd = p->sh * dx->shape[3];
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
            for (int64_t k = 0; k < taps; k++) {   /* taps in order: the sums into dx do not depend on the plan */
                tap_span t = tap_span_of(p, k / p->kw, k % p->kw, dy->lo[2], dy->lo[3], ho, wo, dx);
                if (t.rows > 0 && t.n > 0) {
                    tap_scatter(dst + t.base, ldd, g + t.ra * wo + t.ca, wo, t.rows, t.n, p->sw, wt[k]);
                }
            }
        }
    }
    return SW_OK;
}

sw_status conv_depthwise_backward_weight(const sw_view *x, const sw_view *dy, float *dw, const sw_window *p) {
    int64_t taps = p->kh * p->kw, ho = dy->shape[2], wo = dy->shape[3], ldb = p->sh * x->shape[3];
    for (int64_t co = dy->lo[1]; co < sw_view_hi(dy, 1); co++) {
        for (int64_t k = 0; k < taps; k++) {
            tap_span t = tap_span_of(p, k / p->kw, k % p->kw, dy->lo[2], dy->lo[3], ho, wo, x);
            double acc = 0.0;
            for (int64_t n = dy->lo[0]; n < sw_view_hi(dy, 0) && t.rows > 0 && t.n > 0; n++) {
                acc += tap_dot(plane_of(dy, n, co) + t.ra * wo + t.ca, wo, plane_of(x, n, co / p->group_co) + t.base,
                               ldb, t.rows, t.n, p->sw);
            }
            dw[(co - dy->lo[1]) * taps + k] = (float)acc;
        }
    }
    return SW_OK;
}
