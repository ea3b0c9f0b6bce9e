/* search_minplus.c -- the min-plus product of Eq. 2, the inner loop of every search.
 *
 *     out[ci][ck] = min over cj of nj[cj] + a[ci][cj] + b[cj][ck]
 *
 * a is ci_n x cj_n, b cj_n x ck_n, nj cj_n, out ci_n x ck_n, all row-major.
 * Two kernels compute the same numbers, bit for bit (the same additions, the same
 * minima in the same order over cj):
 *  - portable: blocked over 8 rows of `a` and 512 columns of `b`, so that each tile
 *    of b is read from memory once per 8 rows instead of once per row;
 *  - AVX2 (chosen at run time where the CPU has it): b packed into panels of 8
 *    columns, 4 rows of nj + a packed beside them, and a 4 x 8 block of out kept
 *    in 8 registers over the whole sum (no loads or stores of out inside it):
 *    about twice as fast on 300-600 configurations;
 *  - AVX-512 (where the CPU has AVX-512F): the same with panels of 16 columns, a
 *    4 x 16 block in 8 registers of 8 doubles, twice the AVX2 kernel's work per
 *    instruction (a last panel of at most 8 columns stays on the AVX2 kernel).
 * Every kernel adds nj[cj] + a[ci][cj] first, then b[cj][ck], and keeps the smaller of
 * that sum and the running minimum (the running minimum on ties and NaN), so they give
 * the same bits; a minimum does not depend on the order of its terms.
 * Large products split their rows over threads, each writing its own rows.
 */
#include <math.h>     /* INFINITY */
#include <pthread.h>    /* pthread_create */
#include <stdatomic.h>  /* the kernel found once */
#include <stdlib.h>     /* malloc, free */
#include <string.h>     /* memcpy */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>  /* AVX2 and AVX-512 intrinsics for the register-blocked kernels */
#define SW_HAVE_AVX2_KERNEL 1
#endif

#include "search_internal.h"

/* AVX2 where the CPU has it, chosen at load time; plain SSE2 otherwise. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define SW_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef SW_MULTIVERSION
#define SW_MULTIVERSION
#endif

enum { ROW_BLOCK = 8, COL_BLOCK = 512, MAX_THREADS = 64 };
#define THREADED_WORK 4e6   /* products smaller than this run on the calling thread */

/* rows [r0, r1) of out */
SW_MULTIVERSION
static void minplus_rows(const double *a, const double *nj, const double *b, double *out, int r0, int r1,
                         int cj_n, int ck_n) {
    for (size_t c = (size_t)r0 * (size_t)ck_n; c < (size_t)r1 * (size_t)ck_n; c++) {
        out[c] = INFINITY;
    }
    for (int ci0 = r0; ci0 < r1; ci0 += ROW_BLOCK) {
        int rows = r1 - ci0 < ROW_BLOCK ? r1 - ci0 : ROW_BLOCK;
        for (int ck0 = 0; ck0 < ck_n; ck0 += COL_BLOCK) {
            int cols = ck_n - ck0 < COL_BLOCK ? ck_n - ck0 : COL_BLOCK;
            for (int cj = 0; cj < cj_n; cj++) {
                const double *restrict brow = b + (size_t)cj * ck_n + ck0;
                for (int r = 0; r < rows; r++) {
                    double base = nj[cj] + a[(size_t)(ci0 + r) * cj_n + cj];
                    double *restrict orow = out + (size_t)(ci0 + r) * ck_n + ck0;
                    for (int c = 0; c < cols; c++) {
                        double v = base + brow[c];
                        orow[c] = v < orow[c] ? v : orow[c];
                    }
                }
            }
        }
    }
}

enum { MR = 4, NR = 8 };   /* the register block: 4 rows x 8 columns of out */
#define PACKED_WORK 1e5       /* smaller products skip the packing */

