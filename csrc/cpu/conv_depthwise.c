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
 *
 * Narrow planes (the 16 x 16 down to 2 x 2 ones of a 64 x 64 EfficientNet or MobileNet) run eight
 * channels at once: their planes interleaved pixel-major ([pixel][8 channels], in scratch),
 * each tap one 8-float vector operation per pixel, instead of loops two to four columns long
 * per channel.  Every output (input gradient, weight gradient) element sees the same
 * operations in the same order as in the per-channel loops, so the two give the same bits;
 * channels left over from the blocks of eight, and the data gradient of a channel multiplier
 * above 1 (whose channels add into one input plane), take the per-channel loops.  The tap
 * spans do not depend on the sample or the channel: each call computes them once.
 */
#include <stdlib.h>  /* NULL */
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

/* ------------------------------------------------------------------ eight channels at once */
#define LANES 8

/* Planes below this width (of the output, or dy) run LANES channels at once.  Thread CPU time
 * (fwd / dx / dw, ms, batch 32), per-channel loops against the blocks:
 *   32 ch 32x32 3x3        2.6 / 2.7 / 3.5   against  3.3 / 3.3 / 4.1
 *   96 ch 32x32 3x3 s2     4.7 / 8.1 / 6.8   against  3.0 / 5.5 / 4.2   (16 output columns)
 *   144 ch 16x16 3x3       4.4 / 4.1 / 5.7   against  3.9 / 3.8 / 5.1
 *   240 ch 8x8 5x5        16.4 / 15.7 / 16.5 against  2.8 / 2.8 / 4.4
 *   1152 ch 2x2 5x5       19.9 / 20.0 / 4.3  against  1.2 / 1.2 / 1.8
 * (the per-channel loops there also computed the tap spans per sample and channel). */
#define INTERLEAVE_BELOW_WIDTH 32

/* buf[i * LANES + l] = plane[l][i] for i < count (pack), or back (unpack). */
SW_CLONES static void lanes_pack(float *restrict buf, const float *const *plane, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        for (int l = 0; l < LANES; l++) {
            buf[i * LANES + l] = plane[l][i];
        }
    }
}

SW_CLONES static void lanes_unpack(float *const *plane, const float *restrict buf, int64_t count) {
    for (int l = 0; l < LANES; l++) {
        float *dst = plane[l];
        for (int64_t i = 0; i < count; i++) {
            dst[i] = buf[i * LANES + l];
        }
    }
}

/* out[(r * ldo + c * so) lanes] += w * in[(r * ldi + c * si) lanes] per lane, r < rows, c < n
 * (leading dimensions and strides in pixels): tap_gather (so = 1) and tap_scatter (si = 1) for
 * LANES channels, the same operation per element. */
SW_CLONES static void lanes_tap(float *restrict out, int64_t ldo, int64_t so, const float *restrict in, int64_t ldi,
                                int64_t si, int64_t rows, int64_t n, const float *restrict w) {
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < n; c++) {
            float *o = out + (r * ldo + c * so) * LANES;
            const float *x = in + (r * ldi + c * si) * LANES;
            for (int l = 0; l < LANES; l++) {
                o[l] += w[l] * x[l];
            }
        }
    }
}

/* acc[l] = tap_dot of lane l (a and b interleaved; lda, ldb in pixels): each row's products in
 * eight column lanes (column c in lane c mod 8), combined in tap_dot's order, the rows in double. */
