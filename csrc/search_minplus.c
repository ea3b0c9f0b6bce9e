/* search_minplus.c -- the min-plus product of Eq. 2, the inner loop of every search.
 *
 *     out[ci][ck] = min over cj of nj[cj] + a[ci][cj] + b[cj][ck]
 *
 * a is ci_n x cj_n, b cj_n x ck_n, nj cj_n, out ci_n x ck_n, all row-major.
 * Blocked over 8 rows of `a` and 512 columns of `b` so that each tile of b is read
 * from memory once per 8 rows instead of once per row (b has up to 10^5-10^6
 * entries, far more than the caches hold); large products split their rows over
 * threads, each writing its own rows.
 */
#include <math.h>     /* INFINITY */
#include <pthread.h>  /* pthread_create */

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

typedef struct {
    const double *a, *nj, *b;
    double *out;
    int r0, r1, cj_n, ck_n;
} rows_job;

static void *rows_worker(void *arg) {
    rows_job *j = arg;
    minplus_rows(j->a, j->nj, j->b, j->out, j->r0, j->r1, j->cj_n, j->ck_n);
    return NULL;
}

void sw_minplus(const double *a, const double *nj, const double *b, double *out, int ci_n, int cj_n, int ck_n,
                int threads) {
    double work = (double)ci_n * cj_n * ck_n;
    int n = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    while (n > 1 && (work < THREADED_WORK * n / 2 || ci_n < n * ROW_BLOCK)) {
        n--;
    }
    if (n == 1) {
        minplus_rows(a, nj, b, out, 0, ci_n, cj_n, ck_n);
        return;
    }
    rows_job jobs[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    int per = (ci_n / n + ROW_BLOCK - 1) / ROW_BLOCK * ROW_BLOCK;   /* whole row blocks each */
    for (int t = 0; t < n; t++) {
        int r0 = t * per < ci_n ? t * per : ci_n, r1 = t == n - 1 ? ci_n : ((t + 1) * per < ci_n ? (t + 1) * per : ci_n);
        jobs[t] = (rows_job){a, nj, b, out, r0, r1, cj_n, ck_n};
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
}
