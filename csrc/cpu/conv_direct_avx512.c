/*
 * conv_direct_avx512.c -- the direct convolution's two inner loops (conv_direct_avx2.c's
 * gather and reduce) with 16-float AVX-512 vectors, compiled for AVX-512F function by
 * function (target attributes), so the extension still loads on any x86-64: callers ask
 * conv_avx512_available() (and the chosen instruction set, conv_isa in conv_direct.c).
 *
 * A tile is 6 pixels (gather) or taps (reduce) x 32 columns: 12 accumulators of 16 floats,
 * two column vectors and a broadcast per step, 12 multiply-adds per 8 loads, as the AVX2
 * tile has, at twice the width.  Every output column adds its products in the same order as
 * the AVX2 loops (over the taps, or the pixels, one fused multiply-add each, then the stored
 * value when accumulating), so the two paths give the same bits: only the vector width
 * differs.  The packed weights keep the AVX2 layout (columns in blocks of 16, conv_internal.h):
 * a 32-column tile reads two neighbouring blocks.
 */

#include "conv_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx2,fma")))

int conv_avx512_available(void) {
    __builtin_cpu_init();   /* idempotent; also checks that the OS saves the ZMM registers */
    return __builtin_cpu_supports("avx512f") && conv_avx2_available();
}

enum { TILE = CONV_TILE };   /* pixels (gather) or taps (reduce) per tile */

/* o[j][0..32) = (o[j] if add) + sum over i < n of (va, vb)[r[i]*ldv + 0..16) * x[j][q[i]], j < 6:
 * columns 0..16 from va, 16..32 from vb (two weight blocks, or two halves of a dy row). */
AVX512 static void tile_6x32(const float *const x[TILE], const int32_t *q, const int32_t *r, int64_t n,
                             const float *va, const float *vb, int64_t ldv, float *const o[TILE], int add) {
    const float *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3], *x4 = x[4], *x5 = x[5];
    __m512 a00 = _mm512_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
    __m512 a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
    for (int64_t i = 0; i < n; i++) {
        const int64_t at = q[i], ri = (int64_t)r[i] * ldv;
        const __m512 v0 = _mm512_loadu_ps(va + ri), v1 = _mm512_loadu_ps(vb + ri);
        __m512 b;
#define TILE_STEP(j)                              \
    b = _mm512_set1_ps(x##j[at]);                 \
    a##j##0 = _mm512_fmadd_ps(b, v0, a##j##0);    \
    a##j##1 = _mm512_fmadd_ps(b, v1, a##j##1);
        TILE_STEP(0) TILE_STEP(1) TILE_STEP(2) TILE_STEP(3) TILE_STEP(4) TILE_STEP(5)
#undef TILE_STEP
    }
#define TILE_STORE(j)                                                                            \
    _mm512_storeu_ps(o[j], add ? _mm512_add_ps(_mm512_loadu_ps(o[j]), a##j##0) : a##j##0);        \
    _mm512_storeu_ps(o[j] + 16, add ? _mm512_add_ps(_mm512_loadu_ps(o[j] + 16), a##j##1) : a##j##1);
    TILE_STORE(0) TILE_STORE(1) TILE_STORE(2) TILE_STORE(3) TILE_STORE(4) TILE_STORE(5)
#undef TILE_STORE
}

/* The same for 16 columns (one block). */
AVX512 static void tile_6x16(const float *const x[TILE], const int32_t *q, const int32_t *r, int64_t n,
                             const float *v, int64_t ldv, float *const o[TILE], int add) {
    const float *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3], *x4 = x[4], *x5 = x[5];
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t at = q[i];
        const __m512 v0 = _mm512_loadu_ps(v + (int64_t)r[i] * ldv);
        a0 = _mm512_fmadd_ps(_mm512_set1_ps(x0[at]), v0, a0);
        a1 = _mm512_fmadd_ps(_mm512_set1_ps(x1[at]), v0, a1);
        a2 = _mm512_fmadd_ps(_mm512_set1_ps(x2[at]), v0, a2);
        a3 = _mm512_fmadd_ps(_mm512_set1_ps(x3[at]), v0, a3);
        a4 = _mm512_fmadd_ps(_mm512_set1_ps(x4[at]), v0, a4);
        a5 = _mm512_fmadd_ps(_mm512_set1_ps(x5[at]), v0, a5);
    }
    const __m512 sum[TILE] = {a0, a1, a2, a3, a4, a5};
    for (int j = 0; j < TILE; j++) {
        _mm512_storeu_ps(o[j], add ? _mm512_add_ps(_mm512_loadu_ps(o[j]), sum[j]) : sum[j]);
    }
}

/* The same for the last 8 columns (ncol % 16 == 8), with 8-float vectors. */
AVX512 static void tile_6x8(const float *const x[TILE], const int32_t *q, const int32_t *r, int64_t n,
                            const float *v, int64_t ldv, float *const o[TILE], int add) {
    const float *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3], *x4 = x[4], *x5 = x[5];
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t at = q[i];
        const __m256 v0 = _mm256_loadu_ps(v + (int64_t)r[i] * ldv);
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(x0[at]), v0, a0);
        a1 = _mm256_fmadd_ps(_mm256_set1_ps(x1[at]), v0, a1);
        a2 = _mm256_fmadd_ps(_mm256_set1_ps(x2[at]), v0, a2);
        a3 = _mm256_fmadd_ps(_mm256_set1_ps(x3[at]), v0, a3);
        a4 = _mm256_fmadd_ps(_mm256_set1_ps(x4[at]), v0, a4);
        a5 = _mm256_fmadd_ps(_mm256_set1_ps(x5[at]), v0, a5);
    }
    const __m256 sum[TILE] = {a0, a1, a2, a3, a4, a5};
    for (int j = 0; j < TILE; j++) {
        _mm256_storeu_ps(o[j], add ? _mm256_add_ps(_mm256_loadu_ps(o[j]), sum[j]) : sum[j]);
    }
}

