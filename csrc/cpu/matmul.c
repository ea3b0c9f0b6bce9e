/* matmul.c -- batched matrix products with transposes, one OpenBLAS SGEMM per batch index.
 *
 *   y  (.., M_b, N_b) = op(a) (.., M_b, K) op(b) (.., K, N_b)     op: a transpose when asked
 *   da = dy op(b)^T   (a's layout: (M_b, K), or (K, M_b) when a is transposed)
 *   db = op(a)^T dy   (b's layout: (K, N_b), or (N_b, K) when b is transposed)
 *
 * Views are at global coordinates (kernels.h); the leading (batch) dimensions of every
 * view hold y's / dy's batch range; K is the range of k the operand views hold (a worker's
 * part under a split reduction, rebased by the caller so that a and b agree).  Row-major
 * storage means a transposed operand is simply read with CblasTrans: no copies.
 */
#include "kernels.h"
#include "../core/view.h"  /* sw_view_check, sw_view_covers, sw_view_offset, sw_check_blas_dims */

/* Pointer to v's element (batch.., r, c) and its row stride. */
static float *at(const sw_view *v, const int64_t *batch, int64_t r, int64_t c) {
    int64_t idx[SW_MAX_RANK];
    int n = v->rank;
    for (int d = 0; d < n - 2; d++) {
        idx[d] = batch[d];
    }
    idx[n - 2] = r;
    idx[n - 1] = c;
    return v->data + sw_view_offset(v, idx);
}

static int64_t ld(const sw_view *v) { return v->shape[v->rank - 1]; }

static sw_status check_ranks(const sw_view *a, const sw_view *b, const sw_view *y, const char *name) {
    sw_status s;
    int r = y ? y->rank : 0;
    if (r < 2) {
        return SW_FAIL(SW_ERR_VALUE, "%s: the output must have rank >= 2", name);
    }
    if ((s = sw_view_check(y, r, name)) != SW_OK || (s = sw_view_check(a, r, name)) != SW_OK ||
        (s = sw_view_check(b, r, name)) != SW_OK) {
        return s;
    }
    return SW_OK;
}

sw_status sw_matmul_forward(const sw_view *a, const sw_view *b, int ta, int tb, sw_view *y) {
    const char *name = "matmul_forward";
    SW_TRY(check_ranks(a, b, y, name));
    int r = y->rank;
    int64_t m = y->shape[r - 2], n = y->shape[r - 1], m0 = y->lo[r - 2], n0 = y->lo[r - 1];
    int64_t k = a->shape[ta ? r - 2 : r - 1], k0 = a->lo[ta ? r - 2 : r - 1];
    if (!sw_matmul_forward_boxes(a, b, ta, tb, y)) {
        return SW_FAIL(SW_ERR_VALUE, "%s: the operands do not cover the output's box", name);
    }
    int64_t dims[3] = {m, n, k};
    SW_TRY(sw_check_blas_dims(name, 3, dims));
    if (sw_view_volume(y) == 0) {
        return SW_OK;
    }
    int64_t batch[SW_MAX_RANK] = {0};
    for (int d = 0; d < r - 2; d++) {
        batch[d] = y->lo[d];
    }
    do {
        const float *pa = ta ? at(a, batch, k0, m0) : at(a, batch, m0, k0);
        const float *pb = tb ? at(b, batch, n0, k0) : at(b, batch, k0, n0);
        sw_sgemm(ta, tb, m, n, k, 1.0f, pa, ld(a), pb, ld(b), 0.0f, at(y, batch, m0, n0), ld(y));
    } while (sw_matmul_next_batch(y, batch));
    return SW_OK;
}

sw_status sw_matmul_backward(const sw_view *a, const sw_view *b, const sw_view *dy, int ta, int tb, int slot,
                             sw_view *dx) {
    const char *name = "matmul_backward";
    SW_TRY(check_ranks(a, b, dy, name));
    SW_TRY(sw_view_check(dx, dy->rank, name));
    int r = dy->rank;
    int64_t m = dy->shape[r - 2], n = dy->shape[r - 1], m0 = dy->lo[r - 2], n0 = dy->lo[r - 1];
    /* k: the part of the reduction dx holds (the operand being differentiated) */
    int kd = slot == 0 ? (ta ? r - 2 : r - 1) : (tb ? r - 1 : r - 2);
    int64_t k = dx->shape[kd], k0 = dx->lo[kd];
    if (!sw_matmul_backward_boxes(a, b, dy, dx, ta, tb, slot)) {
        return SW_FAIL(SW_ERR_VALUE, "%s: the boxes of dy, dx and the other operand disagree", name);
    }
    int64_t dims[3] = {m, n, k};
    SW_TRY(sw_check_blas_dims(name, 3, dims));
    if (sw_view_volume(dx) == 0) {
        return SW_OK;
    }
    int64_t batch[SW_MAX_RANK] = {0};
    for (int d = 0; d < r - 2; d++) {
        batch[d] = dy->lo[d];
    }
    do {
        const float *g = at(dy, batch, m0, n0);
        if (slot == 0 && !ta) {          /* da (M, K) = dy (M, N) op(b)^T */
            const float *pb = tb ? at(b, batch, n0, k0) : at(b, batch, k0, n0);
            sw_sgemm(0, !tb, m, k, n, 1.0f, g, ld(dy), pb, ld(b), 0.0f, at(dx, batch, m0, k0), ld(dx));
        } else if (slot == 0) {          /* da (K, M) = op(b) (K, N) dy^T */
            const float *pb = tb ? at(b, batch, n0, k0) : at(b, batch, k0, n0);
            sw_sgemm(tb, 1, k, m, n, 1.0f, pb, ld(b), g, ld(dy), 0.0f, at(dx, batch, k0, m0), ld(dx));
        } else if (!tb) {                /* db (K, N) = op(a)^T (K, M) dy */
            const float *pa = ta ? at(a, batch, k0, m0) : at(a, batch, m0, k0);
            sw_sgemm(!ta, 0, k, n, m, 1.0f, pa, ld(a), g, ld(dy), 0.0f, at(dx, batch, k0, n0), ld(dx));
        } else {                         /* db (N, K) = dy^T op(a) (M, K) */
            const float *pa = ta ? at(a, batch, k0, m0) : at(a, batch, m0, k0);
            sw_sgemm(1, ta, n, k, m, 1.0f, g, ld(dy), pa, ld(a), 0.0f, at(dx, batch, n0, k0), ld(dx));
        }
    } while (sw_matmul_next_batch(dy, batch));
    return SW_OK;
}
