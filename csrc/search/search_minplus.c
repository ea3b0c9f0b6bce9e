/* search_minplus.c -- the min-plus product of Eq. 2, the inner loop of every search.
 *
 *     out[ci][ck] = min over cj of nj[cj] + a[ci][cj] + b[cj][ck]
 *
 * a is ci_n x cj_n, b cj_n x ck_n, nj cj_n, out ci_n x ck_n, all row-major.
 * Three kernels compute the same numbers, bit for bit (the same additions; minima over
 * the same cj, or over the cj that can change them, below):
 *  - portable: blocked over 8 rows of `a` and 512 columns of `b`, so that each tile
 *    of b is read from memory once per 8 rows instead of once per row;
 *  - AVX2 (chosen at run time where the CPU has it): b read in panels of 8
 *    columns, 4 rows of nj + a packed beside them, and a 4 x 8 block of out kept
 *    in 8 registers over the whole sum (no loads or stores of out inside it):
 *    about twice as fast on 300-600 configurations;
 *  - AVX-512 (where the CPU has AVX-512F): the same with panels of 16 columns, a
 *    4 x 16 block in 8 registers of 8 doubles, twice the AVX2 kernel's work per
 *    instruction (a last panel of at most 8 columns stays on the AVX2 kernel);
 *    both vector kernels skip, block by block, the cj that cannot change the block.
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

enum { MR = 4, NR = 8, WIDE = 16 };   /* register blocks: 4 rows x 8 (AVX2) or 16 (AVX-512) columns of out */
#define VECTOR_WORK 1e5       /* smaller products stay on the portable kernel (no panel minima) */
enum { SEEDS = 8 };           /* configurations cj tried first in every block (bounds, below) */
#define GROUP_BYTES ((size_t)512 << 10)   /* nj + a of the row blocks taken together over every panel: about half
                                            * a core's L2 (best measured on a 1 MB L2; 96 KB to 4 MB measured) */

#ifdef SW_HAVE_AVX2_KERNEL
/* Blocks of out, min over the listed cj only.  Within a block of rows R and columns P,
 * a cj can only lower an entry if
 *     lb(cj) = min_{r in R} (nj[cj] + a[r][cj]) + min_{c in P} b[cj][c]
 * is below the entry; every sum nj + a + b of that cj is at least lb(cj) (rounding is
 * monotone).  So each block first takes the SEEDS cj of least lb over the whole row (a
 * cheap guess at the winners), then only the cj whose lb is below the largest entry the
 * seeds left: the others cannot change any entry of the block, not even on a tie (the
 * kernels keep the running minimum there).  Once a block keeps three quarters of the cj, the
 * rest of its rows' blocks take them all (random tables: no filtering to pay for); the blocks
 * of Inception-v3's made tables that keep half to three quarters filter on (an elimination of
 * 15.1 ms then took 14.0 ms, least of 25; stopping at half, as before, filtered too little).  On Inception-v3's
 * tables over 16 devices, the 161-configuration products take about half their steps
 * (a tenth on the transfer tables themselves, up to nine tenths on made ones). */

/* acc[r][0..8) = min(acc[r][c], min over q < n of ap[idx[q]][r] + bp[idx[q]][c]), acc read as +inf
 * when `fresh`: ap holds 4 rows of nj + a for each cj (cj_n x 4), bp one panel of b (8 columns
 * of cj_n rows, `stride` doubles apart); returns the largest entry. */
