/*
 * conv_direct_avx2.c -- the inner loops of the direct convolution (conv_direct.c),
 * written for AVX2 + FMA and compiled for them function by function
 * (target attributes), so the extension still loads on any x86-64: callers ask
 * conv_avx2_available() first and use im2col + GEMM otherwise.
 *
 * Both loops compute an outer-product sum with 8-float vectors across output
 * columns (output channels, or input channels for the data gradient):
 *
 *   gather   out[prow[i]][c] = sum over t < nt of w(trow[t], c) * src[pq[i] + toff[t]]
 *            a tile of 6 pixels i x 16 columns c: 12 accumulators; per tap t two
 *            weight loads, six broadcasts, twelve FMAs
 *   reduce   acc[trow[t]][c] += sum over i < n of dyt[prow[i]][c] * src[pq[i] + toff[t]]
 *            a tile of 6 taps t x 16 columns c, the sum over the pixels i
 *            held in registers
 *
 * so each loaded input value feeds 16 columns and each loaded weight (or dy)
 * vector 6 pixels (taps): 12 FMAs per 8 loads, as many as the 16 vector
 * registers allow (12 accumulators, 2 operands, 1 broadcast).  pq[] and toff[]
 * index a zero-padded copy of the input, so one loop serves any stride,
 * padding and kernel; the tables (conv_direct.c) list a subset of the pixels and
 * taps, in any order: a tile of pixels skips the taps that read only padding for
 * all of its pixels, a tile of taps the pixels that do.  Measured
 * (one thread of the 2-core AMD EPYC, Zen 3): 80-90 GFLOP/s on the 3x3 layers
 * of the scaled ResNet-18, against OpenBLAS SGEMM's 94 on 1024^3
 * (docs/cpu_kernels.md).
 *
 * Summation order is fixed by the tables and the tile order, not by timing:
 * the same call gives the same bits.
 */
#include <string.h>  /* memcpy */

#include "conv_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2_FMA __attribute__((target("avx2,fma")))

int conv_avx2_available(void) {
    __builtin_cpu_init();   /* idempotent; also checks that the OS saves the YMM registers */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* ------------------------------------------------------------------ the tiles */

enum { TILE = CONV_TILE };   /* pixels (gather) or taps (reduce) per tile */

/* o[j][0..16) = (o[j] if add) + sum over i < n of v[r[i]*ldv + 0..16) * x[j][q[i]], j < 6.
 * Both loops are this outer-product sum: gather with q the taps' offsets, r their
 * weight rows, x[j] pixel j's source and v the packed weights; reduce with q the
 * pixels' offsets, r their dy rows, x[j] tap j's source and v the transposed dy. */
AVX2_FMA static void tile_6x16(const float *const x[TILE], const int32_t *q, const int32_t *r, int64_t n,
                               const float *v, int64_t ldv, float *const o[TILE], int add) {
    const float *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3], *x4 = x[4], *x5 = x[5];
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
    __m256 a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
    for (int64_t i = 0; i < n; i++) {
        const int64_t at = q[i];
        const float *vi = v + (int64_t)r[i] * ldv;
        const __m256 v0 = _mm256_loadu_ps(vi), v1 = _mm256_loadu_ps(vi + 8);
        __m256 b;
#define TILE_STEP(j)                              \
    b = _mm256_broadcast_ss(x##j + at);           \
    a##j##0 = _mm256_fmadd_ps(b, v0, a##j##0);    \
    a##j##1 = _mm256_fmadd_ps(b, v1, a##j##1);
        TILE_STEP(0) TILE_STEP(1) TILE_STEP(2) TILE_STEP(3) TILE_STEP(4) TILE_STEP(5)
#undef TILE_STEP
    }
#define TILE_STORE(j)                                                                       \
    _mm256_storeu_ps(o[j], add ? _mm256_add_ps(_mm256_loadu_ps(o[j]), a##j##0) : a##j##0);   \
    _mm256_storeu_ps(o[j] + 8, add ? _mm256_add_ps(_mm256_loadu_ps(o[j] + 8), a##j##1) : a##j##1);
    TILE_STORE(0) TILE_STORE(1) TILE_STORE(2) TILE_STORE(3) TILE_STORE(4) TILE_STORE(5)
#undef TILE_STORE
}

/* The same for the last 8 columns when ncol % 16 == 8. */
AVX2_FMA static void tile_6x8(const float *const x[TILE], const int32_t *q, const int32_t *r, int64_t n,
                              const float *v, int64_t ldv, float *const o[TILE], int add) {
    const float *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3], *x4 = x[4], *x5 = x[5];
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t at = q[i];
        const __m256 v0 = _mm256_loadu_ps(v + (int64_t)r[i] * ldv);
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(x0 + at), v0, a0);
        a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(x1 + at), v0, a1);
        a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(x2 + at), v0, a2);
        a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(x3 + at), v0, a3);
        a4 = _mm256_fmadd_ps(_mm256_broadcast_ss(x4 + at), v0, a4);
        a5 = _mm256_fmadd_ps(_mm256_broadcast_ss(x5 + at), v0, a5);
    }
    const __m256 sum[TILE] = {a0, a1, a2, a3, a4, a5};
    for (int j = 0; j < TILE; j++) {
        _mm256_storeu_ps(o[j], add ? _mm256_add_ps(_mm256_loadu_ps(o[j]), sum[j]) : sum[j]);
    }
}

