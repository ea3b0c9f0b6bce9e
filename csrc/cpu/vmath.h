/*
 * vmath.h -- exp and erf for float as branch-free inline code, so that a loop calling them
 * vectorizes (a libm call per element does not: without -ffast-math GCC has no vector expf
 * or erff to call).  GELU, sigmoid and SiLU (activation.c) and the softmaxes (softmax.c,
 * softmax_dim.c) use them.
 *
 * Accuracy, measured against double precision over dense grids of floats:
 *   sw_vexpf         within 1 ulp on [-87.3, 88.3]; 0 below -87.34 (where exp is subnormal or 0)
 *   sw_verf_sqrt1_2  erf(x / sqrt 2) within 1.4 ulp; +-1 for |x| >= 5.66 and +-inf; NaN for NaN
 * libm's expf and erff are within 1 ulp, so results may differ from them in the last bit or
 * two, never more; PyTorch's own vectorized GELU uses a coarser erf (absolute error 1.5e-7).
 *
 * Every operation is a plain float add, multiply or compare-select (no fma, no -ffast-math),
 * so the AVX2 and the baseline clones of a loop (simd.h) give the same bits, and so does any
 * split of a tensor across workers: an element's value depends on that element alone.
 */
#ifndef SHARDWISE_CPU_VMATH_H
#define SHARDWISE_CPU_VMATH_H

#include <math.h>    /* INFINITY */
#include <stdint.h>  /* int32_t, uint32_t, int64_t */
#include <string.h>  /* memcpy: the bit casts */

#include "simd.h"    /* SW_INLINE: compiled into each clone that calls them */

/* exp(x): x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (Cody and Waite's two-part
 * ln2), exp(r) by Cephes' degree-7 minimax polynomial, times 2^n built in the exponent bits.
 * x is clamped to [-87.33, 88.37] so that 2^n stays a normal float; below -87.34 the result
 * is 0 (a select), above 88.37 it is the largest value the clamp allows, not infinity: callers
 * here only take exp of arguments <= 0. */