/* The columns from c0: 32 at a time while they last, then 16, then 8. */
static int64_t width_at(int64_t ncol, int64_t c0) {
    int64_t left = ncol - c0;
    return left >= 32 ? 32 : left >= 16 ? 16 : 8;
}

/* conv_avx2_gather with 32-column tiles (conv_internal.h). */
AVX512 void conv_avx512_gather(const float *src, const int32_t *pq, const int32_t *prow, int64_t n,
                               const int32_t *toff, const int32_t *trow, int64_t nt, const float *wpk, int64_t k,
                               int64_t ncol, float *out, int64_t ldo) {
    float spare[TILE * 32];   /* the rows of a short last tile that hold no pixel */
    for (int64_t c0 = 0; c0 < ncol;) {
        const int64_t width = width_at(ncol, c0);
        const float *w = wpk + c0 * k;
        for (int64_t i0 = 0; i0 < n; i0 += TILE) {
            int64_t m = n - i0 < TILE ? n - i0 : TILE;
            const float *x[TILE];
            float *o[TILE];
            for (int64_t j = 0; j < TILE; j++) {
                int64_t i = i0 + (j < m ? j : m - 1);   /* a short tile repeats its last pixel */
                x[j] = src + pq[i];
                o[j] = j < m ? out + (int64_t)prow[i] * ldo + c0 : spare + j * 32;
            }
            if (width == 32) {
                tile_6x32(x, toff, trow, nt, w, w + 16 * k, 16, o, 0);   /* blocks c0 and c0 + 16 */
            } else if (width == 16) {
                tile_6x16(x, toff, trow, nt, w, 16, o, 0);
            } else {
                tile_6x8(x, toff, trow, nt, w, 8, o, 0);
            }
        }
        c0 += width;
    }
}

/* conv_avx2_reduce with 32-column tiles (conv_internal.h). */
AVX512 void conv_avx512_reduce(const float *src, const int32_t *pq, const int32_t *prow, int64_t n,
                               const int32_t *toff, const int32_t *trow, int64_t nt, const float *dyt, int64_t ldd,
                               int64_t ncol, float *acc, int64_t lda) {
    float spare[TILE * 32] = {0};   /* accumulators of the taps a short last tile does not have */
    for (int64_t c0 = 0; c0 < ncol;) {
        const int64_t width = width_at(ncol, c0);
        for (int64_t t0 = 0; t0 < nt; t0 += TILE) {
            int64_t m = nt - t0 < TILE ? nt - t0 : TILE;
            const float *x[TILE];
            float *a[TILE];
            for (int64_t j = 0; j < TILE; j++) {
                x[j] = src + toff[t0 + (j < m ? j : m - 1)];
                a[j] = j < m ? acc + (int64_t)trow[t0 + j] * lda + c0 : spare + j * 32;
            }
            if (width == 32) {
                tile_6x32(x, pq, prow, n, dyt + c0, dyt + c0 + 16, ldd, a, 1);
            } else if (width == 16) {
                tile_6x16(x, pq, prow, n, dyt + c0, ldd, a, 1);
            } else {
                tile_6x8(x, pq, prow, n, dyt + c0, ldd, a, 1);
            }
        }
        c0 += width;
    }
}

#else /* not x86-64 with GCC or Clang: no AVX-512 loops (conv_avx512_available() says so) */
int conv_avx512_available(void) { return 0; }

void conv_avx512_gather(const float *src, const int32_t *pq, const int32_t *prow, int64_t n, const int32_t *toff,
                        const int32_t *trow, int64_t nt, const float *wpk, int64_t k, int64_t ncol, float *out,
                        int64_t ldo) {
    (void)src, (void)pq, (void)prow, (void)n, (void)toff, (void)trow, (void)nt, (void)wpk, (void)k, (void)ncol;
    (void)out, (void)ldo;
}

void conv_avx512_reduce(const float *src, const int32_t *pq, const int32_t *prow, int64_t n, const int32_t *toff,
                        const int32_t *trow, int64_t nt, const float *dyt, int64_t ldd, int64_t ncol, float *acc,
                        int64_t lda) {
    (void)src, (void)pq, (void)prow, (void)n, (void)toff, (void)trow, (void)nt, (void)dyt, (void)ldd, (void)ncol;
    (void)acc, (void)lda;
}
#endif