/* ------------------------------------------------------------------ gather */

/* Column blocks outside, pixel tiles inside: a block's weights (K x 16 floats,
 * 9 KiB for a 16-channel 3x3 layer, 72 KiB for 128 channels) stay in L1/L2
 * while the tiles stream through the source region. */
AVX2_FMA void conv_avx2_gather(const float *src, const int32_t *pq, const int32_t *prow, int64_t n,
                               const int32_t *toff, const int32_t *trow, int64_t nt, const float *wpk, int64_t k,
                               int64_t ncol, float *out, int64_t ldo) {
    float spare[TILE * 16];   /* the rows of a short last tile that hold no pixel */
    for (int64_t c0 = 0; c0 < ncol; c0 += 16) {
        int64_t width = ncol - c0 >= 16 ? 16 : 8;
        const float *w = wpk + c0 * k;
        for (int64_t i0 = 0; i0 < n; i0 += TILE) {
            int64_t m = n - i0 < TILE ? n - i0 : TILE;
            const float *x[TILE];
            float *o[TILE];
            for (int64_t j = 0; j < TILE; j++) {
                int64_t i = i0 + (j < m ? j : m - 1);   /* a short tile repeats its last pixel */
                x[j] = src + pq[i];
                o[j] = j < m ? out + (int64_t)prow[i] * ldo + c0 : spare + j * 16;
            }
            if (width == 16) {
                tile_6x16(x, toff, trow, nt, w, 16, o, 0);
            } else {
                tile_6x8(x, toff, trow, nt, w, 8, o, 0);
            }
        }
    }
}

/* ------------------------------------------------------------------ reduce */

AVX2_FMA void conv_avx2_reduce(const float *src, const int32_t *pq, const int32_t *prow, int64_t n,
                               const int32_t *toff, const int32_t *trow, int64_t nt, const float *dyt, int64_t ldd,
                               int64_t ncol, float *acc, int64_t lda) {
    float spare[TILE * 16] = {0};   /* accumulators of the taps a short last tile does not have */
    for (int64_t c0 = 0; c0 < ncol; c0 += 16) {
        int wide = ncol - c0 >= 16;
        for (int64_t t0 = 0; t0 < nt; t0 += TILE) {
            int64_t m = nt - t0 < TILE ? nt - t0 : TILE;
            const float *x[TILE];
            float *a[TILE];
            for (int64_t j = 0; j < TILE; j++) {
                x[j] = src + toff[t0 + (j < m ? j : m - 1)];
                a[j] = j < m ? acc + (int64_t)trow[t0 + j] * lda + c0 : spare + j * 16;
            }
            if (wide) {
                tile_6x16(x, pq, prow, n, dyt + c0, ldd, a, 1);
            } else {
                tile_6x8(x, pq, prow, n, dyt + c0, ldd, a, 1);
            }
        }
    }
}

/* ------------------------------------------------------------------ transpose */

static inline float act(float v, const float *bias, int64_t c, int relu) {
    if (bias) {
        v += bias[c];
    }
    return relu ? (v > 0.0f ? v : 0.0f) : v;
}