static SW_INLINE float sw_vexpf(float x) {
    const float lo = -87.33654f, hi = 88.37626f;
    /* one compare per select, each done unconditionally: GCC will not speculate a compare
     * (it may raise an FP exception) into a vector select, so nested ?: would not vectorize */
    const float xl = x < lo ? lo : x;
    const float xc = xl > hi ? hi : xl;
    /* round to nearest by the 1.5 * 2^23 trick: float adds only, vectorizable without SSE4.1 */
    const float magic = 12582912.0f;
    const float n = (xc * 1.44269504088896341f + magic) - magic;
    float r = xc - n * 0.693359375f;   /* ln2's high part: n * it is exact */
    r = r - n * -2.12194440e-4f;       /* ln2 - 0.693359375 */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;   /* 2^n, n in [-126, 127] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    const float e = p * scale;
    return x < lo ? 0.0f : e;
}

/* exp(x) for every x, overflowing to infinity as libm's expf does: sigmoid and SiLU take exp(-x),
 * which is large for x << 0.  Above sw_vexpf's clamp (88.376, where 2^n would leave the normal
 * range) it is 2 exp(x - ln2) (the rounding of x - ln2 costs up to ~30 ulp there, where sigmoid
 * and SiLU are below 1e-38); above ln(FLT_MAX) = 88.7228 it is infinity.  A NaN stays NaN. */
static SW_INLINE float sw_vexpf_full(float x) {
    const float hi = 88.37626f;
    const float xs = x > hi ? x - 0.693147180559945f : x;
    const float e = sw_vexpf(xs);
    const float e2 = x > hi ? e * 2.0f : e;
    return x > 88.72283905f ? INFINITY : e2;
}

/* erf(x / sqrt 2), the heart of GELU's Phi(x) = (1 + erf(x / sqrt 2)) / 2, given
 * e = sw_vexpf(-0.5f * x * x): e / sqrt(2 pi) is the density phi(x) that GELU's gradient needs
 * too, so one exp serves both.  With z = x / sqrt 2, both branches computed, one selected:
 *   |z| < 0.921875:  z + z P(z^2), P of degree 5 (erf(z) / z - 1 is even);
 *   otherwise:       sign(z) (1 - e R(u)), u = 1 / (1 + min(|z|, 4)), R of degree 7 ~ the scaled
 *                    complement erfc(t) exp(t^2), smooth in u; beyond |z| = 4 erf rounds to +-1.
 * The coefficients are least-squares fits refined toward minimax error (Lawson's iteration),
 * rounded to float. */
static SW_INLINE float sw_verf_sqrt1_2(float x, float e) {
    const float z = x * 0.70710678118654752440f;
    const float s = z * z;
    float p = -0x1.3b4666p-11f;
    p = p * s + 0x1.478c8ap-8f;
    p = p * s + -0x1.b69a7ep-6f;
    p = p * s + 0x1.ce1b94p-4f;
    p = p * s + -0x1.8126eep-2f;
    p = p * s + 0x1.06eba6p-3f;
    const float small = p * z + z;

    const float a = z < 0.0f ? -z : z;
    const float t = a < 4.0f ? a : 4.0f;
    const float u = 1.0f / (1.0f + t);
    float r = -0x1.034ac4p-3f;
    r = r * u + 0x1.9a3326p-7f;
    r = r * u + 0x1.bd6a9ap-1f;
    r = r * u + -0x1.939bb0p+0f;
    r = r * u + 0x1.927ad0p-1f;
    r = r * u + 0x1.d0cd6ep-2f;
    r = r * u + 0x1.2794bap-1f;
    r = r * u + -0x1.5c159cp-11f;
    const float big = 1.0f - e * r;
    const float signed_big = z < 0.0f ? -big : big;
    return a >= 0.921875f ? signed_big : small;   /* NaN: small, NaN */
}

/* ------------------------------------------------------------------ softmax lines
 * The softmaxes (softmax.c: the loss over classes; softmax_dim.c: any axis, attention) take a
 * line's max and its sum of exp in these two, so that every worker holding a part of a line
 * recomputes the same bits.  Lanes: element k of the line goes to lane k mod SW_LANES, the
 * lanes are combined in one fixed order at the end, so the result depends on the line alone
 * (not on a split, a stride or a clone) and the loops vectorize without reassociating
 * anything.  `stride` is the elements' distance (1: contiguous; a constant 1 after inlining
 * lets the loops vectorize). */
#define SW_LANES 8

/* max over k < n of scale * x[k stride]; -inf for n = 0 (a NaN element is passed over). */
static SW_INLINE float sw_line_max(const float *x, int64_t stride, int64_t n, float scale) {
    float m[SW_LANES];
    for (int j = 0; j < SW_LANES; j++) {
        m[j] = -INFINITY;
    }
    int64_t k = 0;
    for (; k + SW_LANES <= n; k += SW_LANES) {
        for (int j = 0; j < SW_LANES; j++) {
            const float v = scale * x[(k + j) * stride];
            m[j] = v > m[j] ? v : m[j];
        }
    }
    for (int j = 0; k < n; k++, j++) {
        const float v = scale * x[k * stride];
        m[j] = v > m[j] ? v : m[j];
    }
    float r = m[0];
    for (int j = 1; j < SW_LANES; j++) {
        r = m[j] > r ? m[j] : r;
    }
    return r;
}

/* e_k = exp(scale * x[k stride] - mx) for k < n, stored at out[k ostride] when out is not NULL;
 * returns the sum of the e_k in double (per lane, then the lanes pairwise). */
static SW_INLINE double sw_line_exp_sum(const float *x, int64_t stride, int64_t n, float scale, float mx, float *out,
                                     int64_t ostride) {
    double acc[SW_LANES];
    for (int j = 0; j < SW_LANES; j++) {
        acc[j] = 0.0;
    }
    int64_t k = 0;
    if (out) {
        for (; k + SW_LANES <= n; k += SW_LANES) {
            for (int j = 0; j < SW_LANES; j++) {
                const float e = sw_vexpf(scale * x[(k + j) * stride] - mx);
                out[(k + j) * ostride] = e;
                acc[j] += (double)e;
            }
        }
    } else {
        for (; k + SW_LANES <= n; k += SW_LANES) {
            for (int j = 0; j < SW_LANES; j++) {
                acc[j] += (double)sw_vexpf(scale * x[(k + j) * stride] - mx);
            }
        }
    }
    for (int j = 0; k < n; k++, j++) {
        const float e = sw_vexpf(scale * x[k * stride] - mx);
        if (out) {
            out[k * ostride] = e;
        }
        acc[j] += (double)e;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* sum over k < n of (double)a[k astride] * b[k bstride], in lanes as above. */
static SW_INLINE double sw_line_dot(const float *a, int64_t astride, const float *b, int64_t bstride, int64_t n) {
    double acc[SW_LANES];
    for (int j = 0; j < SW_LANES; j++) {
        acc[j] = 0.0;
    }
    int64_t k = 0;
    for (; k + SW_LANES <= n; k += SW_LANES) {
        for (int j = 0; j < SW_LANES; j++) {
            acc[j] += (double)a[(k + j) * astride] * (double)b[(k + j) * bstride];
        }
    }
    for (int j = 0; k < n; k++, j++) {
        acc[j] += (double)a[k * astride] * (double)b[k * bstride];
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Sum over k < n of f(x[k]) = x[k] - shift (or its square: squares) in double, element k in lane
 * k mod SW_LANES, the lanes added in one fixed order: vectorizes, and a line's statistics are
 * the same bits on every worker that computes them (layer norm's rows, group norm's groups). */
static SW_INLINE double sw_lane_sum(const float *restrict x, int64_t n, double shift, int squares) {
    double acc[SW_LANES];
    for (int j = 0; j < SW_LANES; j++) {
        acc[j] = 0.0;
    }
    int64_t k = 0;
    for (; k + SW_LANES <= n; k += SW_LANES) {
        for (int j = 0; j < SW_LANES; j++) {
            const double c = (double)x[k + j] - shift;
            acc[j] += squares ? c * c : c;
        }
    }
    for (int j = 0; k < n; k++, j++) {
        const double c = (double)x[k] - shift;
        acc[j] += squares ? c * c : c;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Mean and 1 / sqrt(var + eps) of one line of n contiguous floats (the biased variance, two
 * passes: the mean, then the squares about it); rms: the mean taken as 0 (RMS normalization). */
static SW_INLINE void sw_row_moments(const float *restrict x, int64_t n, double eps, int rms, double *mean,
                                     double *invstd) {
    const double mu = rms ? 0.0 : sw_lane_sum(x, n, 0.0, 0) / (double)n;
    const double v = sw_lane_sum(x, n, mu, 1);
    *mean = mu;
    *invstd = 1.0 / sqrt(v / (double)n + eps);
}

#endif /* SHARDWISE_CPU_VMATH_H */
