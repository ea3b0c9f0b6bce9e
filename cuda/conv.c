/* conv.c -- a worker's 2-D convolution with cuDNN: forward, backward data, backward filter.
 *
 *   y  (N_b, Co_b, Ho_b, Wo_b) = conv(x (N_b, Ci, H, W), w (Co_b, Ci, kh, kw)) + b   forward
 *   dx over dx's view          = the contributions of dy's box                      backward data
 *   dw (Co_b, Ci, kh, kw)      = from the x region and dy                           backward filter
 *
 * The window runs on x's view in place when cuDNN's symmetric padding gives its outputs
 * exactly (window_geom.c), else on a padded copy, a chunk of samples at a time (window.c);
 * the filter gradient of later chunks adds to the first (beta = 1), in sample order.
 * Algorithms: cuDNN's heuristic list for the shapes (cudnnGet*Algorithm_v7, which runs
 * nothing), the first deterministic one whose workspace fits the stream's scratch, cached per
 * shape and GPU; TF32 stays off (FMA math) unless SHARDWISE_CUDA_TF32=1, and then FMA math
 * where no deterministic tensor-op algorithm fits.  This is cuDNN's legacy convolution API,
 * deprecated in cuDNN 9 in favour of the graph API but still shipped.
 */
#include <stdlib.h>  /* realloc, free */
#include <string.h>  /* memcmp, memcpy */

#include "window.h"

enum { FWD = 0, BWD_DATA = 1, BWD_FILTER = 2 };

typedef struct {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t cv;
    int key[18];   /* x dims and strides, w dims, padding, stride: the algorithm cache's key */
} conv_desc;

static void desc_free(conv_desc *d) {
    if (d->x) {
        cudnnDestroyTensorDescriptor(d->x);
    }
    if (d->y) {
        cudnnDestroyTensorDescriptor(d->y);
    }
    if (d->w) {
        cudnnDestroyFilterDescriptor(d->w);
    }
    if (d->cv) {
        cudnnDestroyConvolutionDescriptor(d->cv);
    }
}

/* Descriptors of x (dims, strides), w (dims), padding, stride; y packed (its dims from cuDNN,
 * checked against `ydims`). */
static sw_status desc_make(const cu_task *t, conv_desc *d, const int *xd, const int *xs, const int *wd, int ph,
                           int pw, int sh, int sw, const int *ydims) {
    memset(d, 0, sizeof *d);
    SW_TRY(cu_tensor_desc(&d->x, xd, xs));
    DNN_TRY(cudnnCreateFilterDescriptor(&d->w));
    DNN_TRY(cudnnSetFilter4dDescriptor(d->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, wd[0], wd[1], wd[2], wd[3]));
    DNN_TRY(cudnnCreateConvolutionDescriptor(&d->cv));
    DNN_TRY(cudnnSetConvolution2dDescriptor(d->cv, ph, pw, sh, sw, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DNN_TRY(cudnnSetConvolutionMathType(d->cv, t->be->tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    int n, c, h, w;
    DNN_TRY(cudnnGetConvolution2dForwardOutputDim(d->cv, d->x, d->w, &n, &c, &h, &w));
    if (n != ydims[0] || c != ydims[1] || h != ydims[2] || w != ydims[3]) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: cuDNN's output (%d, %d, %d, %d) is not the task's (%d, %d, %d, %d)",
                       t->e.id, n, c, h, w, ydims[0], ydims[1], ydims[2], ydims[3]);
    }
    SW_TRY(cu_tensor_desc(&d->y, ydims, NULL));
    int key[18] = {xd[0], xd[1], xd[2], xd[3], xs[0], xs[1], xs[2], xs[3], wd[0], wd[1], wd[2], wd[3], ph, pw, sh, sw,
                   t->be->tf32, 0};
    memcpy(d->key, key, sizeof key);
    return SW_OK;
}

/* ------------------------------------------------------------------ algorithms */
static const cu_algo *cached(const cuda_backend *be, int pass, int gpu, const int *key) {
    for (int k = 0; k < be->nalgos; k++) {
        const cu_algo *a = &be->algos[k];
        if (a->pass == pass && a->gpu == gpu && memcmp(a->dims, key, sizeof a->dims) == 0) {
            return a;
        }
    }
    return NULL;
}

/* The first of cuDNN's ranked candidates that is deterministic, fits `limit` bytes and
 * (TF32 off) uses no tensor-op math. */
#define PICK(perf, count, limit, tf32, out_algo, out_bytes)                                                   \
    for (int k_ = 0; k_ < (count); k_++) {                                                                    \
        if ((perf)[k_].status == CUDNN_STATUS_SUCCESS && (perf)[k_].determinism == CUDNN_DETERMINISTIC &&     \
            (perf)[k_].memory <= (limit) &&                                                                   \
            ((tf32) || ((perf)[k_].mathType != CUDNN_TENSOR_OP_MATH &&                                        \
                        (perf)[k_].mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))) {                     \
            *(out_algo) = (int)(perf)[k_].algo;                                                               \
            *(out_bytes) = (perf)[k_].memory;                                                                 \
            break;                                                                                            \
        }                                                                                                     \
    }

/* cuDNN's ranked candidates for one pass under the descriptor's math type: the first PICK takes. */
static sw_status query(const cu_task *t, int pass, const conv_desc *d, size_t limit, int tf32, int *algo,
                       size_t *bytes, int *n) {
    cudnnHandle_t h = t->st->dnn;
    *algo = -1;
    *n = 0;
    if (pass == FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        DNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(h, d->x, d->w, d->cv, d->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, n,
                                                       perf));
        PICK(perf, *n, limit, tf32, algo, bytes)
    } else if (pass == BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        DNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d->w, d->y, d->cv, d->x,
                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, n, perf));
        PICK(perf, *n, limit, tf32, algo, bytes)
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        DNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d->x, d->y, d->cv, d->w,
                                                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, n, perf));
        PICK(perf, *n, limit, tf32, algo, bytes)
    }
    return SW_OK;
}

