/* ops_cpu_rnn.c -- CPU kernels of the ops of recurrent models: matmul and the LSTM cell ops.
 *
 * Their input gradients need every data input (the other operand; all gates),
 * which the lowering lists among a backward task's reads.  matmul runs on
 * OpenBLAS directly (row-major, transposes by flag, no copies):
 *   y  (M_b, N_b) = a (M_b, K) @ b (K, N_b)
 *   da (M_b, K)   = dy (M_b, N_b) @ b^T        db (K, N_b) = a^T @ dy (M_b, N_b)
 * where K is the worker's part of k under a split reduction.
 */
#include "task_env.h"
#include "view.h"  /* sw_check_blas_dims */

/* Pointer to global element (r, c) of a 2-D view. */
static float *at2(const sw_view *v, int64_t r, int64_t c) {
    return v->data + (r - v->lo[0]) * v->shape[1] + (c - v->lo[1]);
}

/* v covers rows [r0, r0 + nr) and columns [c0, c0 + nc). */
static int covers2(const sw_view *v, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    return v->rank == 2 && r0 >= v->lo[0] && r0 + nr <= v->lo[0] + v->shape[0] && c0 >= v->lo[1] &&
           c0 + nc <= v->lo[1] + v->shape[1];
}

static sw_status matmul_forward(const sw_task_env *e) {
    sw_view a, b, y;
    sw_env_view(e, e->reads[0], &a);
    sw_env_view(e, e->reads[1], &b);
    sw_env_rebase(e, 0, &a);
    sw_env_rebase(e, 1, &b);
    sw_env_view(e, e->writes[0], &y);
    int64_t m = y.shape[0], n = y.shape[1], k = a.shape[1];
    if (!covers2(&a, y.lo[0], m, 0, k) || !covers2(&b, 0, k, y.lo[1], n)) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: matmul operands do not cover the output", e->id);
    }
    int64_t dims[3] = {m, n, k};
    SW_TRY(sw_check_blas_dims("matmul", 3, dims));
    sw_sgemm(0, 0, m, n, k, 1.0f, at2(&a, y.lo[0], 0), a.shape[1], at2(&b, 0, y.lo[1]), b.shape[1], 0.0f, y.data,
             n);
    return SW_OK;
}

static sw_status matmul_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_env_backward_reads(e, &r);
    sw_view dx;
    sw_env_view(e, e->writes[0], &dx);
    if (r.dy < 0) {
        sw_view_zero(&dx);
        return SW_OK;
    }
    if (r.region[0] < 0 || r.region[1] < 0) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: a matmul gradient needs both operands", e->id);
    }
    sw_view a, b, dy;
    sw_env_view(e, r.region[0], &a);
    sw_env_view(e, r.region[1], &b);
    sw_env_view(e, r.dy, &dy);
    sw_env_rebase(e, 0, &a);
    sw_env_rebase(e, 1, &b);
    sw_env_rebase(e, e->task->slot, &dx);
    int64_t m = dy.shape[0], n = dy.shape[1];
    if (e->task->slot == 0) {   /* da over dx's box: rows of dy, this worker's k */
        int64_t k = dx.shape[1];
        if (!covers2(&b, dx.lo[1], k, dy.lo[1], n) || dx.shape[0] != m || dx.lo[0] != dy.lo[0]) {
            return SW_FAIL(SW_ERR_INTERNAL, "task %d: matmul da's boxes disagree", e->id);
        }
        int64_t dims[3] = {m, k, n};
        SW_TRY(sw_check_blas_dims("matmul", 3, dims));
        sw_sgemm(0, 1, m, k, n, 1.0f, dy.data, n, at2(&b, dx.lo[1], dy.lo[1]), b.shape[1], 0.0f, dx.data, k);
        return SW_OK;
    }
    int64_t k = dx.shape[0];   /* db over dx's box: this worker's k, columns of dy */
    if (!covers2(&a, dy.lo[0], m, dx.lo[0], k) || dx.shape[1] != n || dx.lo[1] != dy.lo[1]) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: matmul db's boxes disagree", e->id);
    }
    int64_t dims[3] = {k, n, m};
    SW_TRY(sw_check_blas_dims("matmul", 3, dims));
    sw_sgemm(1, 0, k, n, m, 1.0f, at2(&a, dy.lo[0], dx.lo[0]), a.shape[1], dy.data, n, 0.0f, dx.data, n);
    return SW_OK;
}

/* The data regions of an LSTM op in slot order (each covers the output's box). */
static sw_status gates(const sw_task_env *e, const sw_backward_reads *r, int count, sw_view *in,
                       const sw_view **ptrs) {
    for (int k = 0; k < count; k++) {
        int32_t b = r ? r->region[k] : e->reads[k];
        if (b < 0) {
            return SW_FAIL(SW_ERR_INTERNAL, "task %d: an LSTM op needs all %d inputs", e->id, count);
        }
        sw_env_view(e, b, &in[k]);
        ptrs[k] = &in[k];
    }
    return SW_OK;
}

static sw_status lstm_forward(const sw_task_env *e) {
    sw_view in[4], y;
    const sw_view *p[4];
    int cell = e->attrs->type == SW_OP_LSTM_CELL;
    SW_TRY(gates(e, NULL, cell ? 4 : 2, in, p));
    sw_env_view(e, e->writes[0], &y);
    return cell ? sw_lstm_cell_forward(p, &y) : sw_lstm_hidden_forward(p[0], p[1], &y);
}

static sw_status lstm_backward_data(const sw_task_env *e) {
    sw_backward_reads r;
    sw_env_backward_reads(e, &r);
    sw_view in[4], dy, dx;
    const sw_view *p[4];
    sw_env_view(e, e->writes[0], &dx);
    if (r.dy < 0) {
        sw_view_zero(&dx);
        return SW_OK;
    }
    int cell = e->attrs->type == SW_OP_LSTM_CELL;
    SW_TRY(gates(e, &r, cell ? 4 : 2, in, p));
    sw_env_view(e, r.dy, &dy);
    return cell ? sw_lstm_cell_backward(p, &dy, e->task->slot, &dx)
                : sw_lstm_hidden_backward(p[0], p[1], &dy, e->task->slot, &dx);
}

const sw_cpu_op sw_cpu_matmul = {matmul_forward, matmul_backward_data, NULL};
const sw_cpu_op sw_cpu_lstm_cell = {lstm_forward, lstm_backward_data, NULL};
const sw_cpu_op sw_cpu_lstm_hidden = {lstm_forward, lstm_backward_data, NULL};