__attribute__((target("avx2"))) static double block_avx2(const double *restrict ap, const double *restrict bp,
                                                         size_t stride, const int *idx, int n, int fresh,
                                                         double acc[MR][WIDE]) {
    __m256d inf = _mm256_set1_pd(INFINITY);
    __m256d t00 = fresh ? inf : _mm256_loadu_pd(acc[0]), t01 = fresh ? inf : _mm256_loadu_pd(acc[0] + 4);
    __m256d t10 = fresh ? inf : _mm256_loadu_pd(acc[1]), t11 = fresh ? inf : _mm256_loadu_pd(acc[1] + 4);
    __m256d t20 = fresh ? inf : _mm256_loadu_pd(acc[2]), t21 = fresh ? inf : _mm256_loadu_pd(acc[2] + 4);
    __m256d t30 = fresh ? inf : _mm256_loadu_pd(acc[3]), t31 = fresh ? inf : _mm256_loadu_pd(acc[3] + 4);
    for (int q = 0; q < n; q++) {
        size_t cj = (size_t)idx[q];
        __m256d b0 = _mm256_loadu_pd(bp + cj * stride), b1 = _mm256_loadu_pd(bp + cj * stride + 4);
        const double *s = ap + cj * MR;
        __m256d s0 = _mm256_broadcast_sd(s), s1 = _mm256_broadcast_sd(s + 1);
        __m256d s2 = _mm256_broadcast_sd(s + 2), s3 = _mm256_broadcast_sd(s + 3);
        /* min(v, t) keeps t when v is NaN or equal, as the portable kernel's v < t ? v : t */
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
    __m256d m = _mm256_max_pd(_mm256_max_pd(_mm256_max_pd(t00, t01), _mm256_max_pd(t10, t11)),
                              _mm256_max_pd(_mm256_max_pd(t20, t21), _mm256_max_pd(t30, t31)));
    double lanes[4];
    _mm256_storeu_pd(lanes, m);
    double hi = lanes[0] > lanes[1] ? lanes[0] : lanes[1], hi2 = lanes[2] > lanes[3] ? lanes[2] : lanes[3];
    return hi > hi2 ? hi : hi2;
}

/* idx = the cj < cj_n with lo[cj] + bmin[cj] < bound (ascending); returns how many.  lo is
 * +inf for the seeds, which are never listed again. */
__attribute__((target("avx2"))) static int below_avx2(const double *lo, const double *bmin, int cj_n, double bound,
                                                      int *idx) {
    int n = 0, cj = 0;
    __m256d u = _mm256_set1_pd(bound);
    for (; cj + 4 <= cj_n; cj += 4) {
        __m256d lb = _mm256_add_pd(_mm256_loadu_pd(lo + cj), _mm256_loadu_pd(bmin + cj));
        unsigned m = (unsigned)_mm256_movemask_pd(_mm256_cmp_pd(lb, u, _CMP_LT_OQ));
        for (; m; m &= m - 1) {
            idx[n++] = cj + __builtin_ctz(m);
        }
    }
    for (; cj < cj_n; cj++) {
        idx[n] = cj;
        n += lo[cj] + bmin[cj] < bound;
    }
    return n;
}

#define AVX512 __attribute__((target("avx512f,avx2")))

/* As block_avx2 with a panel of 16 columns. */
AVX512 static double block_avx512(const double *restrict ap, const double *restrict bp, size_t stride,
                                  const int *idx, int n, int fresh, double acc[MR][WIDE]) {
    __m512d inf = _mm512_set1_pd(INFINITY);
    __m512d t00 = fresh ? inf : _mm512_loadu_pd(acc[0]), t01 = fresh ? inf : _mm512_loadu_pd(acc[0] + 8);
    __m512d t10 = fresh ? inf : _mm512_loadu_pd(acc[1]), t11 = fresh ? inf : _mm512_loadu_pd(acc[1] + 8);
    __m512d t20 = fresh ? inf : _mm512_loadu_pd(acc[2]), t21 = fresh ? inf : _mm512_loadu_pd(acc[2] + 8);
    __m512d t30 = fresh ? inf : _mm512_loadu_pd(acc[3]), t31 = fresh ? inf : _mm512_loadu_pd(acc[3] + 8);
    for (int q = 0; q < n; q++) {
        size_t cj = (size_t)idx[q];
        __m512d b0 = _mm512_loadu_pd(bp + cj * stride), b1 = _mm512_loadu_pd(bp + cj * stride + 8);
        const double *s = ap + cj * MR;
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
    __m512d m = _mm512_max_pd(_mm512_max_pd(_mm512_max_pd(t00, t01), _mm512_max_pd(t10, t11)),
                              _mm512_max_pd(_mm512_max_pd(t20, t21), _mm512_max_pd(t30, t31)));
    return _mm512_reduce_max_pd(m);
}

/* As below_avx2, 16 cj at a time, their indices compressed in a register; idx has room for 16
 * more than cj_n. */
AVX512 static int below_avx512(const double *lo, const double *bmin, int cj_n, double bound, int *idx) {
    int n = 0, cj = 0;
    __m512d u = _mm512_set1_pd(bound);
    __m512i at = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), step = _mm512_set1_epi32(16);
    for (; cj + 16 <= cj_n; cj += 16, at = _mm512_add_epi32(at, step)) {
        __m512d lb0 = _mm512_add_pd(_mm512_loadu_pd(lo + cj), _mm512_loadu_pd(bmin + cj));
        __m512d lb1 = _mm512_add_pd(_mm512_loadu_pd(lo + cj + 8), _mm512_loadu_pd(bmin + cj + 8));
        __mmask16 m = (__mmask16)(_mm512_cmp_pd_mask(lb0, u, _CMP_LT_OQ) |
                                  (unsigned)_mm512_cmp_pd_mask(lb1, u, _CMP_LT_OQ) << 8);
        _mm512_storeu_si512(idx + n, _mm512_maskz_compress_epi32(m, at));
        n += __builtin_popcount(m);
    }
    for (; cj < cj_n; cj++) {
        idx[n] = cj;
        n += lo[cj] + bmin[cj] < bound;
    }
    return n;
}

/* The panels of b: `width` columns each (NR for the AVX2 kernel, WIDE for AVX-512, whose
 * last panel is NR wide when at most NR columns are left), where panel p starts. */
static int panel_width(int width, int ck_n, int p) { return width == WIDE && ck_n - p * WIDE <= NR ? NR : width; }

/* b (cj_n x ck_n) as the vector kernels read it: panels of `width` columns (panel_width), each
 * read in place (its rows ck_n doubles apart) but a last panel with fewer columns than its
 * width, which is copied (cj_n x its width, `tail`) with its missing columns repeating its last
 * (their sums are never stored, and the largest entry of a block is then one of its real
 * ones).  bmin[p * cj_n + cj]: the least b[cj][c] of panel p, and bmin[panels * cj_n + cj] the
 * least of the whole row.  Reading b in place, not packing it, spares a copy of every table as
 * large as the product's input (a quarter of the elimination's time on Inception-v3's 161 x 161
 * x 161 products, which skip most cj: the copies wrote more than the kernels read). */
typedef struct {
    int width, panels;
    const double *b;
    int ck_n;
    double *tail;   /* the last panel, copied, or NULL when every panel is whole */
    double *bmin;
} b_panels;

/* Panel p's first entry, and the doubles between its rows, into *stride. */
static const double *panel_at(const b_panels *pb, int p, size_t *stride) {
    int pw = panel_width(pb->width, pb->ck_n, p);
    if (pb->tail && p == pb->panels - 1) {
        *stride = (size_t)pw;
        return pb->tail;
    }
    *stride = (size_t)pb->ck_n;
    return pb->b + (size_t)p * pb->width;
}

static int panels_of(const double *b, int cj_n, int ck_n, int width, b_panels *pb) {
    int panels = (ck_n + width - 1) / width;
    int last = panels - 1, last_w = panel_width(width, ck_n, last), last_cols = ck_n - last * width;
    *pb = (b_panels){width, panels, b, ck_n, NULL, NULL};
    pb->bmin = malloc(sizeof(double) * ((size_t)panels + 1) * (size_t)cj_n);
    if (last_cols < last_w) {
        pb->tail = malloc(sizeof(double) * (size_t)cj_n * (size_t)last_w);
    }
    if (!pb->bmin || (last_cols < last_w && !pb->tail)) {
        free(pb->tail);
        free(pb->bmin);
        return 0;
    }
    double *row_min = pb->bmin + (size_t)panels * cj_n;
    for (int cj = 0; cj < cj_n; cj++) {
        const double *brow = b + (size_t)cj * ck_n;
        double row_least = INFINITY;
        for (int p = 0; p < panels; p++) {
            int c0 = p * width, cols = ck_n - c0 < width ? ck_n - c0 : width;
            double least = INFINITY;
            for (int c = c0; c < c0 + cols; c++) {
                least = brow[c] < least ? brow[c] : least;
            }
            pb->bmin[(size_t)p * cj_n + cj] = least;
            row_least = least < row_least ? least : row_least;
        }
        row_min[cj] = row_least;
        if (pb->tail) {
            double *trow = pb->tail + (size_t)cj * last_w;
            memcpy(trow, brow + last * width, sizeof(double) * (size_t)last_cols);
            for (int c = last_cols; c < last_w; c++) {
                trow[c] = brow[ck_n - 1];
            }
        }
    }
    return 1;
}

/* The SEEDS (or cj_n, if fewer) cj of least lo[cj] + row_min[cj] into seed; lo[cj] of each then
 * becomes +inf, so that below_* leaves it out.  Returns how many. */
static int pick_seeds(double *lo, const double *row_min, int cj_n, int *seed) {
    double key[SEEDS];
    int n = 0;
    for (int cj = 0; cj < cj_n; cj++) {   /* insertion into the sorted SEEDS least */
        double v = lo[cj] + row_min[cj];
        if (n == SEEDS && !(v < key[SEEDS - 1])) {
            continue;
        }
        int at = n < SEEDS ? n++ : SEEDS - 1;
        for (; at > 0 && v < key[at - 1]; at--) {
            key[at] = key[at - 1];
            seed[at] = seed[at - 1];
        }
        key[at] = v;
        seed[at] = cj;
    }
    for (int q = 0; q < n; q++) {
        lo[seed[q]] = INFINITY;
    }
    return n;
}

/* rows [r0, r1) with the AVX2 or (width WIDE) AVX-512 block kernels, bounded as above; 0 when
 * out of memory (nothing written) */
static int panel_rows(const double *a, const double *nj, const b_panels *pb, double *out, int r0, int r1,
                       int cj_n, int ck_n) {
    /* Row blocks go in groups whose nj + a (cj_n x 4 per block) fill about GROUP_BYTES; a group
     * takes every panel in turn, and each panel every block of the group: a panel is read from
     * memory once per group and stays in cache over its blocks (taken block by block across
     * every panel, a product of 286 x 916 x 2856 read all of b, 20 MB, once per block). */
    int nblocks = (r1 - r0 + MR - 1) / MR;
    int group = (int)(GROUP_BYTES / (sizeof(double) * (size_t)cj_n * MR));
    group = group < 1 ? 1 : group > nblocks ? nblocks : group;
    double *ap = malloc(sizeof(double) * (size_t)cj_n * (MR + 1) * (size_t)group);
    int *idx = malloc(sizeof(int) * (2 * (size_t)cj_n + 16) + sizeof(int) * (SEEDS + 1) * (size_t)group);
    char *bounded = malloc((size_t)group);
    if (!ap || !idx || !bounded) {
        free(ap);
        free(idx);
        free(bounded);
        return 0;
    }
    double *lo_all = ap + (size_t)cj_n * MR * group;   /* per block and cj: the least of its rows' nj + a */
    int *every = idx + cj_n + 16, *seed_all = every + cj_n, *nseed = seed_all + (size_t)SEEDS * group;
    for (int cj = 0; cj < cj_n; cj++) {
        every[cj] = cj;
    }
    const double *row_min = pb->bmin + (size_t)pb->panels * cj_n;
    for (int g0 = 0; g0 < nblocks; g0 += group) {
        int blocks = nblocks - g0 < group ? nblocks - g0 : group;
        for (int q = 0; q < blocks; q++) {
            int ci0 = r0 + (g0 + q) * MR, rows = r1 - ci0 < MR ? r1 - ci0 : MR;
            double *bap = ap + (size_t)q * cj_n * MR, *lo = lo_all + (size_t)q * cj_n;
            for (int r = 0; r < MR; r++) {   /* the same sums nj + a as the portable kernel */
                const double *arow = a + (size_t)(ci0 + (r < rows ? r : rows - 1)) * cj_n;   /* a missing row: the last */
                for (int cj = 0; cj < cj_n; cj++) {
                    bap[(size_t)cj * MR + r] = nj[cj] + arow[cj];
                }
            }
            for (int cj = 0; cj < cj_n; cj++) {
                const double *v = bap + (size_t)cj * MR;
                double lo01 = v[0] < v[1] ? v[0] : v[1], lo23 = v[2] < v[3] ? v[2] : v[3];
                lo[cj] = lo01 < lo23 ? lo01 : lo23;
            }
            nseed[q] = pick_seeds(lo, row_min, cj_n, seed_all + (size_t)q * SEEDS);
            bounded[q] = 1;   /* 0 once a panel of these rows kept 3/4 of the cj: the rest take them all */
        }
        for (int p = 0; p < pb->panels; p++) {
            size_t st;
            const double *panel = panel_at(pb, p, &st), *pmin = pb->bmin + (size_t)p * cj_n;
            int pw = panel_width(pb->width, ck_n, p);
            int c0 = p * pb->width, cols = ck_n - c0 < pw ? ck_n - c0 : pw;
            for (int q = 0; q < blocks; q++) {
                int ci0 = r0 + (g0 + q) * MR, rows = r1 - ci0 < MR ? r1 - ci0 : MR;
                const double *bap = ap + (size_t)q * cj_n * MR, *lo = lo_all + (size_t)q * cj_n;
                const int *seed = seed_all + (size_t)q * SEEDS;
                double acc[MR][WIDE];
                if (!bounded[q]) {   /* every cj (the seeds among them: a minimum does not mind) */
                    (pw == WIDE ? block_avx512 : block_avx2)(bap, panel, st, every, cj_n, 1, acc);
                } else if (pw == WIDE) {
                    int n = below_avx512(lo, pmin, cj_n, block_avx512(bap, panel, st, seed, nseed[q], 1, acc), idx);
                    block_avx512(bap, panel, st, idx, n, 0, acc);
                    bounded[q] = 4 * n < 3 * cj_n;
                } else {
                    int n = below_avx2(lo, pmin, cj_n, block_avx2(bap, panel, st, seed, nseed[q], 1, acc), idx);
                    block_avx2(bap, panel, st, idx, n, 0, acc);
                    bounded[q] = 4 * n < 3 * cj_n;
                }
                for (int r = 0; r < rows; r++) {
                    memcpy(out + (size_t)(ci0 + r) * ck_n + c0, acc[r], sizeof(double) * (size_t)cols);
                }
            }
        }
    }
    free(ap);
    free(idx);
    free(bounded);
    return 1;
}
#endif

typedef struct {
    const double *a, *nj, *b;
    const void *panels;   /* b as the vector kernels read it (b_panels), or NULL */
    double *out;
    int r0, r1, cj_n, ck_n;
} rows_job;

static void free_panels(const void *panels) {
#ifdef SW_HAVE_AVX2_KERNEL
    if (panels) {
        free(((const b_panels *)panels)->tail);
        free(((const b_panels *)panels)->bmin);
    }
#else
    (void)panels;
#endif
}

static void *rows_worker(void *arg) {
    rows_job *j = arg;
#ifdef SW_HAVE_AVX2_KERNEL
    if (j->panels && panel_rows(j->a, j->nj, j->panels, j->out, j->r0, j->r1, j->cj_n, j->ck_n)) {
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
    while (n > 1 && (work < SW_MINPLUS_THREADED_WORK * n / 2 || ci_n < n * ROW_BLOCK)) {
        n--;
    }
    const void *panels = NULL;
    kernel = kernel < SW_MINPLUS_PORTABLE || kernel > sw_minplus_best_kernel() ? sw_minplus_best_kernel() : kernel;
#ifdef SW_HAVE_AVX2_KERNEL
    b_panels made = {0};
    if (work >= VECTOR_WORK && cj_n > 0 && kernel != SW_MINPLUS_PORTABLE &&
        panels_of(b, cj_n, ck_n, kernel == SW_MINPLUS_AVX512 ? WIDE : NR, &made)) {   /* else portable */
        panels = &made;
    }
#endif
    if (n == 1) {
        rows_job one = {a, nj, b, panels, out, 0, ci_n, cj_n, ck_n};
        rows_worker(&one);
        free_panels(panels);
        return;
    }
    rows_job jobs[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    int per = (ci_n / n + ROW_BLOCK - 1) / ROW_BLOCK * ROW_BLOCK;   /* whole row blocks each */
    for (int t = 0; t < n; t++) {
        int r0 = t * per < ci_n ? t * per : ci_n, r1 = t == n - 1 ? ci_n : ((t + 1) * per < ci_n ? (t + 1) * per : ci_n);
        jobs[t] = (rows_job){a, nj, b, panels, out, r0, r1, cj_n, ck_n};
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
    free_panels(panels);
}
