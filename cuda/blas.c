/* blas.c -- linear and matmul with cuBLAS, row-major as the views are stored.
 *
 *   linear  y (N_b, O_b) = x (N_b, I) w (O_b, I)^T + b     dx (N_b, I) = dy (N_b, O_b) w (O_b, I)
 *           dw (O_b, I) = dy^T x
 *   matmul  y (M_b, N_b) = a (M_b, K) b (K, N_b)           da = dy b^T      db = a^T dy
 *
 * cuBLAS is column-major: a row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T,
 * so gemm() swaps the operands and passes the row strides as leading dimensions.  Each
 * stream's handle has its own workspace and, TF32 off, the default (FMA) math mode, so a
 * call gives the same bits every time.  Shapes as csrc/cpu/linear.c and ops_cpu_rnn.c check.
 */
#include "cuda_backend.h"

/* Row-major C (m, n) = op(A) (m, k) op(B) (k, n), leading dimensions the row strides. */
static sw_status gemm(const cu_task *t, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float *c, int64_t ldc) {
    const int64_t dims[6] = {m, n, k, lda, ldb, ldc};
    for (int i = 0; i < 6; i++) {
        if (dims[i] < 0 || dims[i] > INT32_MAX) {
            return SW_FAIL(SW_ERR_VALUE, "task %d: a GEMM dimension %lld does not fit cuBLAS's int", t->e.id,
                           (long long)dims[i]);
        }
    }
    if (m == 0 || n == 0) {
        return SW_OK;
    }
    if (k == 0) {   /* an empty sum: zeros */
        return cu_check(cudaMemset2DAsync(c, sizeof(float) * (size_t)ldc, 0, sizeof(float) * (size_t)n, (size_t)m,
                                          t->st->s), "zero a GEMM output");
    }
    const float one = 1.0f, zero = 0.0f;
    return cu_check_blas(cublasSgemm(t->st->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     (int)n, (int)m, (int)k, &one, b, (int)ldb, a, (int)lda, &zero, c, (int)ldc),
                         "cublasSgemm");
}

static int covers(const sw_view *v, int d, int64_t lo, int64_t n) {
    return lo >= v->lo[d] && lo + n <= v->lo[d] + v->shape[d];
}

sw_status cu_linear_forward(const cu_task *t, const sw_view *x, const sw_view *w, const sw_view *b, sw_view *y,
                            int relu) {
    int64_t nb = y->shape[0], ob = y->shape[1], in = w->shape[1];
    if (x->rank != 2 || w->rank != 2 || y->rank != 2 || x->shape[1] != in || !covers(x, 0, y->lo[0], nb) ||
        !covers(w, 0, y->lo[1], ob) || (b && !covers(b, 0, y->lo[1], ob))) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: linear views disagree", t->e.id);
    }
    SW_TRY(gemm(t, 0, 1, nb, ob, in, x->data + (y->lo[0] - x->lo[0]) * in, in, w->data + (y->lo[1] - w->lo[0]) * in,
                in, y->data, ob));
    if (b) {   /* y[r, c] += b[c]: the bias broadcast down the rows (a stride of 0) */
        swk_map m = {.rank = 2, .ext = {nb, ob}, .dst_stride = {ob, 1}, .nsrc = 1, .src_stride = {{0, 1}}};
        const float *src[SWK_MAX_SRC] = {b->data + (y->lo[1] - b->lo[0])};
        CU_TRY(swk_map_run(SWK_ACCUMULATE, 0.0f, &m, y->data, src, t->st->s));
    }
    if (relu) {
        const sw_view *src[1] = {y};
        return cu_eltwise(t, SWK_RELU, 0.0f, y, src, 1);
    }
    return SW_OK;
}

sw_status cu_linear_backward_data(const cu_task *t, const sw_view *w, const sw_view *dy, sw_view *dx) {
    int64_t nb = dx->shape[0], ob = dy->shape[1], in = w->shape[1];
    if (dy->rank != 2 || w->rank != 2 || dx->rank != 2 || dx->shape[1] != in || !covers(dy, 0, dx->lo[0], nb) ||
        !covers(w, 0, dy->lo[1], ob)) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: linear gradient views disagree", t->e.id);
    }
    return gemm(t, 0, 0, nb, in, ob, dy->data + (dx->lo[0] - dy->lo[0]) * ob, ob,
                w->data + (dy->lo[1] - w->lo[0]) * in, in, dx->data, in);
}

sw_status cu_linear_backward_weight(const cu_task *t, const sw_view *x, const sw_view *dy, sw_view *dw) {
    int64_t nb = dy->shape[0], ob = dy->shape[1], in = dw->shape[1];
    if (x->rank != 2 || dy->rank != 2 || dw->rank != 2 || x->shape[1] != in || dw->lo[0] != dy->lo[1] ||
        dw->shape[0] != ob || !covers(x, 0, dy->lo[0], nb)) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: linear weight-gradient views disagree", t->e.id);
    }
    return gemm(t, 1, 0, ob, in, nb, dy->data, ob, x->data + (dy->lo[0] - x->lo[0]) * in, in, dw->data, in);
}

/* Global element (r, c) of a 2-D view. */
static const float *at2(const sw_view *v, int64_t r, int64_t c) {
    return v->data + (r - v->lo[0]) * v->shape[1] + (c - v->lo[1]);
}

static int covers2(const sw_view *v, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    return v->rank == 2 && covers(v, 0, r0, nr) && covers(v, 1, c0, nc);
}

sw_status cu_matmul_forward(const cu_task *t, const sw_view *a, const sw_view *b, sw_view *y) {
    int64_t m = y->shape[0], n = y->shape[1], k = a->shape[1];
    if (!covers2(a, y->lo[0], m, 0, k) || !covers2(b, 0, k, y->lo[1], n)) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: matmul operands do not cover the output", t->e.id);
    }
    return gemm(t, 0, 0, m, n, k, at2(a, y->lo[0], 0), a->shape[1], at2(b, 0, y->lo[1]), b->shape[1], y->data, n);
}

sw_status cu_matmul_backward(const cu_task *t, int slot, const sw_view *a, const sw_view *b, const sw_view *dy,
                             sw_view *dx) {
    int64_t m = dy->shape[0], n = dy->shape[1];
    if (slot == 0) {   /* da over dx's box: rows of dy, this worker's k */
        int64_t k = dx->shape[1];
        if (!covers2(b, dx->lo[1], k, dy->lo[1], n) || dx->shape[0] != m || dx->lo[0] != dy->lo[0]) {
            return SW_FAIL(SW_ERR_INTERNAL, "task %d: matmul da's boxes disagree", t->e.id);
        }
        return gemm(t, 0, 1, m, k, n, dy->data, n, at2(b, dx->lo[1], dy->lo[1]), b->shape[1], dx->data, k);
    }
    int64_t k = dx->shape[0];   /* db over dx's box: this worker's k, columns of dy */
    if (!covers2(a, dy->lo[0], m, dx->lo[0], k) || dx->shape[1] != n || dx->lo[1] != dy->lo[1]) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: matmul db's boxes disagree", t->e.id);
    }
    return gemm(t, 1, 0, k, n, m, at2(a, dy->lo[0], dx->lo[0]), a->shape[1], dy->data, n, dx->data, n);
}
