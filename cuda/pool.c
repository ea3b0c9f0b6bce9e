/* pool.c -- a worker's 2-D pooling with cuDNN: forward and backward.
 *
 *   y  (N_b, C_b, Ho_b, Wo_b) = pool(x (N, C, H, W)) over y's box
 *   dx over dx's view         = the contributions of dy (y's box)
 *
 * Max pooling takes cuDNN's deterministic mode, average pooling counts the padding in the
 * divisor (PyTorch's count_include_pad=True, as csrc/cpu/pool.c).  The window runs on x's view
 * in place when cuDNN's symmetric padding gives its outputs exactly (window_geom.c), else on
 * a padded copy filled with -inf (max) or 0 (average) around x (window.c).  The backward pass needs the forward output: it recomputes
 * it into scratch (pooling is cheap next to reading the task graph's y from another buffer
 * whose box might differ).
 */
#include <math.h>    /* INFINITY */
#include <string.h>  /* memset, memcmp */

#include "window.h"

typedef struct {
    cu_window g;
    cudnnPoolingDescriptor_t pd;
    cudnnTensorDescriptor_t xd, yd;
    int ydims[4];
    float *pad;   /* padded: the whole worker's padded input (no chunks: pooling inputs are small) */
} pool_call;

static void call_free(pool_call *c) {
    if (c->pd) {
        cudnnDestroyPoolingDescriptor(c->pd);
    }
    if (c->xd) {
        cudnnDestroyTensorDescriptor(c->xd);
    }
    if (c->yd) {
        cudnnDestroyTensorDescriptor(c->yd);
    }
}

/* Window, descriptors and (padded) the filled buffer over x's view and y's box. */
static sw_status setup(const cu_task *t, int is_max, const sw_view *x, const sw_view *y, const sw_window *win,
                       int fill, pool_call *c) {
    memset(c, 0, sizeof *c);
    if (x->rank != 4 || y->rank != 4) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: pooling views must be (N, C, H, W)", t->e.id);
    }
    const int64_t out_lo[2] = {y->lo[2], y->lo[3]}, out_n[2] = {y->shape[2], y->shape[3]};
    SW_TRY(cu_window_of(x, y->lo[0], y->shape[0], y->lo[1], y->shape[1], out_lo, out_n, win, &c->g));
    SW_TRY(cu_int_dims("pooling output", 4, y->shape, c->ydims));
    int64_t pads[2] = {c->g.direct ? c->g.h.pad_lo : 0, c->g.direct ? c->g.w.pad_lo : 0};
    int wnd[6];
    const int64_t w64[6] = {win->kh, win->kw, pads[0], pads[1], win->sh, win->sw};
    SW_TRY(cu_int_dims("pooling window", 6, w64, wnd));
    DNN_TRY(cudnnCreatePoolingDescriptor(&c->pd));
    DNN_TRY(cudnnSetPooling2dDescriptor(c->pd, is_max ? CUDNN_POOLING_MAX_DETERMINISTIC
                                                      : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                        CUDNN_PROPAGATE_NAN, wnd[0], wnd[1], wnd[2], wnd[3], wnd[4], wnd[5]));
    if (c->g.direct) {
        SW_TRY(cu_tensor_desc(&c->xd, c->g.dims, c->g.strides));
    } else {
        int xd[4] = {c->g.dims[0], c->g.dims[1], (int)(c->g.h.need_hi - c->g.h.need_lo),
                     (int)(c->g.w.need_hi - c->g.w.need_lo)};
        SW_TRY(cu_tensor_desc(&c->xd, xd, NULL));
        sw_status s = SW_OK;
        c->pad = cu_scratch(t, cu_window_sample_bytes(&c->g) * (size_t)c->g.nb, &s);
        SW_TRY(s);
        if (fill) {
            SW_TRY(cu_window_fill(t, &c->g, c->g.n0, c->g.nb, is_max ? -INFINITY : 0.0f, c->pad));
        }
    }
    int n, ch, h, w;
    DNN_TRY(cudnnGetPooling2dForwardOutputDim(c->pd, c->xd, &n, &ch, &h, &w));
    if (n != c->ydims[0] || ch != c->ydims[1] || h != c->ydims[2] || w != c->ydims[3]) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: cuDNN's pooling output is not the task's box", t->e.id);
    }
    return cu_tensor_desc(&c->yd, c->ydims, NULL);
}

