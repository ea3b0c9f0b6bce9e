/* eltwise.c -- element-wise kernels: ReLU forward/backward and the sum of two
 * tensors (residual connections).
 *
 * Any rank 1..SW_MAX_RANK.  The output view is the box to compute; every
 * input view must cover it (same rank), since an element-wise op reads exactly
 * the output's own index in each input -- there is no padding to fall back on.
 * The work is a loop over the contiguous runs of the output box (view.h).
 */
#include "kernels.h"  /* sw_view, sw_relu_*, sw_add_forward */
#include "simd.h"     /* SW_CLONES */
#include "../core/view.h"     /* sw_view_check, sw_view_check_covers, sw_view_offset, sw_runs */

typedef enum {
    ELT_RELU_FORWARD,   /* y = max(a, 0) (NaN propagates, as in PyTorch) */
    ELT_RELU_BACKWARD,  /* y = b * (a > 0): a is the forward output, b its gradient */
    ELT_ADD,            /* y = a + b */
} eltwise_kind;


/* One run of each kind (compiled for AVX2 and the baseline: simd.h). */
SW_CLONES static void relu_run(const float *a, float *y, int64_t len) {
    for (int64_t i = 0; i < len; i++) {
        y[i] = (a[i] > 0.0f || a[i] != a[i]) ? a[i] : 0.0f;
    }
}

SW_CLONES static void relu_backward_run(const float *y, const float *dy, float *dx, int64_t len) {
    for (int64_t i = 0; i < len; i++) {
        /* load unconditionally so that this is a select, not a branch: the
         * signs are random and a branch costs 15x (measured) */
        const float g = dy[i];
        dx[i] = y[i] > 0.0f ? g : 0.0f;
    }
}

SW_CLONES static void add_run(const float *a, const float *b, float *y, int64_t len) {
    for (int64_t i = 0; i < len; i++) {
        y[i] = a[i] + b[i];
    }
}

/* y[i] = f(a[i], b[i]) for every global index i in y's box (b unused for ReLU forward),
 * over contiguous runs (view.h: the whole box at once when the views hold just it). */
static void eltwise_rows(eltwise_kind kind, const sw_view *a, const sw_view *b, sw_view *y) {
    const sw_view *views[3] = {y, a, b};
    int64_t hi[SW_MAX_RANK];
    for (int d = 0; d < y->rank; d++) {
        hi[d] = sw_view_hi(y, d);
    }
    sw_runs r;
    if (!sw_runs_first(&r, views, b ? 3 : 2, y->lo, hi, y->rank)) {
        return;
    }
    const int64_t len = r.len;
    do {
        const float *ap = a->data + sw_view_offset(a, r.idx);
        const float *bp = b ? b->data + sw_view_offset(b, r.idx) : NULL;
        float *yp = y->data + sw_view_offset(y, r.idx);
        switch (kind) {
        case ELT_RELU_FORWARD:
            relu_run(ap, yp, len);
            break;
        case ELT_RELU_BACKWARD:
            relu_backward_run(ap, bp, yp, len);
            break;
        case ELT_ADD:
            add_run(ap, bp, yp, len);
            break;
        }
    } while (sw_runs_next(&r));
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