/* The pass's algorithm for d, cached per shape: with TF32 allowed, tensor-op math first, and
 * plain FMA math where cuDNN offers no deterministic tensor-op candidate within `limit` (TF32
 * is a permission, not a requirement); the descriptor takes the math type chosen. */
static sw_status choose(const cu_task *t, int pass, const conv_desc *d, size_t limit, int *algo, size_t *bytes) {
    cuda_backend *be = t->be;
    const cu_algo *hit = cached(be, pass, t->st->gpu, d->key);
    int fma = !be->tf32;
    if (hit) {
        *algo = hit->algo;
        *bytes = hit->bytes;
        fma = hit->fma;
    } else {
        int n = 0;
        SW_TRY(query(t, pass, d, limit, be->tf32, algo, bytes, &n));
        if (*algo < 0 && be->tf32) {
            DNN_TRY(cudnnSetConvolutionMathType(d->cv, CUDNN_FMA_MATH));
            fma = 1;
            int n_fma = 0;
            SW_TRY(query(t, pass, d, limit, 0, algo, bytes, &n_fma));
            n += n_fma;
        }
        if (*algo < 0) {
            return SW_FAIL(SW_ERR_NOMEM, "task %d: cuDNN offers no deterministic convolution algorithm within the %zu "
                           "bytes of workspace left (of %d candidates): raise the workspace", t->e.id, limit, n);
        }
        if (be->nalgos == be->algo_cap) {
            int cap = be->algo_cap ? 2 * be->algo_cap : 32;
            cu_algo *grown = realloc(be->algos, sizeof *grown * (size_t)cap);
            if (!grown) {
                return SW_FAIL(SW_ERR_NOMEM, "out of memory for the algorithm cache");
            }
            be->algos = grown;
            be->algo_cap = cap;
        }
        cu_algo *a = &be->algos[be->nalgos++];
        a->pass = pass;
        a->gpu = t->st->gpu;
        memcpy(a->dims, d->key, sizeof a->dims);
        a->algo = *algo;
        a->bytes = *bytes;
        a->fma = fma;
    }
    if (fma && be->tf32) {   /* a cached FMA choice: this chunk's fresh descriptor asked for tensor ops */
        DNN_TRY(cudnnSetConvolutionMathType(d->cv, CUDNN_FMA_MATH));
    }
    if (*bytes > limit) {
        return SW_FAIL(SW_ERR_NOMEM, "task %d: the convolution's algorithm needs %zu bytes of workspace, %zu are left",
                       t->e.id, *bytes, limit);
    }
    return SW_OK;
}

