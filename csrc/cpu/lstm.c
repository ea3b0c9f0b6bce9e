/* lstm.c -- the element-wise LSTM kernels on views (any rank, in practice (B, H)):
 *
 *   lstm_cell:   c = sigmoid(f) * c_prev + sigmoid(i) * tanh(g)      inputs {i, f, g, c_prev}
 *   lstm_hidden: h = sigmoid(o) * tanh(c)                              inputs {o, c}
 *
 * and their backward passes, one input's gradient per call (the executor runs one
 * backward_data task per input slot).  With s = sigmoid(x), s' = s (1 - s) and
 * t = tanh(x), t' = 1 - t^2:
 *
 *   lstm_cell:   di = dc t(g) s'(i),  df = dc c_prev s'(f),  dg = dc s(i) t'(g),  dc_prev = dc s(f)
 *   lstm_hidden: do = dh t(c) s'(o),  dc = dh s(o) t'(c)
 *
 * As in eltwise.c, the output view is the box computed and every input view
 * (forward inputs and the incoming gradient) must cover it; the loop runs over
 * the rows of the box, the innermost dimension being contiguous everywhere.
 */
#include <math.h>  /* expf, tanhf */

#include "kernels.h"  /* sw_view, sw_lstm_* */
#include "../core/view.h"     /* sw_view_check, sw_view_check_covers, sw_view_offset, sw_view_*_row */

#define LSTM_MAX_IN 5  /* lstm_cell backward: 4 inputs and dc */

typedef enum { CELL_FORWARD, CELL_BACKWARD, HIDDEN_FORWARD, HIDDEN_BACKWARD } lstm_kind;

/* 1 / (1 + exp(-x)); exp of a non-positive number only, so nothing overflows. */
static inline float sigmoidf(float x) {
    if (x >= 0.0f) {
        return 1.0f / (1.0f + expf(-x));
    }
    const float e = expf(x);
    return e / (1.0f + e);
}

/* Every one of the n inputs has out's rank and covers out's box. */
static sw_status check_inputs(int n, const sw_view *const *in, const char *const *names, const sw_view *out,
                              const char *out_name) {
    for (int k = 0; k < n; k++) {
        sw_status s = sw_view_check_elementwise_in(in[k], names[k], out, out_name);
        if (s != SW_OK) {
            return s;
        }
    }
    return SW_OK;
}

/* One row of `len` elements: p[k] points at input k's row, y at the output's. */
static void lstm_row(lstm_kind kind, int slot, const float *const *p, float *y, int64_t len) {
    switch (kind) {
    case CELL_FORWARD:  /* p: i, f, g, c_prev */
        for (int64_t j = 0; j < len; j++) {
            y[j] = sigmoidf(p[1][j]) * p[3][j] + sigmoidf(p[0][j]) * tanhf(p[2][j]);
        }
        break;
    case CELL_BACKWARD:  /* p: i, f, g, c_prev, dc */
        for (int64_t j = 0; j < len; j++) {
            const float dc = p[4][j];
            float si, sf, tg;
            switch (slot) {
            case 0:
                si = sigmoidf(p[0][j]);
                y[j] = dc * tanhf(p[2][j]) * si * (1.0f - si);
                break;
            case 1:
                sf = sigmoidf(p[1][j]);
                y[j] = dc * p[3][j] * sf * (1.0f - sf);
                break;
            case 2:
                tg = tanhf(p[2][j]);
                y[j] = dc * sigmoidf(p[0][j]) * (1.0f - tg * tg);
                break;
            default:
                y[j] = dc * sigmoidf(p[1][j]);
                break;
            }
        }
        break;
    case HIDDEN_FORWARD:  /* p: o, c */
        for (int64_t j = 0; j < len; j++) {
            y[j] = sigmoidf(p[0][j]) * tanhf(p[1][j]);
        }
        break;
    case HIDDEN_BACKWARD:  /* p: o, c, dh */
        for (int64_t j = 0; j < len; j++) {
            const float so = sigmoidf(p[0][j]), tc = tanhf(p[1][j]);
            y[j] = slot == 0 ? p[2][j] * tc * so * (1.0f - so) : p[2][j] * so * (1.0f - tc * tc);
        }
        break;
    }
}

