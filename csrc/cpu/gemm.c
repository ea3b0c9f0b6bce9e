/* gemm.c -- SGEMM from OpenBLAS (scipy-openblas32: cblas with a scipy_ prefix). */
#include <cblas.h>  /* scipy-openblas32's cblas.h: scipy_cblas_sgemm, CBLAS_ORDER */

#include "kernels.h"

/* Workers are the parallelism: OpenBLAS runs each call on the calling thread.
 * The setting is process-wide for this library (NumPy bundles its own OpenBLAS,
 * which is not affected); concurrent calls from several workers are safe. */
void sw_blas_single_thread(void) { scipy_openblas_set_num_threads(1); }

void sw_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
              const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    scipy_cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                      (blasint)m, (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c,
                      (blasint)ldc);
}