void cu_algos_free(cuda_backend *be) {
    free(be->algos);
    be->algos = NULL;
    be->nalgos = be->algo_cap = 0;
}

/* Workspace left in the stream's scratch. */
static size_t left(const cu_task *t) {
    size_t used = (t->st->used + SW_GPU_ALIGN - 1) / SW_GPU_ALIGN * SW_GPU_ALIGN;
    return used < t->st->workspace_bytes ? t->st->workspace_bytes - used : 0;
}

/* ------------------------------------------------------------------ the three passes */
typedef struct {
    cu_window g;
    int yd[4];           /* the output (dy) box's dims: (N_b, Co_b, Ho_b, Wo_b) */
    int wd[4];
    const float *w;      /* w at y's first output channel */
    int64_t chunk;       /* padded: samples per chunk */
    float *pad;          /* padded: its buffer */
} conv_call;

/* The call's window, weights and (when padded) its buffer: half the scratch at most, so that
 * the algorithm's workspace has the rest. */
static sw_status setup(const cu_task *t, const sw_view *x, const sw_view *w, const sw_view *y, const sw_window *win,
                       conv_call *c) {
    if (y->rank != 4 || w->rank != 4 || x->rank != 4 || w->shape[2] != win->kh || w->shape[3] != win->kw ||
        w->shape[1] != x->shape[1] || w->lo[1] != x->lo[1] || y->lo[1] < w->lo[0] ||
        y->lo[1] + y->shape[1] > w->lo[0] + w->shape[0]) {
        return SW_FAIL(SW_ERR_INTERNAL, "task %d: convolution views disagree (x, w and y channels, kernel)", t->e.id);
    }
    const int64_t out_lo[2] = {y->lo[2], y->lo[3]}, out_n[2] = {y->shape[2], y->shape[3]};
    SW_TRY(cu_window_of(x, y->lo[0], y->shape[0], x->lo[1], x->shape[1], out_lo, out_n, win, &c->g));
    SW_TRY(cu_int_dims("convolution output", 4, y->shape, c->yd));
    const int64_t wd[4] = {y->shape[1], w->shape[1], w->shape[2], w->shape[3]};
    SW_TRY(cu_int_dims("convolution weight", 4, wd, c->wd));
    c->w = w->data + (y->lo[1] - w->lo[0]) * w->shape[1] * w->shape[2] * w->shape[3];
    c->chunk = c->g.nb;
    c->pad = NULL;
    if (!c->g.direct && c->g.nb > 0) {
        c->chunk = cu_window_chunk(&c->g, left(t) / 2);
        if (c->chunk < 1) {
            return SW_FAIL(SW_ERR_NOMEM, "task %d: one padded sample (%zu bytes) does not fit half the stream's "
                           "workspace: raise the workspace", t->e.id, cu_window_sample_bytes(&c->g));
        }
        sw_status s = SW_OK;
        c->pad = cu_scratch(t, cu_window_sample_bytes(&c->g) * (size_t)c->chunk, &s);
        SW_TRY(s);
    }
    return SW_OK;
}

/* Descriptors of samples [n, n + k): x's view in place, or the padded buffer. */
static sw_status chunk_desc(const cu_task *t, const conv_call *c, int64_t k, conv_desc *d) {
    int yd[4] = {(int)k, c->yd[1], c->yd[2], c->yd[3]};
    if (c->g.direct) {
        int xd[4] = {(int)k, c->g.dims[1], c->g.dims[2], c->g.dims[3]};
        return desc_make(t, d, xd, c->g.strides, c->wd, (int)c->g.h.pad_lo, (int)c->g.w.pad_lo, (int)t->e.attrs->conv2d.win.sh,
                         (int)t->e.attrs->conv2d.win.sw, yd);
    }
    int hp = (int)(c->g.h.need_hi - c->g.h.need_lo), wp = (int)(c->g.w.need_hi - c->g.w.need_lo), ci = c->g.dims[1];
    int xd[4] = {(int)k, ci, hp, wp}, xs[4] = {ci * hp * wp, hp * wp, wp, 1};
    return desc_make(t, d, xd, xs, c->wd, 0, 0, (int)t->e.attrs->conv2d.win.sh, (int)t->e.attrs->conv2d.win.sw, yd);
}

