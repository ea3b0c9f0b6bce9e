/* eltwise.c -- element-wise kernels: ReLU forward/backward and the sum of two
 * tensors (residual connections).
 *
 * Any rank 1..SW_MAX_RANK.  The output view is the box to compute; every
 * input view must cover it (same rank), since an element-wise op reads exactly
 * the output's own index in each input -- there is no padding to fall back on.
 * The work is a loop over the rows of the output box: the innermost dimension
 * is contiguous in every buffer.
 */
#include "kernels.h"  /* sw_view, sw_relu_*, sw_add_forward */
#include "view.h"     /* sw_view_check, sw_view_check_covers, sw_view_offset, sw_view_*_row */

typedef enum {
    ELT_RELU_FORWARD,   /* y = max(a, 0) (NaN propagates, as in PyTorch) */
    ELT_RELU_BACKWARD,  /* y = b * (a > 0): a is the forward output, b its gradient */
    ELT_ADD,            /* y = a + b */
} eltwise_kind;


/* y[i] = f(a[i], b[i]) for every global index i in y's box (b unused for ReLU forward). */
static void eltwise_rows(eltwise_kind kind, const sw_view *a, const sw_view *b, sw_view *y) {
    int64_t idx[SW_MAX_RANK];
    if (!sw_view_first_row(y, idx)) {
        return;
    }
    const int64_t len = y->shape[y->rank - 1];
    do {
        const float *ap = a->data + sw_view_offset(a, idx);
        const float *bp = b ? b->data + sw_view_offset(b, idx) : NULL;
        float *yp = y->data + sw_view_offset(y, idx);
        switch (kind) {
        case ELT_RELU_FORWARD:
            for (int64_t i = 0; i < len; i++) {
                yp[i] = (ap[i] > 0.0f || ap[i] != ap[i]) ? ap[i] : 0.0f;
            }
            break;
        case ELT_RELU_BACKWARD:
            for (int64_t i = 0; i < len; i++) {
                /* load unconditionally so that this is a select, not a branch: the
                 * signs are random and a branch costs 15x (measured) */
                const float g = bp[i];
                yp[i] = ap[i] > 0.0f ? g : 0.0f;
            }
            break;
        case ELT_ADD:
            for (int64_t i = 0; i < len; i++) {
                yp[i] = ap[i] + bp[i];
            }
            break;
        }
    } while (sw_view_next_row(y, idx));
}

/* x (any rank) covers y's box; y = max(x, 0) over y's box. */
sw_status sw_relu_forward(const sw_view *x, sw_view *y) {
    sw_status s = sw_view_check_elementwise_out(y, "relu_forward: y");
    if (s == SW_OK) {
        s = sw_view_check_elementwise_in(x, "relu_forward: x", y, "y");
    }
    if (s == SW_OK) {
        eltwise_rows(ELT_RELU_FORWARD, x, NULL, y);
    }
    return s;
}

/* y (the forward output) and dy cover dx's box; dx = dy * (y > 0) over dx's box. */
sw_status sw_relu_backward(const sw_view *y, const sw_view *dy, sw_view *dx) {
    sw_status s = sw_view_check_elementwise_out(dx, "relu_backward: dx");
    if (s == SW_OK) {
        s = sw_view_check_elementwise_in(y, "relu_backward: y", dx, "dx");
    }
    if (s == SW_OK) {
        s = sw_view_check_elementwise_in(dy, "relu_backward: dy", dx, "dx");
    }
    if (s == SW_OK) {
        eltwise_rows(ELT_RELU_BACKWARD, y, dy, dx);
    }
    return s;
}

/* a and b cover y's box; y = a + b over y's box. */
sw_status sw_add_forward(const sw_view *a, const sw_view *b, sw_view *y) {
    sw_status s = sw_view_check_elementwise_out(y, "add_forward: y");
    if (s == SW_OK) {
        s = sw_view_check_elementwise_in(a, "add_forward: a", y, "y");
    }
    if (s == SW_OK) {
        s = sw_view_check_elementwise_in(b, "add_forward: b", y, "y");
    }
    if (s == SW_OK) {
        eltwise_rows(ELT_ADD, a, b, y);
    }
    return s;
}
