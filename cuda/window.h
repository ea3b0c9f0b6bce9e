/* window.h -- a worker's convolution or pooling window as cuDNN runs it (window.c), shared by
 * conv.c and pool.c.  csrc/exec/gpu/window_geom.c decides per spatial dimension; here the views. */
#ifndef SHARDWISE_CUDA_WINDOW_H
#define SHARDWISE_CUDA_WINDOW_H

#include "cuda_backend.h"

typedef struct {
    int direct;                  /* cuDNN reads x's view in place (sw_gpu_window_direct) */
    sw_gpu_window_dim h, w;      /* per spatial dimension */
    int64_t n0, nb;              /* the output's samples (global) */
    int64_t c0, c;               /* the input channels the window reads (global) */
    const sw_view *x;
    /* direct: x at (n0, c0, first used row, first used column), dims (nb, c, used h, used w) */
    float *xp;
    int dims[4], strides[4];
} cu_window;

/* The window computing output samples [n0, n0 + nb), rows and columns from out_lo (2) for
 * out_n (2), reading channels [c0, c0 + c) of x.  SW_ERR_INTERNAL when x misses them. */
sw_status cu_window_of(const sw_view *x, int64_t n0, int64_t nb, int64_t c0, int64_t c, const int64_t *out_lo,
                       const int64_t *out_n, const sw_window *win, cu_window *g);
/* The padded input of samples [n, n + k): a view over the window's whole need (rows and
 * columns need_lo .. need_hi), its floats at buf. */
void cu_window_padded(const cu_window *g, int64_t n, int64_t k, float *buf, sw_view *p);
/* Fill the padded input of samples [n, n + k) (`fill` outside x: 0, or -inf for max pooling). */
sw_status cu_window_fill(const cu_task *t, const cu_window *g, int64_t n, int64_t k, float fill, float *buf);
/* Samples per padded chunk that fit in `bytes` (0: not even one). */
int64_t cu_window_chunk(const cu_window *g, size_t bytes);
/* Bytes of one padded sample. */
size_t cu_window_sample_bytes(const cu_window *g);
/* A cuDNN 4-D descriptor of dims with strides (NULL: packed). */
sw_status cu_tensor_desc(cudnnTensorDescriptor_t *d, const int *dims, const int *strides);
/* Every value fits cuDNN's int. */
sw_status cu_int_dims(const char *what, int n, const int64_t *v, int *out);

#endif /* SHARDWISE_CUDA_WINDOW_H */
