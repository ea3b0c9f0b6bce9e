/*
 * pool_argmax.c -- max pooling's winners for a run of windows at once, in vector lanes.
 *
 * The backward pass of max pooling finds each window's first maximum again (pool.c keeps no
 * indices from the forward pass).  One window at a time that is a chain of about 9 dependent
 * selects per 3x3 window, ~40 cycles: the scaled AlexNet's first pooling took 21 ms backward
 * against 6 forward.  Here a lane is a window: the windows of consecutive outputs of one row,
 * 16 (AVX-512) or 8 (AVX2) at a time, each lane reading its window's element (i, j) through a
 * gather (any stride), in the scalar code's order: row-major over the window, a strict
 * comparison, so each lane keeps the first of equal maxima and the sign of a zero maximum is
 * the first zero's.  A NaN wins in the scalar rule; a run whose windows hold one reports it
 * and the caller takes the exact scalar path for that run.
 *
 * Compiled for AVX-512F or AVX2 function by function (target attributes); pool.c asks
 * pool_argmax_lanes() which runs (the direct convolution's instruction set, sw_conv_get_isa:
 * _core.conv_isa('avx2') selects the AVX2 lanes on an AVX-512 CPU) and keeps the scalar
 * loop where neither is available.
 */
#include "pool_argmax.h"

#include "kernels.h"   /* sw_conv_get_isa */

int pool_argmax_lanes(void) {
    switch (sw_conv_get_isa()) {
    case SW_CONV_ISA_AVX512: return 16;
    case SW_CONV_ISA_AVX2: return 8;
    default: return 0;   /* no AVX2 + FMA: the scalar loop */
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* Element (i, j) of the windows of lanes l < n, whose first elements lie at p[l * step] (p: the
 * row of element (i, j) of lane 0), for step 1 or 2: one or two masked loads (nothing read past the
 * last window's element) and, for step 2, the even elements of the pair.  Lanes from n on: 0. */
__attribute__((target("avx512f"))) static inline __m512 row16(const float *p, int64_t step, int n) {
    if (step == 1) {
        return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
    }
    const int need = 2 * n - 1;   /* elements p[0 .. 2(n-1)] */
    const __m512 lo = _mm512_maskz_loadu_ps((__mmask16)(need >= 16 ? 0xffffu : (1u << need) - 1u), p);
    const __m512 hi = need > 16 ? _mm512_maskz_loadu_ps((__mmask16)((1u << (need - 16)) - 1u), p + 16)
                                : _mm512_setzero_ps();
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    return _mm512_permutex2var_ps(lo, even, hi);
}

__attribute__((target("avx512f"))) static int argmax16(const float *xp, int64_t xw, int64_t first, int64_t step,
                                                        int n, int64_t kh, int64_t kw, int32_t *at) {
    /* lane l: window of output l, first element at xp[first + l*step]; lanes past n repeat the last
     * (gathers) or read zeros (loads, step 1 or 2: the gathers' latency was most of the loop) */
    const int rows = step <= 2;
    int32_t start[16];
    for (int l = 0; l < 16; l++) {
        start[l] = (int32_t)(first + (l < n ? l : n - 1) * step);
    }
    const __m512i base = _mm512_loadu_si512(start);
    __m512 best = rows ? row16(xp + first, step, n) : _mm512_i32gather_ps(base, xp, 4);
    __m512i win = _mm512_setzero_si512();   /* the winner's (i, j) in the window, packed */
    __mmask16 nan = _mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q);
    for (int64_t i = 0; i < kh; i++) {
        for (int64_t j = i == 0 ? 1 : 0; j < kw; j++) {
            __m512 v;
            if (rows) {
                v = row16(xp + first + i * xw + j, step, n);
            } else {
                const __m512i idx = _mm512_add_epi32(base, _mm512_set1_epi32((int32_t)(i * xw + j)));
                v = _mm512_i32gather_ps(idx, xp, 4);
            }
            const __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);   /* never for a NaN */
            best = _mm512_mask_mov_ps(best, take, v);
            win = _mm512_mask_mov_epi32(win, take, _mm512_set1_epi32((int32_t)POOL_TAP(i, j)));
            nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        }
    }
    if (nan & (__mmask16)((1u << n) - 1u)) {
        return 0;
    }
    _mm512_storeu_si512(start, win);
    for (int l = 0; l < n; l++) {
        at[l] = start[l];
    }
    return 1;
}

/* row16 with 8 lanes: masked loads (nothing read past the last window's element) unless `whole`
 * (the 8 or 16 floats from p lie in the plane), for step 2 the even elements of the pair (a
 * shuffle within 128-bit lanes, then a 64-bit permute).  Lanes past n: 0, or whatever follows
 * when whole. */
__attribute__((target("avx2"))) static inline __m256 row8(const float *p, int64_t step, int n, int whole) {
    if (whole) {   /* all 8 or 16 floats lie in the plane: plain loads (vmaskmovps is slow on AMD's cores) */
        if (step == 1) {
            return _mm256_loadu_ps(p);
        }
        const __m256 even = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), _MM_SHUFFLE(2, 0, 2, 0));
        return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), _MM_SHUFFLE(3, 1, 2, 0)));
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    if (step == 1) {
        return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
    }
    const __m256i need = _mm256_set1_epi32(2 * n - 1);   /* elements p[0 .. 2(n-1)] */
    const __m256 lo = _mm256_maskload_ps(p, _mm256_cmpgt_epi32(need, lane));
    const __m256 hi = _mm256_maskload_ps(p + 8, _mm256_cmpgt_epi32(need, _mm256_add_epi32(lane, _mm256_set1_epi32(8))));
    const __m256 even = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));   /* lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6 */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), _MM_SHUFFLE(3, 1, 2, 0)));
}