/* v[0..8) (rows) -> their columns, in registers: unpack, shuffle, lane permute. */
AVX2_FMA static inline void transpose8(__m256 v[8]) {
    __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
    __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
    __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
    __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    v[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    v[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    v[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    v[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    v[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    v[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    v[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    v[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* 8x8 blocks through registers (transpose8); the edges one float at a time. */
AVX2_FMA void conv_avx2_transpose(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                                  int64_t ldd, const float *bias, int relu) {
    const __m256 zero = _mm256_setzero_ps();
    int64_t r0 = 0;
    for (; r0 + 8 <= rows; r0 += 8) {
        int64_t c0 = 0;
        for (; c0 + 8 <= cols; c0 += 8) {
            const float *s = src + r0 * lds + c0;
            __m256 col[8];
            for (int j = 0; j < 8; j++) {
                col[j] = _mm256_loadu_ps(s + j * lds);
            }
            transpose8(col);
            for (int j = 0; j < 8; j++) {   /* col[j]: column c0 + j of rows r0 .. r0 + 7 */
                __m256 v = col[j];
                if (bias) {
                    v = _mm256_add_ps(v, _mm256_broadcast_ss(bias + c0 + j));
                }
                if (relu) {
                    v = _mm256_max_ps(v, zero);   /* the second operand on NaN: 0, as act() */
                }
                _mm256_storeu_ps(dst + (c0 + j) * ldd + r0, v);
            }
        }
        for (; c0 < cols; c0++) {
            for (int64_t r = r0; r < r0 + 8; r++) {
                dst[c0 * ldd + r] = act(src[r * lds + c0], bias, c0, relu);
            }
        }
    }
    for (; r0 < rows; r0++) {
        for (int64_t c = 0; c < cols; c++) {
            dst[c * ldd + r0] = act(src[r0 * lds + c], bias, c, relu);
        }
    }
}

/* mask > 0 ? value : 0, relu_backward's select (a NaN mask gives 0). */
static inline float masked(float v, float m) { return m > 0.0f ? v : 0.0f; }

AVX2_FMA void conv_avx2_transpose_masked(const float *src, const float *mask, int64_t lds, int64_t rows,
                                         int64_t cols, float *dst, int64_t ldd) {
    const __m256 zero = _mm256_setzero_ps();
    int64_t r0 = 0;
    for (; r0 + 8 <= rows; r0 += 8) {
        int64_t c0 = 0;
        for (; c0 + 8 <= cols; c0 += 8) {
            const int64_t at = r0 * lds + c0;
            __m256 col[8];
            for (int j = 0; j < 8; j++) {   /* the mask before the transpose: the same lanes */
                __m256 keep = _mm256_cmp_ps(_mm256_loadu_ps(mask + at + j * lds), zero, _CMP_GT_OQ);
                col[j] = _mm256_and_ps(_mm256_loadu_ps(src + at + j * lds), keep);
            }
            transpose8(col);
            for (int j = 0; j < 8; j++) {
                _mm256_storeu_ps(dst + (c0 + j) * ldd + r0, col[j]);
            }
        }
        for (; c0 < cols; c0++) {
            for (int64_t r = r0; r < r0 + 8; r++) {
                dst[c0 * ldd + r] = masked(src[r * lds + c0], mask[r * lds + c0]);
            }
        }
    }
    for (; r0 < rows; r0++) {
        for (int64_t c = 0; c < cols; c++) {
            dst[c * ldd + r0] = masked(src[r0 * lds + c], mask[r0 * lds + c]);
        }
    }
}

#else /* not x86-64 with GCC or Clang: no direct loops; conv_avx2_available() says so and every
       * convolution takes im2col + GEMM, so the functions below are never called */
int conv_avx2_available(void) { return 0; }

void conv_avx2_gather(const float *src, const int32_t *pq, const int32_t *prow, int64_t n, const int32_t *toff,
                      const int32_t *trow, int64_t nt, const float *wpk, int64_t k, int64_t ncol, float *out,
                      int64_t ldo) {
    (void)src, (void)pq, (void)prow, (void)n, (void)toff, (void)trow, (void)nt, (void)wpk, (void)k, (void)ncol;
    (void)out, (void)ldo;
}

void conv_avx2_reduce(const float *src, const int32_t *pq, const int32_t *prow, int64_t n, const int32_t *toff,
                      const int32_t *trow, int64_t nt, const float *dyt, int64_t ldd, int64_t ncol, float *acc,
                      int64_t lda) {
    (void)src, (void)pq, (void)prow, (void)n, (void)toff, (void)trow, (void)nt, (void)dyt, (void)ldd, (void)ncol;
    (void)acc, (void)lda;
}

void conv_avx2_transpose(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst, int64_t ldd,
                         const float *bias, int relu) {
    (void)src, (void)lds, (void)rows, (void)cols, (void)dst, (void)ldd, (void)bias, (void)relu;
}

void conv_avx2_transpose_masked(const float *src, const float *mask, int64_t lds, int64_t rows, int64_t cols,
                                float *dst, int64_t ldd) {
    (void)src, (void)mask, (void)lds, (void)rows, (void)cols, (void)dst, (void)ldd;
}
#endif