/* The x of samples [n, n + k) as cuDNN reads it. */
static sw_status chunk_x(const cu_task *t, const conv_call *c, int64_t n, int64_t k, const float **xp) {
    if (c->g.direct) {
        *xp = c->g.xp + (n - c->g.n0) * c->g.strides[0];
        return SW_OK;
    }
    *xp = c->pad;
    return cu_window_fill(t, &c->g, n, k, 0.0f, c->pad);
}

/* One chunk's descriptors, its pass's algorithm and workspace (cuDNN's scratch on the stream);
 * chunk_end gives both back, whatever chunk_begin returned. */
typedef struct {
    conv_desc d;
    int algo;
    size_t bytes;
    void *ws;
} conv_chunk;

static sw_status chunk_begin(const cu_task *t, const conv_call *c, int64_t k, int pass, conv_chunk *ch) {
    ch->algo = 0;
    ch->bytes = 0;
    ch->ws = NULL;
    sw_status s = chunk_desc(t, c, k, &ch->d);
    if (s == SW_OK) {
        s = choose(t, pass, &ch->d, left(t), &ch->algo, &ch->bytes);
    }
    if (s == SW_OK && ch->bytes > 0) {
        ch->ws = cu_scratch(t, ch->bytes, &s);
    }
    return s;
}

static void chunk_end(const cu_task *t, conv_chunk *ch) {
    t->st->used -= ch->ws ? ch->bytes : 0;   /* the next chunk reuses it (same stream, in order) */
    desc_free(&ch->d);
}

sw_status cu_conv_forward(const cu_task *t, const sw_view *x, const sw_view *w, const sw_view *b, sw_view *y,
                          const sw_window *win, int relu) {
    if (sw_view_volume(y) == 0) {
        return SW_OK;
    }
    conv_call c;
    SW_TRY(setup(t, x, w, y, win, &c));
    const int64_t per_y = (int64_t)c.yd[1] * c.yd[2] * c.yd[3];
    const float one = 1.0f, zero = 0.0f;
    for (int64_t n = c.g.n0; n < c.g.n0 + c.g.nb; n += c.chunk) {
        int64_t k = c.g.n0 + c.g.nb - n < c.chunk ? c.g.n0 + c.g.nb - n : c.chunk;
        const float *xp;
        SW_TRY(chunk_x(t, &c, n, k, &xp));
        conv_chunk ch;
        sw_status s = chunk_begin(t, &c, k, FWD, &ch);
        if (s == SW_OK) {
            s = cu_check_dnn(cudnnConvolutionForward(t->st->dnn, &one, ch.d.x, xp, ch.d.w, c.w, ch.d.cv,
                                                     (cudnnConvolutionFwdAlgo_t)ch.algo, ch.ws, ch.bytes, &zero, ch.d.y,
                                                     y->data + (n - c.g.n0) * per_y), "cudnnConvolutionForward");
        }
        chunk_end(t, &ch);
        SW_TRY(s);
    }
    cudnnTensorDescriptor_t yd = NULL, bd = NULL;
    sw_status s = cu_tensor_desc(&yd, c.yd, NULL);
    if (s == SW_OK && b) {   /* y += b over its channels */
        int bdims[4] = {1, c.yd[1], 1, 1};
        s = cu_tensor_desc(&bd, bdims, NULL);
        if (s == SW_OK) {
            s = cu_check_dnn(cudnnAddTensor(t->st->dnn, &one, bd, b->data + (y->lo[1] - b->lo[0]), &one, yd, y->data),
                             "cudnnAddTensor");
        }
    }
    if (s == SW_OK && relu) {
        cudnnActivationDescriptor_t act;
        s = cu_check_dnn(cudnnCreateActivationDescriptor(&act), "cudnnCreateActivationDescriptor");
        if (s == SW_OK) {
            s = cu_check_dnn(cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0),
                             "cudnnSetActivationDescriptor");
            if (s == SW_OK) {
                s = cu_check_dnn(cudnnActivationForward(t->st->dnn, act, &one, yd, y->data, &zero, yd, y->data),
                                 "cudnnActivationForward");
            }
            cudnnDestroyActivationDescriptor(act);
        }
    }
    if (yd) {
        cudnnDestroyTensorDescriptor(yd);
    }
    if (bd) {
        cudnnDestroyTensorDescriptor(bd);
    }
    return s;
}