__attribute__((target("avx2"))) static int argmax8(const float *xp, int64_t plane, int64_t xw, int64_t first,
                                                    int64_t step, int n, int64_t kh, int64_t kw, int32_t *at) {
    const int rows = step <= 2;
    /* whole vectors from each window row of lane 0 stay in the plane: plain loads (lanes from n on
     * read elements of no window, and are ignored) */
    const int whole = first + (kh - 1) * xw + (kw - 1) + 8 * step <= plane;
    int32_t start[8];
    for (int l = 0; l < 8; l++) {
        start[l] = (int32_t)(first + (l < n ? l : n - 1) * step);
    }
    const __m256i base = _mm256_loadu_si256((const __m256i *)start);
    __m256 best = rows ? row8(xp + first, step, n, whole) : _mm256_i32gather_ps(xp, base, 4);
    __m256i win = _mm256_setzero_si256();   /* the winner's (i, j) in the window, packed */
    __m256 nan = _mm256_cmp_ps(best, best, _CMP_UNORD_Q);
    for (int64_t i = 0; i < kh; i++) {
        for (int64_t j = i == 0 ? 1 : 0; j < kw; j++) {
            __m256 v;
            if (rows) {
                v = row8(xp + first + i * xw + j, step, n, whole);
            } else {
                const __m256i idx = _mm256_add_epi32(base, _mm256_set1_epi32((int32_t)(i * xw + j)));
                v = _mm256_i32gather_ps(xp, idx, 4);
            }
            const __m256 take = _mm256_cmp_ps(v, best, _CMP_GT_OQ);   /* all ones where v > best */
            best = _mm256_blendv_ps(best, v, take);
            const __m256i tap = _mm256_set1_epi32((int32_t)POOL_TAP(i, j));
            win = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(win), _mm256_castsi256_ps(tap), take));
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
    }
    if (_mm256_movemask_ps(nan) & ((1 << n) - 1)) {
        return 0;
    }
    _mm256_storeu_si256((__m256i *)start, win);
    for (int l = 0; l < n; l++) {
        at[l] = start[l];
    }
    return 1;
}

/* The forward pass: the maxima of n windows (step 1 or 2), the same comparisons in the same order
 * as argmax16 / argmax8 and pool.c's scalar chain, then the fused ReLU (no NaN reaches it: a run
 * with one returns 0); `whole`: 8 lanes read with plain loads. */
