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

__attribute__((target("avx512f"))) static int argmax16(const float *xp, int64_t xw, int64_t first, int64_t step,
                                                        int n, int64_t kh, int64_t kw, int32_t *at) {
    /* lane l: window of output l, first element at xp[first + l*step]; lanes past n repeat the last */
    int32_t start[16];
    for (int l = 0; l < 16; l++) {
        start[l] = (int32_t)(first + (l < n ? l : n - 1) * step);
    }
    const __m512i base = _mm512_loadu_si512(start);
    __m512 best = _mm512_i32gather_ps(base, xp, 4);
    __m512i win = _mm512_setzero_si512();   /* the winner's (i, j) in the window, packed */
    __mmask16 nan = _mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q);
    for (int64_t i = 0; i < kh; i++) {
        for (int64_t j = i == 0 ? 1 : 0; j < kw; j++) {
            const __m512i idx = _mm512_add_epi32(base, _mm512_set1_epi32((int32_t)(i * xw + j)));
            const __m512 v = _mm512_i32gather_ps(idx, xp, 4);
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

__attribute__((target("avx2"))) static int argmax8(const float *xp, int64_t xw, int64_t first, int64_t step, int n,
                                                    int64_t kh, int64_t kw, int32_t *at) {
    int32_t start[8];
    for (int l = 0; l < 8; l++) {
        start[l] = (int32_t)(first + (l < n ? l : n - 1) * step);
    }
    const __m256i base = _mm256_loadu_si256((const __m256i *)start);
    __m256 best = _mm256_i32gather_ps(xp, base, 4);
    __m256i win = _mm256_setzero_si256();   /* the winner's (i, j) in the window, packed */
    __m256 nan = _mm256_cmp_ps(best, best, _CMP_UNORD_Q);
    for (int64_t i = 0; i < kh; i++) {
        for (int64_t j = i == 0 ? 1 : 0; j < kw; j++) {
            const __m256i idx = _mm256_add_epi32(base, _mm256_set1_epi32((int32_t)(i * xw + j)));
            const __m256 v = _mm256_i32gather_ps(xp, idx, 4);
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

int pool_argmax_run(int lanes, const float *xp, int64_t xw, int64_t first, int64_t step, int n, int64_t kh,
                    int64_t kw, int32_t *at) {
    return lanes == 16 ? argmax16(xp, xw, first, step, n, kh, kw, at) : argmax8(xp, xw, first, step, n, kh, kw, at);
}

#else /* not x86-64 with GCC or Clang: pool_argmax_lanes() is 0 and this is never called */
int pool_argmax_run(int lanes, const float *xp, int64_t xw, int64_t first, int64_t step, int n, int64_t kh,
                    int64_t kw, int32_t *at) {
    (void)lanes, (void)xp, (void)xw, (void)first, (void)step, (void)n, (void)kh, (void)kw, (void)at;
    return 0;
}
#endif