sw_status cu_conv_backward_data(const cu_task *t, const sw_view *w, const sw_view *dy, sw_view *dx,
                                const sw_window *win) {
    if (sw_view_volume(dy) == 0) {
        return cu_zero(t, dx);
    }
    conv_call c;
    SW_TRY(setup(t, dx, w, dy, win, &c));   /* dx's view plays x's part: the window writes where x reads */
    /* dx is overwritten: parts no output reads (or, direct, outside the descriptor) are zero */
    int whole = c.g.direct && dx->shape[0] == c.g.nb && c.g.h.skip == 0 && c.g.h.used == dx->shape[2] &&
                c.g.w.skip == 0 && c.g.w.used == dx->shape[3];
    if (!whole) {
        SW_TRY(cu_zero(t, dx));
    }
    const int64_t per_y = (int64_t)c.yd[1] * c.yd[2] * c.yd[3];
    const float one = 1.0f, zero = 0.0f;
    for (int64_t n = c.g.n0; n < c.g.n0 + c.g.nb; n += c.chunk) {
        int64_t k = c.g.n0 + c.g.nb - n < c.chunk ? c.g.n0 + c.g.nb - n : c.chunk;
        float *dxp = c.g.direct ? c.g.xp + (n - c.g.n0) * c.g.strides[0] : c.pad;
        conv_chunk ch;
        sw_status s = chunk_begin(t, &c, k, BWD_DATA, &ch);
        if (s == SW_OK) {
            s = cu_check_dnn(cudnnConvolutionBackwardData(t->st->dnn, &one, ch.d.w, c.w, ch.d.y, dy->data + (n - c.g.n0) * per_y,
                                                          ch.d.cv, (cudnnConvolutionBwdDataAlgo_t)ch.algo, ch.ws, ch.bytes,
                                                          &zero, ch.d.x, dxp), "cudnnConvolutionBackwardData");
        }
        chunk_end(t, &ch);
        SW_TRY(s);
        if (!c.g.direct) {   /* the padded gradient's part inside dx's view */
            sw_view p;
            cu_window_padded(&c.g, n, k, c.pad, &p);
            SW_TRY(cu_copy_box(t, &p, dx, 0));
        }
    }
    return SW_OK;
}

sw_status cu_conv_backward_filter(const cu_task *t, const sw_view *x, const sw_view *dy, sw_view *dw,
                                  const sw_window *win) {
    if (sw_view_volume(dy) == 0) {
        return cu_zero(t, dw);
    }
    conv_call c;
    SW_TRY(setup(t, x, dw, dy, win, &c));
    float *dwp = (float *)c.w;   /* dw at dy's first channel (setup reads dw as the weight view) */
    const int64_t per_y = (int64_t)c.yd[1] * c.yd[2] * c.yd[3];
    const float one = 1.0f, zero = 0.0f;
    for (int64_t n = c.g.n0; n < c.g.n0 + c.g.nb; n += c.chunk) {
        int64_t k = c.g.n0 + c.g.nb - n < c.chunk ? c.g.n0 + c.g.nb - n : c.chunk;
        const float *xp;
        SW_TRY(chunk_x(t, &c, n, k, &xp));
        conv_chunk ch;
        sw_status s = chunk_begin(t, &c, k, BWD_FILTER, &ch);
        if (s == SW_OK) {   /* the first chunk overwrites, later ones add, in sample order */
            s = cu_check_dnn(cudnnConvolutionBackwardFilter(t->st->dnn, &one, ch.d.x, xp, ch.d.y,
                                                            dy->data + (n - c.g.n0) * per_y, ch.d.cv,
                                                            (cudnnConvolutionBwdFilterAlgo_t)ch.algo, ch.ws, ch.bytes,
                                                            n == c.g.n0 ? &zero : &one, ch.d.w, dwp),
                             "cudnnConvolutionBackwardFilter");
        }
        chunk_end(t, &ch);
        SW_TRY(s);
    }
    return SW_OK;
}