sw_status cu_pool_forward(const cu_task *t, int is_max, const sw_view *x, sw_view *y, const sw_window *win) {
    if (sw_view_volume(y) == 0) {
        return SW_OK;
    }
    pool_call c;
    sw_status s = setup(t, is_max, x, y, win, 1, &c);
    const float one = 1.0f, zero = 0.0f;
    if (s == SW_OK) {
        s = cu_check_dnn(cudnnPoolingForward(t->st->dnn, c.pd, &one, c.xd, c.g.direct ? c.g.xp : c.pad, &zero, c.yd,
                                             y->data), "cudnnPoolingForward");
    }
    call_free(&c);
    return s;
}

sw_status cu_pool_backward(const cu_task *t, int is_max, const sw_view *x, const sw_view *y, const sw_view *dy,
                           sw_view *dx, const sw_window *win) {
    (void)y;   /* recomputed below: see the file's comment */
    if (sw_view_volume(dy) == 0) {
        return cu_zero(t, dx);
    }
    pool_call c;
    sw_status s = setup(t, is_max, x, dy, win, 1, &c);
    const float one = 1.0f, zero = 0.0f;
    float *yv = NULL, *dpad = NULL;
    if (s == SW_OK) {
        yv = cu_scratch(t, sizeof(float) * (size_t)sw_view_volume(dy), &s);
    }
    const float *xin = c.g.direct ? c.g.xp : c.pad;
    if (s == SW_OK) {
        s = cu_check_dnn(cudnnPoolingForward(t->st->dnn, c.pd, &one, c.xd, xin, &zero, c.yd, yv), "cudnnPoolingForward");
    }
    /* dx is overwritten: zero it where the window's gradient does not land */
    int whole = c.g.direct && dx->rank == 4 && dx->shape[0] == c.g.nb && dx->shape[1] == c.g.c &&
                c.g.h.skip == 0 && c.g.h.used == dx->shape[2] && c.g.w.skip == 0 && c.g.w.used == dx->shape[3] &&
                dx->lo[0] == c.g.n0 && dx->lo[1] == c.g.c0;
    if (s == SW_OK && !whole) {
        s = cu_zero(t, dx);
    }
    cu_window gd = c.g;   /* the same window over dx's view (dx holds x's region: the same box) */
    if (s == SW_OK && c.g.direct) {
        const int64_t out_lo[2] = {dy->lo[2], dy->lo[3]}, out_n[2] = {dy->shape[2], dy->shape[3]};
        s = cu_window_of(dx, dy->lo[0], dy->shape[0], dy->lo[1], dy->shape[1], out_lo, out_n, win, &gd);
        if (s == SW_OK && (!gd.direct || memcmp(gd.strides, c.g.strides, sizeof gd.strides) != 0)) {
            s = SW_FAIL(SW_ERR_INTERNAL, "task %d: pooling's dx and x views differ", t->e.id);
        }
    } else if (s == SW_OK) {
        dpad = cu_scratch(t, cu_window_sample_bytes(&c.g) * (size_t)c.g.nb, &s);
    }
    if (s == SW_OK) {
        s = cu_check_dnn(cudnnPoolingBackward(t->st->dnn, c.pd, &one, c.yd, yv, c.yd, dy->data, c.xd, xin, &zero, c.xd,
                                              c.g.direct ? gd.xp : dpad), "cudnnPoolingBackward");
    }
    if (s == SW_OK && !c.g.direct) {   /* the padded gradient's part inside dx's view */
        sw_view p;
        cu_window_padded(&c.g, c.g.n0, c.g.nb, dpad, &p);
        s = cu_copy_box(t, &p, dx, 0);
    }
    call_free(&c);
    return s;
}
