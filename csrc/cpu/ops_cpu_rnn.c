/* ops_cpu_rnn.c -- CPU kernels of the LSTM cell ops (matmul, which recurrent models use
 * too, is in ops_cpu_seq.c with the batched products).
 *
 * Their input gradients need every data input (all gates), which the lowering lists
 * among a backward task's reads.
 */
#include "task_env.h"

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

const sw_cpu_op sw_cpu_lstm_cell = {lstm_forward, lstm_backward_data, NULL};
const sw_cpu_op sw_cpu_lstm_hidden = {lstm_forward, lstm_backward_data, NULL};