SW_CLONES static void lanes_dot(double *restrict acc, const float *restrict a, int64_t lda, const float *restrict b,
                                int64_t ldb, int64_t rows, int64_t n, int64_t stride) {
    for (int l = 0; l < LANES; l++) {
        acc[l] = 0.0;
    }
    for (int64_t r = 0; r < rows; r++) {
        float lane[8][LANES];
        for (int j = 0; j < 8; j++) {
            for (int l = 0; l < LANES; l++) {
                lane[j][l] = 0.0f;
            }
        }
        for (int64_t c = 0; c < n; c++) {
            const float *x = a + (r * lda + c) * LANES, *y = b + (r * ldb + c * stride) * LANES;
            float *s = lane[c % 8];
            for (int l = 0; l < LANES; l++) {
                s[l] += x[l] * y[l];
            }
        }
        for (int l = 0; l < LANES; l++) {
            acc[l] += (double)(((lane[0][l] + lane[1][l]) + (lane[2][l] + lane[3][l])) +
                               ((lane[4][l] + lane[5][l]) + (lane[6][l] + lane[7][l])));
        }
    }
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

/* Scratch of a call; *s set (and NULL returned) when out of memory. */
static void *scratch(int kind, int64_t bytes, const char *name, sw_status *s) {
    void *q = conv_scratch(kind, (size_t)conv_max(bytes, 1));
    if (!q) {
        *s = SW_FAIL(SW_ERR_NOMEM, "%s: out of memory for %lld bytes of scratch", name, (long long)bytes);
    }
    return q;
}

/* Every tap's span over the output box (first pixel (r0, c0), ho x wo) against view v, tap
 * k = ky * kw + kx at index k; NULL (and *s set) when out of memory. */
static tap_span *tap_spans(const sw_window *p, int64_t r0, int64_t c0, int64_t ho, int64_t wo, const sw_view *v,
                           const char *name, sw_status *s) {
    int64_t taps = p->kh * p->kw;
    tap_span *t = scratch(CONV_SCRATCH_TAB, taps * (int64_t)sizeof(tap_span), name, s);
    for (int64_t k = 0; t && k < taps; k++) {
        t[k] = tap_span_of(p, k / p->kw, k % p->kw, r0, c0, ho, wo, v);
    }
    return t;
}

static int tap_empty(const tap_span *t) { return t->rows <= 0 || t->n <= 0; }

sw_status conv_depthwise_forward(const sw_view *x, const float *wsub, const float *bias, sw_view *y,
                                 const sw_window *p) {
    const char *name = "conv2d_forward (depthwise)";
    sw_status s = SW_OK;
    int64_t taps = p->kh * p->kw, ho = y->shape[2], wo = y->shape[3], ldi = p->sh * x->shape[3];
    int64_t xplane = x->shape[2] * x->shape[3], co0 = y->lo[1], co1 = sw_view_hi(y, 1);
    tap_span *span = tap_spans(p, y->lo[2], y->lo[3], ho, wo, x, name, &s);
    if (!span) {
        return s;
    }
    /* blocks of LANES channels, interleaved, when the planes are narrow; the rest one by one */
    int64_t blocked = wo < INTERLEAVE_BELOW_WIDTH ? (co1 - co0) / LANES * LANES : 0;
    float *src8 = NULL, *out8 = NULL;
    if (blocked > 0) {
        src8 = scratch(CONV_SCRATCH_SRC, xplane * LANES * (int64_t)sizeof(float), name, &s);
        out8 = src8 ? scratch(CONV_SCRATCH_OUT, ho * wo * LANES * (int64_t)sizeof(float), name, &s) : NULL;
        if (!out8) {
            return s;
        }
    }
    for (int64_t n = y->lo[0]; n < sw_view_hi(y, 0); n++) {
        for (int64_t cb = co0; cb < co0 + blocked; cb += LANES) {
            const float *in[LANES];
            float *out[LANES], w[LANES];
            for (int l = 0; l < LANES; l++) {
                in[l] = plane_of(x, n, (cb + l) / p->group_co);
                out[l] = plane_of(y, n, cb + l);
            }
            lanes_pack(src8, in, xplane);
            for (int64_t i = 0; i < ho * wo; i++) {
                for (int l = 0; l < LANES; l++) {
                    out8[i * LANES + l] = bias ? bias[cb + l - co0] : 0.0f;
                }
            }
            for (int64_t k = 0; k < taps; k++) {
                const tap_span *t = &span[k];
                if (tap_empty(t)) {
                    continue;
                }
                for (int l = 0; l < LANES; l++) {
                    w[l] = wsub[(cb + l - co0) * taps + k];
                }
                lanes_tap(out8 + (t->ra * wo + t->ca) * LANES, wo, 1, src8 + t->base * LANES, ldi, p->sw, t->rows,
                          t->n, w);
            }
            if (p->relu) {
                for (int64_t i = 0; i < ho * wo * LANES; i++) {
                    out8[i] = out8[i] > 0.0f ? out8[i] : 0.0f;   /* a NaN becomes 0, as in the GEMM path */
                }
            }
            lanes_unpack(out, out8, ho * wo);
        }
        for (int64_t co = co0 + blocked; co < co1; co++) {
            float *out = plane_of(y, n, co);
            const float *src = plane_of(x, n, co / p->group_co);
            const float *wt = wsub + (co - co0) * taps;
            float b = bias ? bias[co - co0] : 0.0f;
            for (int64_t i = 0; i < ho * wo; i++) {
                out[i] = b;
            }
            for (int64_t k = 0; k < taps; k++) {
                const tap_span *t = &span[k];
                if (!tap_empty(t)) {
                    tap_gather(out + t->ra * wo + t->ca, wo, src + t->base, ldi, t->rows, t->n, p->sw, wt[k]);
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
    const char *name = "conv2d_backward_data (depthwise)";
    sw_status s = SW_OK;
    int64_t taps = p->kh * p->kw, ho = dy->shape[2], wo = dy->shape[3], ldd = p->sh * dx->shape[3];
    int64_t xplane = dx->shape[2] * dx->shape[3], co0 = dy->lo[1], co1 = sw_view_hi(dy, 1);
    memset(dx->data, 0, sizeof(float) * (size_t)sw_view_volume(dx));
    tap_span *span = tap_spans(p, dy->lo[2], dy->lo[3], ho, wo, dx, name, &s);
    if (!span) {
        return s;
    }
    /* blocks of LANES channels when each dx plane takes one dy plane (no channel multiplier) and
     * dx's box holds their input channels: [cb0, cb0 + blocked) */
    int64_t cb0 = conv_max(co0, dx->lo[1]), cb1 = conv_min(co1, sw_view_hi(dx, 1));
    int64_t blocked = p->group_co == 1 && wo < INTERLEAVE_BELOW_WIDTH && cb1 > cb0 ? (cb1 - cb0) / LANES * LANES : 0;
    float *dx8 = NULL, *dy8 = NULL;
    if (blocked > 0) {
        dx8 = scratch(CONV_SCRATCH_SRC, xplane * LANES * (int64_t)sizeof(float), name, &s);
        dy8 = dx8 ? scratch(CONV_SCRATCH_OUT, ho * wo * LANES * (int64_t)sizeof(float), name, &s) : NULL;
        if (!dy8) {
            return s;
        }
    }
    for (int64_t n = dx->lo[0]; n < sw_view_hi(dx, 0); n++) {
        for (int64_t cb = cb0; cb < cb0 + blocked; cb += LANES) {
            const float *g[LANES];
            float *dst[LANES], w[LANES];
            for (int l = 0; l < LANES; l++) {
                g[l] = plane_of(dy, n, cb + l);
                dst[l] = plane_of(dx, n, cb + l);
            }
            lanes_pack(dy8, g, ho * wo);
            memset(dx8, 0, sizeof(float) * (size_t)(xplane * LANES));
            for (int64_t k = 0; k < taps; k++) {   /* taps in order, as below */
                const tap_span *t = &span[k];
                if (tap_empty(t)) {
                    continue;
                }
                for (int l = 0; l < LANES; l++) {
                    w[l] = wsub[(cb + l - co0) * taps + k];
                }
                lanes_tap(dx8 + t->base * LANES, ldd, p->sw, dy8 + (t->ra * wo + t->ca) * LANES, wo, 1, t->rows,
                          t->n, w);
            }
            lanes_unpack(dst, dx8, xplane);
        }
        for (int64_t co = co0; co < co1; co++) {
            int64_t ci = co / p->group_co;
            if (ci < dx->lo[1] || ci >= sw_view_hi(dx, 1) || (co >= cb0 && co < cb0 + blocked)) {
                continue;   /* its input channel lies outside dx's box, or a block took it */
            }
            const float *g = plane_of(dy, n, co);
            float *dst = plane_of(dx, n, ci);
            const float *wt = wsub + (co - co0) * taps;
            for (int64_t k = 0; k < taps; k++) {   /* taps in order: the sums into dx do not depend on the plan */
                const tap_span *t = &span[k];
                if (!tap_empty(t)) {
                    tap_scatter(dst + t->base, ldd, g + t->ra * wo + t->ca, wo, t->rows, t->n, p->sw, wt[k]);
                }
            }
        }
    }
    return SW_OK;
}

sw_status conv_depthwise_backward_weight(const sw_view *x, const sw_view *dy, float *dw, const sw_window *p) {
    const char *name = "conv2d_backward_weight (depthwise)";
    sw_status s = SW_OK;
    int64_t taps = p->kh * p->kw, ho = dy->shape[2], wo = dy->shape[3], ldb = p->sh * x->shape[3];
    int64_t xplane = x->shape[2] * x->shape[3], co0 = dy->lo[1], co1 = sw_view_hi(dy, 1);
    tap_span *span = tap_spans(p, dy->lo[2], dy->lo[3], ho, wo, x, name, &s);
    if (!span) {
        return s;
    }
    int64_t blocked = wo < INTERLEAVE_BELOW_WIDTH ? (co1 - co0) / LANES * LANES : 0;
    float *x8 = NULL, *dy8 = NULL;
    double *acc = NULL;
    if (blocked > 0) {
        x8 = scratch(CONV_SCRATCH_SRC, xplane * LANES * (int64_t)sizeof(float), name, &s);
        dy8 = x8 ? scratch(CONV_SCRATCH_OUT, ho * wo * LANES * (int64_t)sizeof(float), name, &s) : NULL;
        acc = dy8 ? scratch(CONV_SCRATCH_ACC, taps * LANES * (int64_t)sizeof(double), name, &s) : NULL;
        if (!acc) {
            return s;
        }
    }
    for (int64_t cb = co0; cb < co0 + blocked; cb += LANES) {
        /* acc[k * LANES + l]: tap k of channel cb + l, summed over the samples in order */
        for (int64_t i = 0; i < taps * LANES; i++) {
            acc[i] = 0.0;
        }
        for (int64_t n = dy->lo[0]; n < sw_view_hi(dy, 0); n++) {
            const float *in[LANES], *g[LANES];
            for (int l = 0; l < LANES; l++) {
                in[l] = plane_of(x, n, (cb + l) / p->group_co);
                g[l] = plane_of(dy, n, cb + l);
            }
            lanes_pack(x8, in, xplane);
            lanes_pack(dy8, g, ho * wo);
            for (int64_t k = 0; k < taps; k++) {
                const tap_span *t = &span[k];
                if (tap_empty(t)) {
                    continue;
                }
                double part[LANES];
                lanes_dot(part, dy8 + (t->ra * wo + t->ca) * LANES, wo, x8 + t->base * LANES, ldb, t->rows, t->n,
                          p->sw);
                for (int l = 0; l < LANES; l++) {
                    acc[k * LANES + l] += part[l];
                }
            }
        }
        for (int l = 0; l < LANES; l++) {
            for (int64_t k = 0; k < taps; k++) {
                dw[(cb + l - co0) * taps + k] = (float)acc[k * LANES + l];
            }
        }
    }
    for (int64_t co = co0 + blocked; co < co1; co++) {
        for (int64_t k = 0; k < taps; k++) {
            const tap_span *t = &span[k];
            double a = 0.0;
            for (int64_t n = dy->lo[0]; n < sw_view_hi(dy, 0) && !tap_empty(t); n++) {
                a += tap_dot(plane_of(dy, n, co) + t->ra * wo + t->ca, wo, plane_of(x, n, co / p->group_co) + t->base,
                             ldb, t->rows, t->n, p->sw);
            }
            dw[(co - co0) * taps + k] = (float)a;
        }
    }
    return SW_OK;
}