/* The contiguous runs of y's box (view.h), lstm_row on each. */
static void lstm_rows(lstm_kind kind, int slot, int n, const sw_view *const *in, sw_view *y) {
    const sw_view *views[LSTM_MAX_IN + 1];
    int64_t hi[SW_MAX_RANK];
    for (int k = 0; k < n; k++) {
        views[k] = in[k];
    }
    views[n] = y;
    for (int d = 0; d < y->rank; d++) {
        hi[d] = sw_view_hi(y, d);
    }
    sw_runs r;
    if (!sw_runs_first(&r, views, n + 1, y->lo, hi, y->rank)) {
        return;
    }
    const float *p[LSTM_MAX_IN];
    do {
        for (int k = 0; k < n; k++) {
            p[k] = in[k]->data + sw_view_offset(in[k], r.idx);
        }
        lstm_row(kind, slot, p, y->data + sw_view_offset(y, r.idx), r.len);
    } while (sw_runs_next(&r));
}

sw_status sw_lstm_cell_forward(const sw_view *const in[4], sw_view *c) {
    static const char *const names[4] = {"lstm_cell_forward: i", "lstm_cell_forward: f", "lstm_cell_forward: g",
                                         "lstm_cell_forward: c_prev"};
    sw_status s = sw_view_check_elementwise_out(c, "lstm_cell_forward: c");
    if (s == SW_OK && !in) {
        s = SW_FAIL(SW_ERR_VALUE, "lstm_cell_forward: NULL inputs");
    }
    if (s == SW_OK) {
        s = check_inputs(4, in, names, c, "c");
    }
    if (s == SW_OK) {
        lstm_rows(CELL_FORWARD, 0, 4, in, c);
    }
    return s;
}

sw_status sw_lstm_cell_backward(const sw_view *const in[4], const sw_view *dc, int slot, sw_view *dx) {
    static const char *const names[5] = {"lstm_cell_backward: i", "lstm_cell_backward: f", "lstm_cell_backward: g",
                                         "lstm_cell_backward: c_prev", "lstm_cell_backward: dc"};
    sw_status s = sw_view_check_elementwise_out(dx, "lstm_cell_backward: dx");
    if (s == SW_OK && (slot < 0 || slot > 3)) {
        s = SW_FAIL(SW_ERR_VALUE, "lstm_cell_backward: slot %d is not in 0..3 (i, f, g, c_prev)", slot);
    }
    if (s == SW_OK && !in) {
        s = SW_FAIL(SW_ERR_VALUE, "lstm_cell_backward: NULL inputs");
    }
    const sw_view *all[5] = {NULL, NULL, NULL, NULL, dc};
    if (s == SW_OK) {
        for (int k = 0; k < 4; k++) {
            all[k] = in[k];
        }
        s = check_inputs(5, all, names, dx, "dx");
    }
    if (s == SW_OK) {
        lstm_rows(CELL_BACKWARD, slot, 5, all, dx);
    }
    return s;
}

sw_status sw_lstm_hidden_forward(const sw_view *o, const sw_view *c, sw_view *h) {
    static const char *const names[2] = {"lstm_hidden_forward: o", "lstm_hidden_forward: c"};
    const sw_view *in[2] = {o, c};
    sw_status s = sw_view_check_elementwise_out(h, "lstm_hidden_forward: h");
    if (s == SW_OK) {
        s = check_inputs(2, in, names, h, "h");
    }
    if (s == SW_OK) {
        lstm_rows(HIDDEN_FORWARD, 0, 2, in, h);
    }
    return s;
}

sw_status sw_lstm_hidden_backward(const sw_view *o, const sw_view *c, const sw_view *dh, int slot, sw_view *dx) {
    static const char *const names[3] = {"lstm_hidden_backward: o", "lstm_hidden_backward: c",
                                         "lstm_hidden_backward: dh"};
    const sw_view *in[3] = {o, c, dh};
    sw_status s = sw_view_check_elementwise_out(dx, "lstm_hidden_backward: dx");
    if (s == SW_OK && (slot < 0 || slot > 1)) {
        s = SW_FAIL(SW_ERR_VALUE, "lstm_hidden_backward: slot %d is not in 0..1 (o, c)", slot);
    }
    if (s == SW_OK) {
        s = check_inputs(3, in, names, dx, "dx");
    }
    if (s == SW_OK) {
        lstm_rows(HIDDEN_BACKWARD, slot, 3, in, dx);
    }
    return s;
}
