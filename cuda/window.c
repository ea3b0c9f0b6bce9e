/* window.c -- a worker's window (convolution, pooling) on its input view, for cuDNN.
 *
 * Direct: the view's rows [skip, skip + used) and columns likewise, with a strided tensor
 * descriptor over x's own layout (no copy), padding pad_lo on both sides.  Padded: the rows
 * and columns the outputs read, need_lo .. need_hi, copied into scratch with the padding
 * around them filled (a chunk of samples at a time), then cuDNN runs with padding 0.  The copy
 * is a box copy in global coordinates, so whatever part of the need x's view holds lands in
 * its place.  Shapes: x (N, C, H, W); padded (k, C, need_h, need_w).
 */
#include "window.h"

sw_status cu_int_dims(const char *what, int n, const int64_t *v, int *out) {
    for (int k = 0; k < n; k++) {
        if (v[k] < 0 || v[k] > INT32_MAX) {
            return SW_FAIL(SW_ERR_VALUE, "%s: %lld does not fit cuDNN's 32-bit sizes", what, (long long)v[k]);
        }
        out[k] = (int)v[k];
    }
    return SW_OK;
}

sw_status cu_window_of(const sw_view *x, int64_t n0, int64_t nb, int64_t c0, int64_t c, const int64_t *out_lo,
                       const int64_t *out_n, const sw_window *win, cu_window *g) {
    if (x->rank != 4 || n0 < x->lo[0] || n0 + nb > x->lo[0] + x->shape[0] || c0 < x->lo[1] ||
        c0 + c > x->lo[1] + x->shape[1]) {
        return SW_FAIL(SW_ERR_INTERNAL, "window: the input view misses the samples or channels it needs");
    }
    g->x = x;
    g->n0 = n0;
    g->nb = nb;
    g->c0 = c0;
    g->c = c;
    SW_TRY(sw_gpu_window_dim_of(x->lo[2], x->shape[2], out_lo[0], out_n[0], win->kh, win->sh, win->ph, &g->h));
    SW_TRY(sw_gpu_window_dim_of(x->lo[3], x->shape[3], out_lo[1], out_n[1], win->kw, win->sw, win->pw, &g->w));
    g->direct = sw_gpu_window_direct(&g->h, &g->w);
    int64_t hw = x->shape[2] * x->shape[3];
    g->xp = x->data + (n0 - x->lo[0]) * x->shape[1] * hw + (c0 - x->lo[1]) * hw + g->h.skip * x->shape[3] + g->w.skip;
    const int64_t dims[4] = {nb, c, g->h.used, g->w.used}, strides[4] = {x->shape[1] * hw, hw, x->shape[3], 1};
    SW_TRY(cu_int_dims("window input", 4, dims, g->dims));
    return cu_int_dims("window input strides", 4, strides, g->strides);
}

void cu_window_padded(const cu_window *g, int64_t n, int64_t k, float *buf, sw_view *p) {
    p->data = buf;
    p->rank = 4;
    p->lo[0] = n;
    p->lo[1] = g->c0;
    p->lo[2] = g->h.need_lo;
    p->lo[3] = g->w.need_lo;
    p->shape[0] = k;
    p->shape[1] = g->c;
    p->shape[2] = g->h.need_hi - g->h.need_lo;
    p->shape[3] = g->w.need_hi - g->w.need_lo;
}

size_t cu_window_sample_bytes(const cu_window *g) {
    return sizeof(float) * (size_t)(g->c * (g->h.need_hi - g->h.need_lo) * (g->w.need_hi - g->w.need_lo));
}

int64_t cu_window_chunk(const cu_window *g, size_t bytes) {
    size_t one = cu_window_sample_bytes(g);
    int64_t k = one ? (int64_t)(bytes / one) : g->nb;
    return k < g->nb ? k : g->nb;
}

sw_status cu_window_fill(const cu_task *t, const cu_window *g, int64_t n, int64_t k, float fill, float *buf) {
    sw_view p;
    cu_window_padded(g, n, k, buf, &p);
    int64_t count = sw_view_volume(&p);
    if (fill == 0.0f) {
        CU_TRY(cudaMemsetAsync(buf, 0, sizeof(float) * (size_t)count, t->st->s));
    } else {
        CU_TRY(swk_fill(buf, count, fill, t->st->s));
    }
    return cu_copy_box(t, g->x, &p, 0);
}

sw_status cu_tensor_desc(cudnnTensorDescriptor_t *d, const int *dims, const int *strides) {
    DNN_TRY(cudnnCreateTensorDescriptor(d));
    int packed[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
    const int *s = strides ? strides : packed;
    sw_status st = cu_check_dnn(cudnnSetTensor4dDescriptorEx(*d, CUDNN_DATA_FLOAT, dims[0], dims[1], dims[2], dims[3],
                                                             s[0], s[1], s[2], s[3]), "cudnnSetTensor4dDescriptorEx");
    if (st != SW_OK) {
        cudnnDestroyTensorDescriptor(*d);
        *d = NULL;
    }
    return st;
}