__attribute__((target("avx512f"))) static int max16(const float *xp, int64_t xw, int64_t first, int64_t step, int n,
                                                     int64_t kh, int64_t kw, int relu, float *y) {
    __m512 best = row16(xp + first, step, n);
    __mmask16 nan = _mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q);
    for (int64_t i = 0; i < kh; i++) {
        for (int64_t j = i == 0 ? 1 : 0; j < kw; j++) {
            const __m512 v = row16(xp + first + i * xw + j, step, n);
            best = _mm512_mask_mov_ps(best, _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ), v);
            nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        }
    }
    if (nan & (__mmask16)((1u << n) - 1u)) {
        return 0;
    }
    if (relu) {   /* v > 0 ? v : +0 (vmaxps gives its second operand for zeros of either sign) */
        best = _mm512_max_ps(best, _mm512_setzero_ps());
    }
    _mm512_mask_storeu_ps(y, (__mmask16)((1u << n) - 1u), best);
    return 1;
}

__attribute__((target("avx2"))) static int max8(const float *xp, int64_t xw, int64_t first, int64_t step, int n,
                                                 int64_t kh, int64_t kw, int relu, float *y) {
    __m256 best = row8(xp + first, step, 8, 1);
    __m256 nan = _mm256_cmp_ps(best, best, _CMP_UNORD_Q);
    for (int64_t i = 0; i < kh; i++) {
        for (int64_t j = i == 0 ? 1 : 0; j < kw; j++) {
            const __m256 v = row8(xp + first + i * xw + j, step, 8, 1);
            best = _mm256_blendv_ps(best, v, _mm256_cmp_ps(v, best, _CMP_GT_OQ));
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
    }
    if (_mm256_movemask_ps(nan) & ((1 << n) - 1)) {
        return 0;
    }
    if (relu) {
        best = _mm256_max_ps(best, _mm256_setzero_ps());
    }
    float lane[8];
    _mm256_storeu_ps(lane, best);
    for (int l = 0; l < n; l++) {
        y[l] = lane[l];
    }
    return 1;
}

int64_t pool_max_row(int lanes, const float *xp, int64_t plane, int64_t xw, int64_t first, int64_t step, int64_t m,
                     int64_t kh, int64_t kw, int relu, float *y) {
    if (step > 2) {
        return 0;
    }
    if (lanes == 16) {
        for (int64_t l0 = 0; l0 < m; l0 += 16) {
            const int n = (int)(m - l0 < 16 ? m - l0 : 16);
            if (!max16(xp, xw, first + l0 * step, step, n, kh, kw, relu, y + l0)) {
                return l0;
            }
        }
        return m;
    }
    /* runs of 8 read with plain loads (masked ones, vmaskmovps, made short runs slower than the
     * scalar loop); the last run, when shorter, is moved back to end at window m if there are 8,
     * windows computed twice getting the same value twice */
    for (int64_t l0 = 0; l0 < m; l0 += 8) {
        const int64_t at = l0 + 8 <= m || m < 8 ? l0 : m - 8, start = first + at * step;
        const int n = (int)(m - at < 8 ? m - at : 8);
        if (start + (kh - 1) * xw + (kw - 1) + 8 * step > plane ||
            !max8(xp, xw, start, step, n, kh, kw, relu, y + at)) {
            return at;   /* loads past the plane, or a NaN */
        }
    }
    return m;
}

int pool_argmax_run(int lanes, const float *xp, int64_t plane, int64_t xw, int64_t first, int64_t step, int n,
                    int64_t kh, int64_t kw, int32_t *at) {
    return lanes == 16 ? argmax16(xp, xw, first, step, n, kh, kw, at)
                       : argmax8(xp, plane, xw, first, step, n, kh, kw, at);
}

#else /* not x86-64 with GCC or Clang: pool_argmax_lanes() is 0 and these are never called */
int64_t pool_max_row(int lanes, const float *xp, int64_t plane, int64_t xw, int64_t first, int64_t step, int64_t m,
                     int64_t kh, int64_t kw, int relu, float *y) {
    (void)lanes, (void)xp, (void)plane, (void)xw, (void)first, (void)step, (void)m, (void)kh, (void)kw, (void)relu;
    (void)y;
    return 0;
}

int pool_argmax_run(int lanes, const float *xp, int64_t plane, int64_t xw, int64_t first, int64_t step, int n,
                    int64_t kh, int64_t kw, int32_t *at) {
    (void)lanes, (void)xp, (void)plane, (void)xw, (void)first, (void)step, (void)n, (void)kh, (void)kw, (void)at;
    return 0;
}
#endif