#ifdef SW_HAVE_AVX2_KERNEL
/* out block = min over cj of ap[cj][r] + bp[cj][c]: ap is 4 rows of nj + a for each cj
 * (cj_n x 4), bp one panel of b (cj_n x 8); acc receives the 4 x 8 block. */
__attribute__((target("avx2"))) static void block_avx2(const double *restrict ap, const double *restrict bp,
                                                       int cj_n, double acc[MR][NR]) {
    __m256d inf = _mm256_set1_pd(INFINITY);
    __m256d t00 = inf, t01 = inf, t10 = inf, t11 = inf, t20 = inf, t21 = inf, t30 = inf, t31 = inf;
    for (int cj = 0; cj < cj_n; cj++) {
        __m256d b0 = _mm256_loadu_pd(bp + (size_t)cj * NR), b1 = _mm256_loadu_pd(bp + (size_t)cj * NR + 4);
        const double *s = ap + (size_t)cj * MR;
        __m256d s0 = _mm256_broadcast_sd(s), s1 = _mm256_broadcast_sd(s + 1);
        __m256d s2 = _mm256_broadcast_sd(s + 2), s3 = _mm256_broadcast_sd(s + 3);
        /* min(v, t) keeps t when v is NaN, as the portable kernel's v < t ? v : t */
        t00 = _mm256_min_pd(_mm256_add_pd(s0, b0), t00);
        t01 = _mm256_min_pd(_mm256_add_pd(s0, b1), t01);
        t10 = _mm256_min_pd(_mm256_add_pd(s1, b0), t10);
        t11 = _mm256_min_pd(_mm256_add_pd(s1, b1), t11);
        t20 = _mm256_min_pd(_mm256_add_pd(s2, b0), t20);
        t21 = _mm256_min_pd(_mm256_add_pd(s2, b1), t21);
        t30 = _mm256_min_pd(_mm256_add_pd(s3, b0), t30);
        t31 = _mm256_min_pd(_mm256_add_pd(s3, b1), t31);
    }
    _mm256_storeu_pd(acc[0], t00);
    _mm256_storeu_pd(acc[0] + 4, t01);
    _mm256_storeu_pd(acc[1], t10);
    _mm256_storeu_pd(acc[1] + 4, t11);
    _mm256_storeu_pd(acc[2], t20);
    _mm256_storeu_pd(acc[2] + 4, t21);
    _mm256_storeu_pd(acc[3], t30);
    _mm256_storeu_pd(acc[3] + 4, t31);
}

#define AVX512 __attribute__((target("avx512f,avx2")))
enum { WIDE = 16 };   /* columns of an AVX-512 panel */

/* As block_avx2 with a panel of 16 columns: acc receives the 4 x 16 block. */
AVX512 static void block_avx512(const double *restrict ap, const double *restrict bp, int cj_n,
                                double acc[MR][WIDE]) {
    __m512d inf = _mm512_set1_pd(INFINITY);
    __m512d t00 = inf, t01 = inf, t10 = inf, t11 = inf, t20 = inf, t21 = inf, t30 = inf, t31 = inf;
    for (int cj = 0; cj < cj_n; cj++) {
        __m512d b0 = _mm512_loadu_pd(bp + (size_t)cj * WIDE), b1 = _mm512_loadu_pd(bp + (size_t)cj * WIDE + 8);
        const double *s = ap + (size_t)cj * MR;
        __m512d s0 = _mm512_set1_pd(s[0]), s1 = _mm512_set1_pd(s[1]);
        __m512d s2 = _mm512_set1_pd(s[2]), s3 = _mm512_set1_pd(s[3]);
        t00 = _mm512_min_pd(_mm512_add_pd(s0, b0), t00);
        t01 = _mm512_min_pd(_mm512_add_pd(s0, b1), t01);
        t10 = _mm512_min_pd(_mm512_add_pd(s1, b0), t10);
        t11 = _mm512_min_pd(_mm512_add_pd(s1, b1), t11);
        t20 = _mm512_min_pd(_mm512_add_pd(s2, b0), t20);
        t21 = _mm512_min_pd(_mm512_add_pd(s2, b1), t21);
        t30 = _mm512_min_pd(_mm512_add_pd(s3, b0), t30);
        t31 = _mm512_min_pd(_mm512_add_pd(s3, b1), t31);
    }
    _mm512_storeu_pd(acc[0], t00);
    _mm512_storeu_pd(acc[0] + 8, t01);
    _mm512_storeu_pd(acc[1], t10);
    _mm512_storeu_pd(acc[1] + 8, t11);
    _mm512_storeu_pd(acc[2], t20);
    _mm512_storeu_pd(acc[2] + 8, t21);
    _mm512_storeu_pd(acc[3], t30);
    _mm512_storeu_pd(acc[3] + 8, t31);
}

