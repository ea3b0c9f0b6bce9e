/* blas.c -- linear and matmul with cuBLAS, row-major as the views are stored.
 *
 *   linear  y (N_b, O_b) = x (N_b, I) w (O_b, I)^T + b     dx (N_b, I) = dy (N_b, O_b) w (O_b, I)
 *           dw (O_b, I) = dy^T x
 *   matmul  y (.., M_b, N_b) = op(a) (.., M_b, K) op(b) (.., K, N_b), one product per batch index,
 *           op a transpose when the op says (attention's q k^T); da and db as csrc/cpu/matmul.c
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

/* ---- matmul: batched over the leading dimensions, transposes by flag (csrc/cpu/matmul.c) ---- */
/* v's element (batch.., r, c) and its row stride. */
static const float *at(const sw_view *v, const int64_t *batch, int64_t r, int64_t c) {
    int64_t off = 0, stride = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        int64_t i = d == v->rank - 1 ? c : d == v->rank - 2 ? r : batch[d];
        off += (i - v->lo[d]) * stride;
        stride *= v->shape[d];
    }
    return v->data + off;
}

static int64_t ld(const sw_view *v) { return v->shape[v->rank - 1]; }

sw_status cu_matmul_forward(const cu_task *t, const sw_view *a, const sw_view *b, int ta, int tb, sw_view *y) {
    int r = y->rank;
    if (r < 2 || sw_view_volume(y) == 0) {
        return r < 2 ? SW_FAIL(SW_ERR_INTERNAL, "task %d: matmul output of rank %d", t->e.id, r) : SW_OK;
    }
    int64_t m = y->shape[r - 2], n = y->shape[r - 1], m0 = y->lo[r - 2], n0 = y->lo[r - 1];
    int64_t k = a->shape[ta ? r - 2 : r - 1], k0 = a->lo[ta ? r - 2 : r - 1];
    if (!sw_matmul_forward_boxes(a, b, ta, tb, y)) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: matmul operands do not cover the output", t->e.id);
    }
    int64_t batch[SW_MAX_RANK] = {0};
    for (int d = 0; d < r - 2; d++) {
        batch[d] = y->lo[d];
    }
    do {   /* y (M, N) = op(a) (M, K) op(b) (K, N), one product per batch index */
        const float *pa = ta ? at(a, batch, k0, m0) : at(a, batch, m0, k0);
        const float *pb = tb ? at(b, batch, n0, k0) : at(b, batch, k0, n0);
        SW_TRY(gemm(t, ta, tb, m, n, k, pa, ld(a), pb, ld(b), (float *)at(y, batch, m0, n0), ld(y)));
    } while (sw_matmul_next_batch(y, batch));
    return SW_OK;
}

sw_status cu_matmul_backward(const cu_task *t, int slot, int ta, int tb, const sw_view *a, const sw_view *b,
                             const sw_view *dy, sw_view *dx) {
    int r = dy->rank;
    if (r < 2 || dx->rank != r || (slot != 0 && slot != 1)) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: matmul gradient of rank %d, slot %d", t->e.id, r, slot);
    }
    int64_t m = dy->shape[r - 2], n = dy->shape[r - 1], m0 = dy->lo[r - 2], n0 = dy->lo[r - 1];
    int kd = slot == 0 ? (ta ? r - 2 : r - 1) : (tb ? r - 1 : r - 2);   /* the part of k dx holds */
    int64_t k = dx->shape[kd], k0 = dx->lo[kd];
    if (!sw_matmul_backward_boxes(a, b, dy, dx, ta, tb, slot)) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: the boxes of dy, dx and the other matmul operand disagree", t->e.id);
    }
    if (sw_view_volume(dx) == 0) {
        return SW_OK;
    }
    int64_t batch[SW_MAX_RANK] = {0};
    for (int d = 0; d < r - 2; d++) {
        batch[d] = dy->lo[d];
    }
    do {
        const float *g = at(dy, batch, m0, n0);
        const float *pa = ta ? at(a, batch, k0, m0) : at(a, batch, m0, k0);
        const float *pb = tb ? at(b, batch, n0, k0) : at(b, batch, k0, n0);
        if (slot == 0 && !ta) {          /* da (M, K) = dy (M, N) op(b)^T */
            SW_TRY(gemm(t, 0, !tb, m, k, n, g, ld(dy), pb, ld(b), (float *)at(dx, batch, m0, k0), ld(dx)));
        } else if (slot == 0) {          /* da (K, M) = op(b) (K, N) dy^T */
            SW_TRY(gemm(t, tb, 1, k, m, n, pb, ld(b), g, ld(dy), (float *)at(dx, batch, k0, m0), ld(dx)));
        } else if (!tb) {                /* db (K, N) = op(a)^T (K, M) dy */
            SW_TRY(gemm(t, !ta, 0, k, n, m, pa, ld(a), g, ld(dy), (float *)at(dx, batch, k0, n0), ld(dx)));
        } else {                         /* db (N, K) = dy^T op(a) (M, K) */
            SW_TRY(gemm(t, 1, ta, n, k, m, g, ld(dy), pa, ld(a), (float *)at(dx, batch, n0, k0), ld(dx)));
        }
    } while (sw_matmul_next_batch(dy, batch));
    return SW_OK;
}