/* The panels of b: `width` columns each (NR for the AVX2 kernel, WIDE for AVX-512, whose
 * last panel is NR wide when at most NR columns are left), where panel p starts. */
static int panel_width(int width, int ck_n, int p) { return width == WIDE && ck_n - p * WIDE <= NR ? NR : width; }

/* b (cj_n x ck_n) as panels of `width` columns (panel_width), cj-major, padded with +inf:
 * panel p, row cj, column c at bp[p * cj_n * width + cj * panel_width + c]. */
static double *pack_panels(const double *b, int cj_n, int ck_n, int width) {
    int panels = (ck_n + width - 1) / width;
    double *bp = malloc(sizeof(double) * (size_t)panels * (size_t)cj_n * (size_t)width);
    for (int p = 0; bp && p < panels; p++) {
        int pw = panel_width(width, ck_n, p);
        double *panel = bp + (size_t)p * cj_n * width;
        for (int cj = 0; cj < cj_n; cj++) {
            for (int c = 0; c < pw; c++) {
                int ck = p * width + c;
                panel[(size_t)cj * pw + c] = ck < ck_n ? b[(size_t)cj * ck_n + ck] : INFINITY;
            }
        }
    }
    return bp;
}

/* rows [r0, r1) with the AVX2 or (width WIDE) AVX-512 block kernel; 0 when out of memory (nothing written) */
static int packed_rows(const double *a, const double *nj, const double *bp, int width, double *out, int r0, int r1,
                       int cj_n, int ck_n) {
    double *ap = malloc(sizeof(double) * (size_t)cj_n * MR);
    if (!ap) {
        return 0;
    }
    int panels = (ck_n + width - 1) / width;
    for (int ci0 = r0; ci0 < r1; ci0 += MR) {
        int rows = r1 - ci0 < MR ? r1 - ci0 : MR;
        for (int cj = 0; cj < cj_n; cj++) {   /* the same sums nj + a as the portable kernel */
            for (int r = 0; r < MR; r++) {
                ap[(size_t)cj * MR + r] = r < rows ? nj[cj] + a[(size_t)(ci0 + r) * cj_n + cj] : INFINITY;
            }
        }
        for (int p = 0; p < panels; p++) {
            double acc[MR][WIDE];
            const double *panel = bp + (size_t)p * cj_n * width;
            int pw = panel_width(width, ck_n, p);
            if (pw == WIDE) {
                block_avx512(ap, panel, cj_n, acc);
            } else {
                double narrow[MR][NR];
                block_avx2(ap, panel, cj_n, narrow);
                for (int r = 0; r < MR; r++) {
                    memcpy(acc[r], narrow[r], sizeof narrow[r]);
                }
            }
            for (int r = 0; r < rows; r++) {
                for (int c = 0; c < pw && p * width + c < ck_n; c++) {
                    out[(size_t)(ci0 + r) * ck_n + p * width + c] = acc[r][c];
                }
            }
        }
    }
    free(ap);
    return 1;
}
#endif

typedef struct {
    const double *a, *nj, *b, *panels;   /* panels: b packed for a vector kernel, or NULL */
    int width;                            /* the panels' columns: NR (AVX2) or WIDE (AVX-512) */
    double *out;
    int r0, r1, cj_n, ck_n;
} rows_job;

static void *rows_worker(void *arg) {
    rows_job *j = arg;
#ifdef SW_HAVE_AVX2_KERNEL
    if (j->panels && packed_rows(j->a, j->nj, j->panels, j->width, j->out, j->r0, j->r1, j->cj_n, j->ck_n)) {
        return NULL;
    }
#endif
    minplus_rows(j->a, j->nj, j->b, j->out, j->r0, j->r1, j->cj_n, j->ck_n);
    return NULL;
}

static int best_kernel(void) {
#ifdef SW_HAVE_AVX2_KERNEL
    __builtin_cpu_init();   /* idempotent; also checks that the OS saves the vector registers */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2")) {
        return SW_MINPLUS_AVX512;
    }
    if (__builtin_cpu_supports("avx2")) {
        return SW_MINPLUS_AVX2;
    }
#endif
    return SW_MINPLUS_PORTABLE;
}

int sw_minplus_best_kernel(void) {
    static _Atomic int found = -1;   /* the CPU does not change: asked once */
    int k = atomic_load(&found);
    if (k < 0) {
        k = best_kernel();
        atomic_store(&found, k);
    }
    return k;
}

void sw_minplus(const double *a, const double *nj, const double *b, double *out, int ci_n, int cj_n, int ck_n,
                int threads) {
    sw_minplus_kernel(a, nj, b, out, ci_n, cj_n, ck_n, threads, sw_minplus_best_kernel());
}

void sw_minplus_kernel(const double *a, const double *nj, const double *b, double *out, int ci_n, int cj_n,
                       int ck_n, int threads, int kernel) {
    double work = (double)ci_n * cj_n * ck_n;
    int n = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    while (n > 1 && (work < THREADED_WORK * n / 2 || ci_n < n * ROW_BLOCK)) {
        n--;
    }
    double *panels = NULL;
    int width = NR;
    kernel = kernel < SW_MINPLUS_PORTABLE || kernel > sw_minplus_best_kernel() ? sw_minplus_best_kernel() : kernel;
#ifdef SW_HAVE_AVX2_KERNEL
    if (work >= PACKED_WORK && cj_n > 0 && kernel != SW_MINPLUS_PORTABLE) {
        width = kernel == SW_MINPLUS_AVX512 ? WIDE : NR;
        panels = pack_panels(b, cj_n, ck_n, width);   /* NULL when out of memory: the portable kernel */
    }
#endif
    if (n == 1) {
        rows_job one = {a, nj, b, panels, width, out, 0, ci_n, cj_n, ck_n};
        rows_worker(&one);
        free(panels);
        return;
    }
    rows_job jobs[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    int per = (ci_n / n + ROW_BLOCK - 1) / ROW_BLOCK * ROW_BLOCK;   /* whole row blocks each */
    for (int t = 0; t < n; t++) {
        int r0 = t * per < ci_n ? t * per : ci_n, r1 = t == n - 1 ? ci_n : ((t + 1) * per < ci_n ? (t + 1) * per : ci_n);
        jobs[t] = (rows_job){a, nj, b, panels, width, out, r0, r1, cj_n, ck_n};
        if (t > 0 && r1 > r0) {   /* the calling thread takes the first rows */
            started[t] = pthread_create(&tids[t], NULL, rows_worker, &jobs[t]) == 0;
            if (!started[t]) {
                rows_worker(&jobs[t]);   /* no thread: do it here */
            }
        }
    }
    rows_worker(&jobs[0]);
    for (int t = 1; t < n; t++) {
        if (started[t]) {
            pthread_join(tids[t], NULL);
        }
    }
    free(panels);
}
